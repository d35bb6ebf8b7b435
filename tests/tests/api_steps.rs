//! The engine's workflow-author helpers (`anycloud_engine::testing`) applied to `api.deploy` and
//! `api.remove`, in-process (an engine, the workflow and its dependencies; no CLI), at moto and at
//! the fake Google (Compute Engine, Cloud Storage, IAM, Secret Manager), with the tests' VM runner
//! standing in for the VM (neither boots anything: the runner fetches what the deploy shipped
//! through the signed URL of its user-data, checks its SHA-256 and runs it with the unit's
//! arguments, so `wait_until_answers` and `save_hosting_credential` talk to a real API over HTTPS
//! through the pinned CA; what is shipped here is a launcher of the built `anycloud`: see
//! [`stage_binary`]):
//!
//! - `actions_succeed_idempotently` on `api.deploy`: every step run twice still deploys one API:
//!   one live instance, and one launched ever (moto ignores `ClientToken`: the find-by-tag path of
//!   `launch` keeps it at one), one network rule, one reserved address, one identity (IAM role and
//!   instance profile; service account and its project roles), one secret (the API's keys), the
//!   bucket; the record `ready` at the VM's URL;
//! - `action_failure_can_unwind` and `cancel_in_flight_can_unwind` on `api.deploy`: a failure
//!   injected at each step, or a cancel reaching each step in flight, leaves nothing of the API at
//!   the provider, not even the bucket the run created; the record `failed` (it keeps `deploying`
//!   for a failure injected in `pin_placement`, which then runs no code). On GCP this found the
//!   service account `store_keys` makes (the secret's reader) left behind by an unwind that
//!   stopped short of `ensure_vm_identity`'s undo; `store_keys`'s undo now deletes it;
//! - `api.remove` (with `--delete-bucket`) only goes forward (no step has an undo): every step run
//!   twice still removes everything; a removal that failed or was cancelled at a step leaves
//!   exactly what the steps that ran did not remove, the record `ready` until `mark_removed` ran;
//!   a removal run again leaves nothing. Between steps the API is deployed again (same record).
//!
//! What the provider holds is asked of it (boto3, the fakes' inspection), never of anycloud.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anycloud_engine::testing::{
    action_failure_can_unwind, actions_succeed_idempotently, cancel_in_flight_can_unwind, run_to_end,
};
use anycloud_engine::{Registry, Store, Workflow};
use anycloud_tests::e2e::{self, Moto};
use anycloud_tests::fake_google::FakeGoogle;
use anycloud_tests::gcp_test_key::{CLIENT_EMAIL, PROJECT, service_account_json};
use anycloud_tests::simulated_kube::{GceMachines, MotoMachines};
use anycloud_tests::vm_runner::{Launcher, VmRunner, gce_service_account};
use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::cloud::ROLE_TAG;
use anycloud_workflows::db::Db;
use anycloud_workflows::db::credentials::{self, CredentialStatus, NewRecord, PublicPart};
use anycloud_workflows::db::hosted_apis::{self, HostedApi, Phase};
use anycloud_workflows::hosting;
use anycloud_workflows::hosting::binary::{Arch, Sums};
use anycloud_workflows::providers::Clouds;
use anycloud_workflows::providers::endpoint::EndpointPolicy;
use anycloud_workflows::seams::TestSeams;
use anycloud_workflows::secrets::SecretBox;
use anycloud_workflows::workflows::api_deploy::{DeployApi, DeployInput};
use anycloud_workflows::workflows::api_remove::{RemoveApi, RemoveInput};
use anycloud_workflows::workflows::deps::Deps;
use serde::Deserialize;

/// How long a run between two checks may take.
const RUN_END: Duration = Duration::from_secs(180);

const REGION: &str = "us-east-1";
const GCP_REGION: &str = "us-central1";
const HOSTING: &str = "aws-host";
const BUCKET: &str = "steps-api-state";

/// What the provider holds of the (one) API, asked of the provider itself.
#[derive(Debug, Deserialize, PartialEq, Eq)]
struct Held {
    /// Its instances not terminated.
    live: usize,
    /// Every instance it launched (moto's terminated instances, the fake's insert operations).
    launched: usize,
    /// Network rules: security groups named `anycloud-api-*`, firewall rules.
    groups: usize,
    /// Reserved addresses: Elastic IPs tagged with an API's owner id, the fake's `*-api-ip`.
    addresses: usize,
    /// The VM's identity: IAM roles named `anycloud-*`, service accounts other than the deployer's.
    roles: usize,
    /// What gives the VM that identity: instance profiles; on GCP, the accounts other than the
    /// deployer's that the project's policy names.
    profiles: usize,
    /// Secrets Manager's or Secret Manager's secrets.
    secrets: usize,
    /// Whether the bucket exists.
    bucket: bool,
}

