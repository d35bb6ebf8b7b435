//! `anycloud api serve --credentials <gcp> --checkpoint-bucket` end to end, against the fake
//! Compute Engine and the fake Cloud Storage behind one endpoint ([`FakeGoogle`], as Google's
//! front serves both): the local API's `api.deploy` run makes the bucket (versioned, uniform
//! access, public access prevented), the API's identity in it, the firewall rule for the API's
//! port, and the VM acting as the credential's service account with the storage scope. The
//! fake's VM boots nothing, so the tests' VM runner ([`VmRunner`]) runs the binary with exactly
//! the arguments of the startup script's systemd unit, its Google identity a key file (as a GCE
//! VM's metadata server would give it one). Then, on the hosted API: a GCP credential and a
//! cluster; the hosted API SIGKILLed with its disk wiped, a fresh one restores from the bucket;
//! `api stop` keeps the bucket; a second deploy on it is the same API; `api delete
//! --delete-bucket` leaves nothing. What Google holds is asked of the fakes, never of anycloud.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{self, Api, ApiOptions};
use anycloud_tests::fake_google::FakeGoogle;
use anycloud_tests::gcp_test_key::{CLIENT_EMAIL, PROJECT, service_account_json};
use anycloud_tests::simulated_kube::{GceMachines, SimulatedKube};
use anycloud_tests::vm_runner::{Launcher, VmRunner};
use anycloud_workflows::cloud::{CLUSTER_TAG, ROLE_TAG};
use serde_json::{Value, json};

const REGION: &str = "us-central1";
const BUCKET: &str = "team-api-state";
const HOSTING: &str = "gcp-host";

/// The instances the fake runs (or is starting) with `label` = `value`.
fn live_instances(google: &FakeGoogle, label: &str, value: &str) -> Vec<Value> {
    google
        .gce()
        .instances(PROJECT)
        .into_iter()
        .filter(|i| i["labels"][label] == value)
        .filter(|i| ["PROVISIONING", "STAGING", "RUNNING"].contains(&i["status"].as_str().unwrap_or_default()))
        .collect()
}

fn https_rules(google: &FakeGoogle) -> Vec<Value> {
    google.gce().firewalls(PROJECT).into_iter().filter(|f| f["name"].as_str().unwrap().ends_with("-https")).collect()
}

