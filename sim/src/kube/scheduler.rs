//! The scheduler: binds each unscheduled Pod to the Ready worker node with the fewest active
//! Pods (ties by name). The control plane is tainted `NoSchedule`, so a cluster without a Ready
//! worker leaves its Pods Pending with the scheduler's `Unschedulable` reason.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::events::{self, Note, Severity};
use super::resources::PODS;
use super::status::ApiError;
use super::{Kube, nodes, time};

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
    let workers: Vec<_> = machines.iter().filter(|m| !m.control_plane && m.running && m.node_ready).collect();
    let mut load: HashMap<&str, usize> = workers.iter().map(|m| (m.name.as_str(), 0)).collect();
    for pod in pods {
        let active = matches!(pod["status"]["phase"].as_str(), Some("Pending" | "Running"));
        if let (true, Some(node)) = (active, pod["spec"]["nodeName"].as_str())
            && let Some(count) = load.get_mut(node)
        {
            *count += 1;
        }
    }
    for pod in unscheduled {
        let mut bound = pod.clone();
        let chosen = workers.iter().min_by_key(|m| (load.get(m.name.as_str()).copied().unwrap_or(0), m.name.clone()));
        let Some(node) = chosen else {
            let message = format!(
                "0/{} nodes are available: 1 node(s) had untolerated taint {{anycloud.dev/control-plane: \
                 true}}, {} node(s) were not ready. preemption: 0/{} nodes are available: {} Preemption is not helpful \
                 for scheduling.",
                machines.len(),
                machines.len() - 1,
                machines.len(),
                machines.len()
            );
            bound["status"]["conditions"] = json!([{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                "lastProbeTime": null, "lastTransitionTime": time::now(),
            }]);
            if bound["status"]["conditions"][0]["message"] != pod["status"]["conditions"][0]["message"] {
                kube.store.update(cluster, &PODS, bound).await?;
            }
            continue;
        };
        *load.entry(node.name.as_str()).or_default() += 1;
        bound["spec"]["nodeName"] = json!(node.name);
        let host_ip = node.private_ip.clone().unwrap_or_default();
        bound["status"]["hostIP"] = json!(host_ip);
        bound["status"]["hostIPs"] = json!([{ "ip": host_ip }]);
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
