//! A whole cluster on AWS, end to end through the real binary, against moto (a local fake of
//! EC2): a hosted API, an AWS credential verified against moto (DescribeRegions), then
//! `cluster create --wait` with 2 VMs, `cluster status`, and `cluster delete --wait`. moto's
//! instances boot nothing, so the simulated cloud's Kubernetes API ([`SimulatedKube`]) serves the
//! cluster: its nodes are the instances it finds running at moto itself (through a raw
//! aws-sdk-ec2 client) whose user-data joins the control plane, as their kubelets would register.
//!
//! What EC2 holds is asked of moto through the test's own client, never of anycloud: after the
//! create, exactly three instances (one control plane, two workers) carry the cluster's tags and
//! its one security group, and each carries the k3s cloud-init script for its role (the workers'
//! pointing at the control plane's address); after the delete, no instance of the cluster is
//! left other than terminated, and no security group of it at all.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use anycloud_tests::e2e::{self, Api, ApiOptions, Moto};
use anycloud_tests::simulated_kube::{MotoMachines, SimulatedKube};
use anycloud_workflows::cloud::{CLUSTER_TAG, NAME_TAG, ROLE_TAG};
use aws_sdk_ec2::types::{Filter, Instance, InstanceAttributeName, SecurityGroup};
use serde_json::Value;

const REGION: &str = "us-east-1";
const VM_TYPE: &str = "t3.medium";
const CLUSTER: &str = "moto-k3s";
const CREDENTIAL: &str = "moto-keys";

fn filter(name: &str, values: &[&str]) -> Filter {
    Filter::builder().name(name).set_values(Some(values.iter().map(|v| (*v).to_owned()).collect())).build()
}

fn tag<'a>(instance: &'a Instance, key: &str) -> Option<&'a str> {
    instance.tags().iter().find(|t| t.key() == Some(key)).and_then(|t| t.value())
}

fn state(instance: &Instance) -> &str {
    instance.state().and_then(|s| s.name()).map(|s| s.as_str()).unwrap()
}

/// Every instance moto holds matching `filters`, in every state.
async fn instances(ec2: &aws_sdk_ec2::Client, filters: Vec<Filter>) -> Vec<Instance> {
    let output = ec2.describe_instances().set_filters(Some(filters)).send().await.unwrap();
    output.reservations().iter().flat_map(|r| r.instances().iter().cloned()).collect()
}

/// The cluster's instances, terminated or not, by their `anycloud-vm` tag.
async fn cluster_instances(ec2: &aws_sdk_ec2::Client, cluster_id: &str) -> Vec<Instance> {
    let mut all = instances(ec2, vec![filter(&format!("tag:{CLUSTER_TAG}"), &[cluster_id])]).await;
    all.sort_by(|a, b| tag(a, NAME_TAG).cmp(&tag(b, NAME_TAG)));
    all
}

/// The security groups moto holds with the cluster's tag.
async fn cluster_groups(ec2: &aws_sdk_ec2::Client, cluster_id: &str) -> Vec<SecurityGroup> {
    let output = ec2
        .describe_security_groups()
        .filters(filter(&format!("tag:{CLUSTER_TAG}"), &[cluster_id]))
        .send()
        .await
        .unwrap();
    output.security_groups().to_vec()
}

/// The instance's user-data, decoded.
/// The Elastic IPs tagged with the cluster.
async fn cluster_addresses(ec2: &aws_sdk_ec2::Client, cluster_id: &str) -> Vec<aws_sdk_ec2::types::Address> {
    let output =
        ec2.describe_addresses().filters(filter(&format!("tag:{CLUSTER_TAG}"), &[cluster_id])).send().await.unwrap();
    output.addresses().to_vec()
}

async fn user_data(ec2: &aws_sdk_ec2::Client, instance_id: &str) -> String {
    let output = ec2
        .describe_instance_attribute()
        .instance_id(instance_id)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let encoded = output.user_data().and_then(|v| v.value()).unwrap_or_else(|| panic!("{instance_id}: no user-data"));
    String::from_utf8(decode_base64(encoded)).unwrap()
}

