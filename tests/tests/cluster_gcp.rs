//! A whole cluster on GCP, end to end through the real binary, against the fake Compute Engine
//! server ([`FakeGce`]): a hosted API, a GCP credential (a service-account key file) verified
//! against the fake (zones.list), then `cluster create --wait` with 2 VMs, `cluster status`, and
//! `cluster delete --wait`. The fake's instances boot nothing, so the simulated cloud's Kubernetes
//! API ([`SimulatedKube`]) serves the cluster: its nodes are the instances the fake itself holds
//! RUNNING (read through its inspection helpers) whose user-data joins the control plane, as their
//! kubelets would register.
//!
//! What Compute Engine holds is asked of the fake, never of anycloud: after the create, exactly
//! three instances (one control plane, two workers) carry the cluster's labels, the cluster's
//! firewall rules `ac-<12 hex>-internal` (between its VMs) and `ac-<12 hex>-kube-api` (6443 from
//! the managing API: every address, for this API on the test's machine) exist and no other, and each instance's
//! metadata carries the k3s cloud-init script for its role (the workers' pointing at the control
//! plane's address); after the delete, the fake holds no instance and no firewall rule of it.
#![allow(clippy::unwrap_used)]

use anycloud_tests::gcp_test_key::{CLIENT_EMAIL, PROJECT, service_account_json};
use std::sync::Arc;
use std::time::Instant;

use anycloud_tests::e2e::{Api, ApiOptions};
use anycloud_tests::fake_gce::FakeGce;
use anycloud_tests::simulated_kube::{GceMachines, SimulatedKube};
use anycloud_workflows::cloud::{CLUSTER_TAG, NAME_TAG, ROLE_TAG};
use serde_json::Value;

const REGION: &str = "us-central1";
const ZONE: &str = "us-central1-a";
const VM_TYPE: &str = "e2-standard-2";
const CLUSTER: &str = "gce-k3s";
const CREDENTIAL: &str = "gce-key";

/// The fake's instances of one cluster (in every state, those being deleted too), by name.
fn cluster_instances(fake: &FakeGce, cluster_id: &str) -> Vec<Value> {
    fake.instances(PROJECT).into_iter().filter(|i| i["labels"][CLUSTER_TAG] == cluster_id).collect()
}

/// `ac-` and the first 12 hex digits of the cluster id: the prefix of its GCE names.
fn prefix(cluster_id: &str) -> String {
    format!("ac-{}", &cluster_id.replace('-', "")[..12])
}

/// The value of the instance's metadata item `key`.
fn metadata<'a>(instance: &'a Value, key: &str) -> &'a str {
    let items = instance["metadata"]["items"].as_array().unwrap_or_else(|| panic!("no metadata: {instance:#}"));
    let item = items.iter().find(|item| item["key"] == key).unwrap_or_else(|| panic!("no {key}: {instance:#}"));
    item["value"].as_str().unwrap()
}

fn vms_with_role<'a>(status: &'a Value, role: &str) -> Vec<&'a Value> {
    status["vms"].as_array().unwrap().iter().filter(|vm| vm["role"] == role).collect()
}

