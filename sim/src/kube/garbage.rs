//! The garbage collector, as Kubernetes' (background cascading deletion,
//! <https://kubernetes.io/docs/concepts/architecture/garbage-collection/#owners-dependents>): an
//! object whose `ownerReferences` all name owners (by uid) that no longer exist is deleted,
//! whatever its kind: a ReplicaSet whose Deployment is gone, then its Pods; a Secret whose Job
//! or Deployment is gone. A Pod is deleted gracefully (the kubelet ends its processes), anything
//! else at once; what it owns in turn goes on a later pass. An object with one owner left stays.
//!
//! It looks for orphans on the reconcile loop's first pass, after any pass on which the store
//! removed something, and every 10 s (which catches an object created with an owner that never
//! existed, as the real collector does), across every cluster, busy or not: a Secret outlives
//! the last Job that drove its cluster's loop.

use super::resources::{self, Resource};
use super::status::ApiError;
use super::{Kube, objects, store};

/// How many passes of the reconcile loop (250 ms each) between two looks without a removal.
pub(crate) const EVERY_PASSES: u64 = 40;

/// Deletes every object whose owners are all gone.
pub(crate) async fn collect(kube: &Kube) -> Result<(), ApiError> {
    // Dependents first, then the uids that live: an owner created in between is then seen
    // alive, never its dependent taken for an orphan.
    let dependents = kube.store.dependents().await?;
    let mut cluster = None;
    let mut live = Default::default();
    for dependent in dependents {
        if cluster.as_deref() != Some(dependent.cluster.as_str()) {
            live = kube.store.live_uids(&dependent.cluster).await?;
            cluster = Some(dependent.cluster.clone());
        }
        if dependent.owners.iter().any(|uid| live.contains(uid)) {
            continue;
        }
        let Some(resource) = resource(&dependent.resource) else { continue };
        let Some(object) = kube.store.get(&dependent.cluster, resource, &dependent.namespace, &dependent.name).await?
        else {
            continue;
        };
        // Read again: its owners may have changed since (an orphaning delete strips them).
        let owners = store::owner_uids(&object);
        if owners.is_empty() || owners.iter().any(|uid| live.contains(uid)) {
            continue;
        }
        if resource.plural == resources::PODS.plural {
            if object["metadata"]["deletionTimestamp"].is_null() {
                objects::delete_pod(kube, &dependent.cluster, object, None).await?;
            }
        } else {
            kube.store.remove(&dependent.cluster, resource, &object).await?;
        }
    }
    Ok(())
}

fn resource(plural: &str) -> Option<&'static Resource> {
    resources::ALL.into_iter().find(|resource| resource.plural == plural)
}
