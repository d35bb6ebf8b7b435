//! Checkpoints: a run's new state, its finished step and its events, written atomically if the
//! writer still holds the lease generation it claimed. This is the engine's hot path (one per
//! step), so it is one round trip: on PostgreSQL one statement of data-modifying CTEs, on
//! SQLite one batch of statements inside `BEGIN IMMEDIATE ... COMMIT`, grouped with the other
//! drivers' checkpoints when several are in flight (`group_commit.rs`).

use std::sync::LazyLock;

use super::commit_args::{CommitArgs, bind_commit};
use super::connect::BeginWrite;
use super::records::{Millis, NewEvent, RunRecord, StepRecord};
use super::{Pool, Store};

/// A commit of a run's state at the end of an attempt, fenced by the claim's generation.
pub(crate) struct Commit<'a> {
    pub(crate) run: &'a RunRecord,
    pub(crate) owner: &'a str,
    pub(crate) now: Millis,
    /// Give the run up (it waits, is parked, or has ended).
    pub(crate) release: bool,
    /// Only the step moved on: status, due time and lease stay as they are.
    pub(crate) advance: bool,
    pub(crate) step: Option<&'a StepRecord>,
    pub(crate) events: &'a [NewEvent],
}

/// What a commit found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitOutcome {
    /// Written. Carries whether a cancel has been requested meanwhile.
    Committed { cancel_requested: bool },
    /// The lease was taken over: nothing was written.
    Fenced,
}

/// The columns a commit sets. Parameters: run state $1-$13 and $30, fence $14-$16, step
/// $17-$26 ($17: whether there is one), events $27, timeline entries $28-$29.
const SET_ALL: &str = "status = $1, phase = $2, step_index = $3, current_step = $4, attempt = $5, \
     step_started_at = $6, next_at = $7, status_reason = $8, error = $9, output = $10, finished_at = $11, \
     updated_at = $12, unwind_reason = $30, lease_owner = CASE WHEN $13 THEN NULL ELSE lease_owner END, \
     lease_expires_at = CASE WHEN $13 THEN NULL ELSE lease_expires_at END";

/// The columns an advance sets: a step succeeded and the next one starts, the run keeps its
/// status, due time and lease. No indexed column is written, so the run's row is rewritten
/// in place (a HOT update on PostgreSQL) and no index page changes: this is the hot path.
const SET_ADVANCE: &str = "step_index = $3, current_step = $4, attempt = $5, step_started_at = $6, \
     status_reason = $8, error = $9, updated_at = $12";

/// The commit on PostgreSQL: data-modifying CTEs run as one atomic statement, in one round
/// trip; the step row and the events are written only if the fenced UPDATE matched. The run's
/// timeline counter grows by the entries written ($28: the events, plus the step row when $29,
/// a forward step that succeeded, which is its own `step-succeeded` entry); `base` is the
/// counter before them.
fn commit_postgres(set: &str) -> String {
    format!(
        "WITH run AS ( \
           UPDATE engine_runs SET {set}, events = events + $28 \
           WHERE id = $14 AND lease_generation = $15 AND lease_owner = $16 \
           RETURNING id, cancel_requested, events - $28 AS base), \
         step AS ( \
           INSERT INTO engine_steps (run_id, phase, idx, name, status, attempts, output, error, started_at, finished_at, n) \
           SELECT run.id, $18, $19, $20, $21, $22, $23, $24, $25, $26, CASE WHEN $29 THEN run.base + 1 END \
           FROM run WHERE $17 \
           ON CONFLICT (run_id, phase, idx) DO UPDATE SET name = excluded.name, status = excluded.status, \
             attempts = excluded.attempts, output = excluded.output, error = excluded.error, \
             started_at = excluded.started_at, finished_at = excluded.finished_at, n = excluded.n), \
         events AS ( \
           INSERT INTO engine_events (run_id, n, at, kind, step, message) \
           SELECT run.id, run.base + CASE WHEN $29 THEN 1 ELSE 0 END + e.position, $12, \
             e.value ->> 'kind', e.value ->> 'step', e.value ->> 'message' \
           FROM run, jsonb_array_elements($27::jsonb) WITH ORDINALITY AS e(value, position)) \
         SELECT cancel_requested FROM run"
    )
}

