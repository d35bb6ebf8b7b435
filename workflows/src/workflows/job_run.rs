//! `job.run`: runs one attempt of a job on its cluster, as a `batch/v1` Job.
//!
//! ```text
//! apply -> wait_for_pod -> wait_for_end -> record_outcome
//! ```
//!
//! The `submit_job` operation (and `resubmit_deployment`, for attempt 2 and later) writes the
//! deployment's record and this run in one transaction that holds the cluster's row. `apply`
//! server-side applies the namespace and the Job (see [`crate::kubernetes::job`]); the waits are durable
//! polls of the Job and its Pod, so nothing is held in memory across a restart. The record moves
//! `queued -> starting -> running -> completed | errored`. A cluster that refuses the Job (400,
//! 422) makes the job `invalid`. `anycloud terminate` cancels the run: the undo of `apply`, which
//! runs last in every unwind, deletes the deployment's Jobs, Pods and Secrets, waits until Kubernetes lists
//! none, and ends the record `terminated` (cancelled) or `failed` (anything else went wrong).
//! docs/workflows/job-run.md describes each step.

use std::time::Duration;

use anycloud_engine::{Check, Effect, Step, StepCtx, StepError, StepKey, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::db::deployments::{self, Deployment, Status};
use crate::kubernetes;
use crate::kubernetes::job::{Outcome, Progress};
use crate::kubernetes::pod_wait::{PodWait, Verdict};
use crate::workflows::deps::Deps;
use crate::{now_ms, workflows::retry};

/// The workflow, with what its steps need.
pub struct RunJob {
    /// Database, sealer, clouds.
    pub deps: Deps,
}

/// Which attempt of which job to run (its spec is in its record).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobInput {
    /// The deployment's id.
    pub deployment_id: String,
    /// Its name (for people reading `inspect`).
    pub name: String,
    /// The attempt this run is for.
    pub attempt: i64,
}

/// The Job as applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Applied {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub job: String,
}

/// The Job is applied.
const APPLY: StepKey<Applied> = StepKey::new("apply");
/// The Pod whose container started.
const WAIT_FOR_POD: StepKey<String> = StepKey::new("wait_for_pod");
/// How the container ended.
const WAIT_FOR_END: StepKey<Outcome> = StepKey::new("wait_for_end");
/// The outcome is recorded.
const RECORD_OUTCOME: StepKey<()> = StepKey::new("record_outcome");

/// How long a Job may take to get a running container (scheduling, an image pull).
const START_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How long a job may run: past it, the run gives up and the job ends `failed`.
const RUN_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);

