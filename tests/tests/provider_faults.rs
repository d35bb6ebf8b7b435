//! Faults at the provider: clusters are created and deleted through the real binary while a
//! [`FaultProxy`] between anycloud and the provider (moto's EC2; the fake Compute server) fails
//! 30% of the calls: throttling and 5xx in the provider's own words, timeouts, connection resets,
//! latency, and answers lost after the provider acted.
//!
//! Each `cluster create --wait` must end `ready` with exactly the cluster's VMs (`cp`, `w0`, `w1`,
//! once each) and network rules at the provider, or `failed` with nothing of it left; each
//! `cluster delete --wait` must end `deleted` with nothing left. What the provider holds is asked
//! of it directly (moto through boto3, the fake through its inspection API), never of anycloud. A
//! run that parks (`needs-attention`) is resumed (`workflow resume`) and must then finish; the
//! tally counts it.
//!
//! Two or three clusters per provider by default; `scripts/faults` (or `ANYCLOUD_FAULTS_CLUSTERS`,
//! `ANYCLOUD_FAULTS_SEED`, `ANYCLOUD_FAULTS_RATE`) runs a longer soak and prints the tally table.
//! Two faults alone: answers lost after EC2 acted (one instance is left), and a Compute Engine
//! call held for 90 s (abandoned after the client's 30 s attempt timeout).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, ApiOptions, CliChild, Moto, Output};
use anycloud_tests::fake_gce::FakeGce;
use anycloud_tests::fault_proxy::{Dialect, FaultKind, FaultPlan, FaultProxy};
use anycloud_tests::gcp_test_key::{CLIENT_EMAIL, PROJECT, service_account_json};
use anycloud_tests::provider_state::{self, Holdings};
use anycloud_tests::simulated_kube::{GceMachines, MotoMachines, SimulatedKube};
use anycloud_workflows::cloud::CloudError;
use anycloud_workflows::cloud::{Cloud, LaunchSpec, Role};
use anycloud_workflows::db::credentials::PublicPart;
use anycloud_workflows::providers::aws_cloud::AwsCloud;
use anycloud_workflows::providers::gcp_cloud::GcpCloud;
use serde_json::Value;

/// The VMs of a two-worker cluster, by name.
const VM_NAMES: [&str; 3] = ["cp", "w0", "w1"];

/// How many times a parked run is resumed before the test gives up on it.
const MAX_RESUMES: u32 = 3;

/// How many times in a row a create refused with PROVIDER_UNAVAILABLE is asked again.
const MAX_REFUSALS: usize = 8;

/// What a soak is asked to do: the environment's settings or the small default.
struct Settings {
    seed: u64,
    clusters: usize,
    rate: f64,
}

impl Settings {
    fn from_env(default_clusters: usize) -> Self {
        let read = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self {
            seed: read("ANYCLOUD_FAULTS_SEED").map_or(20_261_204, |v| v.parse().unwrap()),
            clusters: read("ANYCLOUD_FAULTS_CLUSTERS").map_or(default_clusters, |v| v.parse().unwrap()),
            rate: read("ANYCLOUD_FAULTS_RATE").map_or(0.3, |v| v.parse().unwrap()),
        }
    }
}

/// One provider under faults: how to ask it what a cluster holds.
trait Provider {
    fn name(&self) -> &'static str;
    fn region(&self) -> &'static str;
    fn vm_type(&self) -> &'static str;
    /// Network rules a ready cluster has.
    fn rules_of_a_cluster(&self) -> usize;
    fn holdings(&self, cluster_id: &str) -> Holdings;
}

/// The counts of one soak, printed as a row of the table in docs/reliability.md.
#[derive(Debug, Default)]
struct Tally {
    creates: usize,
    /// Creates the API refused because its own check of the region and type met a fault.
    refused: usize,
    ready: usize,
    unwound: usize,
    deletes: usize,
    deleted: usize,
    orphans: usize,
    duplicates: usize,
    parked: u32,
}

/// Where a cluster's last run ended once settled: its phase, after resuming parked runs.
fn settle(api: &Api, name: &str, tally: &mut Tally, log: &mut Vec<String>) -> Value {
    let mut resumes = 0;
    loop {
        let status = api.cli(&["--json", "cluster", "status", name]);
        status.expect_code(0);
        let status = status.json();
        let run = &status["workflow"];
        if run["status"] != "needs-attention" {
            return status;
        }
        tally.parked += 1;
        resumes += 1;
        let id = run["id"].as_str().unwrap();
        log.push(format!(
            "{name}: {} parked at {} ({}); resumed",
            run["kind"], run["current_step"], status["last_error"]
        ));
        assert!(resumes <= MAX_RESUMES, "{name}: parked {resumes} times: {status:#}");
        api.cli(&["workflow", "resume", id]).expect_code(0);
        let out = api.cli(&["wait", &format!("cluster/{name}"), "--timeout", "10m"]);
        assert!([0, 1, 5].contains(&out.code), "{out}");
    }
}

