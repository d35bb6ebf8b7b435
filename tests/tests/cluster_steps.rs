//! The engine's workflow-author helpers (`anycloud_engine::testing`) applied to `cluster.create`,
//! in-process (no CLI binary), on the simulated cloud and on AWS (moto):
//!
//! - `action_failure_can_unwind`: failing each step in turn with a terminal error (every undo run
//!   twice) ends the run `failed` and leaves the provider holding nothing of the cluster (no live
//!   VM carrying its tag, no network rules), the record in phase `failed` with no sealed secrets
//!   (but for the injected failure of the first step, which runs no workflow code at all: there
//!   the record keeps the phase the API wrote; a real terminal error in that step marks it
//!   `failed`, which `sim_terminal_error_in_pin_placement_marks_failed` proves);
//! - `cancel_in_flight_can_unwind`: each step does its work, then a cancel arrives and the
//!   process "dies" before the step's checkpoint: the run ends `cancelled`, and the step's own undo
//!   (told its effect is unknown) leaves the provider holding nothing (the network a cut-short
//!   `ensure_network` made, the VM of a cut-short launch), the record `failed` with no secrets;
//! - `actions_succeed_idempotently`: with every step run twice (the first output thrown away, as a
//!   crash before the checkpoint would) the run still succeeds, and the provider holds exactly
//!   N + 1 = 3 live VMs (`cp`, `w0`, `w1`, each once) and exactly one network; and `cluster.delete`
//!   of such a cluster, every step run twice, still ends it `deleted` with nothing left;
//! - both unwinding helpers on `cluster.delete`, which only goes forward (no undo): failed or
//!   cancelled at each step, it did exactly the work of the steps that ran (the VMs, network rules
//!   and address the later steps remove are still there, the record `deleting`), and a new delete
//!   then leaves nothing (see "cluster.delete stopped at every step" below).
//!
//! What the provider holds is read outside anycloud: the simulated cloud's tables directly, moto
//! through a raw aws-sdk-ec2 client. moto ignores EC2 `ClientToken`, so on AWS it is the
//! find-by-tag path of `launch` that keeps the twice-run at 3 instances.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anycloud_engine::testing::{
    action_failure_can_unwind, actions_succeed_idempotently, cancel_in_flight_can_unwind, run_to_end,
};
use anycloud_engine::{Engine, EngineConfig, Pool, Registry, RunStatus, Store, Workflow};
use anycloud_sim::SimCloud;
use anycloud_tests::e2e::{self, Moto};
use anycloud_tests::provider_state::{self, Holdings};
use anycloud_tests::simulated_kube::{MotoMachines, SimulatedKube};
use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::cloud::{CLUSTER_TAG, NAME_TAG, ROLE_TAG};
use anycloud_workflows::db::Db;
use anycloud_workflows::db::clusters::{self, Cluster, Phase};
use anycloud_workflows::db::credentials::{self, CredentialStatus, NewRecord, PublicPart};
use anycloud_workflows::providers::Clouds;
use anycloud_workflows::providers::endpoint::EndpointPolicy;
use anycloud_workflows::providers::sim_settings::SimSettings;
use anycloud_workflows::seams::TestSeams;
use anycloud_workflows::secrets::SecretBox;
use anycloud_workflows::workflows::cluster_create::{CreateCluster, CreateInput};
use anycloud_workflows::workflows::cluster_delete::{DeleteCluster, DeleteInput};
use anycloud_workflows::workflows::deps::Deps;
use aws_sdk_ec2::types::{Filter, Instance};

/// How long a run between two checks may take.
const RUN_END: Duration = Duration::from_secs(180);

/// Capacity VMs of every cluster here (N); the provider then holds N + 1 VMs.
const WORKERS: i64 = 2;
const AWS_REGION: &str = "us-east-1";
const CREDENTIAL: &str = "capacity";
/// The first step of `cluster.create`.
const FIRST_STEP: &str = "pin_placement";

/// A store, the workflow's dependencies and one cluster record, ready for the helpers.
struct Harness {
    store: Store,
    workflow: Arc<CreateCluster>,
    input: CreateInput,
    _dir: tempfile::TempDir,
}

