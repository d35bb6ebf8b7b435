//! A checkpoint's values: as a driver hands them to the store ([`Commit`]), owned so that they
//! can be handed to the group-commit task ([`CommitArgs`]), and the one place they are bound to
//! the commit statement (same parameter numbers on both databases).

use super::commit_sql::CommitShape;
use super::records::{Millis, NEVER, NewEvent, RunRecord, StepRecord, to_json};
use crate::status::Phase;
use crate::timeline::{EventKind, StepStatus};

/// A commit of a run's state at the end of an attempt, fenced by the claim's generation.
pub(crate) struct Commit<'a> {
    pub(crate) run: &'a RunRecord,
    pub(crate) owner: &'a str,
    pub(crate) now: Millis,
    /// Give the run up (it waits, is parked, or has ended).
    pub(crate) release: bool,
    pub(crate) shape: CommitShape,
    pub(crate) step: Option<&'a StepRecord>,
    pub(crate) events: &'a [NewEvent],
}

/// Everything a commit statement binds: run state $1-$13 and $30, fence $14-$16, step $17-$26
/// ($17: whether there is one), events $27, timeline entries $28-$29, and for a wait its
/// entry's step and message $31-$32.
pub(crate) struct CommitArgs {
    pub(crate) sql: &'static str,
    pub(crate) shape: CommitShape,
    pub(crate) status: &'static str,
    pub(crate) phase: &'static str,
    pub(crate) step_index: i64,
    pub(crate) current_step: Option<String>,
    pub(crate) attempt: i64,
    pub(crate) step_started_at: Option<i64>,
    pub(crate) next_at: i64,
    pub(crate) status_reason: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) output: Option<String>,
    pub(crate) finished_at: Option<i64>,
    pub(crate) now: i64,
    pub(crate) release: bool,
    pub(crate) id: String,
    pub(crate) generation: i64,
    pub(crate) owner: String,
    pub(crate) has_step: bool,
    pub(crate) step_phase: Option<&'static str>,
    pub(crate) step_position: Option<i64>,
    pub(crate) step_name: Option<String>,
    pub(crate) step_status: Option<&'static str>,
    pub(crate) step_attempts: Option<i64>,
    pub(crate) step_output: Option<String>,
    pub(crate) step_error: Option<String>,
    pub(crate) step_started: Option<i64>,
    pub(crate) step_finished: Option<i64>,
    pub(crate) events: String,
    /// Timeline entries this commit adds: its events, plus the step row if it is one.
    pub(crate) entries: i64,
    /// The step row is a timeline entry: a forward step that succeeded.
    pub(crate) step_entry: bool,
    pub(crate) unwind_reason: Option<String>,
    /// A wait's `waiting` entry: its step and message.
    pub(crate) waiting_step: Option<String>,
    pub(crate) waiting_message: Option<String>,
}

impl CommitArgs {
    pub(crate) fn new(sql: &'static str, commit: &Commit<'_>) -> Self {
        let run = commit.run;
        let step = commit.step;
        let events: Vec<serde_json::Value> = commit
            .events
            .iter()
            .map(|event| {
                serde_json::json!({ "kind": event.kind.as_str(), "step": event.step, "message": event.message })
            })
            .collect();
        let waiting = commit.events.iter().find(|event| event.kind == EventKind::Waiting);
        let step_entry = step.is_some_and(|step| step.phase == Phase::Forward && step.status == StepStatus::Succeeded);
        Self {
            sql,
            shape: commit.shape,
            status: run.status.as_str(),
            phase: run.phase.as_str(),
            step_index: i64::from(run.step_index),
            current_step: run.current_step.clone(),
            attempt: i64::from(run.attempt),
            step_started_at: run.step_started_at,
            next_at: run.next_at.unwrap_or(NEVER),
            status_reason: run.status_reason.clone(),
            error: run.error.as_ref().map(to_json),
            output: run.output.as_ref().map(to_json),
            finished_at: run.finished_at,
            now: commit.now,
            release: commit.release,
            id: run.id.to_string(),
            generation: run.lease_generation,
            owner: commit.owner.to_owned(),
            has_step: step.is_some(),
            step_phase: step.map(|step| step.phase.as_str()),
            step_position: step.map(|step| i64::from(step.index)),
            step_name: step.map(|step| step.name.clone()),
            step_status: step.map(|step| step.status.as_str()),
            step_attempts: step.map(|step| i64::from(step.attempts)),
            step_output: step.and_then(|step| step.output.as_ref().map(to_json)),
            step_error: step.and_then(|step| step.error.as_ref().map(to_json)),
            step_started: step.map(|step| step.started_at),
            step_finished: step.map(|step| step.finished_at),
            events: to_json(&events),
            entries: events.len() as i64 + i64::from(step_entry),
            step_entry,
            unwind_reason: run.unwind_reason.clone(),
            waiting_step: waiting.and_then(|event| event.step.clone()),
            waiting_message: waiting.map(|event| event.message.clone()),
        }
    }
}

/// The commit statement of `$args` with every value bound, for whichever database the
/// executor it is run on belongs to. Yields `Option<bool>`: `None` if fenced, else whether a
/// cancel was requested.
macro_rules! bind_commit {
    ($args:expr) => {{
        let args = &$args;
        sqlx::query_scalar::<_, bool>(sqlx::AssertSqlSafe(args.sql))
            .bind(args.status)
            .bind(args.phase)
            .bind(args.step_index)
            .bind(args.current_step.as_deref())
            .bind(args.attempt)
            .bind(args.step_started_at)
            .bind(args.next_at)
            .bind(args.status_reason.as_deref())
            .bind(args.error.as_deref())
            .bind(args.output.as_deref())
            .bind(args.finished_at)
            .bind(args.now)
            .bind(args.release)
            .bind(args.id.as_str())
            .bind(args.generation)
            .bind(args.owner.as_str())
            .bind(args.has_step)
            .bind(args.step_phase)
            .bind(args.step_position)
            .bind(args.step_name.as_deref())
            .bind(args.step_status)
            .bind(args.step_attempts)
            .bind(args.step_output.as_deref())
            .bind(args.step_error.as_deref())
            .bind(args.step_started)
            .bind(args.step_finished)
            .bind(args.events.as_str())
            .bind(args.entries)
            .bind(args.step_entry)
            .bind(args.unwind_reason.as_deref())
            .bind(args.waiting_step.as_deref())
            .bind(args.waiting_message.as_deref())
    }};
}
pub(crate) use bind_commit;
