//! A hosted API whose checkpoint bucket is on another provider than its VM, as the spec's
//! Placement table allows (`api serve --credentials C --checkpoint-storage-credentials S`, S of
//! another provider): hosted on AWS (moto) with its bucket on GCS (the fake Cloud Storage), and
//! hosted on GCP (the fake Compute Engine) with its bucket on S3 (moto). The VM's own identity
//! reaches only its provider, so `api.deploy` puts the storage credential's key in the hosting
//! provider's secret store (AWS Secrets Manager at moto, the fake Secret Manager behind the fake
//! Google front), readable by the VM's identity alone, and the VM's unit names the secret; the
//! hosted binary reads it at start. As in `api_deploy_aws.rs` and `api_deploy_gcp.rs`, the
//! tests' VM runner runs the real binary with exactly the arguments of the VM's user-data, and
//! the VM's identity is the environment it is given: here, the hosting provider's only, so the
//! bucket is reachable through the secret and nothing else.
//!
//! Each test deploys through the real `api.deploy` run, creates a cluster on the hosted API,
//! SIGKILLs the hosted API and wipes its disk (the fresh start restores from the bucket on the
//! other provider: the cluster ready, no VM launched twice), stops it (the secret is gone, the
//! bucket stays), deploys it again on the same bucket and deletes it with its bucket (nothing
//! left). Also: the hosted binary refuses to start, exit 2, when it cannot read its secret; a
//! cancelled deploy deletes the secret it stored; each store takes a secret twice and deletes it
//! twice; the key appears in no log, output, user-data or `inspect`. What the providers hold is asked of moto (boto3) and of the fakes, never of
//! anycloud.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, ApiOptions, CliChild, Moto, Output};
use anycloud_tests::fake_google::FakeGoogle;
use anycloud_tests::gcp_test_key::{CLIENT_EMAIL, PROJECT, TEST_ONLY_PRIVATE_KEY, service_account_json};
use anycloud_tests::simulated_kube::{GceMachines, MotoMachines, SimulatedKube};
use anycloud_tests::vm_runner::{Launcher, VmRunner, gce_service_account};
use anycloud_workflows::cloud::{CLUSTER_TAG, ROLE_TAG};
use serde_json::{Value, json};

const BUCKET: &str = "team-api-state";
/// The AWS keys the deployer's AWS credentials are saved with.
const AWS_KEYS: [(&str, &str); 2] =
    [("AWS_ACCESS_KEY_ID", "AKIAANYCLOUDDEPLOYER"), ("AWS_SECRET_ACCESS_KEY", "moto-cross-provider-secret-key")];

/// The deployer: a local API where the credentials live, reaching the VM where the runner serves
/// it (the seam `ANYCLOUD_TEST_HOSTED_API_ADDRESS`), and the service-account key file.
fn deployer() -> (Api, std::path::PathBuf) {
    let local = Api::start_opts(ApiOptions {
        id: "local".into(),
        env: vec![("ANYCLOUD_TEST_HOSTED_API_ADDRESS".into(), "127.0.0.1".into())],
        ..ApiOptions::default()
    });
    let key_file = local.scratch().join("service-account.json");
    std::fs::write(&key_file, service_account_json()).unwrap();
    (local, key_file)
}

/// `credentials new NAME` on the active API, of AWS at moto in `region`.
fn aws_credential(api: &Api, name: &str, moto: &Moto, region: &str) {
    let args = ["credentials", "new", name, "--provider", "aws", "--endpoint", &moto.endpoint, "--region", region];
    api.cli_env(&[&args[..], &["--wait"]].concat(), &AWS_KEYS).expect_code(0);
}

/// `credentials new NAME` on the active API, of GCP behind the fake Google front.
fn gcp_credential(api: &Api, name: &str, key_file: &Path, google: &FakeGoogle) {
    let key = key_file.to_str().unwrap();
    let args = ["credentials", "new", name, "--provider", "gcp", "--service-account-file", key, "--endpoint"];
    api.cli(&[&args[..], &[&google.endpoint(), "--wait"]].concat()).expect_code(0);
}

