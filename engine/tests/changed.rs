//! `Engine::changed`: a change reported under a run's resource key makes its waiting poll check
//! now rather than at its planned time (ten minutes away here), and a change reported while a
//! check runs makes the next check come at once. On SQLite and on PostgreSQL.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anycloud_engine::{Check, Engine, Registry, RunStatus, Step, StepCtx, StepError, Steps, Workflow};
use support::{TestDb, start, until_status};
use tokio::sync::Notify;

/// One poll, checked every ten minutes, ready once `ready` is set. With `hold` set, a check
/// reads `ready`, says so on `entered`, and returns only after `release`.
#[derive(Default)]
struct Watched {
    ready: AtomicBool,
    hold: AtomicBool,
    entered: Notify,
    release: Notify,
}

impl Workflow for Watched {
    const KIND: &'static str = "watched";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new().then(
            Step::poll("wait_for_thing", |ctx: StepCtx<Self>| async move {
                let watched = ctx.workflow();
                let ready = watched.ready.load(Ordering::SeqCst);
                if watched.hold.swap(false, Ordering::SeqCst) {
                    watched.entered.notify_one();
                    watched.release.notified().await;
                }
                Ok(if ready { Check::Ready(()) } else { Check::NotYet("the thing is not there".into()) })
            })
            .every(Duration::from_secs(600))
            .timeout(Duration::from_secs(3600)),
        )
    }

    fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

const KEY: &str = "thing:1";

async fn engine(db: &TestDb, watched: &Arc<Watched>) -> Engine {
    let store = db.store().await;
    start(&store, Registry::new().with(watched.clone()), &format!("changed-{}", db.kind)).await
}

#[tokio::test]
async fn a_change_makes_a_waiting_poll_check_now() {
    for kind in ["sqlite", "postgres"] {
        let db = TestDb::open(kind).await;
        let watched = Arc::new(Watched::default());
        let engine = engine(&db, &watched).await;
        let id = engine.submit::<Watched>(&(), Some(KEY)).await.unwrap();
        until_status(&engine, id, RunStatus::Waiting).await;
        let planned = engine.run(id).await.unwrap().next_at;

        // A change under another key moves nothing.
        assert_eq!(engine.changed("thing:2").await.unwrap(), 0, "{kind}");
        let run = engine.run(id).await.unwrap();
        assert_eq!((run.status, run.next_at), (RunStatus::Waiting, planned), "{kind}");

        watched.ready.store(true, Ordering::SeqCst);
        assert_eq!(engine.changed(KEY).await.unwrap(), 1, "{kind}: the waiting run is made due");
        until_status(&engine, id, RunStatus::Succeeded).await;
        let timeline = engine.events(id, 0).await.unwrap();
        let kinds: Vec<&str> = timeline.iter().map(|event| event.kind.as_str()).collect();
        assert!(!kinds.iter().any(|kind| kind.contains("retry") || kind.contains("signal")), "{kind}: {kinds:?}");
        // Nothing is left to make due.
        assert_eq!(engine.changed(KEY).await.unwrap(), 0, "{kind}");
        engine.shutdown(Duration::from_secs(5)).await;
    }
}

#[tokio::test]
async fn changes_under_many_keys_make_their_runs_due_at_once() {
    for kind in ["sqlite", "postgres"] {
        let db = TestDb::open(kind).await;
        let watched = Arc::new(Watched::default());
        let engine = engine(&db, &watched).await;
        let keys = ["thing:1", "thing:'2'", "thing:3"];
        let mut runs = Vec::new();
        for key in keys {
            let id = engine.submit::<Watched>(&(), Some(key)).await.unwrap();
            until_status(&engine, id, RunStatus::Waiting).await;
            runs.push(id);
        }
        let planned = engine.run(runs[2]).await.unwrap().next_at;

        // Two of the three keys, a key with no run, and one of them twice: each waiting run
        // once, and the third run keeps its planned check.
        watched.ready.store(true, Ordering::SeqCst);
        let changed = engine.changed_all(&[keys[0], "thing:none", keys[1], keys[0]]).await.unwrap();
        assert_eq!(changed, 2, "{kind}: the waiting runs of the keys reported");
        until_status(&engine, runs[0], RunStatus::Succeeded).await;
        until_status(&engine, runs[1], RunStatus::Succeeded).await;
        let third = engine.run(runs[2]).await.unwrap();
        assert_eq!((third.status, third.next_at), (RunStatus::Waiting, planned), "{kind}: a key not reported");
        assert_eq!(engine.changed_all(&[]).await.unwrap(), 0, "{kind}: no keys, nothing made due");
        engine.shutdown(Duration::from_secs(5)).await;
    }
}

#[tokio::test]
async fn a_change_during_a_check_brings_the_next_check_now() {
    for kind in ["sqlite", "postgres"] {
        let db = TestDb::open(kind).await;
        let watched = Arc::new(Watched { hold: AtomicBool::new(true), ..Watched::default() });
        let engine = engine(&db, &watched).await;
        let id = engine.submit::<Watched>(&(), Some(KEY)).await.unwrap();
        // The first check has read `ready` (false) and is held: the change comes now.
        watched.entered.notified().await;
        watched.ready.store(true, Ordering::SeqCst);
        assert_eq!(engine.changed(KEY).await.unwrap(), 0, "{kind}: no run waits; the one in a check is told");
        watched.release.notify_one();
        // Without the change, the next check would come in ten minutes.
        until_status(&engine, id, RunStatus::Succeeded).await;
        engine.shutdown(Duration::from_secs(5)).await;
    }
}
