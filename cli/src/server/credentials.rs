//! `/v1/credentials`: save (and verify), list, show, delete.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use anycloud_workflows::wire::{
    CredentialDeleted, CredentialList, CredentialSaved, CredentialShown, NewCredential, VmTypeArchitectures,
    VmTypeQuery,
};

use super::AppState;
use super::error::{ApiError, JsonBody, PathParam, QueryParams};

/// Saves a credential and starts its verification.
pub async fn create(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<NewCredential>,
) -> Result<(StatusCode, Json<CredentialSaved>), ApiError> {
    Ok((StatusCode::CREATED, Json(state.ops.save_credential(request).await?)))
}

/// A page of the credentials by name (`?limit&after`), without secrets.
pub async fn list(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<anycloud_workflows::wire::NamesQuery>,
) -> Result<Json<CredentialList>, ApiError> {
    Ok(Json(state.ops.list_credentials(&query).await?))
}

/// One credential, without its secret.
pub async fn show(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<Json<CredentialShown>, ApiError> {
    Ok(Json(state.ops.credential(&name).await?))
}

/// Deletes a credential that nothing uses.
pub async fn delete(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<Json<CredentialDeleted>, ApiError> {
    Ok(Json(state.ops.delete_credential(&name).await?))
}

/// What a machine type runs on, asked of the credential's provider.
pub async fn vm_type(
    State(state): State<AppState>,
    PathParam((name, vm_type)): PathParam<(String, String)>,
    QueryParams(query): QueryParams<VmTypeQuery>,
) -> Result<Json<VmTypeArchitectures>, ApiError> {
    Ok(Json(state.ops.vm_type_architectures(&name, query.region.as_deref(), &vm_type).await?))
}
