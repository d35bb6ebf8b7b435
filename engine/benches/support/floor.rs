//! The floor under the engine's throughput at concurrency 1: the writes the engine makes for
//! one run of [`STEPS`] steps, made by a bare client with no engine.
//!
//! One run is the engine's 11 commits: the submit with its `submitted` entry, nine checkpoints
//! that advance (the run's row rewritten in place, the step's row inserted), and the last one,
//! which ends the run (its status, due time and lease change, so its indexes do too) with its
//! `succeeded` entry. The statements follow those of `engine/src/store/submit.rs` and
//! `engine/src/store/commit_sql.rs` (the advance and finish shapes, without the fence's cases
//! that never happen here): they write the same rows, so the same pages per commit, into a
//! database with the engine's own schema (migrated by the store itself), with no engine, no
//! driver and no wake-ups around them.
//!
//! - On SQLite ([`SqliteFloor`]): rusqlite on the same bundled SQLite, one thread, statements
//!   prepared once, the store's settings, each commit a `BEGIN IMMEDIATE ... COMMIT` as the
//!   engine's writer thread makes it, on a file of its own (`floor.db`).
//! - On PostgreSQL ([`PostgresFloor`]): one sqlx connection to a schema of its own, each commit
//!   one statement of data-modifying CTEs, as the engine sends it.
//!
//! Read against the bare commits (one short row per commit) this says what the engine's own
//! writes cost; the engine's durable steps/s over it says how much of that the engine keeps.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use sqlx::PgConnection;

use super::machine::{Cpu, now_ms};
use super::raw_sqlite::connect;
use super::{Res, STEPS, Sample};

/// The lease owner the runs are submitted under (the floor is the only writer of its database).
const OWNER: &str = "bench-floor";

/// `engine/src/store/submit.rs`: the run, started at once by its owner ($1 id, $2 input, $3 now,
/// $4 the lease's expiry, $5 the owner).
const INSERT_RUN: &str = "INSERT INTO engine_runs (id, kind, version, resource_key, input, status, phase, \
     step_index, current_step, attempt, next_at, lease_owner, lease_expires_at, lease_generation, created_at, \
     updated_at, events, attempt_started_at) \
     VALUES ($1, 'bench.noop', 1, NULL, $2, 'running', 'forward', 0, 's0', 0, $3, $5, $4, 1, $3, $3, 1, $3)";

/// `CommitShape::Advance`: no indexed column changes ($2 steps done, $3 the next step, $4 now).
const SET_ADVANCE: &str = "step_index = $2, current_step = $3, attempt = 0, step_started_at = NULL, \
     status_reason = NULL, error = NULL, updated_at = $4, attempt_started_at = $4, events = events + 1";

/// `CommitShape::Finish` with no cancel recorded: the run ends `succeeded`, its lease goes, and
/// its two entries (the step's and `succeeded`) are counted.
const SET_FINISH: &str = "status = 'succeeded', phase = 'forward', step_index = $2, current_step = $3, \
     attempt = 0, step_started_at = NULL, next_at = $4, status_reason = NULL, error = NULL, output = '0', \
     finished_at = $4, updated_at = $4, lease_owner = NULL, lease_expires_at = NULL, attempt_started_at = NULL, \
     events = events + 2";

/// The fence every checkpoint's UPDATE carries ($1 id, $5 the owner).
const FENCE: &str = "WHERE id = $1 AND lease_generation = 1 AND lease_owner = $5";

/// The step's row (its own `step-succeeded` entry): $1 run, $4 now, $6 index, $7 name, $8 its
/// timeline position.
const STEP: &str = "INSERT INTO engine_steps (run_id, phase, idx, name, status, attempts, output, error, \
     started_at, finished_at, n) VALUES ($1, 'forward', $6, $7, 'succeeded', 1, 'null', NULL, $4, $4, $8)";

/// The run's `submitted` entry, number 1 of its timeline ($1 id, $3 now, $5 the owner).
const SUBMITTED: &str = "INSERT INTO engine_events (run_id, n, at, kind, step, message) \
     VALUES ($1, 1, $3, 'submitted', NULL, 'bench.noop v1 submitted; started at once by ' || $5)";

/// The run's `succeeded` entry ($1 id, $4 now, $9 its position).
const SUCCEEDED: &str = "INSERT INTO engine_events (run_id, n, at, kind, step, message) VALUES ($1, $9, $4, 'succeeded', NULL, 'succeeded')";

/// What every checkpoint reads back: whether a cancel is recorded ($1 id).
const ANSWER: &str = "SELECT cancel_requested FROM engine_runs WHERE id = $1";

