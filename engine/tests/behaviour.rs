//! The engine's behaviour, one suite run on SQLite and on PostgreSQL.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use anycloud_engine::{Registry, RunFilter, RunStatus};
use support::{Hold, Journal, Nap, Probe, ProbeInput, ProbeOutput, TestDb, WAIT, start, until_status};

type Unwinds = Probe<false>;
type Parks = Probe<true>;

async fn happy_path(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let engine = start(&store, Registry::new().with(Unwinds::new(journal.clone())), "happy").await;
    let id = engine.submit::<Unwinds>(&ProbeInput::default(), None).await.unwrap();
    let output: ProbeOutput = engine.wait_output::<Unwinds>(id, WAIT).await.unwrap().unwrap();
    assert_eq!(output.reserved, format!("r-{}", id.simple()));
    assert_eq!(output.flaky_attempts, 1);
    let flaky = journal.entries().iter().filter(|e| e.starts_with("flaky")).count();
    assert_eq!(flaky, 1);
    let detail = engine.inspect(id).await.unwrap();
    assert_eq!(detail.run.status, RunStatus::Succeeded);
    let names: Vec<_> = detail.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["reserve", "flaky", "gate", "finish"]);
    assert!(detail.steps.iter().all(|s| s.status == "succeeded" && s.attempts == 1));
    assert_eq!(detail.plan.unwrap(), ["reserve", "flaky", "gate", "finish"]);
    let events: Vec<_> = engine.events(id, 0).await.unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(events.first().unwrap(), "submitted");
    assert_eq!(events.last().unwrap(), "succeeded");
    assert_eq!(events.iter().filter(|k| *k == "step-succeeded").count(), 4);
    // The idempotency keys are stable per step and differ between steps.
    assert_ne!(output.keys[0], output.keys[1]);
    engine.shutdown(WAIT).await;
}

async fn retry_then_success(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let engine = start(&store, Registry::new().with(Unwinds::new(journal.clone())), "retry").await;
    let id = engine.submit::<Unwinds>(&ProbeInput { flaky_failures: 2, ..Default::default() }, None).await.unwrap();
    let output = engine.wait_output::<Unwinds>(id, WAIT).await.unwrap().unwrap();
    assert_eq!(output.flaky_attempts, 3);
    // Every attempt saw the same idempotency key.
    let keys: std::collections::BTreeSet<_> = journal
        .entries()
        .into_iter()
        .filter(|e| e.starts_with("flaky"))
        .map(|e| e.split(" key ").nth(1).unwrap().to_owned())
        .collect();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys.into_iter().next().unwrap(), output.keys[0].to_string());
    let detail = engine.inspect(id).await.unwrap();
    let flaky = detail.steps.iter().find(|s| s.name == "flaky").unwrap();
    assert_eq!(flaky.attempts, 3);
    assert_eq!(flaky.error.as_ref().unwrap().chain, ["calling the probe API", "connection reset by peer"]);
    let failures = engine.events(id, 0).await.unwrap().into_iter().filter(|e| e.kind == "step-failed").count();
    assert_eq!(failures, 2);
    engine.shutdown(WAIT).await;
}

async fn exhausted_retries_unwind_or_park(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let registry = Registry::new().with(Unwinds::new(journal.clone())).with(Parks::new(journal.clone()));
    let engine = start(&store, registry, "exhaust").await;
    let input = ProbeInput { flaky_failures: 10, ..Default::default() };

    let unwinds = engine.submit::<Unwinds>(&input, None).await.unwrap();
    let run = engine.wait(unwinds, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.as_ref().unwrap().chain, ["calling the probe API", "connection reset by peer"]);
    assert!(run.status_reason.as_ref().unwrap().contains("step `flaky` failed"), "{:?}", run.status_reason);

    let parks = engine.submit::<Parks>(&input, None).await.unwrap();
    until_status(&engine, parks, RunStatus::NeedsAttention).await;
    let run = engine.run(parks).await.unwrap();
    assert_eq!(run.attempt, 3);
    assert_eq!(run.current_step.as_deref(), Some("flaky"));
    assert!(run.next_at.is_none());
    assert!(run.status_reason.as_ref().unwrap().contains("ran out of retries after 3 attempts"));
    assert_eq!(run.error.as_ref().unwrap().chain.len(), 2);
    // It stays parked: nothing retries it silently.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(engine.run(parks).await.unwrap().status, RunStatus::NeedsAttention);
    // `retry` grants one more attempt (attempt 14 fails too), `resume` a fresh budget.
    assert_eq!(engine.retry(parks).await.unwrap(), RunStatus::Running);
    until_status(&engine, parks, RunStatus::NeedsAttention).await;
    assert_eq!(engine.run(parks).await.unwrap().attempt, 4);
    engine.resume(parks).await.unwrap();
    until_status(&engine, parks, RunStatus::NeedsAttention).await;
    assert_eq!(engine.run(parks).await.unwrap().attempt, 3);
    // A cancel unwinds the parked run.
    engine.cancel(parks).await.unwrap();
    let run = engine.wait(parks, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    engine.shutdown(WAIT).await;
}

async fn terminal_failure_unwinds_in_reverse(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let engine = start(&store, Registry::new().with(Unwinds::new(journal.clone())), "terminal").await;
    let id = engine.submit::<Unwinds>(&ProbeInput { flaky_terminal: true, ..Default::default() }, None).await.unwrap();
    let run = engine.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.as_ref().unwrap().chain, ["launching the probe", "quota exceeded"]);
    let entries = journal.entries();
    // flaky failed on its first (terminal) attempt, so only reserve is undone.
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert_eq!(entries[0], "reserve");
    assert!(entries[1].starts_with("flaky attempt 1 "));
    assert_eq!(entries[2], format!("undo reserve r-{}", id.simple()));
    let steps = store.steps(id).await.unwrap();
    let statuses: Vec<_> = steps.iter().map(|s| (s.name.as_str(), s.status.as_str())).collect();
    assert_eq!(statuses, [("reserve", "succeeded"), ("flaky", "failed"), ("reserve", "undone")]);
    engine.shutdown(WAIT).await;
}