/// Where the cluster's capacity lives.
enum Provider<'a> {
    Sim,
    Aws { moto: &'a Moto, kube: &'a SimulatedKube },
}

impl Harness {
    /// A fresh SQLite store with the domain's tables, a sealer, a valid credential for
    /// `provider`, and a cluster record in phase `creating` (as the API writes it).
    async fn new(provider: Provider<'_>, cluster_id: &str) -> Self {
        let dir = tempfile::Builder::new().prefix("anycloud-cluster-steps-").tempdir().unwrap();
        let store = Store::sqlite(&dir.path().join("anycloud.db")).await.unwrap();
        let db = Db::open(&store).await.unwrap();
        let sealer = SecretBox::load_or_create(dir.path()).unwrap();

        // The simulated cloud's Kubernetes APIs are served by the API that hosts it: serve them here.
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sim = SimCloud::new(db.clone(), sealer.clone(), format!("http://{addr}"))
            .with_kubelet_dir(dir.path().join("sim-kubelet"));
        let app =
            anycloud_sim::kube::router(Arc::new(sim.clone()), sim.kube_storage().await.unwrap(), e2e::kube_proxy());
        tokio::spawn(async move { axum::serve(listener, app).await });

        let account = format!("acct-{}", uuid::Uuid::new_v4().simple());
        let (credential, region, vm_type, seams) = match provider {
            Provider::Sim => {
                let public = PublicPart {
                    identity: account,
                    sim: Some(SimSettings { boot_ms: 50, ..SimSettings::default() }),
                    ..PublicPart::default()
                };
                let credential = NewRecord {
                    name: CREDENTIAL.to_owned(),
                    provider: ProviderKind::Sim,
                    public,
                    secret: "sim".to_owned(),
                };
                (credential, "sim-east-1", "sim.small", TestSeams::default())
            }
            Provider::Aws { moto, kube } => {
                let public = PublicPart {
                    identity: "AKIAANYCLOUDSTEPS001".to_owned(),
                    region: Some(AWS_REGION.to_owned()),
                    endpoint: Some(moto.endpoint.clone()),
                    ..PublicPart::default()
                };
                let credential = NewRecord {
                    name: CREDENTIAL.to_owned(),
                    provider: ProviderKind::Aws,
                    public,
                    secret: "moto-secret-access-key".to_owned(),
                };
                let seams = TestSeams { simulated_kube: Some(kube.base_url()), ..TestSeams::default() };
                (credential, AWS_REGION, "t3.medium", seams)
            }
        };

        let now = anycloud_workflows::now_ms();
        let cluster_id = cluster_id.to_owned();
        let name = "steps".to_owned();
        let cluster = Cluster {
            id: cluster_id.clone(),
            name: name.clone(),
            provider: credential.provider,
            region: region.to_owned(),
            vm_type: vm_type.to_owned(),
            min_vms: WORKERS,
            max_vms: WORKERS,
            ..e2e::cluster_record(&name, CREDENTIAL)
        };
        let mut tx = store.begin_write().await.unwrap();
        credentials::insert_in(&mut tx, &credential, &sealer, &uuid::Uuid::new_v4().to_string(), now).await.unwrap();
        clusters::insert_in(&mut tx, &cluster).await.unwrap();
        tx.commit().await.unwrap();
        credentials::set_status(&db, CREDENTIAL, CredentialStatus::Valid, None, now).await.unwrap();

        let deps = Deps {
            db,
            sealer,
            // moto is plain HTTP on loopback: what an operator allows with --allow-insecure-endpoints.
            clouds: Clouds::new(Some(Arc::new(sim))).with_endpoint_policy(EndpointPolicy::AllowInsecure),
            seams,
            api_address: None,
            kube_clients: Default::default(),
            binaries: dir.path().join("binaries"),
        };
        Self { store, workflow: Arc::new(CreateCluster { deps }), input: CreateInput { cluster_id, name }, _dir: dir }
    }

    fn cluster_id(&self) -> &str {
        &self.input.cluster_id
    }

