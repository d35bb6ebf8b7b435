//! `service.upgrade`: rolls a service out to a new revision, and back to the revision that
//! served before when the new one cannot serve.
//!
//! ```text
//! apply -> wait_available -> record_running
//!   undo of apply: re-apply the previous revision, wait until it is available again and no Pod
//!   of the new revision is left
//! ```
//!
//! The `upgrade_service` operation records revision N+1 (`queued`, its whole spec) and this run
//! in one transaction; the run's resource key is the deployment's, so a second upgrade waits for
//! the first (and for the deploy). `apply` marks the revision and the service `upgrading` and
//! server-side applies the Deployment with the new template: Kubernetes rolls it out surge-first
//! (`maxSurge` at least 1, `maxUnavailable: 0`), so no Pod of the serving revision goes before a
//! Pod of the new one is available. `wait_available` is a durable poll until every desired
//! replica runs the new revision and no other is left; `record_running` makes it the revision
//! that serves.
//!
//! A new Pod whose container exits or crash-loops, or the progress deadline passing (the
//! Deployment's `ProgressDeadlineExceeded`, or Anycloud's own), fails `wait_available`; the run
//! unwinds, and the undo of `apply` (which also runs for a cancel and after a crash, whatever
//! `apply` had done) marks the service `rolling-back`, re-applies the previous revision's
//! template (Kubernetes scales that revision's ReplicaSet back and the new one to zero; Anycloud
//! never scales the old revision itself and never deletes the Deployment), waits until it is
//! available again and no Pod of the new revision is listed, and records the upgrade `failed`
//! with the cause (`rolled-back` when cancelled) and the service `running` on the previous
//! revision. docs/workflows/service-upgrade.md describes each step.

use std::time::Duration;

use anycloud_engine::{Check, Effect, Step, StepCtx, StepError, StepKey, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::db::deployments::{self, Status};
use crate::db::revisions::{self, RevisionResult};
use crate::kubernetes::service::Rollout;
use crate::workflows::deps::Deps;
use crate::workflows::service_deploy::{
    ROLLOUT_TIMEOUT, check_rollout, kube_failed, revision, say_why, service_and_client,
};
use crate::{kubernetes, now_ms, workflows::retry};

/// The workflow, with what its steps need.
pub struct UpgradeService {
    /// Database, sealer, clouds.
    pub deps: Deps,
}

/// Which service to upgrade to which revision (recorded with the run).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpgradeInput {
    /// The deployment's id.
    pub deployment_id: String,
    /// Its name (for people reading `inspect`).
    pub name: String,
    /// The revision to roll out.
    pub revision: i64,
}

/// What `apply` applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpgradeApplied {
    /// The revision that served when the upgrade began: the one a rollback restores.
    pub from: i64,
    /// The revision rolled out.
    pub to: i64,
    /// When it was applied (ms since the epoch): the start of Anycloud's own deadline.
    pub applied_at: i64,
}

/// The new template is applied.
const APPLY: StepKey<UpgradeApplied> = StepKey::new("apply");
/// Every desired replica runs the new revision and is available.
const WAIT_AVAILABLE: StepKey<()> = StepKey::new("wait_available");
/// The new revision serves.
const RECORD_RUNNING: StepKey<()> = StepKey::new("record_running");

