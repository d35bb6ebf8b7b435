//! `/v1/secrets`: create, list, show, set (a new version), delete. No route returns a value.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use anycloud_workflows::wire::{NamesQuery, NewSecret, SecretDeleted, SecretList, SecretSaved, SecretSummary};

use super::AppState;
use super::error::{ApiError, JsonBody, PathParam, QueryParams};

/// Creates a secret at version 1.
pub async fn create(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<NewSecret>,
) -> Result<(StatusCode, Json<SecretSaved>), ApiError> {
    Ok((StatusCode::CREATED, Json(state.ops.save_secret(request).await?)))
}

/// Sets a secret's next version.
pub async fn set(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
    JsonBody(request): JsonBody<NewSecret>,
) -> Result<Json<SecretSaved>, ApiError> {
    Ok(Json(state.ops.set_secret(&name, request).await?))
}

/// A page of the secrets by name (`?limit&after`), without values.
pub async fn list(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<NamesQuery>,
) -> Result<Json<SecretList>, ApiError> {
    Ok(Json(state.ops.list_secrets(&query).await?))
}

/// One secret, without values.
pub async fn show(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<Json<SecretSummary>, ApiError> {
    Ok(Json(state.ops.secret(&name).await?))
}

/// Deletes a secret that no deployment takes.
pub async fn delete(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<Json<SecretDeleted>, ApiError> {
    Ok(Json(state.ops.delete_secret(&name).await?))
}
