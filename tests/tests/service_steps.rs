//! The engine's workflow-author helpers (`anycloud_engine::testing`) applied to `service.deploy`,
//! `service.upgrade` and `service.terminate`, in-process, on a ready simulated cluster whose kubelet runs each
//! replica as a local HTTP server on its `$PORT`:
//!
//! - `actions_succeed_idempotently`: every step run twice still deploys the service (one
//!   Deployment, one Service, its replicas serving revision 1), and still upgrades it (only
//!   revision 2's Pods left, the record on revision 2), and still terminates it (`terminated`, no
//!   object, no process);
//! - `action_failure_can_unwind`: failing each step of `service.deploy` in turn leaves no object
//!   and no process; failing each step of `service.upgrade` in turn rolls back: the Deployment's
//!   template is revision 1 again, no Pod of revision 2 is left, revision 1 is available and the
//!   record serves it, `running`;
//! - `cancel_in_flight_can_unwind`: the same, when a cancel arrives while each step runs and the
//!   process "dies" before its checkpoint;
//! - both unwinding helpers on `service.terminate`, which only goes forward (no undo): failed or
//!   cancelled at each step, it did exactly the work of the steps that ran (the record stays
//!   `running` until `record_terminated`), and a new terminate then leaves nothing.
//!
//! What is left is read outside Anycloud's records: the objects through the Kubernetes API (by the
//! deployment's label), and the processes running in the kubelet's directory from `/proc`.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use anycloud_engine::testing::{
    action_failure_can_unwind, actions_succeed_idempotently, cancel_in_flight_can_unwind, run_to_end,
};
use anycloud_engine::{Engine, EngineConfig, Registry, RunStatus, Store, Workflow};
use anycloud_sim::SimCloud;
use anycloud_tests::e2e;
use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::db::Db;
use anycloud_workflows::db::clusters::{self, Cluster};
use anycloud_workflows::db::credentials::{self, CredentialStatus, NewRecord, PublicPart};
use anycloud_workflows::db::deployments::{self, DeploymentKind, NewDeployment, ServiceShape, Status};
use anycloud_workflows::db::revisions::{self, Revision, RevisionResult};
use anycloud_workflows::db::spec::Spec;
use anycloud_workflows::kubernetes::DEPLOYMENT_ID;
use anycloud_workflows::kubernetes::service::REVISION;
use anycloud_workflows::providers::Clouds;
use anycloud_workflows::providers::sim_settings::SimSettings;
use anycloud_workflows::seams::TestSeams;
use anycloud_workflows::secrets::SecretBox;
use anycloud_workflows::workflows::cluster_create::{CreateCluster, CreateInput};
use anycloud_workflows::workflows::deps::Deps;
use anycloud_workflows::workflows::service_deploy::{DeployService, ServiceInput};
use anycloud_workflows::workflows::service_terminate::TerminateService;
use anycloud_workflows::workflows::service_upgrade::{UpgradeInput, UpgradeService};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};

/// How long a run between two checks may take.
const RUN_END: Duration = Duration::from_secs(120);

const CREDENTIAL: &str = "capacity";

/// A ready simulated cluster and one service record on it, ready for the helpers.
struct Harness {
    store: Store,
    deps: Deps,
    cluster: Cluster,
    id: String,
    kubelet_dir: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn spec(version: &str) -> Spec {
    Spec {
        image: format!("acme/web:{version}"),
        command: vec!["python3".into(), "-c".into(), anycloud_tests::e2e::VERSION_SERVER.into()],
        env: vec![anycloud_workflows::db::spec::EnvVar { name: "VERSION".into(), value: version.into() }],
        cpus: None,
        memory: None,
        secrets: Vec::new(),
    }
}

impl Drop for Harness {
    /// The Pods' processes and the kube-proxy outlive the routes, as they should, but not the test.
    fn drop(&mut self) {
        anycloud_sim::kube::kill_processes_under(&self.kubelet_dir);
    }
}

impl Harness {
    async fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("anycloud-service-steps-").tempdir().unwrap();
        let store = Store::sqlite(&dir.path().join("anycloud.db")).await.unwrap();
        let db = Db::open(&store).await.unwrap();
        let sealer = SecretBox::load_or_create(dir.path()).unwrap();
        let kubelet_dir = dir.path().join("sim-kubelet");

        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sim = SimCloud::new(db.clone(), sealer.clone(), format!("http://{addr}")).with_kubelet_dir(&kubelet_dir);
        let app =
            anycloud_sim::kube::router(Arc::new(sim.clone()), sim.kube_storage().await.unwrap(), e2e::kube_proxy());
        tokio::spawn(async move { axum::serve(listener, app).await });

