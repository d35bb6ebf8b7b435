//! Drives one claimed run: runs its steps (or undos) one after another until the run waits,
//! parks, ends or is taken over.
//!
//! Every attempt ends in one [`Transition`], and [`Driver::apply`] is the one place that turns
//! a transition into the run's new state and commits it, with the lease generation the run was
//! claimed under:
//!
//! ```text
//!   forward step ──> Advance | Succeed | Wait | Retry | Park | Unwind ──┐
//!   undo         ──> Undone  | Unwound | Retry | Park ───────────────────┼──> apply ──> commit
//!   cancel       ──> Unwind ─────────────────────────────────────────────┘
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tracing::{Instrument, debug, info, warn};

use crate::clock::{after, now_ms, since};
use crate::definition::Check;
use crate::engine_state::Inner;
use crate::error::{StepError, error_chain};
use crate::registry::{Instance, Shape};
use crate::retry::{OnExhausted, RetryPolicy};
use crate::status::{Phase, RunStatus};
use crate::store::{Claimed, Commit, CommitOutcome, CommitShape, Millis, NewEvent, RunRecord, StepRecord};
use crate::timeline::{self, EventKind, StepStatus, humanize};

/// What an attempt (or a cancel) changes in a run.
enum Transition {
    /// A forward step other than the last completed; the next one starts.
    Advance { step: StepRecord, next: &'static str },
    /// The last step completed (its record, unless there was none left to run) and the
    /// workflow built its output.
    Succeed { step: Option<StepRecord>, output: Value },
    /// A poll or sleep is not done: the run waits as a row until `next_at`.
    Wait { next_at: Millis, reason: String },
    /// The attempt (of a step, or of an undo) failed; the next one comes after `delay`.
    Retry { error: StepError, delay: Duration },
    /// The run stops for an operator; `error` is the failed attempt's, if one failed.
    Park { reason: String, error: Option<StepError> },
    /// The run turns back: the completed steps are undone in reverse order, and first the step
    /// in hand, when it may have had an effect without a checkpoint.
    Unwind(Unwind),
    /// An undo completed.
    Undone { step: StepRecord },
    /// Nothing is left to undo: the run ends `failed`, or `cancelled` if that was asked.
    Unwound,
}

/// What to do after a commit.
enum Next {
    /// Keep driving the run.
    Continue,
    /// The run waits, is parked, or was taken over: stop driving it.
    Stop,
    /// The run has ended (succeeded, failed or cancelled), and that is committed.
    Ended,
}

/// How an attempt of a step ended.
enum Attempt {
    /// The step returned (or its deadline stopped it, as an interrupted error).
    Returned(Result<Check<Value>, StepError>),
    /// A cancel reached the step in flight and it was stopped.
    Cancelled,
}

/// Drives a claimed run until it waits, parks, ends or is taken over; returns the run as
/// committed if it ended here. `cancel` turns true when an operator cancels the run; `changed`
/// when something the run polls for may have changed ([`crate::Engine::changed`]).
pub(crate) async fn drive(
    inner: &Inner,
    claimed: Claimed,
    cancel: watch::Receiver<bool>,
    changed: &AtomicBool,
) -> Option<RunRecord> {
    let Claimed { mut run, outputs, recovered } = claimed;
    let instance = match prepare(inner, &run, &outputs) {
        Ok(instance) => instance,
        Err(reason) => {
            warn!(reason = %reason, "parking the run");
            let parked = Transition::Park { reason, error: None };
            if let Err(err) = apply(inner, &mut run, parked).await {
                warn!(error = %error_chain(&err), "could not park the run");
            }
            return None;
        }
    };
    let mut driver = Driver { inner, instance, recovered, cancel, changed };
    loop {
        if inner.stopping() {
            if let Err(err) = inner.store.release(&run, &inner.config.owner).await {
                warn!(error = %error_chain(&err), "could not release the run on shutdown; its lease will lapse");
            }
            return None;
        }
        let transition = match run.phase {
            Phase::Forward if run.cancel_requested => driver.turn_back_for_cancel(&run, false),
            Phase::Forward => driver.forward(&mut run).await,
            Phase::Undo => driver.undo(&mut run).await,
        };
        match driver.apply(&mut run, transition).await {
            Ok(Next::Continue) => {}
            Ok(Next::Stop) => return None,
            Ok(Next::Ended) => return Some(run),
            Err(err) => {
                // The database failed for as long as the lease lasts (or in a way that trying
                // again does not mend): stop; the lease lapses and the run is claimed again.
                warn!(error = %error_chain(&err), "committing the run's progress failed; it will be retried");
                return None;
            }
        }
    }
}

/// Finds the run's definition and decodes its input and checkpoints, or says why it cannot.
fn prepare(inner: &Inner, run: &RunRecord, outputs: &[(u32, String, Value)]) -> Result<Box<dyn Instance>, String> {
    let Some(definition) = inner.registry.get(&run.kind, run.version) else {
        let versions = inner.registry.versions(&run.kind);
        let known = if versions.is_empty() {
            "no version of it".to_owned()
        } else {
            let list: Vec<String> = versions.iter().map(|v| format!("v{v}")).collect();
            format!("only {}", list.join(", "))
        };
        return Err(format!(
            "this binary cannot run {} v{}: it has {known}; run a binary that has v{} or cancel the run",
            run.kind, run.version, run.version
        ));
    };
    definition.instantiate(run, outputs, inner.store.clone()).map_err(|err| err.to_string())
}

struct Driver<'a> {
    inner: &'a Inner,
    instance: Box<dyn Instance>,
    /// The run was taken over from a holder whose lease lapsed: its step in hand was cut short.
    recovered: bool,
    cancel: watch::Receiver<bool>,
    /// A change was reported since the current check began.
    changed: &'a AtomicBool,
}