/// Starts `cluster create NAME --wait` with two workers.
fn create(api: &Api, provider: &dyn Provider, name: &str, credential: &str) -> CliChild {
    api.spawn_cli(&[
        "--json",
        "cluster",
        "create",
        name,
        "--credentials",
        credential,
        "--region",
        provider.region(),
        "--vm-type",
        provider.vm_type(),
        "--min-vms",
        "2",
        "--max-vms",
        "2",
        "--wait",
    ])
}

fn soak(provider: &dyn Provider, api: &Api, proxy: &FaultProxy, credential: &str, settings: &Settings) -> Tally {
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut log = Vec::new();
    let names: Vec<String> = (0..settings.clusters).map(|i| format!("faults-{i}")).collect();

    // The creates, all at once: their calls interleave at the provider as a busy API's would. The
    // API checks the region and type with the provider before it accepts a create; a check that
    // meets a fault is refused with PROVIDER_UNAVAILABLE ("try again"), and the test tries again as
    // a person would.
    let mut pending: Vec<&String> = names.iter().collect();
    let mut outputs: BTreeMap<&String, Output> = BTreeMap::new();
    for _round in 0..MAX_REFUSALS {
        let children: Vec<_> = pending.iter().map(|name| (*name, create(api, provider, name, credential))).collect();
        pending.clear();
        for (name, child) in children {
            let out = child.wait(Duration::from_secs(20 * 60));
            if out.code != 0 && out.stderr.contains("PROVIDER_UNAVAILABLE") {
                tally.refused += 1;
                log.push(format!("{name}: create refused, tried again: {}", out.stderr.trim()));
                pending.push(name);
            } else {
                outputs.insert(name, out);
            }
        }
        if pending.is_empty() {
            break;
        }
    }
    assert!(pending.is_empty(), "creates refused {MAX_REFUSALS} times in a row: {pending:?}\n{log:#?}");
    let mut ids = BTreeMap::new();
    for (name, out) in outputs {
        assert!([0, 1, 5].contains(&out.code), "{name}: {out}");
        tally.creates += 1;
        let status = settle(api, name, &mut tally, &mut log);
        let cluster_id = status["cluster"]["id"].as_str().unwrap().to_owned();
        let held = provider.holdings(&cluster_id);
        tally.duplicates += held.duplicates();
        match status["cluster"]["phase"].as_str().unwrap() {
            "ready" => {
                tally.ready += 1;
                let mut vm_names = held.vm_names.clone();
                vm_names.sort_unstable();
                assert_eq!(vm_names, VM_NAMES, "{name} is ready: exactly its VMs at {}: {held:?}", provider.name());
                assert_eq!(held.rules, provider.rules_of_a_cluster(), "{name}: its network rules: {held:?}");
                assert_eq!(held.addresses, 1, "{name}: its control plane's reserved address: {held:?}");
            }
            "failed" => {
                tally.unwound += 1;
                log.push(format!("{name}: create unwound: {}", status["cluster"]["reason"]));
                assert!(held.is_empty(), "{name} failed: nothing of it may be left: {held:?}\n{status:#}");
            }
            other => panic!("{name}: create ended in phase {other}: {status:#}"),
        }
        ids.insert(name.clone(), cluster_id);
    }

    // The deletes, all at once, faults still on.
    let children: Vec<_> =
        names.iter().map(|name| api.spawn_cli(&["--json", "cluster", "delete", name, "--wait"])).collect();
    let outputs: Vec<Output> = children.into_iter().map(|c| c.wait(Duration::from_secs(20 * 60))).collect();
    for (name, out) in names.iter().zip(&outputs) {
        assert!([0, 1, 5].contains(&out.code), "{name}: {out}");
        tally.deletes += 1;
        let status = settle(api, name, &mut tally, &mut log);
        assert_eq!(status["cluster"]["phase"], "deleted", "{name}: {status:#}");
        tally.deleted += 1;
        let held = provider.holdings(&ids[name]);
        tally.duplicates += held.duplicates();
        tally.orphans += held.vm_names.len() + held.rules + held.addresses;
    }

    let counts = proxy.counts();
    let faults: Vec<String> = counts.iter().map(|(kind, n)| format!("{} {n}", kind.name())).collect();
    for line in &log {
        eprintln!("faults: {}: {line}", provider.name());
    }
    eprintln!(
        "faults-table | {} | {} ({} refused) | {} | {} | {} | {} | {} | {} | {} | {} of {} calls: {} | {} | {:.0} s |",
        provider.name(),
        tally.creates,
        tally.refused,
        tally.ready,
        tally.unwound,
        tally.deletes,
        tally.deleted,
        tally.orphans,
        tally.duplicates,
        tally.parked,
        counts.values().sum::<u64>(),
        proxy.requests(),
        faults.join(", "),
        settings.seed,
        started.elapsed().as_secs_f64(),
    );
    // The proxy was in the path and did fail calls: a run that met no fault proves nothing.
    assert!(counts.values().sum::<u64>() > 0 && counts[&FaultKind::Throttle] > 0, "{counts:?}");
    tally
}

