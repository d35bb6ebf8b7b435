//! The scheduler: binds each unscheduled Pod to the node with the fewest active Pods (ties by
//! name) among those that pass kube-scheduler's filters, in its order, each node stopping at
//! the first that fails it (<https://kubernetes.io/docs/concepts/scheduling-eviction/kube-scheduler/>):
//!
//! - `TaintToleration`: a node's `NoSchedule` taints the Pod does not tolerate (the control
//!   plane's `anycloud.dev/control-plane`, a NotReady node's `node.kubernetes.io/not-ready`);
//! - `NodeResourcesFit`: the Pod's requests (the sum of its containers' `resources.requests`,
//!   a limit standing for a missing request as the apiserver defaults it, or its largest init
//!   container's if larger) of `cpu` and `memory` must fit in the node's `allocatable` less the
//!   requests of the active Pods bound to it
//!   (<https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#how-pods-with-resource-requests-are-scheduled>),
//!   and it holds at most `allocatable.pods` of them.
//!
//! A Pod that fits nowhere stays `Pending` with condition `PodScheduled` `False`, reason
//! `Unschedulable`, and a `FailedScheduling` Warning event, both with the scheduler's message in
//! Kubernetes 1.36's words (`FitError`: a count of nodes per reason, sorted; then what preemption
//! found: `Preemption is not helpful for scheduling` for a node no eviction would open, `No
//! preemption victims found for incoming pod` for one that is only full, as every Pod here has
//! the same priority):
//!
//! `0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. no new claims
//! to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for
//! scheduling, 2 No preemption victims found for incoming pod.`
//!
//! The event is counted again at most every 10 s while the message stays the same.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::events::{self, Note, Severity};
use super::resources::PODS;
use super::status::ApiError;
use super::{Kube, nodes, quantities, time};

/// The resources the scheduler counts, as their `Insufficient ...` reasons name them.
const RESOURCES: [&str; 2] = ["cpu", "memory"];

/// How often the same `FailedScheduling` is counted again.
const REPORT_EVERY_SECONDS: i64 = 10;

/// Why a node does not take the Pod: the reasons of its filter's failure, and whether
/// preempting other Pods could change that.
struct Refusal {
    reasons: Vec<String>,
    preemption_helps: bool,
}

/// A node as the scheduler weighs it.
struct Candidate {
    name: String,
    host_ip: String,
    taints: Vec<Value>,
    /// Thousandths of each resource it offers, and `pods`.
    allocatable: HashMap<&'static str, i128>,
    /// What its active Pods request, and how many they are.
    requested: HashMap<&'static str, i128>,
    pods: i128,
}

