//! `/v1/clusters`: create (hosted APIs only), list, status, delete.
//!
//! Create and delete each write the cluster record and submit the workflow in ONE transaction:
//! the API acknowledges only durable intent, and a delete's "no deployment references it" check
//! holds the cluster row (PostgreSQL `FOR UPDATE`; SQLite's single writer) against new
//! deployments until the delete run exists.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use anycloud_engine::{Phase as RunPhase, RunRecord, RunStatus};
use anycloud_workflows::cloud::CloudError;
use anycloud_workflows::cluster_create::{CreateCluster, CreateInput};
use anycloud_workflows::cluster_delete::{DeleteCluster, DeleteInput};
use anycloud_workflows::clusters::{self, Cluster, NewCluster, Phase};
use anycloud_workflows::credentials::{self, CredentialStatus};
use anycloud_workflows::providers::{ProviderKind, account};

use super::AppState;
use super::error::{ApiError, JsonBody};

/// Validates, then stores the cluster and its `cluster.create` run in one transaction.
pub async fn create(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<NewCluster>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if !state.hosted {
        return Err(ApiError::bad_request(
            "HOSTED_API_REQUIRED",
            format!(
                "cluster creation requires a hosted API, and `{}` is a local API; start a hosted one with \
                 `anycloud api serve --id NAME --credentials sim --use` (the simulated cloud hosts it) and create \
                 the cluster there",
                state.id
            ),
        ));
    }
    request.validate().map_err(|why| ApiError::bad_request("INVALID_CLUSTER", why))?;
    let name = &request.name;
    let credential = credentials::get(state.store.pool(), &request.credentials).await?.ok_or_else(|| {
        ApiError::not_found(
            "CREDENTIAL_NOT_FOUND",
            format!(
                "cluster `{name}`: credential `{}` does not exist; `anycloud credentials list` shows the saved ones",
                request.credentials
            ),
        )
    })?;
    match credential.status {
        CredentialStatus::Valid => {}
        CredentialStatus::Invalid => {
            return Err(ApiError::bad_request(
                "CREDENTIAL_INVALID",
                format!(
                    "cluster `{name}`: credential `{}` is invalid ({}); save it again with working keys",
                    credential.name,
                    credential.status_message.unwrap_or_default()
                ),
            ));
        }
        CredentialStatus::Verifying => {
            return Err(ApiError::conflict(
                "CREDENTIAL_NOT_VERIFIED",
                format!(
                    "cluster `{name}`: credential `{}` is still being verified; try again once `anycloud credentials \
                     list` shows it valid",
                    credential.name
                ),
            ));
        }
    }
    // The provider says whether the region and VM type exist before any intent is stored.
    let cluster_id = uuid::Uuid::new_v4().to_string();
    let cloud = account::open(state.store.pool(), &state.sealer, &state.sim, &credential.name, &request.region)
        .await
        .map_err(|err| placement_error(name, err))?;
    cloud.placement(&cluster_id, &request.region, &request.vm_type).await.map_err(|err| placement_error(name, err))?;

    let mut tx = state.store.begin_write().await?;
    if let Some(existing) = clusters::lock_live_in(&mut tx, name).await? {
        return Err(ApiError::conflict(
            "CLUSTER_EXISTS",
            format!(
                "cluster `{name}` already exists ({}); pick another name, or delete it first with `anycloud cluster \
                 delete {name}`",
                existing.phase
            ),
        ));
    }
    let input = CreateInput { cluster_id: cluster_id.clone(), name: name.clone() };
    let run = state.engine.submit_in::<CreateCluster>(&mut tx, &input, Some(&Cluster::resource_key(name))).await?;
    let now = anycloud_workflows::now_ms();
    let cluster = Cluster {
        id: cluster_id,
        name: name.clone(),
        credential: credential.name.clone(),
        provider: credential.provider,
        region: request.region.clone(),
        zone: None,
        vm_type: request.vm_type.clone(),
        min_vms: request.min_vms,
        max_vms: request.max_vms,
        phase: Phase::Creating,
        reason: None,
        endpoint: None,
        network_id: None,
        workflow_id: Some(run.to_string()),
        delete_requested_at: None,
        created_at: now,
        updated_at: now,
    };
    clusters::insert_in(&mut tx, &cluster).await?;
    tx.commit().await?;
    state.engine.wake_up();
    Ok((StatusCode::CREATED, Json(json!({ "cluster": cluster, "workflow_id": run }))))
}

fn placement_error(name: &str, err: CloudError) -> ApiError {
    match err {
        CloudError::Terminal(why) => ApiError::bad_request("INVALID_PLACEMENT", format!("cluster `{name}`: {why}")),
        CloudError::Retryable(why) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "PROVIDER_UNAVAILABLE",
            format!("cluster `{name}`: the provider could not check the region and VM type ({why}); try again"),
        ),
    }
}