fn check(tally: &Tally) {
    assert_eq!(tally.ready + tally.unwound, tally.creates, "{tally:?}");
    assert_eq!(tally.deleted, tally.deletes, "{tally:?}");
    assert_eq!((tally.orphans, tally.duplicates), (0, 0), "nothing orphaned, nothing twice: {tally:?}");
}

struct Ec2AtMoto {
    moto: Moto,
}

impl Provider for Ec2AtMoto {
    fn name(&self) -> &'static str {
        "aws (moto)"
    }
    fn region(&self) -> &'static str {
        "us-east-1"
    }
    fn vm_type(&self) -> &'static str {
        "t3.medium"
    }
    fn rules_of_a_cluster(&self) -> usize {
        1
    }
    /// Asked of moto itself, through boto3: instances not terminated, security groups.
    fn holdings(&self, cluster_id: &str) -> Holdings {
        provider_state::at_moto(&self.moto, cluster_id)
    }
}

struct FakeCompute {
    fake: Arc<FakeGce>,
}

impl Provider for FakeCompute {
    fn name(&self) -> &'static str {
        "gcp (fake Compute)"
    }
    fn region(&self) -> &'static str {
        "us-central1"
    }
    fn vm_type(&self) -> &'static str {
        "e2-standard-2"
    }
    fn rules_of_a_cluster(&self) -> usize {
        2
    }
    /// Asked of the fake's inspection API: its instances (in any state) and firewall rules.
    fn holdings(&self, cluster_id: &str) -> Holdings {
        provider_state::at_fake_compute(&self.fake, PROJECT, cluster_id)
    }
}