/// Binds the cluster's unscheduled Pods (among `pods`, every Pod of the cluster that has not ended).
pub(crate) async fn schedule(kube: &Kube, cluster: &str, pods: &[Value]) -> Result<(), ApiError> {
    let unscheduled: Vec<&Value> = pods
        .iter()
        .filter(|pod| pod["spec"]["nodeName"].is_null() && pod["metadata"]["deletionTimestamp"].is_null())
        .collect();
    if unscheduled.is_empty() {
        return Ok(());
    }
    let Some(cp) = kube.machines.machine(cluster).await.map_err(ApiError::internal)? else { return Ok(()) };
    let machines = nodes::of_cluster(kube.machines.as_ref(), &cp).await?;
    let mut candidates: Vec<Candidate> = machines.iter().map(|machine| candidate(&nodes::node(machine))).collect();
    for pod in pods {
        let active = matches!(pod["status"]["phase"].as_str(), Some("Pending" | "Running"));
        if let (true, Some(node)) = (active, pod["spec"]["nodeName"].as_str())
            && let Some(candidate) = candidates.iter_mut().find(|c| c.name == node)
        {
            candidate.add(&requests(pod));
        }
    }
    for pod in unscheduled {
        let wanted = requests(pod);
        let mut refusals = Vec::new();
        let mut fitting = Vec::new();
        for (index, candidate) in candidates.iter().enumerate() {
            match candidate.refusal(pod, &wanted) {
                Some(refusal) => refusals.push(refusal),
                None => fitting.push(index),
            }
        }
        let chosen = fitting.into_iter().min_by_key(|&i| (candidates[i].pods, candidates[i].name.clone()));
        let Some(chosen) = chosen else {
            unschedulable(kube, cluster, pod, &fit_error(candidates.len(), &refusals)).await?;
            continue;
        };
        let node = &mut candidates[chosen];
        node.add(&wanted);
        let mut bound = pod.clone();
        bound["spec"]["nodeName"] = json!(node.name);
        bound["status"]["hostIP"] = json!(node.host_ip);
        bound["status"]["hostIPs"] = json!([{ "ip": node.host_ip }]);
        bound["status"]["conditions"] = json!([{
            "type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": time::now(),
        }]);
        if let Some(bound) = kube.store.update(cluster, &PODS, bound).await? {
            let namespace = bound["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = bound["metadata"]["name"].as_str().unwrap_or_default();
            let message = format!("Successfully assigned {namespace}/{name} to {}", node.name);
            let note =
                Note { severity: Severity::Normal, component: "default-scheduler", reason: "Scheduled", message };
            events::record(kube, cluster, &PODS, &bound, note).await;
        }
    }
    Ok(())
}

/// Leaves the Pod Pending, and says why.
async fn unschedulable(kube: &Kube, cluster: &str, pod: &Value, message: &str) -> Result<(), ApiError> {
    let mut pending = pod.clone();
    pending["status"]["conditions"] = json!([{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
        "lastProbeTime": null, "lastTransitionTime": time::now(),
    }]);
    let written = if pending["status"]["conditions"][0]["message"] != pod["status"]["conditions"][0]["message"] {
        kube.store.update(cluster, &PODS, pending).await?
    } else {
        Some(pod.clone())
    };
    if let Some(written) = written {
        let note = Note {
            severity: Severity::Warning,
            component: "default-scheduler",
            reason: "FailedScheduling",
            message: message.to_owned(),
        };
        events::record_every(kube, cluster, &PODS, &written, note, REPORT_EVERY_SECONDS).await;
    }
    Ok(())
}

/// The scheduler's `FitError` message for `nodes` nodes that all refused.
fn fit_error(nodes: usize, refusals: &[Refusal]) -> String {
    let filters = histogram(refusals.iter().flat_map(|r| r.reasons.iter().map(String::as_str)));
    let preemption = histogram(refusals.iter().map(|r| {
        if r.preemption_helps {
            "No preemption victims found for incoming pod"
        } else {
            "Preemption is not helpful for scheduling"
        }
    }));
    format!(
        "0/{nodes} nodes are available: {filters}. no new claims to deallocate, preemption: 0/{nodes} nodes are \
         available: {preemption}."
    )
}

/// `2 Insufficient cpu, 1 node(s) had untolerated taint(s)`: how many times each reason came,
/// sorted as the scheduler sorts them (as strings).
fn histogram<'a>(reasons: impl Iterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for reason in reasons {
        *counts.entry(reason).or_default() += 1;
    }
    let mut listed: Vec<String> = counts.iter().map(|(reason, count)| format!("{count} {reason}")).collect();
    listed.sort();
    listed.join(", ")
}

