//! `anycloud api list | use | status | stop`, and hosting an API (`api serve --credentials`).

use crate::output::say;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anycloud_workflows::providers::endpoint::EndpointPolicy;
use anycloud_workflows::wire::ApiStatus;
use serde_json::Value;

use super::print_json;
use crate::client::Client;
use crate::config::{ApiEntry, Config, api_data_dir};
use crate::exit::{CliError, CliResult, NOT_OBSERVED, OK, TIMEOUT};
use crate::render;

/// Lists the APIs the CLI knows, marking the active one.
pub fn list(json: bool) -> CliResult {
    let config = Config::load()?;
    if json {
        let apis: Vec<Value> = config
            .apis
            .iter()
            .map(|(name, entry)| {
                serde_json::json!({
                    "name": name, "url": entry.url, "kind": entry.kind,
                    "active": config.active.as_deref() == Some(name),
                })
            })
            .collect();
        print_json(&apis);
        return Ok(OK);
    }
    if config.apis.is_empty() {
        say!("no APIs yet: start a local one with `anycloud api serve --use`");
        return Ok(OK);
    }
    let rows: Vec<Vec<String>> = config
        .apis
        .iter()
        .map(|(name, entry)| {
            let mark = if config.active.as_deref() == Some(name) { "*" } else { "" };
            vec![mark.to_owned(), name.clone(), entry.kind.clone(), entry.url.clone()]
        })
        .collect();
    render::table(&["", "NAME", "KIND", "URL"], &rows);
    Ok(OK)
}

/// Makes a known API the active one.
pub fn use_api(name: &str) -> CliResult {
    let mut config = Config::load()?;
    if !config.apis.contains_key(name) {
        let known: Vec<&str> = config.apis.keys().map(String::as_str).collect();
        return Err(CliError::new(
            NOT_OBSERVED,
            "UNKNOWN_API",
            format!(
                "no API named `{name}` in the CLI config (known: {}); start it with `anycloud api serve --id {name} --use`",
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ),
        ));
    }
    config.active = Some(name.to_owned());
    config.save()?;
    say!("active API: {name}");
    Ok(OK)
}

/// Shows the active API and whether it answers.
pub async fn status(json: bool) -> CliResult {
    let client = Client::active()?;
    let status: ApiStatus = client.get("/v1/status").await?;
    if json {
        print_json(&status);
    } else {
        say!("active API  {} ({})", client.name(), client.kind());
        say!("url         {}", client.url());
        say!("answers     yes, version {}", status.version);
        say!("store       {}", status.store);
        say!("engine      {}", status.engine_owner);
        say!(
            "endpoints   {}",
            match status.endpoints {
                EndpointPolicy::HttpsOnly => "https:// to public hosts only",
                EndpointPolicy::AllowInsecure => "plain http:// and loopback allowed (--allow-insecure-endpoints)",
            }
        );
        if let Some(checkpoint) = &status.checkpoint {
            say!(
                "checkpoint  {}: generation {}, snapshot {} bytes + {} WAL segments ({} bytes)",
                checkpoint.bucket,
                checkpoint.generation,
                checkpoint.snapshot_bytes,
                checkpoint.segments,
                checkpoint.wal_bytes
            );
            if let Some(error) = &checkpoint.last_error {
                say!("            last ship FAILED: {error}");
            }
        }
        for seam in &status.test_seams {
            say!("TEST SEAM   {seam} (a test binary: never in production)");
        }
    }
    Ok(OK)
}

/// How `anycloud api serve --credentials C` was asked to host an API.
pub struct HostArgs {
    /// The API's name.
    pub id: String,
    /// Port on 127.0.0.1 (0: any free port).
    pub port: u16,
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// PostgreSQL instead of SQLite.
    pub database_url: Option<String>,
    /// Make it the active API.
    pub use_it: bool,
    /// `--allow-insecure-endpoints`, passed on to the hosted API.
    pub allow_insecure_endpoints: bool,
}

