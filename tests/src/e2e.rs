//! What the end-to-end tests of the `anycloud` binary (`tests/api_*.rs`) share: the binary, a
//! local API run as a child process with its own config and data directories, CLI commands
//! with their output and exit code, moto servers, fresh PostgreSQL databases, raw HTTP, and
//! read-only snapshots of the API's SQLite database.
//!
//! Nothing here skips: a missing binary, moto venv or PostgreSQL server fails the test with a
//! message that says how to get it (`scripts/test` brings up all three).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::Connection;

/// How long a CLI command may take before the test fails.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// Variables of the test's own environment that would change what the binary does; no child
/// inherits them.
const SCRUBBED_ENV: &[&str] = &[
    "ANYCLOUD_DATABASE_URL",
    "ANYCLOUD_SECRET_KEY",
    "ANYCLOUD_LOG",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// The `anycloud` binary: `$ANYCLOUD_BIN`, else the one beside the test executable
/// (`target/debug/deps/TEST` -> `target/debug/anycloud`).
pub fn anycloud_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("ANYCLOUD_BIN") {
        let path = PathBuf::from(path);
        assert!(path.is_file(), "ANYCLOUD_BIN={} is not a file", path.display());
        return path;
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    let path = exe.parent().and_then(Path::parent).map(|dir| dir.join("anycloud")).expect("target directory");
    assert!(
        path.is_file(),
        "the anycloud binary is missing at {}: build it first with `cargo build --workspace --bins` \
         (scripts/test does), or set ANYCLOUD_BIN",
        path.display()
    );
    path
}

/// How a simulated Kubernetes served in a test starts its clusters' kube-proxies: the `anycloud`
/// binary's `sim-kube-proxy` command, as the API does.
pub fn kube_proxy() -> anycloud_sim::kube::ProxyCommand {
    anycloud_sim::kube::ProxyCommand::new(anycloud_bin(), ["sim-kube-proxy"])
}

/// The test suite's own binary, `anycloud-seamed` (beside `anycloud`): the same CLI and API, with
/// the test seams its environment names (`ANYCLOUD_TEST_*`, see `src/bin/anycloud_seamed.rs`).
pub fn anycloud_seamed_bin() -> PathBuf {
    let path = anycloud_bin().with_file_name("anycloud-seamed");
    assert!(path.is_file(), "{} is missing: build it with `cargo build --workspace --bins`", path.display());
    path
}

/// The variables `anycloud-seamed` reads (and `anycloud` does not).
pub const SEAM_VARS: [&str; 6] = [
    "ANYCLOUD_TEST_SIMULATED_KUBE",
    "ANYCLOUD_TEST_PAUSE_AFTER_LAUNCH_MS",
    "ANYCLOUD_TEST_PAUSE_IN_SECRET_APPLY_MS",
    "ANYCLOUD_TEST_HOSTED_API_ADDRESS",
    "ANYCLOUD_TEST_FOLLOW_GAP_MS",
    "ANYCLOUD_TEST_EXEC_IDLE_LIMIT_MS",
];

/// Whether an environment turns a test seam on: then only the seamed binary will honour it.
fn wants_seams<K: AsRef<str>, V>(env: &[(K, V)]) -> bool {
    env.iter().any(|(name, _)| SEAM_VARS.contains(&name.as_ref()))
}

/// `cluster create NAME --credentials CREDENTIAL` of `vms` capacity VMs on the simulated cloud
/// (`sim-east-1`, `sim.small`), to extend with `--wait` and the like.
pub fn sim_cluster_create<'a>(name: &'a str, credential: &'a str, vms: &'a str) -> Vec<&'a str> {
    cluster_create(name, credential, "sim-east-1", "sim.small", vms, vms)
}

/// `cluster create NAME` with these placement and capacity arguments.
pub fn cluster_create<'a>(
    name: &'a str,
    credential: &'a str,
    region: &'a str,
    vm_type: &'a str,
    min: &'a str,
    max: &'a str,
) -> Vec<&'a str> {
    vec![
        "cluster",
        "create",
        name,
        "--credentials",
        credential,
        "--region",
        region,
        "--vm-type",
        vm_type,
        "--min-vms",
        min,
        "--max-vms",
        max,
    ]
}

/// A new cluster record named `name` on `credential`, as `cluster create` inserts it: on the
/// simulated cloud (`sim-east-1`, `sim.small`), one capacity VM, `creating`, with a fresh id.
/// Tests override what they need with struct update syntax.
pub fn cluster_record(name: &str, credential: &str) -> anycloud_workflows::db::clusters::Cluster {
    let now = anycloud_workflows::now_ms();
    anycloud_workflows::db::clusters::Cluster {
        id: uuid::Uuid::new_v4().to_string(),
        name: name.into(),
        credential: credential.into(),
        provider: anycloud_workflows::cloud::ProviderKind::Sim,
        region: "sim-east-1".into(),
        zone: None,
        vm_type: "sim.small".into(),
        min_vms: 1,
        max_vms: 1,
        phase: anycloud_workflows::db::clusters::Phase::Creating,
        reason: None,
        endpoint: None,
        network_id: None,
        workflow_id: None,
        delete_requested_at: None,
        created_at: now,
        updated_at: now,
        control_plane_credential: None,
        control_plane_provider: None,
        control_plane_region: None,
        control_plane_zone: None,
        control_plane_vm_type: None,
    }
}

