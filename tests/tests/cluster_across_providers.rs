//! A cluster across two providers, as the spec's own example places it: the API hosted on AWS
//! with the control plane there, the capacity on GCP; and its mirror (GCP hosting, AWS capacity).
//! The API runs as a hosted API (`--hosted-by`) whose control planes go on its hosting credential
//! (`--control-plane-credentials`, as `api.deploy`'s unit passes it) and whose public address is
//! the test's loopback (`--public-address`); its clusters' Kubernetes API is the simulated one
//! over the instances moto and the fake Compute Engine hold ([`BothMachines`]).
//!
//! What each provider holds is asked of moto and the fake, never of anycloud: after the create,
//! each side's rules are exactly those docs/hosting.md ("Cluster networks") lists, with the
//! nodes' and the API's own addresses: on the control plane's side the Kubernetes API (TCP 6443)
//! from the API and every worker, WireGuard (UDP 51820) from every node; on the capacity's side
//! WireGuard from every node; everything between a side's own VMs; nothing from `0.0.0.0/0`. The
//! boot scripts carry k3s's multicloud flags, and the workers join the control plane's public
//! address. After the delete, neither provider holds a VM or a rule of the cluster.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{Api, ApiOptions, Moto};
use anycloud_tests::fake_google::FakeGoogle;
use anycloud_tests::gcp_test_key::{PROJECT, service_account_json};
use anycloud_tests::provider_state::{self, ingress_at_fake_compute, ingress_at_moto};
use anycloud_tests::simulated_kube::{BothMachines, GceMachines, MotoMachines, SimulatedKube};
use serde_json::Value;

const AWS_REGION: &str = "us-east-1";
const GCP_REGION: &str = "us-central1";
/// Where the tests' hosted API is reached, and so where its requests leave from.
const API_ADDRESS: &str = "127.0.0.1";

/// One provider as the test uses it: the credential's name, region and machine type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Provider {
    Aws,
    Gcp,
}

impl Provider {
    fn credential(self) -> &'static str {
        match self {
            Self::Aws => "aws-account",
            Self::Gcp => "gcp-project",
        }
    }

    fn region(self) -> &'static str {
        match self {
            Self::Aws => AWS_REGION,
            Self::Gcp => GCP_REGION,
        }
    }

    fn vm_type(self, control_plane: bool) -> &'static str {
        match (self, control_plane) {
            (Self::Aws, true) => "t3.medium",
            (Self::Aws, false) => "t3.large",
            (Self::Gcp, true) => "e2-medium",
            (Self::Gcp, false) => "e2-standard-2",
        }
    }
}

/// The peers and a hosted API whose control planes go on `host`'s credential.
struct World {
    moto: Moto,
    google: FakeGoogle,
    _kube: SimulatedKube,
    api: Api,
}

impl World {
    fn start(host: Provider) -> Self {
        let moto = Moto::start();
        let google = FakeGoogle::start();
        let kube = SimulatedKube::start(BothMachines(
            GceMachines::new(google.gce().clone(), PROJECT),
            MotoMachines::new(&moto.endpoint, AWS_REGION),
        ));
        let args = [
            "--control-plane-credentials",
            host.credential(),
            "--control-plane-region",
            host.region(),
            "--control-plane-vm-type",
            host.vm_type(true),
            "--public-address",
            API_ADDRESS,
        ];
        let api = Api::start_opts(ApiOptions {
            id: "across".into(),
            hosted: true,
            env: vec![("ANYCLOUD_TEST_SIMULATED_KUBE".into(), kube.base_url())],
            args: args.into_iter().map(str::to_owned).collect(),
            ..ApiOptions::default()
        });
        let world = Self { moto, google, _kube: kube, api };
        world.credential(Provider::Aws);
        world.credential(Provider::Gcp);
        world
    }

