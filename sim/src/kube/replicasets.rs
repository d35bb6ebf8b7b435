//! The ReplicaSet controller, one pass over one ReplicaSet:
//!
//! 1. A ReplicaSet being deleted in the foreground deletes its Pods and goes once they are gone.
//! 2. Otherwise it keeps `spec.replicas` active Pods (not ended, not being deleted): it creates
//!    the missing ones from its template as `{replicaset}-{5 random chars}`, labelled from the
//!    template and owned by it, and deletes the surplus, the least useful first, as Kubernetes
//!    ranks them: unscheduled before scheduled, pending before running, not ready before ready,
//!    more restarts before fewer, newest before oldest.
//! 3. Its status counts its Pods: `replicas`, `fullyLabeledReplicas`, `readyReplicas`,
//!    `availableReplicas` (ready for at least `minReadySeconds`), `observedGeneration`.
//!
//! Pods are matched to their ReplicaSet by owner reference only: orphans are not adopted.

use std::cmp::Reverse;

use serde_json::{Map, Value, json};

use super::events::{self, Note, Severity};
use super::resources::REPLICASETS;
use super::status::ApiError;
use super::{Kube, objects, templates, time};

/// Whether the Pod is being deleted.
pub(crate) fn deleting(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_null()
}

/// Whether the Pod counts for its ReplicaSet: not ended and not being deleted.
pub(crate) fn active(pod: &Value) -> bool {
    !deleting(pod) && !matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

/// Since when (seconds since the epoch) the Pod is Ready, if it is.
fn ready_since(pod: &Value) -> Option<i64> {
    let conditions = pod["status"]["conditions"].as_array()?;
    let ready = conditions.iter().find(|c| c["type"] == "Ready" && c["status"] == "True")?;
    Some(time::seconds(&ready["lastTransitionTime"]).unwrap_or(0))
}

/// Whether the Pod is active and Ready.
pub(crate) fn ready(pod: &Value) -> bool {
    active(pod) && ready_since(pod).is_some()
}

/// Whether the Pod is active and has been Ready for at least `min_ready` seconds.
pub(crate) fn available(pod: &Value, min_ready: i64) -> bool {
    active(pod) && ready_since(pod).is_some_and(|since| min_ready <= 0 || time::now_seconds() >= since + min_ready)
}

/// What a ReplicaSet's Pods count.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    /// Active Pods.
    pub(crate) pods: i64,
    /// Of them, Ready.
    pub(crate) ready: i64,
    /// Of them, available.
    pub(crate) available: i64,
    /// Pods whose processes may still run: active ones and those being deleted.
    pub(crate) running: i64,
}

/// Counts `pods` with the ReplicaSet's `minReadySeconds`.
pub(crate) fn count(pods: &[&Value], min_ready: i64) -> Counts {
    Counts {
        pods: pods.iter().filter(|pod| active(pod)).count() as i64,
        ready: pods.iter().filter(|pod| ready(pod)).count() as i64,
        available: pods.iter().filter(|pod| available(pod, min_ready)).count() as i64,
        running: pods
            .iter()
            .filter(|pod| !matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
            .count() as i64,
    }
}

/// Reconciles one ReplicaSet with `owned`, the Pods it controls.
pub(crate) async fn sync(kube: &Kube, cluster: &str, replica_set: Value, owned: &[&Value]) -> Result<(), ApiError> {
    if deleting(&replica_set) {
        if owned.is_empty() {
            kube.store.remove(cluster, &REPLICASETS, &replica_set).await?;
        }
        for pod in owned.iter().filter(|pod| !deleting(pod)) {
            objects::delete_pod(kube, cluster, (*pod).clone(), None).await?;
        }
        return Ok(());
    }
    let wanted = replica_set["spec"]["replicas"].as_i64().unwrap_or(1);
    let min_ready = replica_set["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    let mut active: Vec<&Value> = owned.iter().copied().filter(|pod| active(pod)).collect();
    let mut notes = Vec::new();
    let missing = wanted - active.len() as i64;
    let mut created = Vec::new();
    for _ in 0..missing.max(0) {
        let pod = templates::create_pod(kube, cluster, &replica_set, &REPLICASETS).await?;
        notes.push(note(
            "SuccessfulCreate",
            format!("Created pod: {}", pod["metadata"]["name"].as_str().unwrap_or_default()),
        ));
        created.push(pod);
    }
    if missing < 0 {
        active.sort_by_key(|pod| {
            (
                !pod["spec"]["nodeName"].is_null(),
                pod["status"]["phase"] == "Running",
                ready(pod),
                Reverse(restarts(pod)),
                Reverse(pod["metadata"]["creationTimestamp"].as_str().unwrap_or_default().to_owned()),
            )
        });
        let surplus: Vec<&Value> = active.drain(..(-missing) as usize).collect();
        for pod in surplus {
            objects::delete_pod(kube, cluster, pod.clone(), None).await?;
            notes.push(note(
                "SuccessfulDelete",
                format!("Deleted pod: {}", pod["metadata"]["name"].as_str().unwrap_or_default()),
            ));
        }
    }
    let counts = count(&active, min_ready);
    let mut status = Map::new();
    status.insert("replicas".into(), json!(counts.pods + created.len() as i64));
    for (field, value) in [
        ("fullyLabeledReplicas", counts.pods + created.len() as i64),
        ("readyReplicas", counts.ready),
        ("availableReplicas", counts.available),
    ] {
        if value > 0 {
            status.insert(field.into(), json!(value));
        }
    }
    status.insert("observedGeneration".into(), replica_set["metadata"]["generation"].clone());
    let status = Value::Object(status);
    if status != replica_set["status"] || !notes.is_empty() {
        let mut next = replica_set.clone();
        next["status"] = status;
        if let Some(written) = kube.store.update(cluster, &REPLICASETS, next).await? {
            for note in notes {
                events::record(kube, cluster, &REPLICASETS, &written, note).await;
            }
        }
    }
    Ok(())
}

fn note(reason: &'static str, message: String) -> Note<'static> {
    Note { severity: Severity::Normal, component: "replicaset-controller", reason, message }
}

fn restarts(pod: &Value) -> i64 {
    pod["status"]["containerStatuses"]
        .as_array()
        .map(|statuses| statuses.iter().map(|s| s["restartCount"].as_i64().unwrap_or(0)).sum())
        .unwrap_or(0)
}