#[test]
fn clusters_at_moto_come_up_or_unwind_and_go_under_provider_faults() {
    let settings = Settings::from_env(2);
    let moto = Moto::start();
    let proxy = FaultProxy::start(&moto.endpoint, Dialect::Ec2, FaultPlan::spread(settings.seed, settings.rate));
    let kube = SimulatedKube::start(MotoMachines::new(&moto.endpoint, "us-east-1"));
    let api = Api::start_opts(ApiOptions {
        id: "faults-aws".into(),
        hosted: true,
        env: vec![("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url())],
        ..ApiOptions::default()
    });
    proxy.set_enabled(false);
    let out = api.cli_env(
        &[
            "--json",
            "credentials",
            "new",
            "moto-keys",
            "--provider",
            "aws",
            "--endpoint",
            &proxy.url(),
            "--region",
            "us-east-1",
            "--wait",
        ],
        &[("AWS_ACCESS_KEY_ID", "AKIAANYCLOUDFAULTS01"), ("AWS_SECRET_ACCESS_KEY", "moto-faults-secret-access-key")],
    );
    out.expect_code(0);
    proxy.set_enabled(true);
    let provider = Ec2AtMoto { moto };
    let tally = soak(&provider, &api, &proxy, "moto-keys", &settings);
    drop(api);
    drop(kube);
    check(&tally);
}

#[test]
fn clusters_at_the_fake_compute_engine_come_up_or_unwind_and_go_under_provider_faults() {
    let settings = Settings::from_env(2);
    let fake = Arc::new(FakeGce::start());
    let proxy = FaultProxy::start(&fake.url(), Dialect::Compute, FaultPlan::spread(settings.seed, settings.rate));
    let kube = SimulatedKube::start(GceMachines::new(fake.clone(), PROJECT));
    let api = Api::start_opts(ApiOptions {
        id: "faults-gcp".into(),
        hosted: true,
        env: vec![("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url())],
        ..ApiOptions::default()
    });
    proxy.set_enabled(false);
    let key_file = api.scratch().join("service-account.json");
    std::fs::write(&key_file, service_account_json()).unwrap();
    let out = api.cli(&[
        "--json",
        "credentials",
        "new",
        "gce-key",
        "--provider",
        "gcp",
        "--service-account-file",
        key_file.to_str().unwrap(),
        "--endpoint",
        &proxy.url(),
        "--wait",
    ]);
    out.expect_code(0);
    proxy.set_enabled(true);
    let provider = FakeCompute { fake };
    let tally = soak(&provider, &api, &proxy, "gce-key", &settings);
    drop(api);
    drop(kube);
    check(&tally);
}

/// The fault that found duplicates at moto, alone: every answer to a mutating call is lost. The
/// AWS SDK sends RunInstances again after each lost answer and moto (which ignores `ClientToken`)
/// runs an instance each time; the launch retried as the engine would must leave one instance.
#[test]
fn a_launch_whose_answers_are_lost_leaves_one_instance_at_moto() {
    let moto = Moto::start();
    let plan = FaultPlan {
        seed: 1,
        rates: BTreeMap::from([(FaultKind::LostAnswer, 1.0)]),
        hold: Duration::ZERO,
        latency: Duration::ZERO,
    };
    let proxy = FaultProxy::start(&moto.endpoint, Dialect::Ec2, plan);
    let public = PublicPart {
        identity: "AKIAANYCLOUDFAULTS02".to_owned(),
        region: Some("us-east-1".to_owned()),
        endpoint: Some(proxy.url()),
        ..PublicPart::default()
    };
    let cloud = AwsCloud::new(&public, "moto-secret-access-key", "us-east-1");
    let cluster_id = uuid::Uuid::new_v4().to_string();
    let provider = Ec2AtMoto { moto };
    let sent = e2e::block_on(async {
        proxy.set_enabled(false);
        let placement = cloud.placement(&cluster_id, "us-east-1", "t3.medium").await.unwrap();
        let network = cloud.ensure_network(&placement).await.unwrap();
        let spec = LaunchSpec {
            placement: &placement,
            name: "w0".to_owned(),
            role: Role::Worker,
            user_data: "#!/bin/sh\n".to_owned(),
            token: uuid::Uuid::new_v4(),
            network: &network,
            vm_identity: None,
            reads_secret: false,
            address: None,
        };
        proxy.set_enabled(true);
        let lost = cloud.launch(&spec).await;
        assert!(lost.is_err(), "every answer was lost: {lost:?}");
        let sent_twice = provider.holdings(&cluster_id).vm_names;
        assert!(sent_twice.len() > 1, "the SDK's retries made several instances: {sent_twice:?}");

        proxy.set_enabled(false);
        let vm = cloud.launch(&spec).await.unwrap();
        assert_eq!(provider.holdings(&cluster_id).vm_names, ["w0"], "one instance of w0 is left");
        assert_eq!(
            cloud.list_vms(&placement).await.unwrap().iter().map(|v| &v.provider_id).collect::<Vec<_>>(),
            [&vm.provider_id]
        );
        sent_twice.len()
    });
    // Each lost answer was a RunInstances that ran an instance.
    assert_eq!(proxy.counts()[&FaultKind::LostAnswer], u64::try_from(sent).unwrap(), "{:?}", proxy.counts());
}

/// A call to Compute Engine that hangs is abandoned after the client's attempt timeout (30 s),
/// not held until the step's deadline: the proxy holds every request for 90 s, then lets the
/// next ones through. The placement check answers (or fails, to be retried) well before the
/// hold ends.
#[test]
fn a_compute_call_that_hangs_is_abandoned_after_the_attempt_timeout() {
    let fake = FakeGce::start();
    let plan = FaultPlan {
        seed: 1,
        rates: BTreeMap::from([(FaultKind::Timeout, 1.0)]),
        hold: Duration::from_secs(90),
        latency: Duration::ZERO,
    };
    let proxy = FaultProxy::start(&fake.url(), Dialect::Compute, plan);
    let public = PublicPart {
        identity: CLIENT_EMAIL.into(),
        project: Some(PROJECT.into()),
        endpoint: Some(proxy.url()),
        ..PublicPart::default()
    };
    let (elapsed, answer) = e2e::block_on(async {
        let cloud = GcpCloud::new(&public, &service_account_json()).await.unwrap();
        proxy.set_enabled(true);
        let started = Instant::now();
        let asked = cloud.placement("hang-test", "us-central1", "e2-standard-2");
        let lift = async {
            // Held calls stay held; the ones after this go through.
            tokio::time::sleep(Duration::from_secs(2)).await;
            proxy.set_enabled(false);
        };
        let (answer, ()) = tokio::join!(asked, lift);
        (started.elapsed(), answer)
    });
    eprintln!("a hung call ended after {elapsed:?}: {answer:?}");
    assert!(proxy.counts()[&FaultKind::Timeout] >= 1, "{:?}", proxy.counts());
    assert!(elapsed >= Duration::from_secs(29), "answered before the attempt timeout: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(60), "the hung call was held for {elapsed:?}");
    assert!(matches!(answer, Ok(_) | Err(CloudError::Retryable(_))), "{answer:?}");
}