/// The steps a run undid, in the order it undid them, from its `workflow inspect --json`.
pub fn undone_steps(inspected: &Value) -> Vec<&str> {
    let steps = inspected["steps"].as_array().unwrap_or_else(|| panic!("no steps in {inspected:#}"));
    steps.iter().filter(|step| step["phase"] == "undo").map(|step| step["name"].as_str().unwrap()).collect()
}

/// The venv holding `bin/moto_server` and boto3: `$ANYCLOUD_TEST_MOTO_VENV`, else the venv
/// `scripts/lib/moto.sh` makes by default (`/var/tmp/anycloud-venv`) when it is there.
pub fn moto_venv() -> PathBuf {
    let venv = match std::env::var_os("ANYCLOUD_TEST_MOTO_VENV") {
        Some(venv) => PathBuf::from(venv),
        None => PathBuf::from("/var/tmp/anycloud-venv"),
    };
    assert!(
        venv.join("bin/moto_server").is_file(),
        "moto is required by the AWS tests (they never skip it): no bin/moto_server in {} \
         (ANYCLOUD_TEST_MOTO_VENV). Run scripts/test, which sets it up (scripts/lib/moto.sh), or point \
         ANYCLOUD_TEST_MOTO_VENV at a venv with `pip install 'moto[server,ec2,s3]>=5,<6'`",
        venv.display()
    );
    venv
}

/// The PostgreSQL database the tests may create databases from.
pub use anycloud_engine::testing::postgres_url;

/// Runs a future to completion on a fresh single-threaded runtime (the tests are synchronous:
/// they drive processes).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime").block_on(future)
}

/// Polls `check` every 100 ms until it returns `Some`, failing the test after `timeout`.
pub fn wait_until<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A free TCP port on 127.0.0.1 (free when asked; the caller binds it soon after).
pub fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port()
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// What a finished CLI command left.
#[derive(Debug, Clone)]
pub struct Output {
    /// The command line after `anycloud`.
    pub args: Vec<String>,
    /// The exit code (-1 if a signal ended it).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Output {
    /// Fails the test unless the command exited with `code`.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            code,
            "`anycloud {}` exited {} (expected {code})\n{self}",
            self.args.join(" "),
            self.code
        );
        self
    }

    /// Fails the test unless standard error contains `needle`.
    #[track_caller]
    pub fn expect_stderr(&self, needle: &str) -> &Self {
        assert!(self.stderr.contains(needle), "`anycloud {}`: stderr lacks {needle:?}\n{self}", self.args.join(" "));
        self
    }

    /// Standard output parsed as JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|err| panic!("`anycloud {}` printed no JSON ({err})\n{self}", self.args.join(" ")))
    }

    /// The last JSON document on standard output (`--json --wait` prints the followed events,
    /// one a line, then the result).
    #[track_caller]
    pub fn last_json(&self) -> Value {
        serde_json::Deserializer::from_str(&self.stdout)
            .into_iter::<Value>()
            .map(|value| {
                value.unwrap_or_else(|err| panic!("`anycloud {}`: bad JSON ({err})\n{self}", self.args.join(" ")))
            })
            .last()
            .unwrap_or_else(|| panic!("`anycloud {}` printed no JSON\n{self}", self.args.join(" ")))
    }

    /// The JSON error the CLI prints on standard error under `--json`.
    #[track_caller]
    pub fn json_error(&self) -> Value {
        serde_json::from_str(self.stderr.trim())
            .unwrap_or_else(|err| panic!("`anycloud {}` printed no JSON error ({err})\n{self}", self.args.join(" ")))
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--- exit {}\n--- stdout\n{}--- stderr\n{}---", self.code, self.stdout, self.stderr)
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status.code().unwrap_or(-1)
}

/// Waits for `child` up to `timeout`; kills it and returns `None` when time runs out.
fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends SIGTERM to a process (std only offers SIGKILL).
pub fn send_sigterm(pid: u32) {
    let status = Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("running kill");
    assert!(status.success(), "kill -TERM {pid} failed");
}

/// A local API (`anycloud api serve`) run as a child process, with its own temporary config
/// directory (the CLI's active API is this one), data directory and logs. It keeps its id,
/// data directory, port and database across restarts; every CLI output it was asked for is
/// kept (`transcript`).
pub struct Api {
    /// The API's id (`--id`).
    pub id: String,
    /// The PostgreSQL database (`--database-url`), or `None` for SQLite in the data directory.
    pub database_url: Option<String>,
    /// The port it listens on (picked on the first start, kept on restarts).
    pub port: u16,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Runs as a hosted API (`--hosted-by sim`), which may create clusters.
    pub hosted: bool,
    /// Extra environment of the API process. A test seam (`ANYCLOUD_TEST_*`) runs the API as the
    /// `anycloud-seamed` binary, the only one that reads them.
    pub env: Vec<(String, String)>,
    /// Runs as the `anycloud` binary whatever `env` says.
    production_binary: bool,
    /// Extra arguments of `api serve`.
    pub args: Vec<String>,
    /// Started without `--allow-insecure-endpoints`, as a production API is.
    https_endpoints_only: bool,
    dir: tempfile::TempDir,
    child: Option<Child>,
    pids: Vec<u32>,
    commands: Cell<u32>,
}

