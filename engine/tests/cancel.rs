//! A cancel reaches a step in flight, a hung attempt meets its deadline, and a step that was cut
//! short is undone too: its effect may be there without a checkpoint. One suite, run on SQLite and
//! on PostgreSQL. Also: one live engine per owner name.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anycloud_engine::{
    Effect, Engine, EngineConfig, EngineError, Registry, RetryPolicy, RunStatus, Step, StepCtx, StepError, Steps,
    Workflow,
};
use serde::{Deserialize, Serialize};
use support::{Journal, TestDb, WAIT, config, start};

/// How a [`Hangs`] run behaves.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct HangInput {
    /// `hang` returns at once instead of hanging.
    quick: bool,
}

/// prepare -> hang -> finish. `hang` writes to the journal, then never returns unless told to;
/// every undo says whether it knew its step's output.
struct Hangs {
    journal: Journal,
}

impl Workflow for Hangs {
    const KIND: &'static str = "hangs";
    const VERSION: u32 = 1;
    type Input = HangInput;
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(
                Step::action("prepare", |ctx: StepCtx<Self>| async move {
                    ctx.workflow().journal.push("prepare");
                    Ok(())
                })
                .undo(|ctx: StepCtx<Self>, effect: Effect<()>| async move {
                    ctx.workflow().journal.push(format!("undo prepare {}", known(&effect)));
                    Ok(())
                }),
            )
            .then(
                Step::action("hang", |ctx: StepCtx<Self>| async move {
                    ctx.workflow().journal.push("hang started");
                    if !ctx.input().quick {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    Ok(())
                })
                .undo(|ctx: StepCtx<Self>, effect: Effect<()>| async move {
                    ctx.workflow().journal.push(format!("undo hang {}", known(&effect)));
                    Ok(())
                }),
            )
            .then(Step::action("finish", |_ctx: StepCtx<Self>| async move { Ok(()) }))
    }

    fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

fn known<T>(effect: &Effect<T>) -> &'static str {
    match effect {
        Effect::Done(_) => "done",
        Effect::Unknown => "unknown",
    }
}

fn hangs(journal: &Journal) -> Arc<Hangs> {
    Arc::new(Hangs { journal: journal.clone() })
}

/// Waits until the journal has `entry`.
async fn until_journal(journal: &Journal, entry: &str) {
    let deadline = Instant::now() + WAIT;
    while !journal.entries().iter().any(|e| e == entry) {
        assert!(Instant::now() < deadline, "the journal never had `{entry}`: {:?}", journal.entries());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn a_cancel_stops_the_step_in_flight_and_undoes_it(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let engine = start(&store, Registry::new().with(hangs(&journal)), "cancel-in-flight").await;
    let id = engine.submit::<Hangs>(&HangInput::default(), None).await.unwrap();
    until_journal(&journal, "hang started").await;
    let asked = Instant::now();
    engine.cancel(id).await.unwrap();
    let run = engine.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled, "{run:?}");
    assert!(asked.elapsed() < Duration::from_secs(5), "the cancel took {:?} to reach the step", asked.elapsed());
    assert_eq!(journal.entries(), ["prepare", "hang started", "undo hang unknown", "undo prepare done"]);
    let timeline = engine.events(id, 0).await.unwrap();
    let unwinding = timeline.iter().find(|e| e.kind == "unwinding").unwrap();
    assert!(unwinding.message.contains("while step `hang` ran; it was stopped"), "{}", unwinding.message);
    assert!(unwinding.message.contains("undoing step `hang` first"), "{}", unwinding.message);
    engine.shutdown(WAIT).await;
}

/// The engine driving the run does not hear of the cancel (its heartbeat is off) and dies before
/// the step's checkpoint; the next incarnation must undo the step that was cut short too.
async fn a_cancel_then_a_crash_undoes_the_step_that_was_cut_short(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let deaf = EngineConfig { heartbeats: false, ..config("crashes") };
    let doomed = Engine::start(store.clone(), Registry::new().with(hangs(&journal)), deaf).await.unwrap();
    let id = doomed.submit::<Hangs>(&HangInput::default(), None).await.unwrap();
    until_journal(&journal, "hang started").await;
    // The operator's cancel goes through another engine (another API replica, say).
    let operator = start(&store, Registry::new().with(hangs(&journal)), "operator").await;
    operator.cancel(id).await.unwrap();
    operator.shutdown(WAIT).await;
    drop(doomed); // a crash: the step's checkpoint never comes

    let restarted = start(&store, Registry::new().with(hangs(&journal)), "crashes").await;
    let run = restarted.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled, "{run:?}");
    assert_eq!(journal.entries(), ["prepare", "hang started", "undo hang unknown", "undo prepare done"]);
    let timeline = restarted.events(id, 0).await.unwrap();
    let recovered = timeline.iter().find(|e| e.kind == "recovered").unwrap();
    assert!(recovered.message.contains("attempt 1 of step `hang` ended without a checkpoint"), "{}", recovered.message);
    assert!(timeline.iter().all(|e| !e.message.contains("runs again")), "{timeline:#?}");
    let unwinding = timeline.iter().find(|e| e.kind == "unwinding").unwrap();
    assert!(unwinding.message.contains("undoing step `hang` first"), "{}", unwinding.message);
    restarted.shutdown(WAIT).await;
}

