//! A step that panics fails its attempt like an error would: it is retried, and the run goes on,
//! instead of the driver dying with the run still leased.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anycloud_engine::{Registry, RetryPolicy, RunStatus, Step, StepCtx, StepError, StepKey, Steps, Workflow};
use support::{TestDb, WAIT, start};

struct Panicky {
    calls: AtomicU32,
}

const PANICS_ONCE: StepKey<u32> = StepKey::new("panics_once");

impl Workflow for Panicky {
    const KIND: &'static str = "test.panicky";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = u32;

    fn steps() -> Steps<Self> {
        let quick = RetryPolicy {
            initial_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(10),
            ..RetryPolicy::default()
        };
        Steps::new().then(Step::action(PANICS_ONCE, panics_once).retry(quick))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<u32, StepError> {
        ctx.output(PANICS_ONCE)
    }
}

async fn panics_once(ctx: StepCtx<Panicky>) -> Result<u32, StepError> {
    let call = ctx.workflow().calls.fetch_add(1, Ordering::SeqCst) + 1;
    assert!(call > 1, "the first call panics");
    Ok(call)
}

#[tokio::test]
async fn a_panicking_step_fails_its_attempt_and_is_retried() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let workflow = Arc::new(Panicky { calls: AtomicU32::new(0) });
    let engine = start(&store, Registry::new().with(workflow.clone()), "panics").await;
    let id = engine.submit::<Panicky>(&(), None).await.unwrap();
    let output = engine.wait_output::<Panicky>(id, WAIT).await.unwrap().unwrap();
    assert_eq!(output, 2);
    let detail = engine.inspect(id).await.unwrap();
    assert_eq!(detail.run.status, RunStatus::Succeeded);
    assert_eq!(detail.steps[0].attempts, 2);
    let events = engine.events(id, 0).await.unwrap();
    assert!(
        events
            .iter()
            .any(|event| event.kind == "step-failed" && event.message.contains("panicked: the first call panics")),
        "{events:?}"
    );
    engine.shutdown(WAIT).await;
}
