//! `/v1/workflows`: list, inspect, the timeline, and operator actions.

use axum::Json;
use axum::extract::State;

use anycloud_workflows::wire::{
    EventsQuery, WorkflowActed, WorkflowAction, WorkflowDetail, WorkflowEvents, WorkflowList, WorkflowQuery,
};

use super::AppState;
use super::error::{ApiError, PathParam, QueryParams};

/// Runs, newest first.
pub async fn list(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<WorkflowQuery>,
) -> Result<Json<WorkflowList>, ApiError> {
    Ok(Json(state.ops.list_workflows(query).await?))
}

/// One run with its steps and plan.
pub async fn inspect(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<WorkflowDetail>, ApiError> {
    Ok(Json(state.ops.inspect_workflow(&id).await?))
}

/// A page of the run's timeline after an entry (`?after&limit`).
pub async fn events(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Json<WorkflowEvents>, ApiError> {
    Ok(Json(state.ops.workflow_events(&id, query.after.unwrap_or(0), query.limit).await?))
}

/// Runs the current step now.
pub async fn retry(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<WorkflowActed>, ApiError> {
    Ok(Json(state.ops.act_on_workflow(&id, WorkflowAction::Retry).await?))
}

/// Continues a parked run with a fresh retry budget.
pub async fn resume(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<WorkflowActed>, ApiError> {
    Ok(Json(state.ops.act_on_workflow(&id, WorkflowAction::Resume).await?))
}

/// Cancels: the run turns back.
pub async fn cancel(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<WorkflowActed>, ApiError> {
    Ok(Json(state.ops.act_on_workflow(&id, WorkflowAction::Cancel).await?))
}
