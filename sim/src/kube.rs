//! The Kubernetes-compatible API of simulated control planes, at `/sim/kube/{control-plane VM
//! id}/`. The real kube client talks to it exactly as it talks to k3s: a bearer token (the one
//! the control plane's user-data installs), `/version`, nodes, and (empty, until workloads
//! exist) Jobs, Deployments and Services, with Kubernetes' own `Status` bodies for errors.
//!
//! A node is what a booted VM would register: the control plane itself, and every running VM
//! whose user-data joins this control plane's address with its join token. Where the VMs come
//! from is a [`Machines`]: the simulated cloud's own, or (in tests) another provider's instances
//! that cannot boot here (moto's, the fake Compute server's). There is one fake Kubernetes.

use std::sync::Arc;

use anycloud_workflows::user_data;
use async_trait::async_trait;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

/// A VM as the simulated Kubernetes sees it: what its kubelet, or the server on it, would know.
#[derive(Debug, Clone)]
pub struct Machine {
    /// The provider's id.
    pub id: String,
    /// Its name within its cluster (`cp`, `w0`, ...).
    pub name: String,
    /// It is the cluster's control plane.
    pub control_plane: bool,
    /// The provider's state, in its words.
    pub state: String,
    /// It runs now.
    pub running: bool,
    /// What it booted with.
    pub user_data: String,
    /// Private address.
    pub private_ip: Option<String>,
    /// Public address.
    pub public_ip: Option<String>,
    /// Its node reports Ready (it has run long enough, and is not told never to).
    pub node_ready: bool,
}

/// Where the simulated Kubernetes finds VMs.
#[async_trait]
pub trait Machines: Send + Sync + 'static {
    /// The VM with this provider id, whatever its state.
    async fn machine(&self, id: &str) -> Result<Option<Machine>, String>;
    /// Every VM that runs now.
    async fn running(&self) -> Result<Vec<Machine>, String>;
}

/// The routes, to merge into the router of the API that hosts them (they do their own
/// authentication, with each cluster's own token).
pub fn router(machines: Arc<dyn Machines>) -> Router {
    Router::new()
        .route("/sim/kube/{vm}/version", get(version))
        .route("/sim/kube/{vm}/api/v1/nodes", get(nodes))
        .route("/sim/kube/{vm}/api/v1/services", get(empty_list))
        .route("/sim/kube/{vm}/apis/batch/v1/jobs", get(empty_list))
        .route("/sim/kube/{vm}/apis/apps/v1/deployments", get(empty_list))
        .with_state(machines)
}

type Shared = State<Arc<dyn Machines>>;

/// A Kubernetes `Status` error body.
fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

/// The running control plane `vm`, when the caller holds its API token.
async fn control_plane(machines: &dyn Machines, vm: &str, headers: &HeaderMap) -> Result<Machine, Response> {
    let found = machines.machine(vm).await.map_err(|err| {
        status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", format!("simulated Kubernetes: {err}"))
    })?;
    let Some(cp) = found.filter(|cp| cp.control_plane) else {
        return Err(status(StatusCode::NOT_FOUND, "NotFound", format!("simulated cloud: no control plane VM {vm}")));
    };
    if !cp.running {
        return Err(status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            format!("simulated control plane {vm} is {}: its Kubernetes API does not answer yet", cp.state),
        ));
    }
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let expected = user_data::parse_control_plane_token(&cp.user_data);
    if presented.is_none() || presented != expected.as_deref() {
        return Err(status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized".into()));
    }
    Ok(cp)
}

async fn version(State(machines): Shared, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    if let Err(response) = control_plane(machines.as_ref(), &vm, &headers).await {
        return response;
    }
    axum::Json(json!({
        "major": "1", "minor": "34", "gitVersion": format!("{} (simulated)", user_data::K3S_VERSION),
        "gitCommit": "simulated", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "simulated", "compiler": "gc", "platform": "linux/amd64",
    }))
    .into_response()
}

async fn nodes(State(machines): Shared, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    let cp = match control_plane(machines.as_ref(), &vm, &headers).await {
        Ok(cp) => cp,
        Err(response) => return response,
    };
    let running = match machines.running().await {
        Ok(running) => running,
        Err(err) => {
            return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", format!("simulated Kubernetes: {err}"));
        }
    };
    let join_token = join_token_of(&cp.user_data);
    let addresses = [cp.private_ip.as_deref(), cp.public_ip.as_deref()];
    let mut items = vec![node(&cp)];
    for machine in running.iter().filter(|machine| !machine.control_plane) {
        let Some((address, token, _name)) = user_data::parse_worker(&machine.user_data) else { continue };
        if addresses.contains(&Some(address.as_str())) && Some(token) == join_token {
            items.push(node(machine));
        }
    }
    axum::Json(json!({
        "kind": "NodeList", "apiVersion": "v1", "metadata": { "resourceVersion": "1" }, "items": items,
    }))
    .into_response()
}

fn join_token_of(control_plane_user_data: &str) -> Option<String> {
    let start = control_plane_user_data.find("K3S_TOKEN='")? + "K3S_TOKEN='".len();
    let rest = &control_plane_user_data[start..];
    Some(rest[..rest.find('\'')?].to_owned())
}

/// A node as its kubelet would report it.
fn node(machine: &Machine) -> Value {
    let ready = machine.node_ready;
    let mut labels = json!({ "kubernetes.io/hostname": machine.name, "anycloud.dev/simulated": "true" });
    if machine.control_plane {
        labels["node-role.kubernetes.io/control-plane"] = json!("true");
    }
    let addresses: Vec<Value> = [("InternalIP", &machine.private_ip), ("ExternalIP", &machine.public_ip)]
        .into_iter()
        .filter_map(|(kind, address)| address.as_ref().map(|address| json!({ "type": kind, "address": address })))
        .collect();
    json!({
        "metadata": {
            "name": machine.name, "labels": labels, "annotations": { "anycloud.dev/provider-id": machine.id },
        },
        "spec": { "providerID": format!("sim://{}", machine.id) },
        "status": {
            "conditions": [{
                "type": "Ready",
                "status": if ready { "True" } else { "False" },
                "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
                "message": if ready { "kubelet is posting ready status (simulated)" } else { "node is not ready (simulated)" },
            }],
            "addresses": addresses,
        },
    })
}

async fn empty_list(State(machines): Shared, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    if let Err(response) = control_plane(machines.as_ref(), &vm, &headers).await {
        return response;
    }
    axum::Json(json!({ "kind": "List", "apiVersion": "v1", "metadata": { "resourceVersion": "1" }, "items": [] }))
        .into_response()
}