/// The cluster with its last run. A create that ended failed or cancelled before any of its
/// undos could mark the record (a failure or cancel at its first step) still shows `failed`.
async fn with_run(state: &AppState, mut cluster: Cluster) -> (Cluster, Option<RunRecord>) {
    let run = match cluster.workflow_id.as_deref().and_then(|id| id.parse().ok()) {
        Some(id) => state.engine.run(id).await.ok(),
        None => None,
    };
    if let Some(run) = &run
        && cluster.phase == Phase::Creating
        && matches!(run.status, RunStatus::Failed | RunStatus::Cancelled)
    {
        cluster.phase = Phase::Failed;
        cluster.reason = Some(format!("creation {}: {}", run.status, run.status_reason.clone().unwrap_or_default()));
    }
    (cluster, run)
}

/// Every cluster that is not deleted, with its VM counts.
pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let mut out = Vec::new();
    for cluster in clusters::list(state.store.pool()).await? {
        let (cluster, _) = with_run(&state, cluster).await;
        let vms = clusters::vms(state.store.pool(), &cluster.id).await?;
        let running = vms.iter().filter(|vm| !clusters::is_control_plane(vm) && is_running(&vm.state)).count();
        out.push(json!({
            "cluster": cluster,
            "simulated": cluster.provider == ProviderKind::Sim,
            "running_vms": running,
        }));
    }
    Ok(Json(json!({ "clusters": out })))
}

fn is_running(state: &str) -> bool {
    state.eq_ignore_ascii_case("running")
}

/// One cluster: spec, phase, VMs, endpoint, the workflow on it and its last error.
pub async fn show(State(state): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let cluster = clusters::get_by_name(state.store.pool(), &name).await?.ok_or_else(|| not_found(&name))?;
    Ok(Json(detail(&state, cluster).await?))
}

async fn detail(state: &AppState, cluster: Cluster) -> Result<Value, ApiError> {
    let vms = clusters::vms(state.store.pool(), &cluster.id).await?;
    let running = vms.iter().filter(|vm| !clusters::is_control_plane(vm) && is_running(&vm.state)).count();
    let (cluster, run) = with_run(state, cluster).await;
    let workflow = run.as_ref().map(|run| {
        json!({
            "id": run.id, "kind": run.kind, "status": run.status, "current_step": run.current_step,
            "attempt": run.attempt, "status_reason": run.status_reason, "next_at": run.next_at,
        })
    });
    let mut last_error = run.as_ref().and_then(|run| run.error.as_ref()).map(|err| err.to_string());
    // A run that failed and unwound keeps the error of its last undo attempt (a sweep waiting for
    // VMs to go, say); the cause is the error of the forward step that failed.
    if let Some(run) = run.as_ref().filter(|run| run.status == RunStatus::Failed)
        && let Ok(inspected) = state.engine.inspect(run.id).await
        && let Some(cause) = inspected
            .steps
            .iter()
            .rev()
            .find(|step| step.phase == RunPhase::Forward && step.status == "failed")
            .and_then(|step| step.error.as_ref())
    {
        last_error = Some(cause.to_string());
    }
    Ok(json!({
        "cluster": cluster,
        "simulated": cluster.provider == ProviderKind::Sim,
        "desired_vms": cluster.min_vms,
        "running_vms": running,
        "vms": vms,
        "workflow": workflow,
        "last_error": last_error,
    }))
}

/// Starts `cluster.delete`, unless a deployment still references the cluster.
pub async fn delete(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let mut tx = state.store.begin_write().await?;
    let cluster = clusters::lock_live_in(&mut tx, &name).await?.ok_or_else(|| not_found(&name))?;
    if cluster.delete_requested_at.is_some() {
        // Asked twice: the first delete is still the one running.
        drop(tx);
        let body = detail(&state, cluster).await?;
        return Ok((StatusCode::ACCEPTED, Json(body)));
    }
    let users = clusters::active_deployments_in(&mut tx, &cluster.id).await?;
    if !users.is_empty() {
        return Err(ApiError::conflict(
            "CLUSTER_IN_USE",
            format!(
                "cluster `{name}` is still referenced by {} deployment(s): {}; terminate them first (`anycloud \
                 terminate ID`), then delete the cluster",
                users.len(),
                users.join(", ")
            ),
        ));
    }
    let input = DeleteInput { cluster_id: cluster.id.clone(), name: name.clone() };
    let run = state.engine.submit_in::<DeleteCluster>(&mut tx, &input, Some(&Cluster::resource_key(&name))).await?;
    let now = anycloud_workflows::now_ms();
    clusters::request_delete_in(&mut tx, &cluster.id, &run.to_string(), now).await?;
    tx.commit().await?;
    state.engine.wake_up();
    let cluster = clusters::get(state.store.pool(), &cluster.id).await?.ok_or_else(|| not_found(&name))?;
    let body = detail(&state, cluster).await?;
    Ok((StatusCode::ACCEPTED, Json(body)))
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(
        "CLUSTER_NOT_FOUND",
        format!("cluster `{name}` does not exist; `anycloud cluster list` shows the clusters"),
    )
}
