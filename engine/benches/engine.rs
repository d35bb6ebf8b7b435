//! The engine's benchmark, run with `cargo bench -p anycloud-engine --bench engine`.
//!
//! On each store (SQLite and PostgreSQL) it prints:
//!
//! - the database's bare commit rate: one single-row insert per transaction, through sqlx, on
//!   the same database and pool the engine uses, at concurrency 1 and 16;
//! - on SQLite only, a second bare commit rate through a raw client, rusqlite (the same bundled
//!   SQLite library, without sqlx in between; `support/raw_sqlite.rs`): the same insert, one
//!   `BEGIN IMMEDIATE` transaction each, into its own fresh file in the engine database's
//!   directory, with the store's settings (WAL, `synchronous=FULL`, busy timeout 30 s, foreign
//!   keys); one OS thread with its own connection per client, so at concurrency 16 sixteen
//!   connections contend for SQLite's one write lock through its busy handler, which serves
//!   them unfairly (a few make nearly every commit: the bench prints how many committed);
//! - the engine's throughput on workflows of 10 no-op steps at concurrency 1 and 16:
//!   workflows/s, durable steps/s, p50/p99 workflow latency (submit to end), and the ratio
//!   steps/s ÷ bare commits/s at the same concurrency; on SQLite also the raw client's
//!   commits/s, its speed over sqlx's, and steps/s ÷ its bare commits/s. The target (issue 28)
//!   is on the raw client's figure on SQLite and on sqlx's on PostgreSQL (which has no raw
//!   client here): the disk's or the server's own speed, not a driver's;
//! - at concurrency 1 also the floor (`support/floor.rs`): the engine's own writes for each run
//!   (its 11 commits), made in the same rounds by a bare client with no engine (rusqlite on
//!   SQLite, one sqlx connection on PostgreSQL) into a database with the engine's schema, its
//!   steps/s ÷ the bare commits/s the target is on (what those writes cost against a one-row
//!   insert) and the engine's steps/s ÷ the floor's (how much of it the engine keeps);
//! - the resident memory of the process with 10,000 runs waiting on timers;
//! - the time a fresh engine takes to claim 10,000 in-flight runs left by a killed one (and,
//!   for comparison, a restart under the dead engine's own name).
//!
//! Each part runs in a fresh child process (this binary, with `--part`) on a fresh database,
//! so that the memory figure is that of a process doing only that, and one part's leftovers
//! (10,000 tasks, a grown heap) do not weigh on the next. The parent prints the children's
//! lines as they come and a summary at the end.
//!
//! Throughput is measured in rounds that alternate bare commits and the engine (so that both
//! see the same stretch of this shared machine's disk), and the ratio is that of the totals.
//! On SQLite each round times the sqlx bare commits, then the raw client's, then the engine.
//!
//! Options, after `--`: `--store sqlite|postgres|both` (default both), `--seconds N` measured
//! per figure (default 10), `--rounds N` that split them (default 10), `--concurrency N` (only
//! that level), `--runs N` for the memory and claim parts (default 10000), `--quick` (1 s in
//! one round, 1000 runs: a smoke run), `--pg-pool N` (default 16, as `Store::connect`),
//! `--dir PATH` (where the SQLite files go; default the temporary directory). PostgreSQL is
//! `ANYCLOUD_TEST_DATABASE_URL`, or `postgres://postgres@127.0.0.1:5432/test`; each part uses
//! a fresh schema, dropped at its end. Without `--bench` in its arguments (as `cargo test
//! --all-targets` runs it) the binary only says how to run it.

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anycloud_engine::{
    Engine, EngineConfig, Pool, Registry, RunStatus, Step, StepCtx, StepError, Steps, Store, Workflow,
};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, Connection};

#[path = "support/machine.rs"]
mod machine;
use machine::{Cpu, cores, load_average, machine, now_ms, proc_mb, verdict};

#[path = "support/floor.rs"]
mod floor;
#[path = "support/raw_sqlite.rs"]
mod raw_sqlite;
use floor::{PostgresFloor, SqliteFloor};
use raw_sqlite::RawSqlite;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Steps of the throughput workflow.
const STEPS: usize = 10;
/// Concurrencies measured, with the target ratio of steps/s to bare commits/s at each (issue 28).
const LEVELS: [(usize, f64); 2] = [(1, 0.9), (16, 0.9)];
/// Resident memory target with the runs waiting on timers, in MB (10^6 bytes).
const RSS_TARGET_MB: f64 = 20.0;
/// Target for a fresh engine to claim the runs a killed one left.
const CLAIM_TARGET: Duration = Duration::from_secs(1);
/// Client tasks submitting the runs of the memory and claim parts.
const SUBMITTERS: usize = 32;
/// Longest wait for any one condition before the bench gives up on it.
const PATIENCE: Duration = Duration::from_secs(180);
/// Lease of the engine that is killed in the claim part. Long enough that its heartbeat
/// (every third of it, over all its runs at once) keeps up while the runs are submitted.
const KILLED_LEASE_TTL: Duration = Duration::from_secs(10);
/// Prefix of the line a child prints its figures on, as JSON.
const RESULT: &str = "@result ";
/// The row of a bare commit, through sqlx or the raw SQLite client.
const PAYLOAD: &str = "a bare commit: one short row per transaction, nothing else";

// ---------------------------------------------------------------------------------------------
// Workflows

/// Ten steps that do nothing and return `()`: what is measured is the engine and its commits.
struct Noop;

async fn nothing<W: Workflow>(_: StepCtx<W>) -> Result<(), StepError> {
    Ok(())
}

impl Workflow for Noop {
    const KIND: &'static str = "bench.noop";
    const VERSION: u32 = 1;
    type Input = u64;
    type Output = u64;

    fn steps() -> Steps<Self> {
        const NAMES: [&str; STEPS] = ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"];
        NAMES.into_iter().fold(Steps::new(), |steps, name| steps.then(Step::action(name, nothing::<Self>)))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<u64, StepError> {
        Ok(*ctx.input())
    }
}

/// A durable sleep of an hour, then a no-op: between the two the run is a row with a wake-up time.
struct Nap;

impl Workflow for Nap {
    const KIND: &'static str = "bench.nap";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(Step::sleep("nap", |_: &StepCtx<Self>| Duration::from_secs(3600)))
            .then(Step::action("after", nothing::<Self>))
    }

    fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

/// One step that hangs in the process for an hour: a run that stays claimed and in flight.
struct Hang;

impl Workflow for Hang {
    const KIND: &'static str = "bench.hang";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new().then(Step::action("hang", |_: StepCtx<Self>| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<(), StepError>(())
        }))
    }

    fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sqlite,
    Postgres,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Sqlite => "sqlite",
            Kind::Postgres => "postgres",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Throughput,
    Memory,
    Claim,
}

impl Part {
    const ALL: [Part; 3] = [Part::Throughput, Part::Memory, Part::Claim];

    fn name(self) -> &'static str {
        match self {
            Part::Throughput => "throughput",
            Part::Memory => "memory",
            Part::Claim => "claim",
        }
    }
}

struct Options {
    stores: Vec<Kind>,
    seconds: f64,
    runs: usize,
    quick: bool,
    pg_pool: u32,
    dir: PathBuf,
    /// Rounds of bare commits and engine workflows, alternating, per throughput level.
    rounds: usize,
    /// Only this concurrency in the throughput part.
    concurrency: Option<usize>,
    /// Set in a child: the one part it runs (on the first store).
    part: Option<Part>,
}

impl Options {
    fn parse(args: &[String]) -> Res<Self> {
        let mut stores = vec![Kind::Sqlite, Kind::Postgres];
        let (mut seconds, mut runs, mut quick, mut pg_pool, mut part) = (None, None, false, 16, None);
        let (mut rounds, mut concurrency) = (None, None);
        let mut dir = std::env::temp_dir();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().cloned().ok_or_else(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--bench" => {}
                "--quick" => quick = true,
                "--store" => {
                    stores = match value("--store")?.as_str() {
                        "sqlite" => vec![Kind::Sqlite],
                        "postgres" => vec![Kind::Postgres],
                        "both" => vec![Kind::Sqlite, Kind::Postgres],
                        other => return Err(format!("unknown store `{other}`").into()),
                    }
                }
                "--seconds" => seconds = Some(value("--seconds")?.parse::<f64>()?),
                "--runs" => runs = Some(value("--runs")?.parse::<usize>()?),
                "--pg-pool" => pg_pool = value("--pg-pool")?.parse::<u32>()?,
                "--dir" => dir = PathBuf::from(value("--dir")?),
                "--rounds" => rounds = Some(value("--rounds")?.parse::<usize>()?.max(1)),
                "--concurrency" => concurrency = Some(value("--concurrency")?.parse::<usize>()?),
                "--part" => {
                    let name = value("--part")?;
                    part = Some(
                        Part::ALL
                            .into_iter()
                            .find(|part| part.name() == name)
                            .ok_or_else(|| format!("unknown part `{name}`"))?,
                    );
                }
                other if other.starts_with("--") => {
                    return Err(format!("unknown option `{other}`").into());
                }
                _ => {} // a name filter cargo passes on: there is one benchmark
            }
        }
        Ok(Self {
            stores,
            seconds: seconds.unwrap_or(if quick { 1.0 } else { 10.0 }),
            runs: runs.unwrap_or(if quick { 1_000 } else { 10_000 }),
            quick,
            pg_pool,
            dir,
            rounds: rounds.unwrap_or(if quick { 1 } else { 10 }),
            concurrency,
            part,
        })
    }

    /// One measured window of the throughput part: `--seconds` split over the rounds.
    fn window(&self) -> Duration {
        Duration::from_secs_f64(self.seconds / self.rounds as f64)
    }

    /// Warm-up before each measured window.
    fn warmup(&self) -> Duration {
        Duration::from_secs_f64((self.seconds / self.rounds as f64 / 5.0).min(1.0))
    }

    /// The arguments of a child that runs `part` on `kind`.
    fn child_args(&self, kind: Kind, part: Part) -> Vec<String> {
        vec![
            "--bench".into(),
            "--part".into(),
            part.name().into(),
            "--store".into(),
            kind.name().into(),
            "--seconds".into(),
            self.seconds.to_string(),
            "--runs".into(),
            self.runs.to_string(),
            "--pg-pool".into(),
            self.pg_pool.to_string(),
            "--dir".into(),
            self.dir.display().to_string(),
            "--rounds".into(),
            self.rounds.to_string(),
        ]
        .into_iter()
        .chain(self.concurrency.iter().flat_map(|only| ["--concurrency".into(), only.to_string()]))
        .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Databases

/// A fresh database: a SQLite file in a temporary directory, or a fresh PostgreSQL schema.
struct Db {
    store: Store,
    /// SQLite's temporary directory, with the engine's database file (and the raw client's).
    dir: Option<tempfile::TempDir>,
    schema: Option<String>,
}

impl Db {
    async fn open(kind: Kind, options: &Options) -> Res<Self> {
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::Builder::new().prefix("anycloud-bench-").tempdir_in(&options.dir)?;
                let url = format!("sqlite://{}", dir.path().join("engine.db").display());
                let store = Store::connect(&url).await?;
                Ok(Self { store, dir: Some(dir), schema: None })
            }
            Kind::Postgres => {
                let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
                let store = Store::open_postgres(Self::create_schema(&schema).await?, options.pg_pool).await?;
                Ok(Self { store, dir: None, schema: Some(schema) })
            }
        }
    }

    /// Creates `schema` on the test server; returns options that connect into it.
    async fn create_schema(schema: &str) -> Res<PgConnectOptions> {
        let url = anycloud_engine::testing::postgres_url();
        let mut conn = sqlx::PgConnection::connect(&url).await?;
        sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await?;
        conn.close().await?;
        Ok(PgConnectOptions::from_str(&url)?.options([("search_path", schema)]))
    }

    /// The schema of the floor (`support/floor.rs`) beside the engine's `schema`.
    fn floor_schema(schema: &str) -> String {
        format!("{schema}_floor")
    }

    async fn close(self) -> Res<()> {
        self.store.close().await;
        if let Some(schema) = &self.schema {
            let mut conn = sqlx::PgConnection::connect(&anycloud_engine::testing::postgres_url()).await?;
            sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut conn).await?;
            let floor = Self::floor_schema(schema);
            sqlx::query(AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {floor} CASCADE"))).execute(&mut conn).await?;
            conn.close().await?;
        }
        Ok(())
    }
}

