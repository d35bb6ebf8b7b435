//! The engine's benchmark, run with `cargo bench -p anycloud-engine --bench engine`.
//!
//! On each store (SQLite and PostgreSQL) it prints:
//!
//! - the database's bare commit rate: one single-row insert per transaction, through sqlx, on
//!   the same database and pool the engine uses, at concurrency 1 and 16;
//! - the engine's throughput on workflows of 10 no-op steps at concurrency 1 and 16:
//!   workflows/s, durable steps/s, p50/p99 workflow latency (submit to end), and the ratio
//!   steps/s ÷ bare commits/s at the same concurrency, against its target;
//! - the resident memory of the process with 10,000 runs waiting on timers;
//! - the time a fresh engine takes to claim 10,000 in-flight runs left by a killed one (and,
//!   for comparison, a restart under the dead engine's own name).
//!
//! Options, after `--`: `--store sqlite|postgres|both` (default both), `--seconds N` per
//! measurement (default 5), `--runs N` for the memory and claim parts (default 10000),
//! `--quick` (1 s, 1000 runs: a smoke run), `--pg-pool N` (default 16, as `Store::connect`),
//! `--dir PATH` (where the SQLite files go; default the temporary directory). PostgreSQL is
//! `ANYCLOUD_TEST_DATABASE_URL`, or `postgres://postgres@127.0.0.1:5432/test`; each part uses
//! a fresh schema, dropped at the end. Without `--bench` in its arguments (as `cargo test
//! --all-targets` runs it) the binary only says how to run it.

use std::error::Error;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anycloud_engine::{
    Engine, EngineConfig, Registry, RunStatus, Step, StepCtx, StepError, Steps, Store, Workflow,
};
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, Connection};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Steps of the throughput workflow.
const STEPS: usize = 10;
/// Concurrencies measured, with the target ratio of steps/s to bare commits/s at each.
const LEVELS: [(usize, f64); 2] = [(1, 0.8), (16, 0.7)];
/// Resident memory target with the runs waiting on timers, in MB (10^6 bytes).
const RSS_TARGET_MB: f64 = 100.0;
/// Client tasks submitting the runs of the memory and claim parts.
const SUBMITTERS: usize = 32;
/// Longest wait for any one condition before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(600);

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
        NAMES
            .into_iter()
            .fold(Steps::new(), |steps, name| steps.then(Step::action(name, nothing::<Self>)))
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
            .then(Step::sleep("nap", |_: &StepCtx<Self>| {
                Duration::from_secs(3600)
            }))
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
// Options and databases

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

struct Options {
    stores: Vec<Kind>,
    seconds: f64,
    runs: usize,
    quick: bool,
    pg_pool: u32,
    dir: PathBuf,
}

impl Options {
    fn parse(args: &[String]) -> Res<Self> {
        let mut stores = vec![Kind::Sqlite, Kind::Postgres];
        let (mut seconds, mut runs, mut quick, mut pg_pool) = (None, None, false, 16);
        let mut dir = std::env::temp_dir();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
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
                other if other.starts_with("--") => {
                    return Err(format!("unknown option `{other}`").into());
                }
                _ => {} // a name filter cargo passes on: there is one benchmark
            }
        }
        Ok(Self {
            stores,
            seconds: seconds.unwrap_or(if quick { 1.0 } else { 5.0 }),
            runs: runs.unwrap_or(if quick { 1_000 } else { 10_000 }),
            quick,
            pg_pool,
            dir,
        })
    }

    fn measure(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }

    /// Warm-up before each measured window.
    fn warmup(&self) -> Duration {
        Duration::from_secs_f64((self.seconds / 5.0).min(1.0))
    }
}

