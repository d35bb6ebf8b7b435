//! Drives one claimed run: runs its steps (or undos) one after another, committing each
//! result with the lease generation it was claimed under, until the run waits, parks or ends.

use std::time::Duration;

use serde_json::Value;
use tracing::{Instrument, debug, info, warn};

use crate::definition::Check;
use crate::engine::{Inner, after, now_ms};
use crate::error::{StepError, error_chain};
use crate::registry::{Instance, Shape};
use crate::retry::{OnExhausted, RetryPolicy};
use crate::status::{Phase, RunStatus};
use crate::store::{Claimed, Commit, CommitOutcome, NewEvent, RunRecord, StepRecord};

/// What to do after a commit.
enum Next {
    /// Keep driving the run.
    Continue,
    /// The run waits, is parked, or was taken over: stop driving it.
    Stop,
    /// The run has ended (succeeded, failed or cancelled), and that is committed.
    Ended,
}

/// Drives a claimed run until it waits, parks, ends or is taken over; returns the run as
/// committed if it ended here.
pub(crate) async fn drive(inner: &Inner, claimed: Claimed) -> Option<RunRecord> {
    let Claimed { mut run, outputs, recovered } = claimed;
    let mut driver = match prepare(inner, &run, &outputs) {
        Ok(instance) => Driver { inner, instance, recovered },
        Err(reason) => {
            park(inner, &mut run, reason).await;
            return None;
        }
    };
    loop {
        if inner.stopping() {
            if let Err(err) = inner.store.release(&run, &inner.config.owner).await {
                warn!(error = %error_chain(&err), "could not release the run on shutdown; its lease will lapse");
            }
            return None;
        }
        let next = match run.phase {
            Phase::Forward if run.cancel_requested => driver.unwind_for_cancel(&mut run).await,
            Phase::Forward => driver.forward(&mut run).await,
            Phase::Undo => driver.undo(&mut run).await,
        };
        match next {
            Ok(Next::Continue) => {}
            Ok(Next::Stop) => return None,
            Ok(Next::Ended) => return Some(run),
            Err(err) => {
                // The database failed: stop; the lease lapses and the run is claimed again.
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

/// Parks a run that cannot be driven at all (unknown version, diverged, undecodable input).
async fn park(inner: &Inner, run: &mut RunRecord, reason: String) {
    warn!(reason = %reason, "parking the run");
    run.status = RunStatus::NeedsAttention;
    run.next_at = None;
    run.status_reason = Some(reason.clone());
    let events = [NewEvent::new("parked", run.current_step.as_deref(), reason)];
    let commit = Commit {
        run,
        owner: &inner.config.owner,
        now: now_ms(),
        release: true,
        advance: false,
        step: None,
        events: &events,
    };
    if let Err(err) = inner.store.commit(&commit).await {
        warn!(error = %error_chain(&err), "could not park the run");
    }
}

struct Driver<'a> {
    inner: &'a Inner,
    instance: Box<dyn Instance>,
    /// The run was taken over from a holder whose lease lapsed.
    recovered: bool,
}

impl Driver<'_> {
    /// Runs the current forward step once and commits what came of it.
    async fn forward(&mut self, run: &mut RunRecord) -> Result<Next, sqlx::Error> {
        let index = run.step_index as usize;
        if index >= self.instance.step_count() {
            return self.succeed(run, None).await;
        }
        let name = self.instance.step_name(index);
        let now = now_ms();
        let started = *run.step_started_at.get_or_insert(now);
        run.current_step = Some(name.to_owned());
        let policy = self.instance.retry(index).clone();
        let elapsed = Duration::from_millis((now - started).max(0) as u64);
        if std::mem::take(&mut self.recovered) && policy.is_exhausted(run.attempt, elapsed) {
            let error = StepError::retryable_msg(format!(
                "step `{name}` was cut short {} times: the engine running it died or lost its lease",
                run.attempt
            ));
            return self.failed(run, index, error, &policy).await;
        }
        let shape = self.instance.shape(index);
        let result = match shape {
            Shape::Sleep(duration) => {
                let wake = after(started, duration);
                if now >= wake {
                    Ok(Check::Ready(Value::Null))
                } else {
                    Ok(Check::NotYet(format!("sleeping until {}", wake)))
                }
            }
            Shape::Action | Shape::Poll { .. } => self.execute(index, run.attempt).await,
        };
        match result {
            Ok(Check::Ready(output)) => self.succeed(run, Some((index, output))).await,
            Ok(Check::NotYet(reason)) => {
                let now = now_ms();
                let next_at = match shape {
                    Shape::Sleep(duration) => after(started, duration),
                    Shape::Poll { interval, timeout } => {
                        let deadline = after(started, timeout);
                        if now >= deadline {
                            let error = StepError::terminal_msg(format!(
                                "still not ready after {}: {reason}",
                                humanize(timeout)
                            ));
                            return self.failed(run, index, error, &policy).await;
                        }
                        after(now, interval).min(deadline)
                    }
                    Shape::Action => now,
                };
                self.wait(run, next_at, reason).await
            }
            Err(error) => self.failed(run, index, error, &policy).await,
        }
    }

    /// Runs the step's body, or the fault the engine was told to inject.
    async fn execute(&self, index: usize, attempt: u32) -> Result<Check<Value>, StepError> {
        let name = self.instance.step_name(index);
        let faults = &self.inner.config.faults;
        if faults.fail_step.as_deref() == Some(name) {
            return Err(StepError::terminal_msg(format!("injected failure at step `{name}`")));
        }
        let span = tracing::info_span!("step", step = name, attempt = attempt + 1);
        if faults.run_steps_twice {
            let first = self.instance.run_step(index, attempt).instrument(span.clone()).await;
            if !matches!(first, Ok(Check::Ready(_))) {
                return first;
            }
        }
        self.instance.run_step(index, attempt).instrument(span).await
    }

    /// Checkpoints a finished step and moves to the next (or ends the run after the last).
    async fn succeed(&mut self, run: &mut RunRecord, done: Option<(usize, Value)>) -> Result<Next, sqlx::Error> {
        let now = now_ms();
        let mut events = Vec::with_capacity(2);
        let step = done.map(|(index, output)| {
            let name = self.instance.step_name(index);
            let started = run.step_started_at.unwrap_or(now);
            let record = StepRecord {
                phase: Phase::Forward,
                index: index as u32,
                name: name.to_owned(),
                status: "succeeded".to_owned(),
                attempts: run.attempt + 1,
                output: Some(output.clone()),
                error: run.error.take(),
                started_at: started,
                finished_at: now,
            };
            // The step's row is its `step-succeeded` entry in the timeline: no event row.
            self.instance.completed(index, output);
            record
        });
        run.step_index = step.as_ref().map_or(run.step_index, |step| step.index + 1);
        run.attempt = 0;
        run.error = None;
        run.status_reason = None;
        let finished = run.step_index as usize >= self.instance.step_count();
        if finished {
            match self.instance.output() {
                Ok(output) => {
                    run.output = Some(output);
                    run.status = RunStatus::Succeeded;
                    run.current_step = None;
                    run.step_started_at = None;
                    run.next_at = None;
                    run.finished_at = Some(now);
                    events.push(NewEvent::new("succeeded", None, "every step succeeded"));
                }
                Err(error) => {
                    events.push(NewEvent::new("output-failed", None, format!("building the output failed: {error}")));
                    return self.fail_and_unwind(run, None, error, step, events).await;
                }
            }
        } else {
            let next = self.instance.step_name(run.step_index as usize);
            // `next_at` stays as it is (already due): the checkpoint then changes no indexed
            // column, which keeps it cheap (a HOT update on PostgreSQL).
            run.status = RunStatus::Running;
            run.current_step = Some(next.to_owned());
            run.step_started_at = Some(now);
        }
        let kept = self.commit(run, finished, step.as_ref(), &events).await?;
        Ok(match (kept, finished) {
            (true, false) => Next::Continue,
            (true, true) => {
                info!("run succeeded");
                Next::Ended
            }
            (false, _) => Next::Stop,
        })
    }

    /// The step is not done yet: wait (as a row) until `next_at`.
    async fn wait(&self, run: &mut RunRecord, next_at: i64, reason: String) -> Result<Next, sqlx::Error> {
        let step = run.current_step.clone();
        let mut events = Vec::new();
        if run.status != RunStatus::Waiting || run.status_reason.as_deref() != Some(reason.as_str()) {
            events.push(NewEvent::new("waiting", step.as_deref(), reason.clone()));
        }
        run.status = RunStatus::Waiting;
        run.next_at = Some(next_at);
        run.status_reason = Some(reason);
        self.commit(run, true, None, &events).await?;
        Ok(Next::Stop)
    }

    /// A forward step failed: retry it later, unwind, or park, as its policy says.
    async fn failed(
        &mut self,
        run: &mut RunRecord,
        index: usize,
        error: StepError,
        policy: &RetryPolicy,
    ) -> Result<Next, sqlx::Error> {
        let now = now_ms();
        let name = self.instance.step_name(index);
        let attempts = run.attempt + 1;
        let started = run.step_started_at.unwrap_or(now);
        let elapsed = Duration::from_millis((now - started).max(0) as u64);
        debug!(step = name, attempts, error = %error, "step failed");
        if !error.is_terminal() && !policy.is_exhausted(attempts, elapsed) {
            let delay = policy.delay_after(attempts);
            run.status = RunStatus::Retrying;
            run.attempt = attempts;
            run.next_at = Some(after(now, delay));
            run.status_reason = Some(format!("attempt {attempts} failed; next attempt in {}", humanize(delay)));
            let events = [NewEvent::new(
                "step-failed",
                Some(name),
                format!("attempt {attempts} failed (retrying in {}): {error}", humanize(delay)),
            )];
            run.error = Some(error);
            self.commit(run, true, None, &events).await?;
            return Ok(Next::Stop);
        }
        let why = if error.is_terminal() { "failed terminally" } else { "ran out of retries" };
        run.attempt = attempts;
        if error.is_terminal() || policy.on_exhausted == OnExhausted::Unwind {
            let step = StepRecord {
                phase: Phase::Forward,
                index: index as u32,
                name: name.to_owned(),
                status: "failed".to_owned(),
                attempts,
                output: None,
                error: Some(error.clone()),
                started_at: started,
                finished_at: now,
            };
            let events = vec![NewEvent::new("step-failed", Some(name), format!("attempt {attempts} {why}: {error}"))];
            return self.fail_and_unwind(run, Some(name), error, Some(step), events).await;
        }
        let reason = format!(
            "step `{name}` {why} after {attempts} attempts: {error}; fix the cause, then \
             `workflow retry` (one more attempt), `workflow resume` (a fresh retry budget) or `workflow cancel`"
        );
        run.status = RunStatus::NeedsAttention;
        run.next_at = None;
        run.status_reason = Some(reason.clone());
        run.error = Some(error);
        let events = [NewEvent::new("parked", Some(name), reason)];
        self.commit(run, true, None, &events).await?;
        warn!(step = name, "run parked: retries exhausted");
        Ok(Next::Stop)
    }

    /// Turns the run around after a terminal failure: record it, then undo what completed.
    async fn fail_and_unwind(
        &mut self,
        run: &mut RunRecord,
        step_name: Option<&str>,
        error: StepError,
        step: Option<StepRecord>,
        events: Vec<NewEvent>,
    ) -> Result<Next, sqlx::Error> {
        let reason = match step_name {
            Some(name) => format!("step `{name}` failed: {error}"),
            None => format!("the run failed: {error}"),
        };
        run.error = Some(error);
        self.unwind(run, reason, step, events).await
    }

    /// A cancel was requested: undo completed steps.
    async fn unwind_for_cancel(&mut self, run: &mut RunRecord) -> Result<Next, sqlx::Error> {
        self.unwind(run, "cancelled by an operator".to_owned(), None, Vec::new()).await
    }

    /// Turns the run to its undo phase, with `reason`, and commits that with `step` and `events`.
    async fn unwind(
        &mut self,
        run: &mut RunRecord,
        reason: String,
        step: Option<StepRecord>,
        mut events: Vec<NewEvent>,
    ) -> Result<Next, sqlx::Error> {
        events.push(NewEvent::new("unwinding", None, format!("{reason}; undoing completed steps in reverse order")));
        run.phase = Phase::Undo;
        run.status = RunStatus::Unwinding;
        run.attempt = 0;
        run.step_started_at = None;
        run.current_step = None;
        run.next_at = Some(now_ms());
        run.status_reason = Some(reason);
        let kept = self.commit(run, false, step.as_ref(), &events).await?;
        Ok(if kept { Next::Continue } else { Next::Stop })
    }

    /// Undoes the latest completed step that has an undo, or ends the run when none is left.
    async fn undo(&mut self, run: &mut RunRecord) -> Result<Next, sqlx::Error> {
        while run.step_index > 0 && !self.instance.has_undo(run.step_index as usize - 1) {
            run.step_index -= 1;
        }
        let now = now_ms();
        if run.step_index == 0 {
            let status = if run.cancel_requested { RunStatus::Cancelled } else { RunStatus::Failed };
            run.status = status;
            run.current_step = None;
            run.step_started_at = None;
            run.next_at = None;
            run.finished_at = Some(now);
            let reason = run.status_reason.take().unwrap_or_default();
            run.status_reason = Some(format!("{reason}; every completed step was undone"));
            let events = [NewEvent::new(status.as_str(), None, "every completed step was undone")];
            if self.commit(run, true, None, &events).await? {
                info!(%status, "run ended");
                return Ok(Next::Ended);
            }
            return Ok(Next::Stop);
        }
        let index = run.step_index as usize - 1;
        let name = self.instance.step_name(index);
        let started = *run.step_started_at.get_or_insert(now);
        run.current_step = Some(name.to_owned());
        let span = tracing::info_span!("undo", step = name, attempt = run.attempt + 1);
        let mut result = self.instance.run_undo(index, run.attempt).instrument(span.clone()).await;
        if result.is_ok() && self.inner.config.faults.run_undos_twice {
            result = self.instance.run_undo(index, run.attempt).instrument(span).await;
        }
        let now = now_ms();
        let attempts = run.attempt + 1;
        match result {
            Ok(()) => {
                let step = StepRecord {
                    phase: Phase::Undo,
                    index: index as u32,
                    name: name.to_owned(),
                    status: "undone".to_owned(),
                    attempts,
                    output: None,
                    error: None,
                    started_at: started,
                    finished_at: now,
                };
                let events = [NewEvent::new("undo-succeeded", Some(name), format!("undone on attempt {attempts}"))];
                run.step_index -= 1;
                run.attempt = 0;
                run.step_started_at = None;
                let kept = self.commit(run, false, Some(&step), &events).await?;
                Ok(if kept { Next::Continue } else { Next::Stop })
            }
            Err(error) => {
                let policy = self.instance.undo_retry(index);
                let elapsed = Duration::from_millis((now - started).max(0) as u64);
                run.attempt = attempts;
                if !error.is_terminal() && !policy.is_exhausted(attempts, elapsed) {
                    let delay = policy.delay_after(attempts);
                    run.next_at = Some(after(now, delay));
                    let events = [NewEvent::new(
                        "undo-failed",
                        Some(name),
                        format!("undo attempt {attempts} failed (retrying in {}): {error}", humanize(delay)),
                    )];
                    run.error = Some(error);
                    self.commit(run, true, None, &events).await?;
                    return Ok(Next::Stop);
                }
                let reason = format!(
                    "the undo of step `{name}` failed after {attempts} attempts: {error}; the steps before it \
                     are still in place. Fix the cause, then `workflow retry` or `workflow resume` to finish unwinding"
                );
                run.status = RunStatus::NeedsAttention;
                run.next_at = None;
                run.status_reason = Some(reason.clone());
                run.error = Some(error);
                let events = [NewEvent::new("parked", Some(name), reason)];
                self.commit(run, true, None, &events).await?;
                warn!(step = name, "run parked: an undo keeps failing");
                Ok(Next::Stop)
            }
        }
    }

    /// Commits the run's state. Returns false (and logs) if the lease was taken over.
    async fn commit(
        &self,
        run: &mut RunRecord,
        release: bool,
        step: Option<&StepRecord>,
        events: &[NewEvent],
    ) -> Result<bool, sqlx::Error> {
        // A step that succeeded and is not the last one, on a running run: the hot path.
        let advance = !release && run.phase == Phase::Forward && run.status == RunStatus::Running && step.is_some();
        let now = now_ms();
        let commit = Commit { run, owner: &self.inner.config.owner, now, release, advance, step, events };
        match self.inner.store.commit(&commit).await? {
            CommitOutcome::Committed { cancel_requested } => {
                // The run in memory is now the run as stored.
                run.cancel_requested = cancel_requested;
                run.updated_at = now;
                if release {
                    run.lease = None;
                }
                Ok(true)
            }
            CommitOutcome::Fenced => {
                warn!(generation = run.lease_generation, "lease was taken over by another engine; dropping the run");
                Ok(false)
            }
        }
    }
}

fn humanize(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 120_000 {
        format!("{:.1} s", duration.as_secs_f64())
    } else {
        format!("{} min", duration.as_secs() / 60)
    }
}
