//! The OpenAPI documents, as the apiserver publishes them and kubectl reads them:
//!
//! - `/openapi/v3`: the index of group-versions (`api/v1`, `apis/batch/v1`, `apis/apps/v1`),
//!   each with the `serverRelativeURL` of its document (`?hash=` of its content, as the
//!   apiserver names it; the cluster's path prefix included, since the client resolves it
//!   against the server's root).
//! - `/openapi/v3/{api/v1 | apis/GROUP/VERSION}`: that group-version's paths (one operation per
//!   verb the simulation serves, with its `x-kubernetes-action`, `x-kubernetes-group-version-kind`
//!   and query parameters: kubectl looks for `fieldValidation` on a kind's `PATCH` to leave
//!   validation to the server, and for `application/strategic-merge-patch+json` among its
//!   request bodies to compute an apply patch) and its schemas ([`super::schemas`]).
//! - `/openapi/v2`: the same as one Swagger 2.0 document, in JSON. The apiserver also serves it
//!   as protobuf (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, what client-go's
//!   `OpenAPISchema` asks for); the simulation does not encode protobuf and answers such a
//!   request 406 `NotAcceptable`, as the apiserver answers a media type it does not serve.
//!   kubectl 1.27 and later read v3 first and need v2 only from a server without v3.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::resources::{ALL, GROUPS, Resource};
use super::status::ApiError;
use super::{Shared, auth, negotiation, schemas};

/// The group-versions served, as the v3 index names them (`api/v1`, `apis/batch/v1`).
fn group_versions() -> Vec<(String, &'static str, &'static str)> {
    let mut all = vec![("api/v1".to_owned(), "", "v1")];
    all.extend(GROUPS.iter().map(|(group, version)| (format!("apis/{group}/{version}"), *group, *version)));
    all
}

/// `GET /openapi/v3`.
pub(crate) async fn v3_index(State(kube): Shared, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    if let Err(err) = auth::control_plane(&kube, &vm, &headers).await {
        return err.into_response();
    }
    let mut paths = Map::new();
    for (name, group, version) in group_versions() {
        let hash = hash(&v3_document(group, version));
        let url = format!("/sim/kube/{vm}/openapi/v3/{name}?hash={hash}");
        paths.insert(name, json!({ "serverRelativeURL": url }));
    }
    json_document(&headers, &json!({ "paths": paths }))
}

/// `GET /openapi/v3/{api/v1 | apis/GROUP/VERSION}`.
pub(crate) async fn v3_group_version(
    State(kube): Shared,
    Path((vm, rest)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(err) = auth::control_plane(&kube, &vm, &headers).await {
        return err.into_response();
    }
    let found = group_versions().into_iter().find(|(name, _, _)| *name == rest);
    let Some((_, group, version)) = found else {
        return ApiError::new(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource")
            .into_response();
    };
    let mut response = json_document(&headers, &v3_document(group, version));
    // A document asked for by its hash never changes, as the apiserver tells caches.
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, immutable"));
    response
}

/// `GET /openapi/v2`.
pub(crate) async fn v2(State(kube): Shared, Path(vm): Path<String>, headers: HeaderMap) -> Response {
    if let Err(err) = auth::control_plane(&kube, &vm, &headers).await {
        return err.into_response();
    }
    let mut paths = Map::new();
    for (_, group, version) in group_versions() {
        for resource in ALL.iter().filter(|r| r.group == group && r.version == version) {
            for (path, operations) in endpoints(resource) {
                let operations: Map<String, Value> =
                    operations.into_iter().map(|operation| (operation.method.to_owned(), operation.v2())).collect();
                paths.insert(path, Value::Object(operations));
            }
        }
    }
    let document = json!({
        "swagger": "2.0",
        "info": { "title": "Kubernetes", "version": "v1.34.0" },
        "paths": paths,
        "definitions": schemas::v2(),
        "securityDefinitions": { "BearerToken": { "type": "apiKey", "name": "authorization", "in": "header" } },
        "security": [{ "BearerToken": [] }],
    });
    json_document(&headers, &document)
}

/// The document as JSON, or 406 to a client that accepts none of it (protobuf only).
fn json_document(headers: &HeaderMap, document: &Value) -> Response {
    if !negotiation::accepts_json(headers) {
        return negotiation::not_acceptable().into_response();
    }
    axum::Json(document).into_response()
}

/// A stable name of a document's content, as the `?hash=` of its URL.
fn hash(document: &Value) -> String {
    let bytes = serde_json::to_vec(document).unwrap_or_default();
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, &bytes).simple().to_string().to_uppercase()
}

fn v3_document(group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    for resource in ALL.iter().filter(|r| r.group == group && r.version == version) {
        for (path, operations) in endpoints(resource) {
            let operations: Map<String, Value> =
                operations.into_iter().map(|operation| (operation.method.to_owned(), operation.v3())).collect();
            paths.insert(path, Value::Object(operations));
        }
    }
    let title = if group.is_empty() {
        format!("Kubernetes /api/{version}")
    } else {
        format!("Kubernetes /apis/{group}/{version}")
    };
    json!({
        "openapi": "3.0.0",
        "info": { "title": title, "version": "v1.34.0" },
        "paths": paths,
        "components": {
            "schemas": schemas::v3(),
            "securitySchemes": { "BearerToken": { "type": "apiKey", "name": "authorization", "in": "header" } },
        },
        "security": [{ "BearerToken": [] }],
    })
}

/// One operation on one path.
struct Operation {
    method: &'static str,
    action: &'static str,
    id: String,
    kind: String,
    resource: &'static Resource,
    /// The schema of its request body, if it takes one.
    body: Option<String>,
    /// The schema of its answer.
    answer: String,
    query: &'static [&'static str],
    path_parameters: Vec<&'static str>,
}

