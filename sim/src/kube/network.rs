//! Pod networking on one host, as far as it can be simulated without namespaces:
//!
//! - Each Pod gets its own address in `127.42.0.0/16` (`status.podIP`), derived from its uid:
//!   a loopback address, so it is reachable from the host and from every Pod's process.
//! - Most apps bind `0.0.0.0`, so two replicas cannot share a port on one host. The kubelet
//!   therefore gives each `containerPort` a free host port when the Pod first starts, records the
//!   mapping in the Pod's annotation `sim.anycloud/host-ports` (`{"container": {"8080":
//!   31234}}`), and sets the container's `PORT` to the host port of its first declared port
//!   (overriding the template's value: apps listen on `$PORT`). Probes, Endpoints and Services
//!   use the host port: what a real cluster calls `podIP:containerPort` is `podIP:hostPort` here.
//!   This is the simulation's main gap: an app that ignores `$PORT` and listens on its declared
//!   port works for one replica per host only.
//! - The Services of the Pod's namespace at its first start give it `{NAME}_SERVICE_HOST`,
//!   `{NAME}_SERVICE_PORT`, `{NAME}_SERVICE_PORT_{PORT NAME}` and the Docker-link variables
//!   (`{NAME}_PORT=tcp://{ip}:{port}`, ...), as the kubelet does; they are recorded in the
//!   annotation `sim.anycloud/service-env` so that restarts and `exec` get the same ones.
//!
//! Both annotations are written to the store before any container starts, so an API that dies
//! in between finds the same ports again.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::resources::{PODS, SERVICES};
use super::status::ApiError;
use super::{Kube, defaults};

/// The annotation that maps each container's declared ports to their host ports.
pub(crate) const HOST_PORTS: &str = "sim.anycloud/host-ports";
/// The annotation that holds the Service variables a Pod's containers get.
pub(crate) const SERVICE_ENV: &str = "sim.anycloud/service-env";

/// The Pod's address in `127.42.0.0/16`, stable for its uid.
pub(crate) fn pod_ip(uid: &str) -> String {
    let bytes = uuid::Uuid::parse_str(uid).map(|u| *u.as_bytes()).unwrap_or_default();
    format!("127.42.{}.{}", bytes[0], bytes[1].clamp(1, 254))
}

/// Whether the Pod still needs its host ports and Service variables.
pub(crate) fn needs_setup(pod: &Value) -> bool {
    pod["metadata"]["annotations"][HOST_PORTS].as_str().is_none()
}

/// Gives the Pod its host ports and Service variables, written to the store; `None` if the Pod
/// moved on meanwhile (the next pass tries again).
pub(crate) async fn setup(kube: &Kube, cluster: &str, pod: &Value) -> Result<Option<Value>, ApiError> {
    let mut ports: Map<String, Value> = Map::new();
    for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let mut mapped = Map::new();
        for port in container["ports"].as_array().into_iter().flatten() {
            if let Some(number) = port["containerPort"].as_i64() {
                mapped.insert(number.to_string(), json!(free_port()?));
            }
        }
        ports.insert(container["name"].as_str().unwrap_or_default().to_owned(), Value::Object(mapped));
    }
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let services = kube.store.list(cluster, &SERVICES, Some(namespace)).await?;
    let env = service_env(&services);
    let mut next = pod.clone();
    let annotations = defaults::child(defaults::child(defaults::root(&mut next), "metadata"), "annotations");
    annotations.insert(HOST_PORTS.into(), json!(Value::Object(ports).to_string()));
    annotations.insert(SERVICE_ENV.into(), json!(json!(env).to_string()));
    Ok(kube.store.update(cluster, &PODS, next).await?)
}