/// How [`Api::start_opts`] starts an API.
#[derive(Debug, Clone, Default)]
pub struct ApiOptions {
    /// `--id`.
    pub id: String,
    /// PostgreSQL database, or `None` for SQLite.
    pub database_url: Option<String>,
    /// A hosted API (what `api serve --credentials sim` runs).
    pub hosted: bool,
    /// Extra environment of the API process.
    pub env: Vec<(String, String)>,
    /// Run the `anycloud` binary even when `env` names a seam (to prove it ignores them).
    pub production_binary: bool,
    /// Extra arguments of `api serve` (`--checkpoint-bucket s3://...`).
    pub args: Vec<String>,
    /// Start it without `--allow-insecure-endpoints`. The tests' APIs otherwise run with it:
    /// their peers (moto, the fakes) are plain HTTP on loopback.
    pub https_endpoints_only: bool,
}

impl Api {
    /// Starts an API on SQLite.
    pub fn start(id: &str) -> Self {
        Self::start_with(id, None)
    }

    /// Starts an API on SQLite, or on the PostgreSQL database at `database_url`.
    pub fn start_with(id: &str, database_url: Option<String>) -> Self {
        Self::start_opts(ApiOptions { id: id.to_owned(), database_url, ..ApiOptions::default() })
    }

    /// Starts a hosted API (the process `api serve --credentials sim` detaches) on SQLite.
    pub fn start_hosted(id: &str) -> Self {
        Self::start_opts(ApiOptions { id: id.to_owned(), hosted: true, ..ApiOptions::default() })
    }

    /// What most end-to-end tests start from, added to this API: a simulated-cloud credential
    /// `sim` (`credential_flags` besides `--provider sim`) and a ready one-worker cluster `demo`.
    pub fn with_demo_cluster(self, credential_flags: &[&str]) -> Self {
        let mut credential = vec!["credentials", "new", "sim", "--provider", "sim", "--wait"];
        credential.extend_from_slice(credential_flags);
        self.cli(&credential).expect_code(0);
        let mut create = sim_cluster_create("demo", "sim", "1");
        create.push("--wait");
        self.cli(&create).expect_code(0);
        self
    }

    /// Starts an API as `options` say.
    pub fn start_opts(options: ApiOptions) -> Self {
        let ApiOptions { id, database_url, hosted, env, production_binary, args, https_endpoints_only } = options;
        let id = id.as_str();
        let dir = tempfile::Builder::new().prefix("anycloud-e2e-").tempdir().unwrap();
        for sub in ["config", "xdg-config", "xdg-data", "logs"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let mut api = Self {
            id: id.to_owned(),
            database_url,
            port: 0,
            url: String::new(),
            hosted,
            env,
            production_binary,
            args,
            https_endpoints_only,
            dir,
            child: None,
            pids: Vec::new(),
            commands: Cell::new(0),
        };
        api.spawn();
        api
    }

    /// The CLI's config directory (`ANYCLOUD_CONFIG_DIR`).
    pub fn config_dir(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    /// The API's data directory (token, secret key, SQLite database).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The SQLite database file.
    pub fn sqlite_path(&self) -> PathBuf {
        self.data_dir().join("anycloud.db")
    }

    /// A scratch directory that lives as long as the API.
    pub fn scratch(&self) -> PathBuf {
        let dir = self.dir.path().join("scratch");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Writes a deployment row directly (a service, a job whose run never started, a status a
    /// test needs), through a second connection to the API's SQLite file (WAL: the API keeps
    /// running meanwhile). An existing id only has its status changed.
    pub fn add_deployment(&self, id: &str, name: &str, kind: &str, cluster_id: &str, status: &str) {
        block_on(async {
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(self.sqlite_path())
                .busy_timeout(Duration::from_secs(10));
            let mut conn = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
            sqlx::query(
                "INSERT INTO deployments (id, name, kind, cluster_id, status, image, command, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, 'python:3.12', '[\"sleep\", \"1\"]', $6, $6) \
                 ON CONFLICT (id) DO UPDATE SET status = excluded.status",
            )
            .bind(id)
            .bind(name)
            .bind(kind)
            .bind(cluster_id)
            .bind(status)
            .bind(now_ms())
            .execute(&mut conn)
            .await
            .unwrap();
            sqlx::Connection::close(conn).await.unwrap();
        });
    }

    /// The API's bearer token.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.data_dir().join("token")).unwrap().trim().to_owned()
    }

    /// The pid of the running incarnation.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the API is not running").id()
    }

    /// The pids of every incarnation, first to last.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    fn spawn(&mut self) {
        let incarnation = self.pids.len() + 1;
        let logs = self.dir.path().join("logs");
        let stdout_path = logs.join(format!("api-{incarnation}.stdout"));
        let stderr_path = logs.join(format!("api-{incarnation}.stderr"));
        let mut command = self.command_for(wants_seams(&self.env) && !self.production_binary);
        command
            .args(["api", "serve", "--id", &self.id, "--port", &self.port.to_string(), "--use", "--data-dir"])
            .arg(self.data_dir())
            .stdin(Stdio::null())
            .stdout(File::create(&stdout_path).unwrap())
            .stderr(File::create(&stderr_path).unwrap());
        if let Some(url) = &self.database_url {
            command.args(["--database-url", url]);
        }
        if self.hosted {
            command.args(["--hosted-by", "sim"]);
        }
        if !self.https_endpoints_only {
            command.arg("--allow-insecure-endpoints");
        }
        command.args(&self.args);
        command.envs(self.env.iter().map(|(name, value)| (name, value)));
        let mut child = command.spawn().expect("starting anycloud api serve");
        self.pids.push(child.id());
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = loop {
            let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
            // Only a complete line counts.
            let line = stdout.split_inclusive('\n').find(|line| line.ends_with('\n') && line.contains("listening on "));
            if let Some(url) = line.and_then(|line| line.split("listening on ").nth(1)?.split_whitespace().next()) {
                break url.to_owned();
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "anycloud api serve (incarnation {incarnation}) exited with {status} before listening\n\
                     --- stdout\n{stdout}--- stderr\n{}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                panic!("anycloud api serve did not print its URL within 60 s\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(25));
        };
        let port = url.rsplit(':').next().and_then(|port| port.parse().ok()).expect("a port in the API's URL");
        assert!(self.port == 0 || self.port == port, "the API came back on port {port}, not {}", self.port);
        self.port = port;
        self.url = url;
        self.child = Some(child);
    }

    /// The binary with the environment every child gets: this API's config directory, no
    /// inherited credentials, database URL or proxies, no colours.
    pub fn command(&self) -> Command {
        self.command_for(false)
    }

    /// [`Api::command`], as the seamed binary when `seamed`.
    fn command_for(&self, seamed: bool) -> Command {
        let mut command = Command::new(if seamed { anycloud_seamed_bin() } else { anycloud_bin() });
        for name in SCRUBBED_ENV {
            command.env_remove(name);
        }
        command
            .env("ANYCLOUD_CONFIG_DIR", self.config_dir())
            .env("XDG_CONFIG_HOME", self.dir.path().join("xdg-config"))
            .env("XDG_DATA_HOME", self.dir.path().join("xdg-data"))
            .env("NO_COLOR", "1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        command
    }

    /// SIGKILLs the running incarnation and reaps it.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("the API is not running");
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(9), "the API did not die of SIGKILL: {status}");
    }

