//! `service.terminate`: what `anycloud terminate` runs for a service.
//!
//! ```text
//! delete -> wait_gone -> record_terminated
//! ```
//!
//! The `terminate_deployment` operation cancels the service's unfinished deploy or upgrade runs
//! and submits this run under the deployment's resource key, so it runs once they have unwound.
//! `delete` deletes the Deployment (foreground: its ReplicaSets and Pods first) and the
//! Service; `wait_gone` is a durable poll until Kubernetes lists none of the service's
//! Deployment, Service, ReplicaSets or Pods; `record_terminated` ends the record `terminated`
//! (it stays, with its revisions). Every step moves forward only: there is no undo of a delete,
//! and a step that keeps failing parks the run for an operator. docs/workflows/service-deploy.md
//! ("Termination") describes each step.

use std::time::Duration;

use anycloud_engine::{Check, Step, StepCtx, StepError, StepKey, Steps, Workflow};

use crate::db::deployments::{self, Status};
use crate::db::revisions;
use crate::kubernetes;
use crate::workflows::deps::Deps;
use crate::workflows::service_deploy::{ServiceInput, kube_failed, service_and_client};
use crate::{now_ms, workflows::retry};

/// The workflow, with what its steps need.
pub struct TerminateService {
    /// Database, sealer, clouds.
    pub deps: Deps,
}

/// The objects are asked to go; how many were still listed.
const DELETE: StepKey<usize> = StepKey::new("delete");
/// Kubernetes lists none of them.
const WAIT_GONE: StepKey<()> = StepKey::new("wait_gone");
/// The record is `terminated`.
const RECORD_TERMINATED: StepKey<()> = StepKey::new("record_terminated");

/// How long the service's Pods may take to go (their grace period, a slow node).
const GONE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

impl Workflow for TerminateService {
    const KIND: &'static str = "service.terminate";
    const VERSION: u32 = 1;
    type Input = ServiceInput;
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(Step::action(DELETE, delete).retry(retry::cloud_calls()).attempt_timeout(retry::QUICK_ATTEMPT))
            .then(
                Step::poll(WAIT_GONE, wait_gone)
                    .every(Duration::from_secs(1))
                    .slowing_to(Duration::from_secs(5))
                    .timeout(GONE_TIMEOUT)
                    .retry(retry::sweeps())
                    .attempt_timeout(retry::QUICK_ATTEMPT),
            )
            .then(Step::action(RECORD_TERMINATED, record_terminated).retry(retry::cloud_calls()))
    }

    fn output(_ctx: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

/// Asks Kubernetes to delete the Deployment, the Service and anything of them left.
async fn delete(ctx: StepCtx<TerminateService>) -> Result<usize, StepError> {
    let (deployment, client) = service_and_client(&ctx.workflow().deps, &ctx.input().deployment_id).await?;
    kubernetes::service::delete(&client, &deployment)
        .await
        .map_err(|err| kube_failed(&format!("deleting the Deployment and Service of `{}`", deployment.name), &err))
}

/// Ready once Kubernetes lists none of the service's objects (it deletes again what it still
/// lists: a delete is idempotent).
async fn wait_gone(ctx: StepCtx<TerminateService>) -> Result<Check<()>, StepError> {
    let (deployment, client) = service_and_client(&ctx.workflow().deps, &ctx.input().deployment_id).await?;
    match kubernetes::service::delete(&client, &deployment).await {
        Ok(0) => Ok(Check::Ready(())),
        Ok(left) => Ok(Check::NotYet(format!("{left} object(s) of `{}` still listed", deployment.name))),
        Err(err) => Ok(Check::NotYet(format!("asking Kubernetes: {}", anycloud_engine::error_chain(&err)))),
    }
}

/// Ends the service `terminated`; its revisions that had not ended end with it.
async fn record_terminated(ctx: StepCtx<TerminateService>) -> Result<(), StepError> {
    let deps = &ctx.workflow().deps;
    let id = &ctx.input().deployment_id;
    let reason = "terminated; its Deployment, Service and Pods were deleted";
    let now = now_ms();
    revisions::terminate_all(&deps.db, id, reason, now).await?;
    deployments::end(&deps.db, id, 1, Status::Terminated, None, Some(reason), now).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_name_is_its_key() {
        let documented = include_str!("../../../docs/workflows/service-deploy.md");
        for key in [DELETE.name(), WAIT_GONE.name(), RECORD_TERMINATED.name()] {
            assert!(
                documented.contains(&format!("`{key}`")),
                "docs/workflows/service-deploy.md does not describe `{key}`"
            );
        }
    }
}