/// A cancel sent through another engine reaches the step at the driver's next heartbeat.
async fn a_cancel_through_another_engine_reaches_the_step(db: TestDb) {
    let store = db.store().await;
    let journal = Journal::default();
    let quick_heartbeat = EngineConfig { lease_ttl: Duration::from_millis(600), ..config("driver") };
    let driver = Engine::start(store.clone(), Registry::new().with(hangs(&journal)), quick_heartbeat).await.unwrap();
    let id = driver.submit::<Hangs>(&HangInput::default(), None).await.unwrap();
    until_journal(&journal, "hang started").await;
    let operator = start(&store, Registry::new().with(hangs(&journal)), "other-replica").await;
    operator.cancel(id).await.unwrap();
    let run = driver.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled, "{run:?}");
    assert!(journal.entries().contains(&"undo hang unknown".to_owned()), "{:?}", journal.entries());
    operator.shutdown(WAIT).await;
    driver.shutdown(WAIT).await;
}

/// Each attempt of `hang` meets a 150 ms deadline; when retries run out the run turns back and
/// `hang`, whose attempts were stopped mid-way, is undone with its effect unknown.
async fn a_hung_attempt_meets_its_deadline(db: TestDb) {
    struct Deadline(Journal);
    impl Workflow for Deadline {
        const KIND: &'static str = "hangs.deadline";
        const VERSION: u32 = 1;
        type Input = HangInput;
        type Output = ();
        fn steps() -> Steps<Self> {
            Steps::new().then(
                Step::action("hang", |ctx: StepCtx<Self>| async move {
                    ctx.workflow().0.push("hang started");
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(())
                })
                .attempt_timeout(Duration::from_millis(150))
                .retry(RetryPolicy::fixed(Duration::from_millis(10), 2))
                .undo(|ctx: StepCtx<Self>, effect: Effect<()>| async move {
                    ctx.workflow().0.push(format!("undo hang {}", known(&effect)));
                    Ok(())
                }),
            )
        }
        fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
            Ok(())
        }
    }
    let store = db.store().await;
    let journal = Journal::default();
    let workflow = Arc::new(Deadline(journal.clone()));
    let engine = start(&store, Registry::new().with(workflow), "deadline").await;
    let id = engine.submit::<Deadline>(&HangInput::default(), None).await.unwrap();
    let run = engine.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    let error = run.error.unwrap();
    assert!(error.is_interrupted(), "{error:?}");
    assert!(error.to_string().contains("did not finish within 150 ms"), "{error}");
    assert_eq!(journal.entries(), ["hang started", "hang started", "undo hang unknown"]);
    let failures = engine.events(id, 0).await.unwrap().into_iter().filter(|e| e.kind == "step-failed").count();
    assert_eq!(failures, 2, "one retry, then the final failure");
    engine.shutdown(WAIT).await;
}

/// A run that never started: with an undo on its first step, the cancel waits for its turn and
/// runs that undo (a record it must mark); without one, it ends at once.
async fn a_cancel_before_the_first_step(db: TestDb) {
    struct Plain;
    impl Workflow for Plain {
        const KIND: &'static str = "plain";
        const VERSION: u32 = 1;
        type Input = ();
        type Output = ();
        fn steps() -> Steps<Self> {
            Steps::new().then(Step::action("only", |_ctx: StepCtx<Self>| async move { Ok(()) }))
        }
        fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
            Ok(())
        }
    }
    let store = db.store().await;
    let journal = Journal::default();
    let engine = start(&store, Registry::new().with(hangs(&journal)).with(Arc::new(Plain)), "unstarted").await;
    let holder = engine.submit::<Hangs>(&HangInput::default(), Some("thing/a")).await.unwrap();
    until_journal(&journal, "hang started").await;
    let queued = engine.submit::<Hangs>(&HangInput { quick: true }, Some("thing/a")).await.unwrap();
    let plain = engine.submit::<Plain>(&(), Some("thing/a")).await.unwrap();
    assert_eq!(engine.cancel(plain).await.unwrap(), RunStatus::Cancelled, "nothing to undo: it ends at once");
    assert_eq!(engine.cancel(queued).await.unwrap(), RunStatus::Pending, "it waits for its turn");
    assert_eq!(engine.run(queued).await.unwrap().status, RunStatus::Pending);
    engine.cancel(holder).await.unwrap();
    let run = engine.wait(queued, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled, "{run:?}");
    let entries = journal.entries();
    assert_eq!(entries.iter().filter(|e| *e == "prepare").count(), 1, "the queued run ran no step: {entries:?}");
    assert_eq!(entries.last().unwrap(), "undo prepare unknown", "{entries:?}");
    engine.shutdown(WAIT).await;
}

