//! The API's read benchmark, run with `cargo bench -p anycloud --bench api`: the latency of
//! `workflow inspect` and `workflow list` with 100,000 finished runs in the database.
//!
//! For each store (SQLite in a temporary data directory; PostgreSQL in a fresh database
//! `bench_api_<uuid>` on `ANYCLOUD_TEST_DATABASE_URL`, or `postgres://postgres@127.0.0.1:5432/test`,
//! dropped at the end) it:
//!
//! 1. starts the real `anycloud api serve` binary, waits until it listens and answers
//!    `/v1/health` (its schema is made by then) and stops it with SIGTERM;
//! 2. inserts the finished runs directly with SQL, in multi-row `INSERT`s of 1,000 runs and
//!    transactions of 10,000: kinds `credentials.verify` and `cluster.create`, statuses
//!    succeeded, failed and cancelled, 1,000 resource keys, and for each run the step rows and
//!    events the engine would have written (2–3 steps and 3–6 events);
//! 3. starts the API again and sends, one at a time over one keep-alive connection, a warm-up
//!    and then N requests of each kind: inspect a random run (`GET /v1/workflows/{id}`), its
//!    timeline (`.../events`, what `inspect --events` adds), the newest 50
//!    (`GET /v1/workflows?limit=50`), and the newest 50 filtered by status, by kind, by resource
//!    key, and by kind and status together; each filter also with values no run has (a status,
//!    a kind, a pair of common kind and status), right after the same filter with values that
//!    match, as the API's connections have prepared the statement by then;
//! 4. prints p50/p99/max of the server's own time (the `Server-Timing: app;dur=` header, from
//!    the router getting the request to the response being built) beside the time the client
//!    saw (send to the last byte of the body, over loopback), and PASS/MISS against a server
//!    p99 under 20 ms.
//!
//! Options, after `--`: `--store sqlite|postgres|both` (default both), `--runs N` (default
//! 100000), `--requests N` per query (default 2000), `--warmup N` per query (default 200),
//! `--quick` (10,000 runs, 200 requests, 20 warm-up: a smoke run), `--explain` (print each
//! query's plan: SQLite `EXPLAIN QUERY PLAN`, PostgreSQL `EXPLAIN ANALYZE` of the prepared
//! statement after 5 executions, i.e. the plan the API's cached statement uses), `--keep`
//! (keep the data directory and the PostgreSQL database, and say where), `--dir PATH` (where
//! the temporary data directory goes; default the temporary directory).
//!
//! The `anycloud` binary is `ANYCLOUD_BIN` if set, else the one next to this executable
//! (`target/release/anycloud` under `cargo bench`, which builds it with the bench profile, that
//! is the release settings). Without `--bench` in its arguments (as `cargo test --all-targets`
//! runs it) the binary only says how to run it.

use std::error::Error;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Row};

#[path = "../../engine/benches/support/machine.rs"]
mod machine;
use machine::{Cpu, cores, load_average, machine, now_ms, verdict};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// The target: the server's p99 for each query.
const TARGET_P99_MS: f64 = 20.0;

/// Runs per multi-row `INSERT`, and per transaction.
const RUNS_PER_INSERT: usize = 1_000;
const RUNS_PER_TRANSACTION: usize = 10_000;

/// Resource keys: half credentials, half clusters.
const KEYS_PER_KIND: usize = 500;

/// `next_at` of a run nothing will wake (the engine's `NEVER`): what finished runs hold.
const NEVER: i64 = i64::MAX;

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sqlite,
    Postgres,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

struct Options {
    stores: Vec<Kind>,
    runs: usize,
    requests: usize,
    warmup: usize,
    explain: bool,
    keep: bool,
    dir: PathBuf,
}