    /// The record's phase and whether it still holds sealed secrets.
    async fn record(&self) -> (String, Option<String>) {
        sqlx::query_as("SELECT phase, secrets FROM clusters WHERE id = $1")
            .bind(self.cluster_id())
            .fetch_one(sqlite(&self.store))
            .await
            .unwrap()
    }

    /// What `check_clean` requires of the record after the run failing at `step` unwound: phase
    /// `failed`, no sealed secrets. The one exception is an injected failure of the first step:
    /// the engine then fails the step without running it and no step completed whose undo could
    /// run, so no code of the workflow runs at all and the record keeps the phase the API wrote
    /// (`creating`); a real terminal error there does mark it (see
    /// `sim_terminal_error_in_pin_placement_marks_failed`).
    async fn record_unwound(&self, step: &str) -> Result<(), String> {
        self.record_is(if step == FIRST_STEP { Phase::Creating } else { Phase::Failed }).await
    }

    /// What `check_clean` requires of the record after a run cancelled at any step: `failed`
    /// (the first step's undo marks it, whatever the step got to do), no sealed secrets.
    async fn record_cancelled(&self) -> Result<(), String> {
        self.record_is(Phase::Failed).await
    }

    async fn record_is(&self, want: Phase) -> Result<(), String> {
        let (phase, secrets) = self.record().await;
        if phase != want.as_str() {
            return Err(format!("the cluster record is in phase `{phase}`, not `{want}`"));
        }
        if secrets.is_some() {
            return Err("the cluster record still holds sealed secrets".to_owned());
        }
        Ok(())
    }

    /// The simulated VMs with the cluster's tag and no `terminated_at`: (id, name tag, role tag).
    async fn sim_live_vms(&self) -> Vec<(String, String, String)> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT id, tags FROM sim_vms WHERE terminated_at IS NULL AND json_extract(tags, '$.\"anycloud-cluster\"') = $1 \
             ORDER BY id",
        )
        .bind(self.cluster_id())
        .fetch_all(sqlite(&self.store))
        .await
        .unwrap();
        rows.into_iter()
            .map(|(id, tags)| {
                let tags: BTreeMap<String, String> = serde_json::from_str(&tags).unwrap();
                assert_eq!(tags.get(CLUSTER_TAG).map(String::as_str), Some(self.cluster_id()));
                let get = |key: &str| tags.get(key).cloned().unwrap_or_default();
                (id, get(NAME_TAG), get(ROLE_TAG))
            })
            .collect()
    }

    /// Nothing of the cluster is live at the simulated cloud: no VM, no network rule.
    async fn sim_holds_nothing(&self) -> Result<(), String> {
        let vms = self.sim_live_vms().await;
        if !vms.is_empty() {
            return Err(format!("the simulated cloud still runs {vms:?}"));
        }
        let networks = self.sim_live_networks().await;
        if !networks.is_empty() {
            return Err(format!("the simulated cloud still holds network rules {networks:?}"));
        }
        Ok(())
    }

    /// The ids of the cluster's simulated network rules that are not deleted.
    async fn sim_live_networks(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT id FROM sim_networks WHERE cluster = $1 AND deleted_at IS NULL ORDER BY id")
            .bind(self.cluster_id())
            .fetch_all(sqlite(&self.store))
            .await
            .unwrap()
    }
}

fn sqlite(store: &Store) -> &sqlx::SqlitePool {
    match store.pool() {
        Pool::Sqlite(pool) => pool,
        Pool::Postgres(_) => unreachable!("these tests run on SQLite"),
    }
}

/// `cp`, `w0`, `w1`, sorted, as the names every successful create must leave exactly once.
fn expected_names() -> Vec<String> {
    let mut names = vec!["cp".to_owned()];
    names.extend((0..WORKERS).map(|i| format!("w{i}")));
    names
}

