//! Submitting a job: its deployment record and its `job.run` run, in one transaction that holds
//! the cluster's row, so that a submission and a cluster delete cannot race. The answer is the job
//! as that transaction wrote it.
//!
//! On SQLite a job that names no secret is first submitted in one write of the engine's group
//! commit (`Engine::submit_guarded`), its record inserted only where the transaction would have
//! found what it needs (the cluster ready, no registry secret to take, the name free); where the
//! write finds otherwise, nothing is written and the transaction runs, and says why. SQLite has
//! one writer, so the write's conditions hold at its commit; on PostgreSQL the transaction with
//! its row locks is the only path.

use anycloud_engine::Pool;
use uuid::Uuid;

use crate::db::clusters::{self, Phase};
use crate::db::deployments::{self, Deployment, DeploymentKind, NewDeployment, PlacementRefused};
use crate::db::is_unique_violation;
use crate::db::spec::Spec;
use crate::names::check_dns_label;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{DeploymentDetail, NewJob};
use crate::workflows::job_run::{JobInput, RunJob};
use crate::workload::{self, registry_host};

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
        let at_once = request.secrets.is_empty()
            && request.pull_secrets.is_empty()
            && !matches!(self.deps.db.pool(), Pool::Postgres(_));
        if at_once && let Some(detail) = self.submit_job_guarded(&request.cluster, &id, &name, &spec).await? {
            return Ok(detail);
        }
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

    /// The job submitted in one write of the group commit, or `None` if its cluster is not
    /// ready, a registry secret for its image's host exists, or its name is taken: then nothing
    /// was written.
    async fn submit_job_guarded(
        &self,
        cluster: &str,
        id: &str,
        name: &str,
        spec: &Spec,
    ) -> Result<Option<DeploymentDetail>, OperationError> {
        let Some(cluster) = clusters::get_by_name(&self.deps.db, cluster).await? else { return Ok(None) };
        if cluster.phase != Phase::Ready || cluster.delete_requested_at.is_some() {
            return Ok(None);
        }
        let input = JobInput { deployment_id: id.to_owned(), name: name.to_owned(), attempt: 1 };
        let key = Deployment::resource_key(id);
        let now = crate::now_ms();
        let host = registry_host(&spec.image);
        let guard = |run: Uuid| {
            let run = run.to_string();
            deployments::add_guarded(&cluster.id, &new_job(id, name, spec, &run), &host, now)
        };
        let Some(submitted) = self.engine.submit_guarded::<RunJob>(&input, Some(&key), guard).await? else {
            return Ok(None);
        };
        let run = submitted.run().id.to_string();
        let deployment = Deployment::queued(&cluster.id, &new_job(id, name, spec, &run), now);
        let detail = self.detail_of(deployment, Some(&cluster), Some(submitted.run()), Vec::new());
        submitted.start();
        Ok(Some(detail))
    }
}