/// The same commit on SQLite, as one batch inside a `BEGIN IMMEDIATE` transaction: the fenced
/// UPDATE, then the step row and the events only if it matched. After the UPDATE (which may
/// release the lease) "it matched" reads as: the row still has the claimed generation (every
/// claim increments it) and carries this commit's `updated_at`. The timeline counter before
/// this commit's entries is `events - $28`.
fn commit_sqlite(set: &str) -> String {
    format!(
        "UPDATE engine_runs SET {set}, events = events + $28 \
         WHERE id = $14 AND lease_generation = $15 AND lease_owner = $16; \
         INSERT INTO engine_steps (run_id, phase, idx, name, status, attempts, output, error, started_at, finished_at, n) \
         SELECT $14, $18, $19, $20, $21, $22, $23, $24, $25, $26, CASE WHEN $29 THEN r.events - $28 + 1 END \
         FROM engine_runs r WHERE $17 AND changes() = 1 AND r.id = $14 \
         ON CONFLICT (run_id, phase, idx) DO UPDATE SET name = excluded.name, status = excluded.status, \
           attempts = excluded.attempts, output = excluded.output, error = excluded.error, \
           started_at = excluded.started_at, finished_at = excluded.finished_at, n = excluded.n; \
         INSERT INTO engine_events (run_id, n, at, kind, step, message) \
         SELECT $14, r.events - $28 + CASE WHEN $29 THEN 1 ELSE 0 END + e.key + 1, $12, \
           e.value ->> 'kind', e.value ->> 'step', e.value ->> 'message' \
         FROM engine_runs r, json_each($27) AS e \
         WHERE r.id = $14 AND r.lease_generation = $15 AND r.updated_at = $12; \
         SELECT cancel_requested FROM engine_runs WHERE id = $14 AND lease_generation = $15 AND updated_at = $12"
    )
}

/// A SQLite commit as one self-contained batch (`BEGIN IMMEDIATE; ...; COMMIT`), [all, advance]:
/// one round trip to the connection's worker thread instead of three, for a checkpoint that has
/// the writer to itself.
pub(super) static SQLITE_SELF_COMMIT: LazyLock<[String; 2]> =
    LazyLock::new(|| [SET_ALL, SET_ADVANCE].map(|set| format!("BEGIN IMMEDIATE; {}; COMMIT", commit_sqlite(set))));

/// The four commit statements, built once: [postgres, sqlite] × [all, advance].
static COMMIT_SQL: LazyLock<[[String; 2]; 2]> = LazyLock::new(|| {
    [[commit_postgres(SET_ALL), commit_postgres(SET_ADVANCE)], [commit_sqlite(SET_ALL), commit_sqlite(SET_ADVANCE)]]
});

impl Store {
    /// Writes the run's new state, its finished step and its events atomically, if the caller
    /// still holds the lease generation it claimed.
    pub(crate) async fn commit(&self, commit: &Commit<'_>) -> Result<CommitOutcome, sqlx::Error> {
        let sql = COMMIT_SQL[usize::from(!self.is_postgres())][usize::from(commit.advance)].as_str();
        let args = CommitArgs::new(sql, commit);
        let cancel_requested = match (&self.pool, &self.group_commit) {
            (Pool::Postgres(pool), _) => bind_commit!(args).fetch_optional(pool).await?,
            (Pool::Sqlite(_), Some(group)) => group.commit(args, commit.advance).await?,
            (Pool::Sqlite(pool), None) => {
                let mut tx = pool.begin_write().await?;
                let cancel_requested = bind_commit!(args).fetch_optional(&mut *tx).await?;
                tx.commit().await?;
                cancel_requested
            }
        };
        Ok(match cancel_requested {
            Some(cancel_requested) => CommitOutcome::Committed { cancel_requested },
            None => CommitOutcome::Fenced,
        })
    }
}