// ---------------------------------------------------------------------------------------------
// sim

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_failure_at_every_step_unwinds_to_nothing() {
    let started = Instant::now();
    let h = Harness::new(Provider::Sim, &uuid::Uuid::new_v4().to_string()).await;
    let check_clean = |step: &'static str| {
        let h = &h;
        async move {
            h.sim_holds_nothing().await?;
            h.record_unwound(step).await?;
            eprintln!("failing at `{step}`: clean after {:?}", started.elapsed());
            Ok(())
        }
    };
    action_failure_can_unwind(&h.store, h.workflow.clone(), &h.input, check_clean).await.unwrap();
    // The helper ran every step's failure: the simulated cloud did launch VMs along the way.
    let launched: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM sim_vms WHERE json_extract(tags, '$.\"anycloud-cluster\"') = $1")
            .bind(h.cluster_id())
            .fetch_one(sqlite(&h.store))
            .await
            .unwrap();
    assert!(launched >= 3, "the unwinding matrix launched only {launched} simulated VMs");
    eprintln!("sim unwinding matrix took {:?}", started.elapsed());
}

/// A cancel that reaches each step in flight, the process dying before the step's checkpoint:
/// the step's own undo cleans up what it made (before the fix, a network made by a cut-short
/// `ensure_network` stayed behind: no completed step's undo deletes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_cancel_in_flight_at_every_step_unwinds_to_nothing() {
    let started = Instant::now();
    let h = Harness::new(Provider::Sim, &uuid::Uuid::new_v4().to_string()).await;
    let check_clean = |step: &'static str| {
        let h = &h;
        async move {
            h.sim_holds_nothing().await?;
            h.record_cancelled().await?;
            eprintln!("cancelled in `{step}`: clean after {:?}", started.elapsed());
            Ok(())
        }
    };
    cancel_in_flight_can_unwind(&h.store, h.workflow.clone(), &h.input, check_clean).await.unwrap();
    eprintln!("sim cancel matrix took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_every_step_twice_still_makes_one_cluster() {
    let started = Instant::now();
    let h = Harness::new(Provider::Sim, &uuid::Uuid::new_v4().to_string()).await;
    let output = actions_succeed_idempotently(&h.store, h.workflow.clone(), &h.input).await.unwrap();
    assert_eq!(output.ready_nodes, WORKERS as usize, "{output:?}");

    let vms = h.sim_live_vms().await;
    assert_eq!(vms.len(), WORKERS as usize + 1, "live simulated VMs of the cluster: {vms:?}");
    let mut names: Vec<String> = vms.iter().map(|(_, name, _)| name.clone()).collect();
    names.sort();
    assert_eq!(names, expected_names(), "{vms:?}");
    for (id, name, role) in &vms {
        let want = if name == "cp" { "control-plane" } else { "worker" };
        assert_eq!(role, want, "VM {id} ({name})");
    }
    let networks = h.sim_live_networks().await;
    assert_eq!(networks.len(), 1, "{networks:?}");
    // Nothing was launched and thrown away either: every VM the cluster ever had is live.
    let ever: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM sim_vms WHERE json_extract(tags, '$.\"anycloud-cluster\"') = $1")
            .bind(h.cluster_id())
            .fetch_one(sqlite(&h.store))
            .await
            .unwrap();
    assert_eq!(ever, WORKERS + 1, "the simulated cloud launched {ever} VMs for the cluster");
    let (phase, secrets) = h.record().await;
    assert_eq!(phase, "ready");
    assert!(secrets.is_some(), "a ready cluster keeps its sealed secrets");
    eprintln!("sim twice-run took {:?}", started.elapsed());
}

/// `cluster.delete` with every step run twice (as a crash between a step's effect and its
/// checkpoint would): the cluster still ends `deleted`, its secrets erased, and nothing of it is
/// left at the simulated cloud.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_every_delete_step_twice_still_deletes_everything() {
    let h = Harness::new(Provider::Sim, &uuid::Uuid::new_v4().to_string()).await;
    let registry = Registry::new().with(h.workflow.clone());
    let engine = Engine::start(h.store.clone(), registry, EngineConfig::named("creator")).await.unwrap();
    let run = engine.submit::<CreateCluster>(&h.input, None).await.unwrap();
    let created = engine.wait(run, Duration::from_secs(120)).await.unwrap();
    assert_eq!(created.status, RunStatus::Succeeded, "{created:?}");
    engine.shutdown(Duration::from_secs(5)).await;
    assert_eq!(h.sim_live_vms().await.len(), WORKERS as usize + 1);

    let delete = Arc::new(DeleteCluster { deps: h.workflow.deps.clone() });
    let input = DeleteInput { cluster_id: h.cluster_id().to_owned(), name: h.input.name.clone() };
    actions_succeed_idempotently(&h.store, delete, &input).await.unwrap();
    h.sim_holds_nothing().await.unwrap();
    h.record_is(Phase::Deleted).await.unwrap();
}

