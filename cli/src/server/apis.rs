//! `/v1/apis`: APIs this API deployed on cloud VMs (`api serve --credentials aws|gcp`): deploy,
//! list, show, the access a CLI stores, rotate its CA, remove.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use anycloud_workflows::wire::{
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
/// [`anycloud_workflows::hosting::binary::MAX_BINARY_BYTES`]), kept only if it has the SHA-256 in the
/// path and runs on a VM (ELF, x86_64 or aarch64).
pub async fn stage_binary(
    State(state): State<AppState>,
    PathParam(sha256): PathParam<String>,
    body: axum::body::Body,
) -> Result<Json<anycloud_workflows::hosting::binary::StagedBinary>, ApiError> {
    // The body is cut at the limit as it streams (`body_limit.rs`): say so with a 413.
    let past_limit = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = past_limit.clone();
    let chunks = futures::StreamExt::inspect(body.into_data_stream(), move |chunk| {
        if let Err(err) = chunk
            && super::body_limit::went_past_limit(err)
        {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    match state.ops.stage_binary(&sha256, chunks).await {
        Ok(staged) => Ok(Json(staged)),
        Err(_) if past_limit.load(std::sync::atomic::Ordering::SeqCst) => {
            Err(super::body_limit::too_large(super::body_limit::Limit::Binary))
        }
        Err(err) => Err(err.into()),
    }
}

/// A page of the live hosted APIs, by name (`?limit&after`).
pub async fn list(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<anycloud_workflows::wire::NamesQuery>,
) -> Result<Json<HostedApiList>, ApiError> {
    Ok(Json(state.ops.list_apis(&query).await?))
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

/// Starts `api.rotate_ca` (or answers the rotation in hand).
pub async fn rotate_ca(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<(StatusCode, Json<HostedApiStarted>), ApiError> {
    Ok((StatusCode::ACCEPTED, Json(state.ops.rotate_api_ca(&name).await?)))
}
