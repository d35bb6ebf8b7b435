//! Resubmitting an ended job: its next attempt, with the same configuration, as a new `job.run`
//! run, in one transaction that holds the deployment's and the cluster's rows.

use crate::db::clusters;
use crate::db::deployments::{self, Deployment, DeploymentKind};
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::DeploymentDetail;
use crate::workflows::job_run::{JobInput, RunJob};

use super::Operations;
use super::pin_secrets::pin_in;
use super::show_deployments::deployment_not_found;
use super::submit_job::placement_refusal;

impl Operations {
    /// Runs an ended job again as attempt N+1. Refused while it has not ended, for a service, and
    /// when its cluster is not ready any more.
    pub async fn resubmit_deployment(&self, key: &str) -> Result<DeploymentDetail, OperationError> {
        // The cluster's name, for the messages, read before the write transaction begins (on
        // SQLite the pool's one writer is the transaction's until it ends).
        let found = deployments::find(&self.deps.db, key).await?.ok_or_else(|| deployment_not_found(key))?;
        let cluster = clusters::get(&self.deps.db, &found.cluster_id).await?;
        let cluster_key = cluster.map(|cluster| cluster.name).unwrap_or_else(|| found.cluster_id.clone());
        let mut tx = self.deps.db.begin().await?;
        let deployment = deployments::lock_in(&mut tx, key).await?.ok_or_else(|| deployment_not_found(key))?;
        let name = &deployment.name;
        if deployment.kind != DeploymentKind::Job {
            return Err(Refusal::new(
                Code::WrongDeploymentKind,
                format!("`{name}` is a {}; only jobs are resubmitted (upgrade a service instead)", deployment.kind),
            )
            .into());
        }
        if !deployment.status.is_ended() {
            return Err(Refusal::new(
                Code::DeploymentNotEnded,
                format!(
                    "job `{name}` is {}; resubmit runs an ended job again: wait for it (`anycloud wait \
                     deployment/{name}`) or end it (`anycloud terminate {name}`) first",
                    deployment.status
                ),
            )
            .into());
        }
        deployments::hold_cluster_in(&mut tx, &cluster_key)
            .await
            .map_err(|refused| placement_refusal(name, refused))?;
        // Its secrets again, each at its current version.
        let kept = |registry: bool| -> Vec<String> {
            let named = deployment.spec.secrets.iter().filter(|one| one.registry.is_some() == registry);
            named.map(|one| one.name.clone()).collect()
        };
        let secrets = pin_in(&mut tx, name, &deployment.spec.image, &kept(false), &kept(true)).await?;
        let attempt = deployment.attempt + 1;
        let input = JobInput { deployment_id: deployment.id.clone(), name: name.clone(), attempt };
        let key = Deployment::resource_key(&deployment.id);
        let submitted = self.engine.submit_in_leased::<RunJob>(&mut tx, &input, Some(&key)).await?;
        let run = submitted.run().id.to_string();
        deployments::resubmit_in(&mut tx, &deployment.id, &run, &secrets, crate::now_ms()).await?;
        tx.commit().await?;
        submitted.start();
        self.deployment_status(&deployment.id).await
    }
}
