//! What a provider itself holds of one cluster, asked of the provider and never of anycloud: the
//! simulated cloud's own tables (`sim_vms`, `sim_networks`, `sim_addresses` in the API's database), moto through
//! boto3, the fake Compute server through its inspection API. Shared by the tests that compare a
//! workflow's end with the provider (`tests/provider_faults.rs`, `tests/crash_matrix.rs`).
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::collections::BTreeMap;

use anycloud_workflows::cloud::{CLUSTER_TAG, NAME_TAG};
use serde_json::Value;

use crate::e2e::{Api, Moto};
use crate::fake_gce::FakeGce;

/// What the provider holds of one cluster.
#[derive(Debug, Default)]
pub struct Holdings {
    /// The names of its live VMs, one entry per VM.
    pub vm_names: Vec<String>,
    /// The names of every VM the provider launched for it, live or gone: the simulated cloud's
    /// rows, moto's instances (terminated ones stay listed), the fake Compute server's insert
    /// operations.
    pub launched: Vec<String>,
    /// Its live network rules (security groups, firewall rules, sim networks).
    pub rules: usize,
    /// Its reserved addresses not released (Elastic IPs, static external addresses, sim
    /// addresses).
    pub addresses: usize,
}

impl Holdings {
    /// Nothing of the cluster is live.
    pub fn is_empty(&self) -> bool {
        self.vm_names.is_empty() && self.rules == 0 && self.addresses == 0
    }

    /// Live VMs beyond one per name.
    pub fn duplicates(&self) -> usize {
        beyond_one_per_name(&self.vm_names)
    }

    /// Launches beyond one per name: a VM launched again after its first launch.
    pub fn relaunched(&self) -> usize {
        beyond_one_per_name(&self.launched)
    }

    /// The live VMs' names, sorted.
    pub fn sorted_names(&self) -> Vec<String> {
        let mut names = self.vm_names.clone();
        names.sort_unstable();
        names
    }
}

fn beyond_one_per_name(names: &[String]) -> usize {
    let mut unique = names.to_vec();
    unique.sort_unstable();
    unique.dedup();
    names.len() - unique.len()
}

/// Asked of moto itself, through boto3: the instances tagged with the cluster (those not
/// terminated are live), its security groups and its Elastic IPs.
pub fn at_moto(moto: &Moto, cluster_id: &str) -> Holdings {
    const SCRIPT: &str = r#"
import json, os
import boto3
ec2 = boto3.client("ec2", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
tag = [{"Name": "tag:" + os.environ["CLUSTER_TAG"], "Values": [os.environ["CLUSTER_ID"]]}]
names, launched = [], []
for reservation in ec2.describe_instances(Filters=tag)["Reservations"]:
    for instance in reservation["Instances"]:
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        name = tags.get(os.environ["NAME_TAG"], instance["InstanceId"])
        launched.append(name)
        if instance["State"]["Name"] != "terminated":
            names.append(name)
groups = ec2.describe_security_groups(Filters=tag)["SecurityGroups"]
addresses = ec2.describe_addresses(Filters=tag)["Addresses"]
print(json.dumps({"vm_names": names, "launched": launched, "rules": len(groups), "addresses": len(addresses)}))
"#;
    let out = moto.python(SCRIPT, &[("CLUSTER_TAG", CLUSTER_TAG), ("NAME_TAG", NAME_TAG), ("CLUSTER_ID", cluster_id)]);
    let held: Value = serde_json::from_str(out.trim()).unwrap();
    let strings = |key: &str| -> Vec<String> {
        held[key].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_owned()).collect()
    };
    Holdings {
        vm_names: strings("vm_names"),
        launched: strings("launched"),
        rules: usize::try_from(held["rules"].as_u64().unwrap()).unwrap(),
        addresses: usize::try_from(held["addresses"].as_u64().unwrap()).unwrap(),
    }
}

/// Asked of the fake Compute server's inspection API: its instances (in any state but gone),
/// the insert operations that made the cluster's instances, its firewall rules and its static
/// addresses (named `ac-<12 hex>-...`, as the rules are).
pub fn at_fake_compute(fake: &FakeGce, project: &str, cluster_id: &str) -> Holdings {
    let prefix = format!("ac-{}-", &cluster_id.replace('-', "")[..12]);
    let vm_names = fake
        .instances(project)
        .iter()
        .filter(|i| i["labels"][CLUSTER_TAG] == cluster_id)
        .map(|i| i["labels"][NAME_TAG].as_str().unwrap_or("?").to_owned())
        .collect();
    let launched = fake
        .operations(project)
        .iter()
        .filter(|op| op["operationType"] == "insert")
        .filter_map(|op| op["targetLink"].as_str()?.split("/instances/").nth(1).map(str::to_owned))
        .filter_map(|instance| instance.strip_prefix(&prefix).map(str::to_owned))
        .collect();
    let rules = fake.firewalls(project).iter().filter(|r| r["name"].as_str().unwrap().starts_with(&prefix)).count();
    let addresses = fake.addresses(project).iter().filter(|a| a["name"].as_str().unwrap().starts_with(&prefix)).count();
    Holdings { vm_names, launched, rules, addresses }
}

