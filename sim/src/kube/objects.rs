//! The REST verbs on stored objects, as the apiserver answers them:
//!
//! - `GET` a collection: list (`labelSelector`, `fieldSelector`), a `Table` when asked, or a
//!   watch (`watch=true`, see [`super::watch`]).
//! - `GET`/`POST`/`PUT` one object: get (404 `NotFound`), create (201; 409 `AlreadyExists`, 422
//!   `Invalid`, 400 `BadRequest`; `generateName` honoured), replace (409 `Conflict` when the
//!   body's `resourceVersion` is not the object's). Bodies are read as
//!   [`super::negotiation`] says, their unknown fields as [`super::fields`] says.
//! - `PATCH` ([`super::patches`]): server-side apply (`application/apply-patch+yaml`,
//!   `fieldManager`, `force`): creates the object if absent, else replaces the labels,
//!   annotations and top-level fields (`spec`, ...) the applier sent and records it in
//!   `managedFields`; JSON merge patches, strategic merge patches and JSON patches.
//! - The `/status` subresource of Pods, Services, Jobs, Deployments, ReplicaSets and namespaces:
//!   `GET` reads the object, `PUT` and `PATCH` change its `status` only; a write to the object
//!   itself leaves its `status` alone, as the apiserver's status strategies do.
//! - `DELETE` with `propagationPolicy`: a Pod is marked for deletion and the kubelet ends it
//!   (SIGTERM, then SIGKILL after its grace period); a Job's Pods are deleted with it
//!   (`Background`), before it (`Foreground`: it stays, with a `deletionTimestamp`, until they
//!   are gone) or orphaned (`Orphan`, and batch/v1's default, with the apiserver's warning); a
//!   namespace is `Terminating` until its objects are gone. A Deployment's ReplicaSets and a
//!   ReplicaSet's Pods go after it (`Background`, apps/v1's default, by the garbage collector,
//!   [`super::garbage`]), before it (`Foreground`) or stay (`Orphan`); so does anything else that
//!   names it in its `ownerReferences` (a Secret), once all its owners are gone.
//! - A Service's `clusterIP` is allocated on create (see [`super::cluster_ips`]) and cannot change.
//! - `dryRun` is not simulated: a request that asks for it is refused (400), never written.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::fields::Validation;
use super::negotiation::{self, PatchKind};
use super::resources::{self, Resource};
use super::selectors::Selector;
use super::status::ApiError;
use super::store::resource_version;
use super::validation::validate;
use super::{Kube, Shared, auth, cluster_ips, defaults, openapi, patches, schemas, secrets, tables, time, watch};

/// The apiserver's warning when a batch/v1 Job is deleted without a propagation policy.
const ORPHAN_WARNING: &str = "299 - \"child pods are preserved by default when jobs are deleted; set \
     propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning\"";

/// The path of a request on objects.
#[derive(Debug, Deserialize)]
pub(crate) struct Target {
    vm: String,
    group: Option<String>,
    version: Option<String>,
    namespace: Option<String>,
    resource: String,
    name: Option<String>,
}

type Params = Query<HashMap<String, String>>;

/// A resolved request: its cluster, resource and namespace.
struct Scope {
    cluster: String,
    resource: &'static Resource,
    namespace: Option<String>,
}

impl Scope {
    fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }
}