/// A port that is free now on every address.
fn free_port() -> Result<u16, ApiError> {
    std::net::TcpListener::bind(("0.0.0.0", 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|err| ApiError::internal(format!("finding a free host port for a Pod: {err}")))
}

/// The host port of a container's port, given as its number or its name.
pub(crate) fn host_port(pod: &Value, container: &Value, port: &Value) -> Option<u16> {
    let number = match port {
        Value::String(name) => {
            container["ports"].as_array()?.iter().find(|p| p["name"].as_str() == Some(name.as_str()))?["containerPort"]
                .as_i64()?
        }
        other => other.as_i64()?,
    };
    let mapped: Value = serde_json::from_str(pod["metadata"]["annotations"][HOST_PORTS].as_str()?).ok()?;
    let name = container["name"].as_str()?;
    mapped[name][number.to_string()].as_u64().and_then(|port| u16::try_from(port).ok())
}

/// The host port of the first port a container declares.
pub(crate) fn first_host_port(pod: &Value, container: &Value) -> Option<u16> {
    let first = container["ports"].as_array()?.first()?;
    host_port(pod, container, &first["containerPort"])
}

/// What the network adds to a container's environment: `PORT` and the Service variables.
pub(crate) fn env(pod: &Value, container: &Value) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = pod["metadata"]["annotations"][SERVICE_ENV]
        .as_str()
        .and_then(|text| serde_json::from_str::<BTreeMap<String, String>>(text).ok())
        .unwrap_or_default()
        .into_iter()
        .collect();
    if let Some(port) = first_host_port(pod, container) {
        env.push(("PORT".to_owned(), port.to_string()));
    }
    env
}

/// The variables the kubelet gives for these Services (those with a cluster IP).
pub(crate) fn service_env(services: &[Value]) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for service in services {
        let Some(ip) = service["spec"]["clusterIP"].as_str().filter(|ip| !ip.is_empty() && *ip != "None") else {
            continue;
        };
        if !service["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        let prefix = service["metadata"]["name"].as_str().unwrap_or_default().to_uppercase().replace('-', "_");
        let ports = service["spec"]["ports"].as_array().cloned().unwrap_or_default();
        env.insert(format!("{prefix}_SERVICE_HOST"), ip.to_owned());
        for (i, port) in ports.iter().enumerate() {
            let number = port["port"].as_i64().unwrap_or_default();
            let protocol = port["protocol"].as_str().unwrap_or("TCP");
            if i == 0 {
                env.insert(format!("{prefix}_SERVICE_PORT"), number.to_string());
                env.insert(format!("{prefix}_PORT"), format!("{}://{ip}:{number}", protocol.to_lowercase()));
            }
            if let Some(name) = port["name"].as_str().filter(|name| !name.is_empty()) {
                env.insert(
                    format!("{prefix}_SERVICE_PORT_{}", name.to_uppercase().replace('-', "_")),
                    number.to_string(),
                );
            }
            let link = format!("{prefix}_PORT_{number}_{protocol}");
            env.insert(link.clone(), format!("{}://{ip}:{number}", protocol.to_lowercase()));
            env.insert(format!("{link}_PROTO"), protocol.to_lowercase());
            env.insert(format!("{link}_PORT"), number.to_string());
            env.insert(format!("{link}_ADDR"), ip.to_owned());
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_give_kubernetes_variables() {
        let service = json!({
            "metadata": { "name": "web-api" },
            "spec": { "clusterIP": "127.43.0.9", "ports": [{ "name": "http", "port": 80, "protocol": "TCP" }] },
        });
        let env = service_env(&[service]);
        assert_eq!(env["WEB_API_SERVICE_HOST"], "127.43.0.9");
        assert_eq!(env["WEB_API_SERVICE_PORT"], "80");
        assert_eq!(env["WEB_API_SERVICE_PORT_HTTP"], "80");
        assert_eq!(env["WEB_API_PORT"], "tcp://127.43.0.9:80");
        assert_eq!(env["WEB_API_PORT_80_TCP_ADDR"], "127.43.0.9");
    }

    #[test]
    fn a_named_port_finds_its_host_port() {
        let pod = json!({ "metadata": { "annotations": { HOST_PORTS: r#"{"main":{"8080":31000}}"# } } });
        let container = json!({ "name": "main", "ports": [{ "name": "http", "containerPort": 8080 }] });
        assert_eq!(host_port(&pod, &container, &json!("http")), Some(31000));
        assert_eq!(host_port(&pod, &container, &json!(8080)), Some(31000));
        assert_eq!(first_host_port(&pod, &container), Some(31000));
        assert_eq!(host_port(&pod, &container, &json!(9090)), None);
    }
}
