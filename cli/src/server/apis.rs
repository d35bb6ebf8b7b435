//! `/v1/apis`: APIs this API deployed on cloud VMs (`api serve --credentials aws|gcp`): deploy,
//! list, show, the access a CLI stores, remove.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use anycloud_workflows::api::{
    HostedApiAccess, HostedApiList, HostedApiStarted, HostedApiView, NewHostedApi, RemoveHostedApi,
};

use super::AppState;
use super::error::{ApiError, JsonBody, PathParam, QueryParams};

/// Stores the hosted API's intent and starts `api.deploy`.
pub async fn deploy(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<NewHostedApi>,
) -> Result<(StatusCode, Json<HostedApiStarted>), ApiError> {
    Ok((StatusCode::CREATED, Json(state.ops.deploy_api(request).await?)))
}

/// Receives a binary a deploy will ship to its VM, streamed (at most
/// [`anycloud_workflows::api_binary::MAX_BINARY_BYTES`]), kept only if it has the SHA-256 in the
/// path and runs on a VM (ELF, x86_64 or aarch64).
pub async fn stage_binary(
    State(state): State<AppState>,
    PathParam(sha256): PathParam<String>,
    body: axum::body::Body,
) -> Result<Json<anycloud_workflows::api_binary::StagedBinary>, ApiError> {
    Ok(Json(state.ops.stage_binary(&sha256, body.into_data_stream()).await?))
}

/// The live hosted APIs.
pub async fn list(State(state): State<AppState>) -> Result<Json<HostedApiList>, ApiError> {
    Ok(Json(state.ops.list_apis().await?))
}

/// One hosted API (never its token).
pub async fn show(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<Json<HostedApiView>, ApiError> {
    Ok(Json(state.ops.show_api(&name).await?))
}

/// The URL, token and CA of a ready hosted API.
pub async fn access(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<Json<HostedApiAccess>, ApiError> {
    Ok(Json(state.ops.api_access(&name).await?))
}

/// Starts `api.remove` (`?delete_bucket=true`: the bucket too).
pub async fn remove(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
    QueryParams(request): QueryParams<RemoveHostedApi>,
) -> Result<(StatusCode, Json<HostedApiStarted>), ApiError> {
    Ok((StatusCode::ACCEPTED, Json(state.ops.remove_api(&name, request).await?)))
}