async fn resolve(kube: &Kube, target: &Target, headers: &HeaderMap, collection: bool) -> Result<Scope, ApiError> {
    auth::control_plane(kube, &target.vm, headers).await?;
    let group = target.group.as_deref().unwrap_or_default();
    let version = target.version.as_deref().unwrap_or("v1");
    let not_found =
        || ApiError::new(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource");
    let resource = Resource::find(group, version, &target.resource).ok_or_else(not_found)?;
    // A namespaced resource is listed across namespaces at its cluster path; nothing else
    // mixes scopes.
    let scoped_right = resource.namespaced == target.namespace.is_some() || (collection && resource.namespaced);
    if !scoped_right || resource.plural == resources::NODES.plural {
        return Err(not_found());
    }
    Ok(Scope { cluster: target.vm.clone(), resource, namespace: target.namespace.clone() })
}

fn reply(result: Result<Response, ApiError>) -> Response {
    result.unwrap_or_else(IntoResponse::into_response)
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    (code, axum::Json(body)).into_response()
}

/// `GET` a collection.
pub(crate) async fn list(
    State(kube): Shared,
    Path(target): Path<Target>,
    Query(query): Params,
    headers: HeaderMap,
) -> Response {
    reply(list_objects(kube, target, query, headers).await)
}

async fn list_objects(
    kube: Arc<Kube>,
    target: Target,
    query: HashMap<String, String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let scope = resolve(&kube, &target, &headers, true).await?;
    let selector = Selector::parse(
        query.get("labelSelector").map(String::as_str),
        query.get("fieldSelector").map(String::as_str),
    )?;
    if matches!(query.get("watch").map(String::as_str), Some("true" | "1")) {
        let since = query.get("resourceVersion").and_then(|rv| rv.parse::<i64>().ok()).filter(|rv| *rv > 0);
        let timeout = query.get("timeoutSeconds").and_then(|s| s.parse().ok()).unwrap_or(1800);
        let watch = watch::Watch {
            cluster: scope.cluster,
            resource: scope.resource,
            namespace: scope.namespace,
            selector,
            since,
            timeout: Duration::from_secs(timeout),
        };
        return Ok(watch::serve(kube, watch));
    }
    let revision = kube.store.revision(&scope.cluster).await?;
    let equalities = selector.label_equalities();
    let subject = selector.field_equality("involvedObject.name");
    let namespace = scope.namespace.as_deref();
    let objects = kube.store.list_labelled(&scope.cluster, scope.resource, namespace, &equalities, subject).await?;
    let items: Vec<Value> = objects.into_iter().filter(|object| selector.matches(object)).collect();
    if tables::wanted(&headers) {
        let include = query.get("includeObject").map(String::as_str);
        return Ok(json_response(StatusCode::OK, &tables::table(scope.resource, &items, revision, include)));
    }
    let list = json!({
        "kind": format!("{}List", scope.resource.kind), "apiVersion": scope.resource.api_version(),
        "metadata": { "resourceVersion": revision.to_string() }, "items": items,
    });
    Ok(json_response(StatusCode::OK, &list))
}

/// `GET` one object.
pub(crate) async fn get(
    State(kube): Shared,
    Path(target): Path<Target>,
    Query(query): Params,
    headers: HeaderMap,
) -> Response {
    reply(get_object(&kube, &target, &query, &headers).await)
}

async fn get_object(
    kube: &Kube,
    target: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let scope = resolve(kube, target, headers, false).await?;
    let name = target.name.as_deref().unwrap_or_default();
    let object = existing(kube, &scope, name).await?;
    if tables::wanted(headers) {
        let revision = resource_version(&object);
        let include = query.get("includeObject").map(String::as_str);
        return Ok(json_response(StatusCode::OK, &tables::table(scope.resource, &[object], revision, include)));
    }
    Ok(json_response(StatusCode::OK, &object))
}

async fn existing(kube: &Kube, scope: &Scope, name: &str) -> Result<Value, ApiError> {
    kube.store
        .get(&scope.cluster, scope.resource, scope.namespace(), name)
        .await?
        .ok_or_else(|| ApiError::not_found(scope.resource, name))
}

/// Who wrote: the `fieldManager` parameter, else the client's name from its User-Agent.
fn manager(query: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(manager) = query.get("fieldManager") {
        return manager.clone();
    }
    let agent = headers.get(header::USER_AGENT).and_then(|agent| agent.to_str().ok()).unwrap_or("unknown");
    agent.split('/').next().unwrap_or(agent).to_owned()
}

/// `POST` to a collection.
pub(crate) async fn create(
    State(kube): Shared,
    Path(target): Path<Target>,
    Query(query): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    reply(create_posted(&kube, &target, &query, &headers, &body).await)
}

async fn create_posted(
    kube: &Kube,
    target: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let scope = resolve(kube, target, headers, false).await?;
    refuse_dry_run(query)?;
    let validation = Validation::parse(query.get("fieldValidation").map(String::as_str))?;
    let mut object = negotiation::object(scope.resource, headers, body)?;
    let warnings = validation.check(scope.resource, &mut object)?;
    let metadata = defaults::child(defaults::root(&mut object), "metadata");
    if metadata.get("name").and_then(Value::as_str).is_none_or(str::is_empty)
        && let Some(prefix) = metadata.get("generateName").and_then(Value::as_str)
    {
        let name = format!("{prefix}{}", random_suffix());
        metadata.insert("name".into(), json!(name));
    }
    let created = create_object(kube, &scope, object, &manager(query, headers), "Update").await?;
    Ok(warned(json_response(StatusCode::CREATED, &created), warnings))
}

/// A response with the apiserver's `Warning` headers.
fn warned(mut response: Response, warnings: Vec<header::HeaderValue>) -> Response {
    for warning in warnings {
        response.headers_mut().append(header::WARNING, warning);
    }
    response
}

fn refuse_dry_run(query: &HashMap<String, String>) -> Result<(), ApiError> {
    match query.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(()),
        Some(_) => Err(ApiError::bad_request(
            "dryRun is not simulated by this Kubernetes: the request was not carried out; send it without dryRun",
        )),
    }
}

