//! The Kubernetes-compatible API of a simulated control plane, served by the API that "hosts"
//! the simulated cloud at `/sim/kube/{control-plane VM id}/`. The real kube client talks to it
//! exactly as it talks to k3s: bearer token from the control plane's user-data, `/version`,
//! nodes, and (empty, until workloads exist) Jobs, Deployments and Services.
//!
//! A node is what a booted VM would register: the control plane itself, and every running
//! capacity VM whose user-data joins this control plane's address with its join token.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::sim::{SimCloud, SimVm};
use crate::cloud::{NAME_TAG, ROLE_TAG};
use crate::user_data;

/// The routes, to merge into the hosting API's router (they do their own authentication).
pub fn router(sim: SimCloud) -> Router {
    Router::new()
        .route("/sim/kube/{vm}/version", get(version))
        .route("/sim/kube/{vm}/api/v1/nodes", get(nodes))
        .route("/sim/kube/{vm}/api/v1/services", get(empty_list))
        .route("/sim/kube/{vm}/apis/batch/v1/jobs", get(empty_list))
        .route("/sim/kube/{vm}/apis/apps/v1/deployments", get(empty_list))
        .with_state(sim)
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

/// The running control plane `vm`, when the caller holds its API token.
async fn control_plane(sim: &SimCloud, vm: &str, headers: &HeaderMap) -> Result<SimVm, Response> {
    let found = sim.vm(vm).await.map_err(|err| {
        status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", format!("simulated cloud state: {err}"))
    })?;
    let Some(cp) = found.filter(|cp| cp.tags.get(ROLE_TAG).map(String::as_str) == Some("control-plane")) else {
        return Err(status(StatusCode::NOT_FOUND, "NotFound", format!("simulated cloud: no control plane VM {vm}")));
    };
    if cp.state != "running" {
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

async fn version(State(sim): State<SimCloud>, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    if let Err(response) = control_plane(&sim, &vm, &headers).await {
        return response;
    }
    axum::Json(json!({
        "major": "1", "minor": "34", "gitVersion": format!("{} (simulated)", user_data::K3S_VERSION),
        "gitCommit": "simulated", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "simulated", "compiler": "gc", "platform": "linux/amd64",
    }))
    .into_response()
}

async fn nodes(State(sim): State<SimCloud>, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    let cp = match control_plane(&sim, &vm, &headers).await {
        Ok(cp) => cp,
        Err(response) => return response,
    };
    let live = match sim.live_vms().await {
        Ok(live) => live,
        Err(err) => {
            return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", format!("simulated cloud state: {err}"));
        }
    };
    let join_token = join_token_of(&cp.user_data);
    let mut items = vec![node(&cp, cp.tags.get(NAME_TAG).map_or("cp", String::as_str), true)];
    for vm in live.iter().filter(|vm| vm.account == cp.account && vm.state == "running") {
        let Some((address, token, name)) = user_data::parse_worker(&vm.user_data) else { continue };
        if (address == cp.private_ip || address == cp.public_ip) && Some(token) == join_token {
            items.push(node(vm, &name, false));
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

/// A node as its kubelet would report it: Ready `boot_ms` after the VM runs.
fn node(vm: &SimVm, name: &str, control_plane: bool) -> Value {
    let ready = !vm.never_ready && (control_plane || vm.running_for_ms >= vm.boot_ms);
    let mut labels = json!({ "kubernetes.io/hostname": name, "anycloud.dev/simulated": "true" });
    if control_plane {
        labels["node-role.kubernetes.io/control-plane"] = json!("true");
    }
    json!({
        "metadata": { "name": name, "labels": labels, "annotations": { "anycloud.dev/provider-id": vm.id } },
        "spec": { "providerID": format!("sim://{}", vm.id) },
        "status": {
            "conditions": [{
                "type": "Ready",
                "status": if ready { "True" } else { "False" },
                "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
                "message": if ready { "kubelet is posting ready status (simulated)" } else { "node is not ready (simulated)" },
            }],
            "addresses": [
                { "type": "InternalIP", "address": vm.private_ip },
                { "type": "ExternalIP", "address": vm.public_ip },
            ],
        },
    })
}

async fn empty_list(State(sim): State<SimCloud>, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    if let Err(response) = control_plane(&sim, &vm, &headers).await {
        return response;
    }
    axum::Json(json!({ "kind": "List", "apiVersion": "v1", "metadata": { "resourceVersion": "1" }, "items": [] }))
        .into_response()
}
