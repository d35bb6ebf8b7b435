//! The engine's workflow-author helpers (`anycloud_engine::testing`) applied to `job.run`,
//! in-process, on a ready simulated cluster whose kubelet runs each Pod as a local process:
//!
//! - `actions_succeed_idempotently`: every step run twice still completes the job, with exactly
//!   one Job and one Pod of its attempt;
//! - `action_failure_can_unwind`: failing each step in turn (every undo run twice) ends the run
//!   `failed`, with no Kubernetes object of the job left and no process left running;
//! - `cancel_in_flight_can_unwind`: each step does its work, then a cancel arrives and the process
//!   "dies" before the checkpoint: the run ends `cancelled` and leaves nothing behind either;
//! - the API's watch of the cluster (`watches::watch_clusters`): a change to a deployment's Pod
//!   wakes the run waiting on that deployment long before its planned check.
//!
//! What is left is read outside anycloud's records: the Jobs and Pods through the Kubernetes API
//! (by the job's label), and the processes running in the kubelet's directory from `/proc`.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use anycloud_engine::testing::{action_failure_can_unwind, actions_succeed_idempotently, cancel_in_flight_can_unwind};
use anycloud_engine::{Engine, EngineConfig, Registry, RunStatus, Store};
use anycloud_sim::SimCloud;
use anycloud_tests::e2e;
use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::db::Db;
use anycloud_workflows::db::clusters::{self, Cluster};
use anycloud_workflows::db::credentials::{self, CredentialStatus, NewRecord, PublicPart};
use anycloud_workflows::db::deployments::{self, DeploymentKind, NewDeployment};
use anycloud_workflows::db::spec::Spec;
use anycloud_workflows::kubernetes::DEPLOYMENT_ID;
use anycloud_workflows::providers::Clouds;
use anycloud_workflows::providers::sim_settings::SimSettings;
use anycloud_workflows::seams::TestSeams;
use anycloud_workflows::secrets::SecretBox;
use anycloud_workflows::workflows::cluster_create::{CreateCluster, CreateInput};
use anycloud_workflows::workflows::deps::Deps;
use anycloud_workflows::workflows::job_run::{JobInput, RunJob};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

const CREDENTIAL: &str = "capacity";

/// A ready simulated cluster and one job record on it, ready for the helpers.
struct Harness {
    store: Store,
    deps: Deps,
    cluster: Cluster,
    input: JobInput,
    kubelet_dir: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Harness {
    /// The Pods' processes and the kube-proxy outlive the routes, as they should, but not the test.
    fn drop(&mut self) {
        anycloud_sim::kube::kill_processes_under(&self.kubelet_dir);
    }
}

impl Harness {
    async fn new(script: &str) -> Self {
        let dir = tempfile::Builder::new().prefix("anycloud-job-steps-").tempdir().unwrap();
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
        let cluster = e2e::cluster_record("jobs", CREDENTIAL);
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

        // The cluster, made ready by its own workflow.
        let create = Arc::new(CreateCluster { deps: deps.clone() });
        let engine = Engine::start(store.clone(), Registry::new().with(create), EngineConfig::default()).await.unwrap();
        let input = CreateInput { cluster_id: cluster.id.clone(), name: cluster.name.clone() };
        let run = engine.submit::<CreateCluster>(&input, None).await.unwrap();
        let ended = engine.wait(run, Duration::from_secs(60)).await.unwrap();
        assert_eq!(ended.status, RunStatus::Succeeded, "{ended:?}");
        engine.shutdown(Duration::from_secs(5)).await;
        let cluster = clusters::get(&db, &cluster.id).await.unwrap().unwrap();

        // The job's record, as `submit_job` writes it.
        let spec = Spec {
            image: "python:3.12".into(),
            command: vec!["sh".into(), "-c".into(), script.into()],
            env: Vec::new(),
            cpus: None,
            memory: None,
            secrets: Vec::new(),
        };
        let id = uuid::Uuid::new_v4().to_string();
        let mut tx = store.begin_write().await.unwrap();
        let new = NewDeployment { id: &id, name: "steps", kind: DeploymentKind::Job, spec: &spec, workflow_id: "none" };
        deployments::add_in(&mut tx, &cluster.name, new, now).await.unwrap();
        tx.commit().await.unwrap();
        let input = JobInput { deployment_id: id, name: "steps".into(), attempt: 1 };
        Self { store, deps, cluster, input, kubelet_dir, _dir: dir }
    }

    fn workflow(&self) -> Arc<RunJob> {
        Arc::new(RunJob { deps: self.deps.clone() })
    }

    /// The job's Jobs and Pods as Kubernetes lists them: (jobs, pods).
    async fn objects(&self) -> (usize, usize) {
        let client = self.deps.kube_client(&self.cluster).await.unwrap();
        let selector = ListParams::default().labels(&format!("{DEPLOYMENT_ID}={}", self.input.deployment_id));
        let jobs: Api<Job> = Api::all(client.clone());
        let pods: Api<Pod> = Api::all(client);
        (jobs.list(&selector).await.unwrap().items.len(), pods.list(&selector).await.unwrap().items.len())
    }