fn postgres_url() -> String {
    std::env::var("ANYCLOUD_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A fresh database: a SQLite file in a temporary directory, or a fresh PostgreSQL schema.
struct Db {
    store: Store,
    _dir: Option<tempfile::TempDir>,
    schema: Option<String>,
}

impl Db {
    async fn open(kind: Kind, options: &Options) -> Res<Self> {
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::Builder::new()
                    .prefix("anycloud-bench-")
                    .tempdir_in(&options.dir)?;
                let url = format!("sqlite://{}", dir.path().join("engine.db").display());
                let store = Store::connect(&url).await?;
                Ok(Self {
                    store,
                    _dir: Some(dir),
                    schema: None,
                })
            }
            Kind::Postgres => {
                let url = postgres_url();
                let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
                let mut conn = sqlx::PgConnection::connect(&url).await?;
                sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                    .execute(&mut conn)
                    .await?;
                conn.close().await?;
                let connect = PgConnectOptions::from_str(&url)?
                    .options([("search_path", schema.as_str())]);
                let store = Store::open_postgres(connect, options.pg_pool).await?;
                Ok(Self {
                    store,
                    _dir: None,
                    schema: Some(schema),
                })
            }
        }
    }

    async fn close(self) -> Res<()> {
        self.store.close().await;
        if let Some(schema) = &self.schema {
            let mut conn = sqlx::PgConnection::connect(&postgres_url()).await?;
            sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                .execute(&mut conn)
                .await?;
            conn.close().await?;
        }
        Ok(())
    }
}

/// Runs `$body` with `$pool` bound to the store's pool, whichever database it is.
macro_rules! on_pool {
    ($store:expr, |$pool:ident| $body:expr) => {
        match ($store.sqlite_pool(), $store.postgres_pool()) {
            (Some($pool), _) => $body,
            (_, Some($pool)) => $body,
            _ => Err::<_, Box<dyn Error + Send + Sync>>("the store has no pool".into()),
        }
    };
}

async fn count_runs(store: &Store, sql: &'static str, arg: &str) -> Res<i64> {
    on_pool!(store, |pool| Ok(sqlx::query_scalar::<_, i64>(sql)
        .bind(arg)
        .fetch_one(pool)
        .await?))
}

/// Runs held by `owner` under a lease generation above `generation`: claimed since then.
async fn count_reclaimed(store: &Store, owner: &str, generation: i64) -> Res<i64> {
    on_pool!(store, |pool| Ok(sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM engine_runs WHERE lease_owner = $1 AND lease_generation > $2"
    )
    .bind(owner)
    .bind(generation)
    .fetch_one(pool)
    .await?))
}

async fn max_column(store: &Store, sql: &'static str) -> Res<i64> {
    on_pool!(store, |pool| Ok(sqlx::query_scalar::<_, Option<i64>>(sql)
        .fetch_one(pool)
        .await?
        .unwrap_or(0)))
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
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// A field of `/proc/self/status` (`VmRSS`, `VmHWM`) in MB (10^6 bytes).
fn proc_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib * 1024.0 / 1e6)
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "MISS" }
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1e3)
}

fn secs(duration: Duration) -> String {
    format!("{:.2} s", duration.as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// Measurements

/// What finished inside the measured window, with each operation's latency.
struct Window {
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Window {
    fn per_sec(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }
}

/// Runs `op` in a loop on `concurrency` tasks through a warm-up and a measured window; counts
/// the operations that end inside the window. Each task finishes the operation it is in when
/// the window closes (not counted).
async fn measure<F, Fut>(concurrency: usize, options: &Options, op: F) -> Res<Window>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Res<()>> + Send + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now() + options.warmup();
    let end = start + options.measure();
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
    Ok(Window {
        elapsed: end - start,
        latencies,
    })
}

/// Bare commits: `BEGIN`, one single-row insert, `COMMIT`, in a loop on each task, through the
/// store's own pool (so the same file or schema, the same connection settings, the same pool
/// size). SQLite begins with `BEGIN IMMEDIATE`, as every write transaction of the engine does.
async fn bare_commits(store: &Store, concurrency: usize, options: &Options) -> Res<Window> {
    const PAYLOAD: &str = "a bare commit: one short row per transaction, nothing else";
    if let Some(pool) = store.sqlite_pool() {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS bench_commits (id INTEGER PRIMARY KEY, payload TEXT)",
        )
        .execute(pool)
        .await?;
        let pool = pool.clone();
        measure(concurrency, options, move |_| {
            let pool = pool.clone();
            async move {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                sqlx::query("INSERT INTO bench_commits (payload) VALUES ($1)")
                    .bind(PAYLOAD)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }
        })
        .await
    } else if let Some(pool) = store.postgres_pool() {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS bench_commits (id BIGSERIAL PRIMARY KEY, payload TEXT)",
        )
        .execute(pool)
        .await?;
        let pool = pool.clone();
        measure(concurrency, options, move |_| {
            let pool = pool.clone();
            async move {
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO bench_commits (payload) VALUES ($1)")
                    .bind(PAYLOAD)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }
        })
        .await
    } else {
        Err("the store has no pool".into())
    }
}

