//! `/v1/workflows`: list, inspect, the timeline, and operator actions.

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use anycloud_engine::{RunFilter, RunStatus};

use super::AppState;
use super::error::ApiError;

/// Filters of `GET /v1/workflows`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    kind: Option<String>,
    status: Option<String>,
    resource: Option<String>,
    limit: Option<u32>,
    before: Option<i64>,
}

/// Runs, newest first.
pub async fn list(State(state): State<AppState>, Query(query): Query<ListQuery>) -> Result<Json<Value>, ApiError> {
    let status = query
        .status
        .as_deref()
        .map(str::parse::<RunStatus>)
        .transpose()
        .map_err(|why| ApiError::bad_request("INVALID_STATUS", why))?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("INVALID_LIMIT", format!("limit {limit} is out of range: use 1 to 1000")));
    }
    let filter = RunFilter {
        kind: query.kind,
        status,
        resource_key: query.resource,
        before_seq: query.before,
        limit: Some(limit),
    };
    let runs = state.engine.list(&filter).await?;
    Ok(Json(json!({ "workflows": runs })))
}

/// One run with its steps and plan.
pub async fn inspect(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let detail = state.engine.inspect(parse_id(&id)?).await?;
    Ok(Json(json!({ "workflow": detail, "now": anycloud_workflows::now_ms() })))
}

/// Query of the timeline.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    after: Option<i64>,
}

/// The run's timeline after an event sequence number.
pub async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
) -> Result<Json<Value>, ApiError> {
    let events = state.engine.events(parse_id(&id)?, query.after.unwrap_or(0)).await?;
    Ok(Json(json!({ "events": events })))
}

/// Runs the current step now.
pub async fn retry(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let status = state.engine.retry(parse_id(&id)?).await?;
    Ok(Json(json!({ "id": id, "status": status })))
}

/// Continues a parked run with a fresh retry budget.
pub async fn resume(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let status = state.engine.resume(parse_id(&id)?).await?;
    Ok(Json(json!({ "id": id, "status": status })))
}

/// Cancels: completed steps are undone.
pub async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let status = state.engine.cancel(parse_id(&id)?).await?;
    Ok(Json(json!({ "id": id, "status": status })))
}

fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    id.parse().map_err(|_| {
        ApiError::bad_request(
            "INVALID_WORKFLOW_ID",
            format!("`{id}` is not a workflow id (a UUID such as 0b9c…); `anycloud workflow list` shows them"),
        )
    })
}