impl Held {
    /// Nothing of the API is live (launched instances stay counted).
    fn nothing(&self) -> bool {
        *self == Held { launched: self.launched, ..Held::whole(0, false) }
    }

    /// `n` of each thing an API has (`bucket` aside), as a deploy leaves them.
    fn whole(n: usize, bucket: bool) -> Self {
        Held { live: n, launched: n, groups: n, addresses: n, roles: n, profiles: n, secrets: n, bucket }
    }

    /// One API, as a deploy leaves it (however many instances were launched).
    fn one_api(&self) -> bool {
        *self == Held { launched: self.launched, ..Held::whole(1, true) }
    }
}

/// Asked of moto through boto3.
fn at_moto(moto: &Moto) -> Held {
    const SCRIPT: &str = r#"
import json, os
import boto3
from botocore.exceptions import ClientError
kw = dict(endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
ec2, s3, iam = boto3.client("ec2", **kw), boto3.client("s3", **kw), boto3.client("iam", **kw)
sm = boto3.client("secretsmanager", **kw)
res = ec2.describe_instances(Filters=[{"Name": "tag:anycloud-role", "Values": ["hosted-api"]}])
instances = [i for r in res["Reservations"] for i in r["Instances"]]
def tags(x):
    return {t["Key"]: t["Value"] for t in x.get("Tags", [])}
try:
    s3.head_bucket(Bucket=os.environ["BUCKET"])
    bucket = True
except ClientError:
    bucket = False
print(json.dumps({
    "live": sum(1 for i in instances if i["State"]["Name"] != "terminated"),
    "launched": len(instances),
    "groups": len(ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["anycloud-api-*"]}])["SecurityGroups"]),
    "addresses": sum(1 for a in ec2.describe_addresses()["Addresses"] if tags(a).get("anycloud-cluster", "").startswith("api-")),
    "roles": sum(1 for r in iam.list_roles()["Roles"] if r["RoleName"].startswith("anycloud-")),
    "profiles": len(iam.list_instance_profiles()["InstanceProfiles"]),
    "secrets": len(sm.list_secrets()["SecretList"]),
    "bucket": bucket,
}))
"#;
    serde_json::from_str(moto.python(SCRIPT, &[("BUCKET", BUCKET)]).trim()).unwrap()
}

/// Asked of the fakes behind the Google endpoint.
fn at_google(google: &FakeGoogle) -> Held {
    let gce = google.gce();
    let accounts: Vec<String> =
        google.iam().accounts(PROJECT).into_iter().filter(|account| account != CLIENT_EMAIL).collect();
    let mut bound: Vec<String> = google
        .iam()
        .project_bindings(PROJECT)
        .iter()
        .flat_map(|binding| binding["members"].as_array().cloned().unwrap_or_default())
        .filter_map(|member| member.as_str().and_then(|m| m.strip_prefix("serviceAccount:")).map(str::to_owned))
        .filter(|account| account != CLIENT_EMAIL)
        .collect();
    bound.sort();
    bound.dedup();
    Held {
        live: gce.live_instances(PROJECT, ROLE_TAG, "hosted-api").len(),
        launched: gce
            .operations(PROJECT)
            .iter()
            .filter(|op| op["operationType"] == "insert")
            .filter(|op| op["targetLink"].as_str().is_some_and(|link| link.contains("/instances/")))
            .count(),
        groups: gce.firewalls(PROJECT).len(),
        addresses: gce.addresses(PROJECT).iter().filter(|a| a["name"].as_str().unwrap().ends_with("-api-ip")).count(),
        roles: accounts.len(),
        profiles: bound.len(),
        secrets: google.secrets().names().len(),
        bucket: google.gcs().bucket_exists(BUCKET),
    }
}

/// The provider the API is deployed on, and what the test asks of it.
enum Peer {
    Aws(Moto),
    Gcp(FakeGoogle),
}

impl Peer {
    fn held(&self) -> Held {
        match self {
            Peer::Aws(moto) => at_moto(moto),
            Peer::Gcp(google) => at_google(google),
        }
    }
}

