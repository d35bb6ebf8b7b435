//! The Endpoints controller, one pass over a cluster's Services: each Service with a selector
//! gets an `Endpoints` object of the same name listing the Pods its selector matches (active,
//! scheduled, in its namespace): the Ready ones under `addresses`, the others under
//! `notReadyAddresses`, each with its port (a Service's `targetPort`, a number or a container
//! port's name, resolved to the Pod's host port: see [`super::network`]). Pods with different
//! host ports fall into different subsets, as the Endpoints API groups them. An Endpoints
//! object whose Service is gone goes. What it finds is also what the cluster's kube-proxy ([`super::proxy`]) routes to.
//! EndpointSlices are not simulated.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};

use serde_json::{Value, json};

use super::resources::ENDPOINTS;
use super::status::ApiError;
use super::{Kube, defaults, network, replicasets};

/// Writes the cluster's Endpoints from its `services` and its Pods that have not ended (`pods`),
/// and returns what each `clusterIP:port` routes to.
pub(crate) async fn sync(
    kube: &Kube,
    cluster: &str,
    services: &[Value],
    pods: &[Value],
) -> Result<HashMap<SocketAddr, Vec<SocketAddr>>, ApiError> {
    let mut routes = HashMap::new();
    let existing = kube.store.list(cluster, &ENDPOINTS, None).await?;
    let key = |object: &Value| {
        (
            object["metadata"]["namespace"].as_str().unwrap_or_default().to_owned(),
            object["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
        )
    };
    let live: Vec<&Value> = services.iter().filter(|s| s["metadata"]["deletionTimestamp"].is_null()).collect();
    for endpoints in &existing {
        if !live.iter().any(|service| key(service) == key(endpoints)) {
            kube.store.remove(cluster, &ENDPOINTS, endpoints).await?;
        }
    }
    for service in live {
        let Some(selector) = service["spec"]["selector"].as_object().filter(|s| !s.is_empty()) else { continue };
        let namespace = service["metadata"]["namespace"].as_str().unwrap_or_default();
        let selected = pods.iter().filter(|pod| {
            pod["metadata"]["namespace"] == namespace
                && replicasets::active(pod)
                && !pod["spec"]["nodeName"].is_null()
                && !network::needs_setup(pod)
                && selector.iter().all(|(k, v)| pod["metadata"]["labels"][k] == *v)
        });
        let service_ports = service["spec"]["ports"].as_array().cloned().unwrap_or_default();
        // Subsets by their port list: (ready addresses, not ready addresses).
        let mut subsets: BTreeMap<String, (Value, Vec<Value>, Vec<Value>)> = BTreeMap::new();
        for pod in selected {
            let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
            let ip = network::pod_ip(uid);
            let ready = replicasets::ready(pod);
            let mut ports = Vec::new();
            for port in &service_ports {
                let Some(target) = target_port(pod, &port["targetPort"]) else { continue };
                ports.push(json!({ "name": port["name"].as_str().unwrap_or_default(), "port": target, "protocol": port["protocol"] }));
                if let (true, Some(service_port), Ok(address)) = (
                    ready,
                    port["port"].as_u64(),
                    service["spec"]["clusterIP"].as_str().unwrap_or_default().parse::<IpAddr>(),
                ) && let (Ok(service_port), Ok(pod_ip)) = (u16::try_from(service_port), ip.parse::<IpAddr>())
                {
                    let route: &mut Vec<SocketAddr> = routes.entry(SocketAddr::new(address, service_port)).or_default();
                    route.push(SocketAddr::new(pod_ip, target));
                }
            }
            let address = json!({
                "ip": ip, "nodeName": pod["spec"]["nodeName"],
                "targetRef": { "kind": "Pod", "name": pod["metadata"]["name"], "namespace": namespace, "uid": uid },
            });
            let ports = json!(ports);
            let entry = subsets.entry(ports.to_string()).or_insert_with(|| (ports, Vec::new(), Vec::new()));
            if ready { entry.1.push(address) } else { entry.2.push(address) }
        }
        // A Service with a cluster IP is listened on even without endpoints (connections reset).
        if let Ok(address) = service["spec"]["clusterIP"].as_str().unwrap_or_default().parse::<IpAddr>() {
            for port in service_ports.iter().filter_map(|p| p["port"].as_u64().and_then(|p| u16::try_from(p).ok())) {
                routes.entry(SocketAddr::new(address, port)).or_default();
            }
        }
        let subsets: Vec<Value> = subsets
            .into_values()
            .map(|(ports, ready, not_ready)| {
                let mut subset = json!({ "ports": ports });
                if !ready.is_empty() {
                    subset["addresses"] = json!(ready);
                }
                if !not_ready.is_empty() {
                    subset["notReadyAddresses"] = json!(not_ready);
                }
                subset
            })
            .collect();
        write(kube, cluster, service, &existing, subsets).await?;
    }
    Ok(routes)
}

/// The host port a Service's `targetPort` reaches on a Pod: the named or numbered port of one of
/// its containers, else the number itself.
fn target_port(pod: &Value, target: &Value) -> Option<u16> {
    for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
        if let Some(port) = network::host_port(pod, container, target) {
            return Some(port);
        }
    }
    target.as_u64().and_then(|port| u16::try_from(port).ok())
}

/// Creates or updates the Service's Endpoints if its subsets changed.
async fn write(
    kube: &Kube,
    cluster: &str,
    service: &Value,
    existing: &[Value],
    subsets: Vec<Value>,
) -> Result<(), ApiError> {
    let name = &service["metadata"]["name"];
    let namespace = service["metadata"]["namespace"].as_str().unwrap_or_default();
    let current = existing.iter().find(|e| e["metadata"]["name"] == *name && e["metadata"]["namespace"] == namespace);
    let subsets = json!(subsets);
    match current {
        Some(current) if current["subsets"] == subsets => {}
        Some(current) => {
            let mut next = current.clone();
            next["subsets"] = subsets;
            kube.store.update(cluster, &ENDPOINTS, next).await?;
        }
        None => {
            let mut endpoints = json!({ "metadata": { "name": name }, "subsets": subsets });
            if service["metadata"]["labels"].is_object() {
                endpoints["metadata"]["labels"] = service["metadata"]["labels"].clone();
            }
            defaults::on_create(&ENDPOINTS, namespace, &mut endpoints);
            kube.store.create(cluster, &ENDPOINTS, endpoints).await?;
        }
    }
    Ok(())
}
