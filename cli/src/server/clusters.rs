//! `/v1/clusters`: create (hosted APIs only), list, status, delete, kubeconfig.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use anycloud_workflows::wire::{ClusterCreated, ClusterDetail, ClusterList, Kubeconfig, NewCluster};

use super::AppState;
use super::error::{ApiError, JsonBody, PathParam, QueryParams};

/// Stores the cluster's intent and starts its creation.
pub async fn create(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<NewCluster>,
) -> Result<(StatusCode, Json<ClusterCreated>), ApiError> {
    Ok((StatusCode::CREATED, Json(state.ops.create_cluster(request).await?)))
}

/// A page of the clusters that are not deleted, by name (`?limit&after`), with their VM counts.
pub async fn list(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<anycloud_workflows::wire::NamesQuery>,
) -> Result<Json<ClusterList>, ApiError> {
    Ok(Json(state.ops.list_clusters(&query).await?))
}

/// One cluster: spec, phase, VMs, endpoint, the workflow on it and what went wrong.
pub async fn show(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<Json<ClusterDetail>, ApiError> {
    Ok(Json(state.ops.cluster_status(&name).await?))
}

/// Starts `cluster.delete`, unless a deployment still references the cluster.
pub async fn delete(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<(StatusCode, Json<ClusterDetail>), ApiError> {
    Ok((StatusCode::ACCEPTED, Json(state.ops.delete_cluster(&name).await?)))
}

/// A kubeconfig for the ready cluster: its server, CA and admin token.
pub async fn kubeconfig(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<Json<Kubeconfig>, ApiError> {
    Ok(Json(state.ops.cluster_kubeconfig(&name).await?))
}