    fn credential(&self, provider: Provider) {
        let out = match provider {
            Provider::Aws => self.api.cli_env(
                &[
                    "credentials",
                    "new",
                    provider.credential(),
                    "--provider",
                    "aws",
                    "--endpoint",
                    &self.moto.endpoint,
                    "--region",
                    AWS_REGION,
                    "--wait",
                ],
                &[("AWS_ACCESS_KEY_ID", "AKIAANYCLOUDACROSS01"), ("AWS_SECRET_ACCESS_KEY", "moto-across-secret")],
            ),
            Provider::Gcp => {
                let key_file = self.api.scratch().join("service-account.json");
                std::fs::write(&key_file, service_account_json()).unwrap();
                self.api.cli(&[
                    "credentials",
                    "new",
                    provider.credential(),
                    "--provider",
                    "gcp",
                    "--service-account-file",
                    key_file.to_str().unwrap(),
                    "--endpoint",
                    &self.google.endpoint(),
                    "--wait",
                ])
            }
        };
        out.expect_code(0);
    }

    /// The rules each provider holds for the cluster, in the words of `provider_state`.
    fn ingress(&self, provider: Provider, cluster_id: &str) -> Vec<String> {
        match provider {
            Provider::Aws => ingress_at_moto(&self.moto, cluster_id),
            Provider::Gcp => ingress_at_fake_compute(self.google.gce(), PROJECT, cluster_id),
        }
    }

    fn nothing_left(&self, cluster_id: &str) {
        let at_moto = provider_state::at_moto(&self.moto, cluster_id);
        assert!(at_moto.is_empty(), "moto still holds {at_moto:?}");
        let at_google = provider_state::at_fake_compute(self.google.gce(), PROJECT, cluster_id);
        assert!(at_google.is_empty(), "the fake Compute Engine still holds {at_google:?}");
    }
}

/// The rules docs/hosting.md lists for a side, with these addresses (each a `/32`), in the words
/// of `provider_state` for `provider`.
fn expected(provider: Provider, control_plane_side: bool, api: &str, cp: &str, workers: &[&str]) -> Vec<String> {
    let mut nodes: Vec<String> =
        std::iter::once(cp).chain(workers.iter().copied()).map(|a| format!("{a}/32")).collect();
    nodes.sort();
    let mut kube_api: Vec<String> = if control_plane_side {
        std::iter::once(api).chain(workers.iter().copied()).map(|a| format!("{a}/32")).collect()
    } else {
        Vec::new()
    };
    kube_api.sort();
    let mut rules: Vec<String> = match provider {
        Provider::Aws => std::iter::once("all from the group".to_owned())
            .chain(kube_api.iter().map(|source| format!("tcp 6443 {source}")))
            .chain(nodes.iter().map(|source| format!("udp 51820 {source}")))
            .collect(),
        Provider::Gcp => std::iter::once("internal: all from the cluster's VMs".to_owned())
            .chain(kube_api.iter().map(|source| format!("kube-api: tcp 6443 {source}")))
            .chain(nodes.iter().map(|source| format!("wireguard: udp 51820 {source}")))
            .collect(),
    };
    rules.sort();
    rules
}

