//! Helpers that prove a workflow is safe to run on the engine, for its author's tests:
//!
//! - [`actions_succeed_idempotently`] runs every step twice (as a crash between a step's side
//!   effect and its checkpoint would) and requires the run to still succeed;
//! - [`action_failure_can_unwind`] fails each step in turn and requires the undos (each run
//!   twice) to leave the world as it was, as the author's `check_clean` sees it;
//! - [`cancel_in_flight_can_unwind`] lets each step do its work, then acts as if a cancel
//!   arrived while it ran and the process died before its checkpoint: the step's undo, told
//!   that its effect is unknown, must clean up after it as well as after the completed steps;
//! - [`run_to_end`] runs a workflow once with no fault, as a test's own setup between its checks;
//! - [`postgres_url`] names the PostgreSQL server the tests and benchmarks use.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::config::{EngineConfig, Faults};
use crate::definition::Workflow;
use crate::engine::Engine;
use crate::error::error_chain;
use crate::registry::Registry;
use crate::status::RunStatus;
use crate::store::Store;

/// The PostgreSQL server of the tests and benchmarks: `ANYCLOUD_TEST_DATABASE_URL`, or the local
/// server `scripts/lib/postgres.sh` ensures.
pub fn postgres_url() -> String {
    std::env::var("ANYCLOUD_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// How long a helper waits for one run.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `input` through `workflow` with every action executed twice in a row, the first
/// output thrown away. Returns the output, or why the run did not succeed.
pub async fn actions_succeed_idempotently<W: Workflow>(
    store: &Store,
    workflow: Arc<W>,
    input: &W::Input,
) -> Result<W::Output, String> {
    let faults = Faults { run_steps_twice: true, ..Faults::default() };
    let engine = engine_with(store, workflow, faults).await?;
    let id = engine.submit::<W>(input, None).await.map_err(|err| error_chain(&err))?;
    let result = engine.wait_output::<W>(id, RUN_TIMEOUT).await.map_err(|err| error_chain(&err));
    engine.shutdown(Duration::from_secs(5)).await;
    match result? {
        Ok(output) => Ok(output),
        Err(run) => Err(format!(
            "{} with every step run twice ended {}: {}",
            W::KIND,
            run.status,
            run.status_reason.unwrap_or_default()
        )),
    }
}

/// For each step of `W` in turn: fails that step, lets the run unwind (every undo runs twice),
/// requires it to end `failed`, then asks `check_clean(step)` whether the world is as before.
pub async fn action_failure_can_unwind<W, F, Fut>(
    store: &Store,
    workflow: Arc<W>,
    input: &W::Input,
    check_clean: F,
) -> Result<(), String>
where
    W: Workflow,
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let failing = |step: &str| Faults { fail_step: Some(step.to_owned()), ..Faults::default() };
    at_every_step(store, workflow, input, failing, (RunStatus::Failed, "failing at step"), check_clean).await
}

/// For each step of `W` in turn: lets the step do its work, then loses its output as a crash
/// before the checkpoint would while a cancel is requested; requires the run to end `cancelled`,
/// then asks `check_clean(step)` whether the world is as before. The step's own undo is the
/// only one that can remove its work (it runs with [`Effect::Unknown`](crate::Effect)).
pub async fn cancel_in_flight_can_unwind<W, F, Fut>(
    store: &Store,
    workflow: Arc<W>,
    input: &W::Input,
    check_clean: F,
) -> Result<(), String>
where
    W: Workflow,
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let cancelling = |step: &str| Faults { cancel_in_flight: Some(step.to_owned()), ..Faults::default() };
    let expected = (RunStatus::Cancelled, "cancelled while running step");
    at_every_step(store, workflow, input, cancelling, expected, check_clean).await
}

/// For each step of `W` in turn: runs `input` with the faults `at(step)` (and every undo run
/// twice), requires the run to end as `expected` says (its status, and how to say what was
/// done), then asks `check_clean(step)` whether the world is as before.
async fn at_every_step<W, F, Fut>(
    store: &Store,
    workflow: Arc<W>,
    input: &W::Input,
    at: impl Fn(&str) -> Faults,
    (status, done): (RunStatus, &str),
    check_clean: F,
) -> Result<(), String>
where
    W: Workflow,
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let steps: Vec<&'static str> = W::steps().list.iter().map(|step| step.name).collect();
    for step in steps {
        let faults = Faults { run_undos_twice: true, ..at(step) };
        let engine = engine_with(store, workflow.clone(), faults).await?;
        let id = engine.submit::<W>(input, None).await.map_err(|err| error_chain(&err))?;
        let run = engine.wait(id, RUN_TIMEOUT).await.map_err(|err| format!("{done} `{step}`: {}", error_chain(&err)));
        engine.shutdown(Duration::from_secs(5)).await;
        let run = run?;
        if run.status != status {
            return Err(format!(
                "{} {done} `{step}` ended {} instead of {status}: {}",
                W::KIND,
                run.status,
                run.status_reason.unwrap_or_default()
            ));
        }
        check_clean(step)
            .await
            .map_err(|dirt| format!("{} {done} `{step}` left the world unclean: {dirt}", W::KIND))?;
    }
    Ok(())
}

/// Runs `input` through `workflow` once with no fault; `Err` unless the run succeeds within
/// `timeout`. What a test runs between its checks: the world made again for the next step.
pub async fn run_to_end<W: Workflow>(
    store: &Store,
    workflow: Arc<W>,
    input: &W::Input,
    timeout: Duration,
) -> Result<(), String> {
    let engine = engine_with(store, workflow, Faults::default()).await?;
    let id = engine.submit::<W>(input, None).await.map_err(|err| error_chain(&err))?;
    let run = engine.wait(id, timeout).await;
    engine.shutdown(Duration::from_secs(5)).await;
    let run = run.map_err(|err| format!("{} did not end: {}", W::KIND, error_chain(&err)))?;
    if run.status != RunStatus::Succeeded {
        return Err(format!("{} ended {}: {}", W::KIND, run.status, run.status_reason.unwrap_or_default()));
    }
    Ok(())
}

async fn engine_with<W: Workflow>(store: &Store, workflow: Arc<W>, faults: Faults) -> Result<Engine, String> {
    let config = EngineConfig {
        poll_interval: Duration::from_millis(20),
        faults,
        ..EngineConfig::named(format!("test-harness-{}", Uuid::new_v4().simple()))
    };
    Engine::start(store.clone(), Registry::new().with(workflow), config).await.map_err(|err| error_chain(&err))
}
