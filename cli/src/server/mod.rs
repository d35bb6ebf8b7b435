//! The API server: HTTP/JSON under `/v1` on axum (hyper 1), with the workflow engine inside.
//!
//! ```text
//!   CLI ──bearer──> axum router ──> handlers ──> domain records (SQL) ┐ one transaction
//!                                           └──> Engine::submit_in ───┘
//!                   Engine (claim loop, heartbeat, drivers) <──> store (SQLite | PostgreSQL)
//! ```

mod auth;
mod clusters;
mod credentials;
pub mod error;
mod timing;
mod workflows;

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use rand::RngCore;
use serde_json::{Value, json};

use anycloud_engine::{Engine, EngineConfig, Registry, Store};
use anycloud_workflows::cluster_create::CreateCluster;
use anycloud_workflows::cluster_delete::DeleteCluster;
use anycloud_workflows::cluster_deps::{ClusterDeps, TestSeams};
use anycloud_workflows::providers::sim::SimCloud;
use anycloud_workflows::providers::sim_kube;
use anycloud_workflows::secrets::SecretBox;
use anycloud_workflows::verify_credential::VerifyCredential;

use crate::config::{ApiEntry, Config, data_home};
use crate::exit::{CliError, CliResult, NOT_OBSERVED, OK};

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 64 * 1024;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    engine: Arc<Engine>,
    store: Store,
    sealer: SecretBox,
    token: Arc<str>,
    id: Arc<str>,
    /// A hosted API (it may create clusters); a local one may not.
    hosted: bool,
    sim: SimCloud,
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
    /// Run as a hosted API on this provider's VM (only `sim` for now: the simulated cloud hosts
    /// the process on this machine).
    pub hosted_by: Option<String>,
}

impl ServeOptions {
    /// `local`, or `hosted (simulated)`.
    pub fn kind(&self) -> &'static str {
        if self.hosted_by.is_some() { "hosted (simulated)" } else { "local" }
    }
}

/// Runs a local API until SIGTERM or SIGINT.
pub async fn serve(options: ServeOptions) -> CliResult {
    anycloud_workflows::names::check_dns_label("API", &options.id).map_err(CliError::bad_input)?;
    let data_dir = options.data_dir.clone().unwrap_or_else(|| data_home().join("apis").join(&options.id));
    let io =
        |what: &str, err: std::io::Error| CliError::new(NOT_OBSERVED, format!("{what} {}: {err}", data_dir.display()));
    std::fs::create_dir_all(&data_dir).map_err(|err| io("creating the data directory", err))?;
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|err| io("restricting the data directory", err))?;
    let token = load_or_create_token(&data_dir).map_err(|err| io("storing the API token in", err))?;
    let sealer = SecretBox::load_or_create(&data_dir)
        .map_err(|err| CliError::new(NOT_OBSERVED, anycloud_engine::error_chain(&err)))?;
    let database_url =
        options.database_url.clone().unwrap_or_else(|| format!("sqlite://{}", data_dir.join("anycloud.db").display()));
    let store = open_store(&database_url).await?;

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", options.port))
        .await
        .map_err(|err| CliError::new(NOT_OBSERVED, format!("listening on 127.0.0.1:{}: {err}", options.port)))?;
    let address = listener.local_addr().map_err(|err| CliError::new(NOT_OBSERVED, err.to_string()))?;
    let url = format!("http://{address}");

    let sim = SimCloud::new(store.pool().clone(), url.clone());
    let cluster_deps = ClusterDeps {
        pool: store.pool().clone(),
        sealer: sealer.clone(),
        sim: sim.clone(),
        seams: TestSeams::from_env(),
    };
    let registry = Registry::new()
        .with(Arc::new(VerifyCredential { pool: store.pool().clone(), sealer: sealer.clone(), sim: sim.clone() }))
        .with(Arc::new(CreateCluster { deps: cluster_deps.clone() }))
        .with(Arc::new(DeleteCluster { deps: cluster_deps }));
    // A stable owner name: after a crash, the restarted API takes its runs back at once.
    let engine = Engine::start(store.clone(), registry, EngineConfig::named(format!("api-{}", options.id)))
        .await
        .map_err(|err| {
            CliError::new(NOT_OBSERVED, format!("starting the workflow engine: {}", anycloud_engine::error_chain(&err)))
        })?;
    let engine = Arc::new(engine);
    if options.use_it {
        let mut config = Config::load()?;
        config.apis.insert(
            options.id.clone(),
            ApiEntry { url: url.clone(), token: token.clone(), kind: options.kind().into() },
        );
        config.active = Some(options.id.clone());
        config.save()?;
    }
    let state = AppState {
        engine: engine.clone(),
        store: store.clone(),
        sealer,
        token: token.into(),
        id: options.id.clone().into(),
        hosted: options.hosted_by.is_some(),
        sim: sim.clone(),
    };
    // Listen for SIGTERM before saying we are up, so that a stop right after start is clean.
    let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|err| CliError::new(NOT_OBSERVED, format!("listening for SIGTERM: {err}")))?;
    println!("anycloud API `{}` ({}) listening on {url} (store: {})", options.id, options.kind(), store.backend());
    let _ = std::io::stdout().flush();
    tracing::info!(api = %options.id, %url, store = store.backend(), "API started");

    axum::serve(listener, router(state))
        .with_graceful_shutdown(stop_signal(terminate))
        .await
        .map_err(|err| CliError::new(NOT_OBSERVED, format!("serving HTTP: {err}")))?;
    tracing::info!("stopping: letting steps in flight finish and releasing leases");
    match Arc::try_unwrap(engine) {
        Ok(engine) => engine.shutdown(Duration::from_secs(30)).await,
        Err(engine) => drop(engine),
    }
    store.close().await;
    Ok(OK)
}

