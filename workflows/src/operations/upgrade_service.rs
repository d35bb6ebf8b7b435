//! Upgrading a service: its next revision (`queued`, with its whole spec) and its
//! `service.upgrade` run, in one transaction that holds the deployment's row. The run shares the
//! deployment's resource key, so it waits for the deploy and for any earlier upgrade.

use crate::db::deployments::{self, Deployment};
use crate::db::revisions::{self, Revision, RevisionResult};
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{DeploymentDetail, UpgradeRequest};
use crate::workflows::service_upgrade::{UpgradeInput, UpgradeService};
use crate::workload;

use super::Operations;
use super::deploy_service::{check_deadline, check_env, check_replicas};
use super::pin_secrets::pin_in;
use super::show_deployments::deployment_not_found;

impl Operations {
    /// Records revision N+1 of a service (the latest revision that did not fail, with the
    /// request's image, variables, replicas and deadline) and starts rolling it out. Refused for a
    /// job, for a service that has ended, and for a spec that cannot run.
    pub async fn upgrade_service(
        &self,
        key: &str,
        request: UpgradeRequest,
    ) -> Result<DeploymentDetail, OperationError> {
        let mut tx = self.deps.db.begin().await?;
        let deployment = deployments::lock_in(&mut tx, key).await?.ok_or_else(|| deployment_not_found(key))?;
        let name = &deployment.name;
        if !deployment.is_service() {
            return Err(Refusal::new(
                Code::WrongDeploymentKind,
                format!(
                    "`{name}` is a {}; only services are upgraded (run an ended job again with `anycloud resubmit \
                     {name}`)",
                    deployment.kind
                ),
            )
            .into());
        }
        if deployment.status.is_ended() {
            return Err(Refusal::new(
                Code::DeploymentEnded,
                format!(
                    "service `{name}` is {}: there is nothing to upgrade; deploy it again with `anycloud service \
                     IMAGE --cluster NAME -- COMMAND...` under another name",
                    deployment.status
                ),
            )
            .into());
        }
        let known = revisions::list_in(&mut tx, &deployment.id).await?;
        let base = known
            .iter()
            .rev()
            .find(|revision| !matches!(revision.result, RevisionResult::Failed | RevisionResult::RolledBack))
            .or(known.last())
            .ok_or_else(|| OperationError::Failed(format!("service `{name}` has no revision").into()))?;
        let image = request.image.as_deref().unwrap_or(&base.spec.image);
        let mut env = base.spec.env.clone();
        env.extend(request.env.iter().cloned());
        let mut spec =
            workload::check(image, &base.spec.command, &env, base.spec.cpus.as_deref(), base.spec.memory.as_deref())
                .map_err(|why| Refusal::new(Code::InvalidWorkload, why))?;
        check_env(&spec.env)?;
        // The secrets it kept and those it adds, each at its current version; the registry
        // secrets for its (maybe new) image's host are found anew.
        let kept = |registry: bool| {
            let named = base.spec.secrets.iter().filter(move |one| one.registry.is_some() == registry);
            named.map(|one| one.name.clone())
        };
        let env_secrets: Vec<String> = kept(false).chain(request.secrets.iter().cloned()).collect();
        let pull_secrets: Vec<String> = kept(true).chain(request.pull_secrets.iter().cloned()).collect();
        spec.secrets = pin_in(&mut tx, name, &spec.image, &env_secrets, &pull_secrets).await?;
        let replicas = check_replicas(request.replicas.unwrap_or(base.replicas))?;
        let progress_deadline_s = check_deadline(request.progress_deadline_s.unwrap_or(base.progress_deadline_s))?;
        let number = known.iter().map(|revision| revision.number).max().unwrap_or(0) + 1;
        let input = UpgradeInput { deployment_id: deployment.id.clone(), name: name.clone(), revision: number };
        let submitted = self
            .engine
            .submit_in_leased::<UpgradeService>(&mut tx, &input, Some(&Deployment::resource_key(&deployment.id)))
            .await?;
        let run = submitted.run().id.to_string();
        let now = crate::now_ms();
        let next = Revision {
            number,
            spec,
            replicas,
            progress_deadline_s,
            result: RevisionResult::Queued,
            reason: None,
            workflow_id: Some(run.clone()),
            created_at: now,
            ended_at: None,
        };
        revisions::insert_in(&mut tx, &deployment.id, &next).await?;
        deployments::set_workflow_in(&mut tx, &deployment.id, &run, now).await?;
        tx.commit().await?;
        submitted.start();
        self.deployment_status(&deployment.id).await
    }
}
