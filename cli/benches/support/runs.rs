//! 100,000 finished workflow runs, as the engine would have written them, loaded with plain SQL
//! into an API's database (SQLite or PostgreSQL), and a direct connection to that database.
//! Shared by `cli/benches/api.rs` and `cli/benches/console.rs` (included with `#[path]`).
//!
//! The runs: kinds `credentials.verify` (60 %, 2 steps) and `cluster.create` (40 %, 3 steps),
//! 1,000 resource keys (`credential/team-NNN`, `cluster/prod-NNN`), spread over 90 days ending an
//! hour ago; 80 % succeeded, 15 % failed (one step succeeded, the next failed terminally, the
//! first was undone), 5 % cancelled (only `cluster.create` runs). Each run has the step rows and
//! the numbered events the engine writes. A fixed seed makes them the same on every store.
// Each benchmark uses a part of this module.
#![allow(dead_code)]

use std::error::Error;
use std::path::Path;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::postgres::PgConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

use super::machine::now_ms;

pub type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Runs per multi-row `INSERT`, and per transaction.
const RUNS_PER_INSERT: usize = 1_000;
const RUNS_PER_TRANSACTION: usize = 10_000;

/// Resource keys: half credentials, half clusters.
pub const KEYS_PER_KIND: usize = 500;

/// `next_at` of a run nothing will wake (the engine's `NEVER`): what finished runs hold.
const NEVER: i64 = i64::MAX;

/// A store.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The data set

const CREDENTIAL_STEPS: [&str; 2] = ["ask_provider", "record_verdict"];
const CLUSTER_STEPS: [&str; 3] = ["create_network", "create_vms", "install_k3s"];
pub const STATUSES: [&str; 3] = ["succeeded", "failed", "cancelled"];
pub const KINDS: [&str; 2] = ["credentials.verify", "cluster.create"];
/// The kind and status pairs some loaded runs have (no `credentials.verify` run is cancelled).
pub const KIND_STATUSES: [(&str, &str); 5] = [
    ("credentials.verify", "succeeded"),
    ("credentials.verify", "failed"),
    ("cluster.create", "succeeded"),
    ("cluster.create", "failed"),
    ("cluster.create", "cancelled"),
];
/// A kind no loaded run has (as when a new workflow ships): `list --kind` of it matches nothing.
pub const NEW_KIND: &str = "cluster.delete";

/// What was loaded, for the requests to pick from.
pub struct Dataset {
    pub ids: Vec<String>,
    pub keys: Vec<String>,
}

