//! Deploying a service: its deployment record (`deploying`), its revision 1 and its
//! `service.deploy` run, in one transaction that holds the cluster's row, so that a deploy and a
//! cluster delete cannot race.

use uuid::Uuid;

use crate::db::deployments::{self, Deployment, DeploymentKind, NewDeployment, PlacementRefused, ServiceShape};
use crate::db::is_unique_violation;
use crate::db::spec::EnvVar;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{DeploymentDetail, NewService};
use crate::workflows::service_deploy::{DeployService, ServiceInput};
use crate::workload;

use super::Operations;
use super::pin_secrets::pin_in;
use super::submit_job::{check_name, generated_name, name_taken, placement_refusal};

/// The port a service's app listens on when none is given.
pub const DEFAULT_PORT: i64 = 8080;
/// Most replicas a service may ask for.
pub const MAX_REPLICAS: i64 = 100;
/// How long a revision may take to become available when no deadline is given (Kubernetes'
/// own default `progressDeadlineSeconds`).
pub const DEFAULT_PROGRESS_DEADLINE_S: i64 = 600;
/// The longest progress deadline: a day.
pub const MAX_PROGRESS_DEADLINE_S: i64 = 24 * 3600;

impl Operations {
    /// Stores a service on a ready cluster and starts deploying its revision 1. Refused, with
    /// nothing stored, for a spec that cannot run, a port, replica count or deadline out of
    /// range, a taken name, and a cluster that does not exist, is not ready or is being deleted.
    pub async fn deploy_service(&self, request: NewService) -> Result<DeploymentDetail, OperationError> {
        let mut spec = workload::check(
            &request.image,
            &request.command,
            &request.env,
            request.cpus.as_deref(),
            request.memory.as_deref(),
        )
        .map_err(|why| Refusal::new(Code::InvalidWorkload, why))?;
        check_env(&spec.env)?;
        let shape = ServiceShape {
            port: check_port(request.port.unwrap_or(DEFAULT_PORT))?,
            replicas: check_replicas(request.replicas.unwrap_or(1))?,
            progress_deadline_s: check_deadline(request.progress_deadline_s.unwrap_or(DEFAULT_PROGRESS_DEADLINE_S))?,
        };
        let id = Uuid::new_v4().to_string();
        let name = match request.name {
            Some(name) => {
                check_name(&name).map_err(|why| Refusal::new(Code::InvalidWorkload, why))?;
                if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
                    return Err(Refusal::new(
                        Code::InvalidWorkload,
                        format!(
                            "service name `{name}` must start with a letter: its Kubernetes Service is named after \
                             it (for example `api-{name}`)"
                        ),
                    )
                    .into());
                }
                name
            }
            None => service_name(&spec.image, &id),
        };
        let mut tx = self.deps.db.begin().await?;
        if deployments::name_taken_in(&mut tx, &name).await? {
            return Err(name_taken(&name));
        }
        spec.secrets = pin_in(&mut tx, &name, &spec.image, &request.secrets, &request.pull_secrets).await?;
        let input = ServiceInput { deployment_id: id.clone(), name: name.clone() };
        let key = Deployment::resource_key(&id);
        let submitted = self.engine.submit_in_leased::<DeployService>(&mut tx, &input, Some(&key)).await?;
        let run = submitted.run().id.to_string();
        let new = NewDeployment { id: &id, name: &name, kind: DeploymentKind::Service, spec: &spec, workflow_id: &run };
        match deployments::add_service_in(&mut tx, &request.cluster, new, shape, crate::now_ms()).await {
            Ok(_) => {}
            Err(PlacementRefused::Store(err)) if is_unique_violation(&err) => return Err(name_taken(&name)),
            Err(refused) => return Err(placement_refusal(&name, refused)),
        }
        match tx.commit().await {
            Ok(()) => {}
            Err(err) if is_unique_violation(&err) => return Err(name_taken(&name)),
            Err(err) => return Err(err.into()),
        }
        submitted.start();
        self.deployment_status(&id).await
    }
}

/// A name made from the image, starting with a letter (a Kubernetes Service's name must).
fn service_name(image: &str, id: &str) -> String {
    let name = generated_name(image, id);
    if name.starts_with(|c: char| c.is_ascii_lowercase()) { name } else { format!("svc-{name}") }
}

fn invalid(message: String) -> OperationError {
    Refusal::new(Code::InvalidService, message).into()
}

/// `PORT` is Anycloud's to set (from `--port`).
pub(super) fn check_env(env: &[EnvVar]) -> Result<(), OperationError> {
    if env.iter().any(|var| var.name == "PORT") {
        return Err(invalid(
            "PORT is set by Anycloud to the service's port: drop `-e PORT=...` and give `--port P` instead".into(),
        ));
    }
    Ok(())
}

/// A TCP port, 1 to 65535.
fn check_port(port: i64) -> Result<i64, OperationError> {
    if !(1..=65_535).contains(&port) {
        return Err(invalid(format!("--port {port} is not a TCP port: use 1 to 65535 (8080 when not given)")));
    }
    Ok(port)
}

/// 1 to [`MAX_REPLICAS`] replicas.
pub(super) fn check_replicas(replicas: i64) -> Result<i64, OperationError> {
    if !(1..=MAX_REPLICAS).contains(&replicas) {
        return Err(invalid(format!(
            "--replicas {replicas} is out of range: a service runs 1 to {MAX_REPLICAS} replicas (terminate it to run \
             none)"
        )));
    }
    Ok(replicas)
}

/// 1 s to a day.
pub(super) fn check_deadline(seconds: i64) -> Result<i64, OperationError> {
    if !(1..=MAX_PROGRESS_DEADLINE_S).contains(&seconds) {
        return Err(invalid(format!(
            "--progress-deadline {seconds}s is out of range: use 1s to 24h (10m when not given)"
        )));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_service_names_start_with_a_letter() {
        let id = "1a2b3c4d-0000-0000-0000-000000000000";
        assert_eq!(service_name("ghcr.io/acme/api:latest", id), "api-1a2b3c");
        assert_eq!(service_name("acme/3d", id), "svc-3d-1a2b3c");
    }

    #[test]
    fn shapes_out_of_range_are_refused() {
        assert!(check_port(0).is_err() && check_port(65_536).is_err() && check_port(80).is_ok());
        assert!(check_replicas(0).is_err() && check_replicas(101).is_err() && check_replicas(3).is_ok());
        assert!(check_deadline(0).is_err() && check_deadline(86_401).is_err() && check_deadline(10).is_ok());
    }
}