    /// Nothing of the job is left: no Job, no Pod, no process in the kubelet's directory (a
    /// process killed a moment ago may take a little while to go).
    async fn nothing_left(&self, step: &str) -> Result<(), String> {
        let objects = self.objects().await;
        if objects != (0, 0) {
            return Err(format!(
                "after `{step}`: Kubernetes still lists {} Job(s) and {} Pod(s)",
                objects.0, objects.1
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_run_twice_still_completes_the_job_once() {
    let harness = Harness::new("echo ran once; sleep 0.3").await;
    let outcome = actions_succeed_idempotently(&harness.store, harness.workflow(), &harness.input).await.unwrap();
    assert!(outcome.succeeded, "{outcome:?}");
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(harness.objects().await, (1, 1), "one Job and one Pod of the attempt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_at_every_step_leaves_no_object_and_no_process() {
    let harness = Harness::new("echo started; sleep 1").await;
    action_failure_can_unwind(&harness.store, harness.workflow(), &harness.input, |step| {
        let harness = &harness;
        async move { harness.nothing_left(step).await }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_in_flight_at_every_step_leaves_no_object_and_no_process() {
    let harness = Harness::new("echo started; sleep 1").await;
    cancel_in_flight_can_unwind(&harness.store, harness.workflow(), &harness.input, |step| {
        let harness = &harness;
        async move { harness.nothing_left(step).await }
    })
    .await
    .unwrap();
}

/// Ready once the cluster lists a Pod of the deployment; checked every ten minutes otherwise.
struct PodListed {
    deps: Deps,
    cluster: Cluster,
    deployment_id: String,
}

impl anycloud_engine::Workflow for PodListed {
    const KIND: &'static str = "test.pod_listed";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = ();

    fn steps() -> anycloud_engine::Steps<Self> {
        anycloud_engine::Steps::new().then(
            anycloud_engine::Step::poll("wait_for_pod", |ctx: anycloud_engine::StepCtx<Self>| async move {
                let this = ctx.workflow();
                let client = this.deps.kube_client(&this.cluster).await?;
                let selector = ListParams::default().labels(&format!("{DEPLOYMENT_ID}={}", this.deployment_id));
                let pods = Api::<Pod>::all(client).list(&selector).await;
                Ok(match pods {
                    Ok(pods) if !pods.items.is_empty() => anycloud_engine::Check::Ready(()),
                    _ => anycloud_engine::Check::NotYet("no Pod yet".into()),
                })
            })
            .every(Duration::from_secs(600))
            .timeout(Duration::from_secs(3600)),
        )
    }

    fn output(_: &anycloud_engine::StepCtx<Self>) -> Result<(), anycloud_engine::StepError> {
        Ok(())
    }
}

/// The API's watch of the cluster (`watches::watch_clusters`) tells the engine of a change to a
/// deployment's Pod, and the run waiting on that deployment checks at once, not at its planned
/// check ten minutes away. The Pod is touched once a second, since the watch starts within
/// `CLUSTERS_EVERY` of the task and only sees changes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_to_a_deployments_pod_wakes_the_run_waiting_on_it() {
    let harness = Harness::new("sleep 30").await;
    let deployment_id = harness.input.deployment_id.clone();
    let workflow = Arc::new(PodListed {
        deps: harness.deps.clone(),
        cluster: harness.cluster.clone(),
        deployment_id: deployment_id.clone(),
    });
    let engine = Arc::new(
        Engine::start(harness.store.clone(), Registry::new().with(workflow), EngineConfig::default()).await.unwrap(),
    );
    let watching = tokio::spawn(anycloud_workflows::watches::watch_clusters(harness.deps.clone(), engine.clone()));
    let key = anycloud_workflows::db::deployments::Deployment::resource_key(&deployment_id);
    let run = engine.submit::<PodListed>(&(), Some(&key)).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while engine.run(run).await.unwrap().status != RunStatus::Waiting {
        assert!(std::time::Instant::now() < deadline, "the run never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let pods: Api<Pod> = Api::namespaced(harness.deps.kube_client(&harness.cluster).await.unwrap(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "watched", "labels": {
            "app.kubernetes.io/managed-by": "anycloud", DEPLOYMENT_ID: deployment_id,
        } },
        "spec": { "containers": [{ "name": "main", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 30"] }] },
    }))
    .unwrap();
    pods.create(&kube::api::PostParams::default(), &pod).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for touch in 0.. {
        if engine.run(run).await.unwrap().status == RunStatus::Succeeded {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the run was not woken: {:?}", engine.run(run).await.unwrap());
        let patch = serde_json::json!({ "metadata": { "labels": { "touched": touch.to_string() } } });
        pods.patch("watched", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    watching.abort();
    let _ = watching.await;
    pods.delete("watched", &kube::api::DeleteParams::default()).await.unwrap();
    Arc::try_unwrap(engine).ok().unwrap().shutdown(Duration::from_secs(5)).await;
}