async fn open_store(url: &str) -> Result<Store, CliError> {
    let fail = |err: anycloud_engine::EngineError| {
        CliError::new(
            NOT_OBSERVED,
            format!("opening the database {}: {}", redact(url), anycloud_engine::error_chain(&err)),
        )
    };
    let store = Store::connect(url).await.map_err(fail)?;
    anycloud_workflows::migrate(&store).await.map_err(fail)?;
    Ok(store)
}

/// A database URL without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

fn router(state: AppState) -> Router {
    let sim = state.sim.clone();
    let authenticated = Router::new()
        .route("/v1/status", get(status))
        .route("/v1/credentials", get(credentials::list).post(credentials::create))
        .route("/v1/credentials/{name}", get(credentials::show).delete(credentials::delete))
        .route("/v1/clusters", get(clusters::list).post(clusters::create))
        .route("/v1/clusters/{name}", get(clusters::show).delete(clusters::delete))
        .route("/v1/workflows", get(workflows::list))
        .route("/v1/workflows/{id}", get(workflows::inspect))
        .route("/v1/workflows/{id}/events", get(workflows::events))
        .route("/v1/workflows/{id}/retry", post(workflows::retry))
        .route("/v1/workflows/{id}/resume", post(workflows::resume))
        .route("/v1/workflows/{id}/cancel", post(workflows::cancel))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_token));
    Router::new()
        .route("/v1/health", get(health))
        .merge(authenticated)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn(timing::server_timing))
        .with_state(state)
        // The simulated cloud's Kubernetes APIs check their clusters' own tokens.
        .merge(sim_kube::router(sim))
}

async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

async fn status(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "id": &*state.id,
        "kind": if state.hosted { "hosted (simulated)" } else { "local" },
        "store": state.store.backend(),
        "engine_owner": state.engine.owner(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// Unknown routes answer 404 only to a caller with the token: without it, every route but
/// health looks the same (401).
async fn not_found(State(state): State<AppState>, headers: axum::http::HeaderMap) -> error::ApiError {
    if !auth::has_token(&state, &headers) {
        return auth::unauthorized();
    }
    error::ApiError::not_found("NOT_FOUND", "no such route; the API's routes are listed in docs/cli.md")
}

/// The token is 32 random bytes, hex, in `token` (mode 0600), made on first start.
fn load_or_create_token(dir: &Path) -> std::io::Result<String> {
    let path = dir.join("token");
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => Ok(token.trim().to_owned()),
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
        _ => {
            let mut bytes = [0u8; 32];
            rand::rng().fill_bytes(&mut bytes);
            let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let mut file =
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&path)?;
            file.write_all(token.as_bytes())?;
            file.sync_all()?;
            Ok(token)
        }
    }
}

async fn stop_signal(mut terminate: tokio::signal::unix::Signal) {
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn database_urls_lose_their_password() {
        assert_eq!(super::redact("postgres://app:hunter2@db:5432/x"), "postgres://app:***@db:5432/x");
        assert_eq!(super::redact("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
    }
}