/// A SQL string literal (standard quoting: PostgreSQL's `standard_conforming_strings` and SQLite
/// agree).
pub fn lit(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

pub fn opt(text: Option<&str>) -> String {
    text.map_or_else(|| "NULL".to_owned(), lit)
}

pub fn key_name(index: usize) -> String {
    if index < KEYS_PER_KIND {
        format!("credential/team-{index:03}")
    } else {
        format!("cluster/prod-{:03}", index - KEYS_PER_KIND)
    }
}

/// The three multi-row `INSERT`s (runs, steps, events) for runs `from..to`, which a fresh
/// deterministic generator makes the same on every store.
pub struct Batch {
    pub runs: String,
    pub steps: String,
    pub events: String,
    pub step_rows: usize,
    pub event_rows: usize,
}

/// The rows of a batch, as `VALUES` tuples.
#[derive(Default)]
struct Rows {
    runs: Vec<String>,
    steps: Vec<String>,
    events: Vec<String>,
}

impl Rows {
    fn into_batch(self) -> Batch {
        let (step_rows, event_rows) = (self.steps.len(), self.events.len());
        Batch {
            runs: format!(
                "INSERT INTO engine_runs (id, kind, version, resource_key, input, output, status, phase, step_index, \
                 current_step, attempt, next_at, status_reason, error, cancel_requested, lease_generation, \
                 created_at, updated_at, finished_at, events) VALUES {}",
                self.runs.join(",\n")
            ),
            steps: format!(
                "INSERT INTO engine_steps (run_id, phase, idx, name, status, attempts, output, error, started_at, \
                 finished_at, n) VALUES {}",
                self.steps.join(",\n")
            ),
            events: format!(
                "INSERT INTO engine_events (run_id, n, at, kind, step, message) VALUES {}",
                self.events.join(",\n")
            ),
            step_rows,
            event_rows,
        }
    }
}

pub struct Generator {
    rng: StdRng,
    start_ms: i64,
    spacing_ms: i64,
}

/// How a run ended, for its own row.
struct End {
    step_index: usize,
    output: Option<String>,
    error: Option<String>,
    reason: Option<String>,
    cancel: bool,
}

impl Generator {
    pub fn new(total: usize) -> Self {
        // 90 days of history ending an hour ago.
        let span = 90 * 24 * 3600 * 1000_i64;
        let start_ms = now_ms() - 3600 * 1000 - span;
        Self { rng: StdRng::seed_from_u64(0x00a9_c10d), start_ms, spacing_ms: (span / total as i64).max(2) }
    }

    pub fn batch(&mut self, from: usize, to: usize, ids: &mut Vec<String>) -> Batch {
        let mut rows = Rows { runs: Vec::with_capacity(to - from), ..Rows::default() };
        for index in from..to {
            let id = self.run(index, &mut rows);
            ids.push(id);
        }
        rows.into_batch()
    }

    /// Run `index`: its row, steps and events; answers its id.
    fn run(&mut self, index: usize, rows: &mut Rows) -> String {
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
        let (kind, names, input) = self.kind_and_input(cluster, &name);
        let created = self.start_ms + index as i64 * self.spacing_ms + self.rng.random_range(0..self.spacing_ms / 2);
        let took = if cluster { self.rng.random_range(180_000..720_000) } else { self.rng.random_range(400..5_000) };
        let finished = created + took;
        let mut run = RunRows {
            id: &id,
            names,
            entries: 0,
            at: created,
            tick: took / 10,
            steps: &mut rows.steps,
            events: &mut rows.events,
        };
        let submitted = format!("{kind} v1 submitted under resource key `{key}`; started at once by api-bench");
        run.event(created, "submitted", None, &submitted);
        run.event(created, "claimed", Some(names[0]), "claimed by api-bench (pid 4242)");
        let first_output = step_output(names[0], &mut self.rng);
        let end = match status {
            "succeeded" => run.succeeded(finished, cluster, &name, &mut self.rng),
            "failed" => run.failed(finished, first_output),
            _ => run.cancelled(finished, first_output),
        };
        let entries = run.entries;
        rows.runs.push(format!(
            "({}, {}, 1, {}, {}, {}, {}, {}, {}, NULL, 0, {NEVER}, {}, {}, {}, 1, {created}, {finished}, {finished}, {entries})",
            lit(&id),
            lit(kind),
            lit(&key),
            lit(&input),
            opt(end.output.as_deref()),
            lit(status),
            lit(if status == "succeeded" { "forward" } else { "undo" }),
            end.step_index,
            opt(end.reason.as_deref()),
            opt(end.error.as_deref()),
            if end.cancel { "TRUE" } else { "FALSE" },
        ));
        id
    }

    /// The run's kind, step names and input.
    fn kind_and_input(&mut self, cluster: bool, name: &str) -> (&'static str, &'static [&'static str], String) {
        if cluster {
            let region = ["eu-west-1", "us-east-1", "europe-west4"][self.rng.random_range(0..3)];
            let input = format!(
                r#"{{"name":"{name}","credential":"team-{:03}","region":"{region}","nodes":{},"instance_type":"t3.large"}}"#,
                self.rng.random_range(0..KEYS_PER_KIND),
                self.rng.random_range(1..=5)
            );
            ("cluster.create", &CLUSTER_STEPS, input)
        } else {
            ("credentials.verify", &CREDENTIAL_STEPS, format!(r#"{{"name":"{name}"}}"#))
        }
    }
}

/// One run's step rows and events as they are written: its timeline positions, as the engine
/// numbers them (each event, and each forward step that succeeded: its row is its
/// `step-succeeded` entry), and a clock of times inside the run (submitted, claimed, then one per
/// step and undo, evenly).
struct RunRows<'a> {
    id: &'a str,
    names: &'static [&'static str],
    entries: i64,
    at: i64,
    tick: i64,
    steps: &'a mut Vec<String>,
    events: &'a mut Vec<String>,
}

impl RunRows<'_> {
    fn clock(&mut self) -> i64 {
        self.at += self.tick;
        self.at
    }

    fn next_entry(&mut self) -> i64 {
        self.entries += 1;
        self.entries
    }

    fn event(&mut self, at: i64, kind: &str, step: Option<&str>, message: &str) {
        let n = self.next_entry();
        self.events.push(format!("({}, {n}, {at}, {}, {}, {})", lit(self.id), lit(kind), opt(step), lit(message)));
    }

    fn step_row(&mut self, phase: &str, idx: usize, status: &str, row: StepRow) {
        let n = if phase == "forward" && status == "succeeded" { self.next_entry().to_string() } else { "NULL".into() };
        self.steps.push(format!(
            "({}, {}, {idx}, {}, {}, {}, {}, {}, {}, {}, {n})",
            lit(self.id),
            lit(phase),
            lit(self.names[idx]),
            lit(status),
            row.attempts,
            opt(row.output.as_deref()),
            opt(row.error.as_deref()),
            row.started,
            row.finished
        ));
    }

    /// Every step succeeded.
    fn succeeded(&mut self, finished: i64, cluster: bool, name: &str, rng: &mut StdRng) -> End {
        for (idx, step) in self.names.iter().enumerate() {
            let started = self.clock();
            let done = self.clock();
            let output = step_output(step, rng);
            self.step_row("forward", idx, "succeeded", StepRow::ok(started, done, output));
        }
        self.event(finished, "succeeded", None, "every step succeeded");
        let output = if cluster {
            format!(r#"{{"cluster":"{name}","endpoint":"https://10.0.3.4:6443"}}"#)
        } else {
            r#"{"verdict":"accepted","detail":"17 regions usable"}"#.to_owned()
        };
        End { step_index: self.names.len(), output: Some(output), error: None, reason: None, cancel: false }
    }

    /// The first step succeeded, the second failed terminally, the first was undone.
    fn failed(&mut self, finished: i64, first_output: String) -> End {
        let (started, done) = (self.clock(), self.clock());
        self.step_row("forward", 0, "succeeded", StepRow::ok(started, done, first_output));
        let message = format!("step `{}` failed: the provider refused: quota exceeded", self.names[1]);
        let error = format!(
            r#"{{"kind":"terminal","chain":["{message}","InstanceLimitExceeded: You have requested more instances than your current limit allows"]}}"#
        );
        let (started, done) = (self.clock(), self.clock());
        self.steps.push(format!(
            "({}, 'forward', 1, {}, 'failed', 3, NULL, {}, {started}, {done}, NULL)",
            lit(self.id),
            lit(self.names[1]),
            lit(&error)
        ));
        self.event(done, "step-failed", Some(self.names[1]), &format!("attempt 3 failed: {message}"));
        self.event(done, "unwinding", None, &format!("{message}; undoing completed steps in reverse order"));
        let (started, done) = (self.clock(), self.clock());
        self.step_row("undo", 0, "undone", StepRow::ok(started, done, "null".to_owned()));
        self.event(done, "undo-succeeded", Some(self.names[0]), "undone on attempt 1");
        self.event(finished, "failed", None, "every completed step was undone");
        let reason = Some(format!("{message}; every completed step was undone"));
        End { step_index: 0, output: None, error: Some(error), reason, cancel: false }
    }

    /// The first step succeeded, then a cancel undid it.
    fn cancelled(&mut self, finished: i64, first_output: String) -> End {
        let (started, done) = (self.clock(), self.clock());
        self.step_row("forward", 0, "succeeded", StepRow::ok(started, done, first_output));
        let asked = self.clock();
        self.event(
            asked,
            "cancel-requested",
            None,
            "cancel requested; completed steps will be undone in reverse order",
        );
        let (started, done) = (self.clock(), self.clock());
        self.step_row("undo", 0, "undone", StepRow::ok(started, done, "null".to_owned()));
        self.event(done, "undo-succeeded", Some(self.names[0]), "undone on attempt 1");
        self.event(finished, "cancelled", None, "every completed step was undone");
        let reason = Some("cancel requested; every completed step was undone".to_owned());
        End { step_index: 0, output: None, error: None, reason, cancel: true }
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
pub fn with_database(url: &str, name: &str) -> String {
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

/// A new database `{prefix}_<uuid>` on the PostgreSQL server of `ANYCLOUD_TEST_DATABASE_URL`
/// (or `postgres://postgres@127.0.0.1:5432/test`): its name.
pub async fn create_database(prefix: &str) -> Res<String> {
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&anycloud_engine::testing::postgres_url()).await?;
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await?;
    admin.close().await?;
    Ok(name)
}

/// Drops a database [`create_database`] made, with whatever is still connected to it.
pub async fn drop_database(name: &str) -> Res<()> {
    let mut admin = PgConnection::connect(&anycloud_engine::testing::postgres_url()).await?;
    sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))).execute(&mut admin).await?;
    admin.close().await?;
    Ok(())
}

/// The URL of database `name` on the test server.
pub fn database_url(name: &str) -> String {
    with_database(&anycloud_engine::testing::postgres_url(), name)
}

/// A direct connection to the store's database, for loading and explaining.
pub enum Conn {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

impl Conn {
    pub async fn open(kind: Kind, data_dir: &Path, database_url: Option<&str>) -> Res<Self> {
        Ok(match (kind, database_url) {
            (Kind::Postgres, Some(url)) => Self::Postgres(PgConnection::connect(url).await?),
            _ => Self::Sqlite(SqliteConnectOptions::new().filename(data_dir.join("anycloud.db")).connect().await?),
        })
    }

    pub async fn execute(&mut self, sql: String) -> Res<()> {
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

    pub async fn count(&mut self, table: &str) -> Res<i64> {
        let sql = AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}"));
        Ok(match self {
            Self::Sqlite(conn) => sqlx::query_scalar(sql).fetch_one(conn).await?,
            Self::Postgres(conn) => sqlx::query_scalar(sql).fetch_one(conn).await?,
        })
    }

    /// The first column of every row `sql` answers, as text.
    pub async fn texts(&mut self, sql: &str) -> Res<Vec<String>> {
        let sql = AssertSqlSafe(sql.to_owned());
        Ok(match self {
            Self::Sqlite(conn) => sqlx::query_scalar(sql).fetch_all(conn).await?,
            Self::Postgres(conn) => sqlx::query_scalar(sql).fetch_all(conn).await?,
        })
    }

    pub async fn describe(&mut self) -> Res<String> {
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
    pub async fn schema(&mut self) -> Res<String> {
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

    pub async fn close(self) -> Res<()> {
        match self {
            Self::Sqlite(conn) => conn.close().await?,
            Self::Postgres(conn) => conn.close().await?,
        }
        Ok(())
    }
}

/// Inserts `runs` finished runs, with their steps and events.
pub async fn load(conn: &mut Conn, kind: Kind, runs: usize) -> Res<Dataset> {
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