impl Driver<'_> {
    /// Runs the current forward step once and says what came of it.
    async fn forward(&mut self, run: &mut RunRecord) -> Transition {
        let index = run.step_index as usize;
        if index >= self.instance.step_count() {
            return self.finish(None);
        }
        let name = self.instance.step_name(index);
        let now = now_ms();
        let started = *run.step_started_at.get_or_insert(now);
        run.current_step = Some(name.to_owned());
        let policy = self.instance.retry(index).clone();
        let elapsed = since(started, now);
        if std::mem::take(&mut self.recovered) && policy.is_exhausted(run.attempt, elapsed) {
            let error = StepError::interrupted_msg(format!(
                "step `{name}` was cut short {} times: the engine running it died or lost its lease",
                run.attempt
            ));
            return self.failed(run, index, error, &policy);
        }
        let shape = self.instance.shape(index);
        let result = match shape {
            Shape::Sleep(duration) => {
                let wake = after(started, duration);
                if now >= wake {
                    Ok(Check::Ready(Value::Null))
                } else {
                    Ok(Check::NotYet(format!("sleeping until {wake}")))
                }
            }
            Shape::Action | Shape::Poll { .. } => {
                self.changed.store(false, Ordering::Release);
                match self.execute(run, index).await {
                    Attempt::Returned(result) => result,
                    Attempt::Cancelled => {
                        run.cancel_requested = true;
                        return self.turn_back_for_cancel(run, true);
                    }
                }
            }
        };
        match result {
            Ok(Check::Ready(output)) => self.completed(run, index, output),
            Ok(Check::NotYet(reason)) => {
                let now = now_ms();
                let next_at = match shape {
                    Shape::Sleep(duration) => after(started, duration),
                    Shape::Poll { interval, slowest, timeout } => {
                        let deadline = after(started, timeout);
                        if now >= deadline {
                            // Like retries running out: the step's policy says unwind or park.
                            let error = StepError::retryable_msg(format!(
                                "still not ready after {}: {reason}",
                                humanize(timeout)
                            ));
                            return self.give_up(run, index, error, &policy, "timed out");
                        }
                        if self.changed.swap(false, Ordering::AcqRel) {
                            // A change was reported while this check ran: it may have looked
                            // too early, so the next one comes now.
                            now
                        } else {
                            after(now, next_check(interval, slowest, since(started, now))).min(deadline)
                        }
                    }
                    Shape::Action => now,
                };
                Transition::Wait { next_at, reason }
            }
            Err(error) => self.failed(run, index, error, &policy),
        }
    }

    /// Runs the step's body (or the fault the engine was told to inject) within its attempt
    /// deadline, unless a cancel reaches it first.
    async fn execute(&mut self, run: &RunRecord, index: usize) -> Attempt {
        let name = self.instance.step_name(index);
        let faults = &self.inner.config.faults;
        if faults.fail_step.as_deref() == Some(name) {
            return Attempt::Returned(Err(StepError::terminal_msg(format!("injected failure at step `{name}`"))));
        }
        if let Err(why) = self.before_act().await {
            return Attempt::Returned(Err(StepError::retryable_msg(format!(
                "step `{name}` waits: the checkpoints before it are not durable yet ({why})"
            ))));
        }
        let limit = self.instance.attempt_timeout(index);
        let span = tracing::info_span!("step", step = name, attempt = run.attempt + 1);
        let instance = &self.instance;
        let body = async {
            if faults.run_steps_twice {
                let first = instance.run_step(index, run.attempt).await;
                if !matches!(first, Ok(Check::Ready(_))) {
                    return first;
                }
            }
            instance.run_step(index, run.attempt).await
        };
        let cancelled = cancel_reached(&mut self.cancel);
        let result = tokio::select! {
            biased;
            () = cancelled => return Attempt::Cancelled,
            result = tokio::time::timeout(limit, body.instrument(span)) => result,
        };
        match result {
            Ok(Ok(Check::Ready(_))) if faults.cancel_in_flight.as_deref() == Some(name) => {
                // As if a cancel arrived while the step ran and the process died before its
                // checkpoint: the cancel is recorded, the output is lost.
                // Boxed: a rare path whose large future would otherwise swell every driver's.
                if let Err(err) = Box::pin(self.inner.store.cancel(run.id, now_ms(), |_, _| false, |_, _| None)).await {
                    warn!(error = %error_chain(&err), "injecting a cancel failed");
                }
                Attempt::Cancelled
            }
            Ok(result) => Attempt::Returned(result),
            Err(_) => Attempt::Returned(Err(StepError::interrupted_msg(format!(
                "attempt {} of step `{name}` did not finish within {}; it was stopped, so whatever it did may \
                 remain",
                run.attempt + 1,
                humanize(limit)
            )))),
        }
    }

    /// A forward step returned its output: move to the next step, or end the run.
    fn completed(&mut self, run: &RunRecord, index: usize, output: Value) -> Transition {
        let name = self.instance.step_name(index);
        let now = now_ms();
        let step = StepRecord {
            phase: Phase::Forward,
            index: index as u32,
            name: name.to_owned(),
            status: StepStatus::Succeeded,
            attempts: run.attempt + 1,
            output: Some(output.clone()),
            error: run.error.clone(),
            started_at: run.step_started_at.unwrap_or(now),
            finished_at: now,
        };
        self.instance.completed(index, output);
        if index + 1 < self.instance.step_count() {
            Transition::Advance { step, next: self.instance.step_name(index + 1) }
        } else {
            self.finish(Some(step))
        }
    }

    /// Every step has completed: the run succeeds with the workflow's output, or, if that
    /// cannot be built, turns back.
    fn finish(&self, step: Option<StepRecord>) -> Transition {
        match self.instance.output() {
            Ok(output) => Transition::Succeed { step, output },
            Err(error) => Transition::Unwind(Unwind {
                reason: format!("the run failed: {error}"),
                event: Some(NewEvent::new(
                    EventKind::OutputFailed,
                    None,
                    format!("building the output failed: {error}"),
                )),
                error: Some(error),
                step,
                in_hand: None,
            }),
        }
    }

    /// A forward step failed: retry it later, unwind, or park, as its policy says. A step that
    /// returned its error is not undone (it leaves nothing behind); one whose last attempt was
    /// cut short is.
    fn failed(&self, run: &RunRecord, index: usize, error: StepError, policy: &RetryPolicy) -> Transition {
        let now = now_ms();
        let name = self.instance.step_name(index);
        let attempts = run.attempt + 1;
        let started = run.step_started_at.unwrap_or(now);
        let elapsed = since(started, now);
        debug!(step = name, attempts, error = %error, "step failed");
        if !error.is_terminal() && !policy.is_exhausted(attempts, elapsed) {
            return Transition::Retry { delay: policy.delay_after(attempts), error };
        }
        let why = if error.is_terminal() {
            format!("failed terminally on attempt {attempts}")
        } else {
            format!("ran out of retries after {attempts} attempts")
        };
        self.give_up(run, index, error, policy, &why)
    }

    /// A forward step will not be tried again by itself (`why`): unwind, or park for an operator,
    /// as its policy says; a terminal error always unwinds.
    fn give_up(&self, run: &RunRecord, index: usize, error: StepError, policy: &RetryPolicy, why: &str) -> Transition {
        let now = now_ms();
        let name = self.instance.step_name(index);
        let attempts = run.attempt + 1;
        let started = run.step_started_at.unwrap_or(now);
        if error.is_terminal() || policy.on_exhausted == OnExhausted::Unwind {
            let step = StepRecord {
                phase: Phase::Forward,
                index: index as u32,
                name: name.to_owned(),
                status: StepStatus::Failed,
                attempts,
                output: None,
                error: Some(error.clone()),
                started_at: started,
                finished_at: now,
            };
            let in_hand = (error.is_interrupted() && self.instance.has_undo(index)).then_some(name);
            return Transition::Unwind(Unwind {
                reason: format!("step `{name}` failed: {error}"),
                event: Some(NewEvent::new(EventKind::StepFailed, Some(name), format!("{why}: {error}"))),
                error: Some(error),
                step: Some(step),
                in_hand,
            });
        }
        Transition::Park {
            reason: format!(
                "step `{name}` {why}: {error}; fix the cause, then `workflow retry` (one more attempt), `workflow \
                 resume` (a fresh retry budget) or `workflow cancel`"
            ),
            error: Some(error),
        }
    }

    /// A cancel was requested: turn back. The step in hand is undone first whatever it got to do
    /// (it was stopped in flight, cut short by a crash, backing off, or not started yet).
    fn turn_back_for_cancel(&self, run: &RunRecord, stopped_in_flight: bool) -> Transition {
        let index = run.step_index as usize;
        let in_hand = (index < self.instance.step_count() && self.instance.has_undo(index))
            .then(|| self.instance.step_name(index));
        let reason = match (stopped_in_flight, run.current_step.as_deref()) {
            (true, Some(step)) => format!("cancelled by an operator while step `{step}` ran; it was stopped"),
            _ => "cancelled by an operator".to_owned(),
        };
        Transition::Unwind(Unwind { reason, error: None, step: None, event: None, in_hand })
    }

    /// What [`EngineConfig::before_act`] says, if anything is configured.
    ///
    /// [`EngineConfig::before_act`]: crate::EngineConfig::before_act
    async fn before_act(&self) -> Result<(), String> {
        match &self.inner.config.before_act {
            Some(hook) => (hook.0)().await,
            None => Ok(()),
        }
    }

    /// Undoes the latest step left to undo, or ends the run when none is left.
    async fn undo(&mut self, run: &mut RunRecord) -> Transition {
        while run.step_index > 0 && !self.instance.has_undo(run.step_index as usize - 1) {
            run.step_index -= 1;
        }
        if run.step_index == 0 {
            return Transition::Unwound;
        }
        let index = run.step_index as usize - 1;
        let name = self.instance.step_name(index);
        let now = now_ms();
        let started = *run.step_started_at.get_or_insert(now);
        run.current_step = Some(name.to_owned());
        let limit = self.instance.attempt_timeout(index);
        let span = tracing::info_span!("undo", step = name, attempt = run.attempt + 1);
        let twice = self.inner.config.faults.run_undos_twice;
        let instance = &self.instance;
        let attempt = run.attempt;
        let before = self.before_act().await;
        let body = async move {
            if let Err(why) = before {
                return Err(StepError::retryable_msg(format!(
                    "the undo of step `{name}` waits: the checkpoints before it are not durable yet ({why})"
                )));
            }
            let first = instance.run_undo(index, attempt).await;
            if first.is_ok() && twice { instance.run_undo(index, attempt).await } else { first }
        };
        let result = match tokio::time::timeout(limit, body.instrument(span)).await {
            Ok(result) => result,
            Err(_) => Err(StepError::interrupted_msg(format!(
                "attempt {} of the undo of step `{name}` did not finish within {}; it was stopped",
                run.attempt + 1,
                humanize(limit)
            ))),
        };
        let now = now_ms();
        let attempts = run.attempt + 1;
        match result {
            Ok(()) => Transition::Undone {
                step: StepRecord {
                    phase: Phase::Undo,
                    index: index as u32,
                    name: name.to_owned(),
                    status: StepStatus::Undone,
                    attempts,
                    output: None,
                    error: None,
                    started_at: started,
                    finished_at: now,
                },
            },
            Err(error) => {
                let policy = self.instance.undo_retry(index);
                let elapsed = since(started, now);
                if !error.is_terminal() && !policy.is_exhausted(attempts, elapsed) {
                    return Transition::Retry { delay: policy.delay_after(attempts), error };
                }
                Transition::Park {
                    reason: format!(
                        "the undo of step `{name}` failed after {attempts} attempts: {error}; the steps before it \
                         are still in place. Fix the cause, then `workflow retry` or `workflow resume` to finish \
                         unwinding"
                    ),
                    error: Some(error),
                }
            }
        }
    }

    /// Applies the transition to the run and commits it (see [`apply`]), keeping the workflow's
    /// own view of the run in step.
    async fn apply(&mut self, run: &mut RunRecord, transition: Transition) -> Result<Next, sqlx::Error> {
        if let Transition::Unwind(Unwind { reason, .. }) = &transition {
            self.instance.turned_back(reason, run.cancel_requested);
        }
        apply(self.inner, run, transition).await
    }
}