/// Five characters from the apiserver's alphabet for generated names (no vowels, no lookalikes).
pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5].iter().map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char).collect()
}

async fn create_object(
    kube: &Kube,
    scope: &Scope,
    mut object: Value,
    manager: &str,
    operation: &str,
) -> Result<Value, ApiError> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    if let Some(namespace) = &scope.namespace {
        if object["metadata"]["namespace"].as_str().is_some_and(|given| given != namespace) {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let found = kube.store.get(&scope.cluster, &resources::NAMESPACES, "", namespace).await?;
        let Some(found) = found else { return Err(ApiError::not_found(&resources::NAMESPACES, namespace)) };
        if !found["metadata"]["deletionTimestamp"].is_null() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is \
                     being terminated",
                    scope.resource.group_resource()
                ),
            ));
        }
    }
    if scope.resource.plural == resources::SECRETS.plural {
        secrets::normalize(&mut object)?;
    }
    let causes = validate(scope.resource, &object);
    if !causes.is_empty() {
        return Err(ApiError::invalid(scope.resource, &name, &causes));
    }
    if scope.resource.plural == resources::SERVICES.plural {
        let ip = object["spec"]["clusterIP"].as_str().filter(|ip| !ip.is_empty()).map(str::to_owned);
        let ip = match ip {
            Some(ip) => ip,
            None => cluster_ips::allocate(kube, &scope.cluster, &cluster_ips::ports(&object)).await?,
        };
        defaults::child(defaults::root(&mut object), "spec").insert("clusterIP".into(), json!(ip));
    }
    let fields = managed_fields(&object);
    defaults::on_create(scope.resource, scope.namespace(), &mut object);
    record_manager(&mut object, manager, operation, scope.resource, fields, None);
    kube.store
        .create(&scope.cluster, scope.resource, object)
        .await?
        .ok_or_else(|| ApiError::already_exists(scope.resource, &name))
}

/// `PATCH` one object.
pub(crate) async fn patch(
    State(kube): Shared,
    Path(target): Path<Target>,
    Query(query): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    reply(patch_request(&kube, &target, &query, &headers, &body, false).await)
}

/// `PUT` one object.
pub(crate) async fn replace(
    State(kube): Shared,
    Path(target): Path<Target>,
    Query(query): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    reply(replace_request(&kube, &target, &query, &headers, &body, false).await)
}

