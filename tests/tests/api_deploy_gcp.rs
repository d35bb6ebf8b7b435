//! `anycloud api serve --credentials <gcp> --checkpoint-bucket` end to end, against the fake
//! Compute Engine and the fake Cloud Storage behind one endpoint ([`FakeGoogle`], as Google's
//! front serves both): the local API's `api.deploy` run makes the bucket (versioned, uniform
//! access, public access prevented), the CLI's own binary in it, the API's identity in it, the
//! firewall rule for the API's port, and the VM acting as the credential's service account with
//! the storage scope. The fake's VM boots nothing, so the tests' VM runner ([`VmRunner`]) does
//! what its startup script does: it fetches the binary through the V4 signed URL in the script,
//! which the fake GCS checks as GCS does, and checks its SHA-256 (a swapped byte in the stored
//! object is refused and nothing starts); then it runs it with exactly the arguments of the
//! startup script's systemd unit, its Google identity a key file (as a GCE
//! VM's metadata server would give it one); the deploy saves the hosting credential on the
//! hosted API. Then, on the hosted API, a cluster across two providers as the spec's Placement
//! table puts it: its control plane on the hosting credential (GCP, the API's region and machine
//! type), its capacity on an AWS credential at moto, joining the control plane over its public
//! address. The VM runs as a service account made for the API, not the deployer's (the runner
//! gives its process that account's key): asked of the fake IAM, the account exists, the project
//! binds it to exactly its conditioned Compute Engine roles, the bucket to its object roles, the
//! keys' secret to it alone; a stop and a delete leave none of it. The hosted API SIGKILLed with its disk wiped, a fresh one restores from the bucket;
//! the cluster is deleted on both providers; `api stop` keeps the bucket; a second deploy on it is
//! the same API; `api delete --delete-bucket` leaves nothing. What Google and AWS hold is asked of
//! the fakes and of moto, never of anycloud.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{self, Api, ApiOptions, Moto};
use anycloud_tests::fake_google::FakeGoogle;
use anycloud_tests::gcp_test_key::{CLIENT_EMAIL, PROJECT, TEST_ONLY_PRIVATE_KEY, service_account_json};
use anycloud_tests::simulated_kube::{BothMachines, GceMachines, MotoMachines, SimulatedKube};
use anycloud_tests::vm_runner::{Launcher, VmRunner, gce_service_account};
use anycloud_workflows::cloud::{CLUSTER_TAG, ROLE_TAG};
use serde_json::{Value, json};

const REGION: &str = "us-central1";
const BUCKET: &str = "team-api-state";
const HOSTING: &str = "gcp-host";

/// The instances the fake runs (or is starting) with `label` = `value`.
fn live_instances(google: &FakeGoogle, label: &str, value: &str) -> Vec<Value> {
    google.gce().live_instances(PROJECT, label, value)
}

