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
mod credentials;
mod deployments;
pub mod error;
mod exec;
pub mod listener;
mod secrets;
mod storage;
mod streams;
mod timing;
pub mod tls;
mod workflows;

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post, put};
use axum::{Json, Router, middleware};
use rand::RngCore;
use serde_json::{Value, json};

use anycloud_engine::{Engine, EngineConfig, EngineError, Store, StoreFault};
use anycloud_sim::SimCloud;
use anycloud_workflows::api::ApiStatus;
use anycloud_workflows::db::{Db, sealing_key};
use anycloud_workflows::deps::Deps;
use anycloud_workflows::operations::Operations;
use anycloud_workflows::providers::{Clouds, SimulatedCloud};
use anycloud_workflows::secrets::SecretBox;

use crate::config::{ApiEntry, Config, data_home};
use crate::exit::{CliError, CliResult, NOT_OBSERVED, OK};
use crate::seams::Seams;
pub use checkpoint::{CheckpointOptions, VmSecret};

pub use body_limit::BODY_LIMIT;

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
    pub control_planes: Option<anycloud_workflows::cluster_sides::ControlPlaneHost>,
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

/// Runs an API until SIGTERM or SIGINT.
pub async fn serve(options: ServeOptions, seams: &Seams) -> CliResult {
    anycloud_workflows::names::check_dns_label("API", &options.id).map_err(CliError::bad_input)?;
    if !options.listen.is_loopback() && options.tls.is_none() {
        return Err(CliError::bad_input(format!(
            "API `{}` would listen on {} in plain HTTP, where its bearer token crosses the network readable: give \
             --tls-cert and --tls-key, or listen on 127.0.0.1",
            options.id, options.listen
        )));
    }
    let data_dir = options.data_dir.clone().unwrap_or_else(|| data_home().join("apis").join(&options.id));
    let io = |what: &str, err: std::io::Error| {
        CliError::new(NOT_OBSERVED, "DATA_DIR", format!("{what} {}: {err}", data_dir.display()))
    };
    storage::check(&data_dir)?;
    std::fs::create_dir_all(&data_dir).map_err(|err| io("creating the data directory", err))?;
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|err| io("restricting the data directory", err))?;
    let taken_over = match &options.checkpoint {
        Some(_) if options.database_url.is_some() => {
            return Err(CliError::bad_input(
                "--checkpoint-bucket and --database-url are alternatives: state lives either in SQLite checkpointed \
                 to the bucket or in the database named",
            ));
        }
        Some(checkpoint) => Some(checkpoint::restore(checkpoint, &options.id, &data_dir).await?),
        None => None,
    };
    // After the restore: a deployed API's CA comes from its keys secret.
    let tls = match &options.tls {
        Some(source) => {
            let keys_secret = options.checkpoint.as_ref().and_then(|checkpoint| checkpoint.keys_secret.clone());
            Some(tls::load(source, &data_dir, keys_secret).map_err(CliError::bad_input)?)
        }
        None => None,
    };
    let token = load_or_create_token(&data_dir).map_err(|err| io("storing the API token in", err))?;
    let sealer = SecretBox::load_or_create(&data_dir)
        .map_err(|err| CliError::new(NOT_OBSERVED, "SECRET_KEY", anycloud_engine::error_chain(&err)))?;
    let database_url =
        options.database_url.clone().unwrap_or_else(|| format!("sqlite://{}", data_dir.join("anycloud.db").display()));
    let (store, db) = open_database(&database_url, taken_over.is_some()).await?;
    sealing_key::check(&db, &sealer).await.map_err(|err| {
        CliError::new(
            NOT_OBSERVED,
            "SECRET_KEY_MISMATCH",
            format!("API `{}` on {}: {}", options.id, redact(&database_url), anycloud_engine::error_chain(&err)),
        )
    })?;

    let connections = listener::max_connections();
    let listener = tokio::net::TcpListener::bind((options.listen, options.port)).await.map_err(|err| {
        CliError::new(NOT_OBSERVED, "LISTEN_FAILED", format!("listening on {}:{}: {err}", options.listen, options.port))
    })?;
    let mut address =
        listener.local_addr().map_err(|err| CliError::new(NOT_OBSERVED, "LISTEN_FAILED", err.to_string()))?;
    if address.ip().is_unspecified() {
        address.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let url = format!("{}://{address}", if tls.is_some() { "https" } else { "http" });

    // The simulated cloud runs its clusters' Pods as processes of this machine: it is on only for
    // an API meant for it (a local one, or one the simulated cloud hosts), never on an AWS or GCP VM.
    let sim = match options.hosted_by.as_deref() {
        None | Some("sim") => {
            let kube_tls = bind_sim_kube(&data_dir).await?;
            let kube_tls_base = format!(
                "https://{}",
                kube_tls.local_addr().map_err(|err| CliError::new(NOT_OBSERVED, "LISTEN_FAILED", err.to_string()))?
            );
            let sim = SimCloud::new(db.clone(), sealer.clone(), url.clone())
                .with_kubelet_dir(data_dir.join("sim-kubelet"))
                .with_kube_tls(kube_tls_base);
            Some((sim, kube_tls))
        }
        Some(_) => None,
    };
    // Take the bucket over before the engine runs a step: a fenced API must not act.
    let checkpointer = match (taken_over, &options.checkpoint) {
        (Some(taken), Some(checkpoint)) => Some(checkpoint::start(taken, checkpoint, &options.id).await?),
        _ => None,
    };
    let deps = Deps {
        db,
        sealer,
        clouds: Clouds::new(sim.as_ref().map(|(sim, _)| Arc::new(sim.clone()) as Arc<dyn SimulatedCloud>))
            .with_endpoint_policy(options.endpoints)
            .with_owner(options.owner.clone()),
        seams: seams.api.clone(),
        api_address: options.public_address.clone(),
        binaries: data_dir.join("binaries"),
    };
    // A stable owner name: after a crash, the restarted API takes its runs back at once. The
    // engine holds it exclusively, so a second API with this id on this database is refused.
    let owner = format!("api-{}", options.id);
    let mut config = EngineConfig::named(&owner);
    // A checkpointed API acts on the world only once what came before is in the bucket: a lost
    // disk then loses at most the step in flight, which may run again (docs/hosting.md).
    config.before_act = checkpointer.clone().map(|checkpointer| {
        anycloud_engine::BeforeAct(Arc::new(move || {
            let checkpointer = checkpointer.clone();
            Box::pin(async move { checkpointer.flush().await })
        }))
    });
    let engine = Engine::start(store.clone(), anycloud_workflows::registry(&deps), config)
        .await
        .map_err(|err| engine_refused(&options.id, &err))?;
    let engine = Arc::new(engine);
    if options.use_it {
        let mut config = Config::load()?;
        config.apis.insert(
            options.id.clone(),
            ApiEntry {
                url: url.clone(),
                token: token.clone(),
                kind: options.kind(),
                ca_pem: tls.as_ref().map(|tls| tls.pinned_pem.clone()),
                deployed_by: None,
            },
        );
        config.active = Some(options.id.clone());
        config.save()?;
    }
    let status = ApiStatus {
        id: options.id.clone(),
        kind: options.kind(),
        store: store.backend().to_owned(),
        engine_owner: owner,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        test_seams: seams.describe(),
        checkpoint: None,
        endpoints: options.endpoints,
    };
    let state = AppState {
        ops: Operations::new(engine.clone(), deps, &options.id, options.hosted_by.is_some())
            .with_control_planes(options.control_planes.clone()),
        token: token.into(),
        status: Arc::new(status),
        checkpoint: checkpointer
            .clone()
            .zip(options.checkpoint.as_ref().map(|checkpoint| checkpoint.url.to_string().into())),
        store: store.clone(),
        streams: streams::Streams::default(),
        tls: tls.as_ref().map(|tls| tls.serving.clone()),
    };
    // Listen for SIGTERM before saying we are up, so that a stop right after start is clean.
    let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|err| CliError::new(NOT_OBSERVED, "SIGNALS", format!("listening for SIGTERM: {err}")))?;
    for seam in &state.status.test_seams {
        println!("WARNING: TEST SEAM ON (never in production): {seam}");
        tracing::warn!(%seam, "test seam on: this binary is the test suite's, never run it in production");
    }
    // Each simulated cluster's kube-proxy is this very binary, run as `sim-kube-proxy`.
    let proxy = std::env::current_exe()
        .map(|exe| anycloud_sim::kube::ProxyCommand::new(exe, ["sim-kube-proxy"]))
        .map_err(|err| CliError::new(NOT_OBSERVED, "API_START", format!("finding this binary's path: {err}")))?;
    if options.endpoints == anycloud_workflows::providers::endpoint::EndpointPolicy::AllowInsecure {
        println!(
            "WARNING: plain http:// and loopback endpoints allowed (--allow-insecure-endpoints): for test peers only"
        );
    }
    println!("anycloud API `{}` ({}) listening on {url} (store: {})", options.id, options.kind(), store.backend());
    let _ = std::io::stdout().flush();
    tracing::info!(api = %options.id, %url, store = store.backend(), "API started");

    // The simulated control planes' Kubernetes APIs: one set of routes (and one reconcile loop),
    // served over TLS as k3s serves them, and on this API's port too.
    let (kube_routes, kube_tls) = match sim {
        Some((sim, kube_tls)) => {
            let routes = anycloud_sim::kube::router(Arc::new(sim.clone()), sim.kube_storage(), proxy);
            let serving = tokio::spawn(anycloud_sim::kube::tls::serve(kube_tls, routes.clone(), Arc::new(sim)));
            (routes, Some(serving))
        }
        None => (Router::new(), None),
    };
    let app = router(state, kube_routes);
    let tls_config = tls.as_ref().map(|tls| tls.config.clone());
    let renewing = tls.as_ref().map(|tls| tokio::spawn(tls.serving.clone().keep_renewed(tls::RENEWAL_CHECK)));
    listener::serve(listener, app, tls_config, connections, stop_signal(terminate)).await;
    if let Some(kube_tls) = kube_tls {
        kube_tls.abort();
    }
    if let Some(renewing) = renewing {
        renewing.abort();
    }
    tracing::info!("stopping: letting steps in flight finish and releasing leases");
    match Arc::try_unwrap(engine) {
        Ok(engine) => engine.shutdown(Duration::from_secs(30)).await,
        Err(engine) => drop(engine),
    }
    if let Some(checkpointer) = &checkpointer {
        checkpointer.stop().await;
    }
    store.close().await;
    Ok(OK)
}