impl Workflow for UpgradeService {
    const KIND: &'static str = "service.upgrade";
    const VERSION: u32 = 1;
    type Input = UpgradeInput;
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(
                Step::action(APPLY, apply)
                    .retry(retry::cloud_calls())
                    .attempt_timeout(retry::QUICK_ATTEMPT)
                    .undo(roll_back)
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

/// Marks the revision and the service `upgrading` and applies the Deployment with the new
/// revision's template. A service that has ended, or a template the cluster refuses (400, 422),
/// fails the upgrade with nothing changed at the cluster: the service keeps serving as it was.
async fn apply(ctx: StepCtx<UpgradeService>) -> Result<UpgradeApplied, StepError> {
    let deps = &ctx.workflow().deps;
    let input = ctx.input();
    let (deployment, client) = service_and_client(deps, &input.deployment_id).await?;
    let next = revision(deps, &deployment, input.revision).await?;
    let from = deployment.revision.unwrap_or(1);
    let now = now_ms();
    if deployment.status.is_ended() {
        let reason = format!("the service was {} before this upgrade began", deployment.status);
        revisions::set_result(&deps.db, &deployment.id, next.number, RevisionResult::Failed, Some(&reason), now)
            .await?;
        return Err(StepError::terminal_msg(reason));
    }
    let rolling = format!("rolling out revision {}; revision {from} serves meanwhile", next.number);
    revisions::set_result(&deps.db, &deployment.id, next.number, RevisionResult::Upgrading, None, now).await?;
    deployments::set_status(&deps.db, &deployment.id, deployment.attempt, Status::Upgrading, Some(&rolling), now)
        .await?;
    let secrets = deps.open_secrets(&deployment.name, &next.spec.secrets).await?;
    if let Err(err) = kubernetes::service::apply_deployment(&client, &deployment, &next, &secrets).await {
        let Some(message) = kubernetes::job::is_refusal(&err) else {
            return Err(kube_failed(&format!("applying revision {} of `{}`", next.number, deployment.name), &err));
        };
        let reason = format!("the cluster refused revision {}: {message}", next.number);
        let serving = format!("upgrade to revision {} failed: {reason}; revision {from} serves", next.number);
        revisions::set_result(&deps.db, &deployment.id, next.number, RevisionResult::Failed, Some(&reason), now)
            .await?;
        deployments::set_status(&deps.db, &deployment.id, deployment.attempt, Status::Running, Some(&serving), now)
            .await?;
        return Err(StepError::terminal_msg(reason));
    }
    Ok(UpgradeApplied { from, to: next.number, applied_at: now_ms() })
}

/// Restores the revision that served before: re-applies its template, and succeeds once it is
/// available again and Kubernetes lists no Pod of the new revision; then records the upgrade
/// `failed` with the cause (`rolled-back` when cancelled) and the service `running` on the
/// previous revision. Until then it fails (retryably) with what it waits for.
async fn roll_back(ctx: StepCtx<UpgradeService>, applied: Effect<UpgradeApplied>) -> Result<(), StepError> {
    let deps = &ctx.workflow().deps;
    let input = ctx.input();
    let (deployment, client) = service_and_client(deps, &input.deployment_id).await?;
    let to = input.revision;
    let from = match applied {
        Effect::Done(applied) => applied.from,
        // Cut short: `apply` has not recorded the new revision as serving, so the record's is the
        // one that served before.
        _ => deployment.revision.unwrap_or(1),
    };
    let cancelled = ctx.cancelled();
    let cause = ctx.unwind_reason().unwrap_or("the upgrade was stopped").to_owned();
    let now = now_ms();
    if deployment.status.is_ended() {
        let reason = format!("the service was {} during the upgrade", deployment.status);
        revisions::set_result(&deps.db, &deployment.id, to, RevisionResult::Terminated, Some(&reason), now).await?;
        return Ok(());
    }
    let previous = revision(deps, &deployment, from).await?;
    if deployment.status != Status::RollingBack {
        let rolling = format!("revision {to} failed ({cause}); restoring revision {from}");
        revisions::set_result(&deps.db, &deployment.id, to, RevisionResult::RollingBack, Some(&cause), now).await?;
        deployments::set_status(&deps.db, &deployment.id, deployment.attempt, Status::RollingBack, Some(&rolling), now)
            .await?;
    }
    let secrets = deps.open_secrets(&deployment.name, &previous.spec.secrets).await?;
    kubernetes::service::apply_deployment(&client, &deployment, &previous, &secrets)
        .await
        .map_err(|err| kube_failed(&format!("re-applying revision {from} of `{}`", deployment.name), &err))?;
    let again = format!("`anycloud deployment upgrade {}`", deployment.name);
    let rollout = kubernetes::service::rollout(&client, &deployment, &previous, &again)
        .await
        .map_err(|err| kube_failed("reading the rollback's progress", &err))?;
    let left = kubernetes::service::revision_pods(&client, &deployment, to)
        .await
        .map_err(|err| kube_failed("listing the new revision's Pods", &err))?;
    match rollout {
        Rollout::Available if left == 0 => {}
        Rollout::Available => {
            return Err(StepError::retryable_msg(format!(
                "rolling back to revision {from}: {left} Pod(s) of revision {to} still listed"
            )));
        }
        Rollout::Progressing(why) | Rollout::Failed(why) => {
            return Err(StepError::retryable_msg(format!("rolling back to revision {from}: {why}")));
        }
        Rollout::Gone => {
            return Err(StepError::retryable_msg(format!(
                "rolling back to revision {from}: the Deployment is not listed yet"
            )));
        }
    }
    let now = now_ms();
    let (result, serving) = if cancelled {
        (RevisionResult::RolledBack, format!("the upgrade to revision {to} was cancelled; revision {from} serves"))
    } else {
        (
            RevisionResult::Failed,
            format!("the upgrade to revision {to} failed and was rolled back: {cause}; revision {from} serves"),
        )
    };
    deployments::serve_revision(&deps.db, &deployment.id, &previous, &serving, now).await?;
    revisions::set_result(&deps.db, &deployment.id, from, RevisionResult::Running, None, now).await?;
    revisions::set_result(&deps.db, &deployment.id, to, result, Some(&cause), now).await?;
    Ok(())
}

/// Ready once every desired replica runs the new revision, is available, and no replica of
/// another revision is left. A new container that exits or crash-loops, or the progress deadline
/// passing, fails the step (terminal: the run unwinds and rolls back).
async fn wait_available(ctx: StepCtx<UpgradeService>) -> Result<Check<()>, StepError> {
    let deps = &ctx.workflow().deps;
    let (deployment, client) = service_and_client(deps, &ctx.input().deployment_id).await?;
    let next = revision(deps, &deployment, ctx.input().revision).await?;
    let applied = ctx.output(APPLY)?;
    let again = format!("`anycloud deployment upgrade {} --image {}`", deployment.name, next.spec.image);
    let check = check_rollout(&client, &deployment, &next, applied.applied_at, &again).await?;
    if let Check::NotYet(why) = &check {
        let rolling =
            format!("rolling out revision {}; revision {} serves meanwhile: {why}", next.number, applied.from);
        say_why(deps, &deployment, Status::Upgrading, &rolling).await?;
    }
    Ok(check)
}

/// Makes the new revision the one that serves; the one before it is superseded.
async fn record_running(ctx: StepCtx<UpgradeService>) -> Result<(), StepError> {
    let deps = &ctx.workflow().deps;
    let input = ctx.input();
    let deployment = deployments::get(&deps.db, &input.deployment_id)
        .await?
        .ok_or_else(|| StepError::terminal_msg(format!("deployment {} has no record", input.deployment_id)))?;
    let next = revision(deps, &deployment, input.revision).await?;
    let reason = format!("revision {} serves: {} replica(s) available", next.number, next.replicas);
    let now = now_ms();
    if deployments::serve_revision(&deps.db, &deployment.id, &next, &reason, now).await? {
        revisions::set_result(&deps.db, &deployment.id, next.number, RevisionResult::Running, None, now).await?;
        revisions::supersede_before(&deps.db, &deployment.id, next.number, now).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_name_is_its_key() {
        let documented = include_str!("../../../docs/workflows/service-upgrade.md");
        for key in [APPLY.name(), WAIT_AVAILABLE.name(), RECORD_RUNNING.name(), "roll_back"] {
            assert!(
                documented.contains(&format!("`{key}`")),
                "docs/workflows/service-upgrade.md does not describe `{key}`"
            );
        }
    }
}
