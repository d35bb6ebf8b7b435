//! Discovery, as kubectl and client-go read it: `/version`, `/api` (`APIVersions`), `/api/v1`
//! and `/apis/{group}/{version}` (`APIResourceList`), `/apis` (`APIGroupList`), each with or
//! without a trailing slash. A client that asks for aggregated discovery (kubectl 1.26 and
//! later: `Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList, ...`)
//! gets `/api` and `/apis` as one `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList` each, with
//! that media type, as the apiserver answers it; others get the legacy documents. The
//! OpenAPI documents are [`super::openapi`]'s.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::openapi::has_status;
use super::resources::{ALL, GROUPS, Resource};
use super::status::ApiError;
use super::{Shared, auth};
use anycloud_workflows::cluster::user_data;

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

/// The media type of aggregated discovery, when the client asks for it first.
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the client prefers aggregated discovery (v2) to the legacy documents.
fn aggregated_wanted(headers: &HeaderMap) -> bool {
    let accept = headers.get(axum::http::header::ACCEPT).and_then(|accept| accept.to_str().ok()).unwrap_or_default();
    let first = accept.split(',').next().unwrap_or_default();
    let parameters: Vec<&str> = first.split(';').map(str::trim).collect();
    parameters.first() == Some(&"application/json")
        && ["g=apidiscovery.k8s.io", "v=v2", "as=APIGroupDiscoveryList"]
            .iter()
            .all(|wanted| parameters.contains(wanted))
}

/// `/api` or `/apis` as an `APIGroupDiscoveryList`.
fn aggregated(groups: &[(&str, &str)]) -> Response {
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, version)| {
            let resources: Vec<Value> = ALL
                .iter()
                .filter(|r| r.group == *group && r.version == *version)
                .map(|resource| {
                    let kind = |kind: &str| json!({ "group": group, "version": version, "kind": kind });
                    let subresources: Vec<Value> = subresources(resource)
                        .iter()
                        .map(|(name, sub_kind, verbs)| {
                            json!({ "subresource": name, "responseKind": kind(sub_kind), "verbs": verbs })
                        })
                        .collect();
                    let mut entry = json!({
                        "resource": resource.plural, "responseKind": kind(resource.kind),
                        "scope": if resource.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": resource.singular, "verbs": resource.verbs(),
                    });
                    if !resource.short_names.is_empty() {
                        entry["shortNames"] = json!(resource.short_names);
                    }
                    if !resource.categories.is_empty() {
                        entry["categories"] = json!(resource.categories);
                    }
                    if !subresources.is_empty() {
                        entry["subresources"] = json!(subresources);
                    }
                    entry
                })
                .collect();
            json!({
                "metadata": { "name": group, "creationTimestamp": null },
                "versions": [{ "version": version, "resources": resources, "freshness": "Current" }],
            })
        })
        .collect();
    let body = json!({
        "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items,
    });
    let mut response = axum::Json(body).into_response();
    response.headers_mut().insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static(AGGREGATED));
    response
}

/// `GET /api`.
pub(crate) async fn api(State(kube): Shared, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    if let Err(err) = auth::control_plane(&kube, &vm, &headers).await {
        return err.into_response();
    }
    if aggregated_wanted(&headers) {
        return aggregated(&[("", "v1")]);
    }
    answer(Ok({
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
    if let Err(err) = auth::control_plane(&kube, &vm, &headers).await {
        return err.into_response();
    }
    if aggregated_wanted(&headers) {
        return aggregated(&GROUPS);
    }
    answer(Ok({
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
        for (name, kind, verbs) in subresources(resource) {
            resources.push(json!({
                "name": format!("{}/{name}", resource.plural), "singularName": "", "namespaced": resource.namespaced,
                "kind": kind, "verbs": verbs,
            }));
        }
    }
    let group_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources })
}

/// A resource's subresources: (name, kind, verbs).
fn subresources(resource: &Resource) -> Vec<(&'static str, &'static str, &'static [&'static str])> {
    let mut all: Vec<(&'static str, &'static str, &'static [&'static str])> = Vec::new();
    if resource.plural == "pods" {
        all.push(("log", "Pod", &["get"]));
        all.push(("exec", "PodExecOptions", &["create", "get"]));
    }
    if has_status(resource) {
        all.push(("status", resource.kind, &["get", "patch", "update"]));
    }
    all
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

/// Any other path of a cluster's API (its root among them): 404, to a caller with the token.
pub(crate) async fn not_found(
    State(kube): Shared,
    Path(params): Path<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let vm = params.get("vm").map_or("", String::as_str);
    match auth::control_plane(&kube, vm, &headers).await {
        Ok(_) => not_found_error().into_response(),
        Err(err) => err.into_response(),
    }
}

/// A known path with a method it does not take: 405, as the apiserver answers it (only to a caller
/// with the token: [`auth::token_first`] runs first).
pub(crate) async fn method_not_allowed() -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
    )
    .into_response()
}