/// The engine's store and the domain's tables, brought up to date. A checkpointed SQLite
/// database never checkpoints its WAL by itself: the checkpointer does, when it compacts.
async fn open_database(url: &str, checkpointed: bool) -> Result<(Store, Db), CliError> {
    let fail = |err: EngineError| {
        CliError::new(
            NOT_OBSERVED,
            "DATABASE_UNAVAILABLE",
            format!("opening the database {}: {}", redact(url), anycloud_engine::error_chain(&err)),
        )
    };
    let store = if checkpointed {
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
            .map_err(|err| fail(err.into()))?
            .pragma("wal_autocheckpoint", "0");
        Store::open_sqlite(options).await.map_err(fail)?
    } else {
        Store::connect(url).await.map_err(fail)?
    };
    let db = Db::open(&store).await.map_err(fail)?;
    Ok((store, db))
}

/// Why the engine would not start, for the person who ran `api serve`.
fn engine_refused(id: &str, err: &EngineError) -> CliError {
    match err {
        EngineError::OwnerInUse(_) => CliError::new(
            NOT_OBSERVED,
            "API_ALREADY_RUNNING",
            format!(
                "API `{id}` is already running on this database (another process holds its engine's name); stop \
                 it first (`anycloud api stop {id}`), or start this one with another --id"
            ),
        ),
        other => CliError::new(
            NOT_OBSERVED,
            "ENGINE_FAILED",
            format!("starting the workflow engine: {}", anycloud_engine::error_chain(other)),
        ),
    }
}