async fn undo_failure_parks_the_run(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let probe = Unwinds::new(journal.clone());
    probe.break_reserve_undo.store(true, Ordering::SeqCst);
    let engine = start(&store, Registry::new().with(probe.clone()), "undo-fails").await;
    let id = engine.submit::<Unwinds>(&ProbeInput { flaky_terminal: true, ..Default::default() }, None).await.unwrap();
    until_status(&engine, id, RunStatus::NeedsAttention).await;
    let run = engine.run(id).await.unwrap();
    let reason = run.status_reason.unwrap();
    assert!(reason.contains("the undo of step `reserve` failed after 2 attempts"), "{reason}");
    assert!(reason.contains("the reservation service is down"), "{reason}");
    assert_eq!(run.phase, anycloud_engine::Phase::Undo);
    // The operator fixes the cause and retries: unwinding finishes.
    probe.break_reserve_undo.store(false, Ordering::SeqCst);
    engine.retry(id).await.unwrap();
    let run = engine.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert!(journal.entries().last().unwrap().starts_with("undo reserve"));
    // The ended run's error is the one it turned back for, not its undo's last one.
    assert_eq!(run.error.as_ref().unwrap().chain, ["launching the probe", "quota exceeded"], "{run:?}");
    engine.shutdown(WAIT).await;
}

async fn cancel_during_a_wait(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let engine = start(&store, Registry::new().with(Unwinds::new(journal.clone())), "cancel").await;
    let id = engine.submit::<Unwinds>(&ProbeInput { wait_for_go: true, ..Default::default() }, None).await.unwrap();
    until_status(&engine, id, RunStatus::Waiting).await;
    let run = engine.run(id).await.unwrap();
    assert_eq!(run.current_step.as_deref(), Some("gate"));
    assert_eq!(run.status_reason.as_deref(), Some("waiting for signal `go`"));
    assert!(run.lease.is_none(), "a waiting run holds no lease");
    engine.cancel(id).await.unwrap();
    let run = engine.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    let undos: Vec<_> = journal.entries().into_iter().filter(|e| e.starts_with("undo")).collect();
    assert_eq!(undos, ["undo flaky".to_owned(), format!("undo reserve r-{}", id.simple())]);
    assert!(engine.cancel(id).await.is_err(), "an ended run cannot be cancelled again");
    engine.shutdown(WAIT).await;
}

async fn signal_wakes_a_waiting_run(db: TestDb) {
    let store = db.store().await;
    let engine = start(&store, Registry::new().with(Unwinds::new(Journal::default())), "signal").await;
    let id = engine.submit::<Unwinds>(&ProbeInput { wait_for_go: true, ..Default::default() }, None).await.unwrap();
    until_status(&engine, id, RunStatus::Waiting).await;
    engine.signal(id, "go", &serde_json::json!({"by": "test"})).await.unwrap();
    assert_eq!(engine.wait(id, WAIT).await.unwrap().status, RunStatus::Succeeded);
    engine.shutdown(WAIT).await;
}

async fn timers_survive_a_restart(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let engine =
        start(&store, Registry::new().with(std::sync::Arc::new(Nap::<1> { journal: journal.clone() })), "timer").await;
    let id = engine.submit::<Nap<1>>(&1_500, None).await.unwrap();
    until_status(&engine, id, RunStatus::Waiting).await;
    // A crash: the engine goes away without a word.
    drop(engine);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let engine =
        start(&store, Registry::new().with(std::sync::Arc::new(Nap::<1> { journal: journal.clone() })), "timer-2")
            .await;
    let slept = engine.wait_output::<Nap<1>>(id, WAIT).await.unwrap().unwrap();
    assert!(slept >= 1_500, "woke after {slept} ms");
    assert!(slept < 10_000, "woke after {slept} ms");
    assert_eq!(journal.entries(), ["before", "after"]);
    engine.shutdown(WAIT).await;
}