/// Standard base64, decoded (the tests crate needs no base64 dependency for one check).
fn decode_base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut bits, mut count, mut bytes) = (0_u32, 0_u32, Vec::new());
    for c in text.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()) {
        let value = ALPHABET.iter().position(|&a| a == c).unwrap() as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            bytes.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    bytes
}

fn vms_with_role<'a>(status: &'a Value, role: &str) -> Vec<&'a Value> {
    status["vms"].as_array().unwrap().iter().filter(|vm| vm["role"] == role).collect()
}

#[test]
fn a_two_vm_cluster_is_created_and_deleted_at_moto() {
    let started = Instant::now();
    let moto = Moto::start();

    // The simulated Kubernetes: its nodes are what moto runs, listed afresh for every node list.
    let kube = SimulatedKube::start(MotoMachines::new(&moto.endpoint, REGION));
    let api = Api::start_opts(ApiOptions {
        id: "aws-cluster".into(),
        hosted: true,
        env: vec![("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url())],
        ..ApiOptions::default()
    });

    // The credential: verified against moto (DescribeRegions) before a cluster may use it.
    let out = api.cli_env(
        &[
            "--json",
            "credentials",
            "new",
            CREDENTIAL,
            "--provider",
            "aws",
            "--endpoint",
            &moto.endpoint,
            "--region",
            REGION,
            "--wait",
        ],
        &[("AWS_ACCESS_KEY_ID", "AKIAANYCLOUDCLUSTER1"), ("AWS_SECRET_ACCESS_KEY", "moto-cluster-secret-access-key")],
    );
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
    assert_eq!(cluster["phase"], "ready", "{status:#}");
    assert_eq!(cluster["provider"], "aws", "{status:#}");
    assert_eq!((cluster["region"].as_str(), cluster["vm_type"].as_str()), (Some(REGION), Some(VM_TYPE)));
    assert_eq!(status["simulated"], false, "{status:#}");
    assert_eq!((status["desired_vms"].as_i64(), status["running_vms"].as_i64()), (Some(2), Some(2)), "{status:#}");
    let workers = vms_with_role(&status, "worker");
    let control_planes = vms_with_role(&status, "control-plane");
    assert_eq!((workers.len(), control_planes.len()), (2, 1), "{status:#}");
    assert!(workers.iter().all(|vm| vm["state"] == "running"), "{status:#}");
    assert!(kube.listings() > 0, "the simulated Kubernetes was never asked for its nodes");

    let ec2 = moto.ec2(REGION);
    e2e::block_on(async {
        // 2. What EC2 holds: three live instances with the cluster's tags, one security group.
        let all = cluster_instances(&ec2, &cluster_id).await;
        let live: Vec<&Instance> = all.iter().filter(|i| state(i) != "terminated").collect();
        assert_eq!(live.len(), 3, "{all:#?}");
        assert!(live.iter().all(|i| state(i) == "running"), "{all:#?}");
        let names: Vec<Option<&str>> = live.iter().map(|i| tag(i, NAME_TAG)).collect();
        assert_eq!(names, [Some("cp"), Some("w0"), Some("w1")]);
        let roles: Vec<Option<&str>> = live.iter().map(|i| tag(i, ROLE_TAG)).collect();
        assert_eq!(roles, [Some("control-plane"), Some("worker"), Some("worker")]);
        assert!(live.iter().all(|i| i.instance_type().map(|t| t.as_str()) == Some(VM_TYPE)), "{live:#?}");

        // The provider ids anycloud shows are the instances EC2 lists.
        let mut shown: Vec<&str> = workers.iter().map(|vm| vm["provider_id"].as_str().unwrap()).collect();
        shown.sort_unstable();
        let mut listed: Vec<&str> =
            live.iter().filter(|i| tag(i, ROLE_TAG) == Some("worker")).map(|i| i.instance_id().unwrap()).collect();
        listed.sort_unstable();
        assert_eq!(shown, listed);
        assert_eq!(control_planes[0]["provider_id"].as_str(), live[0].instance_id());

        let groups = cluster_groups(&ec2, &cluster_id).await;
        assert_eq!(groups.len(), 1, "{groups:#?}");
        let group_id = groups[0].group_id().unwrap();
        assert_eq!(cluster["network_id"].as_str(), Some(group_id), "{status:#}");
        for instance in &live {
            let attached: Vec<&str> = instance.security_groups().iter().filter_map(|g| g.group_id()).collect();
            assert_eq!(attached, [group_id], "{instance:#?}");
        }

        // Each instance carries the k3s script for its role: cloud-init went with the launch.
        let cp = live[0];
        let cp_script = user_data(&ec2, cp.instance_id().unwrap()).await;
        assert!(cp_script.starts_with("#!/bin/sh\n"), "{cp_script}");
        assert!(cp_script.contains(&format!("anycloud cluster {cluster_id}: control plane")), "{cp_script}");
        assert!(cp_script.contains("sh -s - server"), "{cp_script}");
        assert!(!cp_script.contains("K3S_URL="), "{cp_script}");
        // The control plane's Elastic IP: one, tagged with the cluster, associated with it; its
        // public address, the endpoint, the recorded address the kubeconfig is made from, the
        // certificate's SAN and the workers' join URL are all that address.
        let eips = cluster_addresses(&ec2, &cluster_id).await;
        assert_eq!(eips.len(), 1, "{eips:#?}");
        let server = eips[0].public_ip().unwrap();
        assert_eq!(eips[0].instance_id(), cp.instance_id(), "{eips:#?}");
        assert_eq!(cp.public_ip_address(), Some(server), "{cp:#?}");
        assert_eq!(cluster["endpoint"].as_str(), Some(format!("https://{server}:6443").as_str()), "{status:#}");
        assert_eq!(control_planes[0]["public_ip"].as_str(), Some(server), "{status:#}");
        assert!(cp_script.contains(&format!("--tls-san '{server}'")), "{cp_script}");
        for worker in &live[1..] {
            let vm = tag(worker, NAME_TAG).unwrap();
            let script = user_data(&ec2, worker.instance_id().unwrap()).await;
            assert!(script.contains(&format!("anycloud cluster {cluster_id}: capacity VM {vm}")), "{script}");
            assert!(script.contains(&format!("K3S_URL='https://{server}:6443'")), "{script}");
            assert!(script.contains(&format!("sh -s - agent --node-name '{vm}'")), "{script}");
            assert!(!script.contains(" server"), "{script}");
        }
    });

    // 3. The cluster goes, and everything it had at EC2 with it.
    let delete_started = Instant::now();
    api.cli(&["--json", "cluster", "delete", CLUSTER, "--wait"]).expect_code(0);
    let delete_time = delete_started.elapsed();
    let status = api.cli(&["--json", "cluster", "status", CLUSTER]);
    status.expect_code(0);
    assert_eq!(status.json()["cluster"]["phase"], "deleted", "{status}");
    e2e::block_on(async {
        let all = cluster_instances(&ec2, &cluster_id).await;
        assert_eq!(all.len(), 3, "the instances are terminated, not forgotten: {all:#?}");
        let left: Vec<&Instance> = all.iter().filter(|i| state(i) != "terminated").collect();
        assert!(left.is_empty(), "{left:#?}");
        let groups = cluster_groups(&ec2, &cluster_id).await;
        assert!(groups.is_empty(), "{groups:#?}");
        let eips = cluster_addresses(&ec2, &cluster_id).await;
        assert!(eips.is_empty(), "the Elastic IP is released: {eips:#?}");
    });
    drop(api);
    drop(kube);
    eprintln!(
        "cluster_aws: create --wait {create_time:?}, delete --wait {delete_time:?}, whole test {:?}",
        started.elapsed()
    );
}