    /// SIGTERMs the running incarnation and waits up to `timeout` for it to exit; returns its
    /// exit status (the test fails if it does not exit in time).
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("the API is not running");
        send_sigterm(child.id());
        match wait_timeout(&mut child, timeout) {
            Some(status) => status,
            None => panic!("the API did not exit within {timeout:?} of SIGTERM (killed it)\n{}", self.logs()),
        }
    }

    /// Deletes the data directory, as a replacement VM's empty disk (the API must not run).
    pub fn wipe_data_dir(&mut self) {
        assert!(self.child.is_none(), "wipe_data_dir: the API is still running");
        std::fs::remove_dir_all(self.data_dir()).unwrap();
    }

    /// Wipes the data directory but for the API's keys (`token`, `secret.key`), which an operator
    /// who runs a checkpointed API by hand keeps apart: they never go to its bucket.
    pub fn wipe_data_dir_keeping_keys(&mut self) {
        let keys: Vec<(PathBuf, Vec<u8>)> = ["token", "secret.key"]
            .iter()
            .map(|name| self.data_dir().join(name))
            .map(|path| (path.clone(), std::fs::read(&path).unwrap()))
            .collect();
        self.wipe_data_dir();
        std::fs::create_dir_all(self.data_dir()).unwrap();
        for (path, bytes) in keys {
            std::fs::write(path, bytes).unwrap();
        }
    }

    /// Waits up to `timeout` for the running incarnation to exit by itself; its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let status = wait_timeout(self.child.as_mut().expect("the API is not running"), timeout);
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// Starts the API again with the same id, data directory, port and database.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart: the API is still running");
        self.spawn();
    }

    /// Runs `anycloud ARGS` against this API and returns what it did.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_env(args, &[])
    }

    /// Runs `anycloud ARGS` with extra environment variables.
    pub fn cli_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.spawn_cli_env(args, env).wait(CLI_TIMEOUT)
    }

    /// Runs `anycloud ARGS` with `input` on its standard input.
    pub fn cli_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        let input_path = self.scratch().join(format!("stdin-{}", self.commands.get() + 1));
        std::fs::write(&input_path, input).unwrap();
        self.spawn_cli_with(false, args, &[], Stdio::from(File::open(&input_path).unwrap())).wait(CLI_TIMEOUT)
    }

    /// Starts `anycloud ARGS` in the background.
    pub fn spawn_cli(&self, args: &[&str]) -> CliChild {
        self.spawn_cli_env(args, &[])
    }

    /// Starts `anycloud ARGS` in the background with extra environment variables.
    pub fn spawn_cli_env(&self, args: &[&str], env: &[(&str, &str)]) -> CliChild {
        self.spawn_cli_as(wants_seams(env), args, env)
    }

    /// Starts `anycloud-seamed ARGS` in the background: a CLI whose own binary is the seamed one,
    /// which `api serve --credentials` ships to its VM by default (the tests' VMs need its seams).
    pub fn spawn_cli_seamed(&self, args: &[&str]) -> CliChild {
        self.spawn_cli_as(true, args, &[])
    }

    /// Runs `anycloud ARGS` as the `anycloud` binary whatever `env` says (to prove it ignores
    /// seam variables).
    pub fn cli_production(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.spawn_cli_as(false, args, env).wait(CLI_TIMEOUT)
    }

    fn spawn_cli_as(&self, seamed: bool, args: &[&str], env: &[(&str, &str)]) -> CliChild {
        self.spawn_cli_with(seamed, args, env, Stdio::null())
    }

    fn spawn_cli_with(&self, seamed: bool, args: &[&str], env: &[(&str, &str)], stdin: Stdio) -> CliChild {
        let logs = self.dir.path().join("logs");
        let number = self.commands.get() + 1;
        self.commands.set(number);
        let stdout_path = logs.join(format!("cli-{number:04}.stdout"));
        let stderr_path = logs.join(format!("cli-{number:04}.stderr"));
        let mut command = self.command_for(seamed);
        command
            .args(args)
            .envs(env.iter().copied())
            .stdin(stdin)
            .stdout(File::create(&stdout_path).unwrap())
            .stderr(File::create(&stderr_path).unwrap());
        let child = command.spawn().expect("starting anycloud");
        CliChild {
            child: Some(child),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            stdout_path,
            stderr_path,
        }
    }

    /// Everything every incarnation printed (stdout and stderr).
    pub fn logs(&self) -> String {
        self.log_files("api-")
    }

    /// Every CLI command run through this API (finished or not) and everything it printed.
    pub fn transcript(&self) -> String {
        self.log_files("cli-")
    }

    fn log_files(&self, prefix: &str) -> String {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(self.dir.path().join("logs"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.file_name().is_some_and(|name| name.to_string_lossy().starts_with(prefix)))
            .collect();
        paths.sort();
        paths
            .iter()
            .map(|path| {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                format!("=== {name}\n{}\n", String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()))
            })
            .collect()
    }

    /// `workflow inspect ID --json` (with `--events`): the run, its steps, plan and timeline.
    pub fn inspect(&self, id: &str, events: bool) -> Value {
        let mut args = vec!["--json", "workflow", "inspect", id];
        if events {
            args.push("--events");
        }
        let out = self.cli(&args);
        out.expect_code(0);
        out.json()
    }

    /// `POST path` to this API with `body` as JSON and its bearer token.
    pub fn post_json(&self, path: &str, body: &Value) -> HttpResponse {
        post_json(&self.url, &self.token(), path, &body.to_string())
    }

    /// `credentials list --json`.
    pub fn credentials(&self) -> Vec<Value> {
        let out = self.cli(&["--json", "credentials", "list"]);
        out.expect_code(0);
        out.json().as_array().cloned().expect("a JSON array of credentials")
    }

    /// One credential from `credentials list --json`.
    pub fn credential(&self, name: &str) -> Value {
        self.credentials()
            .into_iter()
            .find(|credential| credential["name"] == name)
            .unwrap_or_else(|| panic!("credential {name} is not listed"))
    }

    /// Runs one query returning a text column on the API's database (PostgreSQL, or its SQLite
    /// file opened read-only).
    pub fn query_strings(&self, sql: &str) -> Vec<String> {
        match &self.database_url {
            None => sqlite_strings(&self.sqlite_path(), sql),
            Some(url) => block_on(async {
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                let rows = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned())).fetch_all(&mut conn).await.unwrap();
                conn.close().await.unwrap();
                rows
            }),
        }
    }

    /// Fails the test unless `secret` appears nowhere: not in the API's logs, not in any CLI
    /// output, not in any file of the data directory (SQLite database, WAL, keys). Also checks
    /// the database as PostgreSQL sees it, when the API runs on PostgreSQL.
    #[track_caller]
    pub fn assert_secret_nowhere(&self, secret: &str) {
        assert!(secret.len() >= 8, "too short to search for: {secret:?}");
        assert!(!self.logs().contains(secret), "the secret leaked into the API's logs\n{}", self.logs());
        assert!(!self.transcript().contains(secret), "the secret leaked into CLI output\n{}", self.transcript());
        let files = files_under(&self.data_dir());
        for path in &files {
            let bytes = std::fs::read(path).unwrap();
            assert!(
                !contains_bytes(&bytes, secret.as_bytes()),
                "the secret is stored in the clear in {}",
                path.display()
            );
        }
        let mut expected = vec![self.data_dir().join("token"), self.data_dir().join("secret.key")];
        if self.database_url.is_none() {
            expected.push(self.sqlite_path());
        }
        for path in expected {
            assert!(files.contains(&path), "{} is missing: searched {files:?}", path.display());
        }
        if let Some(url) = &self.database_url {
            let dump = block_on(postgres_dump(url));
            assert!(!dump.contains(secret), "the secret is stored in the clear in PostgreSQL");
        }
    }
}