/// The node, as the scheduler weighs it (nothing requested yet).
fn candidate(node: &Value) -> Candidate {
    let allocatable = &node["status"]["allocatable"];
    let mut offered: HashMap<&'static str, i128> =
        RESOURCES.iter().map(|r| (*r, allocatable[*r].as_str().and_then(quantities::milli).unwrap_or(0))).collect();
    offered.insert("pods", allocatable["pods"].as_str().and_then(quantities::milli).unwrap_or(110_000) / 1000);
    let mut taints: Vec<Value> = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
    taints.retain(|taint| matches!(taint["effect"].as_str(), Some("NoSchedule" | "NoExecute")));
    let host_ip = node["status"]["addresses"]
        .as_array()
        .and_then(|addresses| addresses.iter().find(|a| a["type"] == "InternalIP"))
        .and_then(|a| a["address"].as_str())
        .unwrap_or_default()
        .to_owned();
    Candidate {
        name: node["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
        host_ip,
        taints,
        allocatable: offered,
        requested: HashMap::new(),
        pods: 0,
    }
}

impl Candidate {
    fn add(&mut self, requests: &HashMap<&'static str, i128>) {
        for (resource, amount) in requests {
            *self.requested.entry(resource).or_default() += amount;
        }
        self.pods += 1;
    }

    /// Why the node does not take the Pod, or `None` if it does.
    fn refusal(&self, pod: &Value, wanted: &HashMap<&'static str, i128>) -> Option<Refusal> {
        let tolerations = pod["spec"]["tolerations"].as_array().map(Vec::as_slice).unwrap_or_default();
        if self.taints.iter().any(|taint| !tolerations.iter().any(|toleration| tolerates(toleration, taint))) {
            return Some(Refusal {
                reasons: vec!["node(s) had untolerated taint(s)".to_owned()],
                preemption_helps: false,
            });
        }
        let mut reasons = Vec::new();
        if self.pods + 1 > self.allocatable.get("pods").copied().unwrap_or(110) {
            reasons.push("Too many pods".to_owned());
        }
        for resource in RESOURCES {
            let want = wanted.get(resource).copied().unwrap_or(0);
            let free = self.allocatable.get(resource).copied().unwrap_or(0)
                - self.requested.get(resource).copied().unwrap_or(0);
            if want > 0 && want > free {
                reasons.push(format!("Insufficient {resource}"));
            }
        }
        (!reasons.is_empty()).then_some(Refusal { reasons, preemption_helps: true })
    }
}

/// Whether a toleration tolerates a taint
/// (<https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/>).
fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = toleration["effect"].as_str().unwrap_or_default();
    if !effect.is_empty() && Some(effect) != taint["effect"].as_str() {
        return false;
    }
    let key = toleration["key"].as_str().unwrap_or_default();
    match toleration["operator"].as_str().unwrap_or("Equal") {
        "Exists" => key.is_empty() || Some(key) == taint["key"].as_str(),
        "Equal" => {
            Some(key) == taint["key"].as_str()
                && toleration["value"].as_str().unwrap_or_default() == taint["value"].as_str().unwrap_or_default()
        }
        _ => false,
    }
}

/// What a Pod requests, in thousandths: the sum of its containers' requests (a limit standing
/// for a missing request), or its largest init container's if larger.
fn requests(pod: &Value) -> HashMap<&'static str, i128> {
    let of = |container: &Value, resource: &str| {
        let resources = &container["resources"];
        let given = resources["requests"][resource].as_str().or_else(|| resources["limits"][resource].as_str());
        given.and_then(quantities::milli).unwrap_or(0).max(0)
    };
    let containers = pod["spec"]["containers"].as_array().map(Vec::as_slice).unwrap_or_default();
    let init = pod["spec"]["initContainers"].as_array().map(Vec::as_slice).unwrap_or_default();
    RESOURCES
        .iter()
        .map(|resource| {
            let sum: i128 = containers.iter().map(|c| of(c, resource)).sum();
            let largest_init = init.iter().map(|c| of(c, resource)).max().unwrap_or(0);
            (*resource, sum.max(largest_init))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_counts_nodes_per_reason_as_kube_scheduler_does() {
        let taint = || Refusal { reasons: vec!["node(s) had untolerated taint(s)".into()], preemption_helps: false };
        let cpu = || Refusal { reasons: vec!["Insufficient cpu".into()], preemption_helps: true };
        assert_eq!(
            fit_error(3, &[taint(), cpu(), cpu()]),
            "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. no new claims to \
             deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No \
             preemption victims found for incoming pod."
        );
    }

    #[test]
    fn requests_sum_containers_and_limits_stand_for_missing_requests() {
        let pod = json!({ "spec": { "containers": [
            { "resources": { "requests": { "cpu": "500m" } } },
            { "resources": { "limits": { "cpu": "1", "memory": "1Gi" } } },
        ] } });
        let wanted = requests(&pod);
        assert_eq!(wanted["cpu"], 1500);
        assert_eq!(wanted["memory"], 1024 * 1024 * 1024 * 1000);
        let taint = json!({ "key": "anycloud.dev/control-plane", "value": "true", "effect": "NoSchedule" });
        assert!(tolerates(&json!({ "operator": "Exists" }), &taint));
        assert!(tolerates(&json!({ "key": "anycloud.dev/control-plane", "value": "true" }), &taint));
        assert!(!tolerates(&json!({ "key": "anycloud.dev/control-plane", "value": "x" }), &taint));
    }
}