/// Asked of the simulated cloud's own tables in the API's database: every VM row tagged with the
/// cluster (those not terminated are live), its networks not deleted and its addresses not
/// released.
pub fn at_sim(api: &Api, cluster_id: &str) -> Holdings {
    let mut held = Holdings::default();
    for row in api.query_strings("SELECT COALESCE(CAST(terminated_at AS TEXT), '-') || '|' || tags FROM sim_vms") {
        let (terminated, tags) = row.split_once('|').unwrap();
        let tags: BTreeMap<String, String> = serde_json::from_str(tags).unwrap();
        if tags.get(CLUSTER_TAG).map(String::as_str) != Some(cluster_id) {
            continue;
        }
        let name = tags.get(NAME_TAG).cloned().unwrap_or_default();
        if terminated == "-" {
            held.vm_names.push(name.clone());
        }
        held.launched.push(name);
    }
    held.rules = api
        .query_strings(&format!("SELECT id FROM sim_networks WHERE cluster = '{cluster_id}' AND deleted_at IS NULL"))
        .len();
    held.addresses = api
        .query_strings(&format!("SELECT id FROM sim_addresses WHERE owner = '{cluster_id}' AND released_at IS NULL"))
        .len();
    held
}

/// The rules of the cluster's security groups at moto that let traffic in, as `all from the
/// group` or `PROTOCOL PORT CIDR` (one line per source), sorted.
pub fn ingress_at_moto(moto: &Moto, cluster_id: &str) -> Vec<String> {
    const SCRIPT: &str = r#"
import json, os
import boto3
ec2 = boto3.client("ec2", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
tag = [{"Name": "tag:" + os.environ["CLUSTER_TAG"], "Values": [os.environ["CLUSTER_ID"]]}]
rules = []
for group in ec2.describe_security_groups(Filters=tag)["SecurityGroups"]:
    for rule in group["IpPermissions"]:
        if any(pair["GroupId"] == group["GroupId"] for pair in rule.get("UserIdGroupPairs", [])):
            rules.append("all from the group" if rule["IpProtocol"] == "-1" else "other from the group")
        for cidr in rule.get("IpRanges", []):
            rules.append("%s %s %s" % (rule["IpProtocol"], rule.get("FromPort", -1), cidr["CidrIp"]))
print(json.dumps(sorted(rules)))
"#;
    let out = moto.python(SCRIPT, &[("CLUSTER_TAG", CLUSTER_TAG), ("CLUSTER_ID", cluster_id)]);
    serde_json::from_str(out.trim()).unwrap()
}

/// The cluster's firewall rules at the fake Compute server, as `NAME: all from the cluster's
/// VMs` or `NAME: PROTOCOL PORT CIDR` (one line per source), sorted.
pub fn ingress_at_fake_compute(fake: &FakeGce, project: &str, cluster_id: &str) -> Vec<String> {
    let prefix = format!("ac-{}-", &cluster_id.replace('-', "")[..12]);
    let mut rules = Vec::new();
    for rule in fake.firewalls(project) {
        let Some(name) = rule["name"].as_str().and_then(|name| name.strip_prefix(&prefix)) else { continue };
        for allowed in rule["allowed"].as_array().unwrap() {
            let protocol = allowed["IPProtocol"].as_str().unwrap();
            let ports: Vec<&str> = allowed["ports"]
                .as_array()
                .map_or_else(Vec::new, |ports| ports.iter().filter_map(Value::as_str).collect());
            if rule["sourceTags"].as_array().is_some_and(|tags| !tags.is_empty()) {
                rules.push(format!("{name}: {protocol} from the cluster's VMs"));
            }
            for source in rule["sourceRanges"].as_array().map(Vec::as_slice).unwrap_or_default() {
                rules.push(format!("{name}: {protocol} {} {}", ports.join(","), source.as_str().unwrap()));
            }
        }
    }
    rules.sort();
    rules
}