impl Drop for Api {
    /// Kills the API, then the processes its simulated kubelet started (Pods outlive their API,
    /// as they should, but not the test).
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_all_under(self.dir.path());
    }
}

/// Kills the process group of every process working under `dir` (the Pods and kube-proxies a
/// simulated kubelet started there) or naming it on its command line (an API a test detached
/// with `api serve --credentials sim`), but the test's own group; again until none is left or
/// five seconds pass: a process an API forked as it was killed may only now reach its directory.
/// A Pod's process works in its Pod's directory even once a test wiped it (`(deleted)` in
/// `/proc`), still under `dir`.
pub fn kill_all_under(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let me = rustix::process::getpgrp();
    loop {
        anycloud_sim::kube::kill_processes_under(dir);
        let naming = dir.to_str().map(processes_with).unwrap_or_default();
        for group in naming.into_iter().filter_map(process_group).filter(|group| *group != me) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        // A killed process is gone once its parent reaps it: init, its API being dead, or this
        // process's runtime for an in-process kubelet's (a zombie meanwhile, which has ended).
        std::thread::sleep(Duration::from_millis(50));
        let naming = dir.to_str().map(processes_with).unwrap_or_default();
        let left = processes_under(dir).len()
            + naming.into_iter().filter(|pid| !zombie(*pid) && process_group(*pid) != Some(me)).count();
        if left == 0 || Instant::now() >= deadline {
            return;
        }
    }
}

