//! Terminating a deployment. A job's: a cancel of its run, whose unwind deletes its Kubernetes
//! objects and ends the record `terminated`. A service's: its unfinished deploy or upgrade runs
//! are cancelled (they unwind: a deploy deletes what it applied, an upgrade rolls back) and a
//! `service.terminate` run, queued behind them under the deployment's resource key, deletes its
//! Deployment and Service and ends the record `terminated`. Idempotent: a deployment that has
//! ended, or whose termination is under way, is answered as it is.

use anycloud_engine::{EngineError, RunFilter, Workflow};

use crate::db::deployments::{self, Deployment};
use crate::refusal::OperationError;
use crate::wire::DeploymentDetail;
use crate::workflows::service_deploy::ServiceInput;
use crate::workflows::service_terminate::TerminateService;

use super::Operations;
use super::show_deployments::deployment_not_found;

impl Operations {
    /// Asks the deployment's run to turn back; its Job and Pods are deleted and the record stays,
    /// `terminated`.
    pub async fn terminate_deployment(&self, key: &str) -> Result<DeploymentDetail, OperationError> {
        let deployment = deployments::find(&self.deps.db, key).await?.ok_or_else(|| deployment_not_found(key))?;
        if deployment.is_service() {
            return self.terminate_service(deployment).await;
        }
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

impl Operations {
    /// Cancels the service's unfinished deploy and upgrade runs and queues `service.terminate`
    /// behind them, unless the service has ended or a termination is under way.
    async fn terminate_service(&self, deployment: Deployment) -> Result<DeploymentDetail, OperationError> {
        if deployment.status.is_ended() {
            return self.deployment_detail(deployment).await;
        }
        let key = Deployment::resource_key(&deployment.id);
        let filter = RunFilter { resource_key: Some(key.clone()), limit: Some(1000), ..RunFilter::default() };
        let unfinished: Vec<_> =
            self.engine.list(&filter).await?.into_iter().filter(|run| !run.status.is_final()).collect();
        if unfinished.iter().any(|run| run.kind == <TerminateService as Workflow>::KIND) {
            return self.deployment_detail(deployment).await;
        }
        for run in &unfinished {
            match self.engine.cancel(run.id).await {
                Ok(_) | Err(EngineError::InvalidState { .. }) => {}
                Err(err) => return Err(err.into()),
            }
        }
        let mut tx = self.deps.db.begin().await?;
        let input = ServiceInput { deployment_id: deployment.id.clone(), name: deployment.name.clone() };
        let submitted = self.engine.submit_in_leased::<TerminateService>(&mut tx, &input, Some(&key)).await?;
        deployments::set_workflow_in(&mut tx, &deployment.id, &submitted.run().id.to_string(), crate::now_ms()).await?;
        tx.commit().await?;
        submitted.start();
        let deployment = deployments::get(&self.deps.db, &deployment.id)
            .await?
            .ok_or_else(|| deployment_not_found(&deployment.id))?;
        self.deployment_detail(deployment).await
    }
}