/// A store, the workflows' dependencies, a valid hosting credential at the provider, the API's
/// record (as `deploy_api` writes it) and the VM runner.
struct Harness {
    store: Store,
    deps: Deps,
    api_id: String,
    peer: Peer,
    runner: VmRunner,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// On AWS (moto) or GCP (the fake Compute Engine, Cloud Storage, IAM and Secret Manager).
    async fn new(gcp: bool) -> Self {
        let dir = tempfile::Builder::new().prefix("anycloud-api-steps-").tempdir().unwrap();
        let store = Store::sqlite(&dir.path().join("anycloud.db")).await.unwrap();
        let db = Db::open(&store).await.unwrap();
        let sealer = SecretBox::load_or_create(dir.path()).unwrap();
        let binaries = dir.path().join("binaries");
        let sha256 = stage_binary(&binaries);
        let (peer, credential, runner) = if gcp { on_gcp(dir.path()) } else { on_aws(dir.path()) };
        let (provider, region, vm_type, scheme) = if gcp {
            (ProviderKind::Gcp, GCP_REGION, "e2-medium", "gs")
        } else {
            (ProviderKind::Aws, REGION, "t3.medium", "s3")
        };

        let now = anycloud_workflows::now_ms();
        let bucket = format!("{scheme}://{BUCKET}/");
        let api = HostedApi {
            id: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
            name: "steps-api".to_owned(),
            credential: HOSTING.to_owned(),
            provider,
            storage_credential: HOSTING.to_owned(),
            region: region.to_owned(),
            vm_type: vm_type.to_owned(),
            binary_url: format!("{bucket}{}", hosting::binary::object_key("", &sha256)),
            bucket,
            port: i64::from(e2e::free_port()),
            binary_sha256: Some(hosting::binary::format_sums(&Sums::from([(Arch::X86_64, sha256)]))),
            phase: Phase::Deploying,
            reason: None,
            url: None,
            ca_pem: None,
            bucket_made: None,
            workflow_id: Some("none".to_owned()),
            created_at: now,
            updated_at: now,
        };
        let mut tx = store.begin_write().await.unwrap();
        credentials::insert_in(&mut tx, &credential, &sealer, &uuid::Uuid::new_v4().to_string(), now).await.unwrap();
        hosted_apis::insert_in(&mut tx, &api).await.unwrap();
        tx.commit().await.unwrap();
        credentials::set_status(&db, HOSTING, CredentialStatus::Valid, None, now).await.unwrap();

        let deps = Deps {
            db,
            sealer,
            // moto and the fakes are plain HTTP on loopback: what --allow-insecure-endpoints allows.
            clouds: Clouds::new(None).with_endpoint_policy(EndpointPolicy::AllowInsecure),
            seams: TestSeams {
                hosted_api_address: Some(anycloud_tests::vm_runner::ADDRESS.to_owned()),
                ..TestSeams::default()
            },
            api_address: None,
            kube_clients: Default::default(),
            binaries,
        };
        Self { store, deps, api_id: api.id, peer, runner, _dir: dir }
    }

    fn deploy(&self) -> (Arc<DeployApi>, DeployInput) {
        let input = DeployInput { api_id: self.api_id.clone(), name: "steps-api".to_owned() };
        (Arc::new(DeployApi { deps: self.deps.clone() }), input)
    }

    fn remove(&self) -> (Arc<RemoveApi>, RemoveInput) {
        let input = RemoveInput {
            api_id: self.api_id.clone(),
            name: "steps-api".to_owned(),
            bucket: format!("s3://{BUCKET}/"),
            delete_bucket: true,
        };
        (Arc::new(RemoveApi { deps: self.deps.clone() }), input)
    }

    async fn record(&self) -> HostedApi {
        hosted_apis::get(&self.deps.db, &self.api_id).await.unwrap().unwrap()
    }

    async fn phase_is(&self, want: Phase) -> Result<(), String> {
        let record = self.record().await;
        if record.phase != want {
            return Err(format!(
                "the record is `{}`, not `{}`: {:?}",
                record.phase.as_str(),
                want.as_str(),
                record.reason
            ));
        }
        Ok(())
    }