/// `GET` an object's `/status`.
pub(crate) async fn get_status(
    State(kube): Shared,
    Path(target): Path<Target>,
    Query(query): Params,
    headers: HeaderMap,
) -> Response {
    let result = async {
        status_scope(&kube, &target, &headers).await?;
        get_object(&kube, &target, &query, &headers).await
    };
    reply(result.await)
}

/// `PUT` an object's `/status`.
pub(crate) async fn replace_status(
    State(kube): Shared,
    Path(target): Path<Target>,
    Query(query): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    reply(replace_request(&kube, &target, &query, &headers, &body, true).await)
}

/// `PATCH` an object's `/status`.
pub(crate) async fn patch_status(
    State(kube): Shared,
    Path(target): Path<Target>,
    Query(query): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    reply(patch_request(&kube, &target, &query, &headers, &body, true).await)
}

/// The scope of a `/status` request: 404 for a resource without one.
async fn status_scope(kube: &Kube, target: &Target, headers: &HeaderMap) -> Result<Scope, ApiError> {
    let scope = resolve(kube, target, headers, false).await?;
    if !openapi::has_status(scope.resource) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        ));
    }
    Ok(scope)
}

/// What a write does to the object it finds.
enum Change {
    Patch(PatchKind, Value),
    Replace(Value),
}

async fn patch_request(
    kube: &Kube,
    target: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
    status: bool,
) -> Result<Response, ApiError> {
    let scope =
        if status { status_scope(kube, target, headers).await? } else { resolve(kube, target, headers, false).await? };
    refuse_dry_run(query)?;
    let validation = Validation::parse(query.get("fieldValidation").map(String::as_str))?;
    let name = target.name.as_deref().unwrap_or_default();
    let (kind, mut patch) = negotiation::patch(scope.resource, headers, body)?;
    let warnings = if kind == PatchKind::Json { Vec::new() } else { validation.check(scope.resource, &mut patch)? };
    if kind == PatchKind::Apply {
        if !query.contains_key("fieldManager") {
            return Err(ApiError::bad_request("PATCH requests with apply content type must have a fieldManager"));
        }
        if patch["metadata"]["name"].as_str() != Some(name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                patch["metadata"]["name"].as_str().unwrap_or_default()
            )));
        }
    }
    let response = write(kube, &scope, name, &manager(query, headers), Change::Patch(kind, patch), status).await?;
    Ok(warned(response, warnings))
}

async fn replace_request(
    kube: &Kube,
    target: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
    status: bool,
) -> Result<Response, ApiError> {
    let scope =
        if status { status_scope(kube, target, headers).await? } else { resolve(kube, target, headers, false).await? };
    refuse_dry_run(query)?;
    let validation = Validation::parse(query.get("fieldValidation").map(String::as_str))?;
    let name = target.name.as_deref().unwrap_or_default();
    let mut object = negotiation::object(scope.resource, headers, body)?;
    let warnings = validation.check(scope.resource, &mut object)?;
    if object["metadata"]["name"].as_str() != Some(name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            object["metadata"]["name"].as_str().unwrap_or_default()
        )));
    }
    let response = write(kube, &scope, name, &manager(query, headers), Change::Replace(object), status).await?;
    Ok(warned(response, warnings))
}