#[test]
fn a_two_vm_cluster_is_created_and_deleted_at_the_fake_compute_engine() {
    let started = Instant::now();
    let fake = Arc::new(FakeGce::start());

    // The simulated Kubernetes: its nodes are what the fake runs, listed afresh for every node list.
    let kube = SimulatedKube::start(GceMachines::new(fake.clone(), PROJECT));
    let api = Api::start_opts(ApiOptions {
        id: "gcp-cluster".into(),
        hosted: true,
        env: vec![("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url())],
        ..ApiOptions::default()
    });

    // The credential: verified against the fake (zones.list) before a cluster may use it.
    let key_file = api.scratch().join("service-account.json");
    std::fs::write(&key_file, service_account_json()).unwrap();
    let out = api.cli(&[
        "--json",
        "credentials",
        "new",
        CREDENTIAL,
        "--provider",
        "gcp",
        "--service-account-file",
        key_file.to_str().unwrap(),
        "--endpoint",
        &fake.url(),
        "--wait",
    ]);
    out.expect_code(0);
    assert_eq!(out.last_json()["credential"]["status"], "valid", "{out}");

    // 1. The cluster comes up.
    let create_started = Instant::now();
    let out = api.cli(&[
        "--json",
        "cluster",
        "create",
        CLUSTER,
        "--credentials",
        CREDENTIAL,
        "--region",
        REGION,
        "--vm-type",
        VM_TYPE,
        "--min-vms",
        "2",
        "--max-vms",
        "2",
        "--wait",
    ]);
    out.expect_code(0);
    let create_time = create_started.elapsed();
    let status = api.cli(&["--json", "cluster", "status", CLUSTER]);
    status.expect_code(0);
    let status = status.json();
    let cluster = &status["cluster"];
    let cluster_id = cluster["id"].as_str().unwrap().to_owned();
    let prefix = prefix(&cluster_id);
    assert_eq!(cluster["phase"], "ready", "{status:#}");
    assert_eq!(cluster["provider"], "gcp", "{status:#}");
    assert_eq!((cluster["region"].as_str(), cluster["vm_type"].as_str()), (Some(REGION), Some(VM_TYPE)));
    assert_eq!(cluster["zone"], ZONE, "{status:#}");
    assert_eq!(status["simulated"], false, "{status:#}");
    assert_eq!((status["desired_vms"].as_i64(), status["running_vms"].as_i64()), (Some(2), Some(2)), "{status:#}");
    let workers = vms_with_role(&status, "worker");
    let control_planes = vms_with_role(&status, "control-plane");
    assert_eq!((workers.len(), control_planes.len()), (2, 1), "{status:#}");
    assert!(workers.iter().all(|vm| vm["state"] == "RUNNING"), "{status:#}");
    assert!(kube.listings() > 0, "the simulated Kubernetes was never asked for its nodes");

    // 2. What Compute Engine holds: three instances with the cluster's labels, its two rules.
    let instances = cluster_instances(&fake, &cluster_id);
    assert_eq!(instances.len(), 3, "{instances:#?}");
    let names: Vec<&str> = instances.iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, [format!("{prefix}-cp"), format!("{prefix}-w0"), format!("{prefix}-w1")]);
    for (instance, (vm, role)) in instances.iter().zip([("cp", "control-plane"), ("w0", "worker"), ("w1", "worker")]) {
        assert_eq!(instance["status"], "RUNNING", "{instance:#}");
        assert_eq!(instance["labels"][NAME_TAG], vm, "{instance:#}");
        assert_eq!(instance["labels"][ROLE_TAG], role, "{instance:#}");
        assert!(instance["zone"].as_str().unwrap().ends_with(&format!("/zones/{ZONE}")), "{instance:#}");
        let machine_type = format!("/zones/{ZONE}/machineTypes/{VM_TYPE}");
        assert!(instance["machineType"].as_str().unwrap().ends_with(&machine_type), "{instance:#}");
        assert_eq!(instance["tags"]["items"], serde_json::json!([prefix]), "{instance:#}");
    }

    // The provider ids anycloud shows are the instances the fake holds.
    let mut shown: Vec<&str> = workers.iter().map(|vm| vm["provider_id"].as_str().unwrap()).collect();
    shown.sort_unstable();
    let mut listed: Vec<&str> = instances[1..].iter().map(|i| i["id"].as_str().unwrap()).collect();
    listed.sort_unstable();
    assert_eq!(shown, listed);
    assert_eq!(control_planes[0]["provider_id"], instances[0]["id"]);

    let rules = fake.firewalls(PROJECT);
    let rule_names: Vec<&str> = rules.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(rule_names, [format!("{prefix}-internal"), format!("{prefix}-kube-api")], "{rules:#?}");
    assert_eq!(rules[1]["allowed"], serde_json::json!([{"IPProtocol": "tcp", "ports": ["6443"]}]), "{rules:#?}");
    assert!(rules.iter().all(|r| r["description"].as_str().unwrap().contains(&cluster_id)), "{rules:#?}");

    // Each instance carries the k3s script for its role: cloud-init went with the launch.
    let cp_script = metadata(&instances[0], "startup-script");
    assert!(cp_script.starts_with("#!/bin/sh\n"), "{cp_script}");
    assert!(cp_script.contains(&format!("anycloud cluster {cluster_id}: control plane")), "{cp_script}");
    assert!(cp_script.contains("sh -s - server"), "{cp_script}");
    assert!(!cp_script.contains("K3S_URL="), "{cp_script}");
    // The control plane's static address: one, reserved in the region, in use by the control
    // plane as its natIP; the endpoint, the recorded address the kubeconfig is made from, the
    // certificate's SAN and the workers' join URL are all that address.
    let addresses = fake.addresses(PROJECT);
    assert_eq!(addresses.len(), 1, "{addresses:#?}");
    assert_eq!(addresses[0]["name"], format!("{prefix}-cp-ip"), "{addresses:#?}");
    assert_eq!(addresses[0]["status"], "IN_USE", "{addresses:#?}");
    assert_eq!(addresses[0]["users"][0], instances[0]["selfLink"], "{addresses:#?}");
    let server = addresses[0]["address"].as_str().unwrap();
    assert_eq!(instances[0]["networkInterfaces"][0]["accessConfigs"][0]["natIP"], server, "{:#}", instances[0]);
    assert_eq!(cluster["endpoint"].as_str(), Some(format!("https://{server}:6443").as_str()), "{status:#}");
    assert_eq!(control_planes[0]["public_ip"].as_str(), Some(server), "{status:#}");
    assert!(cp_script.contains(&format!("--tls-san '{server}'")), "{cp_script}");
    for (worker, vm) in instances[1..].iter().zip(["w0", "w1"]) {
        let script = metadata(worker, "startup-script");
        assert!(script.contains(&format!("anycloud cluster {cluster_id}: capacity VM {vm}")), "{script}");
        assert!(script.contains(&format!("K3S_URL='https://{server}:6443'")), "{script}");
        assert!(script.contains(&format!("sh -s - agent --node-name '{vm}'")), "{script}");
        assert!(!script.contains(" server"), "{script}");
        // The script stays in the instance's metadata: it holds the agent token alone, and the
        // node's rule keeps every Pod from the metadata server that serves it.
        assert!(script.contains("::node:") && !script.contains("::server:") && !script.contains("PRIVATE KEY"));
        assert!(script.contains("-I PREROUTING 1 -d 169.254.169.254/32 -j ANYCLOUD-METADATA"), "{script}");
    }
    // The key's own JWTs reached the fake, and nobody else's.
    assert_eq!(fake.principals(), [CLIENT_EMAIL]);

    // 3. The cluster goes, and everything it had at Compute Engine with it.
    let delete_started = Instant::now();
    api.cli(&["--json", "cluster", "delete", CLUSTER, "--wait"]).expect_code(0);
    let delete_time = delete_started.elapsed();
    let status = api.cli(&["--json", "cluster", "status", CLUSTER]);
    status.expect_code(0);
    assert_eq!(status.json()["cluster"]["phase"], "deleted", "{status}");
    let left = cluster_instances(&fake, &cluster_id);
    assert!(left.is_empty(), "{left:#?}");
    assert!(fake.instances(PROJECT).is_empty(), "{:#?}", fake.instances(PROJECT));
    let rules = fake.firewalls(PROJECT);
    assert!(rules.is_empty(), "{rules:#?}");
    assert!(fake.addresses(PROJECT).is_empty(), "the static address is released: {:#?}", fake.addresses(PROJECT));
    // The deletes were asked of the fake: one per instance, one per rule.
    let requests = fake.requests();
    let deletes = |what: &str| requests.iter().filter(|r| r.starts_with("DELETE") && r.contains(what)).count();
    assert!(deletes("/instances/") >= 3 && deletes("/global/firewalls/") >= 2, "{requests:#?}");

    drop(api);
    drop(kube);
    eprintln!(
        "cluster_gcp: create --wait {create_time:?}, delete --wait {delete_time:?}, whole test {:?}",
        started.elapsed()
    );
}
