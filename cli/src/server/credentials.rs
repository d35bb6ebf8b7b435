//! `/v1/credentials`: save (and verify), list, show, delete.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use anycloud_engine::Store;
use anycloud_workflows::credentials::{self, NewCredential};
use anycloud_workflows::verify_credential::{VerifyCredential, VerifyInput};

use super::AppState;
use super::error::{ApiError, JsonBody};

/// Saves a credential and starts its verification, in one transaction.
pub async fn create(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<NewCredential>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let credential = request.validate().map_err(|why| ApiError::bad_request("INVALID_CREDENTIAL", why))?;
    let mut tx = state.store.begin_write().await?;
    if credentials::exists_in(&mut tx, &credential.name).await? {
        return Err(ApiError::conflict(
            "CREDENTIAL_EXISTS",
            format!(
                "credential `{}` already exists; delete it first with `anycloud credentials delete {}`, or pick another name",
                credential.name, credential.name
            ),
        ));
    }
    let key = VerifyCredential::resource_key(&credential.name);
    let input = VerifyInput { name: credential.name.clone() };
    let run = state.engine.submit_in::<VerifyCredential>(&mut tx, &input, Some(&key)).await?;
    credentials::insert_in(&mut tx, &credential, &state.sealer, &run.to_string(), anycloud_workflows::now_ms()).await?;
    tx.commit().await?;
    state.engine.wake_up();
    let saved = credentials::get(state.store.pool(), &credential.name).await?;
    Ok((StatusCode::CREATED, Json(json!({ "credential": saved, "workflow_id": run }))))
}

/// Every credential, without secrets.
pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let all = credentials::list(state.store.pool()).await?;
    Ok(Json(json!({ "credentials": all })))
}

/// One credential, without its secret.
pub async fn show(State(state): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let credential = credentials::get(state.store.pool(), &name).await?.ok_or_else(|| not_found(&name))?;
    Ok(Json(json!({ "credential": credential })))
}

/// Deletes a credential that nothing uses.
pub async fn delete(State(state): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let mut tx = state.store.begin_write().await?;
    if !credentials::exists_in(&mut tx, &name).await? {
        return Err(not_found(&name));
    }
    let busy = Store::unfinished_runs_in(&mut tx, &VerifyCredential::resource_key(&name)).await?;
    if let Some((run, status)) = busy.first() {
        return Err(ApiError::conflict(
            "CREDENTIAL_IN_USE",
            format!(
                "credential `{name}` is in use by workflow {run} ({status}); wait for it to end, or cancel it with \
                 `anycloud workflow cancel {run}`, then delete again"
            ),
        ));
    }
    credentials::delete_in(&mut tx, &name).await?;
    tx.commit().await?;
    Ok(Json(json!({ "deleted": name })))
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(
        "CREDENTIAL_NOT_FOUND",
        format!("credential `{name}` does not exist; `anycloud credentials list` shows the saved ones"),
    )
}
