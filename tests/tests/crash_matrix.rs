//! The crash matrix: SIGKILL of the hosted API at a seeded random moment of every workflow kind,
//! on SQLite and PostgreSQL, on the simulated cloud, moto and the fake Compute server; after each
//! kill the API restarts (same id, port, data directory and database), the workflow is waited to
//! its end, and the provider's own state ([`provider_state`], never anycloud's record) is
//! compared with what that end says.
//!
//! One round kills the API once in each of, in turn:
//!
//! 1. `credentials.verify` of a new credential: it ends `valid`;
//! 2. `cluster.create` (one worker): `ready` with exactly `cp` and `w0` live at the provider, each
//!    launched once, and the cluster's network rules; anycloud's record names the same VMs;
//! 3. `job.run` of a job that takes a secret, appends a line to a file and prints two (one with
//!    the secret's value): the kill lands inside the secret's apply (the seam holds `apply`
//!    between the Kubernetes Secret and the Job; the kill comes at a random moment of that
//!    hold): `completed`, exit 0, both lines in its logs, the file written once, one Secret;
//! 4. `service.deploy` of one replica serving `v1`: `running` on revision 1, the ClusterIP answers
//!    `v1`, one server process;
//! 5. `service.upgrade` to `v2`: `running` on the revision it ends on (2, or 1 if rolled back), the
//!    ClusterIP answers that revision's version, one server process;
//! 6. `service.terminate` of that service: the run `succeeded`, the service `terminated`, none of
//!    its server processes left;
//! 7. `cluster.delete`: `deleted`, nothing of it live;
//! 8. the unwind of a cancelled `cluster.create` (the cancel at a random moment of the create, the
//!    kill at a random moment after it): `cancelled`, the cluster `failed` and nothing of it live
//!    (or `ready` and exact, when the create ended before the cancel);
//! 9. at moto and the fake Google only (the simulated cloud hosts an API as a local process, not
//!    through `api.deploy`): `api.deploy` of an API on the round's credential, its VM served by
//!    the tests' [`VmRunner`]: the run `succeeded`, the CLI's `api serve` ends 0, and the provider
//!    holds exactly one VM (launched once), its reserved address, its network rule, the bucket,
//!    one VM identity (an IAM role and instance profile; a service account) and one keys' secret;
//! 10. at moto and the fake Google only: `api.remove` of it with its bucket (`api delete
//!    --delete-bucket`): the run `succeeded` and none of the above is left.
//!
//! Every kind but `credentials.verify` (whose run is over in tens of milliseconds) is killed a
//! second time during the recovery of the first kill: the API restarts, and at a random moment of
//! its recovery it is SIGKILLed again and restarted again; the end is checked once, after both.
//! The second kill is its own line, `KIND (2nd kill, in recovery)`.
//!
//! Where each kill landed is read from the database after the kill (the run's phase and step, or
//! "after end"), and printed as a `soak-kill` line; `scripts/soak` tallies them into the table of
//! docs/reliability.md ("Kills at every workflow"). The kill moments come from a seeded RNG, one
//! stream per (seed, provider and store, round), so a round replays alone:
//!
//! - `ANYCLOUD_SOAK_ROUNDS` rounds per test (1 by default: 15 kills at the simulated cloud, 19 at
//!   moto and at the fake Google, 106 in all);
//! - `ANYCLOUD_SOAK_SEED` the seed (20261204 by default);
//! - `ANYCLOUD_SOAK_ROUND` only that round;
//! - `ANYCLOUD_SOAK_ONLY` only that provider and store (`sim-sqlite`, `aws-postgres`, ...).
//!
//! A failure names the seed, round, workflow and kill delay that replay it.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, ApiOptions, Moto, PgDatabase, wait_until};
use anycloud_tests::fake_google::FakeGoogle;
use anycloud_tests::gcp_test_key::{CLIENT_EMAIL, PROJECT, service_account_json};
use anycloud_tests::provider_state::{self, Holdings};
use anycloud_tests::simulated_kube::{GceMachines, MotoMachines, SimulatedKube};
use anycloud_tests::vm_runner::{Launcher, VmRunner, gce_service_account};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

/// How long the test waits for a workflow to end after the restart.
const END: Duration = Duration::from_secs(180);
/// The seam's pause between a launch's answer and its step's checkpoint.
const PAUSE_AFTER_LAUNCH_MS: &str = "400";
/// The seam's pause between a job's Kubernetes Secret and its Job.
const PAUSE_IN_SECRET_APPLY_MS: u64 = 400;
/// What the API logs as it begins that pause.
const IN_SECRET_APPLY: &str = "pausing between a job's Secrets and its Job";
/// The VMs of a one-worker cluster, by name.
const VM_NAMES: [&str; 2] = ["cp", "w0"];

/// What the environment asks of a run of the matrix.
struct Settings {
    seed: u64,
    rounds: u64,
    round: Option<u64>,
    only: Option<String>,
}

impl Settings {
    fn from_env() -> Self {
        let read = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let number =
            |name: &str| read(name).map(|v| v.parse::<u64>().unwrap_or_else(|_| panic!("{name}={v}: a number")));
        Self {
            seed: number("ANYCLOUD_SOAK_SEED").unwrap_or(20_261_204),
            rounds: number("ANYCLOUD_SOAK_ROUNDS").unwrap_or(1),
            round: number("ANYCLOUD_SOAK_ROUND"),
            only: read("ANYCLOUD_SOAK_ONLY"),
        }
    }

    fn rounds(&self) -> Vec<u64> {
        match self.round {
            Some(round) => vec![round],
            None => (0..self.rounds).collect(),
        }
    }
}