        let now = anycloud_workflows::now_ms();
        let public = PublicPart {
            identity: format!("acct-{}", uuid::Uuid::new_v4().simple()),
            sim: Some(SimSettings { boot_ms: 50, ..SimSettings::default() }),
            ..PublicPart::default()
        };
        let credential =
            NewRecord { name: CREDENTIAL.to_owned(), provider: ProviderKind::Sim, public, secret: "sim".to_owned() };
        let cluster = e2e::cluster_record("services", CREDENTIAL);
        let mut tx = store.begin_write().await.unwrap();
        credentials::insert_in(&mut tx, &credential, &sealer, &uuid::Uuid::new_v4().to_string(), now).await.unwrap();
        clusters::insert_in(&mut tx, &cluster).await.unwrap();
        tx.commit().await.unwrap();
        credentials::set_status(&db, CREDENTIAL, CredentialStatus::Valid, None, now).await.unwrap();
        let deps = Deps {
            db: db.clone(),
            sealer,
            clouds: Clouds::new(Some(Arc::new(sim))),
            seams: TestSeams::default(),
            api_address: None,
            kube_clients: Default::default(),
            binaries: dir.path().join("binaries"),
        };

        let create = Arc::new(CreateCluster { deps: deps.clone() });
        let engine = Engine::start(store.clone(), Registry::new().with(create), EngineConfig::default()).await.unwrap();
        let input = CreateInput { cluster_id: cluster.id.clone(), name: cluster.name.clone() };
        let run = engine.submit::<CreateCluster>(&input, None).await.unwrap();
        let ended = engine.wait(run, Duration::from_secs(60)).await.unwrap();
        assert_eq!(ended.status, RunStatus::Succeeded, "{ended:?}");
        engine.shutdown(Duration::from_secs(5)).await;
        let cluster = clusters::get(&db, &cluster.id).await.unwrap().unwrap();

        // The service's record and its revision 1, as `deploy_service` writes them.
        let id = uuid::Uuid::new_v4().to_string();
        let mut tx = store.begin_write().await.unwrap();
        let first = spec("v1");
        let new =
            NewDeployment { id: &id, name: "web", kind: DeploymentKind::Service, spec: &first, workflow_id: "none" };
        let shape = ServiceShape { port: 8080, replicas: 1, progress_deadline_s: 20 };
        deployments::add_service_in(&mut tx, &cluster.name, new, shape, now).await.unwrap();
        tx.commit().await.unwrap();
        Self { store, deps, cluster, id, kubelet_dir, _dir: dir }
    }

    fn input(&self) -> ServiceInput {
        ServiceInput { deployment_id: self.id.clone(), name: "web".into() }
    }

    fn upgrade_input(&self) -> UpgradeInput {
        UpgradeInput { deployment_id: self.id.clone(), name: "web".into(), revision: 2 }
    }

    /// Deploys revision 1 with the real engine and records revision 2 (`queued`), as
    /// `upgrade_service` does.
    async fn deployed_with_revision_2(&self) {
        let workflow = Arc::new(DeployService { deps: self.deps.clone() });
        let config = EngineConfig { poll_interval: Duration::from_millis(20), ..EngineConfig::named("deployer") };
        let engine = Engine::start(self.store.clone(), Registry::new().with(workflow), config).await.unwrap();
        let run = engine.submit::<DeployService>(&self.input(), None).await.unwrap();
        let ended = engine.wait(run, Duration::from_secs(60)).await.unwrap();
        assert_eq!(ended.status, RunStatus::Succeeded, "{ended:?}");
        engine.shutdown(Duration::from_secs(5)).await;
        let next = Revision {
            number: 2,
            spec: spec("v2"),
            replicas: 1,
            progress_deadline_s: 20,
            result: RevisionResult::Queued,
            reason: None,
            workflow_id: None,
            created_at: anycloud_workflows::now_ms(),
            ended_at: None,
        };
        let mut tx = self.store.begin_write().await.unwrap();
        revisions::insert_in(&mut tx, &self.id, &next).await.unwrap();
        tx.commit().await.unwrap();
    }