    /// moto holds one API, the record says `ready` at its URL, and the runner serves it.
    async fn one_api(&self) -> Result<(), String> {
        let held = self.peer.held();
        if !held.one_api() {
            return Err(format!("the provider holds {held:?}, not one API"));
        }
        self.phase_is(Phase::Ready).await?;
        let record = self.record().await;
        let port = record.port;
        if record.url.as_deref() != Some(&format!("https://127.0.0.1:{port}")) {
            return Err(format!("the record's URL is {:?}", record.url));
        }
        if self.runner.running().len() != 1 {
            return Err(format!("the runner serves {:?}", self.runner.running()));
        }
        Ok(())
    }

    /// After a deploy that failed or was cancelled at `step`: nothing of the API at moto, no VM
    /// process, the record `failed` (`deploying` for a failure injected in `pin_placement`).
    async fn deploy_unwound(&self, step: &str, cancelled: bool) -> Result<(), String> {
        let held = self.peer.held();
        if !held.nothing() {
            return Err(format!("the provider still holds {held:?}"));
        }
        let gone = wait_for(Duration::from_secs(10), || self.runner.running().is_empty()).await;
        if !gone {
            return Err(format!("the runner still serves {:?}", self.runner.running()));
        }
        self.phase_is(if step == "pin_placement" && !cancelled { Phase::Deploying } else { Phase::Failed }).await
    }
}

/// moto, a hosting credential there, and the VM runner, its VMs reaching moto with keys that
/// stand in for their instance profile.
fn on_aws(dir: &Path) -> (Peer, NewRecord, VmRunner) {
    let moto = Moto::start();
    let public = PublicPart {
        identity: "AKIAANYCLOUDHOSTING1".to_owned(),
        region: Some(REGION.to_owned()),
        endpoint: Some(moto.endpoint.clone()),
        ..PublicPart::default()
    };
    let credential = NewRecord {
        name: HOSTING.to_owned(),
        provider: ProviderKind::Aws,
        public,
        secret: "moto-hosting-secret-key".to_owned(),
    };
    let runner = VmRunner::start(
        MotoMachines::new(&moto.endpoint, REGION),
        Launcher {
            env: vec![
                ("AWS_ACCESS_KEY_ID".into(), "AKIAANYCLOUDVMROLE01".into()),
                ("AWS_SECRET_ACCESS_KEY".into(), "stands-in-for-the-instance-profile".into()),
                ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
                ("NO_PROXY".into(), "127.0.0.1,localhost".into()),
            ],
            scratch: dir.join("vms"),
            identity: None,
        },
    );
    (Peer::Aws(moto), credential, runner)
}

/// The fake Google endpoint, a hosting credential of the tests' service account there, and the VM
/// runner, each VM's identity a key of the service account its instance runs as.
fn on_gcp(dir: &Path) -> (Peer, NewRecord, VmRunner) {
    // It runs a runtime of its own: started outside the test's.
    let google = std::thread::spawn(FakeGoogle::start).join().unwrap();
    let public = PublicPart {
        identity: CLIENT_EMAIL.to_owned(),
        project: Some(PROJECT.to_owned()),
        endpoint: Some(google.endpoint()),
        ..PublicPart::default()
    };
    let credential =
        NewRecord { name: HOSTING.to_owned(), provider: ProviderKind::Gcp, public, secret: service_account_json() };
    let runner = VmRunner::start(
        GceMachines::new(google.gce().clone(), PROJECT),
        Launcher {
            env: vec![("NO_PROXY".into(), "127.0.0.1,localhost".into())],
            scratch: dir.join("vms"),
            identity: Some(gce_service_account(google.gce().clone(), PROJECT, dir.join("vm-keys"))),
        },
    );
    (Peer::Gcp(google), credential, runner)
}

/// Stages what the deploy ships where the deploying API keeps it, and returns its SHA-256: a
/// launcher of the built `anycloud` binary (`exec ANYCLOUD "$@"`), so that the VM runner, which
/// fetches and checks it as the boot script would, runs the real API. Not the binary itself: a
/// debug build is 200 MB (113 MB stripped), and each of the ~20 runs of the matrices that reach
/// `ship_binary` would upload it to moto again (its bucket is deleted by each unwind), ~20 s
/// apiece. `tests/api_deploy_aws.rs` ships and serves the binary itself.
fn stage_binary(binaries: &Path) -> String {
    std::fs::create_dir_all(binaries).unwrap();
    let launcher = format!("#!/bin/sh\nexec '{}' \"$@\"\n", e2e::anycloud_bin().display());
    let sha256 = hosting::binary::sha256_hex(launcher.as_bytes());
    std::fs::write(hosting::binary::staged_path(binaries, &sha256), launcher).unwrap();
    sha256
}

