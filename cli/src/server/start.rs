//! Starting an API and stopping it: `api serve` without `--credentials`, in phases. The data
//! directory; the state (restored from a bucket, a TLS identity, the token, the sealing key, the
//! database); the listener; the simulated cloud when the API is meant for it; the engine; then
//! serving until SIGTERM or SIGINT, and stopping in order.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use rand::RngCore;

use anycloud_engine::{Engine, EngineConfig, EngineError, Store};
use anycloud_sim::SimCloud;
use anycloud_workflows::db::{Db, sealing_key};
use anycloud_workflows::operations::Operations;
use anycloud_workflows::providers::endpoint::EndpointPolicy;
use anycloud_workflows::providers::{Clouds, SimulatedCloud};
use anycloud_workflows::secrets::SecretBox;
use anycloud_workflows::wire::ApiStatus;
use anycloud_workflows::workflows::deps::Deps;

use super::{AppState, ServeOptions, checkpoint, listener, router, storage, streams, tls};
use crate::config::{ApiEntry, Config, api_data_dir};
use crate::exit::{CliError, CliResult, NOT_OBSERVED, OK};
use crate::seams::Seams;

/// Runs an API until SIGTERM or SIGINT.
pub async fn serve(options: ServeOptions, seams: &Seams) -> CliResult {
    check(&options)?;
    let data_dir = prepare_data_dir(&options)?;
    let opened = open_state(&options, &data_dir).await?;
    let Opened { taken_over, tls, token, sealer, store, db } = opened;
    let connections = listener::max_connections();
    let (listener, url) = bind(&options, tls.is_some()).await?;
    // The simulated cloud runs its clusters' Pods as processes of this machine: it is on only for
    // an API meant for it (a local one, or one the simulated cloud hosts), never on an AWS or GCP VM.
    let sim = match options.hosted_by.as_deref() {
        None | Some("sim") => Some(start_sim(&data_dir, &db, &sealer, &url).await?),
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
        kube_clients: Default::default(),
        binaries: data_dir.join("binaries"),
    };
    let (engine, owner) = start_engine(&options, &store, &deps, checkpointer.clone()).await?;
    let watching = tokio::spawn(anycloud_workflows::watches::watch_clusters(deps.clone(), engine.clone()));
    if options.use_it {
        remember(&options, &url, &token, tls.as_ref())?;
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
    announce(&options, &state, &url);
    let kube = match sim {
        Some((sim, kube_tls)) => Some(serve_sim_kube(sim, kube_tls).await?),
        None => None,
    };
    let kube_routes = kube.as_ref().map_or_else(Router::new, |(routes, _)| routes.clone());
    let app = router(state, kube_routes);
    let tls_config = tls.as_ref().map(|tls| tls.config.clone());
    let renewing = tls.as_ref().map(|tls| tokio::spawn(tls.serving.clone().keep_renewed(tls::RENEWAL_CHECK)));
    listener::serve(listener, app, tls_config, connections, stop_signal(terminate)).await;
    let background = [kube.map(|(_, serving)| serving), renewing, Some(watching)];
    for task in background.into_iter().flatten() {
        // Awaited, so that what the task held (the watches hold the engine) is dropped before
        // the engine is shut down.
        task.abort();
        let _ = task.await;
    }
    stop(engine, checkpointer, store).await;
    Ok(OK)
}

/// What `serve` refuses before it touches anything.
fn check(options: &ServeOptions) -> Result<(), CliError> {
    anycloud_workflows::names::check_dns_label("API", &options.id).map_err(CliError::bad_input)?;
    if !options.listen.is_loopback() && options.tls.is_none() {
        return Err(CliError::bad_input(format!(
            "API `{}` would listen on {} in plain HTTP, where its bearer token crosses the network readable: give \
             --tls-cert and --tls-key, or listen on 127.0.0.1",
            options.id, options.listen
        )));
    }
    if options.checkpoint.is_some() && options.database_url.is_some() {
        return Err(CliError::bad_input(
            "--checkpoint-bucket and --database-url are alternatives: state lives either in SQLite checkpointed to \
             the bucket or in the database named",
        ));
    }
    Ok(())
}

/// The data directory, made if missing, readable by this user only.
fn prepare_data_dir(options: &ServeOptions) -> Result<PathBuf, CliError> {
    let data_dir = options.data_dir.clone().unwrap_or_else(|| api_data_dir(&options.id));
    storage::check(&data_dir)?;
    std::fs::create_dir_all(&data_dir).map_err(|err| data_dir_error(&data_dir, "creating the data directory", err))?;
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|err| data_dir_error(&data_dir, "restricting the data directory", err))?;
    Ok(data_dir)
}