/// Runs that ended as the engine ends them: `succeeded`, unleased, with all 12 timeline entries
/// (submitted, ten steps, succeeded). The floor checks that every run it made is one.
const ENDED: &str = "SELECT count(*) FROM engine_runs \
     WHERE status = 'succeeded' AND step_index = 10 AND lease_owner IS NULL AND events = 12";

// ---------------------------------------------------------------------------------------------
// SQLite

/// The floor on SQLite: a file with the engine's schema.
#[derive(Debug, Clone)]
pub struct SqliteFloor {
    path: PathBuf,
}

impl SqliteFloor {
    /// The file at `path`, already created and migrated by the engine's store.
    pub fn new(path: &Path) -> Self {
        Self { path: path.to_owned() }
    }

    /// Runs of [`STEPS`] steps, one after another on one thread, through a warm-up and a
    /// measured window: the latency of each run (its 11 commits) that ends inside the window.
    /// Blocks the calling thread.
    pub fn runs(&self, warmup: Duration, window: Duration) -> Res<Sample> {
        let conn = connect(&self.path)?;
        let mut timed = Window::new(warmup, window);
        while let Some(began) = timed.next_began() {
            run(&conn)?;
            timed.ended(began);
        }
        let sample = timed.sample();
        let (made, ended): (i64, i64) =
            conn.query_row(&format!("SELECT (SELECT count(*) FROM engine_runs), ({ENDED})"), [], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?;
        ended_as_the_engine_ends(made, ended)?;
        Ok(sample)
    }
}

/// One run's commits, in the engine's order.
fn run(conn: &Connection) -> rusqlite::Result<()> {
    let id = uuid::Uuid::new_v4().to_string();
    let now = now_ms();
    transaction(conn, || {
        let expires = now + 60_000;
        let run_values = named(&[("$1", &id), ("$2", &"0"), ("$3", &now), ("$4", &expires), ("$5", &OWNER)]);
        conn.prepare_cached(INSERT_RUN)?.execute(run_values.as_slice())?;
        conn.prepare_cached(SUBMITTED)?.execute(named(&[("$1", &id), ("$3", &now), ("$5", &OWNER)]).as_slice())?;
        Ok(())
    })?;
    let advance = format!("UPDATE engine_runs SET {SET_ADVANCE} {FENCE}");
    let finish = format!("UPDATE engine_runs SET {SET_FINISH} {FENCE}");
    for index in 0..STEPS as i64 {
        let now = now_ms();
        let last = index + 1 == STEPS as i64;
        let next = (!last).then(|| format!("s{}", index + 1));
        let (name, done, position, ended) = (format!("s{index}"), index + 1, index + 2, STEPS as i64 + 2);
        transaction(conn, || {
            let update = if last { &finish } else { &advance };
            let run_values = named(&[("$1", &id), ("$2", &done), ("$3", &next), ("$4", &now), ("$5", &OWNER)]);
            conn.prepare_cached(update)?.execute(run_values.as_slice())?;
            let step_values = named(&[("$1", &id), ("$4", &now), ("$6", &index), ("$7", &name), ("$8", &position)]);
            conn.prepare_cached(STEP)?.execute(step_values.as_slice())?;
            if last {
                let succeeded_values = named(&[("$1", &id), ("$4", &now), ("$9", &ended)]);
                conn.prepare_cached(SUCCEEDED)?.execute(succeeded_values.as_slice())?;
            }
            conn.prepare_cached(ANSWER)?.query_row(named(&[("$1", &id)]).as_slice(), |row| row.get::<_, bool>(0))?;
            Ok(())
        })?;
    }
    Ok(())
}

/// Parameters bound by name (`$N`), as the engine's writer thread binds them: SQLite numbers
/// `$N` parameters in the order they first appear, not by `N`.
fn named<'a>(values: &[(&'a str, &'a dyn rusqlite::ToSql)]) -> Vec<(&'a str, &'a dyn rusqlite::ToSql)> {
    values.to_vec()
}

/// `body` inside `BEGIN IMMEDIATE ... COMMIT`, as the engine's writer thread commits.
fn transaction(conn: &Connection, body: impl FnOnce() -> rusqlite::Result<()>) -> rusqlite::Result<()> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    body()?;
    conn.prepare_cached("COMMIT")?.execute([])?;
    Ok(())
}

/// The timing of runs made one after another through a warm-up and a measured window: the
/// latency of each run that ends inside the window, and the CPU used from its start.
struct Window {
    start: Instant,
    end: Instant,
    latencies: Vec<Duration>,
    cpu_from: Option<Cpu>,
}

impl Window {
    fn new(warmup: Duration, window: Duration) -> Self {
        let start = Instant::now() + warmup;
        Self { start, end: start + window, latencies: Vec::new(), cpu_from: None }
    }