/// A cancel recorded through another engine while the last step runs, its driver deaf to it (no
/// heartbeat), and the step then completes: the run turns back and ends `cancelled`, the last step
/// undone with its output, instead of succeeding with the cancel accepted and dropped (what the
/// crash matrix once saw of a `cluster.create` cancelled as `mark_ready` ended).
async fn a_cancel_as_the_last_step_ends_turns_the_run_back(db: TestDb) {
    struct Last {
        journal: Journal,
        release: Arc<tokio::sync::Notify>,
    }
    impl Workflow for Last {
        const KIND: &'static str = "last";
        const VERSION: u32 = 1;
        type Input = ();
        type Output = ();
        fn steps() -> Steps<Self> {
            Steps::new()
                .then(
                    Step::action("prepare", |ctx: StepCtx<Self>| async move {
                        ctx.workflow().journal.push("prepare");
                        Ok(())
                    })
                    .undo(|ctx: StepCtx<Self>, effect: Effect<()>| async move {
                        ctx.workflow().journal.push(format!("undo prepare {}", known(&effect)));
                        Ok(())
                    }),
                )
                .then(
                    Step::action("last", |ctx: StepCtx<Self>| async move {
                        ctx.workflow().journal.push("last started");
                        ctx.workflow().release.notified().await;
                        Ok(())
                    })
                    .undo(|ctx: StepCtx<Self>, effect: Effect<()>| async move {
                        ctx.workflow().journal.push(format!("undo last {}", known(&effect)));
                        Ok(())
                    }),
                )
        }
        fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
            Ok(())
        }
    }
    let store = db.store().await;
    let journal = Journal::default();
    let release = Arc::new(tokio::sync::Notify::new());
    let last = || Arc::new(Last { journal: journal.clone(), release: release.clone() });
    let deaf = EngineConfig { heartbeats: false, ..config("last-driver") };
    let driver = Engine::start(store.clone(), Registry::new().with(last()), deaf).await.unwrap();
    let id = driver.submit::<Last>(&(), None).await.unwrap();
    until_journal(&journal, "last started").await;
    let operator = start(&store, Registry::new().with(last()), "last-operator").await;
    assert_eq!(operator.cancel(id).await.unwrap(), RunStatus::Running);
    release.notify_one();
    let run = driver.wait(id, WAIT).await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled, "the accepted cancel was dropped: {run:?}");
    assert_eq!(journal.entries(), ["prepare", "last started", "undo last done", "undo prepare done"]);
    // The last step's checkpoint found the cancel inside its own statement: the step is in the
    // timeline, `succeeded` is not, and the positions run on without a gap or a repeat.
    let timeline = driver.events(id, 0).await.unwrap();
    let kinds: Vec<&str> = timeline.iter().map(|event| event.kind.as_str()).collect();
    assert!(!kinds.contains(&"succeeded"), "{kinds:?}");
    let last = timeline
        .iter()
        .position(|event| event.kind.as_str() == "step-succeeded" && event.step.as_deref() == Some("last"));
    let cancelled = kinds.iter().position(|kind| *kind == "cancelled");
    assert!(last.is_some() && last < cancelled, "{kinds:?}");
    let positions: Vec<i64> = timeline.iter().map(|event| event.seq).collect();
    assert_eq!(positions, (1..=timeline.len() as i64).collect::<Vec<_>>(), "{kinds:?}");
    // Once it has ended, a cancel is refused.
    assert!(matches!(operator.cancel(id).await, Err(EngineError::InvalidState { .. })));
    operator.shutdown(WAIT).await;
    driver.shutdown(WAIT).await;
}

/// Two engines can never hold one owner name at once; the name is free again once its holder
/// stops (here: is dropped, as a crash drops it).
async fn an_owner_name_has_one_live_holder(db: TestDb) {
    let store = db.store().await;
    let first = start(&store, Registry::new(), "only-one").await;
    let second_store = db.store().await;
    let refused = Engine::start(second_store.clone(), Registry::new(), config("only-one")).await;
    match refused {
        Err(EngineError::OwnerInUse(owner)) => assert_eq!(owner, "only-one"),
        Err(other) => panic!("expected OwnerInUse, got {other}"),
        Ok(_) => panic!("a second engine started under a held owner name"),
    }
    drop(first);
    let again = Engine::start(second_store, Registry::new(), config("only-one")).await.unwrap();
    again.shutdown(WAIT).await;
}

macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::TestDb::sqlite().await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::TestDb::postgres().await).await
                }
            )*
        }
    };
}

on_both_stores!(
    a_cancel_stops_the_step_in_flight_and_undoes_it,
    a_cancel_then_a_crash_undoes_the_step_that_was_cut_short,
    a_cancel_through_another_engine_reaches_the_step,
    a_hung_attempt_meets_its_deadline,
    a_cancel_before_the_first_step,
    a_cancel_as_the_last_step_ends_turns_the_run_back,
    an_owner_name_has_one_live_holder,
);