/// A new job's record.
fn new_job<'a>(id: &'a str, name: &'a str, spec: &'a Spec, workflow_id: &'a str) -> NewDeployment<'a> {
    NewDeployment { id, name, kind: DeploymentKind::Job, spec, workflow_id }
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
    use std::sync::Arc;
    use std::time::Duration;

    use anycloud_engine::{Engine, EngineConfig, write_statement};

    use super::*;
    use crate::cloud::ProviderKind;
    use crate::db::clusters::Cluster;
    use crate::refusal::Code;
    use crate::test_support::{FakeAnswer, TestWorld};
    use crate::wire::{NewSecret, RegistryLogin};

    /// Operations on `world` whose engine drives nothing: no slot to lease a run to, no poll
    /// within the test, so each record stays as its submit wrote it.
    async fn operations(world: &TestWorld) -> Operations {
        let config =
            EngineConfig { max_concurrency: 0, poll_interval: Duration::from_secs(3600), ..EngineConfig::default() };
        let registry = crate::workflows::registry(&world.deps);
        let engine = Engine::start(world.store().clone(), registry, config).await.expect("an engine");
        Operations::new(Arc::new(engine), world.deps.clone(), "api-test", false)
    }

    async fn ready_cluster(world: &TestWorld, name: &str) -> Cluster {
        let cluster = Cluster {
            id: format!("c-{name}"),
            name: name.into(),
            credential: "c".into(),
            provider: ProviderKind::Sim,
            region: "sim-east-1".into(),
            zone: None,
            vm_type: "sim.small".into(),
            min_vms: 1,
            max_vms: 1,
            phase: Phase::Ready,
            reason: None,
            endpoint: None,
            network_id: None,
            workflow_id: None,
            delete_requested_at: None,
            created_at: 1,
            updated_at: 1,
            control_plane_credential: None,
            control_plane_provider: None,
            control_plane_region: None,
            control_plane_zone: None,
            control_plane_vm_type: None,
        };
        let mut tx = world.deps.db.begin().await.expect("a transaction");
        clusters::insert_in(&mut tx, &cluster).await.expect("the cluster");
        tx.commit().await.expect("commit");
        cluster
    }

    fn job(cluster: &str, name: &str, image: &str) -> NewJob {
        NewJob {
            cluster: cluster.into(),
            name: Some(name.into()),
            image: image.into(),
            command: vec!["sh".into(), "-c".into(), "echo hi".into()],
            ..NewJob::default()
        }
    }

    fn refused(result: Result<DeploymentDetail, OperationError>) -> Code {
        match result {
            Err(OperationError::Refused(refusal)) => refusal.code,
            other => panic!("not refused: {other:?}"),
        }
    }

    /// A job that names no secret is submitted in one write on SQLite: its answer is the job as
    /// stored; each condition the write checks refuses as the transaction does; a registry
    /// secret for its image's host is taken as the transaction takes it.
    #[tokio::test]
    async fn a_job_submitted_in_one_write_is_answered_as_stored_and_refused_as_before() {
        let world = TestWorld::new(FakeAnswer::Accept).await;
        let ops = operations(&world).await;
        let cluster = ready_cluster(&world, "demo").await;

        let detail = ops.submit_job(job("demo", "first", "python:3.12")).await.expect("submitted");
        let shown = ops.deployment_status("first").await.expect("shown");
        let as_json = |detail: &DeploymentDetail| serde_json::to_value(detail).expect("a detail as JSON");
        assert_eq!(as_json(&detail), as_json(&shown));
        assert_eq!(detail.state, "queued");

        assert_eq!(refused(ops.submit_job(job("demo", "first", "python:3.12")).await), Code::DeploymentExists);
        assert_eq!(refused(ops.submit_job(job("nowhere", "second", "python:3.12")).await), Code::ClusterNotFound);

        let login = RegistryLogin { host: "ghcr.io".into(), username: "u".into(), password: "p".into() };
        let secret = NewSecret { name: "ghcr".into(), registry: Some(login), ..NewSecret::default() };
        ops.save_secret(secret).await.expect("a registry secret");
        let pulled = ops.submit_job(job("demo", "pulled", "ghcr.io/acme/batch:1")).await.expect("submitted");
        let shown = ops.deployment_status("pulled").await.expect("shown");
        assert_eq!(as_json(&pulled), as_json(&shown));
        assert_eq!(shown.deployment.spec.secrets.iter().map(|one| one.name.as_str()).collect::<Vec<_>>(), ["ghcr"]);

        write_statement!(world.deps.db, "UPDATE clusters SET delete_requested_at = 2 WHERE id = $1", &cluster.id)
            .expect("the cluster's delete requested");
        assert_eq!(refused(ops.submit_job(job("demo", "late", "python:3.12")).await), Code::ClusterNotReady);
        let names: Vec<String> = deployments::list(&world.deps.db, None, None, 10)
            .await
            .expect("the deployments")
            .into_iter()
            .map(|deployment| deployment.name)
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    /// A cluster delete whose transaction holds SQLite's writer when a job is submitted in one
    /// write: the write waits for it, finds the delete requested and writes nothing, and the job
    /// is refused as the transaction refuses it.
    #[tokio::test]
    async fn a_job_submitted_in_one_write_while_its_cluster_is_deleted_is_refused() {
        let world = TestWorld::new(FakeAnswer::Accept).await;
        let ops = operations(&world).await;
        let cluster = ready_cluster(&world, "shared").await;
        let mut delete = world.deps.db.begin().await.expect("the delete's transaction");
        clusters::lock_live_in(&mut delete, "shared").await.expect("lock").expect("the cluster");

        let submit = ops.submit_job(job("shared", "racing", "python:3.12"));
        tokio::pin!(submit);
        let waited = tokio::time::timeout(Duration::from_millis(300), &mut submit).await;
        assert!(waited.is_err(), "the submit must wait for the delete's transaction: {waited:?}");
        clusters::request_delete_in(&mut delete, &cluster.id, "delete-run", 2).await.expect("request the delete");
        delete.commit().await.expect("commit the delete");

        assert_eq!(refused(submit.await), Code::ClusterNotReady);
        assert!(deployments::list(&world.deps.db, None, None, 10).await.expect("the deployments").is_empty());
    }

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
