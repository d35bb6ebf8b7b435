//! The API server: HTTP/JSON under `/v1` on axum (hyper 1), with the workflow engine inside.
//!
//! ```text
//!   CLI ──bearer──> axum router ──> handler ──> one domain operation ──> records + run, one transaction
//!                                     │                                   (Engine::submit_in)
//!                                     └── its answer, or its refusal ──> HTTP status (error.rs)
//!                   Engine (claim loop, heartbeat, drivers) <──> store (SQLite | PostgreSQL)
//! ```
//!
//! Handlers only decode, call one operation of `anycloud_workflows::operations`, and encode.

mod apis;
mod auth;
mod body_limit;
pub mod checkpoint;
mod clusters;
mod console;
mod credentials;
mod deployments;
pub mod error;
mod exec;
pub mod listener;
pub mod openapi;
mod secrets;
mod start;
mod storage;
mod streams;
mod timing;
pub mod tls;
mod workflows;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post, put};
use axum::{Json, Router, middleware};

use anycloud_engine::{Store, StoreFault};
use anycloud_workflows::operations::Operations;
use anycloud_workflows::wire::{ApiStatus, Health};

pub use checkpoint::{CheckpointOptions, VmSecret};

pub use body_limit::BODY_LIMIT;
pub use start::serve;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    ops: Operations,
    token: Arc<str>,
    status: Arc<ApiStatus>,
    /// What ships this API's state, and to which bucket, if it is checkpointed.
    checkpoint: Option<(anycloud_checkpoint::Checkpointer, Arc<str>)>,
    /// The database, which health pings.
    store: Store,
    /// The followed logs and exec sessions it holds.
    streams: streams::Streams,
    /// The certificate it serves, when it serves HTTPS.
    tls: Option<Arc<tls::Serving>>,
}

/// How `anycloud api serve` was asked to run.
pub struct ServeOptions {
    /// The API's name.
    pub id: String,
    /// Port on 127.0.0.1 (0: any free port).
    pub port: u16,
    /// Where the token, the secret key and the SQLite database live.
    pub data_dir: Option<PathBuf>,
    /// PostgreSQL instead of SQLite.
    pub database_url: Option<String>,
    /// Make it the CLI's active API.
    pub use_it: bool,
    /// Run as a hosted API on this provider's VM: `sim` (the simulated cloud hosts the process on
    /// this machine), `aws` or `gcp` (a VM that `api.deploy` launched).
    pub hosted_by: Option<String>,
    /// A hosted API's public address, which its clusters' rules let reach their Kubernetes APIs
    /// (`--public-address`, else its `--tls-address`); `None` for a local API.
    pub public_address: Option<String>,
    /// Keep the SQLite state in this bucket (restored at start, every answer shipped first).
    pub checkpoint: Option<CheckpointOptions>,
    /// The address to listen on (loopback unless TLS is on).
    pub listen: std::net::IpAddr,
    /// Serve HTTPS with this certificate.
    pub tls: Option<tls::TlsSource>,
    /// A hosted API: its owner id, tagged on everything it makes at a provider (`--owner`).
    pub owner: Option<String>,
    /// A hosted API: where its clusters' control planes go (its own hosting credential).
    pub control_planes: Option<anycloud_workflows::cluster::sides::ControlPlaneHost>,
    /// Which endpoint overrides credentials may name (`--allow-insecure-endpoints`).
    pub endpoints: anycloud_workflows::providers::endpoint::EndpointPolicy,
}

impl ServeOptions {
    /// `local`, `hosted (simulated)`, `hosted (aws)`, `hosted (gcp)`.
    pub fn kind(&self) -> String {
        match self.hosted_by.as_deref() {
            None => "local".to_owned(),
            Some("sim") => "hosted (simulated)".to_owned(),
            Some(provider) => format!("hosted ({provider})"),
        }
    }
}