/// A cluster of two workers on `capacity`, its control plane on `host`: the rules at both, the
/// scripts, then the delete.
fn a_cluster_across(host: Provider, capacity: Provider) {
    let world = World::start(host);
    let api = &world.api;
    let out = api.spawn_cli(&[
        "cluster",
        "create",
        "across",
        "--credentials",
        capacity.credential(),
        "--region",
        capacity.region(),
        "--vm-type",
        capacity.vm_type(false),
        "--min-vms",
        "2",
        "--max-vms",
        "2",
        "--wait",
    ]);
    out.wait(Duration::from_secs(180)).expect_code(0);
    let status = api.cli(&["--json", "cluster", "status", "across"]).json();
    let cluster_id = status["cluster"]["id"].as_str().unwrap().to_owned();
    assert_eq!(status["cluster"]["control_plane_credential"], host.credential(), "{status:#}");
    let public = |role: &str| -> Vec<String> {
        let vms = status["vms"].as_array().unwrap().iter().filter(|vm| vm["role"] == role);
        vms.map(|vm| vm["public_ip"].as_str().unwrap().to_owned()).collect()
    };
    let cp = public("control-plane").pop().unwrap();
    let workers = public("worker");
    assert_eq!(workers.len(), 2, "{status:#}");
    let workers: Vec<&str> = workers.iter().map(String::as_str).collect();

    // Each side's rules, as each provider holds them: exactly the documented list.
    let cp_rules = world.ingress(host, &cluster_id);
    assert_eq!(cp_rules, expected(host, true, API_ADDRESS, &cp, &workers), "the control plane's side ({host:?})");
    let capacity_rules = world.ingress(capacity, &cluster_id);
    assert_eq!(capacity_rules, expected(capacity, false, API_ADDRESS, &cp, &workers), "the capacity's side");
    for rule in cp_rules.iter().chain(&capacity_rules) {
        assert!(!rule.ends_with("0.0.0.0/0"), "open to the world: {rule}");
    }
    let documented = include_str!("../../docs/hosting.md");
    for row in [
        "| across networks | control plane | TCP 6443 | the managing API's address, every worker's public address |",
        "| across networks | control plane | UDP 51820 | every node's public address |",
        "| across networks | capacity | UDP 51820 | every node's public address |",
    ] {
        assert!(documented.contains(row), "docs/hosting.md does not list: {row}");
    }

    // The scripts: k3s's multicloud flags, the workers joining the control plane's public address.
    let scripts = world.scripts(host, capacity, &cluster_id);
    let (server, agents): (Vec<_>, Vec<_>) = scripts.iter().partition(|script| script.contains("sh -s - server"));
    assert_eq!((server.len(), agents.len()), (1, 2), "{scripts:#?}");
    assert!(server[0].contains("--flannel-backend=wireguard-native --flannel-external-ip"), "{}", server[0]);
    // Its external address is its reserved one, which the workers join.
    assert!(server[0].contains(&format!("--node-external-ip '{cp}'")), "{}", server[0]);
    for agent in agents {
        assert!(agent.contains(&format!("K3S_URL='https://{cp}:6443'")), "{agent}");
        assert!(agent.contains("--node-external-ip \"$public_ip\""), "{agent}");
    }

    api.spawn_cli(&["cluster", "delete", "across", "--wait"]).wait(Duration::from_secs(180)).expect_code(0);
    world.nothing_left(&cluster_id);
}

impl World {
    /// The boot scripts of the cluster's VMs, as each provider holds them (EC2 user-data, GCE
    /// `startup-script`).
    fn scripts(&self, host: Provider, capacity: Provider, cluster_id: &str) -> Vec<String> {
        let mut scripts = Vec::new();
        for provider in [host, capacity] {
            match provider {
                Provider::Aws => {
                    const SCRIPT: &str = r#"
import base64, json, os
import boto3
ec2 = boto3.client("ec2", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
res = ec2.describe_instances(Filters=[{"Name": "tag:anycloud-cluster", "Values": [os.environ["CLUSTER"]]},
                                      {"Name": "instance-state-name", "Values": ["pending", "running"]}])
print(json.dumps([base64.b64decode(ec2.describe_instance_attribute(InstanceId=i["InstanceId"], Attribute="userData")
                                   ["UserData"].get("Value", "")).decode()
                  for r in res["Reservations"] for i in r["Instances"]]))
"#;
                    let out = self.moto.python(SCRIPT, &[("CLUSTER", cluster_id)]);
                    let held: Vec<String> = serde_json::from_str(out.trim()).unwrap();
                    scripts.extend(held);
                }
                Provider::Gcp => {
                    for instance in self.google.gce().live_instances(PROJECT, "anycloud-cluster", cluster_id) {
                        let items = instance["metadata"]["items"].as_array().unwrap().clone();
                        let script =
                            items.iter().find(|item| item["key"] == "startup-script").map(|item| &item["value"]);
                        scripts.extend(script.and_then(Value::as_str).map(str::to_owned));
                    }
                }
            }
        }
        scripts
    }
}

/// The spec's example: the API and the control plane on AWS, the capacity on GCP.
#[test]
fn a_cluster_with_its_control_plane_on_aws_and_its_capacity_on_gcp_opens_only_its_own_addresses() {
    a_cluster_across(Provider::Aws, Provider::Gcp);
}

/// Its mirror: the API and the control plane on GCP, the capacity on AWS.
#[test]
fn a_cluster_with_its_control_plane_on_gcp_and_its_capacity_on_aws_opens_only_its_own_addresses() {
    a_cluster_across(Provider::Gcp, Provider::Aws);
}
