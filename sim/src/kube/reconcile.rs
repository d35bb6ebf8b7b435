//! The control loop: every 250 ms, for every cluster with objects it still drives (a Job not
//! finished, a Pod not ended, anything being deleted: see [`super::store::settled`]), in this
//! order:
//!
//! 1. namespaces being deleted lose their objects (Pods through the kubelet), then go;
//! 2. the Job controller ([`super::jobs`]) passes over every Job;
//! 3. the scheduler ([`super::scheduler`]) binds new Pods to nodes;
//! 4. the kubelet ([`super::kubelet`]) passes over every Pod: it starts, follows and ends their
//!    processes.
//!
//! State advances without anyone asking, and after an API restart the first pass picks up every
//! Pod whose process still runs or exited meanwhile (their pids and exit files are on disk and
//! in SQL). A cluster whose control plane VM is terminated loses its Jobs, and its Pods'
//! processes are killed at once, as they would die with their VMs. The loop holds the routes' state weakly: it stops when the routes are dropped.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;

use super::resources::{self, ALL, JOBS, NAMESPACES, PODS};
use super::status::ApiError;
use super::{Kube, jobs, kubelet, objects, scheduler};

/// How often the loop passes.
const PERIOD: Duration = Duration::from_millis(250);

/// How long a deleted object's tombstone stays for watches.
const TOMBSTONE_MS: i64 = 5 * 60 * 1000;

/// Starts the loop on the current tokio runtime.
pub(crate) fn start(kube: &Arc<Kube>) {
    let kube: Weak<Kube> = Arc::downgrade(kube);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(PERIOD);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for pass in 0u64.. {
            ticker.tick().await;
            let Some(kube) = kube.upgrade() else { return };
            if let Err(err) = run(&kube, pass).await {
                tracing::warn!(error = ?err, "simulated Kubernetes: a reconcile pass failed; the next one retries");
            }
        }
    });
}

/// One pass over every cluster.
async fn run(kube: &Kube, pass: u64) -> Result<(), ApiError> {
    for cluster in kube.store.busy_clusters().await? {
        if let Err(err) = cluster_pass(kube, &cluster).await {
            tracing::warn!(%cluster, error = ?err, "simulated Kubernetes: reconciling a cluster");
        }
    }
    if pass.is_multiple_of(240) {
        kube.store.purge_tombstones(anycloud_workflows::now_ms() - TOMBSTONE_MS).await?;
    }
    Ok(())
}

async fn cluster_pass(kube: &Kube, cluster: &str) -> Result<(), ApiError> {
    if control_plane_gone(kube, cluster).await {
        return wind_down(kube, cluster).await;
    }
    for namespace in kube.store.list(cluster, &NAMESPACES, None).await? {
        if !namespace["metadata"]["deletionTimestamp"].is_null() {
            empty_namespace(kube, cluster, namespace).await?;
        }
    }
    // Finished Jobs and ended Pods are left alone: a pass reads only what may still change.
    let owned = kube.store.owned_by_unsettled(cluster, &PODS, &JOBS).await?;
    let mut by_owner: HashMap<&str, Vec<&Value>> = HashMap::new();
    for pod in &owned {
        let owner = pod["metadata"]["ownerReferences"]
            .as_array()
            .and_then(|owners| owners.iter().find(|owner| owner["controller"] == true))
            .and_then(|owner| owner["uid"].as_str());
        by_owner.entry(owner.unwrap_or_default()).or_default().push(pod);
    }
    for job in kube.store.unsettled(cluster, &JOBS).await? {
        let pods = by_owner.get(job["metadata"]["uid"].as_str().unwrap_or_default()).cloned().unwrap_or_default();
        jobs::sync(kube, cluster, job, &pods).await?;
    }
    scheduler::schedule(kube, cluster, &kube.store.unsettled(cluster, &PODS).await?).await?;
    for pod in kube.store.unsettled(cluster, &PODS).await? {
        kubelet::sync(kube, cluster, pod).await?;
    }
    Ok(())
}

/// Whether the cluster's control plane VM is terminated (or no longer known): its workloads die
/// with its VMs.
async fn control_plane_gone(kube: &Kube, cluster: &str) -> bool {
    match kube.machines.machine(cluster).await {
        Ok(None) => true,
        Ok(Some(cp)) => matches!(cp.state.as_str(), "terminated" | "shutting-down"),
        // Unknown is not gone: the next pass asks again.
        Err(_) => false,
    }
}

/// A cluster whose VMs are gone: its Jobs go, and its Pods' processes are killed at once.
async fn wind_down(kube: &Kube, cluster: &str) -> Result<(), ApiError> {
    for job in kube.store.list(cluster, &JOBS, None).await? {
        kube.store.remove(cluster, &JOBS, &job).await?;
    }
    for pod in kube.store.list(cluster, &PODS, None).await? {
        if pod["metadata"]["deletionTimestamp"].is_null() {
            objects::delete_pod(kube, cluster, pod, Some(0)).await?;
        }
    }
    for pod in kube.store.list(cluster, &PODS, None).await? {
        kubelet::sync(kube, cluster, pod).await?;
    }
    Ok(())
}

/// Deletes what a terminating namespace holds; removes it once it holds no Pod.
async fn empty_namespace(kube: &Kube, cluster: &str, namespace: serde_json::Value) -> Result<(), ApiError> {
    let name = namespace["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let mut pods_left = false;
    for resource in ALL.into_iter().filter(|r| r.namespaced) {
        for object in kube.store.list(cluster, resource, Some(&name)).await? {
            if resource.plural == resources::PODS.plural {
                pods_left = true;
                if object["metadata"]["deletionTimestamp"].is_null() {
                    objects::delete_pod(kube, cluster, object, None).await?;
                }
            } else {
                kube.store.remove(cluster, resource, &object).await?;
            }
        }
    }
    if !pods_left {
        kube.store.remove(cluster, &NAMESPACES, &namespace).await?;
    }
    Ok(())
}
