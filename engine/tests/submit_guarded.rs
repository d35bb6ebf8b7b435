//! `Engine::submit_guarded`: a run and the domain's record of it, written by a guard statement
//! only where its conditions hold, commit together or neither stays; the answer is the run as
//! stored; the run is leased at once unless an unfinished run holds its resource key, and
//! `Submitted::start` drives it with no claim. Both stores. The engine holds leases for an hour,
//! so a run leased by its submit is never claimed by a poll; one that waited for its resource key
//! is claimed by the poll after its predecessor ends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use anycloud_engine::store::Value;
use anycloud_engine::{Engine, EngineConfig, EventKind, Pool, Registry, RunFilter, RunRecord, RunStatus, with_pool};
use support::{Journal, Probe, ProbeInput, TestDb, WAIT};
use uuid::Uuid;

/// The domain's record: written only when `$3` is 1, and one per `id`.
const GUARD: &str = "INSERT INTO guarded_records (id, run_id) SELECT $1, $2 WHERE $3 = 1";

async fn engine(db: &TestDb) -> (Engine, Pool) {
    let raw = db.raw_pool().await;
    let config = EngineConfig {
        poll_interval: Duration::from_millis(50),
        lease_ttl: Duration::from_secs(3600),
        ..EngineConfig::named("guarded")
    };
    let registry = Registry::new().with(Probe::<false>::new(Journal::default()));
    let engine = Engine::start(db.store().await, registry, config).await.expect("engine starts");
    with_pool!(&raw, |pool| {
        sqlx::query("CREATE TABLE guarded_records (id TEXT PRIMARY KEY, run_id TEXT NOT NULL)")
            .execute(pool)
            .await
            .map(drop)
            .expect("the domain's table")
    });
    (engine, raw)
}

/// The records the guard wrote, as `id run_id`.
async fn records(raw: &Pool) -> Vec<String> {
    with_pool!(raw, |pool| {
        sqlx::query_scalar::<_, String>("SELECT id || ' ' || run_id FROM guarded_records ORDER BY id")
            .fetch_all(pool)
            .await
            .expect("read the records")
    })
}

fn as_json(run: &RunRecord) -> serde_json::Value {
    serde_json::to_value(run).expect("a run as JSON")
}

/// Submits under `key`, the guard's record `id` and its condition `holds`.
async fn submit(engine: &Engine, key: &str, id: &str, holds: bool) -> Option<anycloud_engine::Submitted> {
    let guard = |run: Uuid| {
        (GUARD.to_owned(), vec![Value::from(id), Value::from(run.to_string().as_str()), Value::from(i64::from(holds))])
    };
    engine.submit_guarded::<Probe<false>>(&ProbeInput::default(), Some(key), guard).await.expect("submit")
}

async fn both_or_neither(kind: &str) {
    let db = TestDb::open(kind).await;
    let (engine, raw) = engine(&db).await;

    let submitted = submit(&engine, "probe/1", "a", true).await.expect("the guard held");
    let id = submitted.run().id;
    assert_eq!(as_json(submitted.run()), as_json(&engine.run(id).await.unwrap()), "{kind}: answered as stored");
    assert_eq!(submitted.run().lease.as_ref().map(|lease| lease.owner.as_str()), Some("guarded"), "{kind}");
    assert_eq!(records(&raw).await, vec![format!("a {id}")], "{kind}: the record names the run");

    // The guard's condition does not hold; the guard's record is taken: neither stays.
    let before = engine.list(&RunFilter::default()).await.unwrap().len();
    assert!(submit(&engine, "probe/2", "b", false).await.is_none(), "{kind}: the condition does not hold");
    assert!(submit(&engine, "probe/3", "a", true).await.is_none(), "{kind}: the record is taken");
    assert_eq!(engine.list(&RunFilter::default()).await.unwrap().len(), before, "{kind}: no run stays");
    assert_eq!(records(&raw).await.len(), 1, "{kind}: no record stays");

    // An unfinished run holds probe/1: the next one under it waits, unleased, as stored.
    let waiting = submit(&engine, "probe/1", "c", true).await.expect("the guard held");
    let waiting_id = waiting.run().id;
    assert!(waiting.run().lease.is_none(), "{kind}: an earlier run of its key is unfinished");
    assert_eq!(as_json(waiting.run()), as_json(&engine.run(waiting_id).await.unwrap()), "{kind}: answered as stored");

    // The first is driven at once, with no claim; the second is claimed once it has ended.
    submitted.start();
    waiting.start();
    for id in [id, waiting_id] {
        assert_eq!(engine.wait(id, WAIT).await.unwrap().status, RunStatus::Succeeded, "{kind}");
    }
    let kinds: Vec<EventKind> = engine.events(id, 0).await.unwrap().into_iter().map(|event| event.kind).collect();
    assert!(!kinds.contains(&EventKind::Claimed), "{kind}: started by its submit: {kinds:?}");
    engine.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn sqlite_a_run_and_its_record_commit_together_or_neither() {
    both_or_neither("sqlite").await;
}

#[tokio::test]
async fn postgres_a_run_and_its_record_commit_together_or_neither() {
    both_or_neither("postgres").await;
}
