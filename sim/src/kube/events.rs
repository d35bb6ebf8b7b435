//! Events, as `kubectl describe` shows them: what the Job controller, the scheduler and the
//! kubelet did (`SuccessfulCreate`, `Scheduled`, `FailedScheduling`, `Pulling`, `Pulled`,
//! `Started`, `Unhealthy`, `BackOff`, `Completed`, ...). The kubelet's `Pulled` says plainly that
//! no image was pulled. The same thing said again about the same object counts on the first
//! Event (`count`, `lastTimestamp`) rather than making a new one. Recording one never fails the
//! action it reports: an event that cannot be written is logged and dropped.

use serde_json::{Value, json};

use super::resources::{self, Resource};
use super::{Kube, defaults, time};

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Severity {
    /// It went as expected.
    Normal,
    /// Something needs a look.
    Warning,
}

/// What happened, and who says so.
#[derive(Debug)]
pub(crate) struct Note<'a> {
    /// Normal or Warning.
    pub(crate) severity: Severity,
    /// `job-controller`, `default-scheduler`, `kubelet`.
    pub(crate) component: &'a str,
    /// `SuccessfulCreate`.
    pub(crate) reason: &'a str,
    /// `Created pod: x-abcde`.
    pub(crate) message: String,
}

/// Records the note about `object`: a new Event, or, when the same source already said the same
/// thing about the same object, that Event's `count` and `lastTimestamp` (as the client-side
/// event correlator of every Kubernetes component aggregates identical events: `x5 over 2m` in
/// `kubectl describe`).
pub(crate) async fn record(kube: &Kube, cluster: &str, resource: &Resource, object: &Value, note: Note<'_>) {
    record_every(kube, cluster, resource, object, note, 0).await;
}

/// Like [`record`], but an identical Event seen less than `seconds` ago is left as it is: for what
/// a control loop finds again on every pass (a Pod that does not fit, a probe that fails), which
/// the real components report once per try (the probe's period, the scheduler's back-off).
pub(crate) async fn record_every(
    kube: &Kube,
    cluster: &str,
    resource: &Resource,
    object: &Value,
    note: Note<'_>,
    seconds: i64,
) {
    let Note { severity, component, reason, message } = note;
    let metadata = &object["metadata"];
    let namespace = metadata["namespace"].as_str().unwrap_or("default");
    let object_name = metadata["name"].as_str().unwrap_or_default();
    let key = format!("{}/{component}/{severity:?}/{reason}/{message}", metadata["uid"].as_str().unwrap_or_default());
    let id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, key.as_bytes());
    let name = format!("{object_name}.{}", &id.simple().to_string()[..16]);
    let now = time::now();
    match kube.store.get(cluster, &resources::EVENTS, namespace, &name).await {
        Ok(Some(mut event)) => {
            let last = time::seconds(&event["lastTimestamp"]).unwrap_or(0);
            if time::now_seconds() < last + seconds {
                return;
            }
            event["count"] = json!(event["count"].as_i64().unwrap_or(1) + 1);
            event["lastTimestamp"] = json!(now);
            if let Err(err) = kube.store.update(cluster, &resources::EVENTS, event).await {
                tracing::warn!(%cluster, reason, error = %err, "simulated Kubernetes: counting an event again");
            }
            return;
        }
        Ok(None) => {}
        Err(err) => {
            tracing::warn!(%cluster, reason, error = %err, "simulated Kubernetes: reading an event");
            return;
        }
    }
    let mut event = json!({
        "metadata": { "name": name },
        "involvedObject": {
            "kind": resource.kind, "apiVersion": resource.api_version(), "namespace": namespace,
            "name": metadata["name"], "uid": metadata["uid"], "resourceVersion": metadata["resourceVersion"],
        },
        "reason": reason, "message": message, "type": format!("{severity:?}"),
        "source": { "component": component }, "reportingComponent": component, "reportingInstance": "",
        "firstTimestamp": now, "lastTimestamp": now, "eventTime": null, "count": 1,
    });
    defaults::on_create(&resources::EVENTS, namespace, &mut event);
    if let Err(err) = kube.store.create(cluster, &resources::EVENTS, event).await {
        tracing::warn!(%cluster, reason, error = %err, "simulated Kubernetes: recording an event");
    }
}
