//! A waiting poll's timeline: repeated checks are one entry with a count, at the store (the
//! table does not grow), and a follower reading `after=N` still sees every changed condition.
//! Run on SQLite and on PostgreSQL.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anycloud_engine::{
    Check, EventRecord, OnExhausted, Registry, RunStatus, Step, StepCtx, StepError, StepShape, Steps, Store, Workflow,
};
use support::{TestDb, WAIT, start, until_status};
use uuid::Uuid;

/// prepare -> boot (a poll every 10 ms that reports `condition` until `ready`).
struct Boot {
    condition: Mutex<String>,
    ready: AtomicBool,
}

impl Boot {
    fn new() -> Arc<Self> {
        Arc::new(Self { condition: Mutex::new("0 of 2 nodes ready".into()), ready: AtomicBool::new(false) })
    }

    fn set(&self, condition: &str) {
        *self.condition.lock().unwrap() = condition.to_owned();
    }
}

impl Workflow for Boot {
    const KIND: &'static str = "boot";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new().then(Step::action("prepare", |_: StepCtx<Self>| async { Ok(()) })).then(
            Step::poll("boot", |ctx: StepCtx<Self>| async move {
                let boot = ctx.workflow();
                if boot.ready.load(Ordering::SeqCst) {
                    return Ok(Check::Ready(()));
                }
                Ok(Check::NotYet(boot.condition.lock().unwrap().clone()))
            })
            .every(Duration::from_millis(10))
            .timeout(Duration::from_secs(60)),
        )
    }

    fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

fn waiting(timeline: &[EventRecord]) -> Vec<&EventRecord> {
    timeline.iter().filter(|event| event.kind == "waiting").collect()
}

/// Rows the store holds for the run's timeline (events; step rows are not counted).
async fn event_rows(store: &Store, run: Uuid) -> i64 {
    anycloud_engine::with_pool!(store.pool(), |pool| {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM engine_events WHERE run_id = $1")
            .bind(run.to_string())
            .fetch_one(pool)
            .await
            .unwrap()
    })
}

/// Polls the timeline until `done` holds for it.
async fn until_timeline(store: &Store, run: Uuid, after: i64, what: &str, done: impl Fn(&[EventRecord]) -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let timeline = store.events(run, after).await.unwrap();
        if done(&timeline) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "waited for {what}: {timeline:#?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn repeated_checks_are_one_entry(db: TestDb) {
    let store = db.store().await;
    let boot = Boot::new();
    let engine = start(&store, Registry::new().with(boot.clone()), "timeline").await;
    let id = engine.submit::<Boot>(&(), None).await.unwrap();
    until_status(&engine, id, RunStatus::Waiting).await;
    until_timeline(&store, id, 0, "ten checks", |timeline| waiting(timeline).first().is_some_and(|w| w.count >= 10))
        .await;

    // Ten checks and more: one `waiting` entry, one `claimed` (the same process took it each
    // time), and as many rows in the table.
    let timeline = store.events(id, 0).await.unwrap();
    let kinds: Vec<&str> = timeline.iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(kinds, ["submitted", "step-succeeded", "claimed", "waiting"], "{timeline:#?}");
    let first = waiting(&timeline)[0].clone();
    assert_eq!(first.message, "0 of 2 nodes ready");
    assert_eq!(first.step.as_deref(), Some("boot"));
    let started_waiting = first.first_at.expect("a repeated entry keeps when it began");
    assert!(started_waiting < first.at, "{first:#?}");
    assert_eq!(event_rows(&store, id).await, 3, "the table grows with the checks: {timeline:#?}");

    // More checks with the same condition: the entry is updated in place, so a follower that
    // has read it sees nothing new.
    let seen = timeline.last().unwrap().seq;
    until_timeline(&store, id, 0, "more checks", |timeline| waiting(timeline)[0].count > first.count + 5).await;
    assert!(store.events(id, seen).await.unwrap().is_empty(), "an unchanged condition is not news");

    // A changed condition moves the entry after what the follower has read: it sees it, with
    // the count going on and the time it began waiting kept.
    boot.set("1 of 2 nodes ready");
    until_timeline(&store, id, seen, "the new condition", |news| {
        news.iter().any(|e| e.message == "1 of 2 nodes ready")
    })
    .await;
    let news = store.events(id, seen).await.unwrap();
    assert_eq!(news.len(), 1, "{news:#?}");
    assert_eq!((news[0].kind.as_str(), news[0].first_at), ("waiting", Some(started_waiting)), "{news:#?}");
    assert!(news[0].count > first.count, "{news:#?}");
    let timeline = store.events(id, 0).await.unwrap();
    assert_eq!(waiting(&timeline).len(), 1, "{timeline:#?}");
    assert_eq!(event_rows(&store, id).await, 3);

    // An operator's action between two checks is its own entry, and the waiting after it a new one.
    // (`retry` applies while no engine holds the run: between two checks.)
    while engine.retry(id).await.is_err() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    until_timeline(&store, id, 0, "a waiting after the retry", |timeline| {
        timeline.last().is_some_and(|e| e.kind == "waiting") && waiting(timeline).len() == 2
    })
    .await;

    boot.ready.store(true, Ordering::SeqCst);
    assert_eq!(engine.wait(id, WAIT).await.unwrap().status, RunStatus::Succeeded);
    let timeline = store.events(id, 0).await.unwrap();
    let kinds: Vec<&str> = timeline.iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "submitted",
            "step-succeeded",
            "claimed",
            "waiting",
            "retry-requested",
            "waiting",
            "step-succeeded",
            "succeeded"
        ],
        "{timeline:#?}"
    );
    assert!(timeline.windows(2).all(|pair| pair[0].seq < pair[1].seq), "{timeline:#?}");
    engine.shutdown(WAIT).await;
}