fn router(state: AppState, kube_routes: Router) -> Router {
    use body_limit::Limit;
    let bounded = |limit: Limit| middleware::from_fn_with_state(limit, body_limit::bounded);
    let authenticated = Router::new()
        .route("/v1/status", get(status))
        .route("/v1/openapi.json", get(openapi::serve))
        .route("/v1/console/codes", post(console::new_code))
        .route("/v1/apis", get(apis::list).post(apis::deploy))
        .route("/v1/apis/{name}", get(apis::show).delete(apis::remove))
        .route("/v1/apis/{name}/access", get(apis::access))
        .route("/v1/apis/{name}/rotate-ca", post(apis::rotate_ca))
        .route("/v1/credentials/{name}/vm-types/{vm_type}", get(credentials::vm_type))
        .route("/v1/credentials", get(credentials::list).post(credentials::create))
        .route("/v1/credentials/{name}", get(credentials::show).delete(credentials::delete))
        .route("/v1/clusters", get(clusters::list).post(clusters::create))
        .route("/v1/clusters/{name}", get(clusters::show).delete(clusters::delete))
        .route("/v1/clusters/{name}/kubeconfig", get(clusters::kubeconfig))
        .route("/v1/jobs", post(deployments::submit_job))
        .route("/v1/services", post(deployments::deploy_service))
        .route("/v1/deployments", get(deployments::list))
        .route("/v1/deployments/{id}", get(deployments::show))
        .route("/v1/deployments/{id}/terminate", post(deployments::terminate))
        .route("/v1/deployments/{id}/resubmit", post(deployments::resubmit))
        .route("/v1/deployments/{id}/upgrade", post(deployments::upgrade))
        .route("/v1/deployments/{id}/logs", get(deployments::logs))
        .route("/v1/deployments/{id}/exec", get(exec::exec))
        .route("/v1/workflows", get(workflows::list))
        .route("/v1/workflows/{id}", get(workflows::inspect))
        .route("/v1/workflows/{id}/events", get(workflows::events))
        .route("/v1/workflows/{id}/retry", post(workflows::retry))
        .route("/v1/workflows/{id}/resume", post(workflows::resume))
        .route("/v1/workflows/{id}/cancel", post(workflows::cancel))
        .route("/v1/tls/renew", post(tls::renew))
        .route_layer(bounded(Limit::Request))
        .route("/v1/binaries/{sha256}", put(apis::stage_binary).layer(bounded(Limit::Binary)))
        // A secret's values may be up to 1 MiB: its routes read larger bodies than the others.
        .route(
            "/v1/secrets",
            get(secrets::list)
                .post(secrets::create)
                .layer::<_, std::convert::Infallible>(bounded(Limit::Secret))
                .layer(DefaultBodyLimit::max(body_limit::SECRET_BODY_LIMIT)),
        )
        .route(
            "/v1/secrets/{name}",
            get(secrets::show)
                .put(secrets::set)
                .delete(secrets::delete)
                .layer::<_, std::convert::Infallible>(bounded(Limit::Secret))
                .layer(DefaultBodyLimit::max(body_limit::SECRET_BODY_LIMIT)),
        )
        .route_layer(middleware::from_fn_with_state(state.clone(), checkpoint::durable))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_token));
    Router::new()
        .route("/v1/health", get(health).layer(bounded(Limit::Request)))
        .merge(authenticated)
        .merge(console::routes().route_layer(middleware::from_fn_with_state(state.clone(), checkpoint::durable)))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn(timing::server_timing))
        .with_state(state)
        // The simulated cloud's Kubernetes APIs check their clusters' own tokens.
        .merge(kube_routes)
}

/// How long health waits for the database to answer.
const HEALTH_DATABASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Public, and 200 whenever the process answers: `database` says whether its database answered
/// (`reachable`) or not (`unreachable`, and `status` is `degraded`). A 503 would get a healthy
/// process restarted by a supervisor or dropped by a load balancer for a fault outside it; while
/// the database is away the API still answers, with `DATABASE_UNAVAILABLE` where it needs it.
/// On SQLite, `storage` says whether the disk under it takes writes (`writable`) or not
/// (`disk-full`, `read-only`, and `status` is `degraded`): reads answer, writes are refused with
/// `STORAGE_FULL` or `STORAGE_READ_ONLY`.
async fn health(State(state): State<AppState>) -> Json<Health> {
    let database = match state.store.ping(HEALTH_DATABASE_TIMEOUT).await {
        Ok(()) => "reachable",
        Err(err) => {
            tracing::warn!(error = %anycloud_engine::error_chain(&err), "health: the database did not answer");
            "unreachable"
        }
    };
    let storage = match state.store.backend() {
        "sqlite" => Some(state.store.storage_fault().map_or("writable", StoreFault::as_str)),
        _ => None,
    };
    let healthy = database == "reachable" && storage.is_none_or(|storage| storage == "writable");
    Json(Health {
        status: if healthy { "ok" } else { "degraded" }.to_owned(),
        database: database.to_owned(),
        storage: storage.map(str::to_owned),
    })
}

async fn status(State(state): State<AppState>) -> Json<ApiStatus> {
    let mut status = ApiStatus::clone(&state.status);
    if let Some((checkpointer, bucket)) = &state.checkpoint {
        let stats = checkpointer.stats();
        status.checkpoint = Some(anycloud_workflows::wire::CheckpointStatus {
            bucket: bucket.to_string(),
            generation: stats.generation,
            snapshot_bytes: stats.snapshot_bytes,
            segments: stats.segments,
            wal_bytes: stats.wal_bytes,
            last_error: stats.last_error,
        });
    }
    Json(status)
}

/// Unknown routes answer 404 only to a caller with the token: without it, every route but
/// health looks the same (401).
async fn not_found(State(state): State<AppState>, headers: axum::http::HeaderMap) -> error::ApiError {
    if !auth::has_token(&state, &headers) {
        return auth::unauthorized();
    }
    error::ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "no such route; the API's routes are listed in docs/cli.md",
    )
}

/// A known route with another method: 405 as a JSON error, again only to a caller with the token.
async fn method_not_allowed(State(state): State<AppState>, headers: axum::http::HeaderMap) -> error::ApiError {
    if !auth::has_token(&state, &headers) {
        return auth::unauthorized();
    }
    error::ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        "this route does not take that method; the API's routes and their methods are listed in docs/cli.md",
    )
}