/// The metadata a replace cannot set: the server's own.
const SERVER_METADATA: [&str; 8] = [
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "namespace",
    "name",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

async fn write(
    kube: &Kube,
    scope: &Scope,
    name: &str,
    manager: &str,
    change: Change,
    status: bool,
) -> Result<Response, ApiError> {
    let apply = matches!(change, Change::Patch(PatchKind::Apply, _));
    let schema = json!({ "$ref": format!("#/components/schemas/{}", schemas::definition(scope.resource)) });
    // Optimistic: read, change, write if nobody wrote meanwhile; the reconcile loop writes
    // statuses concurrently, so try a few times.
    for _ in 0..5 {
        let Some(current) = kube.store.get(&scope.cluster, scope.resource, scope.namespace(), name).await? else {
            if let (Change::Patch(PatchKind::Apply, applied), false) = (&change, status) {
                let created = create_object(kube, scope, applied.clone(), manager, "Apply").await?;
                return Ok(json_response(StatusCode::CREATED, &created));
            }
            return Err(ApiError::not_found(scope.resource, name));
        };
        let mut changed = current.clone();
        let written = match &change {
            Change::Patch(PatchKind::Apply, applied) => {
                apply_fields(&mut changed, applied);
                applied
            }
            Change::Patch(PatchKind::Merge, patch) => {
                patches::merge(&mut changed, patch);
                patch
            }
            Change::Patch(PatchKind::Strategic, patch) => {
                patches::strategic(schemas::v3(), &schema, &mut changed, patch);
                patch
            }
            Change::Patch(PatchKind::Json, patch) => {
                patches::json_patch(&mut changed, patch).map_err(|err| {
                    ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        format!("the server rejected our request due to an error in our request: {err}"),
                    )
                })?;
                patch
            }
            Change::Replace(object) => {
                let given = object["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty());
                if given.is_some_and(|given| Some(given) != current["metadata"]["resourceVersion"].as_str()) {
                    return Err(ApiError::conflict(scope.resource, name));
                }
                changed = object.clone();
                for field in SERVER_METADATA.into_iter().chain(["resourceVersion"]) {
                    let kept = current["metadata"].get(field).cloned();
                    let metadata = defaults::child(defaults::root(&mut changed), "metadata");
                    match kept {
                        Some(kept) => metadata.insert(field.into(), kept),
                        None => metadata.remove(field),
                    };
                }
                changed["kind"] = current["kind"].clone();
                changed["apiVersion"] = current["apiVersion"].clone();
                object
            }
        };
        if status {
            // A write to /status changes the status only.
            let new_status = changed.get("status").cloned();
            changed = current.clone();
            match new_status {
                Some(new_status) => changed["status"] = new_status,
                None => drop(defaults::root(&mut changed).remove("status")),
            }
        } else if openapi::has_status(scope.resource) {
            match current.get("status") {
                Some(kept) => changed["status"] = kept.clone(),
                None => drop(defaults::root(&mut changed).remove("status")),
            }
        }
        if !status {
            check_update(scope, name, &current, &mut changed)?;
        }
        let causes = validate(scope.resource, &changed);
        if !causes.is_empty() {
            return Err(ApiError::invalid(scope.resource, name, &causes));
        }
        if changed["spec"] != current["spec"] {
            let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
            changed["metadata"]["generation"] = json!(generation + 1);
        }
        let operation = if apply { "Apply" } else { "Update" };
        let subresource = status.then_some("status");
        record_manager(&mut changed, manager, operation, scope.resource, managed_fields(written), subresource);
        if changed == current {
            return Ok(json_response(StatusCode::OK, &current));
        }
        if let Some(written) = kube.store.update(&scope.cluster, scope.resource, changed).await? {
            return Ok(json_response(StatusCode::OK, &written));
        }
        if matches!(change, Change::Replace(ref object) if object["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()))
        {
            return Err(ApiError::conflict(scope.resource, name));
        }
    }
    Err(ApiError::conflict(scope.resource, name))
}

/// The defaults and immutable fields of a changed object, as the apiserver's update
/// strategies keep them.
fn check_update(scope: &Scope, name: &str, current: &Value, changed: &mut Value) -> Result<(), ApiError> {
    match scope.resource.plural {
        "deployments" => defaults::deployment(changed),
        "replicasets" => defaults::replica_set(changed),
        "services" => {
            let kept = &current["spec"]["clusterIP"];
            let given = changed["spec"]["clusterIP"].as_str().filter(|ip| !ip.is_empty());
            if given.is_some_and(|ip| Some(ip) != kept.as_str()) {
                let cause = (
                    "spec.clusterIP".to_owned(),
                    format!("Invalid value: \"{}\": field is immutable", given.unwrap_or_default()),
                    "FieldValueInvalid",
                );
                return Err(ApiError::invalid(scope.resource, name, &[cause]));
            }
            changed["spec"]["clusterIP"] = kept.clone();
            defaults::service(changed);
        }
        "secrets" => {
            secrets::normalize(changed)?;
            let causes = secrets::validate_update(current, changed);
            if !causes.is_empty() {
                return Err(ApiError::invalid(scope.resource, name, &causes));
            }
        }
        "jobs" => {
            defaults::job(changed);
            if changed["spec"]["template"] != current["spec"]["template"] {
                let cause =
                    ("spec.template".to_owned(), "Invalid value: field is immutable".to_owned(), "FieldValueInvalid");
                return Err(ApiError::invalid(scope.resource, name, &[cause]));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Server-side apply, simply: the labels, annotations and top-level fields the applier sent
/// replace the object's.
fn apply_fields(object: &mut Value, applied: &Value) {
    let Some(applied) = applied.as_object() else { return };
    for (key, value) in applied {
        match key.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                // The metadata an apply configuration may own (labels, annotations, and the
                // owners a dependent names, which the garbage collector follows).
                for field in ["labels", "annotations", "ownerReferences"] {
                    if let Some(value) = value.get(field) {
                        defaults::child(defaults::root(object), "metadata").insert(field.into(), value.clone());
                    }
                }
            }
            _ => {
                defaults::root(object).insert(key.clone(), value.clone());
            }
        }
    }
}

/// The fields a write set, as `fieldsV1` writes them (`{"f:spec": {"f:template": {}}}`).
fn managed_fields(written: &Value) -> Value {
    fn fields(value: &Value) -> Value {
        match value.as_object() {
            Some(map) => map.iter().map(|(key, value)| (format!("f:{key}"), fields(value))).collect(),
            None => json!({}),
        }
    }
    let mut set = fields(written);
    if let Some(set) = set.as_object_mut() {
        set.remove("f:apiVersion");
        set.remove("f:kind");
        set.remove("f:status");
        if let Some(metadata) = set.get_mut("f:metadata").and_then(Value::as_object_mut) {
            metadata.retain(|key, _| key == "f:labels" || key == "f:annotations");
        }
    }
    set
}

fn record_manager(
    object: &mut Value,
    manager: &str,
    operation: &str,
    resource: &Resource,
    fields: Value,
    subresource: Option<&str>,
) {
    let mut entry = json!({
        "manager": manager, "operation": operation, "apiVersion": resource.api_version(), "time": time::now(),
        "fieldsType": "FieldsV1", "fieldsV1": fields,
    });
    if let Some(subresource) = subresource {
        entry["subresource"] = json!(subresource);
    }
    let metadata = defaults::child(defaults::root(object), "metadata");
    let managed = metadata.entry("managedFields").or_insert_with(|| json!([]));
    if let Some(entries) = managed.as_array_mut() {
        entries.retain(|existing| {
            !(existing["manager"] == manager
                && existing["operation"] == operation
                && existing["subresource"].as_str() == subresource)
        });
        entries.push(entry);
    }
}

/// What a delete asks for: from the query and from a `DeleteOptions` body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteOptions {
    propagation_policy: Option<String>,
    grace_period_seconds: Option<i64>,
}

/// `DELETE` one object.
pub(crate) async fn delete(
    State(kube): Shared,
    Path(target): Path<Target>,
    Query(query): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    reply(delete_object(&kube, &target, &query, &headers, &body).await)
}

async fn delete_object(
    kube: &Kube,
    target: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let scope = resolve(kube, target, headers, false).await?;
    let name = target.name.as_deref().unwrap_or_default();
    let mut options: DeleteOptions = if body.is_empty() {
        DeleteOptions::default()
    } else {
        serde_json::from_slice(body).map_err(|err| ApiError::bad_request(format!("invalid DeleteOptions: {err}")))?
    };
    if let Some(policy) = query.get("propagationPolicy") {
        options.propagation_policy = Some(policy.clone());
    }
    if let Some(grace) = query.get("gracePeriodSeconds").and_then(|grace| grace.parse().ok()) {
        options.grace_period_seconds = Some(grace);
    }
    let object = existing(kube, &scope, name).await?;
    match scope.resource.plural {
        "pods" => {
            let pod = mark_deleted(kube, &scope.cluster, &scope, object, options.grace_period_seconds).await?;
            Ok(json_response(StatusCode::OK, &pod))
        }
        "jobs" => {
            let pods = pods_of(kube, &scope.cluster, &object).await?;
            match options.propagation_policy.as_deref() {
                Some("Foreground") => {
                    for pod in pods {
                        mark_deleted(kube, &scope.cluster, &pod_scope(&scope), pod, None).await?;
                    }
                    let job = mark_deleted(kube, &scope.cluster, &scope, object, None).await?;
                    Ok(json_response(StatusCode::OK, &job))
                }
                Some("Background") => {
                    remove(kube, &scope, &object).await?;
                    for pod in pods {
                        mark_deleted(kube, &scope.cluster, &pod_scope(&scope), pod, None).await?;
                    }
                    Ok(json_response(StatusCode::OK, &deleted_status(scope.resource, &object)))
                }
                policy => {
                    // Orphaned before the Job goes, so that the garbage collector never takes them.
                    for mut pod in pods {
                        if let Some(metadata) = pod["metadata"].as_object_mut() {
                            metadata.remove("ownerReferences");
                        }
                        kube.store.update(&scope.cluster, &resources::PODS, pod).await?;
                    }
                    remove(kube, &scope, &object).await?;
                    let mut response = json_response(StatusCode::OK, &deleted_status(scope.resource, &object));
                    if policy.is_none() {
                        response
                            .headers_mut()
                            .insert(header::WARNING, header::HeaderValue::from_static(ORPHAN_WARNING));
                    }
                    Ok(response)
                }
            }
        }
        "deployments" | "replicasets" => {
            let children =
                if scope.resource.plural == "deployments" { &resources::REPLICASETS } else { &resources::PODS };
            match options.propagation_policy.as_deref() {
                Some("Foreground") => {
                    let marked = mark_deleted(kube, &scope.cluster, &scope, object, None).await?;
                    Ok(json_response(StatusCode::OK, &marked))
                }
                Some("Orphan") => {
                    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
                    for mut child in kube.store.owned(&scope.cluster, children, uid).await? {
                        if let Some(metadata) = child["metadata"].as_object_mut() {
                            metadata.remove("ownerReferences");
                        }
                        kube.store.update(&scope.cluster, children, child).await?;
                    }
                    remove(kube, &scope, &object).await?;
                    Ok(json_response(StatusCode::OK, &deleted_status(scope.resource, &object)))
                }
                // Background, apps/v1's default: the reconcile loop's garbage collection takes
                // the ReplicaSets, then their Pods.
                _ => {
                    remove(kube, &scope, &object).await?;
                    Ok(json_response(StatusCode::OK, &deleted_status(scope.resource, &object)))
                }
            }
        }
        "namespaces" => {
            let mut namespace = mark_deleted(kube, &scope.cluster, &scope, object, None).await?;
            namespace["status"]["phase"] = json!("Terminating");
            let written = kube.store.update(&scope.cluster, scope.resource, namespace.clone()).await?;
            Ok(json_response(StatusCode::OK, &written.unwrap_or(namespace)))
        }
        _ => {
            remove(kube, &scope, &object).await?;
            Ok(json_response(StatusCode::OK, &deleted_status(scope.resource, &object)))
        }
    }
}

fn pod_scope(scope: &Scope) -> Scope {
    Scope { cluster: scope.cluster.clone(), resource: &resources::PODS, namespace: scope.namespace.clone() }
}

async fn remove(kube: &Kube, scope: &Scope, object: &Value) -> Result<(), ApiError> {
    if kube.store.remove(&scope.cluster, scope.resource, object).await? {
        Ok(())
    } else {
        Err(ApiError::conflict(scope.resource, object["metadata"]["name"].as_str().unwrap_or_default()))
    }
}

/// The `Status` of an object deleted at once.
fn deleted_status(resource: &Resource, object: &Value) -> Value {
    let mut details = json!({
        "name": object["metadata"]["name"], "kind": resource.plural, "uid": object["metadata"]["uid"],
    });
    if !resource.group.is_empty() {
        details["group"] = json!(resource.group);
    }
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details })
}

/// The Pods a Job owns.
pub(crate) async fn pods_of(kube: &Kube, cluster: &str, job: &Value) -> Result<Vec<Value>, ApiError> {
    let namespace = job["metadata"]["namespace"].as_str();
    let uid = &job["metadata"]["uid"];
    let pods = kube.store.list(cluster, &resources::PODS, namespace).await?;
    Ok(pods
        .into_iter()
        .filter(|pod| {
            pod["metadata"]["ownerReferences"].as_array().is_some_and(|owners| owners.iter().any(|o| o["uid"] == *uid))
        })
        .collect())
}

/// Marks an object for deletion (`deletionTimestamp`; for a Job or namespace, the finalizer of
/// a foreground deletion); the reconcile loop finishes it. Returns it as written.
async fn mark_deleted(
    kube: &Kube,
    cluster: &str,
    scope: &Scope,
    object: Value,
    grace: Option<i64>,
) -> Result<Value, ApiError> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let mut current = object;
    for _ in 0..5 {
        if !current["metadata"]["deletionTimestamp"].is_null() {
            return Ok(current);
        }
        let mut marked = current.clone();
        let metadata = defaults::child(defaults::root(&mut marked), "metadata");
        metadata.insert("deletionTimestamp".into(), json!(time::now()));
        if scope.resource.plural == resources::PODS.plural {
            let default_grace = current["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30);
            metadata.insert("deletionGracePeriodSeconds".into(), json!(grace.unwrap_or(default_grace)));
        } else {
            metadata.insert("deletionGracePeriodSeconds".into(), json!(0));
            if matches!(scope.resource.plural, "jobs" | "deployments" | "replicasets") {
                metadata.insert("finalizers".into(), json!(["foregroundDeletion"]));
            }
        }
        if let Some(written) = kube.store.update(cluster, scope.resource, marked).await? {
            return Ok(written);
        }
        match kube.store.get(cluster, scope.resource, scope.namespace(), &name).await? {
            Some(again) => current = again,
            None => return Err(ApiError::not_found(scope.resource, &name)),
        }
    }
    Err(ApiError::conflict(scope.resource, &name))
}

/// Marks an object for a foreground deletion (for the reconcile loop: a Deployment deleted in
/// the foreground takes its ReplicaSets, which take their Pods, before it goes).
pub(crate) async fn delete_in_foreground(
    kube: &Kube,
    cluster: &str,
    resource: &'static Resource,
    object: Value,
) -> Result<(), ApiError> {
    let scope = Scope {
        cluster: cluster.to_owned(),
        resource,
        namespace: object["metadata"]["namespace"].as_str().map(str::to_owned),
    };
    mark_deleted(kube, cluster, &scope, object, None).await.map(drop)
}

/// Marks a Pod for deletion, with its own grace period unless `grace` says (for the reconcile
/// loop: a Job, namespace or cluster being deleted takes its Pods with it).
pub(crate) async fn delete_pod(kube: &Kube, cluster: &str, pod: Value, grace: Option<i64>) -> Result<(), ApiError> {
    let scope = Scope {
        cluster: cluster.to_owned(),
        resource: &resources::PODS,
        namespace: pod["metadata"]["namespace"].as_str().map(str::to_owned),
    };
    mark_deleted(kube, cluster, &scope, pod, grace).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_fields_name_what_the_applier_sent() {
        let applied = json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": "j", "labels": { "a": "b" } },
                              "spec": { "template": {} } });
        assert_eq!(
            managed_fields(&applied),
            json!({ "f:metadata": { "f:labels": { "f:a": {} } }, "f:spec": { "f:template": {} } })
        );
    }
}