/// The workflow a kill lands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Verify,
    Create,
    Job,
    Deploy,
    Upgrade,
    Terminate,
    Delete,
    Unwind,
    ApiDeploy,
    ApiRemove,
}

impl Kind {
    /// The engine's kind of the run the kill lands in.
    fn run_kind(self) -> &'static str {
        match self {
            Self::Verify => "credentials.verify",
            Self::Create | Self::Unwind => "cluster.create",
            Self::Job => "job.run",
            Self::Deploy => "service.deploy",
            Self::Upgrade => "service.upgrade",
            Self::Terminate => "service.terminate",
            Self::Delete => "cluster.delete",
            Self::ApiDeploy => "api.deploy",
            Self::ApiRemove => "api.remove",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Unwind => "cluster.create (cancelled)",
            other => other.run_kind(),
        }
    }
}

/// The provider a matrix cell runs on, and how to ask it what it holds.
enum Provider {
    Sim,
    Aws { moto: Moto, _kube: SimulatedKube },
    Gcp { google: FakeGoogle, _kube: SimulatedKube },
}

impl Provider {
    fn start(name: &str) -> Self {
        match name {
            "sim" => Self::Sim,
            "aws" => {
                let moto = Moto::start();
                let kube = SimulatedKube::start(MotoMachines::new(&moto.endpoint, "us-east-1"));
                Self::Aws { moto, _kube: kube }
            }
            "gcp" => {
                let google = FakeGoogle::start();
                let kube = SimulatedKube::start(GceMachines::new(google.gce().clone(), PROJECT));
                Self::Gcp { google, _kube: kube }
            }
            other => panic!("no provider {other}"),
        }
    }