/// A real terminal error in the first step (here: a VM type the simulated cloud does not have)
/// leaves the record `failed`, though no undo runs for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_terminal_error_in_pin_placement_marks_failed() {
    let h = Harness::new(Provider::Sim, &uuid::Uuid::new_v4().to_string()).await;
    sqlx::query("UPDATE clusters SET vm_type = 'sim.huge' WHERE id = $1")
        .bind(h.cluster_id())
        .execute(sqlite(&h.store))
        .await
        .unwrap();
    let config = EngineConfig { poll_interval: Duration::from_millis(20), ..EngineConfig::named("cluster-steps") };
    let engine = Engine::start(h.store.clone(), Registry::new().with(h.workflow.clone()), config).await.unwrap();
    let id = engine.submit::<CreateCluster>(&h.input, None).await.unwrap();
    let run = engine.wait(id, Duration::from_secs(60)).await.unwrap();
    engine.shutdown(Duration::from_secs(5)).await;
    assert_eq!(run.status, RunStatus::Failed, "{:?}", run.status_reason);
    let reason = run.status_reason.clone().unwrap_or_default();
    assert!(reason.contains("sim.huge"), "{reason}");
    let (phase, secrets) = h.record().await;
    assert_eq!(phase, "failed");
    assert_eq!(secrets, None);
    assert!(h.sim_live_vms().await.is_empty());
    assert!(h.sim_live_networks().await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// aws (moto)

fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

/// The instances moto holds with the cluster's tag that are not terminated.
async fn aws_live_instances(ec2: &aws_sdk_ec2::Client, cluster_id: &str) -> Vec<Instance> {
    let states = Filter::builder()
        .name("instance-state-name")
        .set_values(Some(["pending", "running", "shutting-down", "stopping", "stopped"].map(str::to_owned).to_vec()))
        .build();
    let output = ec2
        .describe_instances()
        .filters(filter(&format!("tag:{CLUSTER_TAG}"), cluster_id))
        .filters(states)
        .send()
        .await
        .unwrap();
    output.reservations().iter().flat_map(|r| r.instances().iter().cloned()).collect()
}

/// Every instance moto holds with the cluster's tag, terminated or not.
async fn aws_all_instances(ec2: &aws_sdk_ec2::Client, cluster_id: &str) -> Vec<Instance> {
    let output =
        ec2.describe_instances().filters(filter(&format!("tag:{CLUSTER_TAG}"), cluster_id)).send().await.unwrap();
    output.reservations().iter().flat_map(|r| r.instances().iter().cloned()).collect()
}

/// The ids of the security groups moto holds with the cluster's tag.
async fn aws_groups(ec2: &aws_sdk_ec2::Client, cluster_id: &str) -> Vec<String> {
    let output =
        ec2.describe_security_groups().filters(filter(&format!("tag:{CLUSTER_TAG}"), cluster_id)).send().await.unwrap();
    output.security_groups().iter().map(|g| g.group_id().unwrap_or_default().to_owned()).collect()
}

/// Nothing of the cluster is live at moto: no instance, no security group.
async fn moto_holds_nothing(ec2: &aws_sdk_ec2::Client, cluster_id: &str) -> Result<(), String> {
    let live = aws_live_instances(ec2, cluster_id).await;
    if !live.is_empty() {
        return Err(format!("moto still holds instances {:?}", describe(&live)));
    }
    let groups = aws_groups(ec2, cluster_id).await;
    if !groups.is_empty() {
        return Err(format!("moto still holds security groups {groups:?}"));
    }
    Ok(())
}

fn tag<'a>(instance: &'a Instance, key: &str) -> Option<&'a str> {
    instance.tags().iter().find(|t| t.key() == Some(key)).and_then(|t| t.value())
}