/// Resolves once the run's cancel flag is up (never, if the engine dropped the sender).
async fn cancel_reached(cancel: &mut watch::Receiver<bool>) {
    if cancel.wait_for(|requested| *requested).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Writes `transition`, a step's outcome, into the run and commits it: the one place where a
/// step's outcome changes its run (its submit, a claim and an operator's action are the others).
async fn apply(inner: &Inner, run: &mut RunRecord, transition: Transition) -> Result<Next, sqlx::Error> {
    let now = now_ms();
    let step_name = run.current_step.clone();
    match transition {
        Transition::Advance { step, next } => {
            run.step_index = step.index + 1;
            run.attempt = 0;
            run.error = None;
            run.status_reason = None;
            // `next_at` stays as it is (already due): the checkpoint then changes no indexed
            // column, which keeps it cheap (a HOT update on PostgreSQL).
            run.status = RunStatus::Running;
            run.current_step = Some(next.to_owned());
            run.step_started_at = Some(now);
            // The step's row is its `step-succeeded` entry in the timeline: no event row.
            Ok(continue_unless_fenced(commit(inner, run, false, Some(&step), &[]).await?))
        }
        Transition::Succeed { step, output } => succeed(inner, run, step, output, now).await,
        Transition::Wait { next_at, reason } => {
            // A repeated check of the same step updates the run's latest `waiting` entry instead
            // of adding one (`CommitShape::Wait`), so a long poll stays one entry with a count.
            let events = [NewEvent::new(EventKind::Waiting, step_name.as_deref(), reason.clone())];
            run.status = RunStatus::Waiting;
            run.next_at = Some(next_at);
            run.status_reason = Some(reason);
            commit(inner, run, true, None, &events).await?;
            if next_at <= now_ms() {
                // Due already (a change was reported during the check): claim it again now.
                inner.wake.notify_one();
            }
            Ok(Next::Stop)
        }
        Transition::Retry { error, delay } => retry(inner, run, error, delay, now).await,
        Transition::Park { reason, error } => park(inner, run, reason, error).await,
        Transition::Unwind(turn) => unwind(inner, run, turn, now).await,
        Transition::Undone { step } => {
            let events = [NewEvent::new(
                EventKind::UndoSucceeded,
                Some(&step.name),
                format!("undone on attempt {}", step.attempts),
            )];
            run.step_index -= 1;
            run.attempt = 0;
            run.step_started_at = None;
            run.current_step = None;
            Ok(continue_unless_fenced(commit(inner, run, false, Some(&step), &events).await?))
        }
        Transition::Unwound => unwound(inner, run, now).await,
    }
}

/// Why and from where a run turns back ([`Transition::Unwind`]).
struct Unwind {
    reason: String,
    error: Option<StepError>,
    /// The row of the step that failed, or of the last step, which completed (the workflow's
    /// output then failed).
    step: Option<StepRecord>,
    /// Said before `unwinding` (the failure that caused it).
    event: Option<NewEvent>,
    /// The step in hand, undone first when it may have had an effect without a checkpoint.
    in_hand: Option<&'static str>,
}

/// The last step completed: the run ends `succeeded` with the workflow's output, in the same
/// commit as the last step's checkpoint. A cancel recorded before that commit (through another
/// engine, or as the step's work ended) is found inside it: the commit is then the checkpoint
/// alone, the run stays as the advance past its last step left it, and the driver turns it back
/// (`Next::Continue`: the loop sees the cancel), the last step undone with its output. Once the
/// commit is in, the store refuses a cancel (every step is checkpointed), so a cancel the store
/// accepted is never lost to the run's success.
async fn succeed(
    inner: &Inner,
    run: &mut RunRecord,
    step: Option<StepRecord>,
    output: Value,
    now: Millis,
) -> Result<Next, sqlx::Error> {
    if let Some(step) = &step {
        run.step_index = step.index + 1;
    }
    run.attempt = 0;
    run.error = None;
    run.status_reason = None;
    run.current_step = None;
    run.step_started_at = None;
    let advanced = run.clone();
    run.output = Some(output);
    run.status = RunStatus::Succeeded;
    run.next_at = None;
    run.finished_at = Some(now);
    let events = [NewEvent::new(EventKind::Succeeded, None, "every step succeeded")];
    let kept = commit(inner, run, true, step.as_ref(), &events).await?;
    if kept && run.cancel_requested && step.is_some() {
        // Only the checkpoint was written: the run as the advance left it, still leased.
        *run = RunRecord {
            cancel_requested: true,
            updated_at: run.updated_at,
            attempt_started_at: Some(run.updated_at),
            ..advanced
        };
        return Ok(Next::Continue);
    }
    Ok(ended_unless_fenced(kept, run.status))
}

/// An attempt failed: the next one comes after `delay`.
async fn retry(
    inner: &Inner,
    run: &mut RunRecord,
    error: StepError,
    delay: Duration,
    now: Millis,
) -> Result<Next, sqlx::Error> {
    let step_name = run.current_step.clone();
    let attempts = run.attempt + 1;
    run.attempt = attempts;
    run.next_at = Some(after(now, delay));
    let event = if run.phase == Phase::Forward {
        run.status = RunStatus::Retrying;
        run.status_reason = Some(format!("attempt {attempts} failed; next attempt in {}", humanize(delay)));
        let message = timeline::retrying(false, attempts, delay, &error);
        NewEvent::new(EventKind::StepFailed, step_name.as_deref(), message)
    } else {
        let message = timeline::retrying(true, attempts, delay, &error);
        NewEvent::new(EventKind::UndoFailed, step_name.as_deref(), message)
    };
    run.error = Some(error);
    commit(inner, run, true, None, &[event]).await?;
    Ok(Next::Stop)
}

/// The run stops for an operator.
async fn park(
    inner: &Inner,
    run: &mut RunRecord,
    reason: String,
    error: Option<StepError>,
) -> Result<Next, sqlx::Error> {
    let step_name = run.current_step.clone();
    if let Some(error) = error {
        run.attempt += 1;
        run.error = Some(error);
    }
    run.status = RunStatus::NeedsAttention;
    run.next_at = None;
    run.status_reason = Some(reason.clone());
    let events = [NewEvent::new(EventKind::Parked, step_name.as_deref(), reason)];
    commit(inner, run, true, None, &events).await?;
    warn!(step = step_name.as_deref().unwrap_or("-"), "run parked");
    Ok(Next::Stop)
}

/// The run turns back: its undo phase starts.
async fn unwind(inner: &Inner, run: &mut RunRecord, unwind: Unwind, now: Millis) -> Result<Next, sqlx::Error> {
    let Unwind { reason, error, step, event, in_hand } = unwind;
    if let Some(step) = step.as_ref().filter(|step| step.status == StepStatus::Succeeded) {
        run.step_index = step.index + 1;
    }
    let what = match in_hand {
        Some(name) => format!(
            "undoing step `{name}` first (it did not complete, so whatever it did may remain), then the \
             completed steps in reverse order"
        ),
        None => "undoing completed steps in reverse order".to_owned(),
    };
    let mut events: Vec<NewEvent> = event.into_iter().collect();
    events.push(NewEvent::new(EventKind::Unwinding, None, format!("{reason}; {what}")));
    if let Some(error) = error {
        run.error = Some(error);
    }
    run.step_index += u32::from(in_hand.is_some());
    run.phase = Phase::Undo;
    run.status = RunStatus::Unwinding;
    run.attempt = 0;
    run.step_started_at = None;
    run.current_step = None;
    run.next_at = Some(now);
    run.status_reason = Some(reason.clone());
    run.unwind_reason = Some(reason);
    Ok(continue_unless_fenced(commit(inner, run, false, step.as_ref(), &events).await?))
}

/// Nothing is left to undo: the run ends `failed`, or `cancelled` if that was asked.
async fn unwound(inner: &Inner, run: &mut RunRecord, now: Millis) -> Result<Next, sqlx::Error> {
    let status = if run.cancel_requested { RunStatus::Cancelled } else { RunStatus::Failed };
    run.error = turned_back_for(inner, run).await;
    run.status = status;
    run.current_step = None;
    run.step_started_at = None;
    run.next_at = None;
    run.finished_at = Some(now);
    let reason = run.unwind_reason.clone().or_else(|| run.status_reason.clone()).unwrap_or_default();
    run.status_reason = Some(format!("{reason}; every completed step was undone"));
    let events = [NewEvent::new(EventKind::ended(status), None, "every completed step was undone")];
    let kept = commit(inner, run, true, None, &events).await?;
    Ok(ended_unless_fenced(kept, status))
}

/// The error an unwound run ends with: the one it turned back for (its failed forward step's,
/// or its output's), not the last one an undo attempt left behind (an undo that waited, such as
/// "waiting until Kubernetes lists none", is no error of the run); none for a cancel that no
/// failure preceded. A store that cannot be read leaves the error as it is.
async fn turned_back_for(inner: &Inner, run: &RunRecord) -> Option<StepError> {
    let steps = match inner.store.steps(run.id).await {
        Ok(steps) => steps,
        Err(err) => {
            debug!(error = %error_chain(&err), "could not read the steps to find the error the run turned back for");
            return run.error.clone();
        }
    };
    let failed = steps.into_iter().rev().find(|step| step.phase == Phase::Forward && step.status == StepStatus::Failed);
    match failed.and_then(|step| step.error) {
        Some(error) => Some(error),
        None if run.cancel_requested => None,
        None => run.unwind_reason.clone().map(StepError::terminal_msg),
    }
}

fn continue_unless_fenced(kept: bool) -> Next {
    if kept { Next::Continue } else { Next::Stop }
}

fn ended_unless_fenced(kept: bool, status: RunStatus) -> Next {
    if kept {
        info!(%status, "run ended");
        Next::Ended
    } else {
        Next::Stop
    }
}

/// Commits the run's state. Returns false (and logs) if the lease was taken over.
async fn commit(
    inner: &Inner,
    run: &mut RunRecord,
    release: bool,
    step: Option<&StepRecord>,
    events: &[NewEvent],
) -> Result<bool, sqlx::Error> {
    // A step that succeeded and is not the last one, on a running run: the hot path.
    let advance = !release && run.phase == Phase::Forward && run.status == RunStatus::Running && step.is_some();
    let shape = if advance {
        CommitShape::Advance
    } else if run.status == RunStatus::Succeeded && step.is_some() {
        CommitShape::Finish
    } else if run.status == RunStatus::Waiting {
        CommitShape::Wait
    } else {
        CommitShape::All
    };
    let now = now_ms();
    let commit = Commit { run, owner: &inner.config.owner, now, release, shape, step, events };
    let outcome = match inner.store.commit(&commit).await {
        Ok(outcome) => outcome,
        Err(err) => commit_again(inner, &commit, err).await?,
    };
    match outcome {
        CommitOutcome::Committed { cancel_requested } => {
            // The run in memory is now the run as stored (a finish that found a cancel kept
            // the lease: the caller puts the run back as stored, see `succeed`).
            run.cancel_requested = cancel_requested;
            run.updated_at = now;
            run.attempt_started_at = (!release).then_some(now);
            if release {
                run.lease = None;
            }
            Ok(true)
        }
        CommitOutcome::Fenced => {
            warn!(generation = run.lease_generation, "lease was taken over by another engine; dropping the run");
            // The timeline says so, for whoever wonders why a step ran twice. Best effort: the
            // run is another claim's now, and this entry changes none of its state.
            if let Err(err) = inner.store.late_commit_refused(&commit).await {
                debug!(error = %error_chain(&err), "could not add the late-commit-refused entry");
            }
            Ok(false)
        }
    }
}

/// The commit failed with `err` (the database restarted, a connection was cut, the disk is
/// read-only): tries again with backoff for as long as this engine may still hold the run's
/// lease, so that the run continues within a second of the database answering again instead of
/// waiting for its lease to lapse. Each try first renews the lease, which is the fence: a run
/// whose lease lapsed or went to another claim is not this driver's to write (`Fenced`). Then it
/// reads the run, because the failed commit may have landed with only its answer lost, and
/// writing it twice would repeat its timeline entries; only a commit that did not land is sent
/// again. Gives up (with the last error) once a whole lease has passed.
async fn commit_again(inner: &Inner, commit: &Commit<'_>, err: sqlx::Error) -> Result<CommitOutcome, sqlx::Error> {
    const FIRST_DELAY: Duration = Duration::from_millis(50);
    const MAX_DELAY: Duration = Duration::from_secs(1);
    let run = commit.run;
    warn!(error = %error_chain(&err), "committing the run's progress failed; trying again while the lease holds");
    let started = tokio::time::Instant::now();
    let mut delay = FIRST_DELAY;
    let mut last = err;
    while started.elapsed() < inner.config.lease_ttl && !inner.stopping() {
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_DELAY);
        let now = now_ms();
        let attempt = async {
            let owner = &inner.config.owner;
            let renewed = inner.store.heartbeat(owner, &[run.id], now, after(now, inner.config.lease_ttl)).await?;
            let stored = inner.store.run(run.id).await?;
            let Some(stored) = stored.filter(|stored| stored.lease_generation == run.lease_generation) else {
                return Ok(CommitOutcome::Fenced);
            };
            // A commit that gives the lease up landed if the lease is free under this claim's
            // generation (nothing else frees it). One that keeps it moved the run's phase or
            // step, which only the lease holder moves; it counts only if the lease was renewed,
            // or the driver would go on under a lapsed lease.
            // A finish moved the run past its last step, whether it ended the run or found a
            // cancel and kept the lease.
            let landed = if commit.shape == CommitShape::Finish {
                stored.step_index == run.step_index
            } else if commit.release {
                stored.lease.is_none()
            } else {
                !renewed.is_empty() && stored.phase == run.phase && stored.step_index == run.step_index
            };
            if landed {
                return Ok(CommitOutcome::Committed { cancel_requested: stored.cancel_requested });
            }
            if renewed.is_empty() {
                return Ok(CommitOutcome::Fenced);
            }
            inner.store.commit(commit).await
        };
        match attempt.await {
            Ok(outcome) => {
                info!(after = %humanize(started.elapsed()), "the database answers again; the run's progress is committed");
                return Ok(outcome);
            }
            Err(err) => {
                debug!(error = %error_chain(&err), "committing the run's progress failed again");
                last = err;
            }
        }
    }
    Err(last)
}

/// The time until a poll's next check, after it has waited `waited`: a tenth of that, between
/// `every` and `slowest`.
fn next_check(every: Duration, slowest: Duration, waited: Duration) -> Duration {
    (waited / 10).clamp(every, slowest.max(every))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::next_check;

    #[test]
    fn a_poll_slows_with_the_time_it_has_waited() {
        let (every, slowest) = (Duration::from_secs(1), Duration::from_secs(30));
        assert_eq!(next_check(every, slowest, Duration::ZERO), every);
        assert_eq!(next_check(every, slowest, Duration::from_secs(5)), every);
        assert_eq!(next_check(every, slowest, Duration::from_secs(60)), Duration::from_secs(6));
        assert_eq!(next_check(every, slowest, Duration::from_secs(3600)), slowest);
        // Without `slowing_to`, `slowest` is `every`: a fixed interval.
        assert_eq!(next_check(every, every, Duration::from_secs(3600)), every);
    }
}