async fn wait_for(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// api.deploy

async fn every_deploy_step_twice_still_deploys_one_api(gcp: bool) {
    let started = Instant::now();
    let h = Harness::new(gcp).await;
    let (deploy, input) = h.deploy();
    let output = actions_succeed_idempotently(&h.store, deploy, &input).await.unwrap();
    let port = h.record().await.port;
    assert_eq!(output.url, format!("https://127.0.0.1:{port}"));
    h.one_api().await.unwrap();
    assert_eq!(h.peer.held().launched, 1, "one instance launched, ever");
    eprintln!("{} deploy twice-run took {:?}", provider(gcp), started.elapsed());
}

async fn deploy_failed_or_cancelled_at_every_step_leaves_nothing(gcp: bool) {
    let started = Instant::now();
    let h = Harness::new(gcp).await;
    let (deploy, input) = h.deploy();
    let failed = |step: &'static str| {
        let h = &h;
        async move {
            h.deploy_unwound(step, false).await?;
            eprintln!("deploy failing at `{step}`: clean after {:?}", started.elapsed());
            Ok(())
        }
    };
    action_failure_can_unwind(&h.store, deploy.clone(), &input, failed).await.unwrap();
    let cancelled = |step: &'static str| {
        let h = &h;
        async move {
            h.deploy_unwound(step, true).await?;
            eprintln!("deploy cancelled in `{step}`: clean after {:?}", started.elapsed());
            Ok(())
        }
    };
    cancel_in_flight_can_unwind(&h.store, deploy, &input, cancelled).await.unwrap();
    // The matrices reached the VM: instances were launched (every one terminated now).
    let held = h.peer.held();
    assert!(held.launched >= 4, "the matrices launched only {held:?}");
    eprintln!("{} deploy matrices took {:?}", provider(gcp), started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// api.remove
//
// A removal only goes forward: no step has an undo (workflows/src/workflows/api_remove.rs), so "clean"
// after a removal that failed or was cancelled at a step is what the workflow promises instead:
// the steps before it (and, cancelled in flight, that step itself) removed what each removes and
// nothing else went; the record is not `removed` before `mark_removed` ran (it keeps `ready`:
// no `remove_api` operation wrote `removing` here); and removing again, a new run, leaves nothing.
// The check then deploys the API again (the same record) for the next step.

/// The steps of `api.remove`, in order.
const REMOVE_STEPS: [&str; 7] = [
    "terminate_vm",
    "release_address",
    "delete_network",
    "delete_vm_identity",
    "delete_storage_secret",
    "delete_bucket",
    "mark_removed",
];

impl Harness {
    /// What a removal that stopped at `step` (failed there, or `cancelled` while it ran) left.
    async fn remove_stopped_at(&self, step: &str, cancelled: bool) -> Result<(), String> {
        let at = REMOVE_STEPS.iter().position(|s| *s == step).ok_or_else(|| format!("no step `{step}`"))?;
        let done = |name: &str| {
            let index = REMOVE_STEPS.iter().position(|s| *s == name).unwrap();
            index < at || (cancelled && index == at)
        };
        let left = |removed_by: &str| usize::from(!done(removed_by));
        let held = self.peer.held();
        let want = Held {
            live: left("terminate_vm"),
            launched: held.launched,
            groups: left("delete_network"),
            addresses: left("release_address"),
            roles: left("delete_vm_identity"),
            profiles: left("delete_vm_identity"),
            // The one secret is the API's keys: it goes with the bucket.
            secrets: left("delete_bucket"),
            bucket: !done("delete_bucket"),
        };
        if held != want {
            return Err(format!("the provider holds {held:?}; the steps that ran leave {want:?}"));
        }
        self.phase_is(if done("mark_removed") { Phase::Removed } else { Phase::Ready }).await
    }

    /// Nothing of the API at moto, no VM process, the record `removed`.
    async fn removed(&self) -> Result<(), String> {
        let held = self.peer.held();
        if !held.nothing() {
            return Err(format!("the provider still holds {held:?}"));
        }
        if !wait_for(Duration::from_secs(10), || self.runner.running().is_empty()).await {
            return Err(format!("the runner still serves {:?}", self.runner.running()));
        }
        self.phase_is(Phase::Removed).await
    }

    /// `check_clean` of the removal matrices: what the stopped run left, then a new removal
    /// leaves nothing; then the API is deployed again for the next step.
    async fn remove_stopped_then_removed_again(&self, step: &str, cancelled: bool) -> Result<(), String> {
        self.remove_stopped_at(step, cancelled).await?;
        let (remove, input) = self.remove();
        run_to_end(&self.store, remove, &input, RUN_END).await.map_err(|err| format!("removing again: {err}"))?;
        self.removed().await.map_err(|err| format!("removed again: {err}"))?;
        self.deployed_again().await.map_err(|err| format!("deploying again for the next step: {err}"))
    }

    /// Deploys the API (again) with the real engine: one of everything at moto.
    async fn deployed_again(&self) -> Result<(), String> {
        let (deploy, input) = self.deploy();
        run_to_end(&self.store, deploy, &input, RUN_END).await?;
        let held = self.peer.held();
        if !held.one_api() {
            return Err(format!("after a deploy the provider holds {held:?}"));
        }
        self.phase_is(Phase::Ready).await
    }
}

async fn every_remove_step_twice_still_removes_everything(gcp: bool) {
    let started = Instant::now();
    let h = Harness::new(gcp).await;
    h.deployed_again().await.unwrap();
    let (remove, input) = h.remove();
    let output = actions_succeed_idempotently(&h.store, remove, &input).await.unwrap();
    assert_eq!(output.kept_bucket, None, "--delete-bucket deletes the bucket");
    h.removed().await.unwrap();
    eprintln!("{} remove twice-run took {:?}", provider(gcp), started.elapsed());
}

async fn remove_failed_or_cancelled_at_every_step_stops_there_and_removes_again(gcp: bool) {
    let started = Instant::now();
    let h = Harness::new(gcp).await;
    let (remove, input) = h.remove();
    let steps = Registry::new().with(remove.clone()).step_names(RemoveApi::KIND, RemoveApi::VERSION);
    assert_eq!(steps.as_deref(), Some(&REMOVE_STEPS[..]), "the matrices' list of steps is the workflow's");
    h.deployed_again().await.unwrap();
    let failed = |step: &'static str| {
        let h = &h;
        async move {
            h.remove_stopped_then_removed_again(step, false).await?;
            eprintln!("remove failing at `{step}`: as promised after {:?}", started.elapsed());
            Ok(())
        }
    };
    action_failure_can_unwind(&h.store, remove.clone(), &input, failed).await.unwrap();
    let cancelled = |step: &'static str| {
        let h = &h;
        async move {
            h.remove_stopped_then_removed_again(step, true).await?;
            eprintln!("remove cancelled in `{step}`: as promised after {:?}", started.elapsed());
            Ok(())
        }
    };
    cancel_in_flight_can_unwind(&h.store, remove.clone(), &input, cancelled).await.unwrap();
    // The last check deployed the API again: remove it, leaving nothing.
    run_to_end(&h.store, remove, &input, RUN_END).await.unwrap();
    h.removed().await.unwrap();
    eprintln!("{} remove matrices took {:?}", provider(gcp), started.elapsed());
}

fn provider(gcp: bool) -> &'static str {
    if gcp { "gcp" } else { "aws" }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_every_deploy_step_twice_still_deploys_one_api() {
    every_deploy_step_twice_still_deploys_one_api(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_deploy_failed_or_cancelled_at_every_step_leaves_nothing() {
    deploy_failed_or_cancelled_at_every_step_leaves_nothing(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_every_remove_step_twice_still_removes_everything() {
    every_remove_step_twice_still_removes_everything(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_remove_failed_or_cancelled_at_every_step_stops_there_and_removes_again() {
    remove_failed_or_cancelled_at_every_step_stops_there_and_removes_again(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcp_every_deploy_step_twice_still_deploys_one_api() {
    every_deploy_step_twice_still_deploys_one_api(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcp_deploy_failed_or_cancelled_at_every_step_leaves_nothing() {
    deploy_failed_or_cancelled_at_every_step_leaves_nothing(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcp_every_remove_step_twice_still_removes_everything() {
    every_remove_step_twice_still_removes_everything(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcp_remove_failed_or_cancelled_at_every_step_stops_there_and_removes_again() {
    remove_failed_or_cancelled_at_every_step_stops_there_and_removes_again(true).await;
}
