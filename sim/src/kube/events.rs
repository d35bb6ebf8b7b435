//! Events, as `kubectl describe` shows them: what the Job controller, the scheduler and the
//! kubelet did (`SuccessfulCreate`, `Scheduled`, `Pulled`, `Started`, `Completed`, ...). The
//! kubelet's `Pulled` says plainly that no image was pulled. Recording one never fails the
//! action it reports: an event that cannot be written is logged and dropped.

use serde_json::{Value, json};

use super::resources::{self, Resource};
use super::{Kube, defaults, objects, time};

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

/// Records the note about `object`.
pub(crate) async fn record(kube: &Kube, cluster: &str, resource: &Resource, object: &Value, note: Note<'_>) {
    let Note { severity, component, reason, message } = note;
    let metadata = &object["metadata"];
    let namespace = metadata["namespace"].as_str().unwrap_or("default");
    let now = time::now();
    let mut event = json!({
        "metadata": { "name": format!("{}.{}", metadata["name"].as_str().unwrap_or_default(), objects::random_suffix()) },
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
