//! Events, as `kubectl describe` shows them: what the Job controller, the scheduler and the
//! kubelet did (`SuccessfulCreate`, `Scheduled`, `FailedScheduling`, `Pulling`, `Pulled`,
//! `Started`, `Unhealthy`, `BackOff`, `Completed`, ...). The kubelet's `Pulled` says plainly that
//! no image was pulled. The same thing said again about the same object counts on the first
//! Event (`count`, `lastTimestamp`) rather than making a new one. Recording one never fails the
//! action it reports: an event that cannot be written is logged and dropped.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use serde_json::{Value, json};

use super::resources::{self, Resource};
use super::{Kube, defaults, time};

/// Past this many remembered reports, those whose time has come are forgotten.
const REMEMBERED: usize = 4096;

/// When each Event that [`record_every`] counts at most every so many seconds may be counted
/// again (Unix seconds), as this process last read or wrote it: a pass that finds a Pod still not
/// fitting, or a probe still failing, before that time reads nothing. Another API sharing the
/// store only makes this one read again when the time comes, as it does without the memory.
#[derive(Default)]
pub(crate) struct Reported(Mutex<HashMap<String, i64>>);

impl Reported {
    fn not_due(&self, key: &str, now: i64) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get(key).is_some_and(|due| now < *due)
    }

    /// Remembers that the Event `key` is not due before `due`; one due now is not remembered.
    fn remember(&self, key: String, due: i64, now: i64) {
        if due <= now {
            return;
        }
        let mut reported = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if reported.len() >= REMEMBERED {
            reported.retain(|_, due| now < *due);
        }
        reported.insert(key, due);
    }
}

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
    let now_seconds = time::now_seconds();
    let remembered = format!("{cluster}/{namespace}/{name}");
    if seconds > 0 && kube.events.not_due(&remembered, now_seconds) {
        return;
    }
    match kube.store.get(cluster, &resources::EVENTS, namespace, &name).await {
        Ok(Some(mut event)) => {
            let last = time::seconds(&event["lastTimestamp"]).unwrap_or(0);
            if now_seconds < last + seconds {
                kube.events.remember(remembered, last + seconds, now_seconds);
                return;
            }
            event["count"] = json!(event["count"].as_i64().unwrap_or(1) + 1);
            event["lastTimestamp"] = json!(now);
            match kube.store.update(cluster, &resources::EVENTS, event).await {
                Ok(_) => kube.events.remember(remembered, now_seconds + seconds, now_seconds),
                Err(err) => {
                    tracing::warn!(%cluster, reason, error = %err, "simulated Kubernetes: counting an event again")
                }
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
    match kube.store.create(cluster, &resources::EVENTS, event).await {
        Ok(_) => kube.events.remember(remembered, now_seconds + seconds, now_seconds),
        Err(err) => tracing::warn!(%cluster, reason, error = %err, "simulated Kubernetes: recording an event"),
    }
}
