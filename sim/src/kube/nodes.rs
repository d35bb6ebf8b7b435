//! Nodes: what booted VMs would register. The control plane itself (tainted, so that no Pod is
//! scheduled there, as the control plane's user-data asks of k3s), and every running VM whose
//! user-data joins this control plane's address with its agent token (a node that is not Ready
//! carries the `node.kubernetes.io/not-ready:NoSchedule` taint, as the node lifecycle controller
//! gives it). They are computed from the
//! [`Machines`] on every request, never stored. Each is complete as a kubelet reports it: every
//! field of `nodeInfo` the API requires, `capacity` and `allocatable` (the host's, where every
//! node's Pods run: the scheduler fits Pods' requests in them, nothing enforces limits) and
//! `daemonEndpoints`.

use std::collections::HashMap;

use anycloud_workflows::cluster::user_data;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::NODES;
use super::selectors::Selector;
use super::status::ApiError;
use super::{Machine, Machines, Shared, auth, tables};

/// `GET /api/v1/nodes`.
pub(crate) async fn list(
    State(kube): Shared,
    Path(vm): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let cp = auth::control_plane(&kube, &vm, &headers).await?;
        let selector = Selector::parse(
            query.get("labelSelector").map(String::as_str),
            query.get("fieldSelector").map(String::as_str),
        )?;
        let items: Vec<Value> = of_cluster(kube.machines.as_ref(), &cp)
            .await?
            .iter()
            .map(node)
            .filter(|node| selector.matches(node))
            .collect();
        let revision = kube.store.revision(&vm).await?;
        if tables::wanted(&headers) {
            let include = query.get("includeObject").map(String::as_str);
            return Ok(tables::table(&NODES, &items, revision, include));
        }
        Ok::<_, ApiError>(json!({
            "kind": "NodeList", "apiVersion": "v1", "metadata": { "resourceVersion": revision.to_string() },
            "items": items,
        }))
    };
    match result.await {
        Ok(body) => axum::Json(body).into_response(),
        Err(err) => err.into_response(),
    }
}

