//! Terminating a deployment: a cancel of its run, whose unwind deletes its Kubernetes objects
//! and ends the record `terminated`. Idempotent: a deployment that has ended, or whose
//! termination is under way, is answered as it is.

use anycloud_engine::EngineError;

use crate::api::DeploymentDetail;
use crate::db::deployments;
use crate::refusal::OperationError;

use super::Operations;
use super::show_deployments::deployment_not_found;

impl Operations {
    /// Asks the deployment's run to turn back; its Job and Pods are deleted and the record stays,
    /// `terminated`.
    pub async fn terminate_deployment(&self, key: &str) -> Result<DeploymentDetail, OperationError> {
        let deployment = deployments::find(&self.deps.db, key).await?.ok_or_else(|| deployment_not_found(key))?;
        if !deployment.status.is_ended()
            && let Some(run) = deployment.workflow_id.as_deref().and_then(|id| id.parse().ok())
        {
            match self.engine.cancel(run).await {
                // Already unwinding or ended: the record follows (or has followed) its run.
                Ok(_) | Err(EngineError::InvalidState { .. }) => {}
                Err(err) => return Err(err.into()),
            }
        }
        let deployment =
            deployments::get(&self.deps.db, &deployment.id).await?.ok_or_else(|| deployment_not_found(key))?;
        self.deployment_detail(deployment).await
    }
}