/// The process group of a pid (`/proc/{pid}/stat`, field 5).
fn process_group(pid: u32) -> Option<rustix::process::Pid> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let group: i32 = stat[stat.rfind(')')? + 1..].split_whitespace().nth(2)?.parse().ok()?;
    rustix::process::Pid::from_raw(group)
}

/// The live processes whose working directory is under `dir` (a simulated kubelet runs each
/// container in a scratch directory under the API's data directory); a zombie has ended.
pub fn processes_under(dir: &Path) -> Vec<u32> {
    let Ok(dir) = dir.canonicalize() else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir)))
        .filter(|pid| !zombie(*pid))
        .collect()
}

/// Whether the process has ended but for its parent's wait (`/proc/{pid}/stat`'s state `Z`).
fn zombie(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rfind(')').and_then(|end| stat[end + 1..].split_whitespace().next()).is_none_or(|state| state == "Z")
}

/// The processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id();
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            // A zombie has an empty command line: it is gone, but for its parent's wait.
            contains_bytes(&cmdline, needle.as_bytes())
        })
        .collect()
}

/// A CLI command running in the background; killed if dropped before it ends.
pub struct CliChild {
    child: Option<Child>,
    args: Vec<String>,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
}

impl CliChild {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child.as_mut().unwrap().try_wait().unwrap().is_none()
    }

    /// What it printed on standard output so far.
    pub fn stdout_so_far(&self) -> String {
        std::fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    /// Waits for it to end (the test fails after `timeout`) and returns what it did.
    pub fn wait(mut self, timeout: Duration) -> Output {
        let mut child = self.child.take().unwrap();
        let status = wait_timeout(&mut child, timeout);
        let output = Output {
            args: self.args.clone(),
            code: status.map_or(-1, exit_code),
            stdout: std::fs::read_to_string(&self.stdout_path).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.stderr_path).unwrap_or_default(),
        };
        assert!(status.is_some(), "`anycloud {}` did not end within {timeout:?}\n{output}", self.args.join(" "));
        output
    }
}

impl Drop for CliChild {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Whether `haystack` contains `needle`.
pub fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|window| window == needle)
}

