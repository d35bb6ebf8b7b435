//! `Engine::submit_in_leased`: a run submitted inside the caller's transaction is leased to this
//! engine when it has a free slot, and `Submitted::start` after the commit drives it with no
//! claim. A `Submitted` dropped instead (the caller's transaction failed, or its outcome is not
//! known) gives the lease up at once, so the claim loop takes the run if it was committed; a
//! rolled-back one leaves nothing. Both stores. The engines here poll once an hour and hold
//! leases for an hour: a run that ends within the test was started by the submit, or by a claim
//! that a released lease woke, never by a poll or a lapsed lease.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use anycloud_engine::{Engine, EngineConfig, EventKind, Registry, RunStatus, Submitted, WriteTx};
use support::{Journal, Probe, ProbeInput, TestDb, WAIT};

async fn engine(db: &TestDb, owner: &str) -> Engine {
    let config = EngineConfig {
        poll_interval: Duration::from_secs(3600),
        lease_ttl: Duration::from_secs(3600),
        ..EngineConfig::named(owner)
    };
    let registry = Registry::new().with(Probe::<false>::new(Journal::default()));
    Engine::start(db.store().await, registry, config).await.expect("engine starts")
}

/// A write transaction with a probe run submitted in it under `resource_key`.
async fn submit(engine: &Engine, resource_key: &str) -> (WriteTx, Submitted) {
    let mut tx = engine.store().begin_write().await.unwrap();
    let submitted =
        engine.submit_in_leased::<Probe<false>>(&mut tx, &ProbeInput::default(), Some(resource_key)).await.unwrap();
    (tx, submitted)
}

async fn kinds(engine: &Engine, id: uuid::Uuid) -> Vec<EventKind> {
    engine.events(id, 0).await.unwrap().into_iter().map(|event| event.kind).collect()
}

async fn started_at_once_after_the_commit(kind: &str) {
    let db = TestDb::open(kind).await;
    let engine = engine(&db, "leased").await;
    let (tx, submitted) = submit(&engine, "probe/1").await;
    let id = submitted.run().id;
    assert_eq!(submitted.run().lease.as_ref().map(|lease| lease.owner.as_str()), Some("leased"), "{kind}");
    tx.commit().await.unwrap();
    submitted.start();

    let run = engine.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Succeeded, "{kind}: {run:?}");
    let events = engine.events(id, 0).await.unwrap();
    assert!(events[0].message.contains("started at once by leased"), "{kind}: {}", events[0].message);
    assert!(!kinds(&engine, id).await.contains(&EventKind::Claimed), "{kind}: no claim: {events:?}");
    engine.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn sqlite_started_at_once_after_the_commit() {
    started_at_once_after_the_commit("sqlite").await;
}

#[tokio::test]
async fn postgres_started_at_once_after_the_commit() {
    started_at_once_after_the_commit("postgres").await;
}

async fn dropped_after_the_commit_gives_the_lease_up(kind: &str) {
    let db = TestDb::open(kind).await;
    let engine = engine(&db, "leased").await;
    let (tx, submitted) = submit(&engine, "probe/1").await;
    let id = submitted.run().id;
    tx.commit().await.unwrap();
    drop(submitted);

    let run = engine.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Succeeded, "{kind}: {run:?}");
    assert!(kinds(&engine, id).await.contains(&EventKind::Claimed), "{kind}: taken by a claim");
    engine.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn sqlite_dropped_after_the_commit_gives_the_lease_up() {
    dropped_after_the_commit_gives_the_lease_up("sqlite").await;
}

#[tokio::test]
async fn postgres_dropped_after_the_commit_gives_the_lease_up() {
    dropped_after_the_commit_gives_the_lease_up("postgres").await;
}

async fn rolled_back_leaves_nothing(kind: &str) {
    let db = TestDb::open(kind).await;
    let engine = engine(&db, "leased").await;
    let (tx, submitted) = submit(&engine, "probe/1").await;
    let id = submitted.run().id;
    drop(tx);
    drop(submitted);

    // A run submitted next runs; the first never existed.
    let (tx, next) = submit(&engine, "probe/2").await;
    let next_id = next.run().id;
    tx.commit().await.unwrap();
    next.start();
    assert_eq!(engine.wait(next_id, WAIT).await.unwrap().status, RunStatus::Succeeded, "{kind}");
    assert!(engine.run(id).await.is_err(), "{kind}: the rolled-back run exists");
    engine.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn sqlite_rolled_back_leaves_nothing() {
    rolled_back_leaves_nothing("sqlite").await;
}

#[tokio::test]
async fn postgres_rolled_back_leaves_nothing() {
    rolled_back_leaves_nothing("postgres").await;
}