/// `GET /api/v1/nodes/{name}`.
pub(crate) async fn get(
    State(kube): Shared,
    Path((vm, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let cp = auth::control_plane(&kube, &vm, &headers).await?;
        let machines = of_cluster(kube.machines.as_ref(), &cp).await?;
        let found = machines.iter().find(|machine| machine.name == name).map(node);
        let node = found.ok_or_else(|| ApiError::not_found(&NODES, &name))?;
        if tables::wanted(&headers) {
            let include = query.get("includeObject").map(String::as_str);
            return Ok(tables::table(&NODES, &[node], 0, include));
        }
        Ok::<_, ApiError>(node)
    };
    match result.await {
        Ok(body) => (StatusCode::OK, axum::Json(body)).into_response(),
        Err(err) => err.into_response(),
    }
}

/// The machines of the cluster whose control plane is `cp`: it, then its joined workers.
pub(crate) async fn of_cluster(machines: &dyn Machines, cp: &Machine) -> Result<Vec<Machine>, ApiError> {
    let running = machines.running().await.map_err(ApiError::internal)?;
    // A worker presents k3s's secure token: the control plane's agent token with the hash of the
    // CA it installs. One that pinned another CA would not join a real k3s server either.
    let addresses = [cp.private_ip.as_deref(), cp.public_ip.as_deref()];
    let mut joined = vec![cp.clone()];
    for machine in running.into_iter().filter(|machine| !machine.control_plane) {
        let Some((address, token, _name)) = user_data::parse_worker(&machine.user_data) else { continue };
        if addresses.contains(&Some(address.as_str())) && user_data::control_plane_admits_agent(&cp.user_data, &token) {
            joined.push(machine);
        }
    }
    Ok(joined)
}

/// A node as its kubelet would report it.
pub(crate) fn node(machine: &Machine) -> Value {
    let ready = machine.node_ready;
    let mut labels = json!({
        "kubernetes.io/hostname": machine.name, "kubernetes.io/os": "linux", "anycloud.dev/simulated": "true",
    });
    let mut taints = Vec::new();
    if machine.control_plane {
        labels["node-role.kubernetes.io/control-plane"] = json!("true");
        // The taint the control plane's script gives its node (user_data::CONTROL_PLANE_TAINT).
        taints.push(json!({ "key": "anycloud.dev/control-plane", "value": "true", "effect": "NoSchedule" }));
    }
    if !ready {
        // The node lifecycle controller's taint of a node that is not Ready.
        taints.push(json!({ "key": "node.kubernetes.io/not-ready", "effect": "NoSchedule" }));
    }
    let addresses: Vec<Value> = [("InternalIP", &machine.private_ip), ("ExternalIP", &machine.public_ip)]
        .into_iter()
        .filter_map(|(kind, address)| address.as_ref().map(|address| json!({ "type": kind, "address": address })))
        .chain([json!({ "type": "Hostname", "address": machine.name })])
        .collect();
    let uid = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, format!("sim-node/{}", machine.id).as_bytes());
    json!({
        "kind": "Node", "apiVersion": "v1",
        "metadata": {
            "name": machine.name, "uid": uid.to_string(), "labels": labels,
            "annotations": { "anycloud.dev/provider-id": machine.id },
        },
        "spec": { "providerID": format!("sim://{}", machine.id), "taints": taints },
        "status": {
            "conditions": [{
                "type": "Ready",
                "status": if ready { "True" } else { "False" },
                "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
                "message": if ready { "kubelet is posting ready status (simulated)" } else { "node is not ready (simulated)" },
            }],
            "addresses": addresses,
            "nodeInfo": node_info(machine),
            "capacity": host().capacity,
            "allocatable": host().capacity,
            "daemonEndpoints": { "kubeletEndpoint": { "Port": 10250 } },
        },
    })
}

/// What every simulated node reports of the host its Pods' processes really run on, read once
/// per process: the scheduler builds a node for each machine at every Pod it places, and these
/// files do not change while the process lives.
struct Host {
    /// What the node offers: the host's CPUs and memory, and the kubelet's default of 110 Pods.
    capacity: Value,
    kernel: String,
    os_image: String,
}

fn host() -> &'static Host {
    static HOST: std::sync::OnceLock<Host> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let memory = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.split_whitespace().next().map(str::to_owned))
        });
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|text| text.trim().to_owned());
        let os_image = std::fs::read_to_string("/etc/os-release").ok().and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("PRETTY_NAME="))
                .map(|name| name.trim_matches('"').to_owned())
        });
        Host {
            capacity: json!({
                "cpu": cpus.to_string(), "memory": format!("{}Ki", memory.unwrap_or_else(|| "0".into())), "pods": "110",
            }),
            kernel: kernel.unwrap_or_else(|_| "unknown".into()),
            os_image: os_image.unwrap_or_else(|| "unknown".into()),
        }
    })
}

/// `status.nodeInfo`, every field the API marks required: the machine's own ids (stable,
/// derived from its provider id, as a VM's `/etc/machine-id` and DMI UUID are), and the
/// kernel, OS and architecture of the host its Pods' processes really run on.
fn node_info(machine: &Machine) -> Value {
    let id = |what: &str| {
        uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, format!("sim-node/{what}/{}", machine.id).as_bytes())
    };
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    json!({
        "machineID": id("machine").simple().to_string(),
        "systemUUID": id("system").to_string(),
        "bootID": id("boot").to_string(),
        "kernelVersion": host().kernel,
        "osImage": host().os_image,
        "containerRuntimeVersion": "sim://local-processes",
        "kubeletVersion": user_data::K3S_VERSION,
        "kubeProxyVersion": user_data::K3S_VERSION,
        "operatingSystem": std::env::consts::OS,
        "architecture": architecture,
    })
}