/// A moto server (the fake AWS) on a free port of 127.0.0.1, run from the test venv; killed
/// when dropped.
pub struct Moto {
    /// Its port.
    pub port: u16,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    venv: PathBuf,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Moto {
    /// An EC2 client of the test's own in `region`, to see what moto holds.
    pub fn ec2(&self, region: &str) -> aws_sdk_ec2::Client {
        moto_ec2(&self.endpoint, region)
    }

    /// A moto server without authentication: any keys are accepted.
    pub fn start() -> Self {
        Self::spawn(None)
    }

    /// A moto server that authenticates every request (IAM keys and policies) but the first
    /// `unauthenticated` ones, which set up users and keys.
    pub fn start_with_auth(unauthenticated: u32) -> Self {
        Self::spawn(Some(unauthenticated))
    }

    fn spawn(unauthenticated: Option<u32>) -> Self {
        let venv = moto_venv();
        let dir = tempfile::Builder::new().prefix("anycloud-moto-").tempdir().unwrap();
        let log = dir.path().join("moto.log");
        let mut last_failure = String::new();
        // The port is free when picked; another process may take it first, so try a few.
        for _ in 0..3 {
            let port = free_port();
            let mut command = Command::new(venv.join("bin/moto_server"));
            command
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .env_remove("AWS_ACCESS_KEY_ID")
                .env_remove("AWS_SECRET_ACCESS_KEY")
                .env_remove("MOTO_CALL_RESET_API")
                .stdin(Stdio::null());
            let file = File::create(&log).unwrap();
            command.stderr(file.try_clone().unwrap()).stdout(file);
            if let Some(count) = unauthenticated {
                command.env("INITIAL_NO_AUTH_ACTION_COUNT", count.to_string());
            } else {
                command.env_remove("INITIAL_NO_AUTH_ACTION_COUNT");
            }
            let mut child = command.spawn().expect("starting moto_server");
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    last_failure = format!(
                        "moto_server on port {port} exited with {status}:\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                    break;
                }
                // A bare connection: no request, so it uses none of the unauthenticated ones.
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Self { port, endpoint: format!("http://127.0.0.1:{port}"), venv, child, log, _dir: dir };
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_failure = format!(
                        "moto_server on port {port} did not listen within 60 s:\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("could not start moto: {last_failure}");
    }

    /// Runs a Python script with the venv's python (boto3 available), `MOTO_ENDPOINT` set, and
    /// returns its standard output.
    pub fn python(&self, script: &str, env: &[(&str, &str)]) -> String {
        let output = Command::new(self.venv.join("bin/python"))
            .args(["-c", script])
            .env("MOTO_ENDPOINT", &self.endpoint)
            .env("AWS_ACCESS_KEY_ID", "bootstrap")
            .env("AWS_SECRET_ACCESS_KEY", "bootstrap")
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .envs(env.iter().copied())
            .output()
            .expect("running the venv's python");
        assert!(
            output.status.success(),
            "python script failed ({}):\n{}\n--- moto log\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            self.log()
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Creates an IAM user and an access key for it (three unauthenticated requests with a
    /// policy, two without). With `allow`, an inline policy allows those actions (e.g. `ec2:*`)
    /// on every resource.
    pub fn iam_user_with_key(&self, user: &str, allow: Option<&str>) -> AwsKey {
        const SCRIPT: &str = r#"
import json, os
import boto3
iam = boto3.client("iam", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1")
user = os.environ["IAM_USER"]
iam.create_user(UserName=user)
key = iam.create_access_key(UserName=user)["AccessKey"]
allow = os.environ.get("IAM_ALLOW", "")
if allow:
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": allow, "Resource": "*"}]}
    iam.put_user_policy(UserName=user, PolicyName="anycloud-test", PolicyDocument=json.dumps(policy))
print(json.dumps({"access_key_id": key["AccessKeyId"], "secret_access_key": key["SecretAccessKey"]}))
"#;
        let out = self.python(SCRIPT, &[("IAM_USER", user), ("IAM_ALLOW", allow.unwrap_or(""))]);
        let key: Value = serde_json::from_str(out.trim()).unwrap();
        AwsKey {
            access_key_id: key["access_key_id"].as_str().unwrap().to_owned(),
            secret_access_key: key["secret_access_key"].as_str().unwrap().to_owned(),
        }
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An AWS access key.
#[derive(Debug, Clone)]
pub struct AwsKey {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
}

/// A fresh PostgreSQL database (`e2e_<uuid>`) made on the test server; dropped (with whatever
/// connections remain) when this is dropped.
pub struct PgDatabase {
    /// Its URL.
    pub url: String,
    name: String,
    admin_url: String,
}

impl PgDatabase {
    /// Creates the database. Never skipped: without a server the test fails.
    pub fn create() -> Self {
        let admin_url = postgres_url();
        let name = format!("e2e_{}", uuid::Uuid::new_v4().simple());
        block_on(async {
            let mut conn = sqlx::PgConnection::connect(&admin_url).await.unwrap_or_else(|err| {
                panic!(
                    "PostgreSQL at {admin_url} is required by the end-to-end tests (scripts/test starts it; or set \
                     ANYCLOUD_TEST_DATABASE_URL): {err}"
                )
            });
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
            conn.close().await.unwrap();
        });
        Self { url: with_database(&admin_url, &name), name, admin_url }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let admin_url = self.admin_url.clone();
        // A thread of its own: Drop may run inside a runtime.
        let dropped = std::thread::spawn(move || {
            block_on(async {
                let mut conn = sqlx::PgConnection::connect(&admin_url).await?;
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await?;
                conn.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
            panic!("dropping database {} failed: {dropped:?}", self.name);
        }
    }
}

/// `url` with its database replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority = base.find("://").map_or(0, |at| at + 3);
    let prefix = match base[authority..].find('/') {
        Some(slash) => &base[..authority + slash],
        None => base,
    };
    format!("{prefix}/{name}{query}")
}

/// Every row of the tables a credential touches, as PostgreSQL holds them, as text.
async fn postgres_dump(url: &str) -> String {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let mut dump = String::new();
    for table in SNAPSHOT_TABLES {
        let rows: Vec<String> =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT row_to_json(t)::text FROM {table} t")))
                .fetch_all(&mut conn)
                .await
                .unwrap();
        dump.push_str(&rows.join("\n"));
    }
    conn.close().await.unwrap();
    dump
}

/// The tables a snapshot holds.
pub const SNAPSHOT_TABLES: [&str; 4] = ["credentials", "engine_runs", "engine_steps", "engine_events"];

/// Row counts and full rows (JSON arrays, sorted) of [`SNAPSHOT_TABLES`].
pub type Snapshot = BTreeMap<String, (i64, Vec<String>)>;

/// Reads every row of [`SNAPSHOT_TABLES`] from the SQLite file at `path`, opened read-only.
/// Columns named in `masked` (`table.column`) read as NULL.
pub fn sqlite_snapshot(path: &Path, masked: &[&str]) -> Snapshot {
    block_on(async {
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path).read_only(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
        let mut snapshot = Snapshot::new();
        for table in SNAPSHOT_TABLES {
            let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(&mut conn)
                .await
                .unwrap();
            let columns: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_info($1) ORDER BY cid")
                .bind(table)
                .fetch_all(&mut conn)
                .await
                .unwrap();
            assert!(!columns.is_empty(), "table {table} has no columns");
            let select: Vec<String> = columns
                .iter()
                .map(|column| {
                    if masked.contains(&format!("{table}.{column}").as_str()) {
                        "NULL".to_owned()
                    } else {
                        format!("\"{column}\"")
                    }
                })
                .collect();
            let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT json_array({}) AS row FROM {table} ORDER BY row",
                select.join(", ")
            )))
            .fetch_all(&mut conn)
            .await
            .unwrap();
            snapshot.insert(table.to_owned(), (count, rows));
        }
        conn.close().await.unwrap();
        snapshot
    })
}

/// Runs one query that returns a text column on the SQLite file at `path`, opened read-only.
pub fn sqlite_strings(path: &Path, sql: &str) -> Vec<String> {
    block_on(async {
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path).read_only(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
        let rows = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned())).fetch_all(&mut conn).await.unwrap();
        conn.close().await.unwrap();
        rows
    })
}

/// A raw HTTP answer.
#[derive(Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: String,
}

impl HttpResponse {
    /// The body parsed as JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|err| panic!("not JSON ({err}): {self:?}"))
    }
}

/// `POST path` with `body` as JSON and the bearer `token`, as any API client sends it.
pub fn post_json(base: &str, token: &str, path: &str, body: &str) -> HttpResponse {
    let auth = format!("Bearer {token}");
    http(base, "POST", path, &[("Authorization", &auth), ("Content-Type", "application/json")], body.as_bytes())
}

/// Sends one HTTP/1.1 request over a fresh connection (`Connection: close`) and reads the
/// answer, with nothing between the test and the bytes on the wire. The body is written from
/// another thread, so that an answer sent before the whole body is read is still seen. It is
/// sent as given, with a `Content-Length`, unless `headers` name a `Transfer-Encoding` (then
/// `body` must be encoded accordingly).
pub fn http(base: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
    let authority = base.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let mut stream = TcpStream::connect(&authority).unwrap_or_else(|err| panic!("connecting to {authority}: {err}"));
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    let chunked = headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("transfer-encoding"));
    if !chunked && (!body.is_empty() || method != "GET") {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    let mut writer = stream.try_clone().unwrap();
    let written = std::thread::spawn(move || {
        let _ = writer.write_all(&bytes);
    });
    let mut raw = Vec::new();
    // A server that answers early may reset the connection after its answer: keep what came.
    let _ = stream.read_to_end(&mut raw);
    let _ = written.join();
    parse_response(&raw).unwrap_or_else(|| panic!("unreadable HTTP answer: {:?}", String::from_utf8_lossy(&raw)))
}

fn parse_response(raw: &[u8]) -> Option<HttpResponse> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    if headers.iter().any(|(name, value)| name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked")) {
        let mut decoded = Vec::new();
        let mut rest = &body[..];
        loop {
            let end = rest.windows(2).position(|w| w == b"\r\n")?;
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..end]).ok()?.trim(), 16).ok()?;
            if size == 0 {
                break;
            }
            decoded.extend_from_slice(rest.get(end + 2..end + 2 + size)?);
            rest = rest.get(end + 4 + size..)?;
        }
        body = decoded;
    }
    Some(HttpResponse { status, headers, body: String::from_utf8(body).ok()? })
}