/// The store's pool, if it is on SQLite.
fn sqlite_pool(store: &Store) -> Option<&sqlx::SqlitePool> {
    match store.pool() {
        Pool::Sqlite(pool) => Some(pool),
        Pool::Postgres(_) => None,
    }
}

/// The store's pool, if it is on PostgreSQL.
fn postgres_pool(store: &Store) -> Option<&sqlx::PgPool> {
    match store.pool() {
        Pool::Postgres(pool) => Some(pool),
        Pool::Sqlite(_) => None,
    }
}

/// Runs `$body` with `$pool` bound to the store's pool, whichever database it is.
macro_rules! on_pool {
    ($store:expr, |$pool:ident| $body:expr) => {
        match (sqlite_pool($store), postgres_pool($store)) {
            (Some($pool), _) => $body,
            (_, Some($pool)) => $body,
            _ => Err::<_, Box<dyn Error + Send + Sync>>("the store has no pool".into()),
        }
    };
}

/// `SELECT count(*) ...` with one parameter, on whichever database the store has.
async fn count<T>(store: &Store, sql: &'static str, value: T) -> Res<i64>
where
    T: for<'q> sqlx::Encode<'q, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
    T: for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send,
{
    on_pool!(store, |pool| Ok(sqlx::query_scalar::<_, i64>(sql).bind(value).fetch_one(pool).await?))
}

/// Runs in status `status`.
async fn count_status(store: &Store, status: &str) -> Res<i64> {
    count(store, "SELECT count(*) FROM engine_runs WHERE status = $1", status.to_owned()).await
}

/// Runs held by `owner` in status `running`.
async fn count_held(store: &Store, owner: &str) -> Res<i64> {
    let sql = "SELECT count(*) FROM engine_runs WHERE lease_owner = $1 AND status = 'running'";
    count(store, sql, owner.to_owned()).await
}

/// Runs claimed at or after `since` (ms): their lease runs from then. A claim writes the lease
/// and the run's `claimed` or `recovered` event in one transaction; this count reads the runs'
/// table only, so that polling it does not scan every event while the claims are timed.
async fn count_claimed(store: &Store, since: i64) -> Res<i64> {
    count(store, "SELECT count(*) FROM engine_runs WHERE lease_expires_at >= $1", since).await
}

/// Runs taken over from a lapsed or expired lease (a `recovered` event) at or after `since` (ms).
async fn count_recovered(store: &Store, since: i64) -> Res<i64> {
    let sql = "SELECT count(DISTINCT run_id) FROM engine_events WHERE kind = 'recovered' AND at >= $1";
    count(store, sql, since).await
}

/// The largest value of a column (`sql` selects it), 0 for none.
async fn max_column(store: &Store, sql: &'static str) -> Res<i64> {
    on_pool!(store, |pool| Ok(sqlx::query_scalar::<_, Option<i64>>(sql).fetch_one(pool).await?.unwrap_or(0)))
}

/// Polls `count` until it reaches `want` or `patience` runs out; returns the last count.
async fn until_count<F, Fut>(want: usize, patience: Duration, mut count: F) -> Res<usize>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Res<i64>>,
{
    let deadline = Instant::now() + patience;
    loop {
        let now = count().await? as usize;
        if now >= want || Instant::now() >= deadline {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn describe(store: &Store) -> Res<String> {
    if let Some(pool) = sqlite_pool(store) {
        let version: String = sqlx::query_scalar("SELECT sqlite_version()").fetch_one(pool).await?;
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(pool).await?;
        let sync: i64 = sqlx::query_scalar("PRAGMA synchronous").fetch_one(pool).await?;
        let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout").fetch_one(pool).await?;
        let sync = match sync {
            0 => "OFF",
            1 => "NORMAL",
            2 => "FULL",
            3 => "EXTRA",
            _ => "?",
        };
        Ok(format!(
            "SQLite {version}, journal_mode={journal}, synchronous={sync}, busy_timeout={busy} ms, \
             pool of {} connections",
            pool.options().get_max_connections()
        ))
    } else if let Some(pool) = postgres_pool(store) {
        let version: String = sqlx::query_scalar("SHOW server_version").fetch_one(pool).await?;
        let commit: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(pool).await?;
        let fsync: String = sqlx::query_scalar("SHOW fsync").fetch_one(pool).await?;
        let method: String = sqlx::query_scalar("SHOW wal_sync_method").fetch_one(pool).await?;
        Ok(format!(
            "PostgreSQL {version}, synchronous_commit={commit}, fsync={fsync}, \
             wal_sync_method={method}, pool of {} connections",
            pool.options().get_max_connections()
        ))
    } else {
        Err("the store has no pool".into())
    }
}

// ---------------------------------------------------------------------------------------------
// Figures a child reports

/// What ended inside a measured window.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Figures {
    count: usize,
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Cores this process used during the window.
    cpu_process: f64,
    /// Cores the whole machine was busy during the window (the database server included).
    cpu_machine: f64,
}

impl Figures {
    fn line(&self, unit: &str) -> String {
        format!(
            "{:>8.1} {unit}  (p50 {:.2} ms, p99 {:.2} ms, {} in the window; CPU: bench process {:.2} cores, machine {:.2} of {} busy)",
            self.per_sec,
            self.p50_ms,
            self.p99_ms,
            self.count,
            self.cpu_process,
            self.cpu_machine,
            cores()
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Level {
    concurrency: usize,
    target: f64,
    bare: Figures,
    engine: Figures,
    /// The ratio in each round, in order.
    round_ratios: Vec<f64>,
    /// SQLite only: bare commits through the raw client (rusqlite), in the same rounds.
    raw: Option<Figures>,
    /// Steps/s ÷ the raw client's commits/s in each round, in order.
    raw_round_ratios: Vec<f64>,
    /// Raw clients that made at least one commit in each round's window, in order.
    raw_clients: Vec<usize>,
    /// Concurrency 1 only: the engine's writes for each run made by a bare client with no engine
    /// (`support/floor.rs`), in the same rounds.
    floor: Option<Figures>,
    /// Durable steps/s ÷ the floor's steps/s in each round, in order.
    floor_round_ratios: Vec<f64>,
}

impl Level {
    fn steps_per_sec(&self) -> f64 {
        self.engine.per_sec * STEPS as f64
    }

    fn ratio(&self) -> f64 {
        self.steps_per_sec() / self.bare.per_sec
    }

    /// The ratio the target is on: against the raw client where there is one (SQLite), else
    /// against sqlx's bare commits.
    fn judged(&self) -> f64 {
        self.raw_ratios().map_or_else(|| self.ratio(), |(raw_ratio, _)| raw_ratio)
    }

    fn rounds(&self) -> String {
        let ratios: Vec<String> = self.round_ratios.iter().map(|ratio| format!("{ratio:.2}")).collect();
        ratios.join(" ")
    }

    /// Steps/s ÷ the raw client's bare commits/s, and its commits/s ÷ sqlx's.
    fn raw_ratios(&self) -> Option<(f64, f64)> {
        let raw = self.raw.as_ref()?;
        Some((self.steps_per_sec() / raw.per_sec, raw.per_sec / self.bare.per_sec))
    }

    fn raw_clients(&self) -> String {
        let clients: Vec<String> = self.raw_clients.iter().map(usize::to_string).collect();
        clients.join(" ")
    }

    fn raw_rounds(&self) -> String {
        let ratios: Vec<String> = self.raw_round_ratios.iter().map(|ratio| format!("{ratio:.2}")).collect();
        ratios.join(" ")
    }

    /// The bare commits/s the target is on, and whose: the raw client's on SQLite, sqlx's on
    /// PostgreSQL.
    fn judged_bare(&self) -> (f64, &'static str) {
        match &self.raw {
            Some(raw) => (raw.per_sec, "a raw client (rusqlite)"),
            None => (self.bare.per_sec, "sqlx"),
        }
    }

    /// The floor's steps/s, and the engine's durable steps/s ÷ that.
    fn floor_ratios(&self) -> Option<(f64, f64)> {
        let floor = self.floor.as_ref()?.per_sec * STEPS as f64;
        Some((floor, self.steps_per_sec() / floor))
    }

    fn floor_rounds(&self) -> String {
        let ratios: Vec<String> = self.floor_round_ratios.iter().map(|ratio| format!("{ratio:.2}")).collect();
        ratios.join(" ")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Memory {
    runs: usize,
    submit_s: f64,
    all_waiting_s: f64,
    rss_start_mb: f64,
    rss_mb: f64,
    hwm_mb: f64,
}

/// Issue 28's claim target: a fresh engine claimed every run in under [`CLAIM_TARGET`].
fn claim_passes(claimed: usize, runs: usize, seconds: f64) -> bool {
    claimed >= runs && seconds < CLAIM_TARGET.as_secs_f64()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claim {
    runs: usize,
    submit_s: f64,
    /// Runs the killed engine had claimed twice (its own lease lapsed under it): should be 0.
    reclaimed_before_kill: i64,
    lapse_s: f64,
    fresh_s: f64,
    fresh_claimed: usize,
    restart_s: f64,
    restart_claimed: usize,
    rss_in_flight_mb: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Outcome {
    Throughput(Vec<Level>),
    Memory(Memory),
    Claim(Claim),
}

// ---------------------------------------------------------------------------------------------
// Measurements

/// What ended inside one measured window.
struct Sample {
    latencies: Vec<Duration>,
    window: Duration,
    /// Cores this process used during the window.
    cpu_process: f64,
    /// Cores the whole machine was busy during the window.
    cpu_machine: f64,
}

/// Runs `op` in a loop on `concurrency` tasks through a warm-up and a measured window; keeps
/// the latencies of the operations that end inside the window. Each task finishes the operation
/// it is in when the window closes (not counted).
async fn measure<F, Fut>(concurrency: usize, options: &Options, op: F) -> Res<Sample>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Res<()>> + Send + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now() + options.warmup();
    let end = start + options.window();
    let sampler = tokio::spawn(async move {
        tokio::time::sleep_until(tokio::time::Instant::from_std(start)).await;
        let first = Cpu::now();
        tokio::time::sleep_until(tokio::time::Instant::from_std(end)).await;
        first.used(Cpu::now(), end - start)
    });
    let mut tasks = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0;
            loop {
                let began = Instant::now();
                if began >= end {
                    return Ok::<_, Box<dyn Error + Send + Sync>>(latencies);
                }
                op(task * 1_000_000_000 + n).await?;
                n += 1;
                let ended = Instant::now();
                if ended >= start && ended < end {
                    latencies.push(ended - began);
                }
            }
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let (cpu_process, cpu_machine) = sampler.await?;
    Ok(Sample { latencies, window: end - start, cpu_process, cpu_machine })
}

impl Figures {
    /// The figures of several windows taken together.
    fn of(samples: &[Sample]) -> Self {
        let mut latencies: Vec<Duration> = samples.iter().flat_map(|sample| sample.latencies.iter().copied()).collect();
        latencies.sort_unstable();
        let percentile = |p: f64| {
            if latencies.is_empty() {
                return f64::NAN;
            }
            let rank = ((p * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
            latencies[rank - 1].as_secs_f64() * 1e3
        };
        let window: f64 = samples.iter().map(|sample| sample.window.as_secs_f64()).sum();
        let mean = |field: fn(&Sample) -> f64| samples.iter().map(field).sum::<f64>() / samples.len().max(1) as f64;
        Figures {
            count: latencies.len(),
            per_sec: latencies.len() as f64 / window,
            p50_ms: percentile(0.5),
            p99_ms: percentile(0.99),
            cpu_process: mean(|sample| sample.cpu_process),
            cpu_machine: mean(|sample| sample.cpu_machine),
        }
    }
}

/// Bare commits: `BEGIN`, one single-row insert, `COMMIT`, in a loop on each task, through the
/// store's own pool (so the same file or schema, the same connection settings, the same pool
/// size). SQLite begins with `BEGIN IMMEDIATE`, as every write transaction of the engine does.
async fn bare_commits(store: &Store, concurrency: usize, options: &Options) -> Res<Sample> {
    if let Some(pool) = sqlite_pool(store) {
        sqlx::query("CREATE TABLE IF NOT EXISTS bench_commits (id INTEGER PRIMARY KEY, payload TEXT)")
            .execute(pool)
            .await?;
        let pool = pool.clone();
        measure(concurrency, options, move |_| {
            let pool = pool.clone();
            async move {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                sqlx::query("INSERT INTO bench_commits (payload) VALUES ($1)").bind(PAYLOAD).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(())
            }
        })
        .await
    } else if let Some(pool) = postgres_pool(store) {
        sqlx::query("CREATE TABLE IF NOT EXISTS bench_commits (id BIGSERIAL PRIMARY KEY, payload TEXT)")
            .execute(pool)
            .await?;
        let pool = pool.clone();
        measure(concurrency, options, move |_| {
            let pool = pool.clone();
            async move {
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO bench_commits (payload) VALUES ($1)").bind(PAYLOAD).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(())
            }
        })
        .await
    } else {
        Err("the store has no pool".into())
    }
}

/// The engine of a throughput level: one for all its rounds.
async fn throughput_engine(store: &Store, concurrency: usize) -> Res<Arc<Engine>> {
    let config = EngineConfig {
        max_concurrency: 64.max(concurrency),
        ..EngineConfig::named(format!("bench-throughput-{concurrency}"))
    };
    let registry = Registry::new().with(Arc::new(Noop));
    Ok(Arc::new(Engine::start(store.clone(), registry, config).await?))
}

/// Workflows of ten no-op steps: each client submits one, waits for its end, and repeats.
async fn engine_throughput(engine: &Arc<Engine>, concurrency: usize, options: &Options) -> Res<Sample> {
    let clients = engine.clone();
    measure(concurrency, options, move |n| {
        let engine = clients.clone();
        async move {
            let id = engine.submit::<Noop>(&(n as u64), None).await?;
            let run = engine.wait(id, Duration::from_secs(120)).await?;
            if run.status != RunStatus::Succeeded {
                return Err(format!("run {id} ended {}: {:?}", run.status, run.error).into());
            }
            Ok(())
        }
    })
    .await
}

/// Submits `runs` runs of `W` from [`SUBMITTERS`] tasks; returns how long it took.
async fn submit_many<W: Workflow<Input = ()>>(engine: &Arc<Engine>, runs: usize) -> Res<Duration> {
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..SUBMITTERS {
        let (engine, next) = (engine.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < runs {
                engine.submit::<W>(&(), None).await?;
            }
            Ok::<_, Box<dyn Error + Send + Sync>>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

/// Each level alternates rounds of bare commits and of the engine, so that both figures are
/// taken over the same stretch of this shared machine's time (its disk's fsync rate drifts by
/// a factor of two within minutes): the ratio is that of the totals over all rounds.
async fn part_throughput(name: &str, db: &Db, options: &Options) -> Res<Outcome> {
    let raw = match &db.dir {
        Some(dir) => Some(RawSqlite::create(dir.path())?),
        None => None,
    };
    if let Some(raw) = &raw {
        println!("[{name}] {}", raw.describe()?);
    }
    let mut floor = Floor::open(db).await?;
    let mut levels = Vec::new();
    for (concurrency, target) in LEVELS {
        if options.concurrency.is_some_and(|only| only != concurrency) {
            continue;
        }
        let engine = throughput_engine(&db.store, concurrency).await?;
        let (mut bare, mut driven, mut round_ratios) = (Vec::new(), Vec::new(), Vec::new());
        let (mut raw_bare, mut raw_round_ratios, mut raw_clients) = (Vec::new(), Vec::new(), Vec::new());
        let (mut floor_runs, mut floor_round_ratios) = (Vec::new(), Vec::new());
        for _ in 0..options.rounds {
            let commits = bare_commits(&db.store, concurrency, options).await?;
            let raw_commits = match raw.clone() {
                Some(raw) => {
                    let (warmup, window) = (options.warmup(), options.window());
                    Some(tokio::task::spawn_blocking(move || raw.commits(concurrency, warmup, window)).await??)
                }
                None => None,
            };
            let floor_sample = match concurrency {
                1 => Some(floor.runs(options).await?),
                _ => None,
            };
            let workflows = engine_throughput(&engine, concurrency, options).await?;
            let steps = (workflows.latencies.len() * STEPS) as f64 / workflows.window.as_secs_f64();
            if let Some(floor_sample) = floor_sample {
                let floor_steps = (floor_sample.latencies.len() * STEPS) as f64 / floor_sample.window.as_secs_f64();
                floor_round_ratios.push(steps / floor_steps);
                floor_runs.push(floor_sample);
            }
            round_ratios.push(steps / (commits.latencies.len() as f64 / commits.window.as_secs_f64()));
            if let Some((raw_commits, clients)) = raw_commits {
                raw_round_ratios.push(steps / (raw_commits.latencies.len() as f64 / raw_commits.window.as_secs_f64()));
                raw_bare.push(raw_commits);
                raw_clients.push(clients);
            }
            bare.push(commits);
            driven.push(workflows);
        }
        match Arc::try_unwrap(engine) {
            Ok(engine) => engine.shutdown(Duration::from_secs(10)).await,
            Err(_) => return Err("the engine is still shared after the clients ended".into()),
        }
        let level = Level {
            concurrency,
            target,
            bare: Figures::of(&bare),
            engine: Figures::of(&driven),
            round_ratios,
            raw: raw.is_some().then(|| Figures::of(&raw_bare)),
            raw_round_ratios,
            raw_clients,
            floor: (!floor_runs.is_empty()).then(|| Figures::of(&floor_runs)),
            floor_round_ratios,
        };
        println!("[{name}] c={concurrency:<2} bare commits: {}", level.bare.line("commits/s"));
        println!("[{name}] c={concurrency:<2} engine:       {}", level.engine.line("workflows/s"));
        println!(
            "[{name}] c={concurrency:<2} => {:.0} durable steps/s ÷ {:.0} bare commits/s = {:.3} {}; \
             round by round: {}",
            level.steps_per_sec(),
            level.bare.per_sec,
            level.ratio(),
            match level.raw {
                Some(_) => "(the target is on the raw client's commits, below)".to_owned(),
                None => format!("(target >= {target}) {}", verdict(level.ratio() >= target)),
            },
            level.rounds()
        );
        if let (Some(raw), Some((raw_ratio, speed))) = (&level.raw, level.raw_ratios()) {
            println!(
                "[{name}] c={concurrency:<2} raw commits:  {}; clients that committed in the window, round by round: {} of {concurrency}",
                raw.line("commits/s"),
                level.raw_clients()
            );
            println!(
                "[{name}] c={concurrency:<2} => a raw client (rusqlite) commits {:.0}/s ÷ sqlx's {:.0}/s = {speed:.2} times as fast",
                raw.per_sec, level.bare.per_sec
            );
            println!(
                "[{name}] c={concurrency:<2} => {:.0} durable steps/s ÷ {:.0} bare commits/s of a raw client (rusqlite) = {raw_ratio:.3} \
                 (target >= {target}) {}; round by round: {}",
                level.steps_per_sec(),
                raw.per_sec,
                verdict(raw_ratio >= target),
                level.raw_rounds()
            );
        }
        if let (Some(floor), Some((floor_steps, kept))) = (&level.floor, level.floor_ratios()) {
            println!("[{name}] c={concurrency:<2} floor:        {}", floor.line("runs/s"));
            let (bare, client) = level.judged_bare();
            println!(
                "[{name}] c={concurrency:<2} => the engine's own writes by a bare client with no engine (the floor): \
                 {floor_steps:.0} steps/s = {:.3} of the bare commits of {client}; the engine's {:.0} durable steps/s = \
                 {kept:.3} of the floor; round by round: {}",
                floor_steps / bare,
                level.steps_per_sec(),
                level.floor_rounds()
            );
        }
        levels.push(level);
    }
    Ok(Outcome::Throughput(levels))
}

/// The floor (`support/floor.rs`) beside the engine's database: on SQLite a file of its own in
/// the same directory, on PostgreSQL a schema of its own; either migrated by the engine's store.
enum Floor {
    Sqlite(SqliteFloor),
    Postgres(PostgresFloor),
}

impl Floor {
    async fn open(db: &Db) -> Res<Self> {
        match (&db.dir, &db.schema) {
            (Some(dir), _) => {
                let path = dir.path().join("floor.db");
                Store::connect(&format!("sqlite://{}", path.display())).await?.close().await;
                Ok(Self::Sqlite(SqliteFloor::new(&path)))
            }
            (None, Some(schema)) => {
                let connect = Db::create_schema(&Db::floor_schema(schema)).await?;
                Store::open_postgres(connect.clone(), 1).await?.close().await;
                Ok(Self::Postgres(PostgresFloor::new(sqlx::PgConnection::connect_with(&connect).await?)))
            }
            (None, None) => Err("the database is neither a SQLite file nor a PostgreSQL schema".into()),
        }
    }

    /// The floor's runs through one warm-up and measured window.
    async fn runs(&mut self, options: &Options) -> Res<Sample> {
        let (warmup, window) = (options.warmup(), options.window());
        match self {
            Self::Sqlite(floor) => {
                let floor = floor.clone();
                tokio::task::spawn_blocking(move || floor.runs(warmup, window)).await?
            }
            Self::Postgres(floor) => floor.runs(warmup, window).await,
        }
    }
}

async fn part_memory(name: &str, db: &Db, options: &Options) -> Res<Outcome> {
    let runs = options.runs;
    let rss_start = proc_mb("VmRSS");
    let registry = Registry::new().with(Arc::new(Nap));
    let config = EngineConfig::named("bench-memory");
    let engine = Arc::new(Engine::start(db.store.clone(), registry, config).await?);
    let started = Instant::now();
    let submit = submit_many::<Nap>(&engine, runs).await?;
    let waiting = until_count(runs, PATIENCE, || count_status(&db.store, "waiting")).await?;
    let all_waiting = started.elapsed();
    if waiting < runs {
        return Err(format!("only {waiting} of {runs} runs were waiting after {PATIENCE:?}").into());
    }
    // A few polls of the claim loop over the waiting rows before reading the memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let memory = Memory {
        runs,
        submit_s: submit.as_secs_f64(),
        all_waiting_s: all_waiting.as_secs_f64(),
        rss_start_mb: rss_start,
        rss_mb: proc_mb("VmRSS"),
        hwm_mb: proc_mb("VmHWM"),
    };
    println!(
        "[{name}] memory: {runs} runs waiting on a 1 h durable sleep (submitted by {SUBMITTERS} tasks in {:.2} s, \
         all waiting after {:.2} s): VmRSS {:.1} MB (at the start of the process: {:.1} MB; peak VmHWM {:.1} MB)  \
         target < {RSS_TARGET_MB} MB {}",
        memory.submit_s,
        memory.all_waiting_s,
        memory.rss_mb,
        memory.rss_start_mb,
        memory.hwm_mb,
        verdict(memory.rss_mb < RSS_TARGET_MB)
    );
    match Arc::try_unwrap(engine) {
        Ok(engine) => engine.shutdown(Duration::from_secs(10)).await,
        Err(_) => return Err("the memory engine is still shared".into()),
    }
    Ok(Outcome::Memory(memory))
}

async fn part_claim(name: &str, db: &Db, options: &Options) -> Res<Outcome> {
    let runs = options.runs;
    let store = &db.store;
    let registry = Registry::new().with(Arc::new(Hang));

    // Engine bench-a claims every run (an eager start at submit) and hangs in its one step.
    let killed = Arc::new(
        Engine::start(
            store.clone(),
            registry.clone(),
            EngineConfig { max_concurrency: runs, lease_ttl: KILLED_LEASE_TTL, ..EngineConfig::named("bench-a") },
        )
        .await?,
    );
    let submit = submit_many::<Hang>(&killed, runs).await?;
    let held = count_held(store, "bench-a").await? as usize;
    if held < runs {
        return Err(format!("engine bench-a holds only {held} of {runs} runs").into());
    }
    let reclaimed_before_kill = count_recovered(store, 0).await?;
    // Killed: dropping an engine aborts its claim loop, heartbeat and step tasks at once, and
    // leaves its leases to lapse.
    drop(killed);
    let killed_at = Instant::now();
    let expiry = max_column(store, "SELECT max(lease_expires_at) FROM engine_runs").await?;
    let lapse = Duration::from_millis((expiry - now_ms()).max(0) as u64 + 50);
    tokio::time::sleep(lapse).await;
    let lapse_wait = killed_at.elapsed();
    println!(
        "[{name}] claim: {runs} runs in flight under bench-a (submitted in {:.2} s; runs bench-a had to claim \
         twice: {reclaimed_before_kill}); bench-a killed; waited {:.2} s for its leases (lease_ttl {} s) to lapse",
        submit.as_secs_f64(),
        lapse_wait.as_secs_f64(),
        KILLED_LEASE_TTL.as_secs()
    );

    // A fresh engine, bench-b, with room for every run and otherwise the defaults.
    let fresh_config = EngineConfig { max_concurrency: runs, ..EngineConfig::named("bench-b") };
    let since = now_ms();
    let started = Instant::now();
    let fresh_engine = Engine::start(store.clone(), registry.clone(), fresh_config.clone()).await?;
    let fresh_claimed = until_count(runs, PATIENCE, || count_claimed(store, since)).await?;
    let fresh = started.elapsed();
    let fresh_recovered = count_recovered(store, since).await? as usize;
    if fresh_recovered != fresh_claimed {
        return Err(format!("{fresh_claimed} runs were claimed, but {fresh_recovered} have a `recovered` event").into());
    }
    let rss_in_flight = proc_mb("VmRSS");
    println!(
        "[{name}] claim: a fresh engine (bench-b: claim_batch {}, poll {} ms, lease_ttl {} s) claimed {fresh_claimed} \
         of {runs} in {:.2} s, target < {} s {}  (VmRSS with them in flight in this process: {rss_in_flight:.1} MB)",
        fresh_config.claim_batch,
        fresh_config.poll_interval.as_millis(),
        fresh_config.lease_ttl.as_secs(),
        fresh.as_secs_f64(),
        CLAIM_TARGET.as_secs(),
        verdict(claim_passes(fresh_claimed, runs, fresh.as_secs_f64()))
    );

    // Killed again; this time the same name comes back and takes its runs back at once.
    drop(fresh_engine);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let since = now_ms();
    let started = Instant::now();
    let restarted = Engine::start(store.clone(), registry, fresh_config).await?;
    let restart_claimed = until_count(runs, PATIENCE, || count_claimed(store, since)).await?;
    let restart = started.elapsed();
    let restart_recovered = count_recovered(store, since).await? as usize;
    if restart_recovered != restart_claimed {
        return Err(format!(
            "{restart_claimed} runs were claimed again, but {restart_recovered} have a `recovered` event"
        )
        .into());
    }
    println!(
        "[{name}] claim: bench-b killed and restarted under the same name: claimed {restart_claimed} of {runs} in {:.2} s{}",
        restart.as_secs_f64(),
        if restart_claimed < runs { " (gave up waiting)" } else { "" }
    );
    drop(restarted);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(Outcome::Claim(Claim {
        runs,
        submit_s: submit.as_secs_f64(),
        reclaimed_before_kill,
        lapse_s: lapse_wait.as_secs_f64(),
        fresh_s: fresh.as_secs_f64(),
        fresh_claimed,
        restart_s: restart.as_secs_f64(),
        restart_claimed,
        rss_in_flight_mb: rss_in_flight,
    }))
}

/// A child: runs one part on one store and prints its figures as JSON on the last line.
fn child(part: Part, options: &Options) -> Res<()> {
    let kind = *options.stores.first().ok_or("no store")?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let db = Db::open(kind, options).await?;
        let name = kind.name();
        if part == Part::Throughput {
            println!("[{name}] {}", describe(&db.store).await?);
        }
        let outcome = match part {
            Part::Throughput => part_throughput(name, &db, options).await,
            Part::Memory => part_memory(name, &db, options).await,
            Part::Claim => part_claim(name, &db, options).await,
        };
        let closed = db.close().await;
        let outcome = outcome?;
        closed?;
        println!("{RESULT}{}", serde_json::to_string(&outcome)?);
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// The parent

/// Runs one part in a child process, echoing its lines; returns its figures.
fn run_child(kind: Kind, part: Part, options: &Options) -> Res<Outcome> {
    let load_before = load_average();
    let mut child = Command::new(std::env::current_exe()?)
        .args(options.child_args(kind, part))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout from the child")?;
    let mut outcome = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        match line.strip_prefix(RESULT) {
            Some(json) => outcome = Some(serde_json::from_str::<Outcome>(json)?),
            None => println!("{line}"),
        }
    }
    let status = child.wait()?;
    println!(
        "[{}] ({} part done; load average before {load_before}, after {})",
        kind.name(),
        part.name(),
        load_average()
    );
    match outcome {
        Some(outcome) if status.success() => Ok(outcome),
        _ => Err(format!("the {} part on {} failed ({status})", part.name(), kind.name()).into()),
    }
}

struct Report {
    kind: Kind,
    levels: Vec<Level>,
    memory: Memory,
    claim: Claim,
}

fn summary(reports: &[Report], options: &Options) {
    println!("\n== summary ==");
    println!(
        "{} s measured per figure, in {} rounds that alternate bare commits and the engine, each window \
         after {} s of warm-up; {} runs in the memory and claim parts{}",
        options.seconds,
        options.rounds,
        options.warmup().as_secs_f64(),
        options.runs,
        if options.quick { " (--quick: a smoke run)" } else { "" }
    );
    println!();
    println!(
        "| store | concurrency | bare commits/s (sqlx) | workflows/s | durable steps/s | p50 workflow latency | p99 workflow latency | steps/s ÷ bare commits/s (raw client on SQLite, sqlx on PostgreSQL) | target | round by round (÷ sqlx) | machine CPU busy, bare / engine |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for report in reports {
        for level in &report.levels {
            println!(
                "| {} | {} | {:.0} | {:.1} | {:.0} | {:.2} ms | {:.2} ms | {:.3} | >= {} {} | {} | {:.2} / {:.2} of {} cores |",
                report.kind.name(),
                level.concurrency,
                level.bare.per_sec,
                level.engine.per_sec,
                level.steps_per_sec(),
                level.engine.p50_ms,
                level.engine.p99_ms,
                level.judged(),
                level.target,
                verdict(level.judged() >= level.target),
                level.rounds(),
                level.bare.cpu_machine,
                level.engine.cpu_machine,
                cores()
            );
        }
    }
    if reports.iter().flat_map(|report| &report.levels).any(|level| level.raw.is_some()) {
        println!();
        println!(
            "SQLite's bare commits through a raw client (rusqlite: its own file in the same directory, the store's \
             settings, one connection per client thread), timed in the same rounds:"
        );
        println!();
        println!(
            "| store | concurrency | raw client bare commits/s | raw ÷ sqlx bare commits/s | durable steps/s | steps/s ÷ raw bare commits/s | round by round | clients that committed, round by round | machine CPU busy, raw |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        for report in reports {
            for level in &report.levels {
                let (Some(raw), Some((raw_ratio, speed))) = (&level.raw, level.raw_ratios()) else { continue };
                println!(
                    "| {} | {} | {:.0} | {speed:.2} | {:.0} | {raw_ratio:.3} | {} | {} of {} | {:.2} of {} cores |",
                    report.kind.name(),
                    level.concurrency,
                    raw.per_sec,
                    level.steps_per_sec(),
                    level.raw_rounds(),
                    level.raw_clients(),
                    level.concurrency,
                    raw.cpu_machine,
                    cores()
                );
            }
        }
    }
    if reports.iter().flat_map(|report| &report.levels).any(|level| level.floor.is_some()) {
        println!();
        println!(
            "The floor: the engine's own writes for each run (its 11 commits) made by a bare client with no engine \
             (SQLite: rusqlite on one thread; PostgreSQL: one sqlx connection; the engine's schema), timed in the \
             same rounds, against the bare commits the target is on (SQLite: the raw client's; PostgreSQL: sqlx's):"
        );
        println!();
        println!(
            "| store | concurrency | floor steps/s | floor ÷ bare commits/s | durable steps/s | steps/s ÷ floor | round by round |"
        );
        println!("|---|---|---|---|---|---|---|");
        for report in reports {
            for level in &report.levels {
                let Some((floor_steps, kept)) = level.floor_ratios() else { continue };
                let of_bare = floor_steps / level.judged_bare().0;
                println!(
                    "| {} | {} | {floor_steps:.0} | {of_bare:.3} | {:.0} | {kept:.3} | {} |",
                    report.kind.name(),
                    level.concurrency,
                    level.steps_per_sec(),
                    level.floor_rounds()
                );
            }
        }
    }
    println!();
    println!(
        "| store | runs | VmRSS with the runs waiting on timers | target | a fresh engine claims the runs of a killed one (target < 1 s) | restart under the same name |"
    );
    println!("|---|---|---|---|---|---|");
    for report in reports {
        let (memory, claim) = (&report.memory, &report.claim);
        let claimed = |claimed: usize, took: f64| {
            if claimed >= claim.runs {
                format!("{took:.2} s")
            } else {
                format!("only {claimed} of {} after {took:.2} s", claim.runs)
            }
        };
        println!(
            "| {} | {} | {:.1} MB | < {RSS_TARGET_MB} MB {} | {} {} (plus {:.2} s for the leases to lapse) | {} |",
            report.kind.name(),
            memory.runs,
            memory.rss_mb,
            verdict(memory.rss_mb < RSS_TARGET_MB),
            claimed(claim.fresh_claimed, claim.fresh_s),
            verdict(claim_passes(claim.fresh_claimed, claim.runs, claim.fresh_s)),
            claim.lapse_s,
            claimed(claim.restart_claimed, claim.restart_s)
        );
    }
}

fn parent(options: &Options) -> Res<()> {
    println!("anycloud-engine benchmark");
    println!("machine: {}", machine());
    let mut reports = Vec::new();
    for kind in &options.stores {
        println!("\n== {} ==", kind.name());
        let (mut levels, mut memory, mut claim) = (None, None, None);
        for part in Part::ALL {
            match run_child(*kind, part, options)? {
                Outcome::Throughput(found) => levels = Some(found),
                Outcome::Memory(found) => memory = Some(found),
                Outcome::Claim(found) => claim = Some(found),
            }
        }
        reports.push(Report {
            kind: *kind,
            levels: levels.ok_or("no throughput figures")?,
            memory: memory.ok_or("no memory figures")?,
            claim: claim.ok_or("no claim figures")?,
        });
    }
    summary(&reports, options);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|arg| arg == "--bench") {
        println!("engine benchmark: run it with `cargo bench -p anycloud-engine --bench engine`");
        return;
    }
    let result = Options::parse(&args).and_then(|options| match options.part {
        Some(part) => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
                )
                .with_writer(std::io::stderr)
                .try_init();
            child(part, &options)
        }
        None => parent(&options),
    });
    if let Err(err) = result {
        eprintln!("engine benchmark failed: {err}");
        std::process::exit(1);
    }
}