    /// The API's extra environment: the crash-test seam that holds each launch step between the
    /// provider's answer and the step's checkpoint (the moment a kill leaves a VM the record does
    /// not name), and the simulated Kubernetes for clusters whose VMs boot nothing.
    fn api_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("ANYCLOUD_TEST_PAUSE_AFTER_LAUNCH_MS".to_owned(), PAUSE_AFTER_LAUNCH_MS.to_owned()),
            ("ANYCLOUD_TEST_PAUSE_IN_SECRET_APPLY_MS".to_owned(), PAUSE_IN_SECRET_APPLY_MS.to_string()),
            // Where the tests' VM runner serves the APIs this one deploys.
            ("ANYCLOUD_TEST_HOSTED_API_ADDRESS".to_owned(), anycloud_tests::vm_runner::ADDRESS.to_owned()),
        ];
        if let Self::Aws { _kube: kube, .. } | Self::Gcp { _kube: kube, .. } = self {
            env.push(("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url()));
        }
        env
    }

    fn placement(&self) -> (&'static str, &'static str) {
        match self {
            Self::Sim => ("sim-east-1", "sim.small"),
            Self::Aws { .. } => ("us-east-1", "t3.medium"),
            Self::Gcp { .. } => ("us-central1", "e2-standard-2"),
        }
    }

    /// Network rules a ready cluster has.
    fn rules_of_a_cluster(&self) -> usize {
        match self {
            Self::Sim | Self::Aws { .. } => 1,
            Self::Gcp { .. } => 2,
        }
    }

    fn holdings(&self, api: &Api, cluster_id: &str) -> Holdings {
        match self {
            Self::Sim => provider_state::at_sim(api, cluster_id),
            Self::Aws { moto, .. } => provider_state::at_moto(moto, cluster_id),
            Self::Gcp { google, .. } => provider_state::at_fake_compute(google.gce(), PROJECT, cluster_id),
        }
    }

    /// `credentials new NAME` without `--wait`: saved, its verification submitted.
    fn new_credential(&self, api: &Api, name: &str) {
        let out = match self {
            Self::Sim => api.cli(&["--json", "credentials", "new", name, "--provider", "sim"]),
            Self::Aws { moto, .. } => api.cli_env(
                &[
                    "--json",
                    "credentials",
                    "new",
                    name,
                    "--provider",
                    "aws",
                    "--endpoint",
                    &moto.endpoint,
                    "--region",
                    "us-east-1",
                ],
                &[
                    ("AWS_ACCESS_KEY_ID", "AKIAANYCLOUDSOAK0001"),
                    ("AWS_SECRET_ACCESS_KEY", "moto-soak-secret-access-key"),
                ],
            ),
            Self::Gcp { google, .. } => {
                let key_file = api.scratch().join("service-account.json");
                std::fs::write(&key_file, service_account_json()).unwrap();
                api.cli(&[
                    "--json",
                    "credentials",
                    "new",
                    name,
                    "--provider",
                    "gcp",
                    "--service-account-file",
                    key_file.to_str().unwrap(),
                    "--endpoint",
                    &google.endpoint(),
                ])
            }
        };
        out.expect_code(0);
    }

    /// The tests' stand-in for the VMs of the APIs this cell deploys (none at the simulated
    /// cloud): it boots the shipped binary of each running instance whose user-data is a hosted
    /// API's boot script, and kills it once its instance is gone.
    fn vm_runner(&self, api: &Api) -> Option<VmRunner> {
        let scratch = api.scratch().join("vms");
        match self {
            Self::Sim => None,
            Self::Aws { moto, _kube: kube } => Some(VmRunner::start(
                MotoMachines::new(&moto.endpoint, "us-east-1"),
                Launcher {
                    env: vec![
                        ("AWS_ACCESS_KEY_ID".into(), "AKIAANYCLOUDSOAKVM01".into()),
                        ("AWS_SECRET_ACCESS_KEY".into(), "stands-in-for-the-instance-profile".into()),
                        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
                        ("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url()),
                        ("NO_PROXY".into(), "127.0.0.1,localhost".into()),
                    ],
                    scratch,
                    identity: None,
                },
            )),
            Self::Gcp { google, _kube: kube } => Some(VmRunner::start(
                GceMachines::new(google.gce().clone(), PROJECT),
                Launcher {
                    env: vec![
                        ("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url()),
                        ("NO_PROXY".into(), "127.0.0.1,localhost".into()),
                    ],
                    scratch,
                    identity: Some(gce_service_account(google.gce().clone(), PROJECT, api.scratch().join("vm-keys"))),
                },
            )),
        }
    }

    /// What the provider holds of a hosted API (`api-ID` is what its resources are tagged or
    /// named with), asked of the provider.
    fn api_holdings(&self, api_id: &str, bucket: &str) -> ApiHoldings {
        let tag = format!("api-{api_id}");
        match self {
            Self::Sim => panic!("the simulated cloud deploys no API"),
            Self::Aws { moto, .. } => {
                const SCRIPT: &str = r#"
import json, os
import boto3
from botocore.exceptions import ClientError
kw = dict(endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
s3, iam, sm = boto3.client("s3", **kw), boto3.client("iam", **kw), boto3.client("secretsmanager", **kw)
try:
    s3.head_bucket(Bucket=os.environ["BUCKET"])
    bucket = True
except ClientError:
    bucket = False
roles = [r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"].startswith("anycloud-")]
profiles = [p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]]
secrets = [s["Name"] for s in sm.list_secrets()["SecretList"] if s["Name"].startswith("anycloud/keys-")]
print(json.dumps({"bucket": bucket, "identities": len(roles) + len(profiles), "secrets": len(secrets)}))
"#;
                let held: Value = serde_json::from_str(moto.python(SCRIPT, &[("BUCKET", bucket)]).trim()).unwrap();
                let count = |key: &str| usize::try_from(held[key].as_u64().unwrap()).unwrap();
                ApiHoldings {
                    vm: provider_state::at_moto(moto, &tag),
                    bucket: held["bucket"] == true,
                    identities: count("identities"),
                    secrets: count("secrets"),
                }
            }
            Self::Gcp { google, .. } => ApiHoldings {
                vm: provider_state::at_fake_compute(google.gce(), PROJECT, &tag),
                bucket: google.gcs().bucket_exists(bucket),
                identities: google.iam().accounts(PROJECT).iter().filter(|a| *a != CLIENT_EMAIL).count(),
                secrets: google.secrets().names().len(),
            },
        }
    }
}

/// What a provider holds of a hosted API.
#[derive(Debug)]
struct ApiHoldings {
    /// Its VM, reserved address and network rule.
    vm: Holdings,
    /// Its bucket exists.
    bucket: bool,
    /// Its VM identity: at AWS an IAM role and an instance profile (two), at GCP a service account.
    identities: usize,
    /// Its keys' secret.
    secrets: usize,
}

impl ApiHoldings {
    /// Resources held beyond `expected` (the provider's identities of one API).
    fn beyond(&self, identities: usize) -> usize {
        self.vm.vm_names.len().saturating_sub(1)
            + self.vm.rules.saturating_sub(1)
            + self.vm.addresses.saturating_sub(1)
            + self.identities.saturating_sub(identities)
            + self.secrets.saturating_sub(1)
    }
}

/// One kill: where it landed and what it left.
struct Kill {
    /// `PHASE: STEP` of the run when it was killed, or `after end`.
    landed: String,
    orphans: usize,
    duplicates: usize,
}

/// A kill whose workflow has not been judged yet.
struct Pending {
    /// The workflow, and for a second kill that it came during the recovery of the first.
    label: String,
    delay_ms: u64,
    landed: String,
}

/// One cell of the matrix running: its API, provider and the kills so far.
struct Cell {
    name: String,
    provider: Provider,
    api: Api,
    /// The VMs of the APIs this cell deploys (at moto and the fake Google).
    runner: Option<VmRunner>,
    kills: Vec<Kill>,
    /// The kills of the workflow under way, printed once its end is judged.
    pending: Vec<Pending>,
    /// The kill under way, for a failure's message: the workflow and the kill's delay.
    at: String,
}

impl Cell {
    /// Sleeps `delay_ms`, SIGKILLs the API, reads where the newest run of `kind` was, restarts.
    fn kill(&mut self, kind: Kind, delay_ms: u64) {
        self.at = format!("the kill {delay_ms} ms into {}", kind.name());
        std::thread::sleep(Duration::from_millis(delay_ms));
        self.kill_now(kind.name().to_owned(), kind, delay_ms);
    }

    /// Once the API has restarted from a kill: sleeps `delay_ms` of its recovery, SIGKILLs it
    /// again, reads where the run was, restarts it again.
    fn kill_in_recovery(&mut self, kind: Kind, delay_ms: u64) {
        self.at = format!("{}, then the second kill {delay_ms} ms into its recovery", self.at);
        std::thread::sleep(Duration::from_millis(delay_ms));
        self.kill_now(format!("{} (2nd kill, in recovery)", kind.name()), kind, delay_ms);
    }

    /// Waits until the API has logged `needle` once more than the `seen` times before, sleeps
    /// `delay_ms`, then kills as [`Cell::kill`] does.
    fn kill_after_log(&mut self, kind: Kind, needle: &str, seen: usize, delay_ms: u64) {
        self.at = format!("the kill {delay_ms} ms after `{needle}` in {}", kind.name());
        wait_until(END, needle, || (self.api.logs().matches(needle).count() > seen).then_some(()));
        std::thread::sleep(Duration::from_millis(delay_ms));
        self.kill_now(kind.name().to_owned(), kind, delay_ms);
    }

    fn kill_now(&mut self, label: String, kind: Kind, delay_ms: u64) {
        self.api.kill();
        let state = self
            .api
            .query_strings(&format!(
                "SELECT status || '|' || phase || '|' || COALESCE(current_step, '') FROM engine_runs \
                 WHERE kind = '{}' ORDER BY seq DESC LIMIT 1",
                kind.run_kind()
            ))
            .pop()
            .unwrap_or_else(|| {
                panic!("no {} run in the database after the kill: the acknowledged request was lost", kind.name())
            });
        self.api.restart();
        let mut parts = state.splitn(3, '|');
        let (status, phase, step) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        let landed = if ["succeeded", "failed", "cancelled"].contains(&status) {
            "after end".to_owned()
        } else if step.is_empty() {
            format!("{phase}: {status}")
        } else {
            format!("{phase}: {step}")
        };
        self.pending.push(Pending { label, delay_ms, landed });
    }

    /// Waits until the newest run of `kind` has ended; its status.
    fn run_end(&self, kind: Kind) -> String {
        let sql =
            format!("SELECT status FROM engine_runs WHERE kind = '{}' ORDER BY seq DESC LIMIT 1", kind.run_kind());
        wait_until(END, &format!("the {} run to end", kind.name()), || {
            let status = self.api.query_strings(&sql).pop()?;
            ["succeeded", "failed", "cancelled"].contains(&status.as_str()).then_some(status)
        })
    }

    /// How many runs of `kind` there are.
    fn runs_of(&self, kind: Kind) -> usize {
        self.api.query_strings(&format!("SELECT id FROM engine_runs WHERE kind = '{}'", kind.run_kind())).len()
    }

    /// Prints a table line for each kill of the workflow just ended (each with the verdict of that
    /// end), then fails the test if the provider's state is not what the workflow's end says.
    fn record(&mut self, outcome: &str, verdict: Verdict) {
        for kill in std::mem::take(&mut self.pending) {
            eprintln!(
                "soak-kill | {} | {} | {} ms | {} | {outcome} | {} | {} |",
                self.name, kill.label, kill.delay_ms, kill.landed, verdict.orphans, verdict.duplicates
            );
            self.kills.push(Kill { landed: kill.landed, orphans: verdict.orphans, duplicates: verdict.duplicates });
        }
        if let Some(failure) = verdict.failure {
            panic!("{failure}");
        }
    }

    /// What the command lines of this cell's job and service processes contain: its name and
    /// the test process's id, so that no other run's leftovers are counted or killed.
    fn marker(&self) -> String {
        format!("anycloud-soak-{}-{}", self.name, std::process::id())
    }

    fn status(&self, name: &str) -> Value {
        let out = self.api.cli(&["--json", "status", name]);
        out.expect_code(0);
        out.json()
    }

    fn cluster_status(&self, name: &str) -> Value {
        let out = self.api.cli(&["--json", "cluster", "status", name]);
        out.expect_code(0);
        out.json()
    }

    /// Waits for `thing` (`cluster/NAME`, `deployment/NAME`) to settle; its `wait` exit code.
    fn wait(&self, thing: &str) -> i32 {
        let out = self.api.spawn_cli(&["wait", thing, "--timeout", "3m"]).wait(END + Duration::from_secs(10));
        assert!([0, 1].contains(&out.code), "`wait {thing}`: {out}");
        out.code
    }

    fn create_cluster(&self, name: &str, credential: &str) -> (String, String) {
        let (region, vm_type) = self.provider.placement();
        let mut args = vec!["--json"];
        args.extend(e2e::cluster_create(name, credential, region, vm_type, "1", "1"));
        let out = self.api.cli(&args);
        out.expect_code(0);
        let created = out.json();
        (created["cluster"]["id"].as_str().unwrap().to_owned(), created["workflow_id"].as_str().unwrap().to_owned())
    }

    /// What the provider holds of a ready cluster against what it should: exactly its VMs, each
    /// launched once, all in anycloud's record, and its network rules.
    fn ready_and_exact(&self, name: &str, cluster_id: &str) -> Verdict {
        let status = self.cluster_status(name);
        let held = self.provider.holdings(&self.api, cluster_id);
        let mut recorded: Vec<&str> =
            status["vms"].as_array().unwrap().iter().map(|vm| vm["name"].as_str().unwrap()).collect();
        recorded.sort_unstable();
        let extra_vms = held.vm_names.iter().filter(|vm| !VM_NAMES.contains(&vm.as_str())).count();
        let verdict = Verdict {
            orphans: extra_vms
                + held.rules.saturating_sub(self.provider.rules_of_a_cluster())
                + held.addresses.saturating_sub(1),
            duplicates: held.duplicates() + held.relaunched(),
            failure: None,
        };
        let failure = if status["cluster"]["phase"] != "ready" {
            format!("{name} is not ready: {status:#}")
        } else if held.sorted_names() != VM_NAMES
            || held.rules != self.provider.rules_of_a_cluster()
            || held.addresses != 1
        {
            format!("{name} is ready, the provider holds otherwise: {held:?}")
        } else if held.relaunched() > 0 {
            format!("{name}: a VM was launched twice: {held:?}")
        } else if recorded != VM_NAMES {
            format!("anycloud's record of {name} is not the provider's {held:?}: {status:#}")
        } else {
            return verdict;
        };
        Verdict { failure: Some(failure), ..verdict }
    }

    /// A deployed API holds exactly its VM (launched once), reserved address, network rule,
    /// bucket, VM identity and keys' secret at the provider.
    fn api_deployed(&self, api_id: &str, bucket: &str) -> Verdict {
        let held = self.provider.api_holdings(api_id, bucket);
        let identities = if matches!(self.provider, Provider::Aws { .. }) { 2 } else { 1 };
        let exact = held.vm.sorted_names() == ["api"]
            && held.vm.rules == 1
            && held.vm.addresses == 1
            && held.bucket
            && held.identities == identities
            && held.secrets == 1;
        let failure = (!exact || held.vm.relaunched() > 0).then(|| {
            format!("API {api_id} is ready; the provider should hold exactly its one VM (launched once), address, rule, bucket, identity and secret: {held:?}")
        });
        Verdict { orphans: held.beyond(identities), duplicates: held.vm.duplicates() + held.vm.relaunched(), failure }
    }

    /// Nothing of a removed API (removed with its bucket) may be left at the provider.
    fn api_removed(&self, api_id: &str, bucket: &str) -> Verdict {
        let held = self.provider.api_holdings(api_id, bucket);
        let empty = held.vm.is_empty() && !held.bucket && held.identities == 0 && held.secrets == 0;
        let failure = (!empty || held.vm.relaunched() > 0)
            .then(|| format!("nothing of API {api_id} may be left at the provider, its VM launched once: {held:?}"));
        Verdict {
            orphans: held.vm.vm_names.len()
                + held.vm.rules
                + held.vm.addresses
                + usize::from(held.bucket)
                + held.identities
                + held.secrets,
            duplicates: held.vm.relaunched(),
            failure,
        }
    }

    /// Nothing of the cluster may be live at the provider, and no VM was launched twice.
    fn nothing_left(&self, name: &str, cluster_id: &str) -> Verdict {
        let held = self.provider.holdings(&self.api, cluster_id);
        let failure = (!held.is_empty() || held.relaunched() > 0)
            .then(|| format!("nothing of {name} may be left at the provider, each VM launched once: {held:?}"));
        Verdict { orphans: held.vm_names.len() + held.rules + held.addresses, duplicates: held.relaunched(), failure }
    }
}

/// What the provider's state says of a workflow's end.
#[derive(Default)]
struct Verdict {
    /// Provider resources the end does not account for.
    orphans: usize,
    /// VMs launched more than once, or live more than once.
    duplicates: usize,
    /// Why the state is not what the end says.
    failure: Option<String>,
}

impl Drop for Cell {
    /// Kills what the cell's jobs and services left running: at moto and the fake Compute server
    /// their processes belong to the test's simulated Kubernetes, not to the API's data directory,
    /// so a failed round would leave them behind.
    fn drop(&mut self) {
        for pid in e2e::processes_with(&self.marker()) {
            let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
}

/// One GET of `http://addr/`: the body, or why it failed.
fn get(addr: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect(addr).map_err(|err| format!("connect: {err}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n").map_err(|err| format!("write: {err}"))?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|err| format!("read: {err}"))?;
    match answer.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.0 200") => Ok(body.to_owned()),
        _ => Err(format!("answer: {answer:?}")),
    }
}

/// The service's server processes (the kubelet's wrapping shells aside).
fn servers(marker: &str) -> Vec<u32> {
    e2e::processes_with(marker)
        .into_iter()
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default().starts_with(b"python3\0"))
        .collect()
}

/// The kill delays of one round, drawn in a fixed order from its own stream.
struct Delays {
    rng: StdRng,
}

impl Delays {
    fn of(seed: u64, cell: &str, round: u64) -> Self {
        let cell_number = cell.bytes().fold(0_u64, |sum, byte| sum.wrapping_mul(31).wrapping_add(u64::from(byte)));
        Self { rng: StdRng::seed_from_u64(seed ^ cell_number.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round) }
    }

    fn within(&mut self, window_ms: u64) -> u64 {
        self.rng.random_range(0..=window_ms)
    }
}

/// One round: a kill in each workflow kind, and a second one during the recovery of most.
fn round(cell: &mut Cell, delays: &mut Delays, round: u64) {
    let provider_name = cell.name.split('-').next().unwrap().to_owned();
    let windows = Windows::of(&provider_name);
    let credential = format!("k{round}");
    let cluster = format!("c{round}");
    let job = format!("j{round}");
    let service = format!("web{round}");
    let doomed = format!("u{round}");
    let marker = format!("{}-{round}", cell.marker());

    // 1. credentials.verify.
    let delay = delays.within(windows.verify);
    let kind = Kind::Verify;
    cell.provider.new_credential(&cell.api, &credential);
    cell.kill(kind, delay);
    let verdict = wait_until(END, "the credential's verdict", || {
        let found = cell.api.credential(&credential);
        (found["status"] != "verifying").then_some(found)
    });
    assert_eq!(verdict["status"], "valid", "{verdict:#}");
    cell.record("valid", Verdict::default());

    // 2. cluster.create.
    let (delay, again) = (delays.within(windows.create), delays.within(windows.create));
    let kind = Kind::Create;
    let (cluster_id, _) = cell.create_cluster(&cluster, &credential);
    cell.kill(kind, delay);
    cell.kill_in_recovery(kind, again);
    assert_eq!(cell.wait(&format!("cluster/{cluster}")), 0, "{cluster} did not end ready");
    let verdict = cell.ready_and_exact(&cluster, &cluster_id);
    cell.record("ready", verdict);

    // 3. job.run: the job takes a secret, writes a line to a file once, and prints two; the kill
    // lands inside the secret's apply.
    let (delay, again) = (delays.within(PAUSE_IN_SECRET_APPLY_MS), delays.within(windows.job));
    let kind = Kind::Job;
    let ran = cell.api.scratch().join(format!("{job}.ran"));
    let script = format!("echo start $TOKEN; sleep 0.5; echo ran >> {}; echo end", ran.display());
    let job_marker = format!("{marker}-job");
    let secret = format!("s{round}");
    cell.api.cli(&["secret", "new", &secret, "--from-literal", &format!("TOKEN=t{round}")]).expect_code(0);
    let seen = cell.api.logs().matches(IN_SECRET_APPLY).count();
    cell.api
        .cli(&[
            "job",
            "python:3.12",
            "--cluster",
            &cluster,
            "-i",
            &job,
            "--secret",
            &secret,
            "--",
            "sh",
            "-c",
            &script,
            &job_marker,
        ])
        .expect_code(0);
    cell.kill_after_log(kind, IN_SECRET_APPLY, seen, delay);
    cell.kill_in_recovery(kind, again);
    assert_eq!(cell.wait(&format!("deployment/{job}")), 0, "{job} did not complete");
    let detail = cell.status(&job);
    assert_eq!(detail["state"], "completed", "{detail:#}");
    assert_eq!(detail["deployment"]["exit_code"], 0, "{detail:#}");
    assert_eq!(cell.api.cli(&["logs", &job]).stdout, format!("start t{round}\nend\n"), "{job}'s logs");
    let runs = std::fs::read_to_string(&ran).unwrap_or_default().lines().count();
    assert_eq!(runs, 1, "{job}'s command ran {runs} times");
    cell.record("completed", Verdict::default());

    // 4. service.deploy: one replica serving v1.
    let (delay, again) = (delays.within(windows.deploy), delays.within(windows.deploy));
    let kind = Kind::Deploy;
    let web_marker = format!("{marker}-web");
    cell.api
        .cli(&[
            "service",
            "acme/web:1",
            "--cluster",
            &cluster,
            "-i",
            &service,
            "--replicas",
            "1",
            "-e",
            "VERSION=v1",
            "--progress-deadline",
            "60s",
            "--",
            "python3",
            "-c",
            e2e::VERSION_SERVER,
            &web_marker,
        ])
        .expect_code(0);
    cell.kill(kind, delay);
    cell.kill_in_recovery(kind, again);
    assert_eq!(cell.wait(&format!("deployment/{service}")), 0, "{service} did not end running");
    let detail = cell.status(&service);
    assert_eq!((detail["state"].as_str(), detail["deployment"]["revision"].as_i64()), (Some("running"), Some(1)));
    let addr = format!("{}:{}", detail["address"]["cluster_ip"].as_str().unwrap(), detail["address"]["port"]);
    wait_until(END, "the service to answer v1", || (get(&addr).ok()? == "v1").then_some(()));
    let verdict = one_server(&web_marker);
    cell.record("running r1", verdict);

    // 5. service.upgrade to v2.
    let (delay, again) = (delays.within(windows.upgrade), delays.within(windows.upgrade));
    let kind = Kind::Upgrade;
    cell.api.cli(&["deployment", "upgrade", &service, "-e", "VERSION=v2"]).expect_code(0);
    cell.kill(kind, delay);
    cell.kill_in_recovery(kind, again);
    // `status` reads the deployment and its revisions one after the other, not in one snapshot,
    // so the upgrade has settled once both say so: revision 2 ended and the deployment on it, or
    // revision 2 failed and the deployment back on revision 1.
    let ended = wait_until(END, "the upgrade to revision 2 to settle", || {
        let detail = cell.status(&service);
        let second = detail["revisions"].as_array()?.iter().find(|r| r["number"] == 2)?["result"].as_str()?.to_owned();
        let on = detail["deployment"]["revision"].as_i64()?;
        let settled = match second.as_str() {
            "running" => on == 2,
            "failed" | "rolled-back" => on == 1,
            _ => false,
        };
        (settled && detail["state"] == "running").then_some(detail)
    });
    assert_eq!(ended["state"], "running", "{ended:#}");
    let serving = ended["deployment"]["revision"].as_i64().unwrap();
    let version = format!("v{serving}");
    wait_until(END, "the service to answer its revision", || (get(&addr).ok()? == version).then_some(()));
    let verdict = one_server(&web_marker);
    let outcome = if serving == 2 { "running r2" } else { "rolled back to r1" };
    cell.record(outcome, verdict);

    // 6. service.terminate: the service ends, its processes go, so that the cluster may go.
    let (delay, again) = (delays.within(windows.terminate), delays.within(windows.terminate));
    let kind = Kind::Terminate;
    cell.api.cli(&["terminate", &service]).expect_code(0);
    cell.kill(kind, delay);
    cell.kill_in_recovery(kind, again);
    let ended = cell.run_end(kind);
    assert_eq!(ended, "succeeded", "{service}'s terminate");
    let detail = cell.status(&service);
    assert_eq!(detail["state"], "terminated", "{detail:#}");
    let verdict = no_server(&web_marker);
    cell.record("terminated", verdict);

    // 7. cluster.delete.
    let (delay, again) = (delays.within(windows.delete), delays.within(windows.delete));
    let kind = Kind::Delete;
    cell.api.cli(&["cluster", "delete", &cluster]).expect_code(0);
    cell.kill(kind, delay);
    cell.kill_in_recovery(kind, again);
    cell.wait(&format!("cluster/{cluster}"));
    let status = cell.cluster_status(&cluster);
    assert_eq!(status["cluster"]["phase"], "deleted", "{status:#}");
    let verdict = cell.nothing_left(&cluster, &cluster_id);
    cell.record("deleted", verdict);

    // 8. A cancelled create's unwind: the cancel at a random moment of the create, the kill at
    // a random moment after it.
    let cancel_delay = delays.within(windows.cancel);
    let (delay, again) = (delays.within(windows.unwind), delays.within(windows.unwind));
    let kind = Kind::Unwind;
    let (doomed_id, run) = cell.create_cluster(&doomed, &credential);
    std::thread::sleep(Duration::from_millis(cancel_delay));
    let cancel = cell.api.cli(&["workflow", "cancel", &run]);
    cell.kill(kind, delay);
    cell.pending[0].landed.push_str(&format!(" (cancel at {cancel_delay} ms)"));
    cell.kill_in_recovery(kind, again);
    let ended = wait_until(END, "the cancelled create to end", || {
        let detail = cell.api.inspect(&run, false);
        let status = detail["run"]["status"].as_str()?.to_owned();
        ["succeeded", "failed", "cancelled"].contains(&status.as_str()).then_some(status)
    });
    let (outcome, verdict) = if ended == "succeeded" {
        // The store refuses a cancel once every step is checkpointed; one it accepted turns the
        // run back (the engine's `a_cancel_as_the_last_step_ends_turns_the_run_back`).
        assert_ne!(cancel.code, 0, "the cancel was accepted, yet the create succeeded: {cancel}");
        ("ready (ended before the cancel)", cell.ready_and_exact(&doomed, &doomed_id))
    } else {
        cancel.expect_code(0);
        assert_eq!(ended, "cancelled", "{doomed}'s create");
        let status = cell.cluster_status(&doomed);
        assert_eq!(status["cluster"]["phase"], "failed", "{status:#}");
        ("unwound", cell.nothing_left(&doomed, &doomed_id))
    };
    cell.record(outcome, verdict);
    cell.api.cli(&["cluster", "delete", &doomed, "--wait"]).expect_code(0);
    if let Some(failure) = cell.nothing_left(&doomed, &doomed_id).failure {
        panic!("after the delete: {failure}");
    }

    // 9 and 10. api.deploy and api.remove, where a provider hosts an API on a VM.
    if cell.runner.is_some() {
        api_round(cell, delays, &windows, &credential, round);
    }
}

/// `api.deploy` of an API on the round's credential, then `api.remove` of it with its bucket,
/// each killed twice.
fn api_round(cell: &mut Cell, delays: &mut Delays, windows: &Windows, credential: &str, round: u64) {
    let name = format!("api{round}");
    let bucket = format!("anycloud-soak-{round}-{}", std::process::id());
    let port = e2e::free_port().to_string();
    let (region, vm_type) = cell.provider.placement();

    let (delay, again) = (delays.within(windows.api_deploy), delays.within(windows.api_deploy));
    let kind = Kind::ApiDeploy;
    let seen = cell.runs_of(kind);
    // The seamed CLI ships its own binary: the VM needs the seams too.
    let deploying = cell.api.spawn_cli_seamed(&[
        "--json",
        "api",
        "serve",
        "--id",
        &name,
        "--credentials",
        credential,
        "--vm-type",
        vm_type,
        "--region",
        region,
        "--checkpoint-bucket",
        &bucket,
        "--port",
        &port,
    ]);
    // The CLI ships the 200 MB binary to the API before the run is submitted, and `ship_binary`
    // copies it into the bucket again after every restart: counted from the run's start, the
    // kills would all land there. The first kill's delay counts from the run's first step past
    // the copy, where the provider's resources are made.
    wait_until(END, "the api.deploy run", || (cell.runs_of(kind) > seen).then_some(()));
    let sql = "SELECT status || '|' || COALESCE(current_step, '') FROM engine_runs WHERE kind = 'api.deploy' \
               ORDER BY seq DESC LIMIT 1";
    wait_until(END, "api.deploy past ship_binary", || {
        let state = cell.api.query_strings(sql).pop()?;
        let (status, step) = state.split_once('|')?;
        let copying = ["", "pin_placement", "ensure_bucket", "ship_binary"].contains(&step);
        let ended = ["succeeded", "failed", "cancelled"].contains(&status);
        (ended || !copying).then_some(())
    });
    cell.kill(kind, delay);
    cell.kill_in_recovery(kind, again);
    let ended = cell.run_end(kind);
    let out = deploying.wait(END);
    assert_eq!(ended, "succeeded", "{name}'s deploy; `api serve`: {out}");
    out.expect_code(0);
    let api_id = cell
        .api
        .query_strings(&format!("SELECT id FROM hosted_apis WHERE name = '{name}' AND phase = 'ready'"))
        .pop()
        .unwrap_or_else(|| panic!("no ready record of {name}"));
    let verdict = cell.api_deployed(&api_id, &bucket);
    cell.record("ready", verdict);

    let (delay, again) = (delays.within(windows.api_remove), delays.within(windows.api_remove));
    let kind = Kind::ApiRemove;
    let seen = cell.runs_of(kind);
    let removing = cell.api.spawn_cli(&["api", "delete", &name, "--delete-bucket"]);
    wait_until(END, "the api.remove run", || (cell.runs_of(kind) > seen).then_some(()));
    cell.kill(kind, delay);
    cell.kill_in_recovery(kind, again);
    let ended = cell.run_end(kind);
    let out = removing.wait(END);
    assert_eq!(ended, "succeeded", "{name}'s removal; `api delete`: {out}");
    out.expect_code(0);
    let verdict = cell.api_removed(&api_id, &bucket);
    cell.record("removed", verdict);
}

/// One server process of the service runs once its old ones have gone (within a minute); more
/// are duplicates.
fn one_server(marker: &str) -> Verdict {
    let settled = Instant::now() + Duration::from_secs(60);
    loop {
        let running = servers(marker);
        if running.len() == 1 {
            return Verdict::default();
        }
        if Instant::now() >= settled {
            return Verdict {
                orphans: 0,
                duplicates: running.len().saturating_sub(1),
                failure: Some(format!("{} server processes of {marker} run, not one: {running:?}", running.len())),
            };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// None of the service's server processes is left (within a minute); each one left is an orphan.
fn no_server(marker: &str) -> Verdict {
    let settled = Instant::now() + Duration::from_secs(60);
    loop {
        let running = servers(marker);
        if running.is_empty() {
            return Verdict::default();
        }
        if Instant::now() >= settled {
            return Verdict {
                orphans: running.len(),
                duplicates: 0,
                failure: Some(format!("the service is terminated, yet its server processes run: {running:?}")),
            };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How long after a request its kill may come, per workflow, in ms: about as long as the
/// workflow takes uncut on that provider (while six cells share two cores), so that kills spread
/// over its steps; `cancel` is how long after a create its cancel may come.
struct Windows {
    verify: u64,
    create: u64,
    /// How long into a job's recovery its second kill may come.
    job: u64,
    deploy: u64,
    upgrade: u64,
    terminate: u64,
    delete: u64,
    cancel: u64,
    unwind: u64,
    api_deploy: u64,
    api_remove: u64,
}

impl Windows {
    fn of(provider: &str) -> Self {
        let sim = Self {
            verify: 50,
            create: 3300,
            job: 1500,
            deploy: 1500,
            upgrade: 1500,
            terminate: 1000,
            delete: 1200,
            cancel: 2000,
            unwind: 1000,
            api_deploy: 0,
            api_remove: 0,
        };
        match provider {
            "sim" => sim,
            "aws" => Self {
                verify: 250,
                create: 2600,
                deploy: 1200,
                upgrade: 1200,
                delete: 600,
                cancel: 1800,
                unwind: 700,
                terminate: 600,
                api_deploy: 8000,
                api_remove: 2000,
                ..sim
            },
            _ => Self { verify: 250, api_deploy: 8000, api_remove: 2000, ..sim },
        }
    }
}

/// Runs the matrix cell `PROVIDER-STORE`: its rounds, then its table lines.
fn cell(provider: &str, store: &str) {
    let settings = Settings::from_env();
    let name = format!("{provider}-{store}");
    if settings.only.as_ref().is_some_and(|only| *only != name) {
        eprintln!("soak: {name} not selected (ANYCLOUD_SOAK_ONLY={})", settings.only.as_deref().unwrap_or_default());
        return;
    }
    let started = Instant::now();
    let database = (store == "postgres").then(PgDatabase::create);
    let provider_state = Provider::start(provider);
    let api = Api::start_opts(ApiOptions {
        id: format!("soak-{name}"),
        database_url: database.as_ref().map(|db| db.url.clone()),
        hosted: true,
        env: provider_state.api_env(),
        ..ApiOptions::default()
    });
    let runner = provider_state.vm_runner(&api);
    let mut cell = Cell {
        name: name.clone(),
        provider: provider_state,
        api,
        runner,
        kills: Vec::new(),
        pending: Vec::new(),
        at: String::new(),
    };
    for number in settings.rounds() {
        let mut delays = Delays::of(settings.seed, &name, number);
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| round(&mut cell, &mut delays, number)));
        if let Err(panic) = ran {
            eprintln!(
                "soak FAILED in {name}, round {number}, at {}; replay with ANYCLOUD_SOAK_ONLY={name} \
                 ANYCLOUD_SOAK_SEED={} ANYCLOUD_SOAK_ROUND={number}\n--- API logs\n{}",
                cell.at,
                settings.seed,
                cell.api.logs()
            );
            std::panic::resume_unwind(panic);
        }
    }
    let kills = &cell.kills;
    eprintln!(
        "soak-cell | {name} | {} kills | {} after end | orphans {} | duplicates {} | seed {} | {:.0} s |",
        kills.len(),
        kills.iter().filter(|kill| kill.landed.starts_with("after end")).count(),
        kills.iter().map(|kill| kill.orphans).sum::<usize>(),
        kills.iter().map(|kill| kill.duplicates).sum::<usize>(),
        settings.seed,
        started.elapsed().as_secs_f64()
    );
    drop(cell);
    drop(database);
}

#[test]
fn kills_at_every_workflow_sim_sqlite() {
    cell("sim", "sqlite");
}

#[test]
fn kills_at_every_workflow_sim_postgres() {
    cell("sim", "postgres");
}

#[test]
fn kills_at_every_workflow_aws_sqlite() {
    cell("aws", "sqlite");
}

#[test]
fn kills_at_every_workflow_aws_postgres() {
    cell("aws", "postgres");
}

#[test]
fn kills_at_every_workflow_gcp_sqlite() {
    cell("gcp", "sqlite");
}

#[test]
fn kills_at_every_workflow_gcp_postgres() {
    cell("gcp", "postgres");
}