/// The events of an inspected run (`inspect(id, true)`).
pub fn events(detail: &Value) -> Vec<Value> {
    detail["events"].as_array().cloned().expect("the run's events")
}

/// The pids named by `claimed` and `recovered` events (`claimed by OWNER (pid N)`), in order.
pub fn claim_pids(events: &[Value]) -> Vec<u32> {
    events
        .iter()
        .filter(|event| event["kind"] == "claimed" || event["kind"] == "recovered")
        .filter_map(|event| {
            let message = event["message"].as_str()?;
            let after = message.split("(pid ").nth(1)?;
            after.split(')').next()?.parse().ok()
        })
        .collect()
}

/// An HTTP server on `$PORT` answering every GET with `$VERSION`; `$0` is its marker (`python3 -c`). With
/// `MODE=crash` it exits 1 at once; with `MODE=mute` it runs without ever listening.
pub const VERSION_SERVER: &str = r#"
import http.server, os, sys, time
if os.environ.get("MODE") == "crash":
    sys.exit(1)
if os.environ.get("MODE") == "mute":
    time.sleep(3600)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = os.environ["VERSION"].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
"#;

/// An EC2 client of the test's own for moto at `endpoint`, in `region`: what a test reads moto's
/// state with, apart from the code under test.
pub fn moto_ec2(endpoint: &str, region: &str) -> aws_sdk_ec2::Client {
    use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_owned()))
        .credentials_provider(Credentials::new("AKIAANYCLOUDRAWTEST1", "raw", None, None, "test"))
        .endpoint_url(endpoint)
        .build();
    aws_sdk_ec2::Client::from_conf(config)
}