impl Workflow for RunJob {
    const KIND: &'static str = "job.run";
    const VERSION: u32 = 1;
    type Input = JobInput;
    type Output = Outcome;

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(
                Step::action(APPLY, apply)
                    .retry(retry::cloud_calls())
                    .attempt_timeout(retry::QUICK_ATTEMPT)
                    .undo(apply_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::poll(WAIT_FOR_POD, wait_for_pod)
                    .every(Duration::from_secs(1))
                    .slowing_to(Duration::from_secs(10))
                    .timeout(START_TIMEOUT)
                    .attempt_timeout(retry::QUICK_ATTEMPT),
            )
            .then(
                Step::poll(WAIT_FOR_END, wait_for_end)
                    .every(Duration::from_secs(2))
                    .slowing_to(Duration::from_secs(30))
                    .timeout(RUN_TIMEOUT)
                    .attempt_timeout(retry::QUICK_ATTEMPT),
            )
            .then(Step::action(RECORD_OUTCOME, record_outcome))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<Outcome, StepError> {
        ctx.output(WAIT_FOR_END)
    }
}

/// The deployment's record and a client for its cluster's Kubernetes API.
async fn deployment_and_client(ctx: &StepCtx<RunJob>) -> Result<(Deployment, kube::Client), StepError> {
    let input = ctx.input();
    let (deployment, client) = record_and_client(ctx).await?;
    if deployment.attempt != input.attempt {
        return Err(StepError::terminal_msg(format!(
            "deployment `{}` is at attempt {}, not {}: this run is out of date",
            deployment.name, deployment.attempt, input.attempt
        )));
    }
    Ok((deployment, client))
}

/// The deployment's record, whatever its attempt, and a client for its cluster.
async fn record_and_client(ctx: &StepCtx<RunJob>) -> Result<(Deployment, kube::Client), StepError> {
    let input = ctx.input();
    let deployment = deployments::get(&ctx.workflow().deps.db, &input.deployment_id)
        .await?
        .ok_or_else(|| StepError::terminal_msg(format!("deployment {} has no record", input.deployment_id)))?;
    let cluster = ctx.workflow().deps.cluster(&deployment.cluster_id).await?;
    let client = ctx.workflow().deps.kube_client(&cluster).await?;
    Ok((deployment, client))
}

/// A Kubernetes call that failed: the cluster may answer again (retryable).
fn kube_failed(what: &str, err: &crate::kubernetes::client::KubeError) -> StepError {
    StepError::retryable_msg(format!("{what}: {}", anycloud_engine::error_chain(err)))
}

/// Deletes the Jobs of earlier attempts (their logs go with them), then applies the namespace
/// and this attempt's Job, and marks the job `starting`. A Job the cluster refuses makes the job
/// `invalid`; any other terminal failure `failed` (this step's own failure has no undo to do it).
async fn apply(ctx: StepCtx<RunJob>) -> Result<Applied, StepError> {
    let result: Result<Applied, StepError> = async {
        let (deployment, client) = deployment_and_client(&ctx).await?;
        kubernetes::job::delete(&client, &deployment, Some(deployment.attempt))
            .await
            .map_err(|err| kube_failed("deleting the Jobs of earlier attempts", &err))?;
        let secrets = ctx.workflow().deps.open_secrets(&deployment.name, &deployment.spec.secrets).await?;
        let applied = async {
            kubernetes::job::apply_secrets(&client, &deployment, &secrets).await?;
            if !secrets.is_empty() {
                ctx.workflow().deps.in_secret_apply().await;
            }
            kubernetes::job::apply_job(&client, &deployment, &secrets).await
        };
        if let Err(err) = applied.await {
            if let Some(message) = kubernetes::job::is_refusal(&err) {
                let reason = format!("the cluster refused the Job: {message}");
                deployments::end(
                    &ctx.workflow().deps.db,
                    &deployment.id,
                    deployment.attempt,
                    Status::Invalid,
                    None,
                    Some(&reason),
                    now_ms(),
                )
                .await?;
                return Err(StepError::terminal_msg(reason));
            }
            return Err(kube_failed(&format!("applying Job {}", deployment.job_name()), &err));
        }
        let waiting = "applied; waiting for its Pod to start";
        deployments::set_status(
            &ctx.workflow().deps.db,
            &deployment.id,
            deployment.attempt,
            Status::Starting,
            Some(waiting),
            now_ms(),
        )
        .await?;
        Ok(Applied { namespace: deployment.namespace.clone(), job: deployment.job_name() })
    }
    .await;
    if let Err(err) = &result
        && err.is_terminal()
    {
        let input = ctx.input();
        let reason = format!("Anycloud could not run it: {err}");
        deployments::end(
            &ctx.workflow().deps.db,
            &input.deployment_id,
            input.attempt,
            Status::Failed,
            None,
            Some(&reason),
            now_ms(),
        )
        .await?;
    }
    result
}

/// Deletes every Job and Pod of the deployment's attempts up to this run's and waits until
/// Kubernetes lists none; then ends the job `terminated` (cancelled) or `failed` (with the
/// cause), unless it has ended already. It runs last in every unwind.
async fn apply_undo(ctx: StepCtx<RunJob>, _applied: Effect<Applied>) -> Result<(), StepError> {
    // A job `wait_for_pod` ended may be resubmitted while this undo runs: the record is then at
    // the next attempt, whose run waits for this one (the same resource key), so it has no
    // object yet. This undo deletes this attempt's objects and earlier ones', never a later one's.
    let attempt = ctx.input().attempt;
    let (deployment, client) = record_and_client(&ctx).await?;
    let left = kubernetes::job::delete(&client, &deployment, Some(attempt + 1))
        .await
        .map_err(|err| kube_failed("deleting the job's Kubernetes objects", &err))?;
    if left > 0 {
        return Err(StepError::retryable_msg(format!(
            "asked Kubernetes to delete {left} Job(s), Pod(s) and Secret(s) of `{}`; waiting until it lists none",
            deployment.name
        )));
    }
    let (status, reason) = ended_reason(ctx.cancelled(), ctx.unwind_reason(), ctx.run_id());
    deployments::end(&ctx.workflow().deps.db, &deployment.id, attempt, status, None, Some(&reason), now_ms()).await?;
    Ok(())
}

/// How an unwound job ends, and what it says.
fn ended_reason(cancelled: bool, cause: Option<&str>, run: uuid::Uuid) -> (Status, String) {
    if cancelled {
        return (Status::Terminated, "terminated; its Job and Pods were deleted".to_owned());
    }
    let cause = cause.map(|cause| format!(" ({cause})")).unwrap_or_default();
    (
        Status::Failed,
        format!(
            "Anycloud could not run it{cause}; its Job and Pods were deleted; `anycloud workflow inspect {run}` \
             shows every step"
        ),
    )
}

/// Ready once the container has started (or already ended); marks the job `running`.
async fn wait_for_pod(ctx: StepCtx<RunJob>) -> Result<Check<String>, StepError> {
    let (deployment, client) = deployment_and_client(&ctx).await?;
    let progress = match kubernetes::job::progress(&client, &deployment).await {
        Ok(progress) => progress,
        Err(err) => return Ok(Check::NotYet(format!("asking Kubernetes: {}", anycloud_engine::error_chain(&err)))),
    };
    match progress {
        Progress::Starting(wait) => waiting(&ctx, &deployment, wait).await,
        Progress::Running { pod, node } => {
            let reason = format!("Pod {pod} runs on node {}", node.as_deref().unwrap_or("?"));
            let db = &ctx.workflow().deps.db;
            deployments::set_status(db, &deployment.id, deployment.attempt, Status::Running, Some(&reason), now_ms())
                .await?;
            Ok(Check::Ready(pod))
        }
        Progress::Ended(_) => Ok(Check::Ready(deployment.job_name())),
        Progress::Gone => Err(gone(&deployment)),
    }
}

fn gone(deployment: &Deployment) -> StepError {
    StepError::terminal_msg(format!(
        "Job {}/{} was deleted outside Anycloud",
        deployment.namespace,
        deployment.job_name()
    ))
}

/// Ready once the Job has completed or failed, with the container's exit code.
async fn wait_for_end(ctx: StepCtx<RunJob>) -> Result<Check<Outcome>, StepError> {
    let (deployment, client) = deployment_and_client(&ctx).await?;
    let progress = match kubernetes::job::progress(&client, &deployment).await {
        Ok(progress) => progress,
        Err(err) => return Ok(Check::NotYet(format!("asking Kubernetes: {}", anycloud_engine::error_chain(&err)))),
    };
    match progress {
        Progress::Ended(outcome) => Ok(Check::Ready(outcome)),
        Progress::Running { pod, .. } => Ok(Check::NotYet(format!("Pod {pod} runs"))),
        Progress::Starting(wait) => Ok(Check::NotYet(wait.why)),
        Progress::Gone => Err(gone(&deployment)),
    }
}

/// A job whose Pod waits: its record says why (written when that changes, so that `status` and
/// the `--wait` lines show what Kubernetes says while it waits). A Pod that cannot start (the
/// kubelet backed off pulling its image) ends the job `failed`, one that asks for more than
/// any node has `invalid`, with the reason, at once rather than after [`START_TIMEOUT`]; the
/// step then fails and the undo deletes the Job.
async fn waiting(ctx: &StepCtx<RunJob>, deployment: &Deployment, wait: PodWait) -> Result<Check<String>, StepError> {
    let db = &ctx.workflow().deps.db;
    let ended = match wait.verdict {
        Verdict::Waits => None,
        Verdict::CannotStart => Some(Status::Failed),
        Verdict::TooLarge => Some(Status::Invalid),
    };
    if let Some(status) = ended {
        deployments::end(db, &deployment.id, deployment.attempt, status, None, Some(&wait.why), now_ms()).await?;
        return Err(StepError::terminal_msg(wait.why));
    }
    if deployment.reason.as_deref() != Some(wait.why.as_str()) {
        deployments::set_status(db, &deployment.id, deployment.attempt, Status::Starting, Some(&wait.why), now_ms())
            .await?;
    }
    Ok(Check::NotYet(wait.why))
}

/// Ends the job `completed` (exit 0) or `errored`, with its exit code and reason.
async fn record_outcome(ctx: StepCtx<RunJob>) -> Result<(), StepError> {
    let input = ctx.input();
    let outcome = ctx.output(WAIT_FOR_END)?;
    let status = if outcome.succeeded { Status::Completed } else { Status::Errored };
    let reason = match outcome.exit_code {
        Some(code) => format!("{} (exit code {code})", outcome.reason),
        None => outcome.reason.clone(),
    };
    let db = &ctx.workflow().deps.db;
    if let Some(started_at) = outcome.started_at {
        // A job that ended between two checks was never seen running: its container says when it started.
        deployments::set_started(db, &input.deployment_id, input.attempt, started_at).await?;
    }
    deployments::end(db, &input.deployment_id, input.attempt, status, outcome.exit_code, Some(&reason), now_ms())
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unwound_job_says_how_it_ended() {
        let run = uuid::Uuid::nil();
        assert_eq!(ended_reason(true, Some("cancelled by an operator"), run).0, Status::Terminated);
        let (status, reason) = ended_reason(false, Some("step `wait_for_pod` timed out"), run);
        assert_eq!(status, Status::Failed);
        assert!(reason.starts_with("Anycloud could not run it (step `wait_for_pod` timed out)"), "{reason}");
    }

    #[test]
    fn every_step_name_is_its_key() {
        let documented = include_str!("../../../docs/workflows/job-run.md");
        for key in [APPLY.name(), WAIT_FOR_POD.name(), WAIT_FOR_END.name(), RECORD_OUTCOME.name()] {
            assert!(documented.contains(&format!("`{key}`")), "docs/workflows/job-run.md does not describe `{key}`");
        }
    }
}
