//! Discovery, as kubectl and client-go read it: `/version`, `/api` (`APIVersions`), `/api/v1`
//! and `/apis/{group}/{version}` (`APIResourceList`), `/apis` (`APIGroupList`). The legacy JSON
//! only: client-go asks for aggregated discovery first and, answered with plain
//! `application/json`, reads the legacy documents instead. No OpenAPI: `get`, `describe`,
//! `logs`, `exec` and `delete` do not need it (404).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::{ALL, GROUPS, Resource};
use super::status::ApiError;
use super::{Shared, auth};
use anycloud_workflows::user_data;

fn answer(result: Result<Value, ApiError>) -> Response {
    match result {
        Ok(body) => axum::Json(body).into_response(),
        Err(err) => err.into_response(),
    }
}

/// `GET /version`.
pub(crate) async fn version(State(kube): Shared, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    answer(auth::control_plane(&kube, &vm, &headers).await.map(|_| {
        json!({
            "major": "1", "minor": "34", "gitVersion": format!("{} (simulated)", user_data::K3S_VERSION),
            "gitCommit": "simulated", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "simulated", "compiler": "gc", "platform": "linux/amd64",
        })
    }))
}

/// `GET /api`.
pub(crate) async fn api(State(kube): Shared, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    answer(auth::control_plane(&kube, &vm, &headers).await.map(|_| {
        json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443" }],
        })
    }))
}

/// `GET /api/v1`.
pub(crate) async fn core_v1(State(kube): Shared, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    answer(auth::control_plane(&kube, &vm, &headers).await.map(|_| resource_list("", "v1")))
}

/// `GET /apis`.
pub(crate) async fn groups(State(kube): Shared, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    answer(auth::control_plane(&kube, &vm, &headers).await.map(|_| {
        let groups: Vec<Value> = GROUPS
            .iter()
            .map(|(group, version)| {
                let version = json!({ "groupVersion": format!("{group}/{version}"), "version": version });
                json!({ "name": group, "versions": [version], "preferredVersion": version })
            })
            .collect();
        json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
    }))
}

/// `GET /apis/{group}/{version}`.
pub(crate) async fn group_version(
    State(kube): Shared,
    Path((vm, group, version)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        auth::control_plane(&kube, &vm, &headers).await?;
        if !GROUPS.contains(&(group.as_str(), version.as_str())) {
            return Err(not_found_error());
        }
        Ok(resource_list(&group, &version))
    };
    answer(result.await)
}

fn resource_list(group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for resource in ALL.iter().filter(|r| r.group == group && r.version == version) {
        resources.push(entry(resource));
        let subresources: &[(&str, &str, &[&str])] = match resource.plural {
            "pods" => &[("log", "Pod", &["get"]), ("exec", "PodExecOptions", &["create", "get"])],
            _ => &[],
        };
        for (name, kind, verbs) in subresources {
            resources.push(json!({
                "name": format!("{}/{name}", resource.plural), "singularName": "", "namespaced": resource.namespaced,
                "kind": kind, "verbs": verbs,
            }));
        }
    }
    let group_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources })
}

fn entry(resource: &Resource) -> Value {
    let mut entry = json!({
        "name": resource.plural, "singularName": resource.singular, "namespaced": resource.namespaced,
        "kind": resource.kind, "verbs": resource.verbs(),
    });
    if !resource.short_names.is_empty() {
        entry["shortNames"] = json!(resource.short_names);
    }
    if !resource.categories.is_empty() {
        entry["categories"] = json!(resource.categories);
    }
    entry
}

fn not_found_error() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource")
}

/// Any other path of a cluster's API (OpenAPI among them): 404, to a caller with the token.
pub(crate) async fn not_found(
    State(kube): Shared,
    Path((vm, _rest)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    match auth::control_plane(&kube, &vm, &headers).await {
        Ok(_) => not_found_error().into_response(),
        Err(err) => err.into_response(),
    }
}
