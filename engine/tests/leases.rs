//! Leases: a worker that lost its lease cannot commit, and engines sharing one PostgreSQL
//! database never run the same step at the same time.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use anycloud_engine::{
    Engine, EngineConfig, Registry, RunStatus, Step, StepCtx, StepError, StepKey, Steps, Store, Workflow,
};
use support::{TestDb, WAIT};
use tokio::sync::Notify;

/// One step whose output names the engine that ran it. With a gate, the step blocks on it.
struct Slow {
    engine: &'static str,
    gate: Option<Arc<Notify>>,
}

const WORK: StepKey<String> = StepKey::new("work");

impl Workflow for Slow {
    const KIND: &'static str = "slow";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = String;

    fn steps() -> Steps<Self> {
        Steps::new().then(Step::action(WORK, |ctx: StepCtx<Self>| async move {
            if let Some(gate) = &ctx.workflow().gate {
                gate.notified().await;
            }
            Ok(ctx.workflow().engine.to_owned())
        }))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<String, StepError> {
        ctx.output(WORK)
    }
}

async fn a_worker_whose_lease_was_taken_over_cannot_commit(db: TestDb) {
    let store = db.store().await;
    let gate = Arc::new(Notify::new());
    // A holds the run with a short lease and no heartbeat, and is stuck inside the step (its
    // one slot busy, so it cannot claim the run back itself).
    let a_config = EngineConfig {
        lease_ttl: Duration::from_millis(300),
        heartbeats: false,
        max_concurrency: 1,
        ..support::config("engine-a")
    };
    let a_workflow = Arc::new(Slow { engine: "A", gate: Some(gate.clone()) });
    let a = Engine::start(store.clone(), Registry::new().with(a_workflow), a_config).await.unwrap();
    let id = a.submit::<Slow>(&(), None).await.unwrap();
    let held = a.run(id).await.unwrap();
    assert_eq!(held.lease.as_ref().unwrap().owner, "engine-a");

    // B takes the run over once A's lease lapses, and finishes it.
    let b = support::start(&store, Registry::new().with(Arc::new(Slow { engine: "B", gate: None })), "engine-b").await;
    let run = b.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.output, Some(serde_json::json!("B")));
    assert!(run.lease_generation > held.lease_generation);

    // A wakes up and tries to checkpoint its step: the fencing generation refuses it, and the
    // timeline says so.
    gate.notify_one();
    let mut events = b.events(id, 0).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !events.iter().any(|e| e.kind == "late-commit-refused") {
        assert!(tokio::time::Instant::now() < deadline, "no late-commit-refused entry: {events:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        events = b.events(id, 0).await.unwrap();
    }
    let run = b.run(id).await.unwrap();
    assert_eq!(run.output, Some(serde_json::json!("B")), "A's late commit must not land");
    assert_eq!(run.status, RunStatus::Succeeded);
    let late = events.iter().find(|e| e.kind == "late-commit-refused").unwrap();
    assert_eq!(late.step.as_deref(), Some("work"));
    assert!(
        late.message.contains("engine-a finished step `work` after its lease")
            && late.message.contains("its commit was refused"),
        "{}",
        late.message
    );
    assert_eq!(events.last().unwrap().kind, "late-commit-refused", "{events:?}");
    assert_eq!(events.iter().filter(|e| e.kind == "step-succeeded").count(), 1);
    let recovered = events.iter().find(|e| e.kind == "recovered").expect("a recovered event");
    assert!(recovered.message.contains("after the lease of engine-a lapsed"), "{}", recovered.message);
    let steps = store.steps(id).await.unwrap();
    assert_eq!(steps[0].attempts, 2, "A's cut-short attempt counts");
    a.shutdown(WAIT).await;
    b.shutdown(WAIT).await;
}

#[tokio::test]
async fn sqlite_fencing() {
    a_worker_whose_lease_was_taken_over_cannot_commit(TestDb::sqlite().await).await;
}

#[tokio::test]
async fn postgres_fencing() {
    a_worker_whose_lease_was_taken_over_cannot_commit(TestDb::postgres().await).await;
}

/// Three steps, each recording into a table of its own (not the engine's) which engine ran
/// it and when it started and ended.
struct Tally {
    engine: &'static str,
    pool: sqlx::PgPool,
}

impl Workflow for Tally {
    const KIND: &'static str = "tally";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(Step::action("one", execute))
            .then(Step::action("two", execute))
            .then(Step::action("three", execute))
    }

    fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

async fn execute(ctx: StepCtx<Tally>) -> Result<(), StepError> {
    let started = support::now_ms();
    tokio::time::sleep(Duration::from_millis(1)).await;
    sqlx::query("INSERT INTO executions (run_id, step, engine, started_at, ended_at) VALUES ($1, $2, $3, $4, $5)")
        .bind(ctx.run_id().to_string())
        .bind(ctx.step_name())
        .bind(ctx.workflow().engine)
        .bind(started)
        .bind(support::now_ms())
        .execute(&ctx.workflow().pool)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_on_one_postgres_run_1000_workflows_once_each() {
    let db = TestDb::postgres().await;
    let (store_a, store_b) = (db.store().await, db.store().await);
    let anycloud_engine::Pool::Postgres(pool) = store_a.pool().clone() else { unreachable!("a PostgreSQL store") };
    sqlx::query(
        "CREATE TABLE executions (run_id TEXT NOT NULL, step TEXT NOT NULL, engine TEXT NOT NULL, \
         started_at BIGINT NOT NULL, ended_at BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let engine = |store: &anycloud_engine::Store, name: &'static str| {
        let workflow = Arc::new(Tally { engine: name, pool: pool.clone() });
        let config = EngineConfig { max_concurrency: 16, ..support::config(name) };
        Engine::start(store.clone(), Registry::new().with(workflow), config)
    };
    let a = Arc::new(engine(&store_a, "a").await.unwrap());
    let b = Arc::new(engine(&store_b, "b").await.unwrap());
    let mut submitters = Vec::new();
    for engine in [a.clone(), b.clone()] {
        submitters.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..500 {
                ids.push(engine.submit::<Tally>(&(), None).await.unwrap());
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for submitter in submitters {
        ids.extend(submitter.await.unwrap());
    }
    for id in &ids {
        assert_eq!(a.wait(*id, Duration::from_secs(120)).await.unwrap().status, RunStatus::Succeeded);
    }
    let (executions, distinct): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT (run_id, step)) FROM executions")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((executions, distinct), (3000, 3000), "every step ran exactly once");
    let overlapping: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM executions x JOIN executions y ON x.run_id = y.run_id AND x.step = y.step \
         AND x.ctid <> y.ctid AND x.started_at <= y.ended_at AND y.started_at <= x.ended_at",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(overlapping, 0);
    let by_engine: Vec<(String, i64)> =
        sqlx::query_as("SELECT engine, count(*) FROM executions GROUP BY engine ORDER BY engine")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(by_engine.len(), 2, "both engines did work: {by_engine:?}");
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM engine_runs WHERE status = 'succeeded'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(runs, 1000, "no run lost");
    for engine in [a, b] {
        if let Ok(engine) = Arc::try_unwrap(engine) {
            engine.shutdown(WAIT).await;
        }
    }
}

/// A replica frozen inside a transaction cannot hold its row locks past the server's limit: every
/// connection of the store carries `idle_in_transaction_session_timeout`, and the server ends a
/// transaction left idle that long (the claim of a live replica skips locked rows).
#[tokio::test]
async fn postgres_ends_a_transaction_left_idle() {
    let db = TestDb::postgres().await;
    let store = db.store().await;
    let anycloud_engine::Pool::Postgres(pool) = store.pool() else { panic!("a PostgreSQL store") };
    let shown: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout").fetch_one(pool).await.unwrap();
    assert_eq!(shown, Store::IDLE_IN_TRANSACTION);
}
