//! `service.deploy`: brings a service's first revision up on its cluster, as a ClusterIP
//! `Service` and an `apps/v1` `Deployment`.
//!
//! ```text
//! apply -> wait_available -> record_running
//! ```
//!
//! The `deploy_service` operation writes the deployment's record (`deploying`), its revision 1
//! and this run in one transaction that holds the cluster's row. `apply` server-side applies the
//! namespace, the Service and the Deployment (see [`crate::kubernetes::service`]) and records the
//! ClusterIP; `wait_available` is a durable poll until the Deployment's controller has observed
//! it and every desired replica is updated and available; `record_running` makes revision 1 the
//! one that serves. A container that exits or crash-loops, or the progress deadline passing,
//! fails the run: the undo of `apply`, which runs last in every unwind, deletes the Deployment
//! and the Service, waits until Kubernetes lists none of their Pods, and ends the record `failed`
//! with the cause (or `terminated`, when `anycloud terminate` cancelled the run).
//! docs/workflows/service-deploy.md describes each step.

use std::time::Duration;

use anycloud_engine::{Check, Effect, Step, StepCtx, StepError, StepKey, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::db::deployments::{self, Deployment, Status};
use crate::db::revisions::{self, Revision, RevisionResult};
use crate::kubernetes::service::Rollout;
use crate::workflows::deps::Deps;
use crate::{kubernetes, now_ms, workflows::retry};

/// The workflow, with what its steps need.
pub struct DeployService {
    /// Database, sealer, clouds.
    pub deps: Deps,
}

/// Which service to deploy (its spec is in its record and its revision 1).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceInput {
    /// The deployment's id.
    pub deployment_id: String,
    /// Its name (for people reading `inspect`).
    pub name: String,
}

/// What `apply` applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Applied {
    /// The revision whose template the Deployment has.
    pub revision: i64,
    /// The ClusterIP the Service was given.
    pub cluster_ip: Option<String>,
    /// When it was applied (ms since the epoch): the start of Anycloud's own deadline.
    pub applied_at: i64,
}

/// The Service and the Deployment are applied.
const APPLY: StepKey<Applied> = StepKey::new("apply");
/// Every desired replica is available.
const WAIT_AVAILABLE: StepKey<()> = StepKey::new("wait_available");
/// Revision 1 serves.
const RECORD_RUNNING: StepKey<()> = StepKey::new("record_running");

/// The longest any rollout is waited for, whatever its progress deadline.
pub const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