fn data_dir_error(data_dir: &Path, what: &str, err: std::io::Error) -> CliError {
    CliError::new(NOT_OBSERVED, "DATA_DIR", format!("{what} {}: {err}", data_dir.display()))
}

/// What an API starts from: its state restored from its bucket (when checkpointed), its TLS
/// identity, token and sealing key, and its database.
struct Opened {
    taken_over: Option<checkpoint::TakenOver>,
    tls: Option<tls::Tls>,
    token: String,
    sealer: SecretBox,
    store: Store,
    db: Db,
}

async fn open_state(options: &ServeOptions, data_dir: &Path) -> Result<Opened, CliError> {
    let taken_over = match &options.checkpoint {
        Some(checkpoint) => Some(checkpoint::restore(checkpoint, &options.id, data_dir).await?),
        None => None,
    };
    // After the restore: a deployed API's CA comes from its keys secret.
    let tls = match &options.tls {
        Some(source) => {
            let keys_secret = options.checkpoint.as_ref().and_then(|checkpoint| checkpoint.keys_secret.clone());
            Some(tls::load(source, data_dir, keys_secret).map_err(CliError::bad_input)?)
        }
        None => None,
    };
    let token =
        load_or_create_token(data_dir).map_err(|err| data_dir_error(data_dir, "storing the API token in", err))?;
    let sealer = SecretBox::load_or_create(data_dir)
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
    Ok(Opened { taken_over, tls, token, sealer, store, db })
}

