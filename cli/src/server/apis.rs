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
