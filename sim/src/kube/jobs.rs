//! The Job controller, one pass over one Job:
//!
//! 1. A Job being deleted in the foreground waits for its Pods to go, then goes.
//! 2. A Job that has more failed Pods than its `backoffLimit` fails (`FailureTarget`, then
//!    `Failed`, reason `BackoffLimitExceeded`); one with `completions` succeeded Pods completes
//!    (`SuccessCriteriaMet`, then `Complete`, reason `CompletionsReached`, and a
//!    `completionTime`). Either way its remaining Pods are deleted.
//! 3. Otherwise it keeps `min(parallelism, completions - succeeded)` Pods active, creating each
//!    as `{job}-{5 random chars}` from its template, labelled `batch.kubernetes.io/job-name`,
//!    `job-name`, `batch.kubernetes.io/controller-uid`, `controller-uid`, owned by the Job.
//! 4. Its status counts its Pods (`active`, `ready`, `succeeded`, `failed`, `terminating`) as
//!    Kubernetes 1.34 reports them, with `startTime` from its first pass.
//!
//! `restartPolicy: OnFailure` is run as `Never` (a failed Pod is replaced, up to the backoff
//! limit); there is no backoff delay between attempts.

use serde_json::{Map, Value, json};

use super::events::{self, Note, Severity};
use super::resources::JOBS;
use super::status::ApiError;
use super::{Kube, objects, templates, time};

/// Reconciles one Job with `owned`, the Pods it controls.
pub(crate) async fn sync(kube: &Kube, cluster: &str, job: Value, owned: &[&Value]) -> Result<(), ApiError> {
    let phase = |pod: &&Value| pod["status"]["phase"].as_str().unwrap_or("Pending").to_owned();
    let deleting = |pod: &&Value| !pod["metadata"]["deletionTimestamp"].is_null();
    let terminal = |pod: &&Value| matches!(phase(pod).as_str(), "Succeeded" | "Failed");

    if !job["metadata"]["deletionTimestamp"].is_null() {
        if owned.is_empty() {
            kube.store.remove(cluster, &JOBS, &job).await?;
        }
        for pod in owned.iter().filter(|pod| !deleting(pod)) {
            objects::delete_pod(kube, cluster, (*pod).clone(), None).await?;
        }
        return Ok(());
    }

    let spec = &job["spec"];
    let completions = spec["completions"].as_i64().unwrap_or(1);
    let parallelism = spec["parallelism"].as_i64().unwrap_or(1);
    let backoff_limit = spec["backoffLimit"].as_i64().unwrap_or(6);
    let count = |want: &str| owned.iter().filter(|pod| phase(pod) == want).count() as i64;
    let succeeded = count("Succeeded");
    let failed = count("Failed");
    let active = owned.iter().filter(|pod| !terminal(pod) && !deleting(pod)).count() as i64;
    let terminating = owned.iter().filter(|pod| !terminal(pod) && deleting(pod)).count() as i64;
    let ready = owned
        .iter()
        .filter(|pod| {
            !deleting(pod)
                && pod["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        })
        .count() as i64;

    let status = &job["status"];
    let finished = status["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True"));
    let suspended = spec["suspend"].as_bool().unwrap_or(false);
    let mut next = status.as_object().cloned().unwrap_or_default();
    let mut created = Vec::new();
    let mut outcome = None;
    if !finished {
        if !suspended && next.get("startTime").is_none_or(Value::is_null) {
            next.insert("startTime".into(), json!(time::now()));
        }
        if failed > backoff_limit {
            outcome = Some((
                "Failed",
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            ));
        } else if succeeded >= completions {
            outcome = Some((
                "Complete",
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            ));
        } else if !suspended {
            let wanted = parallelism.min(completions - succeeded) - active - terminating;
            for _ in 0..wanted.max(0) {
                created.push(templates::create_pod(kube, cluster, &job, &JOBS).await?);
            }
        }
    }
    if let Some((condition, target, reason, message)) = outcome {
        let now = time::now();
        let condition_of = |kind: &str| {
            json!({
                "type": kind, "status": "True", "reason": reason, "message": message,
                "lastProbeTime": now, "lastTransitionTime": now,
            })
        };
        next.insert("conditions".into(), json!([condition_of(target), condition_of(condition)]));
        if condition == "Complete" {
            next.insert("completionTime".into(), json!(now));
        }
        for pod in owned.iter().filter(|pod| !terminal(pod) && !deleting(pod)) {
            objects::delete_pod(kube, cluster, (*pod).clone(), None).await?;
        }
    }
    let active = if outcome.is_some() { 0 } else { active + created.len() as i64 };
    set_count(&mut next, "active", active);
    set_count(&mut next, "succeeded", succeeded);
    set_count(&mut next, "failed", failed);
    next.insert("ready".into(), json!(if outcome.is_some() { 0 } else { ready }));
    next.insert("terminating".into(), json!(terminating));
    next.insert("uncountedTerminatedPods".into(), json!({}));
    let next = Value::Object(next);
    if next != *status {
        let mut updated = job.clone();
        updated["status"] = next;
        if let Some(updated) = kube.store.update(cluster, &JOBS, updated).await? {
            for pod in &created {
                let message = format!("Created pod: {}", pod["metadata"]["name"].as_str().unwrap_or_default());
                let note = Note {
                    severity: Severity::Normal,
                    component: "job-controller",
                    reason: "SuccessfulCreate",
                    message,
                };
                events::record(kube, cluster, &JOBS, &updated, note).await;
            }
            if let Some((condition, _, reason, message)) = outcome {
                let (severity, reason, message) = if condition == "Complete" {
                    (Severity::Normal, "Completed", "Job completed")
                } else {
                    (Severity::Warning, reason, message)
                };
                let note = Note { severity, component: "job-controller", reason, message: message.to_owned() };
                events::record(kube, cluster, &JOBS, &updated, note).await;
            }
        }
    }
    Ok(())
}

/// Counts are omitted when zero, as the apiserver omits them.
fn set_count(status: &mut Map<String, Value>, field: &str, count: i64) {
    if count > 0 {
        status.insert(field.into(), json!(count));
    } else {
        status.remove(field);
    }
}
