//! `AwsCloud` against moto (a local fake of EC2): placement checks the region and the instance
//! type and picks a Canonical Ubuntu image; the cluster's security group is made once and found
//! again by tag; a VM launched twice under one name is one instance; the cluster's VMs are
//! listed with their roles, terminated, and its group deleted. What EC2 holds is checked through
//! a separate, raw aws-sdk-ec2 client, never through `AwsCloud` itself.
//!
//! moto does not honour `ClientToken` (two RunInstances with one token make two instances) but
//! does filter by tag, so it is the find-by-tag path of `launch` that these tests prove.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use anycloud_tests::e2e::Moto;
use anycloud_workflows::cloud::{
    CLUSTER_TAG, Cloud, CloudError, LaunchSpec, NAME_TAG, Network, Placement, ROLE_TAG, Role, Vm,
};
use anycloud_workflows::cluster::network::Openings;
use anycloud_workflows::db::credentials::PublicPart;
use anycloud_workflows::providers::aws_cloud::AwsCloud;
use aws_sdk_ec2::types::{
    Filter, HttpTokensState, Instance, InstanceAttributeName, InstanceMetadataEndpointState, SecurityGroup,
};

const REGION: &str = "us-east-1";
const VM_TYPE: &str = "t3.medium";
const CANONICAL: &str = "099720109477";

/// Keys moto takes as any other (it runs without authentication here).
fn public(moto: &Moto) -> PublicPart {
    PublicPart {
        identity: "AKIAANYCLOUDTEST0001".to_owned(),
        region: Some(REGION.to_owned()),
        endpoint: Some(moto.endpoint.clone()),
        ..PublicPart::default()
    }
}

fn cloud(moto: &Moto) -> AwsCloud {
    AwsCloud::new(&public(moto), "moto-secret-access-key", REGION)
}

fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

/// A fresh cluster id: tests share nothing in moto.
fn cluster_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The security groups moto holds with the cluster's tag.
async fn tagged_groups(ec2: &aws_sdk_ec2::Client, cluster_id: &str) -> Vec<SecurityGroup> {
    let output =
        ec2.describe_security_groups().filters(filter(&format!("tag:{CLUSTER_TAG}"), cluster_id)).send().await.unwrap();
    output.security_groups().to_vec()
}

/// The instances moto holds with the cluster's tag (and `name`, when given), terminated or not.
async fn tagged_instances(ec2: &aws_sdk_ec2::Client, cluster_id: &str, name: Option<&str>) -> Vec<Instance> {
    let mut request = ec2.describe_instances().filters(filter(&format!("tag:{CLUSTER_TAG}"), cluster_id));
    if let Some(name) = name {
        request = request.filters(filter(&format!("tag:{NAME_TAG}"), name));
    }
    let output = request.send().await.unwrap();
    output.reservations().iter().flat_map(|r| r.instances().iter().cloned()).collect()
}

fn state(instance: &Instance) -> &str {
    instance.state().and_then(|s| s.name()).map(|s| s.as_str()).unwrap()
}

fn tag<'a>(instance: &'a Instance, key: &str) -> Option<&'a str> {
    instance.tags().iter().find(|t| t.key() == Some(key)).and_then(|t| t.value())
}

fn spec<'a>(placement: &'a Placement, network: &'a Network, name: &str, role: Role) -> LaunchSpec<'a> {
    LaunchSpec {
        placement,
        name: name.to_owned(),
        role,
        user_data: format!("#!/bin/sh\necho anycloud {name} of {}\n", placement.cluster_id),
        token: uuid::Uuid::new_v4(),
        network,
        vm_identity: None,
        reads_secret: false,
        address: None,
    }
}