/// Workflows of ten no-op steps: each client submits one, waits for its end, and repeats.
async fn engine_throughput(store: &Store, concurrency: usize, options: &Options) -> Res<Window> {
    let config = EngineConfig {
        max_concurrency: 64.max(concurrency),
        ..EngineConfig::named(format!("bench-throughput-{concurrency}"))
    };
    let registry = Registry::new().with(Arc::new(Noop));
    let engine = Arc::new(Engine::start(store.clone(), registry, config).await?);
    let clients = engine.clone();
    let window = measure(concurrency, options, move |n| {
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
    .await?;
    match Arc::try_unwrap(engine) {
        Ok(engine) => engine.shutdown(Duration::from_secs(10)).await,
        Err(_) => return Err("the engine is still shared after the clients ended".into()),
    }
    Ok(window)
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

struct Throughput {
    concurrency: usize,
    target: f64,
    bare: Window,
    engine: Window,
}

impl Throughput {
    fn steps_per_sec(&self) -> f64 {
        self.engine.per_sec() * STEPS as f64
    }

    fn ratio(&self) -> f64 {
        self.steps_per_sec() / self.bare.per_sec()
    }
}

struct Memory {
    submit: Duration,
    all_waiting: Duration,
    rss_before: f64,
    rss: f64,
}

struct Claim {
    lapse_wait: Duration,
    fresh: Duration,
    fresh_claimed: usize,
    restart: Duration,
    restart_claimed: usize,
    rss_in_flight: f64,
}

struct Report {
    kind: Kind,
    throughput: Vec<Throughput>,
    memory: Memory,
    claim: Claim,
}

async fn describe(store: &Store) -> Res<String> {
    if let Some(pool) = store.sqlite_pool() {
        let version: String = sqlx::query_scalar("SELECT sqlite_version()")
            .fetch_one(pool)
            .await?;
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(pool)
            .await?;
        let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(pool)
            .await?;
        let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_one(pool)
            .await?;
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
    } else if let Some(pool) = store.postgres_pool() {
        let version: String = sqlx::query_scalar("SHOW server_version")
            .fetch_one(pool)
            .await?;
        let commit: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(pool)
            .await?;
        let fsync: String = sqlx::query_scalar("SHOW fsync").fetch_one(pool).await?;
        let method: String = sqlx::query_scalar("SHOW wal_sync_method")
            .fetch_one(pool)
            .await?;
        Ok(format!(
            "PostgreSQL {version}, synchronous_commit={commit}, fsync={fsync}, \
             wal_sync_method={method}, pool of {} connections",
            pool.options().get_max_connections()
        ))
    } else {
        Err("the store has no pool".into())
    }
}

async fn bench_store(kind: Kind, options: &Options) -> Res<Report> {
    let name = kind.name();
    println!("\n== {name} ==");

    // Bare commits and engine throughput, on one database.
    let db = Db::open(kind, options).await?;
    println!("{}", describe(&db.store).await?);
    let mut throughput = Vec::new();
    for (concurrency, target) in LEVELS {
        let bare = bare_commits(&db.store, concurrency, options).await?;
        println!(
            "[{name}] c={concurrency:<2} bare commits: {:>8.0} commits/s  (p50 {}, p99 {}, {} commits)",
            bare.per_sec(),
            ms(bare.percentile(0.5)),
            ms(bare.percentile(0.99)),
            bare.latencies.len()
        );
        let engine = engine_throughput(&db.store, concurrency, options).await?;
        let result = Throughput {
            concurrency,
            target,
            bare,
            engine,
        };
        println!(
            "[{name}] c={concurrency:<2} engine:       {:>8.1} workflows/s, {:>8.0} steps/s  (p50 {}, p99 {}, {} workflows)  \
             ratio {:.3} (target >= {target}) {}",
            result.engine.per_sec(),
            result.steps_per_sec(),
            ms(result.engine.percentile(0.5)),
            ms(result.engine.percentile(0.99)),
            result.engine.latencies.len(),
            result.ratio(),
            verdict(result.ratio() >= target)
        );
        throughput.push(result);
    }
    db.close().await?;

    // Memory with runs waiting on timers, on a fresh database.
    let runs = options.runs;
    let db = Db::open(kind, options).await?;
    let rss_before = proc_mb("VmRSS");
    let registry = Registry::new().with(Arc::new(Nap));
    let engine = Arc::new(
        Engine::start(
            db.store.clone(),
            registry,
            EngineConfig::named("bench-memory"),
        )
        .await?,
    );
    let started = Instant::now();
    let submit = submit_many::<Nap>(&engine, runs).await?;
    let waiting = until_count(runs, PATIENCE, || {
        count_runs(
            &db.store,
            "SELECT count(*) FROM engine_runs WHERE status = $1",
            "waiting",
        )
    })
    .await?;
    let all_waiting = started.elapsed();
    if waiting < runs {
        return Err(format!("only {waiting} of {runs} runs were waiting after {PATIENCE:?}").into());
    }
    // A few polls of the claim loop over the waiting rows before reading the memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss = proc_mb("VmRSS");
    let memory = Memory {
        submit,
        all_waiting,
        rss_before,
        rss,
    };
    println!(
        "[{name}] memory: {runs} runs waiting on a 1 h timer (submitted in {}, all waiting after {}): \
         VmRSS {:.1} MB (before the engine started: {:.1} MB; peak so far VmHWM {:.1} MB)  target < {RSS_TARGET_MB} MB {}",
        secs(submit),
        secs(all_waiting),
        rss,
        rss_before,
        proc_mb("VmHWM"),
        verdict(rss < RSS_TARGET_MB)
    );
    match Arc::try_unwrap(engine) {
        Ok(engine) => engine.shutdown(Duration::from_secs(10)).await,
        Err(_) => return Err("the memory engine is still shared".into()),
    }
    db.close().await?;

    // Claiming runs left in flight by a killed engine, on a fresh database.
    let db = Db::open(kind, options).await?;
    let store = &db.store;
    let registry = Registry::new().with(Arc::new(Hang));
    let killed = Arc::new(
        Engine::start(
            store.clone(),
            registry.clone(),
            EngineConfig {
                max_concurrency: runs,
                lease_ttl: Duration::from_secs(3),
                ..EngineConfig::named("bench-a")
            },
        )
        .await?,
    );
    let submit = submit_many::<Hang>(&killed, runs).await?;
    let held = count_runs(
        store,
        "SELECT count(*) FROM engine_runs WHERE lease_owner = $1 AND status = 'running'",
        "bench-a",
    )
    .await? as usize;
    if held < runs {
        return Err(format!("engine bench-a holds only {held} of {runs} runs").into());
    }
    // Killed: dropping an engine aborts its claim loop, heartbeat and step tasks at once.
    drop(killed);
    let killed_at = Instant::now();
    let expiry = max_column(store, "SELECT max(lease_expires_at) FROM engine_runs").await?;
    let lapse = Duration::from_millis((expiry - now_ms()).max(0) as u64 + 50);
    tokio::time::sleep(lapse).await;
    let lapse_wait = killed_at.elapsed();
    println!(
        "[{name}] claim: {runs} runs in flight under bench-a (submitted in {}), bench-a killed; \
         waited {} for its leases (lease_ttl 3 s) to lapse",
        secs(submit),
        secs(lapse_wait)
    );

    let started = Instant::now();
    let fresh_engine = Engine::start(
        store.clone(),
        registry.clone(),
        EngineConfig {
            max_concurrency: runs,
            ..EngineConfig::named("bench-b")
        },
    )
    .await?;
    let fresh_claimed = until_count(runs, PATIENCE, || {
        count_runs(
            store,
            "SELECT count(*) FROM engine_runs WHERE lease_owner = $1",
            "bench-b",
        )
    })
    .await?;
    let fresh = started.elapsed();
    let rss_in_flight = proc_mb("VmRSS");
    println!(
        "[{name}] claim: a fresh engine (bench-b, claim_batch 64) claimed {fresh_claimed} of {runs} in {}  \
         (VmRSS with them in flight: {:.1} MB)",
        secs(fresh),
        rss_in_flight
    );

    // Killed again; this time the same name comes back and takes its runs back at once.
    drop(fresh_engine);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let generation = max_column(store, "SELECT max(lease_generation) FROM engine_runs").await?;
    let started = Instant::now();
    let restarted = Engine::start(
        store.clone(),
        registry,
        EngineConfig {
            max_concurrency: runs,
            ..EngineConfig::named("bench-b")
        },
    )
    .await?;
    let restart_claimed = until_count(runs, PATIENCE, || {
        count_reclaimed(store, "bench-b", generation)
    })
    .await?;
    let restart = started.elapsed();
    println!(
        "[{name}] claim: bench-b killed and restarted under the same name: claimed {restart_claimed} of {runs} in {}",
        secs(restart)
    );
    drop(restarted);
    tokio::time::sleep(Duration::from_millis(200)).await;
    db.close().await?;

    Ok(Report {
        kind,
        throughput,
        memory,
        claim: Claim {
            lapse_wait,
            fresh,
            fresh_claimed,
            restart,
            restart_claimed,
            rss_in_flight,
        },
    })
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("model name")?.split_once(':').map(|(_, model)| model.trim().to_owned()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores ({cpu}), Linux {}", kernel.trim())
}

fn summary(reports: &[Report], options: &Options) {
    println!("\n== summary ==");
    println!(
        "measured {} s per figure after {} s of warm-up; {} runs for memory and claim{}",
        options.seconds,
        options.warmup().as_secs_f64(),
        options.runs,
        if options.quick { " (--quick: a smoke run)" } else { "" }
    );
    println!();
    println!(
        "| store | concurrency | bare commits/s | workflows/s | durable steps/s | p50 latency | p99 latency | steps/s ÷ bare commits/s | target |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for report in reports {
        for t in &report.throughput {
            println!(
                "| {} | {} | {:.0} | {:.1} | {:.0} | {} | {} | {:.3} | >= {} {} |",
                report.kind.name(),
                t.concurrency,
                t.bare.per_sec(),
                t.engine.per_sec(),
                t.steps_per_sec(),
                ms(t.engine.percentile(0.5)),
                ms(t.engine.percentile(0.99)),
                t.ratio(),
                t.target,
                verdict(t.ratio() >= t.target)
            );
        }
    }
    println!();
    println!(
        "| store | runs | submitted in | VmRSS, runs waiting on timers | target | fresh engine claims runs of a killed one | restart under the same name |"
    );
    println!("|---|---|---|---|---|---|---|");
    for report in reports {
        let (m, c) = (&report.memory, &report.claim);
        let claimed = |claimed: usize, took: Duration| {
            if claimed >= options.runs {
                secs(took)
            } else {
                format!("only {claimed} after {}", secs(took))
            }
        };
        println!(
            "| {} | {} | {} | {:.1} MB (process before: {:.1} MB) | < {RSS_TARGET_MB} MB {} | {} (after {} for leases to lapse) | {} |",
            report.kind.name(),
            options.runs,
            secs(m.submit),
            m.rss,
            m.rss_before,
            verdict(m.rss < RSS_TARGET_MB),
            claimed(c.fresh_claimed, c.fresh),
            secs(c.lapse_wait),
            claimed(c.restart_claimed, c.restart)
        );
    }
    for report in reports {
        println!(
            "{}: all {} runs waiting {} after the first submit; VmRSS with {} runs in flight in the process: {:.1} MB",
            report.kind.name(),
            options.runs,
            secs(report.memory.all_waiting),
            options.runs,
            report.claim.rss_in_flight
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|arg| arg == "--bench") {
        println!("engine benchmark: run it with `cargo bench -p anycloud-engine --bench engine`");
        return;
    }
    let options = match Options::parse(&args) {
        Ok(options) => options,
        Err(err) => {
            eprintln!("engine benchmark: {err}");
            std::process::exit(2);
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("engine benchmark: cannot start the runtime: {err}");
            std::process::exit(1);
        }
    };
    println!("anycloud-engine benchmark");
    println!("machine: {}", machine());
    println!("arguments: {}", args.join(" "));
    let result = runtime.block_on(async {
        let mut reports = Vec::new();
        for kind in &options.stores {
            reports.push(bench_store(*kind, &options).await?);
        }
        summary(&reports, &options);
        Ok::<_, Box<dyn Error + Send + Sync>>(())
    });
    if let Err(err) = result {
        eprintln!("engine benchmark failed: {err}");
        std::process::exit(1);
    }
}
