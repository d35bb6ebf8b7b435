//! Operator actions on a run: cancel, signal, retry, resume. Each is one transaction that
//! checks the run's state, changes it, and records the action in the run's timeline.

use serde_json::Value;
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use super::events::{Entry, insert_event};
use super::handle::Store;
use super::pool::BeginWrite;
use super::records::{Millis, NewEvent, parse_status, to_json};
use crate::status::{Phase, RunStatus};
use crate::timeline::EventKind;

/// An operator's request to run a run's current step now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Run the waiting, backing-off or parked step now, keeping its attempt count.
    Retry,
    /// Continue a parked run with a fresh retry budget for its current step.
    Resume,
}

/// What an operator action found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ActionOutcome {
    /// Done; the run's status is now this.
    Done(RunStatus),
    /// The run is in this status, where the action does not apply.
    NotApplicable(RunStatus),
    /// No such run.
    NotFound,
}

/// The run's row as an action reads it (locked on PostgreSQL until the action commits).
#[derive(sqlx::FromRow)]
struct ActionRow {
    status: String,
    phase: String,
    step_index: i64,
    lease_owner: Option<String>,
    kind: String,
    version: i64,
}

impl Store {
    /// Asks the run to turn back: a run that never started ends `cancelled` at once when
    /// `ends_at_once(kind, version)` says it has nothing to undo; any other run is made due, so
    /// that a worker unwinds it (a parked forward run included). A forward run whose every step
    /// is checkpointed (`step_count(kind, version)` of them) is ending: the cancel is refused as
    /// for an ended run, because its driver has read the cancel flag for the last time.
    pub(crate) async fn cancel(
        &self,
        run: Uuid,
        now: Millis,
        ends_at_once: impl FnOnce(&str, u32) -> bool,
        step_count: impl FnOnce(&str, u32) -> Option<usize>,
    ) -> Result<ActionOutcome, sqlx::Error> {
        let id = run.to_string();
        let lock = self.row_lock();
        let select = AssertSqlSafe(format!(
            "SELECT status, phase, step_index, lease_owner, kind, version FROM engine_runs WHERE id = $1{lock}"
        ));
        crate::with_pool!(&self.pool, |pool| {
            let mut tx = pool.begin_write().await?;
            let row: Option<ActionRow> = sqlx::query_as(select).bind(&id).fetch_optional(&mut *tx).await?;
            let Some(row) = row else { return Ok(ActionOutcome::NotFound) };
            let status = parse_status(&row.status)?;
            if status.is_final() {
                return Ok(ActionOutcome::NotApplicable(status));
            }
            let steps = step_count(&row.kind, row.version as u32);
            if Phase::parse(&row.phase) == Phase::Forward && steps.is_some_and(|n| row.step_index as usize >= n) {
                return Ok(ActionOutcome::NotApplicable(RunStatus::Succeeded));
            }
            insert_signal(&mut tx, &id, "cancel", &Value::Null, now).await?;
            let unstarted = status == RunStatus::Pending && row.step_index == 0 && row.lease_owner.is_none();
            let new_status = if unstarted && ends_at_once(&row.kind, row.version as u32) {
                sqlx::query(
                    "UPDATE engine_runs SET status = 'cancelled', cancel_requested = TRUE, current_step = NULL, \
                       status_reason = 'cancelled before any step ran', next_at = $2, finished_at = $2, \
                       updated_at = $2 WHERE id = $1",
                )
                .bind(&id)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                let event = NewEvent::new(EventKind::Cancelled, None, "cancelled before any step ran");
                insert_event(&mut tx, run, Entry::Next, now, &event).await?;
                RunStatus::Cancelled
            } else {
                let parked_forward = status == RunStatus::NeedsAttention && Phase::parse(&row.phase) == Phase::Forward;
                sqlx::query(
                    "UPDATE engine_runs SET cancel_requested = TRUE, \
                       status = CASE WHEN $3 THEN 'running' ELSE status END, \
                       next_at = CASE WHEN $3 OR (status IN ('waiting', 'retrying') AND next_at > $2) \
                                 THEN $2 ELSE next_at END, \
                       updated_at = $2 WHERE id = $1",
                )
                .bind(&id)
                .bind(now)
                .bind(parked_forward)
                .execute(&mut *tx)
                .await?;
                let message = if status == RunStatus::NeedsAttention && !parked_forward {
                    "cancel requested; the run is parked while unwinding: `retry` or `resume` it to finish the undo"
                } else if unstarted {
                    "cancel requested; the run has not started: its first step's undo runs when its turn comes"
                } else {
                    "cancel requested; the step in hand (stopped if it is running) and the completed steps will be \
                     undone, last first"
                };
                let event = NewEvent::new(EventKind::CancelRequested, None, message);
                insert_event(&mut tx, run, Entry::Next, now, &event).await?;
                if parked_forward { RunStatus::Running } else { status }
            };
            tx.commit().await?;
            Ok(ActionOutcome::Done(new_status))
        })
    }