    /// When the next run begins, or `None` once the window has closed.
    fn next_began(&mut self) -> Option<Instant> {
        let began = Instant::now();
        if began >= self.start && self.cpu_from.is_none() {
            self.cpu_from = Some(Cpu::now());
        }
        (began < self.end).then_some(began)
    }

    /// A run that began at `began` has ended.
    fn ended(&mut self, began: Instant) {
        let ended = Instant::now();
        if ended >= self.start && ended < self.end {
            self.latencies.push(ended - began);
        }
    }

    fn sample(self) -> Sample {
        let window = self.end - self.start;
        let (cpu_process, cpu_machine) = self.cpu_from.unwrap_or_else(Cpu::now).used(Cpu::now(), window);
        Sample { latencies: self.latencies, window, cpu_process, cpu_machine }
    }
}

/// Every run the floor made ended as the engine ends one, or its figure is not the engine's
/// writes.
fn ended_as_the_engine_ends(made: i64, ended: i64) -> Res<()> {
    if made == 0 || ended != made {
        return Err(format!("the floor made {made} runs and {ended} of them ended as the engine ends a run").into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// The floor on PostgreSQL: one connection to a schema with the engine's tables.
pub struct PostgresFloor {
    conn: PgConnection,
}

impl PostgresFloor {
    /// The floor on `conn`, whose `search_path` is a schema migrated by the engine's store.
    pub fn new(conn: PgConnection) -> Self {
        Self { conn }
    }

    /// Runs of [`STEPS`] steps, one after another, through a warm-up and a measured window: the
    /// latency of each run (its 11 statements) that ends inside the window.
    pub async fn runs(&mut self, warmup: Duration, window: Duration) -> Res<Sample> {
        let mut timed = Window::new(warmup, window);
        while let Some(began) = timed.next_began() {
            pg_run(&mut self.conn).await?;
            timed.ended(began);
        }
        let sample = timed.sample();
        let (made, ended): (i64, i64) =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT (SELECT count(*) FROM engine_runs), ({ENDED})")))
                .fetch_one(&mut self.conn)
                .await?;
        ended_as_the_engine_ends(made, ended)?;
        Ok(sample)
    }
}

/// One run's statements, each its own commit, as the engine sends them: the submit and each
/// checkpoint one statement of data-modifying CTEs.
async fn pg_run(conn: &mut PgConnection) -> Res<()> {
    let id = uuid::Uuid::new_v4().to_string();
    let now = now_ms();
    let submit = format!(
        "WITH run AS ({INSERT_RUN} RETURNING id) \
         INSERT INTO engine_events (run_id, n, at, kind, step, message) \
         SELECT id, 1, $3, 'submitted', NULL, 'bench.noop v1 submitted; started at once by ' || $5 FROM run"
    );
    sqlx::query(sqlx::AssertSqlSafe(submit))
        .bind(&id)
        .bind("0")
        .bind(now)
        .bind(now + 60_000)
        .bind(OWNER)
        .execute(&mut *conn)
        .await?;
    for index in 0..STEPS as i64 {
        let now = now_ms();
        let last = index + 1 == STEPS as i64;
        let next = (!last).then(|| format!("s{}", index + 1));
        let set = if last { SET_FINISH } else { SET_ADVANCE };
        let succeeded = if last {
            "succeeded AS (INSERT INTO engine_events (run_id, n, at, kind, step, message) \
             SELECT run.id, $9, $4, 'succeeded', NULL, 'succeeded' FROM run), "
        } else {
            ""
        };
        let checkpoint = format!(
            "WITH run AS (UPDATE engine_runs SET {set} {FENCE} RETURNING id, cancel_requested), \
             step AS (INSERT INTO engine_steps (run_id, phase, idx, name, status, attempts, output, error, \
               started_at, finished_at, n) \
               SELECT run.id, 'forward', $6, $7, 'succeeded', 1, 'null', NULL, $4, $4, $8 FROM run), \
             {succeeded}answer AS (SELECT cancel_requested FROM run) \
             SELECT cancel_requested FROM answer"
        );
        let query = sqlx::query_scalar(sqlx::AssertSqlSafe(checkpoint))
            .bind(&id)
            .bind(index + 1)
            .bind(next)
            .bind(now)
            .bind(OWNER)
            .bind(index)
            .bind(format!("s{index}"))
            .bind(index + 2);
        // $9, the `succeeded` entry's position, is in the last checkpoint only.
        let query = if last { query.bind(STEPS as i64 + 2) } else { query };
        let answer: Option<bool> = query.fetch_optional(&mut *conn).await?;
        if answer.is_none() {
            return Err(format!("the floor's checkpoint {index} of run {id} matched no run").into());
        }
    }
    Ok(())
}
