//! `/v1/jobs`, `/v1/services` and `/v1/deployments`: submit a job, deploy a service, show and
//! list deployments, upgrade a service, terminate, resubmit, and a job's logs (streamed). Exec is its own file (`exec.rs`): a WebSocket.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use anycloud_workflows::wire::{
    DeploymentDetail, DeploymentList, DeploymentQuery, LogsQuery, NewJob, NewService, UpgradeRequest,
};

use super::AppState;
use super::error::{ApiError, JsonBody, PathParam, QueryParams};

/// Stores a job on a ready cluster and starts its first attempt.
pub async fn submit_job(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<NewJob>,
) -> Result<(StatusCode, Json<DeploymentDetail>), ApiError> {
    Ok((StatusCode::CREATED, Json(state.ops.submit_job(request).await?)))
}

/// Stores a service on a ready cluster and starts deploying its revision 1.
pub async fn deploy_service(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<NewService>,
) -> Result<(StatusCode, Json<DeploymentDetail>), ApiError> {
    Ok((StatusCode::CREATED, Json(state.ops.deploy_service(request).await?)))
}

/// Records a service's next revision and starts rolling it out.
pub async fn upgrade(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    JsonBody(request): JsonBody<UpgradeRequest>,
) -> Result<(StatusCode, Json<DeploymentDetail>), ApiError> {
    Ok((StatusCode::ACCEPTED, Json(state.ops.upgrade_service(&id, request).await?)))
}

/// Deployments, newest first.
pub async fn list(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<DeploymentQuery>,
) -> Result<Json<DeploymentList>, ApiError> {
    Ok(Json(state.ops.list_deployments(&query).await?))
}

/// One deployment, by id or name.
pub async fn show(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<DeploymentDetail>, ApiError> {
    Ok(Json(state.ops.deployment_status(&id).await?))
}

/// Ends a deployment: its objects are deleted, the record stays `terminated`.
pub async fn terminate(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<(StatusCode, Json<DeploymentDetail>), ApiError> {
    Ok((StatusCode::ACCEPTED, Json(state.ops.terminate_deployment(&id).await?)))
}

/// Runs an ended job again, as its next attempt.
pub async fn resubmit(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<(StatusCode, Json<DeploymentDetail>), ApiError> {
    Ok((StatusCode::CREATED, Json(state.ops.resubmit_deployment(&id).await?)))
}

/// The job's output as `text/plain`, line by line as the cluster sends it; with `timestamps`
/// each line after its stamp, with `since_time` from that time on (what a client that resumes a
/// broken stream asks, `anycloud_workflows::kubernetes::log_cursor`). A follow is refused with
/// `429 TOO_MANY_STREAMS` while the API holds its most ([`super::streams::MAX_STREAMS`]).
pub async fn logs(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    QueryParams(query): QueryParams<LogsQuery>,
) -> Result<Response, ApiError> {
    // A followed log has no end of its own: it holds one of the API's stream places until its
    // client leaves (`streams.rs`).
    let slot = if query.follow {
        Some(state.streams.hold(&format!("a follow of `{}`'s logs", anycloud_workflows::names::shown(&id)))?)
    } else {
        None
    };
    let stream = state.ops.deployment_logs(&id, &query).await?;
    let stream = futures::StreamExt::map(stream, move |chunk| {
        let _held = &slot;
        chunk
    });
    let headers = [(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::CACHE_CONTROL, "no-store")];
    Ok((headers, Body::from_stream(stream)).into_response())
}