    /// Stores a signal for the run and wakes it if it waits.
    pub(crate) async fn signal(
        &self,
        run: Uuid,
        name: &str,
        payload: &Value,
        now: Millis,
    ) -> Result<ActionOutcome, sqlx::Error> {
        let id = run.to_string();
        let lock = self.row_lock();
        let select = AssertSqlSafe(format!("SELECT status FROM engine_runs WHERE id = $1{lock}"));
        crate::with_pool!(&self.pool, |pool| {
            let mut tx = pool.begin_write().await?;
            let status: Option<String> = sqlx::query_scalar(select).bind(&id).fetch_optional(&mut *tx).await?;
            let Some(status) = status else { return Ok(ActionOutcome::NotFound) };
            let status = parse_status(&status)?;
            if status.is_final() {
                return Ok(ActionOutcome::NotApplicable(status));
            }
            insert_signal(&mut tx, &id, name, payload, now).await?;
            sqlx::query(
                "UPDATE engine_runs SET next_at = $2, updated_at = $2 \
                 WHERE id = $1 AND status IN ('waiting', 'retrying') AND next_at > $2",
            )
            .bind(&id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            let event = NewEvent::new(EventKind::Signal, None, format!("signal `{name}` received"));
            insert_event(&mut tx, run, Entry::Next, now, &event).await?;
            tx.commit().await?;
            Ok(ActionOutcome::Done(status))
        })
    }

    /// An operator's `retry` or `resume`: make the current step run now.
    pub(crate) async fn wake(&self, run: Uuid, wake: Wake, now: Millis) -> Result<ActionOutcome, sqlx::Error> {
        let id = run.to_string();
        let (sql, kind, message) = match wake {
            Wake::Retry => (
                "UPDATE engine_runs SET next_at = $2, updated_at = $2, status_reason = NULL, \
                   status = CASE WHEN status <> 'needs-attention' THEN status \
                                 WHEN phase = 'undo' THEN 'unwinding' ELSE 'running' END \
                 WHERE id = $1 AND status IN ('waiting', 'retrying', 'unwinding', 'needs-attention') \
                   AND lease_owner IS NULL RETURNING status",
                EventKind::RetryRequested,
                "an operator asked to run the current step now",
            ),
            Wake::Resume => (
                "UPDATE engine_runs SET next_at = $2, updated_at = $2, status_reason = NULL, attempt = 0, \
                   step_started_at = NULL, \
                   status = CASE WHEN phase = 'undo' THEN 'unwinding' ELSE 'running' END \
                 WHERE id = $1 AND status = 'needs-attention' RETURNING status",
                EventKind::Resumed,
                "an operator resumed the run with a fresh retry budget for its current step",
            ),
        };
        crate::with_pool!(&self.pool, |pool| {
            let mut tx = pool.begin_write().await?;
            let status: Option<String> = sqlx::query_scalar(sql).bind(&id).bind(now).fetch_optional(&mut *tx).await?;
            let outcome = match status {
                Some(status) => {
                    insert_event(&mut tx, run, Entry::Next, now, &NewEvent::new(kind, None, message)).await?;
                    ActionOutcome::Done(parse_status(&status)?)
                }
                None => {
                    let status: Option<String> = sqlx::query_scalar("SELECT status FROM engine_runs WHERE id = $1")
                        .bind(&id)
                        .fetch_optional(&mut *tx)
                        .await?;
                    match status {
                        Some(status) => ActionOutcome::NotApplicable(parse_status(&status)?),
                        None => ActionOutcome::NotFound,
                    }
                }
            };
            tx.commit().await?;
            Ok(outcome)
        })
    }
}

/// Records a signal (a cancel is one too, with no payload).
async fn insert_signal<DB: sqlx::Database>(
    tx: &mut sqlx::Transaction<'static, DB>,
    id: &str,
    name: &str,
    payload: &Value,
    now: Millis,
) -> Result<(), sqlx::Error>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    sqlx::query("INSERT INTO engine_signals (run_id, name, payload, created_at) VALUES ($1, $2, $3, $4)")
        .bind(id)
        .bind(name)
        .bind(to_json(payload))
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
