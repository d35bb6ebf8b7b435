//! `anycloud api rotate-ca` end to end, against moto: an API deployed on a (stand-in) EC2 VM, as
//! in `api_deploy_aws.rs`, gets a new CA through the local API that deployed it. After the
//! rotation: the keys secret at moto holds the new CA (and the same token and sealing key), the
//! CLI config pins the new CA alone and the CLI works, a client that pins only the old CA is
//! refused, the hosted API was not restarted to serve it, and a VM that starts afresh serves
//! from the new CA too. What moto holds is asked of moto itself (boto3).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{self, Api, ApiOptions, Moto};
use anycloud_tests::simulated_kube::{MotoMachines, SimulatedKube};
use anycloud_tests::vm_runner::{Launcher, VmRunner};
use anycloud_workflows::hosting;
use serde_json::Value;

const REGION: &str = "us-east-1";
const BUCKET: &str = "rotated-api-state";
const HOSTING: &str = "aws-host";

/// The API's keys as its secret at moto holds them.
fn keys_at_moto(moto: &Moto) -> Value {
    const SCRIPT: &str = r#"
import json, os
import boto3
sm = boto3.client("secretsmanager", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
secrets = [s for s in sm.list_secrets()["SecretList"] if s["Name"].startswith("anycloud/keys-")]
assert len(secrets) == 1, secrets
print(sm.get_secret_value(SecretId=secrets[0]["ARN"])["SecretString"])
"#;
    serde_json::from_str(moto.python(SCRIPT, &[]).trim()).unwrap()
}

fn config(local: &Api) -> Value {
    serde_json::from_str(&std::fs::read_to_string(local.config_dir().join("config.json")).unwrap()).unwrap()
}

#[test]
fn a_rotated_ca_is_served_without_a_restart_and_pinned_alone() {
    let moto = Moto::start();
    let kube = SimulatedKube::start(MotoMachines::new(&moto.endpoint, REGION));
    let local = Api::start_opts(ApiOptions {
        id: "local".into(),
        env: vec![("ANYCLOUD_TEST_HOSTED_API_ADDRESS".into(), "127.0.0.1".into())],
        ..ApiOptions::default()
    });
    let keys = [("AWS_ACCESS_KEY_ID", "AKIAANYCLOUDHOSTING1"), ("AWS_SECRET_ACCESS_KEY", "moto-hosting-secret-key")];
    let credential = [
        "credentials",
        "new",
        HOSTING,
        "--provider",
        "aws",
        "--endpoint",
        &moto.endpoint,
        "--region",
        REGION,
        "--wait",
    ];
    local.cli_env(&credential, &keys).expect_code(0);
    let runner = VmRunner::start(
        MotoMachines::new(&moto.endpoint, REGION),
        Launcher {
            env: vec![
                ("AWS_ACCESS_KEY_ID".into(), "AKIAANYCLOUDVMROLE01".into()),
                ("AWS_SECRET_ACCESS_KEY".into(), "stands-in-for-the-instance-profile".into()),
                ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
                ("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url()),
                ("NO_PROXY".into(), "127.0.0.1,localhost".into()),
            ],
            scratch: local.scratch().join("vms"),
            identity: None,
        },
    );
    let port = e2e::free_port().to_string();
    let deploy = [
        "--json",
        "api",
        "serve",
        "--id",
        "team-api",
        "--credentials",
        HOSTING,
        "--vm-type",
        "t3.medium",
        "--region",
        REGION,
        "--checkpoint-bucket",
        BUCKET,
        "--port",
        &port,
        "--use",
    ];
    local.spawn_cli_seamed(&deploy).wait(Duration::from_secs(420)).expect_code(0);
    let (instance, _) = runner.one(Duration::from_secs(30));
    let url = format!("https://127.0.0.1:{port}");
    let before = config(&local)["apis"]["team-api"].clone();
    let old_ca = before["ca_pem"].as_str().unwrap().to_owned();
    let token = before["token"].as_str().unwrap().to_owned();
    let old_keys = keys_at_moto(&moto);
    assert_eq!(old_keys["ca_cert_pem"], old_ca.as_str());
    // Bounded, not 1975-4096: five years and the hour of skew.
    let (from, to) = hosting::identity::validity_of(&old_ca).unwrap();
    assert_eq!(to - from, 5 * 365 * 24 * 3600 + 3600);

    // The rotation, through the deployer (the active API is the hosted one: the default).
    let rotating = local.spawn_cli(&["--json", "api", "rotate-ca"]);
    // Meanwhile the CLI config pins both CAs, the old first (the API answers from one or the other).
    let during = e2e::wait_until(Duration::from_secs(120), "the CLI config to pin both CAs", || {
        let pinned = config(&local)["apis"]["team-api"]["ca_pem"].as_str().unwrap_or_default().to_owned();
        (hosting::identity::pem_blocks(&pinned).len() == 2).then_some(pinned)
    });
    assert_eq!(hosting::identity::pem_blocks(&during)[0], hosting::identity::pem_blocks(&old_ca)[0]);
    let out = rotating.wait(Duration::from_secs(300));
    out.expect_code(0);
    let rotated = out.last_json();
    assert_eq!(rotated["rotated"], "team-api", "{out}");
    let new_ca = rotated["ca_pem"].as_str().unwrap().to_owned();
    assert_eq!(hosting::identity::pem_blocks(&new_ca).len(), 1, "{new_ca}");
    assert_ne!(hosting::identity::pem_blocks(&new_ca), hosting::identity::pem_blocks(&old_ca));
    assert_eq!(hosting::identity::pem_blocks(&during)[1], hosting::identity::pem_blocks(&new_ca)[0]);

    // The secret holds the new CA, and the token and sealing key it held.
    let new_keys = keys_at_moto(&moto);
    assert_eq!(new_keys["ca_cert_pem"], new_ca.as_str());
    assert_ne!(new_keys["ca_key_pem"], old_keys["ca_key_pem"]);
    assert_eq!(new_keys["token"], old_keys["token"]);
    assert_eq!(new_keys["sealing_key"], old_keys["sealing_key"]);
    assert_eq!(new_keys["token"], token.as_str());

    // The CLI config pins the new CA alone, with the same token, and the CLI works.
    let after = config(&local)["apis"]["team-api"].clone();
    assert_eq!(after["ca_pem"], new_ca.as_str(), "{after:#}");
    assert_eq!(after["token"], token.as_str());
    let out = local.cli(&["api", "status"]);
    out.expect_code(0);
    assert!(out.stdout.contains("hosted (aws)"), "{out}");
    // Trusting the old CA alone, the API is refused; the new one alone is trusted.
    let refused = e2e::block_on(hosting::identity::health(&url, &old_ca)).unwrap_err();
    assert!(refused.contains("certificate") || refused.contains("Unknown"), "{refused}");
    e2e::block_on(hosting::identity::health(&url, &new_ca)).unwrap();
    // Served without a restart: the process that started at the deploy serves it.
    assert_eq!(runner.starts(&instance), 1, "{}", runner.log(&instance));
    assert!(runner.log(&instance).contains("renewed the TLS certificate for 127.0.0.1"), "{}", runner.log(&instance));
    // The rotation ran as a workflow, each of its steps once.
    local.cli(&["api", "use", "local"]).expect_code(0);
    let inspected = local.inspect(rotated["workflow_id"].as_str().unwrap(), false);
    assert_eq!(inspected["run"]["kind"], "api.rotate_ca", "{inspected:#}");
    assert_eq!(inspected["run"]["status"], "succeeded", "{inspected:#}");
    let steps: Vec<&str> = inspected["steps"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(steps, ["store_new_ca", "serve_new_ca", "pin_new_ca"], "{inspected:#}");
    local.cli(&["api", "use", "team-api"]).expect_code(0);

    // A VM that starts afresh (its disk lost) reads the new CA from the secret and serves from it.
    runner.kill_and_wipe(&instance);
    e2e::wait_until(Duration::from_secs(60), "the hosted API to restart", || {
        (runner.starts(&instance) == 2).then_some(())
    });
    e2e::wait_until(Duration::from_secs(60), "the restarted API to answer through the new pin", || {
        (local.cli(&["api", "status"]).code == 0).then_some(())
    });
    assert!(e2e::block_on(hosting::identity::health(&url, &old_ca)).is_err());

    let out = local.spawn_cli(&["api", "delete", "team-api", "--delete-bucket"]).wait(Duration::from_secs(120));
    out.expect_code(0);
}

/// `rotate-ca` of an API that no API in the CLI config deployed says where to run it.
#[test]
fn rotating_an_api_not_deployed_from_here_says_where_to_run_it() {
    let local = Api::start("local");
    let out = local.cli(&["api", "rotate-ca", "local"]);
    assert_eq!(out.code, 3, "{out}");
    assert!(out.stderr.contains("not deployed on a cloud VM from this CLI config"), "{out}");
    assert!(out.stderr.contains("anycloud api rotate-ca local"), "{out}");
}