/// `api serve --id team-api` hosted with `hosting`, its bucket with `storage`; followed to its end.
fn deploy(api: &Api, hosting: &str, storage: &str, vm_type: &str, region: &str, port: &str) -> Output {
    spawn_deploy(api, hosting, storage, vm_type, region, port).wait(Duration::from_secs(420))
}

/// [`deploy`]'s command, started: the CLI follows the deploy until it ends.
fn spawn_deploy(api: &Api, hosting: &str, storage: &str, vm_type: &str, region: &str, port: &str) -> CliChild {
    let seamed = e2e::anycloud_seamed_bin().display().to_string();
    api.spawn_cli(&[
        "--json",
        "api",
        "serve",
        "--id",
        "team-api",
        "--credentials",
        hosting,
        "--checkpoint-storage-credentials",
        storage,
        "--vm-type",
        vm_type,
        "--region",
        region,
        "--checkpoint-bucket",
        BUCKET,
        "--port",
        port,
        // The VM needs the seamed binary's seams; `--binary` ships it (the AWS and GCP tests
        // ship the CLI's own, the default).
        "--binary",
        &seamed,
        "--use",
    ])
}

/// `cluster create training` on the active API: one worker on `credential`.
fn create_cluster(api: &Api, credential: &str, region: &str, vm_type: &str) {
    let args = ["cluster", "create", "training", "--credentials", credential, "--region", region, "--vm-type"];
    let rest = [vm_type, "--min-vms", "1", "--max-vms", "1", "--wait"];
    api.spawn_cli(&[&args[..], &rest[..]].concat()).wait(Duration::from_secs(120)).expect_code(0);
}

/// The milliseconds the hosted API took to read its key, from its log line.
fn secret_read_ms(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|line| line.contains("its key read from"))
        .filter_map(|line| line.rsplit(" in ").next()?.strip_suffix(" ms")?.parse().ok())
        .collect()
}

/// Runs the VM's own command line (`args`, as the runner ran it, its data directory fresh) once
/// more, with the VM's environment: what a VM whose secret is unreadable does at its next start.
fn start_vm_process_again(mut args: Vec<String>, env: &[(String, String)], scratch: &Path) -> Output {
    let disk = scratch.join("another-disk");
    let data_dir = args.iter().position(|a| a == "--data-dir").unwrap() + 1;
    args[data_dir] = disk.display().to_string();
    let started = Instant::now();
    let out = Command::new(e2e::anycloud_seamed_bin()).args(&args).envs(env.iter().cloned()).output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(60), "it gave up only after {:?}", started.elapsed());
    let out = Output {
        args,
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!disk.join("anycloud.db").exists(), "a database was laid on the disk: {out}");
    out
}

