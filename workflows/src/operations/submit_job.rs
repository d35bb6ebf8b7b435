//! Submitting a job: its deployment record and its `job.run` run, in one transaction that holds
//! the cluster's row, so that a submission and a cluster delete cannot race. The answer is the job
//! as that transaction wrote it.

use uuid::Uuid;

use crate::db::deployments::{self, Deployment, DeploymentKind, NewDeployment, PlacementRefused};
use crate::db::is_unique_violation;
use crate::names::check_dns_label;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{DeploymentDetail, NewJob};
use crate::workflows::job_run::{JobInput, RunJob};
use crate::workload;

use super::Operations;
use super::pin_secrets::pin_in;

/// Longest deployment name: `{name}-{attempt}` must stay a DNS label for Kubernetes.
pub const MAX_NAME: usize = 50;

impl Operations {
    /// Stores a job on a ready cluster and starts its first attempt. Refused, with nothing
    /// stored, for a spec that cannot run, a taken name, and a cluster that does not exist, is not
    /// ready or is being deleted.
    pub async fn submit_job(&self, request: NewJob) -> Result<DeploymentDetail, OperationError> {
        let mut spec = workload::check(
            &request.image,
            &request.command,
            &request.env,
            request.cpus.as_deref(),
            request.memory.as_deref(),
        )
        .map_err(|why| Refusal::new(Code::InvalidWorkload, why))?;
        let id = Uuid::new_v4().to_string();
        let name = match request.name {
            Some(name) => {
                check_name(&name).map_err(|why| Refusal::new(Code::InvalidWorkload, why))?;
                name
            }
            None => generated_name(&spec.image, &id),
        };
        let mut tx = self.deps.db.begin().await?;
        if deployments::name_taken_in(&mut tx, &name).await? {
            return Err(name_taken(&name));
        }
        spec.secrets = pin_in(&mut tx, &name, &spec.image, &request.secrets, &request.pull_secrets).await?;
        let input = JobInput { deployment_id: id.clone(), name: name.clone(), attempt: 1 };
        let key = Deployment::resource_key(&id);
        let submitted = self.engine.submit_in_leased::<RunJob>(&mut tx, &input, Some(&key)).await?;
        let run_id = submitted.run().id.to_string();
        let new = NewDeployment { id: &id, name: &name, kind: DeploymentKind::Job, spec: &spec, workflow_id: &run_id };
        let (cluster, deployment) = match deployments::add_in(&mut tx, &request.cluster, new, crate::now_ms()).await {
            Ok(added) => added,
            Err(PlacementRefused::Store(err)) if is_unique_violation(&err) => return Err(name_taken(&name)),
            Err(refused) => return Err(placement_refusal(&name, refused)),
        };
        match tx.commit().await {
            Ok(()) => {}
            Err(err) if is_unique_violation(&err) => return Err(name_taken(&name)),
            Err(err) => return Err(err.into()),
        }
        // The answer is the job as committed, from the records in hand: reading them back would
        // queue behind the reads of every job already running.
        let detail = self.detail_of(deployment, Some(&cluster), Some(submitted.run()), Vec::new());
        submitted.start();
        Ok(detail)
    }
}

/// A deployment name: a DNS label of at most [`MAX_NAME`] characters.
pub(super) fn check_name(name: &str) -> Result<(), String> {
    check_dns_label("deployment", name)?;
    if name.len() > MAX_NAME {
        return Err(format!(
            "deployment name `{name}` is {} characters; use at most {MAX_NAME} (its Kubernetes Jobs add an attempt \
             number)",
            name.len()
        ));
    }
    Ok(())
}

/// A name made from the image (`ghcr.io/acme/batch:latest` -> `batch-1a2b3c`).
pub(super) fn generated_name(image: &str, id: &str) -> String {
    let last = image.split(['@']).next().unwrap_or(image).rsplit('/').next().unwrap_or(image);
    let base: String = last
        .split(':')
        .next()
        .unwrap_or(last)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .take(MAX_NAME - 7)
        .collect();
    let base = base.trim_matches('-');
    let suffix: String = id.chars().filter(char::is_ascii_hexdigit).take(6).collect();
    if base.is_empty() { format!("job-{suffix}") } else { format!("{base}-{suffix}") }
}

pub(super) fn name_taken(name: &str) -> OperationError {
    Refusal::new(
        Code::DeploymentExists,
        format!(
            "a deployment named `{name}` exists; choose another -i/--id, or run it again with `anycloud resubmit \
             {name}`"
        ),
    )
    .into()
}

/// A placement the cluster's state refuses, as a refusal that names the deployment.
pub(super) fn placement_refusal(name: &str, refused: PlacementRefused) -> OperationError {
    let code = match &refused {
        PlacementRefused::NoCluster(_) => Code::ClusterNotFound,
        PlacementRefused::NotReady { .. } => Code::ClusterNotReady,
        PlacementRefused::Store(_) => return OperationError::Failed(refused.into()),
    };
    Refusal::new(code, format!("deployment `{name}`: {refused}")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_made_from_the_image() {
        let id = "1a2b3c4d-0000-0000-0000-000000000000";
        assert_eq!(generated_name("ghcr.io/acme/batch:latest", id), "batch-1a2b3c");
        assert_eq!(generated_name("python", id), "python-1a2b3c");
        assert_eq!(generated_name("my_img@sha256:00", id), "my-img-1a2b3c");
        let long = generated_name(&"x".repeat(80), id);
        assert!(check_name(&long).is_ok(), "{long}");
    }
}