async fn resource_key_runs_one_at_a_time_in_order(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let registry = Registry::new().with(std::sync::Arc::new(Hold { journal: journal.clone() }));
    let engine = start(&store, registry, "keys").await;
    let mut ids = Vec::new();
    for name in ["a", "b", "c", "d"] {
        ids.push(engine.submit::<Hold>(&name.to_owned(), Some("cluster/one")).await.unwrap());
    }
    for id in &ids {
        assert_eq!(engine.wait(*id, WAIT).await.unwrap().status, RunStatus::Succeeded);
    }
    let entries = journal.entries();
    assert_eq!(entries, ["start a", "end a", "start b", "end b", "start c", "end c", "start d", "end d"]);
    let listed =
        engine.list(&RunFilter { resource_key: Some("cluster/one".into()), ..Default::default() }).await.unwrap();
    assert_eq!(listed.len(), 4);
    assert_eq!(listed[0].id, ids[3], "newest first");
    engine.shutdown(WAIT).await;
}

async fn unknown_version_is_parked(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let old =
        start(&store, Registry::new().with(std::sync::Arc::new(Nap::<1> { journal: journal.clone() })), "v1").await;
    let id = old.submit::<Nap<1>>(&300, None).await.unwrap();
    until_status(&old, id, RunStatus::Waiting).await;
    old.shutdown(WAIT).await;
    let new =
        start(&store, Registry::new().with(std::sync::Arc::new(Nap::<2> { journal: journal.clone() })), "v2").await;
    until_status(&new, id, RunStatus::NeedsAttention).await;
    let reason = new.run(id).await.unwrap().status_reason.unwrap();
    assert!(reason.contains("cannot run nap v1: it has only v2"), "{reason}");
    assert_eq!(journal.entries(), ["before"], "no other version's code ran");
    new.shutdown(WAIT).await;
}

async fn operator_actions_on_wrong_states_change_nothing(db: TestDb) {
    let store = db.store().await;
    let engine = start(&store, Registry::new().with(Unwinds::new(Journal::default())), "ops").await;
    let unknown = uuid::Uuid::new_v4();
    assert!(matches!(engine.retry(unknown).await, Err(anycloud_engine::EngineError::UnknownRun(_))));
    assert!(matches!(engine.inspect(unknown).await, Err(anycloud_engine::EngineError::UnknownRun(_))));
    let id = engine.submit::<Unwinds>(&ProbeInput::default(), None).await.unwrap();
    engine.wait(id, WAIT).await.unwrap();
    let before = engine.events(id, 0).await.unwrap().len();
    let err = engine.resume(id).await.unwrap_err().to_string();
    assert!(err.contains("is succeeded"), "{err}");
    assert_eq!(engine.events(id, 0).await.unwrap().len(), before);
    engine.shutdown(WAIT).await;
}

macro_rules! suite {
    ($store:ident) => {
        mod $store {
            use super::*;

            async fn db() -> TestDb {
                TestDb::open(stringify!($store)).await
            }

            #[tokio::test]
            async fn happy_path() {
                super::happy_path(db().await).await
            }
            #[tokio::test]
            async fn retry_then_success() {
                super::retry_then_success(db().await).await
            }
            #[tokio::test]
            async fn exhausted_retries_unwind_or_park() {
                super::exhausted_retries_unwind_or_park(db().await).await
            }
            #[tokio::test]
            async fn terminal_failure_unwinds_in_reverse() {
                super::terminal_failure_unwinds_in_reverse(db().await).await
            }
            #[tokio::test]
            async fn undo_failure_parks_the_run() {
                super::undo_failure_parks_the_run(db().await).await
            }
            #[tokio::test]
            async fn cancel_during_a_wait() {
                super::cancel_during_a_wait(db().await).await
            }
            #[tokio::test]
            async fn signal_wakes_a_waiting_run() {
                super::signal_wakes_a_waiting_run(db().await).await
            }
            #[tokio::test]
            async fn timers_survive_a_restart() {
                super::timers_survive_a_restart(db().await).await
            }
            #[tokio::test]
            async fn resource_key_runs_one_at_a_time_in_order() {
                super::resource_key_runs_one_at_a_time_in_order(db().await).await
            }
            #[tokio::test]
            async fn unknown_version_is_parked() {
                super::unknown_version_is_parked(db().await).await
            }
            #[tokio::test]
            async fn operator_actions_on_wrong_states_change_nothing() {
                super::operator_actions_on_wrong_states_change_nothing(db().await).await
            }
        }
    };
}

suite!(sqlite);
suite!(postgres);
