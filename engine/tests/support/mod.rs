//! Shared by the engine's integration tests: a fresh store on each database, and small
//! workflows whose steps write what they did to a journal the test reads.
#![allow(dead_code, missing_docs)]

pub mod tmpfs;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anycloud_engine::{
    Check, Effect, Engine, EngineConfig, OnExhausted, Registry, RetryPolicy, Step, StepCtx, StepError, StepKey, Steps,
    Store, Workflow,
};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgConnectOptions;
use uuid::Uuid;

/// Where a store lives: SQLite in a temporary directory, or a fresh PostgreSQL schema.
pub struct TestDb {
    pub url: String,
    pub kind: &'static str,
    _dir: Option<tempfile::TempDir>,
    schema: Option<String>,
}

impl TestDb {
    pub async fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite://{}", dir.path().join("engine.db").display());
        Self { url, kind: "sqlite", _dir: Some(dir), schema: None }
    }

    /// A new schema in the test database (ANYCLOUD_TEST_DATABASE_URL). Never skipped: a
    /// missing server fails the test.
    pub async fn postgres() -> Self {
        let base = postgres_url();
        let schema = format!("t_{}", Uuid::new_v4().simple());
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&base).await.unwrap_or_else(|err| {
            panic!("PostgreSQL at {base} is required by the tests (scripts/test starts it): {err}")
        });
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&mut conn)
            .await
            .expect("create schema");
        Self { url: base, kind: "postgres", _dir: None, schema: Some(schema) }
    }

    pub async fn open(kind: &str) -> Self {
        if kind == "postgres" { Self::postgres().await } else { Self::sqlite().await }
    }

    pub async fn store(&self) -> Store {
        match &self.schema {
            None => Store::connect(&self.url).await.expect("open sqlite store"),
            Some(schema) => {
                let options = PgConnectOptions::from_str(&self.url)
                    .expect("postgres url")
                    .options([("search_path", schema.as_str())]);
                Store::open_postgres(options, 16).await.expect("open postgres store")
            }
        }
    }
}

impl TestDb {
    /// A pool on the database that runs no migration.
    pub async fn raw_pool(&self) -> anycloud_engine::Pool {
        match &self.schema {
            None => {
                let options = sqlx::sqlite::SqliteConnectOptions::from_str(&self.url)
                    .expect("sqlite url")
                    .create_if_missing(true);
                anycloud_engine::Pool::Sqlite(sqlx::SqlitePool::connect_with(options).await.expect("sqlite pool"))
            }
            Some(schema) => {
                let options = PgConnectOptions::from_str(&self.url)
                    .expect("postgres url")
                    .options([("search_path", schema.as_str())]);
                anycloud_engine::Pool::Postgres(sqlx::PgPool::connect_with(options).await.expect("postgres pool"))
            }
        }
    }
}

pub use anycloud_engine::testing::postgres_url;

/// Engine settings for tests: quick polls, short leases.
pub fn config(owner: &str) -> EngineConfig {
    EngineConfig {
        poll_interval: Duration::from_millis(20),
        lease_ttl: Duration::from_secs(5),
        ..EngineConfig::named(owner)
    }
}

pub const WAIT: Duration = Duration::from_secs(30);

/// What steps did, in order, across every run of a test.
#[derive(Clone, Default)]
pub struct Journal(Arc<Mutex<Vec<String>>>);

impl Journal {
    pub fn push(&self, entry: impl Into<String>) {
        self.0.lock().expect("journal").push(entry.into());
    }
    pub fn entries(&self) -> Vec<String> {
        self.0.lock().expect("journal").clone()
    }
}

/// How a [`Probe`] run misbehaves.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProbeInput {
    /// `flaky` fails this many times before it succeeds.
    pub flaky_failures: u32,
    /// `flaky` fails terminally.
    pub flaky_terminal: bool,
    /// `gate` waits until the run receives signal `go`.
    pub wait_for_go: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeOutput {
    pub reserved: String,
    pub flaky_attempts: u32,
    pub keys: Vec<Uuid>,
}

const RESERVE: StepKey<String> = StepKey::new("reserve");
const FLAKY: StepKey<(u32, Uuid)> = StepKey::new("flaky");
const FINISH: StepKey<Uuid> = StepKey::new("finish");

/// reserve -> flaky -> gate -> finish, each with an undo that writes to the journal.
/// `PARK` selects the policy when `flaky` runs out of retries.
pub struct Probe<const PARK: bool> {
    pub journal: Journal,
    /// While set, the undo of `reserve` fails.
    pub break_reserve_undo: AtomicBool,
    attempts: Mutex<HashMap<Uuid, u32>>,
}

impl<const PARK: bool> Probe<PARK> {
    pub fn new(journal: Journal) -> Arc<Self> {
        Arc::new(Self { journal, break_reserve_undo: AtomicBool::new(false), attempts: Mutex::default() })
    }
}

impl<const PARK: bool> Workflow for Probe<PARK> {
    const KIND: &'static str = if PARK { "probe.park" } else { "probe" };
    const VERSION: u32 = 1;
    type Input = ProbeInput;
    type Output = ProbeOutput;