/// Another process taking a waiting run over is on the timeline, and the waiting after it moves
/// after its claim (it is still one entry for one wait).
async fn a_new_process_is_on_the_timeline(db: TestDb) {
    let store = db.store().await;
    let boot = Boot::new();
    let first = start(&store, Registry::new().with(boot.clone()), "first").await;
    let id = first.submit::<Boot>(&(), None).await.unwrap();
    until_timeline(&store, id, 0, "five checks", |timeline| waiting(timeline).first().is_some_and(|w| w.count >= 5))
        .await;
    first.shutdown(WAIT).await;
    let second = start(&store, Registry::new().with(boot.clone()), "second").await;
    until_timeline(&store, id, 0, "the second process's checks", |timeline| {
        timeline.last().is_some_and(|e| e.kind == "waiting")
            && timeline.iter().any(|e| e.kind == "claimed" && e.message.starts_with("claimed by second"))
    })
    .await;
    let timeline = store.events(id, 0).await.unwrap();
    let claims: Vec<&str> =
        timeline.iter().filter(|e| e.kind == "claimed").map(|e| e.message.split(" (pid").next().unwrap()).collect();
    assert_eq!(claims, ["claimed by first", "claimed by second"], "{timeline:#?}");
    assert_eq!(waiting(&timeline).len(), 1, "{timeline:#?}");
    boot.ready.store(true, Ordering::SeqCst);
    assert_eq!(second.wait(id, WAIT).await.unwrap().status, RunStatus::Succeeded);
    second.shutdown(WAIT).await;
}

/// `inspect` carries what `workflow inspect` needs for its deadlines: the step's limits from its
/// definition, and when the attempt in hand began.
async fn inspect_has_the_step_limits_and_the_attempt_start(db: TestDb) {
    let store = db.store().await;
    let boot = Boot::new();
    let engine = start(&store, Registry::new().with(boot.clone()), "limits").await;
    let submitted = support::now_ms();
    let id = engine.submit::<Boot>(&(), None).await.unwrap();
    until_status(&engine, id, RunStatus::Waiting).await;
    let detail = engine.inspect(id).await.unwrap();
    let limits = detail.limits.expect("the binary knows boot v1");
    assert_eq!((limits.step.as_str(), limits.shape), ("boot", StepShape::Poll));
    assert_eq!((limits.every_ms, limits.timeout_ms), (Some(10), Some(60_000)));
    assert_eq!(limits.on_exhausted, OnExhausted::Unwind);
    assert_eq!(limits.attempt_timeout_ms, anycloud_engine::DEFAULT_ATTEMPT_TIMEOUT.as_millis() as u64);
    assert!(detail.run.step_started_at.unwrap() >= submitted);

    // While a check runs, the run says when its attempt began.
    let deadline = std::time::Instant::now() + WAIT;
    let began = loop {
        let run = engine.run(id).await.unwrap();
        match (run.status, run.attempt_started_at) {
            (RunStatus::Waiting, started) => assert_eq!(started, None, "a waiting run has no attempt in hand"),
            (RunStatus::Running, Some(started)) => break started,
            (status, started) => panic!("{status} with attempt_started_at {started:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "never saw a check running");
        tokio::task::yield_now().await;
    };
    assert!(began >= submitted && began <= support::now_ms(), "{began}");
    boot.ready.store(true, Ordering::SeqCst);
    let run = engine.wait(id, WAIT).await.unwrap();
    assert_eq!((run.status, run.attempt_started_at), (RunStatus::Succeeded, None));
    assert!(engine.inspect(id).await.unwrap().limits.is_none(), "an ended run has no step in hand");
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
            async fn repeated_checks_are_one_entry() {
                super::repeated_checks_are_one_entry(db().await).await
            }
            #[tokio::test]
            async fn inspect_has_the_step_limits_and_the_attempt_start() {
                super::inspect_has_the_step_limits_and_the_attempt_start(db().await).await
            }
            #[tokio::test]
            async fn a_new_process_is_on_the_timeline() {
                super::a_new_process_is_on_the_timeline(db().await).await
            }
        }
    };
}

suite!(sqlite);
suite!(postgres);