/// What moto holds of hosted APIs, as boto3 sees it.
fn at_moto(moto: &Moto) -> Value {
    const SCRIPT: &str = r#"
import base64, json, os
import boto3
kw = dict(endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
ec2, iam, sm, s3 = (boto3.client(s, **kw) for s in ("ec2", "iam", "secretsmanager", "s3"))
out = {}
res = ec2.describe_instances(Filters=[{"Name": "tag:anycloud-role", "Values": ["hosted-api"]},
                                      {"Name": "instance-state-name", "Values": ["pending", "running"]}])
out["instances"] = [
    {"id": i["InstanceId"], "user_data": base64.b64decode(ec2.describe_instance_attribute(
        InstanceId=i["InstanceId"], Attribute="userData")["UserData"].get("Value", "")).decode()}
    for r in res["Reservations"] for i in r["Instances"]]
out["secrets"] = {s["Name"]: {"arn": s["ARN"], "value": sm.get_secret_value(SecretId=s["ARN"])["SecretString"]}
                  for s in sm.list_secrets()["SecretList"]}
out["policies"] = {r["RoleName"]: [iam.get_role_policy(RoleName=r["RoleName"], PolicyName=p)["PolicyDocument"]
                                   for p in iam.list_role_policies(RoleName=r["RoleName"])["PolicyNames"]]
                   for r in iam.list_roles()["Roles"] if r["RoleName"].startswith("anycloud-")}
out["buckets"] = [b["Name"] for b in s3.list_buckets().get("Buckets", [])]
print(json.dumps(out))
"#;
    serde_json::from_str(moto.python(SCRIPT, &[]).trim()).unwrap()
}

/// The cluster's instances at moto that run or are starting: "TYPE ROLE" lines, sorted.
fn cluster_vms_at_moto(moto: &Moto, cluster_id: &str) -> String {
    moto.python(
        r#"
import os, boto3
ec2 = boto3.client("ec2", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
res = ec2.describe_instances(Filters=[{"Name": "tag:anycloud-cluster", "Values": [os.environ["CLUSTER"]]},
                                      {"Name": "instance-state-name", "Values": ["pending", "running"]}])
print("\n".join(sorted(i["InstanceType"] + " " + {t["Key"]: t["Value"] for t in i["Tags"]}["anycloud-role"]
                       for r in res["Reservations"] for i in r["Instances"])))
"#,
        &[("CLUSTER", cluster_id)],
    )
    .trim()
    .to_owned()
}

/// The hosted-API instances the fake Compute Engine runs (or is starting).
fn hosted_at_google(google: &FakeGoogle, label: &str, value: &str) -> Vec<Value> {
    google.gce().live_instances(PROJECT, label, value)
}

/// A line of the test key that identifies it (long enough to search for).
fn private_key_line() -> &'static str {
    TEST_ONLY_PRIVATE_KEY.lines().nth(5).unwrap()
}

/// The run id of the latest `api.deploy`, as the active API lists it.
fn latest_deploy(api: &Api) -> Option<String> {
    let out = api.cli(&["--json", "workflow", "list", "--kind", "api.deploy"]);
    out.expect_code(0);
    out.json().as_array().and_then(|runs| runs.first()).map(|run| run["id"].as_str().unwrap().to_owned())
}

#[test]
fn an_api_on_aws_keeps_its_state_in_a_gcs_bucket_through_a_secret_only_its_vm_reads() {
    const REGION: &str = "us-east-1";
    let moto = Moto::start();
    let google = FakeGoogle::start();
    let kube = SimulatedKube::start(MotoMachines::new(&moto.endpoint, REGION));
    let (local, key_file) = deployer();
    aws_credential(&local, "aws-host", &moto, REGION);
    gcp_credential(&local, "gcp-state", &key_file, &google);
    // The VM: keys that stand in for its instance profile, and no Google identity at all.
    let vm_env: Vec<(String, String)> = vec![
        ("AWS_ACCESS_KEY_ID".into(), "AKIAANYCLOUDVMROLE01".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "stands-in-for-the-instance-profile".into()),
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        ("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url()),
        ("NO_PROXY".into(), "127.0.0.1,localhost".into()),
    ];
    let runner = VmRunner::start(
        MotoMachines::new(&moto.endpoint, REGION),
        Launcher { env: vm_env.clone(), scratch: local.scratch().join("vms"), identity: None },
    );
    let port = e2e::free_port().to_string();

    // 1. The deploy: the bucket at Google, the key in a secret at AWS that the role alone reads.
    let started = Instant::now();
    let out = deploy(&local, "aws-host", "gcp-state", "t3.medium", REGION, &port);
    out.expect_code(0);
    eprintln!("deployed in {:?}", started.elapsed());
    assert_eq!(out.last_json()["kind"], "hosted (aws)", "{out}");
    let (instance, _) = runner.one(Duration::from_secs(30));
    assert!(google.gcs().bucket_exists(BUCKET), "the bucket is at Google");
    let state = at_moto(&moto);
    assert!(state["buckets"].as_array().unwrap().is_empty(), "no bucket at AWS: {state:#}");
    let secrets = state["secrets"].as_object().unwrap();
    assert_eq!(secrets.len(), 2, "the API's keys and the bucket's: {state:#}");
    let (name, secret) = secrets.iter().find(|(name, _)| name.ends_with("/checkpoint-storage")).unwrap();
    assert!(name.starts_with("anycloud/api-"), "{name}");
    let arn = secret["arn"].as_str().unwrap();
    let (keys_name, keys) = secrets.iter().find(|(name, _)| name.starts_with("anycloud/keys-")).unwrap();
    let keys_arn = keys["arn"].as_str().unwrap();
    let held: Value = serde_json::from_str(secret["value"].as_str().unwrap()).unwrap();
    assert_eq!(held["provider"], "gcp");
    assert!(held["service_account_json"].as_str().unwrap().contains(CLIENT_EMAIL), "the storage credential's key");
    let policies = state["policies"].as_object().unwrap();
    assert_eq!(policies.len(), 1, "{state:#}");
    let statements = policies.values().next().unwrap()[0]["Statement"].clone();
    assert_eq!(
        statements[0],
        json!({"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": [keys_arn, arn]}),
        "the VM may read its two secrets"
    );
    // And no S3 (the bucket is not there); the rest is the EC2 of placing control planes, each
    // statement checked in api_deploy_aws.rs.
    let rest = statements.as_array().unwrap()[1..].to_vec();
    assert!(
        rest.iter().all(|statement| statement["Sid"].is_string() && !statement.to_string().contains("\"s3:")),
        "{statements:#}"
    );
    let vm_args = runner.args(&instance);
    let args = &vm_args;
    let named = args.iter().position(|a| a == "--checkpoint-storage-secret").map(|i| args[i + 1].as_str());
    assert_eq!(named, Some(arn), "the unit names the secret: {args:?}");
    assert!(args.iter().any(|a| a == "gs://team-api-state/"), "{args:?}");
    let user_data = state["instances"][0]["user_data"].as_str().unwrap();
    assert!(user_data.contains(arn), "{user_data}");
    assert!(!user_data.contains(private_key_line()) && !user_data.contains("PRIVATE KEY"), "the key in user-data");
    let log = runner.log(&instance);
    assert!(log.contains(&format!("its key read from AWS Secrets Manager secret {arn}")), "{log}");

    // 2. A cluster on the hosted API, then the VM's disk is lost: the state comes back from GCS.
    aws_credential(&local, "moto-capacity", &moto, REGION);
    create_cluster(&local, "moto-capacity", REGION, "t3.large");
    let status = runner.kill_wipe_and_await_ready(&local, &instance, "training");
    let cluster_id = status["cluster"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        cluster_vms_at_moto(&moto, &cluster_id),
        "t3.large worker\nt3.medium control-plane",
        "exactly the control plane and one worker, none launched twice"
    );
    let log = runner.log(&instance);
    assert!(log.contains("restored from gs://team-api-state/"), "{log}");
    eprintln!("the hosted API read its key in {:?} ms at each start", secret_read_ms(&log));

    // 3. Stopped: the secret goes with the VM and its role; the bucket, and the state, stay.
    let out = local.spawn_cli(&["api", "stop", "team-api"]).wait(Duration::from_secs(120));
    out.expect_code(0);
    assert!(out.stdout.contains("its bucket gs://team-api-state/ stays"), "{out}");
    assert!(
        out.stdout.contains("--credentials aws-host --checkpoint-storage-credentials gcp-state --checkpoint-bucket"),
        "the command that brings it back names the bucket's credential: {out}"
    );
    let state = at_moto(&moto);
    let left: Vec<&String> = state["secrets"].as_object().unwrap().keys().collect();
    assert_eq!(left, [keys_name], "the bucket's key is deleted, the API's keys stay with its bucket: {state:#}");
    assert!(state["policies"].as_object().unwrap().is_empty() && state["instances"] == json!([]), "{state:#}");
    assert!(google.gcs().objects(BUCKET).len() > 3, "the state stays in the bucket");

    // 4. A VM whose secret cannot be read starts nothing: exit 2, the secret and the grant named.
    let out = start_vm_process_again(vm_args.clone(), &vm_env, &local.scratch());
    out.expect_code(2).expect_stderr("CHECKPOINT_SECRET_UNREADABLE");
    assert!(out.stderr.contains(arn) && out.stderr.contains("secretsmanager:GetSecretValue"), "{out}");
    assert!(out.stderr.contains("nothing was restored or started"), "{out}");

    // 5. Deployed again on the same bucket: the same API (a new secret); deleted with its bucket.
    deploy(&local, "aws-host", "gcp-state", "t3.medium", REGION, &port).expect_code(0);
    local.cli(&["--json", "cluster", "status", "training"]).expect_code(0);
    assert_eq!(at_moto(&moto)["secrets"].as_object().unwrap().len(), 2);
    let out = local.spawn_cli(&["api", "delete", "team-api", "--delete-bucket"]).wait(Duration::from_secs(120));
    out.expect_code(0);
    let state = at_moto(&moto);
    assert!(state["secrets"].as_object().unwrap().is_empty() && state["policies"] == json!({}), "{state:#}");
    assert!(!google.gcs().bucket_exists(BUCKET), "the bucket is deleted, as asked");

    // The key itself was never shown, logged or stored in the clear on the deployer, nor on the VM.
    local.assert_secret_nowhere(private_key_line());
    let vm_logs = std::fs::read_dir(local.scratch().join("vms")).unwrap();
    for vm in vm_logs {
        let log = std::fs::read_to_string(vm.unwrap().path().join("api.log")).unwrap_or_default();
        assert!(!log.contains(private_key_line()), "the key in the VM's log");
    }
}

#[test]
fn an_api_on_gcp_keeps_its_state_in_an_s3_bucket_through_a_secret_only_its_vm_reads() {
    const REGION: &str = "us-central1";
    let moto = Moto::start();
    let google = FakeGoogle::start();
    let kube = SimulatedKube::start(GceMachines::new(google.gce().clone(), PROJECT));
    let (local, key_file) = deployer();
    gcp_credential(&local, "gcp-host", &key_file, &google);
    aws_credential(&local, "aws-state", &moto, "us-east-1");
    // The VM: the key of the service account the instance runs as where a GCE VM asks its
    // metadata server; no AWS keys.
    let vm_env: Vec<(String, String)> = vec![
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        ("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url()),
        ("NO_PROXY".into(), "127.0.0.1,localhost".into()),
    ];
    let keys = local.scratch().join("vm-keys");
    let identity = gce_service_account(google.gce().clone(), PROJECT, keys.clone());
    let runner = VmRunner::start(
        GceMachines::new(google.gce().clone(), PROJECT),
        Launcher { env: vm_env.clone(), scratch: local.scratch().join("vms"), identity: Some(identity.clone()) },
    );
    // The environment of `instance`'s VM, its account's key included.
    let env_of = |instance: &str| [vm_env.clone(), identity(instance)].concat();
    let port = e2e::free_port().to_string();

    // 1. The deploy: the bucket at AWS, the key in a secret at Google bound to the VM's account.
    let started = Instant::now();
    deploy(&local, "gcp-host", "aws-state", "e2-medium", REGION, &port).expect_code(0);
    eprintln!("deployed in {:?}", started.elapsed());
    let (instance, _) = runner.one(Duration::from_secs(30));
    assert_eq!(at_moto(&moto)["buckets"], json!([BUCKET]), "the bucket is at AWS");
    assert!(!google.gcs().bucket_exists(BUCKET), "and not at Google");
    let names = google.secrets().names();
    assert_eq!(names.len(), 2, "the API's keys and the bucket's: {names:?}");
    let secret = names.iter().find(|name| name.ends_with("-checkpoint-storage")).unwrap();
    assert!(secret.starts_with(&format!("projects/{PROJECT}/secrets/anycloud-api-")), "{secret}");
    let keys_secret = names.iter().find(|name| name.contains("/secrets/anycloud-keys-")).unwrap().clone();
    let held: Value = serde_json::from_str(&google.secrets().latest(secret).unwrap()).unwrap();
    assert_eq!((held["provider"].as_str(), held["access_key_id"].as_str()), (Some("aws"), Some(AWS_KEYS[0].1)));
    let vms = hosted_at_google(&google, ROLE_TAG, "hosted-api");
    assert_eq!(vms.len(), 1, "{vms:#?}");
    let account = vms[0]["serviceAccounts"][0]["email"].as_str().unwrap().to_owned();
    assert!(account != CLIENT_EMAIL && google.iam().exists(&account), "the API's own account: {account}");
    for held in [secret.as_str(), keys_secret.as_str()] {
        assert_eq!(
            google.secrets().policy(held).unwrap()["bindings"],
            json!([{"role": "roles/secretmanager.secretAccessor", "members": [format!("serviceAccount:{account}")]}]),
            "the VM's own service account, and it alone, reads {held}"
        );
    }
    assert_eq!(
        vms[0]["serviceAccounts"][0]["scopes"],
        json!(["https://www.googleapis.com/auth/cloud-platform"]),
        "Secret Manager has no narrower scope"
    );
    let metadata = vms[0]["metadata"].to_string();
    assert!(metadata.contains(secret.as_str()), "the unit names the secret: {metadata}");
    assert!(!metadata.contains(AWS_KEYS[1].1), "the storage key in the instance's metadata");
    let log = runner.log(&instance);
    assert!(log.contains(&format!("its key read from GCP Secret Manager secret {secret}")), "{log}");
    let vm_args = runner.args(&instance);

    // 2. A cluster on the hosted API, its control plane and capacity at Google; the disk lost.
    create_cluster(&local, "gcp-host", REGION, "e2-standard-2");
    let status = runner.kill_wipe_and_await_ready(&local, &instance, "training");
    let cluster_id = status["cluster"]["id"].as_str().unwrap().to_owned();
    assert_eq!(hosted_at_google(&google, CLUSTER_TAG, &cluster_id).len(), 2, "none launched twice");
    let log = runner.log(&instance);
    assert!(log.contains("restored from s3://team-api-state/"), "{log}");
    eprintln!("the hosted API read its key in {:?} ms at each start", secret_read_ms(&log));

    // 3. Stopped: the secret goes; the bucket stays.
    local.spawn_cli(&["api", "stop", "team-api"]).wait(Duration::from_secs(120)).expect_code(0);
    assert_eq!(
        google.secrets().names(),
        [keys_secret],
        "the bucket's key is deleted, the API's keys stay with its bucket"
    );
    assert_eq!(at_moto(&moto)["buckets"], json!([BUCKET]), "the bucket stays");

    assert!(!google.iam().exists(&account), "the API's account goes with its VM");
    assert_eq!(google.iam().bindings_of(PROJECT, &format!("serviceAccount:{account}")), vec![]);

    // 4. A VM whose secret cannot be read starts nothing.
    let out = start_vm_process_again(vm_args.clone(), &env_of(&instance), &local.scratch());
    out.expect_code(2).expect_stderr("CHECKPOINT_SECRET_UNREADABLE");
    assert!(out.stderr.contains(secret.as_str()) && out.stderr.contains("secretAccessor"), "{out}");

    // 5. Again on the same bucket (a new secret); a VM whose account lost the accessor binding
    // on it starts nothing either; then deleted with the bucket.
    deploy(&local, "gcp-host", "aws-state", "e2-medium", REGION, &port).expect_code(0);
    local.cli(&["--json", "cluster", "status", "training"]).expect_code(0);
    let secret = google.secrets().names().into_iter().find(|name| name.ends_with("-checkpoint-storage")).unwrap();
    let (instance, _) = runner.one(Duration::from_secs(30));
    let vm_args = runner.args(&instance);
    google.secrets().set_bindings(&secret, json!([]));
    let out = start_vm_process_again(vm_args, &env_of(&instance), &local.scratch());
    out.expect_code(2).expect_stderr("CHECKPOINT_SECRET_UNREADABLE");
    assert!(out.stderr.contains("HTTP 403") && out.stderr.contains("secretmanager.versions.access"), "{out}");
    local.spawn_cli(&["api", "delete", "team-api", "--delete-bucket"]).wait(Duration::from_secs(120)).expect_code(0);
    assert!(google.secrets().names().is_empty(), "the secret is deleted");
    assert_eq!(at_moto(&moto)["buckets"], json!([]), "the bucket is deleted, as asked");

    local.assert_secret_nowhere(AWS_KEYS[1].1);
    for vm in std::fs::read_dir(local.scratch().join("vms")).unwrap() {
        let log = std::fs::read_to_string(vm.unwrap().path().join("api.log")).unwrap_or_default();
        assert!(!log.contains(AWS_KEYS[1].1), "the key in the VM's log");
    }
}

#[test]
fn a_cancelled_cross_provider_deploy_deletes_the_secret_it_stored() {
    const REGION: &str = "us-east-1";
    let moto = Moto::start();
    let google = FakeGoogle::start();
    let (local, key_file) = deployer();
    aws_credential(&local, "aws-host", &moto, REGION);
    gcp_credential(&local, "gcp-state", &key_file, &google);
    // No VM runner: the VM never answers, and the deploy waits in `wait_until_answers`.
    let port = e2e::free_port().to_string();
    let follower = spawn_deploy(&local, "aws-host", "gcp-state", "t3.medium", REGION, &port);
    e2e::wait_until(Duration::from_secs(300), "the deploy to store its secrets", || {
        (at_moto(&moto)["secrets"].as_object().unwrap().len() == 2).then_some(())
    });
    let elastic_ips = || {
        let count = moto.python(
            r#"
import os, boto3
ec2 = boto3.client("ec2", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
print(len(ec2.describe_addresses()["Addresses"]))
"#,
            &[],
        );
        count.trim().parse::<usize>().unwrap()
    };
    e2e::wait_until(Duration::from_secs(60), "the deploy to reserve its address", || {
        (elastic_ips() == 1).then_some(())
    });
    let run = latest_deploy(&local).unwrap();
    local.cli(&["workflow", "cancel", &run]).expect_code(0);
    e2e::wait_until(Duration::from_secs(90), "the deploy to unwind", || {
        (local.inspect(&run, false)["run"]["status"] == "cancelled").then_some(())
    });
    let state = at_moto(&moto);
    assert!(state["secrets"].as_object().unwrap().is_empty(), "both secrets are deleted: {state:#}");
    assert!(state["policies"] == json!({}) && state["instances"] == json!([]), "{state:#}");
    assert!(!google.gcs().bucket_exists(BUCKET), "the bucket it created is deleted");
    assert_eq!(elastic_ips(), 0, "the Elastic IP it reserved is released");
    let inspected = local.inspect(&run, true).to_string();
    assert!(inspected.contains("store_storage_secret"), "{inspected}");
    assert!(!inspected.contains(private_key_line()), "the key in inspect");
    let out = follower.wait(Duration::from_secs(60));
    assert_ne!(out.code, 0, "the follower says the deploy did not succeed: {out}");
}

/// Both stores take the same secret twice (a step run again after a crash) and delete it twice
/// (an unwind retried, a removal after it): one secret, its latest value, nothing left.
#[test]
fn a_vm_secret_is_stored_and_deleted_idempotently_on_each_provider() {
    use anycloud_workflows::cloud::Cloud;
    use anycloud_workflows::db::credentials::PublicPart;
    use anycloud_workflows::providers::{aws_cloud::AwsCloud, gcp_cloud::GcpCloud};

    let moto = Moto::start();
    let google = FakeGoogle::start();
    let aws_public = PublicPart {
        identity: AWS_KEYS[0].1.to_owned(),
        region: Some("us-east-1".to_owned()),
        endpoint: Some(moto.endpoint.clone()),
        ..PublicPart::default()
    };
    let gcp_public = PublicPart {
        identity: CLIENT_EMAIL.to_owned(),
        project: Some(PROJECT.to_owned()),
        endpoint: Some(google.endpoint()),
        ..PublicPart::default()
    };
    let (owner, name) = ("api-0123456789ab", "anycloud-api-0123456789ab-checkpoint-storage");
    e2e::block_on(async {
        let aws = AwsCloud::new(&aws_public, AWS_KEYS[1].1, "us-east-1");
        let aws_name = "anycloud/api-0123456789ab/checkpoint-storage";
        let first = aws.store_vm_secret(owner, aws_name, "one").await.unwrap();
        let again = aws.store_vm_secret(owner, aws_name, "two").await.unwrap();
        assert_eq!(first, again, "the same secret, a new version");
        assert_eq!(aws.store_vm_secret(owner, aws_name, "two").await.unwrap(), first, "the same value: no new version");
        assert_eq!(aws.read_vm_secret(aws_name).await.unwrap().as_deref(), Some("two"));
        assert_eq!(aws.read_vm_secret("anycloud/api-0123456789ab/none").await.unwrap(), None);
        assert!(first.starts_with("arn:aws:secretsmanager:us-east-1:"), "{first}");
        let held = at_moto(&moto)["secrets"].clone();
        assert_eq!(held, json!({aws_name: {"arn": first, "value": "two"}}));
        aws.delete_vm_secret(aws_name).await.unwrap();
        aws.delete_vm_secret(aws_name).await.unwrap();
        assert_eq!(at_moto(&moto)["secrets"], json!({}));

        let gcp = GcpCloud::new(&gcp_public, &service_account_json()).await.unwrap();
        let first = gcp.store_vm_secret(owner, name, "one").await.unwrap();
        let again = gcp.store_vm_secret(owner, name, "two").await.unwrap();
        assert_eq!(
            (first.as_str(), again.as_str()),
            (format!("projects/{PROJECT}/secrets/{name}").as_str(), first.as_str())
        );
        assert_eq!(google.secrets().latest(&first).as_deref(), Some("two"));
        assert_eq!(google.secrets().version_count(&first), 2);
        assert_eq!(google.secrets().live_versions(&first), ["two"], "the older version is destroyed");
        gcp.store_vm_secret(owner, name, "two").await.unwrap();
        assert_eq!(google.secrets().version_count(&first), 2, "the same value: no new version");
        assert_eq!(gcp.read_vm_secret(name).await.unwrap().as_deref(), Some("two"));
        assert_eq!(gcp.read_vm_secret("anycloud-api-0123456789ab-none").await.unwrap(), None);
        let bindings = google.secrets().policy(&first).unwrap()["bindings"].clone();
        assert_eq!(bindings.as_array().unwrap().len(), 1, "one binding however often: {bindings}");
        gcp.delete_vm_secret(name).await.unwrap();
        gcp.delete_vm_secret(name).await.unwrap();
        assert!(google.secrets().names().is_empty());
    });
}