/// The cluster's instances at moto that run (or are starting), as boto3 sees them.
fn at_moto(moto: &Moto, cluster_id: &str) -> Vec<Value> {
    const SCRIPT: &str = r#"
import base64, json, os
import boto3
ec2 = boto3.client("ec2", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
res = ec2.describe_instances(Filters=[{"Name": "tag:anycloud-cluster", "Values": [os.environ["CLUSTER"]]},
                                      {"Name": "instance-state-name", "Values": ["pending", "running"]}])
groups = ec2.describe_security_groups(Filters=[{"Name": "tag:anycloud-cluster", "Values": [os.environ["CLUSTER"]]}])
print(json.dumps({"groups": len(groups["SecurityGroups"]), "instances": [
    {"type": i["InstanceType"], "tags": {t["Key"]: t["Value"] for t in i.get("Tags", [])},
     "user_data": base64.b64decode(ec2.describe_instance_attribute(InstanceId=i["InstanceId"], Attribute="userData")
                                   ["UserData"].get("Value", "")).decode()}
    for r in res["Reservations"] for i in r["Instances"]]}))
"#;
    let out: Value = serde_json::from_str(moto.python(SCRIPT, &[("CLUSTER", cluster_id)]).trim()).unwrap();
    let mut instances = out["instances"].as_array().unwrap().clone();
    if out["groups"].as_u64().unwrap() > 0 {
        instances.push(json!({"security_groups": out["groups"]}));
    }
    instances
}

/// The fake's static addresses of hosted APIs (`ac-<12hex>-api-ip`).
fn api_addresses(google: &FakeGoogle) -> Vec<Value> {
    google.gce().addresses(PROJECT).into_iter().filter(|a| a["name"].as_str().unwrap().ends_with("-api-ip")).collect()
}

fn https_rules(google: &FakeGoogle) -> Vec<Value> {
    google.gce().firewalls(PROJECT).into_iter().filter(|f| f["name"].as_str().unwrap().ends_with("-https")).collect()
}

#[test]
fn an_api_deployed_on_gcp_serves_restores_after_a_wiped_disk_and_is_removed() {
    let google = FakeGoogle::start();
    let moto = Moto::start();
    let kube = SimulatedKube::start(BothMachines(
        GceMachines::new(google.gce().clone(), PROJECT),
        MotoMachines::new(&moto.endpoint, "us-east-1"),
    ));
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
    // identity a key file of the service account the instance runs as, where a GCE VM would ask
    // its metadata server.
    let runner = VmRunner::start(
        GceMachines::new(google.gce().clone(), PROJECT),
        Launcher {
            env: vec![
                ("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url()),
                ("NO_PROXY".into(), "127.0.0.1,localhost".into()),
            ],
            scratch: local.scratch().join("vms"),
            identity: Some(gce_service_account(google.gce().clone(), PROJECT, local.scratch().join("vm-keys"))),
        },
    );
    let policy_before = google.iam().project_bindings(PROJECT);
    let port = e2e::free_port().to_string();
    // No --binary: the CLI ships its own binary, the seamed one (the VM needs its seams).
    let deploy = || {
        local.spawn_cli_seamed(&[
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
            "--use",
        ])
    };

    // 1. The deploy. The VM boots while a byte of the binary in the bucket is swapped: its boot
    // script refuses it and nothing starts; booted again with the object restored, it serves.
    runner.hold();
    let first = deploy();
    let booting = e2e::wait_until(Duration::from_secs(300), "the API's VM at the fake GCE", || {
        let vms = live_instances(&google, ROLE_TAG, "hosted-api");
        (vms.len() == 1).then(|| vms[0]["id"].as_str().unwrap().to_owned())
    });
    let shipped = std::fs::read(e2e::anycloud_seamed_bin()).unwrap();
    let sha = anycloud_workflows::hosting::binary::sha256_hex(&shipped);
    let key = format!("binaries/anycloud-{sha}");
    let stored = google.gcs().objects(BUCKET).into_iter().find(|o| o.name == key).expect("the shipped binary");
    assert_eq!(stored.bytes.as_ref(), shipped.as_slice(), "the bucket holds the CLI's own binary");
    let mut swapped = shipped.clone();
    let middle = swapped.len() / 2;
    swapped[middle] ^= 0xFF;
    google.gcs().put_raw(BUCKET, &key, swapped);
    runner.release();
    let why =
        e2e::wait_until(Duration::from_secs(60), "the VM to refuse the swapped binary", || runner.refusal(&booting));
    assert!(why.contains(&format!("not {sha}")) && why.contains("installing nothing"), "{why}");
    assert!(runner.running().is_empty() && runner.binary(&booting).is_none(), "nothing starts");
    google.gcs().put_raw(BUCKET, &key, shipped.clone());
    runner.reboot(&booting);
    let out = first.wait(Duration::from_secs(420));
    out.expect_code(0);
    let shown = out.last_json();
    assert_eq!(shown["kind"], "hosted (gcp)", "{out}");
    assert_eq!(shown["url"], format!("https://127.0.0.1:{port}"), "{out}");
    let (instance, _) = runner.one(Duration::from_secs(30));
    let vms = live_instances(&google, ROLE_TAG, "hosted-api");
    assert_eq!(vms.len(), 1, "{vms:#?}");
    assert_eq!(vms[0]["id"], instance.as_str(), "{vms:#?}");
    let account = vms[0]["serviceAccounts"][0]["email"].as_str().unwrap().to_owned();
    assert_own_account(&google, &account, &policy_before);
    assert_eq!(
        vms[0]["serviceAccounts"][0]["scopes"],
        json!(["https://www.googleapis.com/auth/cloud-platform"]),
        "it reads its keys from Secret Manager, which has no narrower scope: {:#}",
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
    assert!(names.iter().any(|name| name == "HEAD"), "{names:?}");
    let identity: Vec<&String> = names.iter().filter(|name| name.starts_with("identity/")).collect();
    // No key file; not even the simulated cloud's port: it is off on a GCE VM.
    assert!(identity.is_empty(), "no identity file in the bucket: {names:?}");
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
    // The VM's static address: one, reserved in the region, its natIP, and the address its unit
    // issues the certificate for (the runner serves it on 127.0.0.1 instead, the seam).
    let addresses = api_addresses(&google);
    assert_eq!(addresses.len(), 1, "{addresses:#?}");
    let reserved = addresses[0]["address"].as_str().unwrap().to_owned();
    assert_eq!(addresses[0]["status"], "IN_USE", "{addresses:#?}");
    assert_eq!(vms[0]["networkInterfaces"][0]["accessConfigs"][0]["natIP"], reserved.as_str(), "{:#}", vms[0]);
    assert!(metadata.contains(&format!("echo 'ANYCLOUD_ADDRESS={reserved}'")), "{metadata}");
    // Fetched through a V4 signed URL of 15 minutes on the bucket's endpoint, and run as shipped.
    assert!(metadata.contains(&format!("/team-api-state/{key}?X-Goog-Algorithm=GOOG4-RSA-SHA256")), "{metadata}");
    assert!(metadata.contains("X-Goog-Expires=900") && metadata.contains("X-Goog-Signature="), "{metadata}");
    assert_eq!(std::fs::read(runner.binary(&instance).unwrap()).unwrap(), shipped, "the VM runs what was shipped");
    assert!(!metadata.contains(&token) && !metadata.contains("PRIVATE KEY"), "a secret in the metadata");
    // The API's keys are in Secret Manager, one secret named after the bucket that the VM's
    // account reads; and nowhere else: not in any generation of any object of the bucket, the
    // instance's metadata, the deployer's logs, output and data, the VM's log and database.
    let secrets = google.secrets().names();
    assert_eq!(secrets.len(), 1, "{secrets:?}");
    assert!(secrets[0].starts_with(&format!("projects/{PROJECT}/secrets/anycloud-keys-")), "{secrets:?}");
    assert!(metadata.contains(&format!("--keys-secret {}", secrets[0])), "the unit names it: {metadata}");
    assert_eq!(
        google.secrets().policy(&secrets[0]).unwrap()["bindings"],
        json!([{"role": "roles/secretmanager.secretAccessor", "members": [format!("serviceAccount:{account}")]}]),
        "the VM's own account, and it alone, reads the keys"
    );
    let api_keys: Value = serde_json::from_str(&google.secrets().latest(&secrets[0]).unwrap()).unwrap();
    assert_eq!(api_keys["token"], token.as_str());
    let ca_key = api_keys["ca_key_pem"].as_str().unwrap().lines().nth(1).unwrap().to_owned();
    let hosting_key = TEST_ONLY_PRIVATE_KEY.lines().nth(5).unwrap().to_owned();
    let needles = [token.as_str(), api_keys["sealing_key"].as_str().unwrap(), &ca_key, &hosting_key];
    for object in google.gcs().generations(BUCKET) {
        for needle in needles {
            assert!(!e2e::contains_bytes(&object.bytes, needle.as_bytes()), "a key in {}", object.name);
        }
    }
    for needle in needles {
        assert!(!metadata.contains(needle), "a key in the metadata");
        local.assert_secret_nowhere(needle);
    }
    assert_eq!(runner.secrets_outside_key_files(&instance, &needles), vec![], "a key on the VM's disk or log");

    // 2. On the hosted API, over HTTPS through the pinned CA: the deploy saved the hosting
    // credential there, verified from the VM.
    let out = local.cli(&["api", "status"]);
    out.expect_code(0);
    assert!(out.stdout.contains("hosted (gcp)") && out.stdout.contains("checkpoint  gs://team-api-state/"), "{out}");
    assert_eq!(local.credential(HOSTING)["status"], "valid", "the hosting credential on the hosted API");
    // A cluster across two providers: its capacity on AWS (moto), its control plane where the API
    // is hosted (the fake GCE).
    let out = local.cli_env(
        &[
            "credentials",
            "new",
            "aws-capacity",
            "--provider",
            "aws",
            "--endpoint",
            &moto.endpoint,
            "--region",
            "us-east-1",
            "--wait",
        ],
        &[("AWS_ACCESS_KEY_ID", "AKIAANYCLOUDCAPACITY"), ("AWS_SECRET_ACCESS_KEY", "moto-capacity-secret-key")],
    );
    out.expect_code(0);
    let out = local.spawn_cli(&[
        "cluster",
        "create",
        "training",
        "--credentials",
        "aws-capacity",
        "--region",
        "us-east-1",
        "--vm-type",
        "t3.large",
        "--min-vms",
        "1",
        "--max-vms",
        "1",
        "--wait",
    ]);
    out.wait(Duration::from_secs(120)).expect_code(0);
    let status = local.cli(&["--json", "cluster", "status", "training"]).json();
    let cluster_id = status["cluster"]["id"].as_str().unwrap().to_owned();
    assert_eq!(status["cluster"]["control_plane_credential"], HOSTING, "{status:#}");
    let control_planes = live_instances(&google, CLUSTER_TAG, &cluster_id);
    assert_eq!(control_planes.len(), 1, "the control plane, and only it, at Google: {control_planes:#?}");
    let cp = &control_planes[0];
    assert_eq!(cp["labels"][ROLE_TAG], "control-plane", "{cp:#}");
    assert!(cp["machineType"].as_str().unwrap().ends_with("/machineTypes/e2-medium"), "the API's type: {cp:#}");
    let cp_address = cp["networkInterfaces"][0]["accessConfigs"][0]["natIP"].as_str().unwrap().to_owned();
    let prefix = format!("ac-{}", &cluster_id.replace('-', "")[..12]);
    let reserved: Vec<Value> =
        google.gce().addresses(PROJECT).into_iter().filter(|a| a["name"] == format!("{prefix}-cp-ip")).collect();
    assert_eq!(reserved.len(), 1, "the control plane's static address, on the hosting side");
    assert_eq!(reserved[0]["address"], cp_address.as_str(), "the control plane's public address is the reserved one");
    let workers = at_moto(&moto, &cluster_id);
    assert_eq!(workers.len() - 1, 1, "one worker and the cluster's group at moto: {workers:#?}");
    assert_eq!(
        (workers[0]["tags"][ROLE_TAG].as_str(), workers[0]["type"].as_str()),
        (Some("worker"), Some("t3.large"))
    );
    let join = format!("K3S_URL='https://{cp_address}:6443'");
    assert!(workers[0]["user_data"].as_str().unwrap().contains(&join), "joins over the public address: {join}");

    // 3. The VM's disk is lost: a fresh one restores everything from the bucket.
    let status = runner.kill_wipe_and_await_ready(&local, &instance, "training");
    assert_eq!(status["cluster"]["id"], cluster_id.as_str());
    assert_eq!(live_instances(&google, CLUSTER_TAG, &cluster_id).len(), 1, "none launched twice");
    assert_eq!(at_moto(&moto, &cluster_id).len() - 1, 1, "none launched twice");
    assert!(runner.log(&instance).contains("restored from gs://team-api-state/"), "{}", runner.log(&instance));

    // The cluster is deleted on both providers.
    local.spawn_cli(&["cluster", "delete", "training", "--wait"]).wait(Duration::from_secs(120)).expect_code(0);
    assert!(live_instances(&google, CLUSTER_TAG, &cluster_id).is_empty());
    let rules = google.gce().firewalls(PROJECT);
    let addresses = google.gce().addresses(PROJECT);
    assert!(!addresses.iter().any(|a| a["name"].as_str().unwrap().starts_with(&prefix)), "{addresses:#?}");
    assert!(!rules.iter().any(|r| r["name"].as_str().unwrap().starts_with(&prefix)), "{rules:#?}");
    assert!(at_moto(&moto, &cluster_id).is_empty(), "no worker and no group left at moto");

    // 4. Stopped: the VM and its rule go; the bucket and the state in it stay.
    let out = local.spawn_cli(&["api", "stop", "team-api"]).wait(Duration::from_secs(120));
    out.expect_code(0);
    assert!(out.stdout.contains("its bucket gs://team-api-state/ stays"), "{out}");
    assert!(live_instances(&google, ROLE_TAG, "hosted-api").is_empty());
    assert!(https_rules(&google).is_empty());
    assert!(api_addresses(&google).is_empty(), "the stop releases the address");
    assert!(google.gcs().objects(BUCKET).len() > 3);
    assert_eq!(google.secrets().names().len(), 1, "the keys stay with the bucket");
    assert_account_gone(&google, &account, &policy_before);

    // 5. Deployed again on the same bucket: the same API, with the same token and credentials.
    deploy().wait(Duration::from_secs(420)).expect_code(0);
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(local.config_dir().join("config.json")).unwrap()).unwrap();
    assert_eq!(config["apis"]["team-api"]["token"], token.as_str(), "the bucket's token is kept");
    assert!(local.cli(&["credentials", "list"]).stdout.contains("aws-capacity"));
    assert_eq!(api_addresses(&google).len(), 1, "the redeploy reserves its own address");
    let vms = live_instances(&google, ROLE_TAG, "hosted-api");
    let account = vms[0]["serviceAccounts"][0]["email"].as_str().unwrap().to_owned();
    assert_own_account(&google, &account, &policy_before);
    assert_eq!(
        google.secrets().policy(&secrets[0]).unwrap()["bindings"],
        json!([{"role": "roles/secretmanager.secretAccessor", "members": [format!("serviceAccount:{account}")]}]),
        "the kept keys are bound to the new API's account alone"
    );

    // 6. Deleted with its bucket: nothing of the API is left at Google.
    let out = local.spawn_cli(&["api", "delete", "team-api", "--delete-bucket"]).wait(Duration::from_secs(120));
    out.expect_code(0);
    assert!(out.stdout.contains("nothing stays"), "{out}");
    assert!(live_instances(&google, ROLE_TAG, "hosted-api").is_empty() && https_rules(&google).is_empty());
    assert!(google.gce().addresses(PROJECT).is_empty(), "{:#?}", google.gce().addresses(PROJECT));
    assert!(!google.gcs().bucket_exists(BUCKET), "the bucket is deleted");
    assert!(google.secrets().names().is_empty(), "the keys go with the bucket");
    assert_account_gone(&google, &account, &policy_before);
}

/// The roles the API's account holds on the project, each with its condition.
fn expected_project_roles() -> Vec<(String, Value)> {
    let named = |kind: &str, collection: &str| {
        format!(
            "(resource.type != \"compute.googleapis.com/{kind}\" || \
             resource.name.extract(\"/{collection}/{{name}}\").startsWith(\"ac-\"))"
        )
    };
    let description = "only the ac-... resources anycloud names";
    vec![
        (
            "roles/compute.instanceAdmin.v1".to_owned(),
            json!({"title": "anycloud-instances", "description": description,
                   "expression": format!("{} && {}", named("Instance", "instances"), named("Disk", "disks"))}),
        ),
        ("roles/compute.publicIpAdmin".to_owned(), Value::Null),
        (
            "roles/compute.securityAdmin".to_owned(),
            json!({"title": "anycloud-firewalls", "description": description,
                   "expression": named("Firewall", "firewalls")}),
        ),
    ]
}

/// The hosted API's VM runs as `account`, an account of its own that the fake IAM holds, not
/// the deployer's; the project binds it to exactly its conditioned Compute Engine roles (the
/// rest of the policy as it was), and the bucket to exactly its object and bucket-reader roles.
fn assert_own_account(google: &FakeGoogle, account: &str, policy_before: &[Value]) {
    assert_ne!(account, CLIENT_EMAIL, "the VM runs as the deployer's account");
    assert!(account.starts_with("anycloud-api") && account.ends_with(&format!("@{PROJECT}.iam.gserviceaccount.com")));
    let made = google.iam().account(account).unwrap_or_else(|| panic!("{account} is not an account at IAM"));
    assert!(made["displayName"].as_str().unwrap().starts_with("anycloud hosted API api-"), "{made:#}");
    let member = format!("serviceAccount:{account}");
    let mut held = google.iam().bindings_of(PROJECT, &member);
    held.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(held, expected_project_roles(), "exactly its roles on the project, role by role");
    let others: Vec<Value> = google
        .iam()
        .project_bindings(PROJECT)
        .into_iter()
        .filter(|b| !b["members"].as_array().unwrap().iter().any(|m| m == member.as_str()))
        .collect();
    assert_eq!(others, policy_before, "the rest of the project's policy is as it was");
    let bucket = google.gcs().bucket_bindings(BUCKET).unwrap();
    let mut on_bucket: Vec<&str> = bucket
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["members"].as_array().unwrap().iter().any(|m| m == member.as_str()))
        .map(|b| b["role"].as_str().unwrap())
        .collect();
    on_bucket.sort_unstable();
    assert_eq!(on_bucket, ["roles/storage.legacyBucketReader", "roles/storage.objectUser"], "{bucket:#}");
}

/// Nothing of `account` is left: the account, its project bindings, its bucket binding.
fn assert_account_gone(google: &FakeGoogle, account: &str, policy_before: &[Value]) {
    assert!(!google.iam().exists(account), "{account} is deleted");
    assert_eq!(google.iam().accounts(PROJECT), [CLIENT_EMAIL], "no account of an API is left");
    assert_eq!(google.iam().project_bindings(PROJECT), policy_before, "the project's policy is as it was");
    if let Some(bucket) = google.gcs().bucket_bindings(BUCKET) {
        assert!(!bucket.to_string().contains(account), "the bucket still names {account}: {bucket:#}");
    }
}
