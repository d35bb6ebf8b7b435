//! The statements a checkpoint runs, by [`CommitShape`], built once: on PostgreSQL one statement
//! of data-modifying CTEs, on SQLite a few statements, separated by `;`, that the writer thread
//! (`writer.rs`) runs inside its `BEGIN IMMEDIATE ... COMMIT` transaction.

use std::sync::LazyLock;

/// Which statement a commit runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitShape {
    /// Any change of state, with its events appended.
    All,
    /// Only the step moved on: status, due time and lease stay as they are.
    Advance,
    /// A poll or sleep is not done: the run is released until its next check, and its one event
    /// (`waiting`) repeats the run's latest entry if that is a waiting of the same step.
    Wait,
    /// The last step succeeded and the run ends `succeeded` with it, in one commit, unless a
    /// cancel was recorded meanwhile: then, decided inside the same statement, the commit is the
    /// last step's checkpoint alone (as [`CommitShape::Advance`] would write it: the run keeps its
    /// status and lease, and the `succeeded` entry is not written), and the driver turns the run
    /// back. Either way every step is checkpointed, so the store refuses any later cancel.
    Finish,
}

impl CommitShape {
    /// Its index in the tables of statements.
    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// The columns a commit sets. Parameters: run state $1-$13 and $30, fence $14-$16, step
/// $17-$26 ($17: whether there is one), events $27, timeline entries $28-$29, the waiting
/// entry's step and message $31-$32. A run kept by its driver starts its next attempt now; a
/// released one has none running.
const SET_ALL: &str = "status = $1, phase = $2, step_index = $3, current_step = $4, attempt = $5, \
     step_started_at = $6, next_at = $7, status_reason = $8, error = $9, output = $10, finished_at = $11, \
     updated_at = $12, unwind_reason = $30, lease_owner = CASE WHEN $13 THEN NULL ELSE lease_owner END, \
     lease_expires_at = CASE WHEN $13 THEN NULL ELSE lease_expires_at END, \
     attempt_started_at = CASE WHEN $13 THEN NULL ELSE $12 END";

/// The columns an advance sets: a step succeeded and the next one starts, the run keeps its
/// status, due time and lease. No indexed column is written, so the run's row is rewritten
/// in place (a HOT update on PostgreSQL) and no index page changes: this is the hot path.
const SET_ADVANCE: &str = "step_index = $3, current_step = $4, attempt = $5, step_started_at = $6, \
     status_reason = $8, error = $9, updated_at = $12, attempt_started_at = $12";

/// The columns the end of a run sets with its last step ([`CommitShape::Finish`]): those of
/// [`SET_ALL`] where no cancel is recorded, else those of [`SET_ADVANCE`] (the run's status,
/// due time and lease stay). SQL reads `cancel_requested` here as the row had it before this
/// UPDATE, on both databases.
const SET_FINISH: &str = "status = CASE WHEN cancel_requested THEN status ELSE $1 END, phase = $2, step_index = $3, \
     current_step = $4, attempt = $5, step_started_at = $6, \
     next_at = CASE WHEN cancel_requested THEN next_at ELSE $7 END, status_reason = $8, error = $9, \
     output = CASE WHEN cancel_requested THEN NULL ELSE $10 END, \
     finished_at = CASE WHEN cancel_requested THEN NULL ELSE $11 END, updated_at = $12, unwind_reason = $30, \
     lease_owner = CASE WHEN cancel_requested THEN lease_owner END, \
     lease_expires_at = CASE WHEN cancel_requested THEN lease_expires_at END, \
     attempt_started_at = CASE WHEN cancel_requested THEN $12 END";

/// How many timeline entries a commit adds, read on the run's row `r` (whose `cancel_requested`
/// no commit changes): all of them ($28), or for a [`CommitShape::Finish`] that found a cancel
/// only the step's row, its one entry (the `succeeded` entry is not written).
fn entries(finish: bool, r: &str) -> String {
    if finish { format!("CASE WHEN {r}cancel_requested THEN 1 ELSE $28 END") } else { "$28".to_owned() }
}

/// What a [`CommitShape::Finish`] adds to the condition on which its event rows are written,
/// `NOT {r}cancel_requested`: the run ended. Other commits write theirs whenever the run's row
/// matched the fence.
fn ended(finish: bool, keyword: &str, r: &str) -> String {
    if finish { format!(" {keyword} NOT {r}cancel_requested") } else { String::new() }
}

/// The commit on PostgreSQL: data-modifying CTEs run as one atomic statement, in one round
/// trip; the step row and the events are written only if the fenced UPDATE matched. The run's
/// timeline counter grows by the entries written ($28: the events, plus the step row when $29,
/// a forward step that succeeded, which is its own `step-succeeded` entry); `base` is the
/// counter before them.
fn commit_postgres(set: &str, finish: bool) -> String {
    let grown = entries(finish, "");
    let ended = ended(finish, "WHERE", "run.");
    format!(
        "WITH run AS ( \
           UPDATE engine_runs SET {set}, events = events + {grown} \
           WHERE id = $14 AND lease_generation = $15 AND lease_owner = $16 \
           RETURNING id, cancel_requested, events - {grown} AS base), \
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
           FROM run, jsonb_array_elements($27::jsonb) WITH ORDINALITY AS e(value, position){ended}) \
         SELECT cancel_requested FROM run"
    )
}

