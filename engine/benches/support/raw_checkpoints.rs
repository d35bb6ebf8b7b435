//! The floor under the engine's throughput on SQLite at concurrency 1: the writes the engine
//! makes for one run of [`STEPS`] steps, made by a raw client with no engine.
//!
//! One run is the engine's 11 commits: the submit with its `submitted` entry, nine checkpoints
//! that advance (the run's row rewritten in place, the step's row inserted), and the last one,
//! which ends the run (its status, due time and lease change, so its indexes do too) with its
//! `succeeded` entry. A raw client (rusqlite on the same bundled SQLite, one thread, statements
//! prepared once, the store's settings) makes them in a loop on a file of its own that has the
//! engine's schema (`floor.db`, migrated by the store itself), with no async runtime, no thread
//! hand-off and no engine around them. The statements follow those of
//! `engine/src/store/submit.rs` and `engine/src/store/commit_sql.rs` (the advance and finish
//! shapes, without the fence's cases that never happen here): they write the same rows, so the
//! same b-tree pages and WAL frames per commit.
//!
//! Read against the raw bare commits (one short row per commit) this says what the engine's own
//! writes cost on this disk; the engine's durable steps/s over it says how much of that the
//! engine keeps.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

use super::machine::{Cpu, now_ms};
use super::raw_sqlite::connect;
use super::{Res, STEPS, Sample};

/// The lease owner the runs are submitted under (the raw client is the only writer).
const OWNER: &str = "bench-floor";

/// `engine/src/store/submit.rs`: the run, started at once by its owner ($1 id, $2 input, $3 now,
/// $4 the lease's expiry, $5 the owner).
const SUBMIT: &str = "INSERT INTO engine_runs (id, kind, version, resource_key, input, status, phase, step_index, \
     current_step, attempt, next_at, lease_owner, lease_expires_at, lease_generation, created_at, updated_at, events, \
     attempt_started_at) \
     VALUES ($1, 'bench.noop', 1, NULL, $2, 'running', 'forward', 0, 's0', 0, $3, $5, $4, 1, $3, $3, 1, $3)";

/// The run's `submitted` entry, number 1 of its timeline ($1 id, $2 now, $3 the owner).
const SUBMITTED: &str = "INSERT INTO engine_events (run_id, n, at, kind, step, message) \
     VALUES ($1, 1, $2, 'submitted', NULL, 'bench.noop v1 submitted; started at once by ' || $3)";

/// `CommitShape::Advance`: no indexed column changes ($1 id, $2 steps done, $3 the next step,
/// $4 now, $5 the owner).
const ADVANCE: &str = "UPDATE engine_runs SET step_index = $2, current_step = $3, attempt = 0, \
     step_started_at = NULL, status_reason = NULL, error = NULL, updated_at = $4, attempt_started_at = $4, \
     events = events + 1 \
     WHERE id = $1 AND lease_generation = 1 AND lease_owner = $5";

/// `CommitShape::Finish` with no cancel recorded: the run ends `succeeded`, its lease goes, and
/// its two entries (the step's and `succeeded`) are counted ($1-$5 as [`ADVANCE`]).
const FINISH: &str = "UPDATE engine_runs SET status = 'succeeded', phase = 'forward', step_index = $2, \
     current_step = $3, attempt = 0, step_started_at = NULL, next_at = $4, status_reason = NULL, error = NULL, \
     output = '0', finished_at = $4, updated_at = $4, lease_owner = NULL, lease_expires_at = NULL, \
     attempt_started_at = NULL, events = events + 2 \
     WHERE id = $1 AND lease_generation = 1 AND lease_owner = $5";

/// The step's row, its own `step-succeeded` entry ($1 id, $2 index, $3 name, $4 now, $5 its
/// timeline position).
const STEP: &str = "INSERT INTO engine_steps (run_id, phase, idx, name, status, attempts, output, error, \
     started_at, finished_at, n) VALUES ($1, 'forward', $2, $3, 'succeeded', 1, 'null', NULL, $4, $4, $5)";

/// The run's `succeeded` entry ($1 id, $2 its position, $3 now).
const SUCCEEDED: &str = "INSERT INTO engine_events (run_id, n, at, kind, step, message) \
     VALUES ($1, $2, $3, 'succeeded', NULL, 'succeeded')";

/// What every checkpoint reads back: whether a cancel is recorded.
const ANSWER: &str = "SELECT cancel_requested FROM engine_runs WHERE id = $1";

/// The raw client's file with the engine's schema.
#[derive(Debug, Clone)]
pub struct RawCheckpoints {
    path: PathBuf,
}

impl RawCheckpoints {
    /// The file at `path`, already created and migrated by the engine's store.
    pub fn new(path: &Path) -> Self {
        Self { path: path.to_owned() }
    }

    /// Runs of [`STEPS`] steps, one after another on one thread, through a warm-up and a
    /// measured window: the latency of each run (its 11 commits) that ends inside the window.
    /// Blocks the calling thread.
    pub fn runs(&self, warmup: Duration, window: Duration) -> Res<Sample> {
        let conn = connect(&self.path)?;
        let start = Instant::now() + warmup;
        let end = start + window;
        let mut latencies = Vec::new();
        let mut first = None;
        loop {
            let began = Instant::now();
            if began >= end {
                break;
            }
            if began >= start && first.is_none() {
                first = Some(Cpu::now());
            }
            run(&conn)?;
            let ended = Instant::now();
            if ended >= start && ended < end {
                latencies.push(ended - began);
            }
        }
        let (cpu_process, cpu_machine) = first.unwrap_or_else(Cpu::now).used(Cpu::now(), end - start);
        Ok(Sample { latencies, window: end - start, cpu_process, cpu_machine })
    }
}

/// One run's commits, in the engine's order.
fn run(conn: &Connection) -> rusqlite::Result<()> {
    let id = uuid::Uuid::new_v4().to_string();
    let now = now_ms();
    transaction(conn, || {
        conn.prepare_cached(SUBMIT)?.execute(params![id, "0", now, now + 60_000, OWNER])?;
        conn.prepare_cached(SUBMITTED)?.execute(params![id, now, OWNER])?;
        Ok(())
    })?;
    for index in 0..STEPS as i64 {
        let now = now_ms();
        let last = index + 1 == STEPS as i64;
        let (update, next) = if last { (FINISH, None) } else { (ADVANCE, Some(format!("s{}", index + 1))) };
        transaction(conn, || {
            conn.prepare_cached(update)?.execute(params![id, index + 1, next, now, OWNER])?;
            conn.prepare_cached(STEP)?.execute(params![id, index, format!("s{index}"), now, index + 2])?;
            if last {
                conn.prepare_cached(SUCCEEDED)?.execute(params![id, STEPS as i64 + 2, now])?;
            }
            conn.prepare_cached(ANSWER)?.query_row([&id], |row| row.get::<_, bool>(0))?;
            Ok(())
        })?;
    }
    Ok(())
}

/// `body` inside `BEGIN IMMEDIATE ... COMMIT`, as the engine's writer thread commits.
fn transaction(conn: &Connection, body: impl FnOnce() -> rusqlite::Result<()>) -> rusqlite::Result<()> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    body()?;
    conn.prepare_cached("COMMIT")?.execute([])?;
    Ok(())
}