#[test]
fn an_api_deployed_on_gcp_serves_restores_after_a_wiped_disk_and_is_removed() {
    let google = FakeGoogle::start();
    let kube = SimulatedKube::start(GceMachines::new(google.gce().clone(), PROJECT));
    let local = Api::start_opts(ApiOptions {
        id: "local".into(),
        env: vec![("ANYCLOUD_TEST_HOSTED_API_ADDRESS".into(), "127.0.0.1".into())],
        ..ApiOptions::default()
    });
    let key_file = local.scratch().join("service-account.json");
    std::fs::write(&key_file, service_account_json()).unwrap();
    // On the active API: the local one first, the hosted one once `--use` made it active.
    let new_credential = |name: &str| {
        let out = local.cli(&[
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
            "--wait",
        ]);
        out.expect_code(0);
    };
    new_credential(HOSTING);

    // The VM: the seamed binary (the cluster below needs the simulated Kubernetes), its Google
    // identity the key file where a GCE VM would ask its metadata server.
    let runner = VmRunner::start(
        GceMachines::new(google.gce().clone(), PROJECT),
        Launcher {
            binary: e2e::anycloud_seamed_bin(),
            env: vec![
                ("GOOGLE_APPLICATION_CREDENTIALS".into(), key_file.to_str().unwrap().to_owned()),
                ("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url()),
                ("NO_PROXY".into(), "127.0.0.1,localhost".into()),
            ],
            scratch: local.scratch().join("vms"),
        },
    );
    let port = e2e::free_port().to_string();
    let deploy = || {
        local
            .spawn_cli(&[
                "--json",
                "api",
                "serve",
                "--id",
                "team-api",
                "--credentials",
                HOSTING,
                "--vm-type",
                "e2-medium",
                "--region",
                REGION,
                "--checkpoint-bucket",
                BUCKET,
                "--port",
                &port,
                "--binary-url",
                "https://downloads.example.com/anycloud-{arch}",
                "--use",
            ])
            .wait(Duration::from_secs(180))
    };

    // 1. The deploy.
    let out = deploy();
    out.expect_code(0);
    let shown = out.last_json();
    assert_eq!(shown["kind"], "hosted (gcp)", "{out}");
    assert_eq!(shown["url"], format!("https://127.0.0.1:{port}"), "{out}");
    let (instance, _) = runner.one(Duration::from_secs(30));
    let vms = live_instances(&google, ROLE_TAG, "hosted-api");
    assert_eq!(vms.len(), 1, "{vms:#?}");
    assert_eq!(vms[0]["id"], instance.as_str(), "{vms:#?}");
    assert_eq!(vms[0]["serviceAccounts"][0]["email"], CLIENT_EMAIL, "{:#}", vms[0]);
    assert_eq!(
        vms[0]["serviceAccounts"][0]["scopes"],
        json!(["https://www.googleapis.com/auth/devstorage.read_write"]),
        "{:#}",
        vms[0]
    );
    let rules = https_rules(&google);
    assert_eq!(rules.len(), 1, "{rules:#?}");
    assert_eq!(rules[0]["allowed"], json!([{"IPProtocol": "tcp", "ports": [port.as_str()]}]), "only the API's port");
    let bucket = google.gcs().bucket(BUCKET).expect("the bucket is made");
    assert_eq!(bucket["versioning"]["enabled"], true, "{bucket:#}");
    assert_eq!(bucket["iamConfiguration"]["uniformBucketLevelAccess"]["enabled"], true, "{bucket:#}");
    assert_eq!(bucket["iamConfiguration"]["publicAccessPrevention"], "enforced", "{bucket:#}");
    assert_eq!(bucket["lifecycle"]["rule"][0]["condition"]["daysSinceNoncurrentTime"], 30, "{bucket:#}");
    let names: Vec<String> = google.gcs().objects(BUCKET).into_iter().map(|o| o.name).collect();
    for identity in ["identity/token", "identity/tls-ca.crt", "identity/tls-ca.key", "HEAD"] {
        assert!(names.iter().any(|n| n == identity), "{identity} not in the bucket: {names:?}");
    }
    let args = runner.args(&instance);
    assert_eq!(args[..2], ["api", "serve"]);
    for expected in ["--hosted-by", "gcp", "--checkpoint-bucket", "gs://team-api-state/", "--checkpoint-endpoint"] {
        assert!(args.iter().any(|a| a == expected), "{expected} not in {args:?}");
    }
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(local.config_dir().join("config.json")).unwrap()).unwrap();
    let token = config["apis"]["team-api"]["token"].as_str().unwrap().to_owned();
    let metadata = vms[0]["metadata"].to_string();
    assert!(metadata.contains("anycloud-api.service"), "the boot script is the instance's metadata");
    assert!(!metadata.contains(&token) && !metadata.contains("PRIVATE KEY"), "a secret in the metadata");

    // 2. On the hosted API, over HTTPS through the pinned CA: a credential and a cluster.
    let out = local.cli(&["api", "status"]);
    out.expect_code(0);
    assert!(out.stdout.contains("hosted (gcp)") && out.stdout.contains("checkpoint  gs://team-api-state/"), "{out}");
    new_credential("gce-capacity");
    let out = local.spawn_cli(&[
        "cluster",
        "create",
        "training",
        "--credentials",
        "gce-capacity",
        "--region",
        REGION,
        "--vm-type",
        "e2-standard-2",
        "--min-vms",
        "1",
        "--max-vms",
        "1",
        "--wait",
    ]);
    out.wait(Duration::from_secs(120)).expect_code(0);

    // 3. The VM's disk is lost: a fresh one restores everything from the bucket.
    runner.kill_and_wipe(&instance);
    e2e::wait_until(Duration::from_secs(60), "the hosted API to restart", || {
        (runner.starts(&instance) == 2).then_some(())
    });
    let status = e2e::wait_until(Duration::from_secs(90), "the restored API to show the cluster ready", || {
        let out = local.cli(&["--json", "cluster", "status", "training"]);
        (out.code == 0 && out.json()["cluster"]["phase"] == "ready").then(|| out.json())
    });
    let cluster_id = status["cluster"]["id"].as_str().unwrap();
    let cluster = live_instances(&google, CLUSTER_TAG, cluster_id);
    assert_eq!(cluster.len(), 2, "exactly the control plane and one worker, none launched twice: {cluster:#?}");
    assert!(runner.log(&instance).contains("restored from gs://team-api-state/"), "{}", runner.log(&instance));

    // 4. Stopped: the VM and its rule go; the bucket and the state in it stay.
    let out = local.spawn_cli(&["api", "stop", "team-api"]).wait(Duration::from_secs(120));
    out.expect_code(0);
    assert!(out.stdout.contains("its bucket gs://team-api-state/ stays"), "{out}");
    assert!(live_instances(&google, ROLE_TAG, "hosted-api").is_empty());
    assert!(https_rules(&google).is_empty());
    assert!(google.gcs().objects(BUCKET).len() > 3);

    // 5. Deployed again on the same bucket: the same API, with the same token and cluster.
    deploy().expect_code(0);
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(local.config_dir().join("config.json")).unwrap()).unwrap();
    assert_eq!(config["apis"]["team-api"]["token"], token.as_str(), "the bucket's token is kept");
    local.cli(&["--json", "cluster", "status", "training"]).expect_code(0);

    // 6. Deleted with its bucket: nothing of the API is left at Google.
    let out = local.spawn_cli(&["api", "delete", "team-api", "--delete-bucket"]).wait(Duration::from_secs(120));
    out.expect_code(0);
    assert!(out.stdout.contains("nothing stays"), "{out}");
    assert!(live_instances(&google, ROLE_TAG, "hosted-api").is_empty() && https_rules(&google).is_empty());
    assert!(!google.gcs().bucket_exists(BUCKET), "the bucket is deleted");
}