const LIST_QUERY: &[&str] = &[
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
    "pretty",
];
const WRITE_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "pretty"];
const PATCH_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force", "pretty"];
const DELETE_QUERY: &[&str] = &["dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy", "pretty"];
const READ_QUERY: &[&str] = &["pretty"];

/// The request bodies a PATCH takes, as the apiserver lists them.
const PATCH_TYPES: [&str; 4] = [
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

/// Whether the resource has a `/status` subresource in the simulation.
pub(crate) fn has_status(resource: &Resource) -> bool {
    matches!(resource.plural, "pods" | "services" | "jobs" | "deployments" | "replicasets" | "namespaces")
}

/// Every path of a resource and its operations, as the simulation serves them.
fn endpoints(resource: &'static Resource) -> Vec<(String, Vec<Operation>)> {
    let prefix = if resource.group.is_empty() {
        format!("/api/{}", resource.version)
    } else {
        format!("/apis/{}/{}", resource.group, resource.version)
    };
    let id_group: String = if resource.group.is_empty() { "Core".into() } else { capitalized(resource.group) };
    let id_version = capitalized(resource.version);
    let scoped = if resource.namespaced { "Namespaced" } else { "" };
    let kind = resource.kind;
    let list_kind = format!("{kind}List");
    let definition = schemas::definition(resource);
    let writable = resource.verbs().contains(&"create");
    let operation =
        |method: &'static str, action: &'static str, id: String, body: bool, answer: &str, query| Operation {
            method,
            action,
            id,
            kind: kind.to_owned(),
            resource,
            body: body.then(|| definition.clone()),
            answer: answer.to_owned(),
            query,
            path_parameters: Vec::new(),
        };
    let (collection, parameters) = if resource.namespaced {
        (format!("{prefix}/namespaces/{{namespace}}/{}", resource.plural), vec!["namespace"])
    } else {
        (format!("{prefix}/{}", resource.plural), vec![])
    };
    let with = |mut operations: Vec<Operation>, names: &[&'static str]| {
        for operation in &mut operations {
            operation.path_parameters = names.to_vec();
        }
        operations
    };
    let status_definition = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
    let mut all = Vec::new();
    let mut listing = vec![operation(
        "get",
        "list",
        format!("list{id_group}{id_version}{scoped}{kind}"),
        false,
        &format!("{definition}List"),
        LIST_QUERY,
    )];
    listing[0].kind = list_kind.clone();
    if writable {
        listing.push(operation(
            "post",
            "post",
            format!("create{id_group}{id_version}{scoped}{kind}"),
            true,
            &definition,
            WRITE_QUERY,
        ));
    }
    all.push((collection.clone(), with(listing, &parameters)));
    let mut one = vec![operation(
        "get",
        "get",
        format!("read{id_group}{id_version}{scoped}{kind}"),
        false,
        &definition,
        READ_QUERY,
    )];
    if writable {
        one.push(operation(
            "put",
            "put",
            format!("replace{id_group}{id_version}{scoped}{kind}"),
            true,
            &definition,
            WRITE_QUERY,
        ));
        one.push(operation(
            "patch",
            "patch",
            format!("patch{id_group}{id_version}{scoped}{kind}"),
            true,
            &definition,
            PATCH_QUERY,
        ));
        one.push(operation(
            "delete",
            "delete",
            format!("delete{id_group}{id_version}{scoped}{kind}"),
            false,
            status_definition,
            DELETE_QUERY,
        ));
    }
    let named = [parameters.as_slice(), &["name"]].concat();
    all.push((format!("{collection}/{{name}}"), with(one, &named)));
    if has_status(resource) {
        let status = vec![
            operation(
                "get",
                "get",
                format!("read{id_group}{id_version}{scoped}{kind}Status"),
                false,
                &definition,
                READ_QUERY,
            ),
            operation(
                "put",
                "put",
                format!("replace{id_group}{id_version}{scoped}{kind}Status"),
                true,
                &definition,
                WRITE_QUERY,
            ),
            operation(
                "patch",
                "patch",
                format!("patch{id_group}{id_version}{scoped}{kind}Status"),
                true,
                &definition,
                PATCH_QUERY,
            ),
        ];
        all.push((format!("{collection}/{{name}}/status"), with(status, &named)));
    }
    if resource.namespaced {
        let mut across = operation(
            "get",
            "list",
            format!("list{id_group}{id_version}{kind}ForAllNamespaces"),
            false,
            &format!("{definition}List"),
            LIST_QUERY,
        );
        across.kind = list_kind;
        all.push((format!("{prefix}/{}", resource.plural), vec![across]));
    }
    all
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

impl Operation {
    fn parameters(&self, v3: bool) -> Vec<Value> {
        let string = |name: &str, place: &str| {
            let required = place == "path";
            if v3 {
                json!({ "name": name, "in": place, "required": required, "schema": { "type": "string", "uniqueItems": true } })
            } else {
                json!({ "name": name, "in": place, "required": required, "type": "string", "uniqueItems": true })
            }
        };
        let mut parameters: Vec<Value> = self.path_parameters.iter().map(|name| string(name, "path")).collect();
        parameters.extend(self.query.iter().map(|name| string(name, "query")));
        if !v3 && let Some(body) = &self.body {
            let schema = if self.method == "patch" {
                json!({ "$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch" })
            } else {
                json!({ "$ref": format!("#/definitions/{body}") })
            };
            parameters.push(json!({ "name": "body", "in": "body", "required": true, "schema": schema }));
        }
        parameters
    }

    fn extensions(&self, operation: &mut Value) {
        operation["x-kubernetes-action"] = json!(self.action);
        operation["x-kubernetes-group-version-kind"] = schemas::group_version_kind(self.resource, &self.kind);
    }

    fn v3(&self) -> Value {
        let answer = json!({ "schema": { "$ref": format!("#/components/schemas/{}", self.answer) } });
        let mut operation = json!({
            "operationId": self.id,
            "tags": [self.resource.api_version().replace('/', "_")],
            "parameters": self.parameters(true),
            "responses": {
                "200": { "description": "OK", "content": { "application/json": answer.clone(), "application/yaml": answer } },
                "401": { "description": "Unauthorized" },
            },
        });
        if let Some(body) = &self.body {
            let content: Map<String, Value> = if self.method == "patch" {
                let schema =
                    json!({ "schema": { "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch" } });
                PATCH_TYPES.iter().map(|kind| ((*kind).to_owned(), schema.clone())).collect()
            } else {
                let schema = json!({ "schema": { "$ref": format!("#/components/schemas/{body}") } });
                [("*/*".to_owned(), schema)].into_iter().collect()
            };
            operation["requestBody"] = json!({ "required": true, "content": content });
        }
        self.extensions(&mut operation);
        operation
    }

    fn v2(&self) -> Value {
        let consumes: Vec<&str> = if self.method == "patch" { PATCH_TYPES.to_vec() } else { vec!["*/*"] };
        let mut operation = json!({
            "operationId": self.id,
            "tags": [self.resource.api_version().replace('/', "_")],
            "consumes": consumes,
            "produces": ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"],
            "schemes": ["https"],
            "parameters": self.parameters(false),
            "responses": {
                "200": { "description": "OK", "schema": { "$ref": format!("#/definitions/{}", self.answer) } },
                "401": { "description": "Unauthorized" },
            },
        });
        self.extensions(&mut operation);
        operation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_patch_takes_field_validation_and_strategic_merge_patches() {
        let document = v3_document("batch", "v1");
        let patch = &document["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({ "group": "batch", "version": "v1", "kind": "Job" })
        );
        assert!(patch["parameters"].as_array().into_iter().flatten().any(|p| p["name"] == "fieldValidation"));
        assert!(patch["requestBody"]["content"].get("application/strategic-merge-patch+json").is_some());
        let status = &document["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status"];
        assert_eq!(status["put"]["operationId"], "replaceBatchV1NamespacedJobStatus");
        let core = v3_document("", "v1");
        assert!(core["paths"]["/api/v1/nodes/{name}"].get("patch").is_none(), "nodes are read-only here");
    }
}
