//! `anycloud api serve --credentials <aws> --checkpoint-bucket` end to end, against moto: the
//! local API's `api.deploy` run makes the bucket (versioned, private), ships the CLI's own binary
//! into it, the API's identity in it, the security group, the IAM role and instance profile, and
//! the VM. moto's VM boots nothing, so the tests' VM runner ([`VmRunner`]) does what its boot
//! script does: it fetches the binary through the presigned URL in the user-data and checks its
//! SHA-256 (a swapped byte in the bucket's object is refused and nothing starts), then runs it
//! with exactly the arguments of the user-data's systemd unit. Then, on the hosted API, through the CLI config `--use` wrote (its
//! CA pinned): a credential and a cluster at moto; the hosted API SIGKILLed and its disk wiped,
//! a fresh one restores from the bucket with everything; `api stop` removes the VM, rules and
//! role and keeps the bucket; a second deploy on that bucket restores the same API; `api delete
//! --delete-bucket` leaves nothing. What moto holds is asked of moto itself (boto3), never of
//! anycloud.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{self, Api, ApiOptions, Moto};
use anycloud_tests::simulated_kube::{MotoMachines, SimulatedKube};
use anycloud_tests::vm_runner::{Launcher, VmRunner};
use serde_json::Value;

const REGION: &str = "us-east-1";
const BUCKET: &str = "team-api-state";
const HOSTING: &str = "aws-host";

/// What moto holds of the API `team-api`, as boto3 sees it.
fn at_moto(moto: &Moto) -> Value {
    const SCRIPT: &str = r#"
import base64, json, os
import boto3
from botocore.exceptions import ClientError
kw = dict(endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
ec2, s3, iam = boto3.client("ec2", **kw), boto3.client("s3", **kw), boto3.client("iam", **kw)
out = {}
res = ec2.describe_instances(Filters=[{"Name": "tag:anycloud-role", "Values": ["hosted-api"]}])
out["instances"] = [
    {"id": i["InstanceId"], "state": i["State"]["Name"], "profile": i.get("IamInstanceProfile", {}).get("Arn", ""),
     "public_ip": i.get("PublicIpAddress", ""),
     "metadata": {k: i.get("MetadataOptions", {}).get(k) for k in ("HttpTokens", "HttpPutResponseHopLimit", "HttpEndpoint")},
     "user_data": base64.b64decode(ec2.describe_instance_attribute(InstanceId=i["InstanceId"], Attribute="userData")
                                   ["UserData"].get("Value", "")).decode()}
    for r in res["Reservations"] for i in r["Instances"]]
groups = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["anycloud-api-*"]}])["SecurityGroups"]
out["groups"] = [{"name": g["GroupName"], "ports": sorted(p.get("FromPort", -1) for p in g["IpPermissions"])} for g in groups]
out["addresses"] = [
    {"ip": a["PublicIp"], "instance": a.get("InstanceId", ""), "vm": {t["Key"]: t["Value"] for t in a.get("Tags", [])}.get("anycloud-vm", "")}
    for a in ec2.describe_addresses()["Addresses"]
    if {t["Key"]: t["Value"] for t in a.get("Tags", [])}.get("anycloud-cluster", "").startswith("api-")]
out["roles"] = [r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"].startswith("anycloud-")]
out["policies"] = {r: {p: iam.get_role_policy(RoleName=r, PolicyName=p)["PolicyDocument"]
                       for p in iam.list_role_policies(RoleName=r)["PolicyNames"]}
                   for r in out["roles"]}
out["profiles"] = [p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]]
sm = boto3.client("secretsmanager", **kw)
out["secrets"] = {s["Name"]: sm.get_secret_value(SecretId=s["ARN"])["SecretString"] for s in sm.list_secrets()["SecretList"]}
out["secret_policies"] = {s["Name"]: json.loads(sm.get_resource_policy(SecretId=s["ARN"]).get("ResourcePolicy") or "null")
                          for s in sm.list_secrets()["SecretList"]}