/// Starts a hosted API as a detached process that the simulated cloud "hosts", waits until it
/// listens, and (with `--use`) makes it the active API.
pub async fn host(args: HostArgs, json: bool) -> CliResult {
    anycloud_workflows::names::check_dns_label("API", &args.id).map_err(CliError::bad_input)?;
    let dir = args.data_dir.clone().unwrap_or_else(|| api_data_dir(&args.id));
    let io = |what: &str, err: std::io::Error| {
        CliError::new(NOT_OBSERVED, "DATA_DIR", format!("{what} {}: {err}", dir.display()))
    };
    std::fs::create_dir_all(&dir).map_err(|err| io("creating", err))?;
    if let Some(pid) = running_pid(&dir) {
        return Err(CliError::bad_input(format!(
            "API `{}` is already running (pid {pid}); stop it first with `anycloud api stop {}`",
            args.id, args.id
        )));
    }
    let log_path = dir.join("api.log");
    let log =
        std::fs::OpenOptions::new().create(true).append(true).open(&log_path).map_err(|err| io("opening", err))?;
    let offset = log.metadata().map(|meta| meta.len()).unwrap_or(0);
    let exe = std::env::current_exe()
        .map_err(|err| CliError::new(NOT_OBSERVED, "START_FAILED", format!("finding anycloud: {err}")))?;
    let mut command = std::process::Command::new(exe);
    command
        .args(["api", "serve", "--id", &args.id, "--hosted-by", "sim", "--port", &args.port.to_string(), "--data-dir"])
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(|err| io("opening", err))?)
        .stderr(log)
        // Its own process group: a Ctrl-C in this terminal does not reach the hosted API.
        .process_group(0);
    if let Some(url) = &args.database_url {
        command.env("ANYCLOUD_DATABASE_URL", url);
    }
    if args.allow_insecure_endpoints {
        command.arg(anycloud_workflows::providers::endpoint::ALLOW_INSECURE_FLAG);
    }
    let mut child = command
        .spawn()
        .map_err(|err| CliError::new(NOT_OBSERVED, "START_FAILED", format!("starting the API: {err}")))?;
    let url = listening_url(&mut child, &log_path, offset).await?;
    std::fs::write(dir.join("api.pid"), child.id().to_string()).map_err(|err| io("writing api.pid in", err))?;
    let token = std::fs::read_to_string(dir.join("token")).map_err(|err| io("reading the token in", err))?;
    let mut config = Config::load()?;
    config.apis.insert(
        args.id.clone(),
        ApiEntry {
            url: url.clone(),
            token: token.trim().to_owned(),
            kind: "hosted (simulated)".into(),
            ca_pem: None,
            deployed_by: None,
        },
    );
    if args.use_it {
        config.active = Some(args.id.clone());
    }
    config.save()?;
    if json {
        print_json(&serde_json::json!({
            "id": args.id, "url": url, "kind": "hosted (simulated)", "pid": child.id(),
            "log": log_path, "active": args.use_it,
        }));
    } else {
        say!(
            "anycloud API `{}` (hosted on the simulated cloud) listening on {url}, pid {}{}",
            args.id,
            child.id(),
            if args.use_it { "; it is the active API" } else { "" }
        );
        say!("logs: {}; stop it with `anycloud api stop {}`", log_path.display(), args.id);
    }
    Ok(OK)
}

/// The URL the started API says it listens on, read from its log after `offset`; an error if
/// it exits first or says nothing within 60 s (then it is killed).
async fn listening_url(child: &mut std::process::Child, log_path: &Path, offset: u64) -> Result<String, CliError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let text = std::fs::read(log_path).unwrap_or_default();
        let fresh = String::from_utf8_lossy(text.get(offset as usize..).unwrap_or_default()).into_owned();
        let line = fresh.lines().find(|line| line.contains("listening on "));
        if let Some(url) = line.and_then(|line| line.split("listening on ").nth(1)?.split_whitespace().next()) {
            return Ok(url.to_owned());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(CliError::new(
                NOT_OBSERVED,
                "START_FAILED",
                format!("the hosted API exited ({status}) before listening; its log says:\n{fresh}"),
            ));
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            return Err(CliError::new(
                NOT_OBSERVED,
                "START_FAILED",
                format!("the hosted API did not listen within 60 s:\n{fresh}"),
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Stops a hosted API: one deployed on a cloud VM is removed through the API that deployed it
/// (its bucket stays unless `delete_bucket`); one this CLI started gets SIGTERM (it releases its
/// leases). Then the CLI config forgets it.
pub async fn stop(id: &str, data_dir: Option<PathBuf>, delete_bucket: bool, json: bool) -> CliResult {
    if let Some(deployer) = super::hosted_api::deployer_of(id)? {
        return super::hosted_api::remove(deployer, id, delete_bucket, json).await;
    }
    if delete_bucket {
        return Err(CliError::bad_input(format!(
            "--delete-bucket applies to an API deployed on a cloud VM, and the CLI config has no such API `{id}`"
        )));
    }
    let dir = data_dir.unwrap_or_else(|| api_data_dir(id));
    let Some(pid) = running_pid(&dir) else {
        return Err(CliError::new(
            NOT_OBSERVED,
            "API_NOT_RUNNING",
            format!("API `{id}` is not running (no live process in {}/api.pid)", dir.display()),
        ));
    };
    let sent = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    if !sent.is_ok_and(|status| status.success()) {
        return Err(CliError::new(NOT_OBSERVED, "STOP_FAILED", format!("could not signal API `{id}` (pid {pid})")));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    while alive(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    if alive(pid) {
        return Err(CliError::new(TIMEOUT, "TIMEOUT", format!("API `{id}` (pid {pid}) did not stop within 40 s")));
    }
    let _ = std::fs::remove_file(dir.join("api.pid"));
    let mut config = Config::load()?;
    config.apis.remove(id);
    if config.active.as_deref() == Some(id) {
        config.active = None;
    }
    config.save()?;
    if json {
        print_json(&serde_json::json!({ "stopped": id, "pid": pid }));
    } else {
        say!("stopped API `{id}` (pid {pid})");
    }
    Ok(OK)
}

/// The pid in `api.pid`, when that process still runs.
fn running_pid(dir: &std::path::Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(dir.join("api.pid")).ok()?.trim().parse().ok()?;
    alive(pid).then_some(pid)
}

/// Whether a process runs (and is not a zombie).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}