impl Workflow for DeployService {
    const KIND: &'static str = "service.deploy";
    const VERSION: u32 = 1;
    type Input = ServiceInput;
    type Output = ();

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
                Step::poll(WAIT_AVAILABLE, wait_available)
                    .every(Duration::from_secs(1))
                    .slowing_to(Duration::from_secs(5))
                    .timeout(ROLLOUT_TIMEOUT)
                    .attempt_timeout(retry::QUICK_ATTEMPT),
            )
            .then(Step::action(RECORD_RUNNING, record_running).retry(retry::cloud_calls()))
    }

    fn output(_ctx: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

/// The service's record and a client for its cluster's Kubernetes API.
pub(crate) async fn service_and_client(deps: &Deps, id: &str) -> Result<(Deployment, kube::Client), StepError> {
    let deployment = deployments::get(&deps.db, id)
        .await?
        .ok_or_else(|| StepError::terminal_msg(format!("deployment {id} has no record")))?;
    let cluster = deps.cluster(&deployment.cluster_id).await?;
    let client = deps.kube_client(&cluster).await?;
    Ok((deployment, client))
}

/// Revision `number` of the service; its absence is terminal (it is written with the run).
pub(crate) async fn revision(deps: &Deps, deployment: &Deployment, number: i64) -> Result<Revision, StepError> {
    revisions::get(&deps.db, &deployment.id, number)
        .await?
        .ok_or_else(|| StepError::terminal_msg(format!("service `{}` has no revision {number}", deployment.name)))
}

/// A Kubernetes call that failed: the cluster may answer again (retryable).
pub(crate) fn kube_failed(what: &str, err: &crate::kubernetes::client::KubeError) -> StepError {
    StepError::retryable_msg(format!("{what}: {}", anycloud_engine::error_chain(err)))
}

/// How long Anycloud itself waits for a revision, past which it fails it even if Kubernetes has
/// not said `ProgressDeadlineExceeded`: the progress deadline for each replica, and 10 s more.
pub(crate) fn own_deadline(revision: &Revision) -> i64 {
    revision.progress_deadline_s.saturating_mul(revision.replicas.max(1)).saturating_mul(1000) + 10_000
}

/// Applies the namespace, the Service and the Deployment with revision 1's template, and records
/// the ClusterIP. A cluster that refuses them (400, 422) fails the service: what was applied is
/// deleted again and the record ends `failed` (this step's own failure has no undo to do it).
async fn apply(ctx: StepCtx<DeployService>) -> Result<Applied, StepError> {
    let deps = &ctx.workflow().deps;
    let input = ctx.input();
    let (deployment, client) = service_and_client(deps, &input.deployment_id).await?;
    let first = revision(deps, &deployment, 1).await?;
    let secrets = deps.open_secrets(&deployment.name, &first.spec.secrets).await?;
    let applied = async {
        let cluster_ip = kubernetes::service::apply_service(&client, &deployment).await?;
        kubernetes::service::apply_deployment(&client, &deployment, &first, &secrets).await?;
        Ok::<_, crate::kubernetes::client::KubeError>(cluster_ip)
    }
    .await;
    let cluster_ip = match applied {
        Ok(cluster_ip) => cluster_ip,
        Err(err) => {
            let Some(message) = kubernetes::job::is_refusal(&err) else {
                return Err(kube_failed(
                    &format!("applying the Service and Deployment of `{}`", deployment.name),
                    &err,
                ));
            };
            let reason = format!("the cluster refused the service's objects: {message}");
            kubernetes::service::delete(&client, &deployment)
                .await
                .map_err(|err| kube_failed("deleting what the cluster accepted", &err))?;
            let now = now_ms();
            revisions::set_result(&deps.db, &deployment.id, 1, RevisionResult::Failed, Some(&reason), now).await?;
            deployments::end(&deps.db, &deployment.id, deployment.attempt, Status::Failed, None, Some(&reason), now)
                .await?;
            return Err(StepError::terminal_msg(reason));
        }
    };
    if let Some(ip) = &cluster_ip {
        deployments::set_cluster_ip(&deps.db, &deployment.id, ip).await?;
    }
    let waiting = format!("applied; waiting for {} replica(s) of revision 1 to be available", first.replicas);
    deployments::set_status(&deps.db, &deployment.id, deployment.attempt, Status::Deploying, Some(&waiting), now_ms())
        .await?;
    Ok(Applied { revision: 1, cluster_ip, applied_at: now_ms() })
}

/// Deletes the Deployment and the Service and waits until Kubernetes lists none of their
/// ReplicaSets and Pods; then ends the service `terminated` (cancelled) or `failed` (with the
/// cause). It runs last in every unwind.
async fn apply_undo(ctx: StepCtx<DeployService>, _applied: Effect<Applied>) -> Result<(), StepError> {
    let deps = &ctx.workflow().deps;
    let (deployment, client) = service_and_client(deps, &ctx.input().deployment_id).await?;
    let left = kubernetes::service::delete(&client, &deployment)
        .await
        .map_err(|err| kube_failed("deleting the service's Kubernetes objects", &err))?;
    if left > 0 {
        return Err(StepError::retryable_msg(format!(
            "asked Kubernetes to delete {left} object(s) of `{}`; waiting until it lists none",
            deployment.name
        )));
    }
    let now = now_ms();
    let (status, reason) = ended_reason(ctx.cancelled(), ctx.unwind_reason(), ctx.run_id());
    let result = if status == Status::Terminated { RevisionResult::Terminated } else { RevisionResult::Failed };
    revisions::set_result(&deps.db, &deployment.id, 1, result, Some(&reason), now).await?;
    deployments::end(&deps.db, &deployment.id, deployment.attempt, status, None, Some(&reason), now).await?;
    Ok(())
}

/// How an unwound deploy ends, and what it says.
fn ended_reason(cancelled: bool, cause: Option<&str>, run: uuid::Uuid) -> (Status, String) {
    if cancelled {
        return (Status::Terminated, "terminated; its Deployment, Service and Pods were deleted".to_owned());
    }
    let cause = cause.map(|cause| format!(": {cause}")).unwrap_or_default();
    (
        Status::Failed,
        format!(
            "it could not be deployed{cause}; its Deployment, Service and Pods were deleted; `anycloud workflow \
             inspect {run}` shows every step"
        ),
    )
}

/// Ready once every desired replica of revision 1 is available. A container that exits or
/// crash-loops, an image the kubelet backs off pulling, or the progress deadline passing, fails
/// the step (terminal: the run unwinds). While it waits, the record says why.
async fn wait_available(ctx: StepCtx<DeployService>) -> Result<Check<()>, StepError> {
    let deps = &ctx.workflow().deps;
    let (deployment, client) = service_and_client(deps, &ctx.input().deployment_id).await?;
    let first = revision(deps, &deployment, 1).await?;
    let applied = ctx.output(APPLY)?;
    let again = "deploy the service again (`anycloud service IMAGE --cluster NAME --id NEW-NAME -- COMMAND`)";
    let check = check_rollout(&client, &deployment, &first, applied.applied_at, again).await?;
    if let Check::NotYet(why) = &check {
        say_why(deps, &deployment, Status::Deploying, why).await?;
    }
    Ok(check)
}

/// Writes what a service waits for into its record's reason, when that changed (so `status`
/// and the `--wait` lines show it).
pub(crate) async fn say_why(deps: &Deps, deployment: &Deployment, status: Status, why: &str) -> Result<(), StepError> {
    if deployment.status == status && deployment.reason.as_deref() != Some(why) {
        deployments::set_status(&deps.db, &deployment.id, deployment.attempt, status, Some(why), now_ms()).await?;
    }
    Ok(())
}

/// Where the rollout of `revision`, applied at `applied_at`, stands, as a poll's check; `again`
/// is what to run once a cause the user must fix is fixed.
pub(crate) async fn check_rollout(
    client: &kube::Client,
    deployment: &Deployment,
    revision: &Revision,
    applied_at: i64,
    again: &str,
) -> Result<Check<()>, StepError> {
    let rollout = match kubernetes::service::rollout(client, deployment, revision, again).await {
        Ok(rollout) => rollout,
        Err(err) => return Ok(Check::NotYet(format!("asking Kubernetes: {}", anycloud_engine::error_chain(&err)))),
    };
    match rollout {
        Rollout::Available => Ok(Check::Ready(())),
        Rollout::Failed(cause) => Err(StepError::terminal_msg(cause)),
        Rollout::Gone => Err(StepError::terminal_msg(format!(
            "Deployment {}/{} was deleted outside Anycloud",
            deployment.namespace, deployment.name
        ))),
        Rollout::Progressing(why) if now_ms() - applied_at > own_deadline(revision) => {
            Err(StepError::terminal_msg(format!(
                "revision {} did not become available within its progress deadline of {}s ({why})",
                revision.number, revision.progress_deadline_s
            )))
        }
        Rollout::Progressing(why) => Ok(Check::NotYet(why)),
    }
}

/// Makes revision 1 the one that serves: the service is `running`.
async fn record_running(ctx: StepCtx<DeployService>) -> Result<(), StepError> {
    let deps = &ctx.workflow().deps;
    let input = ctx.input();
    let deployment = deployments::get(&deps.db, &input.deployment_id)
        .await?
        .ok_or_else(|| StepError::terminal_msg(format!("deployment {} has no record", input.deployment_id)))?;
    let first = revision(deps, &deployment, 1).await?;
    let reason = format!("revision 1 serves: {} replica(s) available", first.replicas);
    let now = now_ms();
    if deployments::serve_revision(&deps.db, &deployment.id, &first, &reason, now).await? {
        revisions::set_result(&deps.db, &deployment.id, 1, RevisionResult::Running, None, now).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unwound_deploy_says_how_it_ended() {
        let run = uuid::Uuid::nil();
        assert_eq!(ended_reason(true, Some("cancelled by an operator"), run).0, Status::Terminated);
        let (status, reason) = ended_reason(false, Some("revision 1's container exited with code 1"), run);
        assert_eq!(status, Status::Failed);
        assert!(reason.starts_with("it could not be deployed: revision 1's container exited with code 1"), "{reason}");
    }

    #[test]
    fn every_step_name_is_its_key() {
        let documented = include_str!("../../../docs/workflows/service-deploy.md");
        for key in [APPLY.name(), WAIT_AVAILABLE.name(), RECORD_RUNNING.name()] {
            assert!(
                documented.contains(&format!("`{key}`")),
                "docs/workflows/service-deploy.md does not describe `{key}`"
            );
        }
    }
}