/// The same commit on SQLite, as one batch inside a `BEGIN IMMEDIATE` transaction: the fenced
/// UPDATE, then the step row and the events only if it matched. After the UPDATE (which may
/// release the lease) "it matched" reads as: the row still has the claimed generation (every
/// claim increments it) and carries this commit's `updated_at`. The timeline counter before
/// this commit's entries is `events - $28`.
fn commit_sqlite(set: &str, finish: bool) -> String {
    let grown = entries(finish, "");
    let base = format!("r.events - {}", entries(finish, "r."));
    let ended = ended(finish, "AND", "r.");
    format!(
        "UPDATE engine_runs SET {set}, events = events + {grown} \
         WHERE id = $14 AND lease_generation = $15 AND lease_owner = $16; \
         INSERT INTO engine_steps (run_id, phase, idx, name, status, attempts, output, error, started_at, finished_at, n) \
         SELECT $14, $18, $19, $20, $21, $22, $23, $24, $25, $26, CASE WHEN $29 THEN {base} + 1 END \
         FROM engine_runs r WHERE $17 AND changes() = 1 AND r.id = $14 \
         ON CONFLICT (run_id, phase, idx) DO UPDATE SET name = excluded.name, status = excluded.status, \
           attempts = excluded.attempts, output = excluded.output, error = excluded.error, \
           started_at = excluded.started_at, finished_at = excluded.finished_at, n = excluded.n; \
         INSERT INTO engine_events (run_id, n, at, kind, step, message) \
         SELECT $14, {base} + CASE WHEN $29 THEN 1 ELSE 0 END + e.key + 1, $12, \
           e.value ->> 'kind', e.value ->> 'step', e.value ->> 'message' \
         FROM engine_runs r, json_each($27) AS e \
         WHERE r.id = $14 AND r.lease_generation = $15 AND r.updated_at = $12{ended}; \
         SELECT cancel_requested FROM engine_runs WHERE id = $14 AND lease_generation = $15 AND updated_at = $12"
    )
}

// A wait's `waiting` entry repeats the run's latest entry when that is a waiting of the same
// step ($31), or when the latest is the `claimed` entry of the claim that resumed such a
// waiting (the first check after an engine took the run). Then that entry is updated instead of
// a new one written: its count grows, `at` and the message ($32) become the latest check's, and
// `first_at` keeps when the run began waiting there. It keeps its position if it was the latest
// entry and its condition is unchanged (the counter does not grow); otherwise it moves to the
// next position, so that a follower reading `after=N` sees the new condition. Anything else
// between two checks (a signal, an operator's action) starts a new entry.