    fn selector(&self) -> ListParams {
        ListParams::default().labels(&format!("{DEPLOYMENT_ID}={}", self.id))
    }

    /// The service's Deployments, Services, ReplicaSets and Pods as Kubernetes lists them.
    async fn objects(&self) -> [usize; 4] {
        let client = self.deps.kube_client(&self.cluster).await.unwrap();
        let selector = self.selector();
        let deployments: Api<Deployment> = Api::all(client.clone());
        let services: Api<Service> = Api::all(client.clone());
        let sets: Api<ReplicaSet> = Api::all(client.clone());
        let pods: Api<Pod> = Api::all(client);
        [
            deployments.list(&selector).await.unwrap().items.len(),
            services.list(&selector).await.unwrap().items.len(),
            sets.list(&selector).await.unwrap().items.len(),
            pods.list(&selector).await.unwrap().items.len(),
        ]
    }

    /// The revisions of the service's Pods, as their labels say.
    async fn pod_revisions(&self) -> Vec<String> {
        let client = self.deps.kube_client(&self.cluster).await.unwrap();
        let pods: Api<Pod> = Api::all(client);
        let mut found: Vec<String> = pods
            .list(&self.selector())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|pod| pod.metadata.labels.unwrap_or_default().get(REVISION).cloned().unwrap_or_default())
            .collect();
        found.sort();
        found
    }

    /// Nothing of the service is left: no object, no process.
    async fn nothing_left(&self, step: &str) -> Result<(), String> {
        let objects = self.objects().await;
        if objects != [0, 0, 0, 0] {
            return Err(format!(
                "after `{step}`: Kubernetes still lists [deployments, services, sets, pods] {objects:?}"
            ));
        }
        for _ in 0..50 {
            if e2e::processes_under(&self.kubelet_dir).is_empty() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("after `{step}`: processes still run: {:?}", e2e::processes_under(&self.kubelet_dir)))
    }

    /// The service is back on revision 1: the template, the Pods, the availability and the record.
    async fn rolled_back(&self, step: &str) -> Result<(), String> {
        let client = self.deps.kube_client(&self.cluster).await.unwrap();
        let deployments: Api<Deployment> = Api::namespaced(client, "anycloud");
        let object = deployments.get("web").await.map_err(|err| format!("after `{step}`: {err}"))?;
        let template = object.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().labels.clone().unwrap();
        if template.get(REVISION).map(String::as_str) != Some("1") {
            return Err(format!("after `{step}`: the template is {template:?}"));
        }
        let available = object.status.and_then(|status| status.available_replicas).unwrap_or(0);
        if available < 1 {
            return Err(format!("after `{step}`: {available} replica(s) available"));
        }
        let pods = self.pod_revisions().await;
        if pods != ["1"] {
            return Err(format!("after `{step}`: the Pods' revisions are {pods:?}"));
        }
        let record = deployments::get(&self.deps.db, &self.id).await.unwrap().unwrap();
        if record.status != Status::Running || record.revision != Some(1) || record.spec != spec("v1") {
            return Err(format!("after `{step}`: the record is {:?} on revision {:?}", record.status, record.revision));
        }
        let second = revisions::get(&self.deps.db, &self.id, 2).await.unwrap().unwrap();
        // Failed or rolled back; still `queued` only when the failure was injected before `apply`
        // ran at all (nothing of it was done).
        let expected = match step {
            "apply" => {
                matches!(second.result, RevisionResult::Failed | RevisionResult::RolledBack | RevisionResult::Queued)
            }
            _ => matches!(second.result, RevisionResult::Failed | RevisionResult::RolledBack),
        };
        if !expected {
            return Err(format!("after `{step}`: revision 2 is {}", second.result));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_deploy_step_run_twice_still_deploys_once() {
    let harness = Harness::new().await;
    let workflow = Arc::new(DeployService { deps: harness.deps.clone() });
    actions_succeed_idempotently(&harness.store, workflow, &harness.input()).await.unwrap();
    assert_eq!(harness.objects().await, [1, 1, 1, 1], "one Deployment, Service, ReplicaSet and Pod");
    let record = deployments::get(&harness.deps.db, &harness.id).await.unwrap().unwrap();
    assert_eq!((record.status, record.revision), (Status::Running, Some(1)));
    assert!(record.cluster_ip.is_some_and(|ip| ip.starts_with("127.43.")), "a ClusterIP was recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_failure_or_cancel_at_every_step_leaves_no_object_and_no_process() {
    let harness = Harness::new().await;
    let workflow = Arc::new(DeployService { deps: harness.deps.clone() });
    let check = |step| {
        let harness = &harness;
        async move { harness.nothing_left(step).await }
    };
    action_failure_can_unwind(&harness.store, workflow.clone(), &harness.input(), check).await.unwrap();
    cancel_in_flight_can_unwind(&harness.store, workflow, &harness.input(), check).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upgrade_step_run_twice_still_upgrades_once() {
    let harness = Harness::new().await;
    harness.deployed_with_revision_2().await;
    let workflow = Arc::new(UpgradeService { deps: harness.deps.clone() });
    actions_succeed_idempotently(&harness.store, workflow, &harness.upgrade_input()).await.unwrap();
    let record = deployments::get(&harness.deps.db, &harness.id).await.unwrap().unwrap();
    assert_eq!((record.status, record.revision), (Status::Running, Some(2)));
    assert_eq!(record.spec, spec("v2"));
    let first = revisions::get(&harness.deps.db, &harness.id, 1).await.unwrap().unwrap();
    assert_eq!(first.result, RevisionResult::Superseded);
    let mut pods = Vec::new();
    for _ in 0..300 {
        pods = harness.pod_revisions().await;
        if pods == ["2"] {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Pods' revisions are {pods:?}, not only 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_failure_or_cancel_at_every_step_rolls_back_to_the_serving_revision() {
    let harness = Harness::new().await;
    harness.deployed_with_revision_2().await;
    let workflow = Arc::new(UpgradeService { deps: harness.deps.clone() });
    let check = |step| {
        let harness = &harness;
        async move { harness.rolled_back(step).await }
    };
    action_failure_can_unwind(&harness.store, workflow.clone(), &harness.upgrade_input(), check).await.unwrap();
    cancel_in_flight_can_unwind(&harness.store, workflow, &harness.upgrade_input(), check).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_terminate_step_run_twice_still_terminates_once() {
    let harness = Harness::new().await;
    harness.deployed_with_revision_2().await;
    let workflow = Arc::new(TerminateService { deps: harness.deps.clone() });
    actions_succeed_idempotently(&harness.store, workflow, &harness.input()).await.unwrap();
    let record = deployments::get(&harness.deps.db, &harness.id).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Terminated, "{record:?}");
    harness.nothing_left("terminate").await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// service.terminate stopped at every step (failed, cancelled in flight)
//
// A terminate only goes forward: no step has an undo (workflows/src/workflows/service_terminate.rs), so
// "clean" after a terminate that failed or was cancelled at a step is what the workflow promises
// instead: the steps before it (and, cancelled in flight, that step itself) did their work and no
// more; the record is never `terminated` before `record_terminated` ran (it stays `running`); and
// terminating again, a new run, ends it `terminated` with no object and no process left. The
// check then deploys the service again (its record and revision 1 written anew under the same id,
// as `deploy_service` writes them) so that the next step's run has a service to terminate.

/// The steps of `service.terminate`, in order.
const TERMINATE_STEPS: [&str; 3] = ["delete", "wait_gone", "record_terminated"];

impl Harness {
    /// The service's record and revision 1 written anew (as `deploy_service` writes them), then
    /// deployed with the real engine: one of each object, its replica serving, the record `running`.
    async fn deployed_again(&self) -> Result<(), String> {
        let pool = match self.store.pool() {
            anycloud_engine::Pool::Sqlite(pool) => pool,
            anycloud_engine::Pool::Postgres(_) => unreachable!("these tests run on SQLite"),
        };
        for table in ["deployment_revisions WHERE deployment_id", "deployments WHERE id"] {
            sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table} = $1")))
                .bind(&self.id)
                .execute(pool)
                .await
                .unwrap();
        }
        let mut tx = self.store.begin_write().await.unwrap();
        let first = spec("v1");
        let new = NewDeployment {
            id: &self.id,
            name: "web",
            kind: DeploymentKind::Service,
            spec: &first,
            workflow_id: "none",
        };
        let shape = ServiceShape { port: 8080, replicas: 1, progress_deadline_s: 20 };
        deployments::add_service_in(&mut tx, &self.cluster.name, new, shape, anycloud_workflows::now_ms())
            .await
            .unwrap();
        tx.commit().await.unwrap();
        run_to_end(&self.store, Arc::new(DeployService { deps: self.deps.clone() }), &self.input(), RUN_END).await?;
        self.serving().await
    }

    /// The service is whole: one Deployment, Service, ReplicaSet and Pod, a replica's process, the
    /// record `running`.
    async fn serving(&self) -> Result<(), String> {
        let objects = self.objects().await;
        let processes = e2e::processes_under(&self.kubelet_dir);
        let record = deployments::get(&self.deps.db, &self.id).await.unwrap().unwrap();
        if objects != [1, 1, 1, 1] || processes.is_empty() || record.status != Status::Running {
            return Err(format!(
                "[deployments, services, sets, pods] {objects:?}, processes {processes:?}, the record {:?}",
                record.status
            ));
        }
        Ok(())
    }

    /// What a terminate run that stopped at `step` (failed there, or `cancelled` while it ran)
    /// left: exactly the work of the steps that ran.
    async fn terminate_stopped_at(&self, step: &str, cancelled: bool) -> Result<(), String> {
        let at = TERMINATE_STEPS.iter().position(|s| *s == step).ok_or_else(|| format!("no step `{step}`"))?;
        let done = |name: &str| {
            let index = TERMINATE_STEPS.iter().position(|s| *s == name).unwrap();
            index < at || (cancelled && index == at)
        };
        if !done("delete") {
            return self.serving().await.map_err(|err| format!("nothing was asked to go, yet: {err}"));
        }
        // The delete was asked for: Kubernetes lets everything go, whether or not the run waited.
        let mut objects = self.objects().await;
        for _ in 0..100 {
            if objects == [0, 0, 0, 0] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            objects = self.objects().await;
        }
        self.nothing_left(step).await?;
        let record = deployments::get(&self.deps.db, &self.id).await.unwrap().unwrap();
        let want = if done("record_terminated") { Status::Terminated } else { Status::Running };
        if record.status != want {
            return Err(format!("the record is {:?}, not {want:?}", record.status));
        }
        Ok(())
    }

    /// `check_clean` of the terminate matrices: what the stopped run left, then a new terminate
    /// run ends the service `terminated` with nothing left; then the service is deployed again.
    async fn terminate_stopped_then_terminated_again(&self, step: &str, cancelled: bool) -> Result<(), String> {
        self.terminate_stopped_at(step, cancelled).await?;
        let terminate = Arc::new(TerminateService { deps: self.deps.clone() });
        run_to_end(&self.store, terminate, &self.input(), RUN_END)
            .await
            .map_err(|err| format!("terminating again: {err}"))?;
        let record = deployments::get(&self.deps.db, &self.id).await.unwrap().unwrap();
        if record.status != Status::Terminated {
            return Err(format!("terminated again, the record is {:?}", record.status));
        }
        self.nothing_left("terminating again").await?;
        self.deployed_again().await.map_err(|err| format!("deploying again for the next step: {err}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_failed_or_cancelled_at_every_step_stops_there_and_terminates_again() {
    let harness = Harness::new().await;
    harness.deployed_again().await.unwrap();
    let workflow = Arc::new(TerminateService { deps: harness.deps.clone() });
    let steps = Registry::new().with(workflow.clone()).step_names(TerminateService::KIND, TerminateService::VERSION);
    assert_eq!(steps.as_deref(), Some(&TERMINATE_STEPS[..]), "the matrices' list of steps is the workflow's");
    let failed = |step| {
        let harness = &harness;
        async move { harness.terminate_stopped_then_terminated_again(step, false).await }
    };
    action_failure_can_unwind(&harness.store, workflow.clone(), &harness.input(), failed).await.unwrap();
    let cancelled = |step| {
        let harness = &harness;
        async move { harness.terminate_stopped_then_terminated_again(step, true).await }
    };
    cancel_in_flight_can_unwind(&harness.store, workflow.clone(), &harness.input(), cancelled).await.unwrap();
    run_to_end(&harness.store, workflow, &harness.input(), RUN_END).await.unwrap();
    harness.nothing_left("the last terminate").await.unwrap();
}