/// A database URL without its secrets: the password of its user info, and the value of every
/// query parameter whose name speaks of one (`password`, `sslpassword`, `token`, `secret`,
/// `key`, ...), as libpq and sqlx take a password in either place.
fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut out = match base.find("://") {
        Some(scheme) => {
            let rest = &base[scheme + 3..];
            let authority = rest.split('/').next().unwrap_or(rest);
            match authority.rfind('@') {
                Some(at) => {
                    let user = authority[..at].split(':').next().unwrap_or("");
                    format!("{}{user}:***{}", &base[..scheme + 3], &rest[at..])
                }
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    if let Some(query) = query {
        let secret = |name: &str| {
            let name = name.to_ascii_lowercase();
            ["password", "passwd", "pwd", "secret", "token", "key"].iter().any(|word| name.contains(word))
        };
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if secret(name) => format!("{name}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

/// The listener of the simulated control planes' TLS endpoint: on the port this API used before
/// (kept in `sim-kube-port`, so kubeconfigs stay valid across restarts), or a new one.
async fn bind_sim_kube(data_dir: &Path) -> Result<tokio::net::TcpListener, CliError> {
    let failed = |err: std::io::Error| {
        CliError::new(NOT_OBSERVED, "LISTEN_FAILED", format!("the simulated Kubernetes's TLS listener: {err}"))
    };
    let path = data_dir.join("sim-kube-port");
    let before = std::fs::read_to_string(&path).ok().and_then(|port| port.trim().parse::<u16>().ok());
    let listener = match before {
        Some(port) => match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => listener,
            Err(_) => tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.map_err(failed)?,
        },
        None => tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.map_err(failed)?,
    };
    let port = listener.local_addr().map_err(failed)?.port();
    if before != Some(port) {
        std::fs::write(&path, port.to_string()).map_err(failed)?;
    }
    Ok(listener)
}

fn router(state: AppState, kube_routes: Router) -> Router {
    use body_limit::Limit;
    let bounded = |limit: Limit| middleware::from_fn_with_state(limit, body_limit::bounded);
    let authenticated = Router::new()
        .route("/v1/status", get(status))
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
async fn health(State(state): State<AppState>) -> Json<Value> {
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
    let mut body = json!({ "status": if healthy { "ok" } else { "degraded" }, "database": database });
    if let Some(storage) = storage {
        body["storage"] = json!(storage);
    }
    Json(body)
}

async fn status(State(state): State<AppState>) -> Json<ApiStatus> {
    let mut status = ApiStatus::clone(&state.status);
    if let Some((checkpointer, bucket)) = &state.checkpoint {
        let stats = checkpointer.stats();
        status.checkpoint = Some(anycloud_workflows::api::CheckpointStatus {
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
        assert_eq!(
            super::redact("postgres://db/x?user=app&password=hunter2&sslmode=require"),
            "postgres://db/x?user=app&password=***&sslmode=require"
        );
        assert_eq!(
            super::redact("postgres://app:pw@db/x?sslpassword=s3&auth_token=t0k&API_KEY=k&client_secret=c"),
            "postgres://app:***@db/x?sslpassword=***&auth_token=***&API_KEY=***&client_secret=***"
        );
        // An `@` in the query is not user info.
        assert_eq!(super::redact("postgres://db/x?password=a@b"), "postgres://db/x?password=***");
    }
}