/// Standard base64, decoded (the tests crate needs no base64 dependency for one check).
fn decode_base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut bits, mut count, mut bytes) = (0_u32, 0_u32, Vec::new());
    for c in text.bytes().filter(|&c| c != b'=') {
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

fn expect_terminal(result: Result<Placement, CloudError>, words: &[&str]) {
    match result {
        Err(CloudError::Terminal(message)) => {
            for word in words {
                assert!(message.contains(word), "`{word}` missing from: {message}");
            }
        }
        other => panic!("expected a terminal error with {words:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn placement_checks_region_and_type_and_picks_ubuntu() {
    let moto = Moto::start();
    let cloud = cloud(&moto);
    let ec2 = moto.ec2(REGION);
    let id = cluster_id();

    let placement = cloud.placement(&id, REGION, VM_TYPE).await.unwrap();
    assert_eq!(placement.cluster_id, id);
    assert_eq!(placement.region, REGION);
    assert_eq!(placement.vm_type, VM_TYPE);
    assert_eq!(placement.zone, None);
    // moto has no 22.04 or 24.04 image: the highest Canonical release it has (16.04) is taken.
    let image = placement.image.clone().unwrap();
    let images = ec2.describe_images().image_ids(&image).send().await.unwrap();
    let image = &images.images()[0];
    assert_eq!(image.owner_id(), Some(CANONICAL));
    let name = image.name().unwrap();
    assert!(name.starts_with("ubuntu/images/hvm-ssd/ubuntu-xenial-16.04-amd64-server-"), "{name}");

    expect_terminal(cloud.placement(&id, "mars-east-9", VM_TYPE).await, &["mars-east-9", "us-east-1"]);
    expect_terminal(cloud.placement(&id, REGION, "zz9.huge").await, &["zz9.huge", REGION, "t3.medium"]);
    // Offered, but arm64 only: the images are amd64.
    expect_terminal(cloud.placement(&id, REGION, "t4g.medium").await, &["t4g.medium", "arm64", "t3.medium"]);
}

#[tokio::test]
async fn network_is_made_once_found_again_and_deleted() {
    let moto = Moto::start();
    let cloud = cloud(&moto);
    let ec2 = moto.ec2(REGION);
    let id = cluster_id();
    let placement = cloud.placement(&id, REGION, VM_TYPE).await.unwrap();

    assert!(!cloud.network_exists(&placement).await.unwrap());
    let network = cloud.ensure_network(&placement).await.unwrap();
    assert!(network.id.starts_with("sg-"), "{network:?}");
    assert_eq!(cloud.ensure_network(&placement).await.unwrap(), network, "found again, not made twice");
    assert!(cloud.network_exists(&placement).await.unwrap());

    let groups = tagged_groups(&ec2, &id).await;
    assert_eq!(groups.len(), 1, "{groups:#?}");
    let group = &groups[0];
    assert_eq!(group.group_id(), Some(network.id.as_str()));
    assert_eq!(group.group_name(), Some(format!("anycloud-{id}").as_str()));
    let rules = group.ip_permissions();
    assert_eq!(rules.len(), 1, "only the rule between the cluster's VMs, nothing from outside: {rules:#?}");
    assert!(
        rules.iter().any(|r| r.ip_protocol() == Some("-1")
            && r.user_id_group_pairs().iter().any(|pair| pair.group_id() == Some(network.id.as_str()))),
        "all traffic from the group itself: {rules:#?}"
    );

    // Opened to exactly these sources, then to others: what is no longer named is revoked, and
    // the same openings again change nothing.
    let openings = Openings {
        kube_api: vec!["192.0.2.5/32".into(), "198.51.100.7/32".into()],
        wireguard: vec!["198.51.100.7/32".into(), "203.0.113.10/32".into()],
    };
    cloud.open_network(&placement, &openings).await.unwrap();
    cloud.open_network(&placement, &openings).await.unwrap();
    assert_eq!(
        cidr_rules(&ec2, &id).await,
        ["tcp 6443 192.0.2.5/32", "tcp 6443 198.51.100.7/32", "udp 51820 198.51.100.7/32", "udp 51820 203.0.113.10/32",]
    );
    let fewer = Openings { kube_api: vec!["192.0.2.5/32".into()], wireguard: vec![] };
    cloud.open_network(&placement, &fewer).await.unwrap();
    assert_eq!(cidr_rules(&ec2, &id).await, ["tcp 6443 192.0.2.5/32"]);
    let groups = tagged_groups(&ec2, &id).await;
    assert!(
        groups[0].ip_permissions().iter().any(|r| r.ip_protocol() == Some("-1")),
        "the rule between the cluster's VMs stays: {groups:#?}"
    );

    cloud.delete_network(&placement).await.unwrap();
    assert!(!cloud.network_exists(&placement).await.unwrap());
    assert!(tagged_groups(&ec2, &id).await.is_empty());
    cloud.delete_network(&placement).await.unwrap();
}

/// The cluster's group's rules that let a CIDR in, as `protocol port cidr`, sorted.
async fn cidr_rules(ec2: &aws_sdk_ec2::Client, cluster_id: &str) -> Vec<String> {
    let mut rules: Vec<String> = tagged_groups(ec2, cluster_id)
        .await
        .iter()
        .flat_map(|group| group.ip_permissions().to_vec())
        .flat_map(|rule| {
            let head = format!("{} {}", rule.ip_protocol().unwrap_or_default(), rule.from_port().unwrap_or(-1));
            rule.ip_ranges()
                .iter()
                .map(move |range| format!("{head} {}", range.cidr_ip().unwrap_or_default()))
                .collect::<Vec<_>>()
        })
        .collect();
    rules.sort();
    rules
}

#[tokio::test]
async fn a_group_of_the_cluster_name_without_its_tag_is_adopted() {
    let moto = Moto::start();
    let cloud = cloud(&moto);
    let ec2 = moto.ec2(REGION);
    let id = cluster_id();
    let placement = cloud.placement(&id, REGION, VM_TYPE).await.unwrap();
    // As a create whose answer was lost before it was tagged would leave it (no rules either).
    let made = ec2
        .create_security_group()
        .group_name(format!("anycloud-{id}"))
        .description("left behind")
        .send()
        .await
        .unwrap();
    let made = made.group_id().unwrap();

    let network = cloud.ensure_network(&placement).await.unwrap();
    assert_eq!(network.id, made);
    let groups = tagged_groups(&ec2, &id).await;
    assert_eq!(groups.len(), 1, "tagged now: {groups:#?}");
    assert_eq!(groups[0].ip_permissions().len(), 1, "the rule between its VMs added: {groups:#?}");
    cloud.delete_network(&placement).await.unwrap();
    assert!(tagged_groups(&ec2, &id).await.is_empty());
}

#[tokio::test]
async fn vms_launch_once_are_listed_and_terminated() {
    let moto = Moto::start();
    let cloud = cloud(&moto);
    let ec2 = moto.ec2(REGION);
    let id = cluster_id();
    let placement = cloud.placement(&id, REGION, VM_TYPE).await.unwrap();
    let network = cloud.ensure_network(&placement).await.unwrap();

    // Launched twice, as a retried step does: one instance.
    let cp_spec = spec(&placement, &network, "cp", Role::ControlPlane);
    let cp = cloud.launch(&cp_spec).await.unwrap();
    assert!(cp.provider_id.starts_with("i-"), "{cp:?}");
    assert_eq!((cp.name.as_str(), cp.role), ("cp", Role::ControlPlane));
    assert!(cp.private_ip.is_some(), "{cp:?}");
    let again = cloud.launch(&cp_spec).await.unwrap();
    assert_eq!(again.provider_id, cp.provider_id);
    let named = tagged_instances(&ec2, &id, Some("cp")).await;
    assert_eq!(named.len(), 1, "one instance named cp: {named:#?}");

    // What EC2 was asked for.
    let instance = &named[0];
    assert_eq!(instance.image_id(), placement.image.as_deref());
    assert_eq!(instance.instance_type().map(|t| t.as_str()), Some(VM_TYPE));
    assert_eq!(tag(instance, ROLE_TAG), Some("control-plane"));
    assert_eq!(tag(instance, "Name"), Some(format!("anycloud-cp-{}", &id[..8]).as_str()));
    let groups: Vec<&str> = instance.security_groups().iter().filter_map(|g| g.group_id()).collect();
    assert_eq!(groups, [network.id.as_str()]);
    let user_data = ec2
        .describe_instance_attribute()
        .instance_id(&cp.provider_id)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let user_data = user_data.user_data().and_then(|v| v.value()).unwrap();
    let user_data = decode_base64(user_data);
    assert_eq!(String::from_utf8(user_data).unwrap(), cp_spec.user_data);

    let w0 = cloud.launch(&spec(&placement, &network, "w0", Role::Worker)).await.unwrap();
    let w1 = cloud.launch(&spec(&placement, &network, "w1", Role::Worker)).await.unwrap();
    let instances = tagged_instances(&ec2, &id, None).await;
    assert_eq!(instances.len(), 3, "{instances:#?}");
    // Every instance requires IMDSv2 and answers a session token one hop away only: a Pod's
    // network namespace is a hop further (moto's defaults are tokens optional, hop limit 1).
    for instance in &instances {
        let options = instance.metadata_options().unwrap_or_else(|| panic!("no MetadataOptions: {instance:#?}"));
        assert_eq!(options.http_tokens(), Some(&HttpTokensState::Required), "{instance:#?}");
        assert_eq!(options.http_put_response_hop_limit(), Some(1), "{instance:#?}");
        assert_eq!(options.http_endpoint(), Some(&InstanceMetadataEndpointState::Enabled), "{instance:#?}");
    }
    let volumes = ec2.describe_volumes().filters(filter(&format!("tag:{CLUSTER_TAG}"), &id)).send().await.unwrap();
    assert_eq!(volumes.volumes().len(), 3, "each VM's volume carries the cluster's tag");

    let vms = cloud.list_vms(&placement).await.unwrap();
    let seen: Vec<(&str, Role, &str)> =
        vms.iter().map(|vm| (vm.name.as_str(), vm.role, vm.provider_id.as_str())).collect();
    assert_eq!(
        seen,
        [
            ("cp", Role::ControlPlane, cp.provider_id.as_str()),
            ("w0", Role::Worker, w0.provider_id.as_str()),
            ("w1", Role::Worker, w1.provider_id.as_str()),
        ]
    );

    // Another cluster's VM is not terminated through this one.
    let other_id = cluster_id();
    let other_placement = cloud.placement(&other_id, REGION, VM_TYPE).await.unwrap();
    let other_network = cloud.ensure_network(&other_placement).await.unwrap();
    let other = cloud.launch(&spec(&other_placement, &other_network, "cp", Role::ControlPlane)).await.unwrap();

    let mut ids: Vec<String> = vms.iter().map(|vm| vm.provider_id.clone()).collect();
    ids.push(other.provider_id.clone());
    cloud.terminate(&placement, &ids).await.unwrap();
    // Already gone, never there, nothing at all: success.
    cloud.terminate(&placement, &ids).await.unwrap();
    cloud.terminate(&placement, &["i-0123456789abcdef0".to_owned()]).await.unwrap();
    cloud.terminate(&placement, &[]).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<Vm> = cloud.list_vms(&placement).await.unwrap();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "VMs still listed after terminate: {left:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(tagged_instances(&ec2, &id, None).await.iter().all(|i| state(i) == "terminated"));
    let other_vms = cloud.list_vms(&other_placement).await.unwrap();
    assert_eq!(other_vms.len(), 1, "{other_vms:#?}");
    assert_eq!(other_vms[0].provider_id, other.provider_id);

    cloud.delete_network(&placement).await.unwrap();
    assert!(!cloud.network_exists(&placement).await.unwrap());
    assert!(tagged_groups(&ec2, &id).await.is_empty());
    assert!(cloud.network_exists(&other_placement).await.unwrap(), "the other cluster's group is left alone");
}

/// The Elastic IPs moto holds with the cluster's tag.
async fn tagged_addresses(ec2: &aws_sdk_ec2::Client, cluster_id: &str) -> Vec<aws_sdk_ec2::types::Address> {
    let output =
        ec2.describe_addresses().filters(filter(&format!("tag:{CLUSTER_TAG}"), cluster_id)).send().await.unwrap();
    output.addresses().to_vec()
}

/// The control plane's Elastic IP: allocated once (found again by its tags, a duplicate of a
/// lost allocation released), associated once the instance runs, the instance's public address
/// from then on, and released (disassociated first) once the instance is gone.
#[tokio::test]
async fn an_elastic_ip_is_allocated_once_associated_and_released() {
    let moto = Moto::start();
    let cloud = cloud(&moto);
    let ec2 = moto.ec2(REGION);
    let id = cluster_id();
    let placement = cloud.placement(&id, REGION, VM_TYPE).await.unwrap();
    let network = cloud.ensure_network(&placement).await.unwrap();

    let address = cloud.ensure_address(&placement, "cp").await.unwrap();
    assert!(address.id.starts_with("eipalloc-"), "{address:?}");
    assert_eq!(cloud.ensure_address(&placement, "cp").await.unwrap(), address, "found again by its tags");
    let held = tagged_addresses(&ec2, &id).await;
    assert_eq!(held.len(), 1, "{held:#?}");
    let tags = |eip: &aws_sdk_ec2::types::Address, key: &str| {
        eip.tags().iter().find(|t| t.key() == Some(key)).and_then(|t| t.value()).map(str::to_owned)
    };
    assert_eq!(tags(&held[0], NAME_TAG).as_deref(), Some("cp"));
    assert_eq!(held[0].public_ip(), Some(address.ip.as_str()));

    // A second allocation of the same name (an AllocateAddress sent twice) is released.
    let tag_spec = aws_sdk_ec2::types::TagSpecification::builder()
        .resource_type(aws_sdk_ec2::types::ResourceType::ElasticIp)
        .tags(aws_sdk_ec2::types::Tag::builder().key(CLUSTER_TAG).value(&id).build())
        .tags(aws_sdk_ec2::types::Tag::builder().key(NAME_TAG).value("cp").build())
        .build();
    ec2.allocate_address()
        .domain(aws_sdk_ec2::types::DomainType::Vpc)
        .tag_specifications(tag_spec)
        .send()
        .await
        .unwrap();
    assert_eq!(tagged_addresses(&ec2, &id).await.len(), 2);
    let kept = cloud.ensure_address(&placement, "cp").await.unwrap();
    assert_eq!(tagged_addresses(&ec2, &id).await.len(), 1, "the duplicate is released");
    assert_eq!(cloud.list_addresses(&placement).await.unwrap(), std::slice::from_ref(&kept));

    let cp = cloud
        .launch(&LaunchSpec { address: Some(&kept), ..spec(&placement, &network, "cp", Role::ControlPlane) })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let vm =
            cloud.list_vms(&placement).await.unwrap().into_iter().find(|vm| vm.provider_id == cp.provider_id).unwrap();
        if cloud.attach_address(&placement, &kept, &vm).await.unwrap() {
            break;
        }
        assert!(Instant::now() < deadline, "never associated: {vm:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let instance = tagged_instances(&ec2, &id, Some("cp")).await.remove(0);
    assert_eq!(instance.public_ip_address(), Some(kept.ip.as_str()), "the instance's public address is the Elastic IP");
    let held = tagged_addresses(&ec2, &id).await;
    assert_eq!(held[0].instance_id(), Some(cp.provider_id.as_str()));
    let vm = cloud.list_vms(&placement).await.unwrap().remove(0);
    assert!(cloud.attach_address(&placement, &kept, &vm).await.unwrap(), "associated again is success");

    cloud.terminate(&placement, std::slice::from_ref(&cp.provider_id)).await.unwrap();
    cloud.release_addresses(&placement).await.unwrap();
    cloud.release_addresses(&placement).await.unwrap();
    assert!(tagged_addresses(&ec2, &id).await.is_empty(), "released");
    assert!(cloud.list_addresses(&placement).await.unwrap().is_empty());
}