    fn steps() -> Steps<Self> {
        let policy = RetryPolicy::fixed(Duration::from_millis(10), 3).on_exhausted(if PARK {
            OnExhausted::Park
        } else {
            OnExhausted::Unwind
        });
        Steps::new()
            .then(
                Step::action("reserve", reserve::<PARK>)
                    .undo(|ctx: StepCtx<Self>, reserved: Effect<String>| async move {
                        if ctx.workflow().break_reserve_undo.load(Ordering::SeqCst) {
                            return Err(StepError::retryable(std::io::Error::other("the reservation service is down")));
                        }
                        let reserved = reserved.done().unwrap_or_else(|| "(unknown)".into());
                        ctx.workflow().journal.push(format!("undo reserve {reserved}"));
                        Ok(())
                    })
                    .undo_retry(RetryPolicy::fixed(Duration::from_millis(10), 2)),
            )
            .then(Step::action(FLAKY, flaky::<PARK>).retry(policy).undo(
                |ctx: StepCtx<Self>, _: Effect<(u32, Uuid)>| async move {
                    ctx.workflow().journal.push("undo flaky");
                    Ok(())
                },
            ))
            .then(Step::poll("gate", gate::<PARK>).every(Duration::from_millis(20)).timeout(Duration::from_secs(60)))
            .then(Step::action(FINISH, |ctx: StepCtx<Self>| async move {
                ctx.workflow().journal.push("finish");
                Ok(ctx.idempotency_key())
            }))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<ProbeOutput, StepError> {
        let (flaky_attempts, flaky_key) = ctx.output(FLAKY)?;
        Ok(ProbeOutput { reserved: ctx.output(RESERVE)?, flaky_attempts, keys: vec![flaky_key, ctx.output(FINISH)?] })
    }
}

async fn reserve<const PARK: bool>(ctx: StepCtx<Probe<PARK>>) -> Result<String, StepError> {
    ctx.workflow().journal.push("reserve");
    Ok(format!("r-{}", ctx.run_id().simple()))
}

async fn flaky<const PARK: bool>(ctx: StepCtx<Probe<PARK>>) -> Result<(u32, Uuid), StepError> {
    let attempt = {
        let mut attempts = ctx.workflow().attempts.lock().expect("attempts");
        let attempt = attempts.entry(ctx.run_id()).or_default();
        *attempt += 1;
        *attempt
    };
    ctx.workflow().journal.push(format!("flaky attempt {attempt} key {}", ctx.idempotency_key()));
    let input = ctx.input();
    if input.flaky_terminal {
        return Err(StepError::terminal(std::io::Error::other("quota exceeded")).context("launching the probe"));
    }
    if attempt <= input.flaky_failures {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer");
        return Err(StepError::retryable(Wrapped(cause)));
    }
    Ok((attempt, ctx.idempotency_key()))
}

async fn gate<const PARK: bool>(ctx: StepCtx<Probe<PARK>>) -> Result<Check<()>, StepError> {
    if !ctx.input().wait_for_go || ctx.signal("go").await?.is_some() {
        return Ok(Check::Ready(()));
    }
    Ok(Check::NotYet("waiting for signal `go`".into()))
}

/// An error with a cause, to check that the whole chain is kept.
#[derive(Debug)]
pub struct Wrapped(pub std::io::Error);

impl std::fmt::Display for Wrapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("calling the probe API")
    }
}

impl std::error::Error for Wrapped {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

const BEFORE: StepKey<i64> = StepKey::new("before");
const AFTER: StepKey<i64> = StepKey::new("after");

/// before -> nap (a durable sleep of `ms`) -> after.
pub struct Nap<const V: u32> {
    pub journal: Journal,
}

impl<const V: u32> Workflow for Nap<V> {
    const KIND: &'static str = "nap";
    const VERSION: u32 = V;
    type Input = u64;
    type Output = i64;

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(Step::action(BEFORE, |ctx: StepCtx<Self>| async move {
                ctx.workflow().journal.push("before");
                Ok(now_ms())
            }))
            .then(Step::sleep("nap", |ctx: &StepCtx<Self>| Duration::from_millis(*ctx.input())))
            .then(Step::action(AFTER, |ctx: StepCtx<Self>| async move {
                ctx.workflow().journal.push("after");
                Ok(now_ms())
            }))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<i64, StepError> {
        Ok(ctx.output(AFTER)? - ctx.output(BEFORE)?)
    }
}

/// One step that writes when it starts and ends, to check runs under one key never overlap.
pub struct Hold {
    pub journal: Journal,
}

impl Workflow for Hold {
    const KIND: &'static str = "hold";
    const VERSION: u32 = 1;
    type Input = String;
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new().then(Step::action("hold", |ctx: StepCtx<Self>| async move {
            let name = ctx.input().clone();
            ctx.workflow().journal.push(format!("start {name}"));
            tokio::time::sleep(Duration::from_millis(30)).await;
            ctx.workflow().journal.push(format!("end {name}"));
            Ok(())
        }))
    }

    fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64
}

pub async fn start(store: &Store, registry: Registry, owner: &str) -> Engine {
    Engine::start(store.clone(), registry, config(owner)).await.expect("engine starts")
}

/// Polls until the run has this status.
pub async fn until_status(engine: &Engine, id: Uuid, status: anycloud_engine::RunStatus) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let run = engine.run(id).await.expect("run");
        if run.status == status {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "run {id} stayed {} (wanted {status}): {run:?}", run.status);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