/// The API's listener, and the URL it is reached at on this machine.
async fn bind(options: &ServeOptions, https: bool) -> Result<(tokio::net::TcpListener, String), CliError> {
    let listener = tokio::net::TcpListener::bind((options.listen, options.port)).await.map_err(|err| {
        CliError::new(NOT_OBSERVED, "LISTEN_FAILED", format!("listening on {}:{}: {err}", options.listen, options.port))
    })?;
    let mut address =
        listener.local_addr().map_err(|err| CliError::new(NOT_OBSERVED, "LISTEN_FAILED", err.to_string()))?;
    if address.ip().is_unspecified() {
        address.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let url = format!("{}://{address}", if https { "https" } else { "http" });
    Ok((listener, url))
}

/// The simulated cloud of this API, and the listener its control planes' TLS endpoint serves on.
async fn start_sim(
    data_dir: &Path,
    db: &Db,
    sealer: &SecretBox,
    url: &str,
) -> Result<(SimCloud, tokio::net::TcpListener), CliError> {
    let kube_tls = bind_sim_kube(data_dir).await?;
    let kube_tls_base = format!(
        "https://{}",
        kube_tls.local_addr().map_err(|err| CliError::new(NOT_OBSERVED, "LISTEN_FAILED", err.to_string()))?
    );
    let sim = SimCloud::new(db.clone(), sealer.clone(), url.to_owned())
        .with_kubelet_dir(data_dir.join("sim-kubelet"))
        .with_kube_tls(kube_tls_base);
    Ok((sim, kube_tls))
}

/// The simulated control planes' Kubernetes APIs: one set of routes (and one reconcile loop),
/// served over TLS as k3s serves them, and on this API's port too. Each cluster's kube-proxy is
/// this very binary, run as `sim-kube-proxy`.
type SimKube = (Router, tokio::task::JoinHandle<()>);

async fn serve_sim_kube(sim: SimCloud, kube_tls: tokio::net::TcpListener) -> Result<SimKube, CliError> {
    let proxy = std::env::current_exe()
        .map(|exe| anycloud_sim::kube::ProxyCommand::new(exe, ["sim-kube-proxy"]))
        .map_err(|err| CliError::new(NOT_OBSERVED, "API_START", format!("finding this binary's path: {err}")))?;
    let storage = sim.kube_storage().await.map_err(|err| {
        CliError::new(
            NOT_OBSERVED,
            "API_START",
            format!("the simulated clusters' storage: {}", anycloud_engine::error_chain(&err)),
        )
    })?;
    let routes = anycloud_sim::kube::router(Arc::new(sim.clone()), storage, proxy);
    let serving = tokio::spawn(anycloud_sim::kube::tls::serve(kube_tls, routes.clone(), Arc::new(sim)));
    Ok((routes, serving))
}

/// The engine, under a stable owner name: after a crash, the restarted API takes its runs back
/// at once. The engine holds it exclusively, so a second API with this id on this database is
/// refused.
async fn start_engine(
    options: &ServeOptions,
    store: &Store,
    deps: &Deps,
    checkpointer: Option<anycloud_checkpoint::Checkpointer>,
) -> Result<(Arc<Engine>, String), CliError> {
    let owner = format!("api-{}", options.id);
    let mut config = EngineConfig::named(&owner);
    // A checkpointed API acts on the world only once what came before is in the bucket: a lost
    // disk then loses at most the step in flight, which may run again (docs/hosting.md).
    config.before_act = checkpointer.map(|checkpointer| {
        anycloud_engine::BeforeAct(Arc::new(move || {
            let checkpointer = checkpointer.clone();
            Box::pin(async move { checkpointer.flush().await })
        }))
    });
    let engine = Engine::start(store.clone(), anycloud_workflows::registry(deps), config)
        .await
        .map_err(|err| engine_refused(&options.id, &err))?;
    Ok((Arc::new(engine), owner))
}

/// Makes this API the CLI's active one (`--use`).
fn remember(options: &ServeOptions, url: &str, token: &str, tls: Option<&tls::Tls>) -> Result<(), CliError> {
    let mut config = Config::load()?;
    config.apis.insert(
        options.id.clone(),
        ApiEntry {
            url: url.to_owned(),
            token: token.to_owned(),
            kind: options.kind(),
            ca_pem: tls.map(|tls| tls.pinned_pem.clone()),
            deployed_by: None,
        },
    );
    config.active = Some(options.id.clone());
    config.save()
}

/// Says that the API is up, and every setting a person must not miss.
fn announce(options: &ServeOptions, state: &AppState, url: &str) {
    for seam in &state.status.test_seams {
        println!("WARNING: TEST SEAM ON (never in production): {seam}");
        tracing::warn!(%seam, "test seam on: this binary is the test suite's, never run it in production");
    }
    if options.endpoints == EndpointPolicy::AllowInsecure {
        println!(
            "WARNING: plain http:// and loopback endpoints allowed (--allow-insecure-endpoints): for test peers only"
        );
    }
    let backend = state.store.backend();
    println!("anycloud API `{}` ({}) listening on {url} (store: {backend})", options.id, options.kind());
    let _ = std::io::stdout().flush();
    tracing::info!(api = %options.id, %url, store = backend, "API started");
}

/// Stops in order: the steps in flight finish and leases are released, the last state is
/// shipped to the bucket, the database closes.
async fn stop(engine: Arc<Engine>, checkpointer: Option<anycloud_checkpoint::Checkpointer>, store: Store) {
    tracing::info!("stopping: letting steps in flight finish and releasing leases");
    match Arc::try_unwrap(engine) {
        Ok(engine) => engine.shutdown(Duration::from_secs(30)).await,
        Err(engine) => drop(engine),
    }
    if let Some(checkpointer) = &checkpointer {
        checkpointer.stop().await;
    }
    store.close().await;
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