impl Options {
    fn parse(args: &[String]) -> Res<Self> {
        let mut stores = vec![Kind::Sqlite, Kind::Postgres];
        let (mut runs, mut requests, mut warmup) = (None, None, None);
        let (mut quick, mut explain, mut keep) = (false, false, false);
        let mut dir = std::env::temp_dir();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().cloned().ok_or_else(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--bench" => {}
                "--quick" => quick = true,
                "--explain" => explain = true,
                "--keep" => keep = true,
                "--store" => {
                    stores = match value("--store")?.as_str() {
                        "sqlite" => vec![Kind::Sqlite],
                        "postgres" => vec![Kind::Postgres],
                        "both" => vec![Kind::Sqlite, Kind::Postgres],
                        other => return Err(format!("unknown store `{other}`").into()),
                    }
                }
                "--runs" => runs = Some(value("--runs")?.parse::<usize>()?),
                "--requests" => requests = Some(value("--requests")?.parse::<usize>()?),
                "--warmup" => warmup = Some(value("--warmup")?.parse::<usize>()?),
                "--dir" => dir = PathBuf::from(value("--dir")?),
                other if other.starts_with("--") => return Err(format!("unknown option `{other}`").into()),
                _ => {} // a name filter cargo passes on: there is one benchmark
            }
        }
        let runs = runs.unwrap_or(if quick { 10_000 } else { 100_000 });
        if runs == 0 {
            return Err("--runs must be at least 1".into());
        }
        Ok(Self {
            stores,
            runs,
            requests: requests.unwrap_or(if quick { 200 } else { 2_000 }).max(1),
            warmup: warmup.unwrap_or(if quick { 20 } else { 200 }),
            explain,
            keep,
            dir,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The data set

const CREDENTIAL_STEPS: [&str; 2] = ["ask_provider", "record_verdict"];
const CLUSTER_STEPS: [&str; 3] = ["create_network", "create_vms", "install_k3s"];
const STATUSES: [&str; 3] = ["succeeded", "failed", "cancelled"];
const KINDS: [&str; 2] = ["credentials.verify", "cluster.create"];
/// The kind and status pairs some loaded runs have (no `credentials.verify` run is cancelled).
const KIND_STATUSES: [(&str, &str); 5] = [
    ("credentials.verify", "succeeded"),
    ("credentials.verify", "failed"),
    ("cluster.create", "succeeded"),
    ("cluster.create", "failed"),
    ("cluster.create", "cancelled"),
];
/// A kind no loaded run has (as when a new workflow ships): `list --kind` of it matches nothing.
const NEW_KIND: &str = "cluster.delete";

/// What was loaded, for the requests to pick from.
struct Dataset {
    ids: Vec<String>,
    keys: Vec<String>,
}

/// A SQL string literal (standard quoting: PostgreSQL's `standard_conforming_strings` and SQLite
/// agree).
fn lit(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn opt(text: Option<&str>) -> String {
    text.map_or_else(|| "NULL".to_owned(), lit)
}

fn key_name(index: usize) -> String {
    if index < KEYS_PER_KIND {
        format!("credential/team-{index:03}")
    } else {
        format!("cluster/prod-{:03}", index - KEYS_PER_KIND)
    }
}

/// The three multi-row `INSERT`s (runs, steps, events) for runs `from..to`, which a fresh
/// deterministic generator makes the same on every store.
struct Batch {
    runs: String,
    steps: String,
    events: String,
    step_rows: usize,
    event_rows: usize,
}

struct Generator {
    rng: StdRng,
    start_ms: i64,
    spacing_ms: i64,
}

impl Generator {
    fn new(total: usize) -> Self {
        // 90 days of history ending an hour ago.
        let span = 90 * 24 * 3600 * 1000_i64;
        let start_ms = now_ms() - 3600 * 1000 - span;
        Self { rng: StdRng::seed_from_u64(0x00a9_c10d), start_ms, spacing_ms: (span / total as i64).max(2) }
    }

    fn batch(&mut self, from: usize, to: usize, ids: &mut Vec<String>) -> Batch {
        let mut runs = Vec::with_capacity(to - from);
        let mut steps = Vec::new();
        let mut events = Vec::new();
        for index in from..to {
            let id = uuid::Builder::from_random_bytes(self.rng.random()).into_uuid().to_string();
            let cluster = self.rng.random_bool(0.4);
            let key = if cluster {
                KEYS_PER_KIND + self.rng.random_range(0..KEYS_PER_KIND)
            } else {
                self.rng.random_range(0..KEYS_PER_KIND)
            };
            let key = key_name(key);
            let name = key.split_once('/').map_or(key.as_str(), |(_, name)| name).to_owned();
            // 80% succeeded, 15% failed, 5% cancelled; but nobody cancels a verification
            // that takes seconds: only cluster.create runs are ever cancelled (12.5% of them).
            let roll = self.rng.random::<f64>();
            let status = match (cluster, roll) {
                (_, roll) if roll < 0.15 => "failed",
                (true, roll) if roll < 0.275 => "cancelled",
                _ => "succeeded",
            };
            let (kind, names, input): (&str, &[&str], String) = if cluster {
                let region = ["eu-west-1", "us-east-1", "europe-west4"][self.rng.random_range(0..3)];
                let input = format!(
                    r#"{{"name":"{name}","credential":"team-{:03}","region":"{region}","nodes":{},"instance_type":"t3.large"}}"#,
                    self.rng.random_range(0..KEYS_PER_KIND),
                    self.rng.random_range(1..=5)
                );
                ("cluster.create", &CLUSTER_STEPS, input)
            } else {
                ("credentials.verify", &CREDENTIAL_STEPS, format!(r#"{{"name":"{name}"}}"#))
            };
            let created =
                self.start_ms + index as i64 * self.spacing_ms + self.rng.random_range(0..self.spacing_ms / 2);
            let took =
                if cluster { self.rng.random_range(180_000..720_000) } else { self.rng.random_range(400..5_000) };
            let finished = created + took;
            // Times inside the run: submitted, claimed, then one per step (and undo), evenly.
            let mut clock = {
                let mut at = created;
                let tick = took / 10;
                move || {
                    at += tick;
                    at
                }
            };
            // The run's timeline positions, as the engine numbers them: each event, and each
            // forward step that succeeded (its row is its `step-succeeded` entry).
            let entries = std::cell::Cell::new(0_i64);
            let next_entry = || {
                entries.set(entries.get() + 1);
                entries.get()
            };
            let event = |events: &mut Vec<String>, at: i64, kind: &str, step: Option<&str>, message: &str| {
                let n = next_entry();
                events.push(format!("({}, {n}, {at}, {}, {}, {})", lit(&id), lit(kind), opt(step), lit(message)));
            };
            let step_row = |steps: &mut Vec<String>, phase: &str, idx: usize, status: &str, row: StepRow| {
                let n =
                    if phase == "forward" && status == "succeeded" { next_entry().to_string() } else { "NULL".into() };
                steps.push(format!(
                    "({}, {}, {idx}, {}, {}, {}, {}, {}, {}, {}, {n})",
                    lit(&id),
                    lit(phase),
                    lit(names[idx]),
                    lit(status),
                    row.attempts,
                    opt(row.output.as_deref()),
                    opt(row.error.as_deref()),
                    row.started,
                    row.finished
                ));
            };
            event(
                &mut events,
                created,
                "submitted",
                None,
                &format!("{kind} v1 submitted under resource key `{key}`; started at once by api-bench"),
            );
            event(&mut events, created, "claimed", Some(names[0]), "claimed by api-bench (pid 4242)");
            let first_output = step_output(names[0], &mut self.rng);
            let (step_index, output, error, reason, cancel) = match status {
                "succeeded" => {
                    for (idx, step) in names.iter().enumerate() {
                        let started = clock();
                        let done = clock();
                        let output = step_output(step, &mut self.rng);
                        step_row(&mut steps, "forward", idx, "succeeded", StepRow::ok(started, done, output));
                    }
                    event(&mut events, finished, "succeeded", None, "every step succeeded");
                    let output = if cluster {
                        format!(r#"{{"cluster":"{name}","endpoint":"https://10.0.3.4:6443"}}"#)
                    } else {
                        r#"{"verdict":"accepted","detail":"17 regions usable"}"#.to_owned()
                    };
                    (names.len(), Some(output), None, None, false)
                }
                "failed" => {
                    let (started, done) = (clock(), clock());
                    step_row(&mut steps, "forward", 0, "succeeded", StepRow::ok(started, done, first_output));
                    let message = format!("step `{}` failed: the provider refused: quota exceeded", names[1]);
                    let error = format!(
                        r#"{{"kind":"terminal","chain":["{message}","InstanceLimitExceeded: You have requested more instances than your current limit allows"]}}"#
                    );
                    let (started, done) = (clock(), clock());
                    steps.push(format!(
                        "({}, 'forward', 1, {}, 'failed', 3, NULL, {}, {started}, {done}, NULL)",
                        lit(&id),
                        lit(names[1]),
                        lit(&error)
                    ));
                    event(&mut events, done, "step-failed", Some(names[1]), &format!("attempt 3 failed: {message}"));
                    event(
                        &mut events,
                        done,
                        "unwinding",
                        None,
                        &format!("{message}; undoing completed steps in reverse order"),
                    );
                    let (started, done) = (clock(), clock());
                    step_row(&mut steps, "undo", 0, "undone", StepRow::ok(started, done, "null".to_owned()));
                    event(&mut events, done, "undo-succeeded", Some(names[0]), "undone on attempt 1");
                    event(&mut events, finished, "failed", None, "every completed step was undone");
                    (0, None, Some(error), Some(format!("{message}; every completed step was undone")), false)
                }
                _ => {
                    let (started, done) = (clock(), clock());
                    step_row(&mut steps, "forward", 0, "succeeded", StepRow::ok(started, done, first_output));
                    let asked = clock();
                    event(
                        &mut events,
                        asked,
                        "cancel-requested",
                        None,
                        "cancel requested; completed steps will be undone in reverse order",
                    );
                    let (started, done) = (clock(), clock());
                    step_row(&mut steps, "undo", 0, "undone", StepRow::ok(started, done, "null".to_owned()));
                    event(&mut events, done, "undo-succeeded", Some(names[0]), "undone on attempt 1");
                    event(&mut events, finished, "cancelled", None, "every completed step was undone");
                    (0, None, None, Some("cancel requested; every completed step was undone".to_owned()), true)
                }
            };
            runs.push(format!(
                "({}, {}, 1, {}, {}, {}, {}, {}, {step_index}, NULL, 0, {NEVER}, {}, {}, {}, 1, {created}, {finished}, {finished}, {})",
                lit(&id),
                lit(kind),
                lit(&key),
                lit(&input),
                opt(output.as_deref()),
                lit(status),
                lit(if status == "succeeded" { "forward" } else { "undo" }),
                opt(reason.as_deref()),
                opt(error.as_deref()),
                if cancel { "TRUE" } else { "FALSE" },
                entries.get(),
            ));
            ids.push(id);
        }
        let (step_rows, event_rows) = (steps.len(), events.len());
        Batch {
            runs: format!(
                "INSERT INTO engine_runs (id, kind, version, resource_key, input, output, status, phase, step_index, \
                 current_step, attempt, next_at, status_reason, error, cancel_requested, lease_generation, \
                 created_at, updated_at, finished_at, events) VALUES {}",
                runs.join(",\n")
            ),
            steps: format!(
                "INSERT INTO engine_steps (run_id, phase, idx, name, status, attempts, output, error, started_at, \
                 finished_at, n) VALUES {}",
                steps.join(",\n")
            ),
            events: format!(
                "INSERT INTO engine_events (run_id, n, at, kind, step, message) VALUES {}",
                events.join(",\n")
            ),
            step_rows,
            event_rows,
        }
    }
}

struct StepRow {
    attempts: u32,
    output: Option<String>,
    error: Option<String>,
    started: i64,
    finished: i64,
}

impl StepRow {
    fn ok(started: i64, finished: i64, output: String) -> Self {
        Self { attempts: 1, output: Some(output), error: None, started, finished }
    }
}

fn step_output(step: &str, rng: &mut StdRng) -> String {
    match step {
        "ask_provider" => format!(r#"{{"verdict":"accepted","detail":"{} regions usable"}}"#, rng.random_range(4..30)),
        "record_verdict" => r#""valid""#.to_owned(),
        "create_network" => format!(
            r#"{{"vpc":"vpc-{:08x}","subnets":["subnet-{:08x}","subnet-{:08x}"]}}"#,
            rng.random::<u32>(),
            rng.random::<u32>(),
            rng.random::<u32>()
        ),
        "create_vms" => format!(
            r#"{{"instances":["i-{:016x}","i-{:016x}","i-{:016x}"]}}"#,
            rng.random::<u64>(),
            rng.random::<u64>(),
            rng.random::<u64>()
        ),
        _ => r#"{"endpoint":"https://10.0.3.4:6443","version":"v1.31.4+k3s1"}"#.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Databases

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let host = base.find("://").map_or(0, |at| at + 3);
    let replaced = match base[host..].find('/') {
        Some(slash) => format!("{}/{name}", &base[..host + slash]),
        None => format!("{base}/{name}"),
    };
    match query {
        Some(query) => format!("{replaced}?{query}"),
        None => replaced,
    }
}

/// A direct connection to the store's database, for loading and explaining.
enum Conn {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

impl Conn {
    async fn open(kind: Kind, data_dir: &Path, database_url: Option<&str>) -> Res<Self> {
        Ok(match (kind, database_url) {
            (Kind::Postgres, Some(url)) => Self::Postgres(PgConnection::connect(url).await?),
            _ => Self::Sqlite(SqliteConnectOptions::new().filename(data_dir.join("anycloud.db")).connect().await?),
        })
    }

    async fn execute(&mut self, sql: String) -> Res<()> {
        match self {
            Self::Sqlite(conn) => {
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(conn).await?;
            }
            Self::Postgres(conn) => {
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(conn).await?;
            }
        }
        Ok(())
    }

    async fn count(&mut self, table: &str) -> Res<i64> {
        let sql = AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}"));
        Ok(match self {
            Self::Sqlite(conn) => sqlx::query_scalar(sql).fetch_one(conn).await?,
            Self::Postgres(conn) => sqlx::query_scalar(sql).fetch_one(conn).await?,
        })
    }

    async fn describe(&mut self) -> Res<String> {
        Ok(match self {
            Self::Sqlite(conn) => {
                let version: String = sqlx::query_scalar("SELECT sqlite_version()").fetch_one(&mut *conn).await?;
                let pages: i64 = sqlx::query_scalar("PRAGMA page_count").fetch_one(&mut *conn).await?;
                let size: i64 = sqlx::query_scalar("PRAGMA page_size").fetch_one(&mut *conn).await?;
                format!("SQLite {version} (this binary's sqlx build), file {:.1} MB", (pages * size) as f64 / 1e6)
            }
            Self::Postgres(conn) => {
                let version: String = sqlx::query_scalar("SHOW server_version").fetch_one(&mut *conn).await?;
                let size: i64 =
                    sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(&mut *conn).await?;
                let buffers: String = sqlx::query_scalar("SHOW shared_buffers").fetch_one(&mut *conn).await?;
                format!("PostgreSQL {version}, database {:.1} MB, shared_buffers {buffers}", size as f64 / 1e6)
            }
        })
    }

    /// The migrations applied and the indexes of `engine_runs`.
    async fn schema(&mut self) -> Res<String> {
        let migrations = "SELECT CAST(version AS TEXT) FROM _sqlx_migrations ORDER BY version";
        let (versions, indexes): (Vec<String>, Vec<String>) = match self {
            Self::Sqlite(conn) => (
                sqlx::query_scalar(migrations).fetch_all(&mut *conn).await?,
                sqlx::query_scalar(
                    "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'engine_runs' ORDER BY name",
                )
                .fetch_all(&mut *conn)
                .await?,
            ),
            Self::Postgres(conn) => (
                sqlx::query_scalar(migrations).fetch_all(&mut *conn).await?,
                sqlx::query_scalar(
                    "SELECT indexname::text FROM pg_indexes WHERE tablename = 'engine_runs' ORDER BY indexname",
                )
                .fetch_all(&mut *conn)
                .await?,
            ),
        };
        Ok(format!("migrations {}; indexes of engine_runs: {}", versions.join(", "), indexes.join(", ")))
    }

    async fn close(self) -> Res<()> {
        match self {
            Self::Sqlite(conn) => conn.close().await?,
            Self::Postgres(conn) => conn.close().await?,
        }
        Ok(())
    }
}

/// Inserts `options.runs` finished runs, with their steps and events.
async fn load(conn: &mut Conn, kind: Kind, runs: usize) -> Res<Dataset> {
    let started = Instant::now();
    let mut generator = Generator::new(runs);
    let mut ids = Vec::with_capacity(runs);
    let (mut steps, mut events) = (0, 0);
    let mut from = 0;
    while from < runs {
        conn.execute("BEGIN".to_owned()).await?;
        let end = (from + RUNS_PER_TRANSACTION).min(runs);
        while from < end {
            let to = (from + RUNS_PER_INSERT).min(end);
            let batch = generator.batch(from, to, &mut ids);
            conn.execute(batch.runs).await?;
            conn.execute(batch.steps).await?;
            conn.execute(batch.events).await?;
            steps += batch.step_rows;
            events += batch.event_rows;
            from = to;
        }
        conn.execute("COMMIT".to_owned()).await?;
    }
    let inserted = started.elapsed();
    // PostgreSQL: what autovacuum would do within a minute or so of such a load (statistics for
    // the planner, the visibility map for index-only scans); done here so the figures do not
    // depend on whether it has run yet. SQLite: the engine never runs ANALYZE, so neither does
    // this (the planner goes without statistics, as it does in production).
    if kind == Kind::Postgres {
        for table in ["engine_runs", "engine_steps", "engine_events"] {
            conn.execute(format!("VACUUM ANALYZE {table}")).await?;
        }
    } else {
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)".to_owned()).await?;
    }
    let counted =
        (conn.count("engine_runs").await?, conn.count("engine_steps").await?, conn.count("engine_events").await?);
    if counted.0 != runs as i64 || counted.1 != steps as i64 || counted.2 != events as i64 {
        return Err(format!("loaded {counted:?} rows, expected ({runs}, {steps}, {events})").into());
    }
    println!(
        "[{}] loaded {runs} finished runs, {steps} steps, {events} events in {:.1} s{}",
        kind.name(),
        inserted.as_secs_f64(),
        if kind == Kind::Postgres {
            format!(" (then VACUUM ANALYZE: {:.1} s)", (started.elapsed() - inserted).as_secs_f64())
        } else {
            String::new()
        }
    );
    let keys = (0..2 * KEYS_PER_KIND).map(key_name).collect();
    Ok(Dataset { ids, keys })
}

// ---------------------------------------------------------------------------------------------
// The API process

struct Server {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Server {
    fn start(bin: &Path, data_dir: &Path, database_url: Option<&str>, log: &Path) -> Res<Self> {
        let stderr = File::options().create(true).append(true).open(log)?;
        let mut command = Command::new(bin);
        command.args(["api", "serve", "--id", "bench", "--port", "0", "--data-dir"]).arg(data_dir);
        if let Some(url) = database_url {
            command.args(["--database-url", url]);
        }
        let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr).spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.split_once("listening on ").map(|(_, rest)| rest) {
                    let url = rest.split_whitespace().next().unwrap_or_default().to_owned();
                    let _ = sender.send(url);
                }
            }
        });
        let mut server = Self { child, url: String::new(), log: log.to_owned() };
        match receiver.recv_timeout(Duration::from_secs(120)) {
            Ok(url) => server.url = url,
            Err(_) => {
                let _ = server.child.kill();
                let _ = server.child.wait();
                return Err(format!("the API did not start; its log:\n{}", server.log_tail()).into());
            }
        }
        // The API prints its address before it serves (and before it handles SIGTERM): wait
        // until it answers.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.healthy() {
            if Instant::now() > deadline {
                return Err(format!("the API never answered /v1/health; its log:\n{}", server.log_tail()).into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(server)
    }

    /// `GET /v1/health` answers 200.
    fn healthy(&self) -> bool {
        let Some(address) = self.url.strip_prefix("http://") else { return false };
        let Ok(mut stream) = TcpStream::connect(address) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut answer = String::new();
        stream.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").is_ok()
            && stream.read_to_string(&mut answer).is_ok()
            && answer.starts_with("HTTP/1.1 200")
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGTERM, then wait for a clean exit (the engine releases its leases).
    fn stop(&mut self) -> Res<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    return Err(format!("the API exited with {status}; its log:\n{}", self.log_tail()).into());
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err("the API did not stop within 60 s of SIGTERM; killed it".into())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn find_binary() -> Res<PathBuf> {
    if let Some(path) = std::env::var_os("ANYCLOUD_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().ok_or("the bench executable has no directory")?;
    for candidate in [dir.join("anycloud"), dir.join("../anycloud")] {
        if candidate.is_file() {
            return Ok(candidate.canonicalize()?);
        }
    }
    Err(format!(
        "no `anycloud` binary next to {}: build it with `cargo build -p anycloud --release`, or set ANYCLOUD_BIN",
        exe.display()
    )
    .into())
}

// ---------------------------------------------------------------------------------------------
// The queries

#[derive(Clone, Copy)]
enum Query {
    Inspect,
    Events,
    List,
    ListStatus,
    ListStatusNone,
    ListKind,
    ListKindNone,
    ListResource,
    ListKindStatus,
    ListKindStatusNone,
    ListNewKindStatusNone,
}

impl Query {
    /// In this order: a filter that matches nothing comes right after the same filter with
    /// values that match, so that it meets the statement as the API's connections have cached it.
    const ALL: [Query; 11] = [
        Self::Inspect,
        Self::Events,
        Self::List,
        Self::ListStatus,
        Self::ListStatusNone,
        Self::ListKind,
        Self::ListKindNone,
        Self::ListResource,
        Self::ListKindStatus,
        Self::ListKindStatusNone,
        Self::ListNewKindStatusNone,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Inspect => "inspect",
            Self::Events => "inspect --events (timeline)",
            Self::List => "list (newest 50)",
            Self::ListStatus => "list --status",
            Self::ListStatusNone => "list --status (no run has it)",
            Self::ListKind => "list --kind",
            Self::ListKindNone => "list --kind (no run of it)",
            Self::ListResource => "list --resource",
            Self::ListKindStatus => "list --kind --status",
            Self::ListKindStatusNone => "list --kind --status (no run has the pair)",
            Self::ListNewKindStatusNone => "list --kind --status (no run of the kind)",
        }
    }

    fn path(self, rng: &mut StdRng, data: &Dataset) -> String {
        fn pick<'a, T>(rng: &mut StdRng, values: &'a [T]) -> &'a T {
            &values[rng.random_range(0..values.len())]
        }
        match self {
            Self::Inspect => format!("/v1/workflows/{}", pick(rng, &data.ids)),
            Self::Events => format!("/v1/workflows/{}/events", pick(rng, &data.ids)),
            Self::List => "/v1/workflows?limit=50".to_owned(),
            Self::ListStatus => format!("/v1/workflows?limit=50&status={}", pick(rng, &STATUSES)),
            Self::ListStatusNone => "/v1/workflows?limit=50&status=needs-attention".to_owned(),
            Self::ListKind => format!("/v1/workflows?limit=50&kind={}", pick(rng, &KINDS)),
            Self::ListKindNone => format!("/v1/workflows?limit=50&kind={NEW_KIND}"),
            Self::ListResource => {
                format!("/v1/workflows?limit=50&resource={}", pick(rng, &data.keys).replace('/', "%2F"))
            }
            Self::ListKindStatus => {
                let (kind, status) = pick(rng, &KIND_STATUSES);
                format!("/v1/workflows?limit=50&kind={kind}&status={status}")
            }
            Self::ListKindStatusNone => "/v1/workflows?limit=50&kind=credentials.verify&status=cancelled".to_owned(),
            Self::ListNewKindStatusNone => format!("/v1/workflows?limit=50&kind={NEW_KIND}&status=succeeded"),
        }
    }

    /// Checks one answer: the right run, or up to 50 runs that match the filter, newest first.
    fn check(self, path: &str, body: &Value) -> Res<()> {
        match self {
            Self::Inspect => {
                let id = path.trim_start_matches("/v1/workflows/");
                let steps = body["workflow"]["steps"].as_array().map_or(0, Vec::len);
                if body["workflow"]["run"]["id"].as_str() != Some(id) || steps < 2 {
                    return Err(format!("inspect of {id} answered {body}").into());
                }
            }
            Self::Events => {
                let events = body["events"].as_array().ok_or("no events")?;
                if events.len() < 5 {
                    return Err(format!("{path}: {} events", events.len()).into());
                }
            }
            _ => {
                let runs = body["workflows"].as_array().ok_or("no workflows")?;
                let none = matches!(
                    self,
                    Self::ListStatusNone | Self::ListKindNone | Self::ListKindStatusNone | Self::ListNewKindStatusNone
                );
                if runs.is_empty() != none || runs.len() > 50 {
                    return Err(format!("{path}: {} runs", runs.len()).into());
                }
                let query = path.split_once('?').map_or("", |(_, query)| query);
                for pair in query.split('&') {
                    let (field, want) = pair.split_once('=').unwrap_or((pair, ""));
                    let want = want.replace("%2F", "/");
                    let field = match field {
                        "status" => "status",
                        "kind" => "kind",
                        "resource" => "resource_key",
                        _ => continue,
                    };
                    if let Some(run) = runs.iter().find(|run| run[field].as_str() != Some(want.as_str())) {
                        return Err(format!("{path}: a run with {field} {}", run[field]).into());
                    }
                }
                let seqs: Vec<i64> = runs.iter().filter_map(|run| run["seq"].as_i64()).collect();
                if seqs.windows(2).any(|pair| pair[0] <= pair[1]) {
                    return Err(format!("{path}: not newest first").into());
                }
            }
        }
        Ok(())
    }
}

struct Figures {
    server: Vec<f64>,
    client: Vec<f64>,
    machine_busy: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

struct Stats {
    p50: f64,
    p99: f64,
    max: f64,
}

impl Stats {
    fn of(values: &mut [f64]) -> Self {
        values.sort_by(f64::total_cmp);
        Self { p50: percentile(values, 0.50), p99: percentile(values, 0.99), max: percentile(values, 1.0) }
    }
}

async fn measure(
    client: &reqwest::Client,
    server: &Server,
    token: &str,
    data: &Dataset,
    query: Query,
    options: &Options,
) -> Res<Figures> {
    let mut rng = StdRng::seed_from_u64(query as u64 + 1);
    let mut figures = Figures {
        server: Vec::with_capacity(options.requests),
        client: Vec::with_capacity(options.requests),
        machine_busy: 0.0,
    };
    let mut cpu = Cpu::now();
    for n in 0..options.warmup + options.requests {
        if n == options.warmup {
            cpu = Cpu::now();
        }
        let path = query.path(&mut rng, data);
        let sent = Instant::now();
        let response = client.get(format!("{}{path}", server.url)).bearer_auth(token).send().await?;
        let status = response.status();
        let server_ms = response
            .headers()
            .get("server-timing")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').find_map(|part| part.trim().strip_prefix("dur=")))
            .and_then(|ms| ms.parse::<f64>().ok());
        let body = response.bytes().await?;
        let client_ms = sent.elapsed().as_secs_f64() * 1000.0;
        if !status.is_success() {
            return Err(format!("GET {path}: {status}: {}", String::from_utf8_lossy(&body)).into());
        }
        let server_ms = server_ms.ok_or_else(|| format!("GET {path}: no Server-Timing header"))?;
        if n == 0 || n == options.warmup {
            query.check(&path, &serde_json::from_slice(&body)?)?;
        }
        if n >= options.warmup {
            figures.server.push(server_ms);
            figures.client.push(client_ms);
        }
    }
    figures.machine_busy = cpu.machine_busy(Cpu::now());
    Ok(figures)
}

// ---------------------------------------------------------------------------------------------
// Query plans

const RUN_COLUMNS: &str = "seq, id, kind, version, resource_key, input, output, status, phase, \
     step_index, current_step, attempt, step_started_at, next_at, status_reason, error, \
     cancel_requested, lease_owner, lease_expires_at, lease_generation, created_at, updated_at, finished_at";

/// A statement `Store` sends (as in `engine/src/store/mod.rs`), with example values: `warm` to
/// execute it with 5 times first (on PostgreSQL), then `values` to show the plan of.
struct Plan {
    name: &'static str,
    sql: String,
    warm: Vec<String>,
    values: Vec<String>,
}

fn plan_queries(data: &Dataset) -> Vec<Plan> {
    let id = lit(&data.ids[data.ids.len() / 2]);
    let list = |filters: &[&str]| {
        let mut conditions: Vec<String> =
            filters.iter().enumerate().map(|(at, column)| format!("{column} = ${}", at + 1)).collect();
        conditions.push(format!("seq < ${}", filters.len() + 1));
        format!(
            "SELECT {RUN_COLUMNS} FROM engine_runs WHERE {} ORDER BY seq DESC LIMIT ${}",
            conditions.join(" AND "),
            filters.len() + 2
        )
    };
    let page = |values: &[&str]| {
        let mut values: Vec<String> = values.iter().map(|value| lit(value)).collect();
        values.push(i64::MAX.to_string());
        values.push("50".to_owned());
        values
    };
    let plan = |name, sql: String, warm: Vec<String>, values: Vec<String>| Plan { name, sql, warm, values };
    let key = data.keys[KEYS_PER_KIND + 7].as_str();
    vec![
        plan(
            "inspect: the run",
            format!("SELECT {RUN_COLUMNS} FROM engine_runs WHERE id = $1"),
            vec![id.clone()],
            vec![id.clone()],
        ),
        plan(
            "inspect: its steps",
            "SELECT phase, idx, name, status, attempts, output, error, started_at, finished_at \
             FROM engine_steps WHERE run_id = $1 ORDER BY finished_at, phase, idx"
                .to_owned(),
            vec![id.clone()],
            vec![id.clone()],
        ),
        plan(
            "inspect --events: the timeline",
            "SELECT n, at, kind, step, message, NULL AS attempts, NULL AS took FROM engine_events \
             WHERE run_id = $1 AND n > $2 \
             UNION ALL \
             SELECT n, finished_at, 'step-succeeded', name, NULL, attempts, finished_at - started_at \
             FROM engine_steps WHERE run_id = $1 AND n > $2 \
             ORDER BY 1"
                .to_owned(),
            vec![id.clone(), "0".to_owned()],
            vec![id, "0".to_owned()],
        ),
        plan("list (newest 50)", list(&[]), page(&[]), page(&[])),
        plan("list --status cancelled", list(&["status"]), page(&["failed"]), page(&["cancelled"])),
        plan(
            "list --status needs-attention (no match)",
            list(&["status"]),
            page(&["failed"]),
            page(&["needs-attention"]),
        ),
        plan("list --kind cluster.create", list(&["kind"]), page(&["credentials.verify"]), page(&["cluster.create"])),
        plan("list --kind cluster.delete (no match)", list(&["kind"]), page(&["cluster.create"]), page(&[NEW_KIND])),
        plan("list --resource", list(&["resource_key"]), page(&[key]), page(&[key])),
        plan(
            "list --kind cluster.create --status cancelled",
            list(&["kind", "status"]),
            page(&["credentials.verify", "failed"]),
            page(&["cluster.create", "cancelled"]),
        ),
        plan(
            "list --kind credentials.verify --status cancelled (no match)",
            list(&["kind", "status"]),
            page(&["credentials.verify", "failed"]),
            page(&["credentials.verify", "cancelled"]),
        ),
        plan(
            "list --kind cluster.delete --status succeeded (no match)",
            list(&["kind", "status"]),
            page(&["credentials.verify", "failed"]),
            page(&[NEW_KIND, "succeeded"]),
        ),
    ]
}

async fn explain(conn: &mut Conn, kind: Kind, data: &Dataset) -> Res<()> {
    for (at, plan) in plan_queries(data).into_iter().enumerate() {
        println!("[{}] plan of {}:", kind.name(), plan.name);
        let lines: Vec<String> = match conn {
            Conn::Sqlite(conn) => {
                // Without ANALYZE statistics SQLite's plan does not depend on the values; they
                // are substituted all the same.
                let mut text = plan.sql.clone();
                for (index, value) in plan.values.iter().enumerate().rev() {
                    text = text.replace(&format!("${}", index + 1), value);
                }
                let rows = sqlx::raw_sql(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {text}"))).fetch_all(conn).await?;
                rows.iter()
                    .map(|row| Ok::<_, sqlx::Error>(format!("  {}", row.try_get::<String, _>(3)?)))
                    .collect::<Result<_, _>>()?
            }
            Conn::Postgres(conn) => {
                // sqlx prepares each statement once per connection and reuses it; after 5
                // executions PostgreSQL may switch that statement to a generic plan. Show the
                // plan it uses then, for the values asked.
                let statement = format!("bench_plan_{at}");
                let sql = format!("PREPARE {statement} AS {}", plan.sql);
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *conn).await?;
                let warm = format!("EXECUTE {statement}({})", plan.warm.join(", "));
                for _ in 0..5 {
                    sqlx::raw_sql(AssertSqlSafe(warm.clone())).execute(&mut *conn).await?;
                }
                let sql = format!("EXPLAIN (ANALYZE, BUFFERS) EXECUTE {statement}({})", plan.values.join(", "));
                let rows = sqlx::raw_sql(AssertSqlSafe(sql)).fetch_all(&mut *conn).await?;
                sqlx::raw_sql(AssertSqlSafe(format!("DEALLOCATE {statement}"))).execute(&mut *conn).await?;
                rows.iter()
                    .map(|row| Ok::<_, sqlx::Error>(format!("  {}", row.try_get::<String, _>(0)?)))
                    .collect::<Result<_, _>>()?
            }
        };
        for line in lines {
            println!("{line}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// One store

struct Line {
    store: Kind,
    query: Query,
    requests: usize,
    server: Stats,
    client: Stats,
    machine_busy: f64,
}

async fn bench_store(kind: Kind, bin: &Path, options: &Options) -> Res<Vec<Line>> {
    let dir = tempfile::Builder::new().prefix("anycloud-api-bench-").tempdir_in(&options.dir)?;
    let data_dir = dir.path().join("data");
    let log = dir.path().join("api.log");
    let mut database = None;
    if kind == Kind::Postgres {
        let name = format!("bench_api_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&anycloud_engine::testing::postgres_url()).await?;
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await?;
        admin.close().await?;
        database = Some(name);
    }
    let database_url = database.as_deref().map(|name| with_database(&anycloud_engine::testing::postgres_url(), name));
    let result = bench_on(kind, bin, options, &data_dir, database_url.as_deref(), &log).await;
    if options.keep {
        let kept = dir.keep();
        println!("[{}] kept {} and database {}", kind.name(), kept.display(), database_url.as_deref().unwrap_or("-"));
        return result;
    }
    if let Some(name) = database {
        let mut admin = PgConnection::connect(&anycloud_engine::testing::postgres_url()).await?;
        sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut admin)
            .await?;
        admin.close().await?;
        println!("[{}] dropped database {name}", kind.name());
    }
    result
}

async fn bench_on(
    kind: Kind,
    bin: &Path,
    options: &Options,
    data_dir: &Path,
    database_url: Option<&str>,
    log: &Path,
) -> Res<Vec<Line>> {
    let store = kind.name();
    let mut server = Server::start(bin, data_dir, database_url, log)?;
    server.stop()?;
    println!("[{store}] the API made its schema and stopped");
    let mut conn = Conn::open(kind, data_dir, database_url).await?;
    let data = load(&mut conn, kind, options.runs).await?;
    println!("[{store}] {}", conn.describe().await?);
    println!("[{store}] {}", conn.schema().await?);
    let mut server = Server::start(bin, data_dir, database_url, log)?;
    println!("[{store}] the API listens on {} again", server.url);
    let token = std::fs::read_to_string(data_dir.join("token"))?.trim().to_owned();
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build()?;
    let mut lines = Vec::new();
    for query in Query::ALL {
        let before = load_average();
        let figures = measure(&client, &server, &token, &data, query, options).await?;
        let (mut server_ms, mut client_ms) = (figures.server, figures.client);
        let line = Line {
            store: kind,
            query,
            requests: server_ms.len(),
            server: Stats::of(&mut server_ms),
            client: Stats::of(&mut client_ms),
            machine_busy: figures.machine_busy,
        };
        println!(
            "[{store}] {:<42} server p50 {:>6.3} p99 {:>6.3} max {:>7.3} ms | client p50 {:>6.3} p99 {:>6.3} max {:>7.3} ms \
             | {} requests, machine {:.2} of {} cores busy, load {before} -> {} | p99 < {TARGET_P99_MS} ms {}",
            query.name(),
            line.server.p50,
            line.server.p99,
            line.server.max,
            line.client.p50,
            line.client.p99,
            line.client.max,
            line.requests,
            line.machine_busy,
            cores(),
            load_average(),
            verdict(line.server.p99 < TARGET_P99_MS),
        );
        lines.push(line);
    }
    if options.explain {
        explain(&mut conn, kind, &data).await?;
    }
    conn.close().await?;
    server.stop()?;
    Ok(lines)
}

fn summary(lines: &[Line]) {
    println!();
    println!("== summary: server time (Server-Timing) and client time (loopback), ms ==");
    println!(
        "| store | query | requests | server p50 | server p99 | server max | client p50 | client p99 | client max | \
         server p99 < {TARGET_P99_MS} ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for line in lines {
        println!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} |",
            line.store.name(),
            line.query.name(),
            line.requests,
            line.server.p50,
            line.server.p99,
            line.server.max,
            line.client.p50,
            line.client.p99,
            line.client.max,
            verdict(line.server.p99 < TARGET_P99_MS),
        );
    }
}

fn run(options: &Options) -> Res<()> {
    let bin = find_binary()?;
    println!("anycloud API benchmark: workflow inspect and list with {} finished runs", options.runs);
    println!("machine: {}", machine());
    println!("binary: {}", bin.display());
    println!(
        "{} requests per query after {} of warm-up, one at a time over one keep-alive connection",
        options.requests, options.warmup
    );
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut lines = Vec::new();
    for kind in &options.stores {
        println!();
        println!("== {} ==", kind.name());
        lines.extend(runtime.block_on(bench_store(*kind, &bin, options))?);
    }
    summary(&lines);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|arg| arg == "--bench") {
        println!("API benchmark: run it with `cargo bench -p anycloud --bench api`");
        return;
    }
    if let Err(err) = Options::parse(&args).and_then(|options| run(&options)) {
        eprintln!("API benchmark failed: {err}");
        std::process::exit(1);
    }
}