try:
    s3.head_bucket(Bucket=os.environ["BUCKET"])
    out["bucket"] = {
        "versioning": s3.get_bucket_versioning(Bucket=os.environ["BUCKET"]).get("Status"),
        "public_access_block": s3.get_public_access_block(Bucket=os.environ["BUCKET"])["PublicAccessBlockConfiguration"],
        "lifecycle": s3.get_bucket_lifecycle_configuration(Bucket=os.environ["BUCKET"])["Rules"],
        "keys": sorted(o["Key"] for o in s3.list_objects_v2(Bucket=os.environ["BUCKET"]).get("Contents", [])),
    }
except ClientError:
    out["bucket"] = None
print(json.dumps(out))
"#;
    serde_json::from_str(moto.python(SCRIPT, &[("BUCKET", BUCKET)]).trim()).unwrap()
}

/// Which of `needles` appear in some version of some object of the bucket: `KEY: NEEDLE` each.
fn secrets_in_bucket(moto: &Moto, needles: &[&str]) -> Vec<String> {
    const SCRIPT: &str = r#"
import json, os
import boto3
s3 = boto3.client("s3", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
needles = json.loads(os.environ["NEEDLES"])
for v in s3.list_object_versions(Bucket=os.environ["BUCKET"]).get("Versions", []):
    body = s3.get_object(Bucket=os.environ["BUCKET"], Key=v["Key"], VersionId=v["VersionId"])["Body"].read()
    for needle in needles:
        if needle.encode() in body:
            print(v["Key"] + ": " + needle[:12] + "...")
"#;
    let needles = serde_json::to_string(needles).unwrap();
    moto.python(SCRIPT, &[("BUCKET", BUCKET), ("NEEDLES", &needles)]).lines().map(str::to_owned).collect()
}

/// Swaps a byte in the middle of object `key` of the bucket (its original kept in `backup`).
fn swap_a_byte(moto: &Moto, key: &str, backup: &std::path::Path) {
    moto.python(
        r#"
import os, boto3
s3 = boto3.client("s3", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
body = s3.get_object(Bucket=os.environ["BUCKET"], Key=os.environ["KEY"])["Body"].read()
open(os.environ["BACKUP"], "wb").write(body)
swapped = bytearray(body)
swapped[len(swapped) // 2] ^= 0xFF
s3.put_object(Bucket=os.environ["BUCKET"], Key=os.environ["KEY"], Body=bytes(swapped))
"#,
        &[("BUCKET", BUCKET), ("KEY", key), ("BACKUP", backup.to_str().unwrap())],
    );
}

/// Puts `backup` back as object `key`.
fn restore(moto: &Moto, key: &str, backup: &std::path::Path) {
    moto.python(
        r#"
import os, boto3
s3 = boto3.client("s3", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
s3.put_object(Bucket=os.environ["BUCKET"], Key=os.environ["KEY"], Body=open(os.environ["BACKUP"], "rb").read())
"#,
        &[("BUCKET", BUCKET), ("KEY", key), ("BACKUP", backup.to_str().unwrap())],
    );
}

fn sha256_hex(bytes: &[u8]) -> String {
    anycloud_workflows::hosting::binary::sha256_hex(bytes)
}

fn live(state: &Value) -> Vec<&Value> {
    state["instances"].as_array().unwrap().iter().filter(|i| i["state"] != "terminated").collect()
}

#[test]
fn an_api_deployed_on_aws_serves_restores_after_a_wiped_disk_and_is_removed() {
    let moto = Moto::start();
    let kube = SimulatedKube::start(MotoMachines::new(&moto.endpoint, REGION));
    // The deployer: a local API (the credentials live there), reaching the VM where the runner
    // serves it.
    let local = Api::start_opts(ApiOptions {
        id: "local".into(),
        env: vec![("ANYCLOUD_TEST_HOSTED_API_ADDRESS".into(), "127.0.0.1".into())],
        ..ApiOptions::default()
    });
    let keys = [("AWS_ACCESS_KEY_ID", "AKIAANYCLOUDHOSTING1"), ("AWS_SECRET_ACCESS_KEY", "moto-hosting-secret-key")];
    let out = local.cli_env(
        &[
            "--json",
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
        ],
        &keys,
    );
    out.expect_code(0);

    // The VM: the seamed binary (the cluster below needs the simulated Kubernetes, as every
    // cluster at moto does), reaching S3 with keys that stand in for its instance profile.
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
    let deploy = |extra: &[&str]| {
        let mut args = vec![
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
        args.extend_from_slice(extra);
        // No --binary: the CLI ships its own binary, the seamed one (the VM needs its seams).
        local.spawn_cli_seamed(&args)
    };

    // 1. The deploy. The VM boots while a byte of the binary in the bucket is swapped: its boot
    // script refuses it and nothing starts; booted again with the object restored, it serves.
    runner.hold();
    let first = deploy(&[]);
    let booting = e2e::wait_until(Duration::from_secs(300), "the API's VM at moto", || {
        let state = at_moto(&moto);
        let vms = live(&state);
        (vms.len() == 1).then(|| vms[0]["id"].as_str().unwrap().to_owned())
    });
    let shipped = std::fs::read(e2e::anycloud_seamed_bin()).unwrap();
    let sha = sha256_hex(&shipped);
    let key = format!("binaries/anycloud-{sha}");
    let in_bucket = at_moto(&moto)["bucket"]["keys"].clone();
    assert!(in_bucket.as_array().unwrap().iter().any(|k| k == key.as_str()), "{key} not in the bucket: {in_bucket}");
    let backup = local.scratch().join("shipped-binary");
    swap_a_byte(&moto, &key, &backup);
    runner.release();
    let why =
        e2e::wait_until(Duration::from_secs(60), "the VM to refuse the swapped binary", || runner.refusal(&booting));
    assert!(why.contains(&format!("not {sha}")) && why.contains("installing nothing"), "{why}");
    assert!(runner.running().is_empty() && runner.binary(&booting).is_none(), "nothing starts");
    restore(&moto, &key, &backup);
    runner.reboot(&booting);
    let out = first.wait(Duration::from_secs(420));
    out.expect_code(0);
    let shown = out.last_json();
    assert_eq!(shown["kind"], "hosted (aws)", "{out}");
    assert_eq!(shown["url"], format!("https://127.0.0.1:{port}"), "{out}");
    let (instance, _) = runner.one(Duration::from_secs(30));
    let state = at_moto(&moto);
    let vms = live(&state);
    assert_eq!(vms.len(), 1, "{state:#}");
    assert_eq!(vms[0]["id"], instance.as_str());
    assert!(vms[0]["profile"].as_str().unwrap().contains("instance-profile/anycloud-api-"), "{state:#}");
    // IMDSv2 only, one hop: what the VM's role gives is for the VM's own processes.
    let metadata =
        serde_json::json!({"HttpTokens": "required", "HttpPutResponseHopLimit": 1, "HttpEndpoint": "enabled"});
    assert_eq!(vms[0]["metadata"], metadata, "{state:#}");
    let groups = state["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{state:#}");
    assert_eq!(groups[0]["ports"], serde_json::json!([port.parse::<i64>().unwrap()]), "only the API's port: {state:#}");
    assert_eq!(state["roles"].as_array().unwrap().len(), 1, "{state:#}");
    let role = state["roles"][0].as_str().unwrap();
    let owner = role.strip_prefix("anycloud-").unwrap().to_owned();
    assert_role_policy(&state["policies"][role], &owner, &state["secrets"]);
    let bucket = &state["bucket"];
    assert_eq!(bucket["versioning"], "Enabled", "{state:#}");
    assert!(bucket["public_access_block"].as_object().unwrap().values().all(|v| v == true), "{state:#}");
    assert_eq!(bucket["lifecycle"][0]["NoncurrentVersionExpiration"]["NoncurrentDays"], 30, "{state:#}");
    let keys_in_bucket: Vec<&str> = bucket["keys"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert!(keys_in_bucket.contains(&"HEAD"), "{keys_in_bucket:?}");
    let identity: Vec<&&str> = keys_in_bucket.iter().filter(|key| key.starts_with("identity/")).collect();
    // No key file; not even the simulated cloud's port: it is off on an AWS VM.
    assert!(identity.is_empty(), "no identity file in the bucket: {keys_in_bucket:?}");
    // The VM ran exactly what its unit says, and nothing secret rode in its user-data.
    let args = runner.args(&instance);
    assert_eq!(args[..2], ["api", "serve"]);
    for expected in ["--hosted-by", "aws", "--tls-address", "127.0.0.1", "--checkpoint-bucket", "s3://team-api-state/"]
    {
        assert!(args.iter().any(|a| a == expected), "{expected} not in {args:?}");
    }
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(local.config_dir().join("config.json")).unwrap()).unwrap();
    let token = config["apis"]["team-api"]["token"].as_str().unwrap().to_owned();
    assert!(config["apis"]["team-api"]["ca_pem"].as_str().unwrap().contains("BEGIN CERTIFICATE"), "{config:#}");
    let user_data = vms[0]["user_data"].as_str().unwrap();
    assert!(user_data.contains("anycloud-api.service"), "the boot script, decoded: {user_data}");
    // The VM's Elastic IP: one, associated with it, its public address, and the address its unit
    // issues the certificate for (the runner serves it on 127.0.0.1 instead, the seam).
    let addresses = state["addresses"].as_array().unwrap();
    assert_eq!(addresses.len(), 1, "{state:#}");
    let reserved = addresses[0]["ip"].as_str().unwrap().to_owned();
    assert_eq!(
        (addresses[0]["instance"].as_str(), addresses[0]["vm"].as_str()),
        (Some(instance.as_str()), Some("api"))
    );
    assert_eq!(vms[0]["public_ip"], reserved.as_str(), "{state:#}");
    assert!(user_data.contains(&format!("echo 'ANYCLOUD_ADDRESS={reserved}'")), "{user_data}");
    // The binary came from the bucket through a presigned GET of 15 minutes, and is the one the
    // CLI shipped, byte for byte.
    assert!(user_data.contains(&format!("/team-api-state/{key}?")), "{user_data}");
    assert!(user_data.contains("X-Amz-Expires=900") && user_data.contains("X-Amz-Signature="), "{user_data}");
    assert!(user_data.contains(&format!("x86_64) binary_sha256='{sha}'")), "{user_data}");
    assert!(!user_data.contains("github.com"), "no release server: {user_data}");
    assert_eq!(std::fs::read(runner.binary(&instance).unwrap()).unwrap(), shipped, "the VM runs what was shipped");
    assert!(!user_data.contains(&token) && !user_data.contains("PRIVATE KEY"), "a secret in the user-data");
    assert!(!user_data.contains("moto-hosting-secret-key"), "the hosting credential's key in the user-data");
    // The API's keys are in Secrets Manager, one secret named after the bucket, which the VM's
    // role alone is given; and nowhere else: not in any version of any object of the bucket, the
    // user-data, the deployer's logs, output and data, the VM's log and database.
    let secrets = state["secrets"].as_object().unwrap();
    assert_eq!(secrets.len(), 1, "{state:#}");
    let (name, held) = secrets.iter().next().unwrap();
    assert!(name.starts_with("anycloud/keys-"), "{name}");
    // Closed by its resource policy to all but the VM's role and the deployer, whatever their
    // own IAM policies allow (moto keeps the policy; only AWS enforces it).
    let deployer = moto.python(
        "import boto3, os\nprint(boto3.client('sts', endpoint_url=os.environ['MOTO_ENDPOINT']).get_caller_identity()['Arn'])",
        &keys,
    );
    let statement = &state["secret_policies"][name]["Statement"][0];
    assert_eq!((&statement["Effect"], &statement["Principal"]), (&Value::from("Deny"), &Value::from("*")), "{state:#}");
    assert_eq!(
        statement["Condition"]["StringNotEquals"]["aws:PrincipalArn"],
        serde_json::json!([format!("arn:aws:iam::123456789012:role/{role}"), deployer.trim()]),
        "{state:#}"
    );
    let api_keys: Value = serde_json::from_str(held.as_str().unwrap()).unwrap();
    assert_eq!(api_keys["token"], token.as_str());
    let ca_key = api_keys["ca_key_pem"].as_str().unwrap().lines().nth(1).unwrap().to_owned();
    let needles = [token.as_str(), api_keys["sealing_key"].as_str().unwrap(), &ca_key, "moto-hosting-secret-key"];
    assert_eq!(secrets_in_bucket(&moto, &needles), Vec::<String>::new(), "a key in the bucket");
    for needle in needles {
        assert!(!user_data.contains(needle), "a key in the user-data");
        local.assert_secret_nowhere(needle);
    }
    assert_eq!(runner.secrets_outside_key_files(&instance, &needles), vec![], "a key on the VM's disk or log");
    // The deployer's key never reaches the VM, not even its public half: the API acts as its VM.
    let hosting_key = ["AKIAANYCLOUDHOSTING1"];
    assert_eq!(runner.secrets_outside_key_files(&instance, &hosting_key), vec![], "the hosting key on the VM");

    // 2. The hosted API is the active one, over HTTPS through the pinned CA; the deploy saved the
    // hosting credential there (its clusters' control planes go there), verified from the VM.
    let out = local.cli(&["api", "status"]);
    out.expect_code(0);
    let hosted_credential = local.credential(HOSTING);
    assert_eq!(hosted_credential["status"], "valid", "the hosting credential on the hosted API");
    assert_eq!(
        (&hosted_credential["public"]["identity"], &hosted_credential["public"]["machine"]),
        (&serde_json::json!("machine"), &serde_json::json!(true)),
        "the hosted API holds no key, it acts as its VM: {hosted_credential:#}"
    );
    assert!(out.stdout.contains("hosted (aws)") && out.stdout.contains("checkpoint  s3://team-api-state/"), "{out}");
    // The simulated cloud is off on an AWS VM: it would run Pods as processes beside the keys.
    let out = local.cli(&["credentials", "new", "local-sim", "--provider", "sim"]);
    assert_eq!(out.code, 3, "{out}");
    assert!(out.stderr.contains("INVALID_CREDENTIAL") && out.stderr.contains("simulated cloud is off"), "{out}");
    let disk = runner.disk(&instance).unwrap();
    let simulated: Vec<String> = walk(&disk)
        .into_iter()
        .map(|path| path.display().to_string())
        .filter(|path| path.contains("sim-kube") || path.contains("sim-kubelet"))
        .collect();
    assert!(simulated.is_empty(), "no simulated cloud on the VM: {simulated:?}");
    let out = local.cli_env(
        &[
            "credentials",
            "new",
            "moto-capacity",
            "--provider",
            "aws",
            "--endpoint",
            &moto.endpoint,
            "--region",
            REGION,
            "--wait",
        ],
        &keys,
    );
    out.expect_code(0);
    let out = local.spawn_cli(&[
        "cluster",
        "create",
        "training",
        "--credentials",
        "moto-capacity",
        "--region",
        REGION,
        "--vm-type",
        "t3.large",
        "--min-vms",
        "1",
        "--max-vms",
        "1",
        "--wait",
    ]);
    out.wait(Duration::from_secs(120)).expect_code(0);

    // 3. The VM's disk is lost: a fresh one restores everything from the bucket.
    let status = runner.kill_wipe_and_await_ready(&local, &instance, "training");
    let cluster_id = status["cluster"]["id"].as_str().unwrap();
    let count = moto.python(
        r#"
import os, boto3
ec2 = boto3.client("ec2", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
res = ec2.describe_instances(Filters=[{"Name": "tag:anycloud-cluster", "Values": [os.environ["CLUSTER"]]},
                                      {"Name": "instance-state-name", "Values": ["pending", "running"]}])
tags = lambda i: {t["Key"]: t["Value"] for t in i["Tags"]}
print("\n".join(sorted(i["InstanceType"] + " " + tags(i)["anycloud-role"] + " " + tags(i).get("anycloud-owner", "-")
                       for r in res["Reservations"] for i in r["Instances"])))
"#,
        &[("CLUSTER", cluster_id)],
    );
    assert_eq!(
        count.trim(),
        format!("t3.large worker {owner}\nt3.medium control-plane {owner}"),
        "exactly the control plane (on the hosting credential: the API's type) and one worker, none launched twice, \
         each tagged with the API's owner id (its VM's role changes nothing else)"
    );
    assert!(runner.log(&instance).contains("restored from s3://team-api-state/"), "{}", runner.log(&instance));
    let out = local.cli(&["--json", "credentials", "list"]);
    assert!(out.stdout.contains("moto-capacity"), "{out}");

    // 4. Stopped: VM, Elastic IP, group, role and profile go; the bucket and the state in it stay.
    let out = local.spawn_cli(&["api", "stop", "team-api"]).wait(Duration::from_secs(120));
    out.expect_code(0);
    assert!(out.stdout.contains("its bucket s3://team-api-state/ stays"), "{out}");
    let state = at_moto(&moto);
    assert!(live(&state).is_empty(), "{state:#}");
    assert!(state["groups"].as_array().unwrap().is_empty(), "{state:#}");
    assert!(state["addresses"].as_array().unwrap().is_empty(), "the stop releases the address: {state:#}");
    assert!(
        state["roles"].as_array().unwrap().is_empty() && state["profiles"].as_array().unwrap().is_empty(),
        "{state:#}"
    );
    assert!(state["bucket"]["keys"].as_array().unwrap().len() > 3, "{state:#}");
    assert_eq!(state["secrets"].as_object().unwrap().len(), 1, "the keys stay with the bucket: {state:#}");
    e2e::wait_until(Duration::from_secs(30), "the runner to stop the VM's process", || {
        runner.running().is_empty().then_some(())
    });

    // 5. Deployed again on the same bucket: the same API, cluster and all, with the same token.
    let out = deploy(&[]).wait(Duration::from_secs(420));
    out.expect_code(0);
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(local.config_dir().join("config.json")).unwrap()).unwrap();
    assert_eq!(config["apis"]["team-api"]["token"], token.as_str(), "the bucket's token is kept");
    let out = local.cli(&["--json", "cluster", "status", "training"]);
    out.expect_code(0);
    let state = at_moto(&moto);
    let addresses = state["addresses"].as_array().unwrap();
    assert_eq!(addresses.len(), 1, "the redeploy reserves its own address: {state:#}");
    assert_eq!(live(&state)[0]["public_ip"], addresses[0]["ip"], "{state:#}");

    // 6. Deleted with its bucket: nothing is left at moto.
    let out = local.spawn_cli(&["api", "delete", "team-api", "--delete-bucket"]).wait(Duration::from_secs(120));
    out.expect_code(0);
    assert!(out.stdout.contains("nothing stays"), "{out}");
    let state = at_moto(&moto);
    assert!(live(&state).is_empty() && state["groups"].as_array().unwrap().is_empty(), "{state:#}");
    assert!(state["roles"].as_array().unwrap().is_empty(), "{state:#}");
    assert!(state["addresses"].as_array().unwrap().is_empty(), "{state:#}");
    assert_eq!(state["bucket"], Value::Null, "{state:#}");
    assert_eq!(state["secrets"], serde_json::json!({}), "the keys go with the bucket: {state:#}");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        }
        files.push(path);
    }
    files
}

/// The hosted API's role, action by action: the bucket's objects, its keys' secret, and EC2
/// calls that make only resources tagged with its owner id and change only those; no IAM action.
fn assert_role_policy(policies: &Value, owner: &str, secrets: &Value) {
    let policy = &policies["anycloud-checkpoint-bucket"];
    assert_eq!(policies.as_object().unwrap().len(), 1, "one inline policy: {policies:#}");
    let statements = policy["Statement"].as_array().unwrap();
    let list = |value: &Value| -> Vec<String> {
        match value {
            Value::String(one) => vec![one.clone()],
            many => many.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect(),
        }
    };
    let mut seen = Vec::new();
    for statement in statements {
        assert_eq!(statement["Effect"], "Allow", "{statement:#}");
        let actions = list(&statement["Action"]);
        let resources = list(&statement["Resource"]);
        let condition = statement["Condition"].to_string();
        for action in &actions {
            assert!(!action.starts_with("iam:") && !action.contains('*'), "{action} in {statement:#}");
            let (service, call) = action.split_once(':').unwrap();
            match service {
                "s3" => {
                    assert!(resources.iter().all(|r| r.starts_with("arn:aws:s3:::team-api-state")), "{statement:#}")
                }
                "secretsmanager" => {
                    assert_eq!(call, "GetSecretValue", "{statement:#}");
                    assert_eq!(resources.len(), 1, "the keys' secret only: {statement:#}");
                    assert!(resources[0].contains(":secret:anycloud/keys-"), "{statement:#}; secrets {secrets}");
                }
                "ec2" if call.starts_with("Describe") => assert_eq!(resources, ["*"], "{statement:#}"),
                "ec2" => {
                    let owned = condition.contains(&format!("\"ec2:ResourceTag/anycloud-owner\":\"{owner}\""));
                    let tagged = condition.contains(&format!("\"aws:RequestTag/anycloud-owner\":\"{owner}\""));
                    let on_create = condition.contains("ec2:CreateAction");
                    // Only resources that cannot carry a tag when used go unconditioned.
                    let untaggable = resources.iter().all(|r| {
                        ["::image/", ":subnet/", ":network-interface/", ":vpc/"].iter().any(|kind| r.contains(kind))
                    });
                    assert!(owned || tagged || on_create || untaggable, "{action} unconditioned on {resources:?}");
                }
                other => panic!("unexpected service {other} in {statement:#}"),
            }
            seen.push(action.clone());
        }
    }
    for needed in ["ec2:RunInstances", "ec2:TerminateInstances", "ec2:AllocateAddress", "ec2:CreateSecurityGroup"] {
        assert!(seen.iter().any(|a| a == needed), "{needed} missing: {policy:#}");
    }
}

/// A deploy whose binary cannot run on the machine type is refused before anything is made: the
/// CLI's own (x86_64) on an arm64 instance type, a `--binary` for arm64 on an x86_64 one; and
/// `--binary-url` is https only with a SHA-256 per architecture.
#[test]
fn a_binary_of_another_architecture_is_refused_before_anything_is_made() {
    let moto = Moto::start();
    let local = Api::start("local");
    let keys = [("AWS_ACCESS_KEY_ID", "AKIAANYCLOUDHOSTING1"), ("AWS_SECRET_ACCESS_KEY", "moto-hosting-secret-key")];
    let args = ["credentials", "new", HOSTING, "--provider", "aws", "--endpoint", &moto.endpoint, "--region", REGION];
    local.cli_env(&[&args[..], &["--wait"]].concat(), &keys).expect_code(0);
    let serve = |extra: &[&str]| {
        let base = ["api", "serve", "--id", "team-api", "--credentials", HOSTING, "--checkpoint-bucket", BUCKET];
        local.cli(&[&base[..], extra].concat())
    };

    let out = serve(&["--vm-type", "t4g.medium"]);
    assert_eq!(out.code, 3, "{out}");
    for part in ["t4g.medium", "runs aarch64", "this anycloud is built for x86_64", "--binary FILE", "nothing was made"]
    {
        assert!(out.stderr.contains(part), "`{part}` not in: {out}");
    }
    let arm = local.scratch().join("anycloud-aarch64");
    let mut header = b"\x7fELF\x02\x01\x01".to_vec();
    header.resize(18, 0);
    header.extend_from_slice(&183u16.to_le_bytes());
    header.resize(4096, 0);
    std::fs::write(&arm, &header).unwrap();
    let out = serve(&["--vm-type", "t3.medium", "--binary", arm.to_str().unwrap()]);
    assert_eq!(out.code, 3, "{out}");
    assert!(out.stderr.contains("runs x86_64") && out.stderr.contains("built for aarch64"), "{out}");
    assert!(out.stderr.contains("--binary FILE"), "{out}");

    let sum = format!("x86_64={}", "a".repeat(64));
    let out =
        serve(&["--vm-type", "t3.medium", "--binary-url", "http://downloads.example.com/a", "--binary-sha256", &sum]);
    assert_ne!(out.code, 0, "{out}");
    assert!(out.stderr.contains("https://"), "{out}");
    let out = serve(&["--vm-type", "t3.medium", "--binary-url", "https://downloads.example.com/a"]);
    assert_ne!(out.code, 0, "{out}");
    assert!(out.stderr.contains("--binary-sha256"), "{out}");
    let out =
        serve(&["--vm-type", "t4g.medium", "--binary-url", "https://downloads.example.com/a", "--binary-sha256", &sum]);
    assert!(out.code == 3 && out.stderr.contains("runs aarch64"), "no sum for the machine type's architecture: {out}");

    let state = at_moto(&moto);
    assert!(state["instances"].as_array().unwrap().is_empty(), "{state:#}");
    assert!(
        state["groups"].as_array().unwrap().is_empty() && state["roles"].as_array().unwrap().is_empty(),
        "{state:#}"
    );
    assert_eq!(state["bucket"], Value::Null, "nothing made: {state:#}");
}
