//! A restart under the same owner name takes back every run its crashed predecessor held,
//! even when it is busy with other runs first.
//!
//! The crash test (`crash.rs`) found the case this pins down: engine A (owner `same`) dies
//! while driving run R; runs submitted earlier wait in the queue. Engine B starts under the
//! same owner: it lets A's leases lapse (`expire_leases_of`) and claims the due runs in order
//! of `next_at`, so the queued runs come before R. If B's heartbeat then renews every lease
//! held under `same`, it renews R's lease too, though B does not drive R: R stays `running`
//! with a live lease and no driver for as long as B lives.
#![allow(clippy::unwrap_used)]

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anycloud_engine::{Engine, EngineConfig, Registry, RunStatus, Step, StepCtx, StepError, Steps, Store, Workflow};
use sqlx::Connection;
use sqlx::postgres::PgConnectOptions;
use uuid::Uuid;

/// Two steps that take as long as the registered value says.
struct TwoSteps {
    first: Duration,
    second: Duration,
}

impl Workflow for TwoSteps {
    const KIND: &'static str = "restart.two-steps";
    const VERSION: u32 = 1;
    type Input = u32;
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(Step::action("first", |ctx: StepCtx<Self>| async move {
                tokio::time::sleep(ctx.workflow().first).await;
                Ok(())
            }))
            .then(Step::action("second", |ctx: StepCtx<Self>| async move {
                tokio::time::sleep(ctx.workflow().second).await;
                Ok(())
            }))
    }

    fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

fn config() -> EngineConfig {
    EngineConfig {
        max_concurrency: 1,
        poll_interval: Duration::from_millis(20),
        // A heartbeat every 200 ms: well before B gets to the crashed run.
        lease_ttl: Duration::from_millis(600),
        ..EngineConfig::named("same")
    }
}

async fn restart_takes_back_the_crashed_run(store: Store) {
    // Engine A: the first run starts at once and hangs in `second`; three more, submitted while
    // it is in `first`, wait for the slot.
    let a = Engine::start(
        store.clone(),
        Registry::new()
            .with(Arc::new(TwoSteps { first: Duration::from_millis(200), second: Duration::from_secs(3600) })),
        config(),
    )
    .await
    .unwrap();
    let crashed = a.submit::<TwoSteps>(&0, None).await.unwrap();
    let mut queued = Vec::new();
    for number in 1..=3 {
        queued.push(a.submit::<TwoSteps>(&number, None).await.unwrap());
    }
    // Once `first` is checkpointed, the crashed run is due after the queued ones (its `next_at`
    // is the time of that checkpoint).
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.steps(crashed).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the first step of {crashed} never completed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(a); // a crash: every task stops where it stands, leases are left behind

    // Engine B, same owner, whose `second` takes 300 ms: it drives the queued runs first.
    let b = Engine::start(
        store.clone(),
        Registry::new().with(Arc::new(TwoSteps { first: Duration::ZERO, second: Duration::from_millis(300) })),
        config(),
    )
    .await
    .unwrap();
    for id in queued.iter().chain([&crashed]) {
        let run = match b.wait(*id, Duration::from_secs(10)).await {
            Ok(run) => run,
            Err(err) => {
                let run = b.run(*id).await.unwrap();
                panic!(
                    "run {id} ({}) did not end: {err}; status {}, lease {:?}, generation {}",
                    if *id == crashed { "held by the crashed engine" } else { "queued" },
                    run.status,
                    run.lease,
                    run.lease_generation
                );
            }
        };
        assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");
    }
    b.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_restart_takes_back_the_crashed_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::sqlite(&dir.path().join("engine.db")).await.unwrap();
    restart_takes_back_the_crashed_run(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_takes_back_the_crashed_run() {
    let url = anycloud_engine::testing::postgres_url();
    let schema = format!("restart_{}", Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&url)
        .await
        .unwrap_or_else(|err| panic!("PostgreSQL at {url} is required (set ANYCLOUD_TEST_DATABASE_URL): {err}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await.unwrap();
    let options = PgConnectOptions::from_str(&url).unwrap().options([("search_path", schema.as_str())]);
    let store = Store::open_postgres(options, 8).await.unwrap();
    restart_takes_back_the_crashed_run(store.clone()).await;
    store.close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut conn).await.unwrap();
}