fn describe(instances: &[Instance]) -> Vec<String> {
    instances
        .iter()
        .map(|i| {
            format!(
                "{} {} {}",
                i.instance_id().unwrap_or_default(),
                tag(i, NAME_TAG).unwrap_or("?"),
                i.state().and_then(|s| s.name()).map(|s| s.as_str()).unwrap_or("?")
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_failure_at_every_step_unwinds_to_nothing() {
    let started = Instant::now();
    let moto = Moto::start();
    let cluster_id = uuid::Uuid::new_v4().to_string();
    let kube = SimulatedKube::start(MotoMachines::new(&moto.endpoint, AWS_REGION));
    let h = Harness::new(Provider::Aws { moto: &moto, kube: &kube }, &cluster_id).await;
    let ec2 = moto.ec2(AWS_REGION);
    let check_clean = |step: &'static str| {
        let (h, ec2) = (&h, &ec2);
        async move {
            moto_holds_nothing(ec2, h.cluster_id()).await?;
            h.record_unwound(step).await?;
            eprintln!("failing at `{step}`: clean after {:?}", started.elapsed());
            Ok(())
        }
    };
    action_failure_can_unwind(&h.store, h.workflow.clone(), &h.input, check_clean).await.unwrap();
    // The matrix did reach the provider: instances were launched (and are all terminated now).
    let all = aws_all_instances(&ec2, h.cluster_id()).await;
    assert!(all.len() >= 3, "the unwinding matrix launched only {:?}", describe(&all));
    eprintln!("aws unwinding matrix took {:?}", started.elapsed());
}

/// The cancel matrix on moto: a security group or an instance a cut-short step made is found by
/// the cluster's tag and removed by that step's own undo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_cancel_in_flight_at_every_step_unwinds_to_nothing() {
    let started = Instant::now();
    let moto = Moto::start();
    let cluster_id = uuid::Uuid::new_v4().to_string();
    let kube = SimulatedKube::start(MotoMachines::new(&moto.endpoint, AWS_REGION));
    let h = Harness::new(Provider::Aws { moto: &moto, kube: &kube }, &cluster_id).await;
    let ec2 = moto.ec2(AWS_REGION);
    let check_clean = |step: &'static str| {
        let (h, ec2) = (&h, &ec2);
        async move {
            moto_holds_nothing(ec2, h.cluster_id()).await?;
            h.record_cancelled().await?;
            eprintln!("cancelled in `{step}`: clean after {:?}", started.elapsed());
            Ok(())
        }
    };
    cancel_in_flight_can_unwind(&h.store, h.workflow.clone(), &h.input, check_clean).await.unwrap();
    eprintln!("aws cancel matrix took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_every_step_twice_still_makes_one_cluster() {
    let started = Instant::now();
    let moto = Moto::start();
    let cluster_id = uuid::Uuid::new_v4().to_string();
    let kube = SimulatedKube::start(MotoMachines::new(&moto.endpoint, AWS_REGION));
    let h = Harness::new(Provider::Aws { moto: &moto, kube: &kube }, &cluster_id).await;
    let ec2 = moto.ec2(AWS_REGION);
    let output = actions_succeed_idempotently(&h.store, h.workflow.clone(), &h.input).await.unwrap();
    assert_eq!(output.ready_nodes, WORKERS as usize, "{output:?}");

    let live = aws_live_instances(&ec2, h.cluster_id()).await;
    assert_eq!(live.len(), WORKERS as usize + 1, "live instances of the cluster: {:?}", describe(&live));
    let mut names: Vec<String> = live.iter().map(|i| tag(i, NAME_TAG).unwrap_or_default().to_owned()).collect();
    names.sort();
    assert_eq!(names, expected_names(), "{:?}", describe(&live));
    for instance in &live {
        let want = if tag(instance, NAME_TAG) == Some("cp") { "control-plane" } else { "worker" };
        assert_eq!(tag(instance, ROLE_TAG), Some(want), "{:?}", describe(std::slice::from_ref(instance)));
    }
    // moto ignores ClientToken: had the find-by-tag missed, a second instance would exist (live or not).
    let all = aws_all_instances(&ec2, h.cluster_id()).await;
    assert_eq!(all.len(), WORKERS as usize + 1, "every instance ever launched: {:?}", describe(&all));
    let groups = aws_groups(&ec2, h.cluster_id()).await;
    assert_eq!(groups.len(), 1, "{groups:?}");
    let (phase, secrets) = h.record().await;
    assert_eq!(phase, "ready");
    assert!(secrets.is_some(), "a ready cluster keeps its sealed secrets");
    eprintln!("aws twice-run took {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// cluster.delete stopped at every step (failed, cancelled in flight)
//
// A delete only goes forward: no step has an undo (workflows/src/workflows/cluster_delete.rs), so "clean"
// after a delete that failed or was cancelled at a step is what the workflow promises instead:
// the steps before it (and, cancelled in flight, that step itself) did their work and nothing
// further happened at the provider; the record says `deleting` (it keeps `ready` when the
// failure is injected in `mark_deleting`, which then runs no code; `deleted` when a cancel
// reaches `mark_deleted` in flight, whose work then stands); and deleting the cluster again, a
// new run, ends it `deleted` with nothing left. `check_clean` proves all three, then creates the
// cluster again (same id: `pin_placement` sets the record back to `creating`) so that the next
// step's run has a whole cluster to delete.

/// What a harness's provider holds is read from: the simulated cloud's tables, or moto (boto3).
enum Reader<'a> {
    Sim,
    Moto(&'a Moto),
}

impl Harness {
    /// What the provider holds of the cluster, asked of the provider itself.
    async fn holdings(&self, reader: &Reader<'_>) -> Holdings {
        match reader {
            Reader::Sim => {
                let addresses: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM sim_addresses WHERE owner = $1 AND released_at IS NULL")
                        .bind(self.cluster_id())
                        .fetch_one(sqlite(&self.store))
                        .await
                        .unwrap();
                Holdings {
                    vm_names: self.sim_live_vms().await.into_iter().map(|(_, name, _)| name).collect(),
                    rules: self.sim_live_networks().await.len(),
                    addresses: usize::try_from(addresses).unwrap(),
                    ..Holdings::default()
                }
            }
            Reader::Moto(moto) => provider_state::at_moto(moto, self.cluster_id()),
        }
    }

    /// Creates the cluster (again) and requires the provider to hold all of it: `cp`, `w0`, `w1`
    /// live, one network, one reserved address.
    async fn created(&self, reader: &Reader<'_>) -> Result<(), String> {
        run_to_end(&self.store, self.workflow.clone(), &self.input, RUN_END).await?;
        let held = self.holdings(reader).await;
        if held.sorted_names() != expected_names() || held.rules != 1 || held.addresses != 1 {
            return Err(format!("after a create the provider holds {held:?}"));
        }
        let (phase, secrets) = self.record().await;
        if phase != Phase::Ready.as_str() || secrets.is_none() {
            return Err(format!("after a create the record is `{phase}`, sealed secrets: {}", secrets.is_some()));
        }
        Ok(())
    }

    fn delete(&self) -> (Arc<DeleteCluster>, DeleteInput) {
        let delete = Arc::new(DeleteCluster { deps: self.workflow.deps.clone() });
        (delete, DeleteInput { cluster_id: self.cluster_id().to_owned(), name: self.input.name.clone() })
    }

    /// What a delete run that stopped at `step` (failed there, or `cancelled` while it ran) left:
    /// exactly the work of the steps that ran, at the provider and in the record.
    async fn delete_stopped_at(&self, reader: &Reader<'_>, step: &str, cancelled: bool) -> Result<(), String> {
        let (delete, _) = self.delete();
        let steps =
            Registry::new().with(delete).step_names(DeleteCluster::KIND, DeleteCluster::VERSION).unwrap_or_default();
        let at = steps.iter().position(|s| *s == step).ok_or_else(|| format!("`{step}` is no step of {steps:?}"))?;
        let done = |name: &str| {
            let index = steps.iter().position(|s| *s == name).unwrap_or_else(|| panic!("no step `{name}`"));
            index < at || (cancelled && index == at)
        };
        let (phase, _) = self.record().await;
        let want = if done("mark_deleted") {
            Phase::Deleted
        } else if done("mark_deleting") {
            Phase::Deleting
        } else {
            Phase::Ready
        };
        if phase != want.as_str() {
            return Err(format!("the cluster record is in phase `{phase}`, not `{want}`"));
        }
        let held = self.holdings(reader).await;
        let vms = if done("terminate_vms") { Vec::new() } else { expected_names() };
        let rules = usize::from(!done("delete_network"));
        let addresses = usize::from(!done("release_address"));
        if held.sorted_names() != vms || held.rules != rules || held.addresses != addresses {
            return Err(format!(
                "the provider holds {held:?}; the steps that ran leave VMs {vms:?}, {rules} network(s), \
                 {addresses} address(es)"
            ));
        }
        Ok(())
    }

    /// `check_clean` of the delete matrices: what the stopped run left ([`Self::delete_stopped_at`]),
    /// then a new delete run deletes everything; then the cluster is created again for the next step.
    async fn delete_stopped_then_deleted_again(
        &self,
        reader: &Reader<'_>,
        step: &str,
        cancelled: bool,
    ) -> Result<(), String> {
        self.delete_stopped_at(reader, step, cancelled).await?;
        let (delete, input) = self.delete();
        run_to_end(&self.store, delete, &input, RUN_END).await.map_err(|err| format!("deleting again: {err}"))?;
        let held = self.holdings(reader).await;
        if !held.is_empty() {
            return Err(format!("deleted again, the provider still holds {held:?}"));
        }
        self.record_is(Phase::Deleted).await.map_err(|err| format!("deleted again: {err}"))?;
        self.created(reader).await.map_err(|err| format!("creating again for the next step: {err}"))
    }
}

/// Both delete matrices on one harness: a failure, then a cancel in flight, at every step.
async fn delete_matrices(h: &Harness, reader: &Reader<'_>) {
    let started = Instant::now();
    h.created(reader).await.unwrap();
    let (delete, input) = h.delete();
    let failed = |step: &'static str| async move {
        h.delete_stopped_then_deleted_again(reader, step, false).await?;
        eprintln!("delete failing at `{step}`: as promised after {:?}", started.elapsed());
        Ok(())
    };
    action_failure_can_unwind(&h.store, delete.clone(), &input, failed).await.unwrap();
    let cancelled = |step: &'static str| async move {
        h.delete_stopped_then_deleted_again(reader, step, true).await?;
        eprintln!("delete cancelled in `{step}`: as promised after {:?}", started.elapsed());
        Ok(())
    };
    cancel_in_flight_can_unwind(&h.store, delete.clone(), &input, cancelled).await.unwrap();
    // The last check created the cluster again: delete it, leaving nothing.
    run_to_end(&h.store, delete, &input, RUN_END).await.unwrap();
    assert!(h.holdings(reader).await.is_empty());
    eprintln!("delete matrices took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_delete_failed_or_cancelled_at_every_step_stops_there_and_deletes_again() {
    let h = Harness::new(Provider::Sim, &uuid::Uuid::new_v4().to_string()).await;
    delete_matrices(&h, &Reader::Sim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_delete_failed_or_cancelled_at_every_step_stops_there_and_deletes_again() {
    let moto = Moto::start();
    let cluster_id = uuid::Uuid::new_v4().to_string();
    let kube = SimulatedKube::start(MotoMachines::new(&moto.endpoint, AWS_REGION));
    let h = Harness::new(Provider::Aws { moto: &moto, kube: &kube }, &cluster_id).await;
    delete_matrices(&h, &Reader::Moto(&moto)).await;
}