/// A wait on PostgreSQL, as one statement. `latest` is the entry to repeat as the statement's
/// snapshot has it, with the counter it saw (`base`); the counter's UPDATE, which holds the
/// run's row until the end, repeats it only if the counter is still `base` (no entry was added
/// meanwhile).
fn wait_postgres() -> String {
    format!(
        "WITH latest AS ( \
           SELECT e.n, r.events AS base, e.n = r.events AND e.message = $32 AS same \
           FROM engine_runs r JOIN engine_events e ON e.run_id = r.id \
           WHERE r.id = $14 AND e.kind = 'waiting' AND e.step = $31 \
             AND (e.n = r.events OR (e.n = r.events - 1 AND EXISTS ( \
               SELECT 1 FROM engine_events c WHERE c.run_id = r.id AND c.n = r.events AND c.kind = 'claimed')))), \
         run AS ( \
           UPDATE engine_runs SET {SET_ALL}, \
             events = events + CASE WHEN (SELECT same FROM latest WHERE latest.base = engine_runs.events) \
                                    THEN 0 ELSE 1 END \
           WHERE id = $14 AND lease_generation = $15 AND lease_owner = $16 \
           RETURNING id, cancel_requested, events), \
         repeated AS ( \
           UPDATE engine_events e SET n = run.events, at = $12, message = $32, count = e.count + 1, \
             first_at = coalesce(e.first_at, e.at) \
           FROM run, latest \
           WHERE e.run_id = run.id AND e.n = latest.n \
             AND run.events = latest.base + CASE WHEN latest.same THEN 0 ELSE 1 END \
           RETURNING e.n), \
         added AS ( \
           INSERT INTO engine_events (run_id, n, at, kind, step, message) \
           SELECT run.id, run.events, $12, 'waiting', $31, $32 FROM run WHERE NOT EXISTS (SELECT 1 FROM repeated)) \
         SELECT cancel_requested FROM run"
    )
}

/// The same wait on SQLite, as statements run in order in one transaction (which excludes every
/// other writer): the counter grows unless the latest entry is this waiting with the same
/// condition; then that entry is updated in place, or the entry to repeat is moved to the new
/// last position, or else a new entry is written there. "The run's row matched the fence" reads
/// as in [`commit_sqlite`] (`FENCED` is then the counter after the UPDATE).
fn wait_sqlite() -> String {
    const FENCED: &str =
        "SELECT events FROM engine_runs WHERE id = $14 AND lease_generation = $15 AND updated_at = $12";
    format!(
        "UPDATE engine_runs SET {SET_ALL}, \
           events = events + CASE WHEN EXISTS ( \
             SELECT 1 FROM engine_events e WHERE e.run_id = engine_runs.id AND e.n = engine_runs.events \
               AND e.kind = 'waiting' AND e.step = $31 AND e.message = $32) THEN 0 ELSE 1 END \
         WHERE id = $14 AND lease_generation = $15 AND lease_owner = $16; \
         UPDATE engine_events SET at = $12, count = count + 1 \
         WHERE run_id = $14 AND n = ({FENCED}) AND kind = 'waiting' AND step = $31 AND message = $32; \
         UPDATE engine_events SET n = ({FENCED}), at = $12, message = $32, count = count + 1, \
           first_at = coalesce(first_at, at) \
         WHERE run_id = $14 AND kind = 'waiting' AND step = $31 \
           AND NOT EXISTS (SELECT 1 FROM engine_events WHERE run_id = $14 AND n = ({FENCED})) \
           AND (n = ({FENCED}) - 1 OR (n = ({FENCED}) - 2 AND EXISTS ( \
             SELECT 1 FROM engine_events c WHERE c.run_id = $14 AND c.n = ({FENCED}) - 1 AND c.kind = 'claimed'))); \
         INSERT INTO engine_events (run_id, n, at, kind, step, message) \
         SELECT $14, r.events, $12, 'waiting', $31, $32 FROM engine_runs r \
         WHERE r.id = $14 AND r.lease_generation = $15 AND r.updated_at = $12 \
           AND NOT EXISTS (SELECT 1 FROM engine_events WHERE run_id = $14 AND n = r.events); \
         SELECT cancel_requested FROM engine_runs WHERE id = $14 AND lease_generation = $15 AND updated_at = $12"
    )
}

/// SQLite's commit statements of each [`CommitShape`] one by one, split once: the checkpoint
/// writer thread (`writer.rs`) prepares and runs each on its own.
pub(super) static SQLITE_STATEMENTS: LazyLock<[Vec<&'static str>; 4]> = LazyLock::new(|| {
    COMMIT_SQL[1].each_ref().map(|sql| sql.split(';').map(str::trim).filter(|sql| !sql.is_empty()).collect())
});

/// The commit statements, built once: [postgres, sqlite] × [`CommitShape`].
pub(super) static COMMIT_SQL: LazyLock<[[String; 4]; 2]> = LazyLock::new(|| {
    [
        [
            commit_postgres(SET_ALL, false),
            commit_postgres(SET_ADVANCE, false),
            wait_postgres(),
            commit_postgres(SET_FINISH, true),
        ],
        [
            commit_sqlite(SET_ALL, false),
            commit_sqlite(SET_ADVANCE, false),
            wait_sqlite(),
            commit_sqlite(SET_FINISH, true),
        ],
    ]
});
