//! The durable store: SQLite (WAL, the embedded default) or PostgreSQL, through sqlx.
//!
//! Both databases run the same SQL text (sqlx binds `$1` on both); where they differ (row
//! locks, advisory locks, how a write transaction begins) the difference is named at the
//! point of use. Every state change of a run is one transaction that names the lease
//! generation it was claimed under, so a worker that lost its lease writes nothing.

mod commit_args;
mod group_commit;
mod records;
mod self_commit;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, FromRow, Postgres, Row, Sqlite, Transaction};
use uuid::Uuid;

use commit_args::{CommitArgs, bind_commit};
use group_commit::GroupCommit;
pub(crate) use records::{Claimed, Commit, CommitOutcome, NewEvent};
pub use records::{EventRecord, Lease, Millis, RunFilter, RunRecord, StepRecord};
use records::{EventRow, RUN_COLUMNS, RunRow, StepRow, parse_json, parse_status, to_json};
use self_commit::self_commit;

use crate::error::EngineError;
use crate::status::{Phase, RunStatus};

/// The workflow store. Cheap to clone: it is a connection pool.
#[derive(Clone, Debug)]
pub struct Store {
    /// Every write, and the domain's queries.
    pool: Pool,
    /// The engine's own reads (inspection, outputs, signals). On SQLite a separate read-only
    /// pool, so that reads never queue behind the single writer connection; on PostgreSQL the
    /// same pool.
    reader: Pool,
    /// On SQLite, the task that commits many drivers' checkpoints in one transaction.
    group_commit: Option<GroupCommit>,
}

/// The store's connection pool. The domain keeps its own tables in the same database and
/// reaches them through [`with_pool!`](crate::with_pool).
#[derive(Clone, Debug)]
pub enum Pool {
    /// An embedded SQLite database.
    Sqlite(SqlitePool),
    /// A PostgreSQL server.
    Postgres(PgPool),
}

/// A write transaction on either database; see [`with_tx!`](crate::with_tx).
pub enum WriteTx {
    /// On SQLite (begun `IMMEDIATE`).
    Sqlite(Transaction<'static, Sqlite>),
    /// On PostgreSQL.
    Postgres(Transaction<'static, Postgres>),
}

impl WriteTx {
    /// Commits the transaction.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Self::Sqlite(tx) => tx.commit().await,
            Self::Postgres(tx) => tx.commit().await,
        }
    }

    /// Whether this is a PostgreSQL transaction.
    pub fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }
}

/// Runs `$body` with `$pool` bound to whichever pool a [`Pool`] holds. Both databases take the
/// same SQL text (sqlx binds `$1` on both), so the body is written once.
#[macro_export]
macro_rules! with_pool {
    ($pool_ref:expr, |$pool:ident| $body:expr) => {
        match $pool_ref {
            $crate::store::Pool::Sqlite($pool) => $body,
            $crate::store::Pool::Postgres($pool) => $body,
        }
    };
}

/// Runs `$body` with `$tx` bound to the `&mut Transaction` a [`WriteTx`] holds; execute on
/// `&mut **$tx`.
#[macro_export]
macro_rules! with_tx {
    ($write_tx:expr, |$tx:ident| $body:expr) => {
        match $write_tx {
            $crate::store::WriteTx::Sqlite($tx) => $body,
            $crate::store::WriteTx::Postgres($tx) => $body,
        }
    };
}

/// Starts a transaction that will write. SQLite takes its write lock at once (`BEGIN
/// IMMEDIATE`), so that a transaction that reads first never deadlocks on upgrading its lock.
trait BeginWrite {
    type Db: sqlx::Database;
    async fn begin_write(&self) -> Result<Transaction<'static, Self::Db>, sqlx::Error>;
}

impl BeginWrite for SqlitePool {
    type Db = Sqlite;
    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        self.begin_with("BEGIN IMMEDIATE").await
    }
}

impl BeginWrite for PgPool {
    type Db = Postgres;
    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin().await
    }
}

/// A run to insert.
pub(crate) struct NewRun<'a> {
    pub(crate) id: Uuid,
    pub(crate) kind: &'a str,
    pub(crate) version: u32,
    pub(crate) resource_key: Option<&'a str>,
    pub(crate) input: &'a Value,
    pub(crate) first_step: Option<&'a str>,
    pub(crate) now: Millis,
}

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

/// Inserts a run and returns it; its `submitted` event is to be entry 1 of its timeline.
/// Parameters: $1 id, $2 kind, $3 version, $4 resource key, $5 input, $6 status, $7 first step,
/// $8 now, $9-$10 lease owner and expiry, $11 generation.
static INSERT_RUN: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "INSERT INTO engine_runs (id, kind, version, resource_key, input, status, phase, step_index, \
           current_step, attempt, next_at, lease_owner, lease_expires_at, lease_generation, \
           created_at, updated_at, events) \
         VALUES ($1, $2, $3, $4, $5, $6, 'forward', 0, $7, 0, $8, $9, $10, $11, $8, $8, 1) \
         RETURNING {RUN_COLUMNS}"
    )
});

/// [`INSERT_RUN`] and its `submitted` event ($12: the message) in one round trip:
/// [PostgreSQL (one statement), SQLite (one self-committing batch)].
static SUBMIT_SQL: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
    let insert = INSERT_RUN.as_str();
    [
        format!(
            "WITH run AS ({insert}), \
             submitted AS (INSERT INTO engine_events (run_id, n, at, kind, step, message) \
                           SELECT id, 1, $8, 'submitted', NULL, $12 FROM run) \
             SELECT {RUN_COLUMNS} FROM run"
        ),
        format!(
            "BEGIN IMMEDIATE; {insert}; \
             INSERT INTO engine_events (run_id, n, at, kind, step, message) VALUES ($1, 1, $8, 'submitted', NULL, $12); \
             COMMIT"
        ),
    ]
});

/// Binds a [`NewRun`] and its lease to the parameters of [`INSERT_RUN`].
macro_rules! bind_new_run {
    ($query:expr, $run:expr, $lease:expr) => {{
        let (run, lease): (&NewRun<'_>, Option<&Lease>) = ($run, $lease);
        $query
            .bind(run.id.to_string())
            .bind(run.kind.to_owned())
            .bind(i64::from(run.version))
            .bind(run.resource_key.map(str::to_owned))
            .bind(to_json(run.input))
            .bind(if lease.is_some() { RunStatus::Running } else { RunStatus::Pending }.as_str())
            .bind(run.first_step.map(str::to_owned))
            .bind(run.now)
            .bind(lease.map(|lease| lease.owner.clone()))
            .bind(lease.map(|lease| lease.expires_at))
            .bind(i64::from(lease.is_some()))
    }};
}

const CLAIM_CANDIDATES: &str = "SELECT seq, lease_owner FROM engine_runs r \
     WHERE r.finished_at IS NULL AND r.status <> 'needs-attention' AND r.next_at <= $1 \
       AND (r.lease_owner IS NULL OR r.lease_expires_at < $1) \
       AND (r.resource_key IS NULL OR NOT EXISTS ( \
            SELECT 1 FROM engine_runs p \
            WHERE p.resource_key = r.resource_key AND p.finished_at IS NULL AND p.seq < r.seq)) \
     ORDER BY r.next_at, r.seq LIMIT $2";

/// The columns a commit sets. Parameters: run state $1-$13, fence $14-$16, step $17-$26 ($17:
/// whether there is one), events $27, timeline entries $28-$29.
const SET_ALL: &str = "status = $1, phase = $2, step_index = $3, current_step = $4, attempt = $5, \
     step_started_at = $6, next_at = $7, status_reason = $8, error = $9, output = $10, finished_at = $11, \
     updated_at = $12, lease_owner = CASE WHEN $13 THEN NULL ELSE lease_owner END, \
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
pub(crate) static SQLITE_SELF_COMMIT: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
    [SET_ALL, SET_ADVANCE].map(|set| format!("BEGIN IMMEDIATE; {}; COMMIT", commit_sqlite(set)))
});

/// The four commit statements, built once: [postgres, sqlite] × [all, advance].
static COMMIT_SQL: std::sync::LazyLock<[[String; 2]; 2]> = std::sync::LazyLock::new(|| {
    [[commit_postgres(SET_ALL), commit_postgres(SET_ADVANCE)], [commit_sqlite(SET_ALL), commit_sqlite(SET_ADVANCE)]]
});

impl Store {
    /// Opens the store named by `url` (`sqlite://PATH` or `postgres://...`) and brings its
    /// schema up to date.
    pub async fn connect(url: &str) -> Result<Self, EngineError> {
        if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?;
            Self::open_sqlite(options).await
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::open_postgres(PgConnectOptions::from_str(url)?, 16).await
        } else {
            Err(EngineError::UnsupportedUrl(url.to_owned()))
        }
    }

    /// Opens (creating if needed) the SQLite database at `path`.
    pub async fn sqlite(path: &Path) -> Result<Self, EngineError> {
        Self::open_sqlite(SqliteConnectOptions::new().filename(path)).await
    }

    /// Opens SQLite with these options, adding the engine's: WAL, a full sync on every
    /// commit (an acknowledged checkpoint survives power loss too), and a busy timeout.
    pub async fn open_sqlite(options: SqliteConnectOptions) -> Result<Self, EngineError> {
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        // One connection: SQLite has one writer at a time anyway, and queueing writers in the
        // pool (first come, first served) beats SQLite's busy handler, which sleeps up to 100 ms.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await?;
        let mut migrator = sqlx::migrate!("./migrations/sqlite");
        migrator.set_ignore_missing(true);
        migrator.run(&pool).await.map_err(EngineError::Migrate)?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.read_only(true))
            .await?;
        let group_commit = Some(GroupCommit::start(pool.clone()));
        Ok(Self { pool: Pool::Sqlite(pool), reader: Pool::Sqlite(reader), group_commit })
    }

    /// Opens PostgreSQL with these options and a pool of `max_connections`.
    pub async fn open_postgres(options: PgConnectOptions, max_connections: u32) -> Result<Self, EngineError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .test_before_acquire(false)
            .connect_with(options)
            .await?;
        let mut migrator = sqlx::migrate!("./migrations/postgres");
        migrator.set_ignore_missing(true);
        migrator.run(&pool).await.map_err(EngineError::Migrate)?;
        Ok(Self { pool: Pool::Postgres(pool.clone()), reader: Pool::Postgres(pool), group_commit: None })
    }

    /// `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    /// The connection pool, for the domain's own tables.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The SQLite pool, if the store is on SQLite.
    pub fn sqlite_pool(&self) -> Option<&SqlitePool> {
        match &self.pool {
            Pool::Sqlite(pool) => Some(pool),
            Pool::Postgres(_) => None,
        }
    }

    /// The PostgreSQL pool, if the store is on PostgreSQL.
    pub fn postgres_pool(&self) -> Option<&PgPool> {
        match &self.pool {
            Pool::Postgres(pool) => Some(pool),
            Pool::Sqlite(_) => None,
        }
    }

    /// Begins a write transaction, in which the domain can write its records and submit runs
    /// (with `Engine::submit_in`) atomically.
    pub async fn begin_write(&self) -> Result<WriteTx, sqlx::Error> {
        Ok(match &self.pool {
            Pool::Sqlite(pool) => WriteTx::Sqlite(pool.begin_write().await?),
            Pool::Postgres(pool) => WriteTx::Postgres(pool.begin_write().await?),
        })
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        with_pool!(&self.pool, |pool| pool.close().await);
        with_pool!(&self.reader, |pool| pool.close().await)
    }

    fn is_postgres(&self) -> bool {
        matches!(self.pool, Pool::Postgres(_))
    }

    /// Inserts a run in `tx`. With `lease`, the run is claimed by that owner at once (an eager
    /// start) unless an earlier unfinished run holds its resource key. Returns the stored run.
    pub(crate) async fn insert_run(
        tx: &mut WriteTx,
        run: &NewRun<'_>,
        lease: Option<&Lease>,
    ) -> Result<RunRecord, sqlx::Error> {
        let postgres = tx.is_postgres();
        with_tx!(tx, |tx| {
            let mut lease = lease;
            if let Some(key) = run.resource_key {
                if postgres {
                    // Submissions under one key commit in the order of their sequence numbers,
                    // so a claimer that sees a run also sees every earlier run of its key.
                    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))::text")
                        .bind(key)
                        .execute(&mut **tx)
                        .await?;
                }
                let busy: Option<i64> = sqlx::query_scalar(
                    "SELECT seq FROM engine_runs WHERE resource_key = $1 AND finished_at IS NULL LIMIT 1",
                )
                .bind(key)
                .fetch_optional(&mut **tx)
                .await?;
                if busy.is_some() {
                    lease = None;
                }
            }
            let row: RunRow =
                bind_new_run!(sqlx::query_as(INSERT_RUN.as_str()), run, lease).fetch_one(&mut **tx).await?;
            // INSERT_RUN set the run's counter to 1.
            let submitted = NewEvent::new("submitted", None, submitted_message(run, lease));
            insert_event(tx, run.id, Entry::Numbered(1), run.now, &submitted).await?;
            row.try_into()
        })
    }

    /// Submits a run with no resource key in one round trip: the run and its `submitted`
    /// event in one statement on PostgreSQL, one self-committing batch on SQLite. With `lease`,
    /// the run is claimed by that owner at once.
    pub(crate) async fn submit_run(&self, run: &NewRun<'_>, lease: Option<&Lease>) -> Result<RunRecord, sqlx::Error> {
        debug_assert!(run.resource_key.is_none(), "a run with a resource key is inserted with insert_run");
        let message = submitted_message(run, lease);
        let row: RunRow = match &self.pool {
            Pool::Postgres(pool) => {
                bind_new_run!(sqlx::query_as(SUBMIT_SQL[0].as_str()), run, lease).bind(message).fetch_one(pool).await?
            }
            Pool::Sqlite(pool) => {
                let submit = bind_new_run!(sqlx::query_as(SUBMIT_SQL[1].as_str()), run, lease).bind(message);
                self_commit(pool, move |conn| {
                    Box::pin(async move {
                        let rows: Vec<RunRow> = submit.fetch_all(conn).await?;
                        rows.into_iter().next().ok_or(sqlx::Error::RowNotFound)
                    })
                })
                .await?
            }
        };
        row.try_into()
    }

    /// Unfinished runs under `resource_key`, oldest first, read inside the caller's transaction
    /// (so that a check "nothing is running on this resource" and the change it guards commit
    /// together).
    pub async fn unfinished_runs_in(
        tx: &mut WriteTx,
        resource_key: &str,
    ) -> Result<Vec<(Uuid, RunStatus)>, sqlx::Error> {
        let rows: Vec<(String, String)> = with_tx!(tx, |tx| {
            sqlx::query_as(
                "SELECT id, status FROM engine_runs WHERE resource_key = $1 AND finished_at IS NULL ORDER BY seq",
            )
            .bind(resource_key)
            .fetch_all(&mut **tx)
            .await
        })?;
        rows.into_iter()
            .map(|(id, status)| {
                let status = parse_status(&status)?;
                Ok((records::parse_uuid(&id)?, status))
            })
            .collect()
    }

    /// Claims up to `limit` runnable runs for `owner` until `lease_until`, writing a `claimed`
    /// event naming `label` (the owner and its process). A run whose previous holder's lease
    /// lapsed counts its interrupted attempt and gets a `recovered` event instead.
    pub(crate) async fn claim(
        &self,
        owner: &str,
        label: &str,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> Result<Vec<Claimed>, sqlx::Error> {
        let candidates_sql = if self.is_postgres() {
            AssertSqlSafe(format!("{CLAIM_CANDIDATES} FOR UPDATE SKIP LOCKED"))
        } else {
            AssertSqlSafe(CLAIM_CANDIDATES.to_owned())
        };
        let update_sql = format!(
            "UPDATE engine_runs SET lease_owner = $1, lease_expires_at = $2, \
               lease_generation = lease_generation + 1, \
               status = CASE WHEN status IN ('pending', 'waiting', 'retrying') THEN 'running' ELSE status END, \
               attempt = CASE WHEN lease_owner IS NOT NULL THEN attempt + 1 ELSE attempt END, \
               updated_at = $3, events = events + 1 \
             WHERE seq = $4 RETURNING {RUN_COLUMNS}, events"
        );
        let runs = with_pool!(&self.pool, |pool| {
            let mut tx = pool.begin_write().await?;
            let candidates: Vec<(i64, Option<String>)> =
                sqlx::query_as(candidates_sql).bind(now).bind(i64::from(limit)).fetch_all(&mut *tx).await?;
            let mut runs = Vec::with_capacity(candidates.len());
            for (seq, previous_owner) in candidates {
                // The claim's event is the run's next timeline entry: its number comes with the row.
                let row = sqlx::query(AssertSqlSafe(update_sql.as_str()))
                    .bind(owner)
                    .bind(lease_until)
                    .bind(now)
                    .bind(seq)
                    .fetch_one(&mut *tx)
                    .await?;
                let entry: i64 = row.try_get("events")?;
                let run = RunRecord::try_from(RunRow::from_row(&row)?)?;
                let recovered = previous_owner.is_some();
                let step = run.current_step.as_deref();
                let event = match previous_owner {
                    Some(previous) => NewEvent::new(
                        "recovered",
                        step,
                        format!(
                            "claimed by {label} after the lease of {previous} lapsed; {} runs again (attempt {})",
                            step.map_or("the run".to_owned(), |step| format!("step `{step}`")),
                            run.attempt + 1
                        ),
                    ),
                    None => NewEvent::new("claimed", step, format!("claimed by {label}")),
                };
                insert_event(&mut tx, run.id, Entry::Numbered(entry), now, &event).await?;
                runs.push((run, recovered));
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(runs)
        })?;
        let mut claimed = Vec::with_capacity(runs.len());
        for (run, recovered) in runs {
            let outputs = self.completed_outputs(run.id).await?;
            claimed.push(Claimed { run, outputs, recovered });
        }
        Ok(claimed)
    }

    /// Outputs of the run's completed forward steps, by position.
    pub(crate) async fn completed_outputs(&self, run_id: Uuid) -> Result<Vec<(u32, String, Value)>, sqlx::Error> {
        let rows: Vec<(i64, String, Option<String>)> = with_pool!(&self.reader, |pool| {
            sqlx::query_as(
                "SELECT idx, name, output FROM engine_steps \
                 WHERE run_id = $1 AND phase = 'forward' AND status = 'succeeded' ORDER BY idx",
            )
            .bind(run_id.to_string())
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter()
            .map(|(idx, name, output)| {
                let output = output.as_deref().map(parse_json).transpose()?.unwrap_or(Value::Null);
                Ok((idx as u32, name, output))
            })
            .collect()
    }

    /// Writes the run's new state, its finished step and its events atomically, if the caller
    /// still holds the lease generation it claimed. This is the engine's hot path (one per
    /// step), so it is one round trip: on PostgreSQL one statement of data-modifying CTEs, on
    /// SQLite one batch of statements inside `BEGIN IMMEDIATE ... COMMIT`.
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

    /// Extends to `until` the leases `owner` holds on `runs` (the runs it is driving now) that
    /// have not lapsed. A lapsed lease is never revived: another engine may be taking it over,
    /// and a run this engine holds but no longer drives must be free to be claimed again.
    pub(crate) async fn heartbeat(
        &self,
        owner: &str,
        runs: &[Uuid],
        now: Millis,
        until: Millis,
    ) -> Result<u64, sqlx::Error> {
        let mut renewed = 0;
        for chunk in runs.chunks(500) {
            let placeholders: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 4)).collect();
            let sql = AssertSqlSafe(format!(
                "UPDATE engine_runs SET lease_expires_at = $2 \
                 WHERE lease_owner = $1 AND lease_expires_at > $3 AND id IN ({})",
                placeholders.join(", ")
            ));
            renewed += with_pool!(&self.pool, |pool| {
                let mut query = sqlx::query(sql).bind(owner).bind(until).bind(now);
                for id in chunk {
                    query = query.bind(id.to_string());
                }
                query.execute(pool).await.map(|done| done.rows_affected())
            })?;
        }
        Ok(renewed)
    }

    /// Lets the leases of a previous incarnation of `owner` lapse at once: it is dead, since
    /// only one live engine may use an owner name. The next claim records the recovery.
    pub(crate) async fn expire_leases_of(&self, owner: &str) -> Result<u64, sqlx::Error> {
        with_pool!(&self.pool, |pool| {
            let done = sqlx::query("UPDATE engine_runs SET lease_expires_at = 0 WHERE lease_owner = $1")
                .bind(owner)
                .execute(pool)
                .await?;
            Ok(done.rows_affected())
        })
    }

    /// Gives up the lease on one run without changing it (a clean stop between steps).
    pub(crate) async fn release(&self, run: &RunRecord, owner: &str) -> Result<(), sqlx::Error> {
        with_pool!(&self.pool, |pool| {
            sqlx::query(
                "UPDATE engine_runs SET lease_owner = NULL, lease_expires_at = NULL \
                 WHERE id = $1 AND lease_generation = $2 AND lease_owner = $3",
            )
            .bind(run.id.to_string())
            .bind(run.lease_generation)
            .bind(owner)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// One run.
    pub async fn run(&self, id: Uuid) -> Result<Option<RunRecord>, sqlx::Error> {
        let sql = AssertSqlSafe(format!("SELECT {RUN_COLUMNS} FROM engine_runs WHERE id = $1"));
        let row: Option<RunRow> =
            with_pool!(&self.reader, |pool| sqlx::query_as(sql).bind(id.to_string()).fetch_optional(pool).await)?;
        row.map(RunRecord::try_from).transpose()
    }

    /// Runs matching `filter`, newest first.
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, sqlx::Error> {
        let mut conditions = Vec::new();
        let mut binds: Vec<String> = Vec::new();
        let mut text_condition = |column: &str, value: &str| {
            binds.push(value.to_owned());
            conditions.push(format!("{column} = ${}", binds.len()));
        };
        if let Some(kind) = &filter.kind {
            text_condition("kind", kind);
        }
        if let Some(status) = filter.status {
            text_condition("status", status.as_str());
        }
        if let Some(key) = &filter.resource_key {
            text_condition("resource_key", key);
        }
        let before = binds.len() + 1;
        let limit = before + 1;
        conditions.push(format!("seq < ${before}"));
        let sql = AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM engine_runs WHERE {} ORDER BY seq DESC LIMIT ${limit}",
            conditions.join(" AND ")
        ));
        let rows: Vec<RunRow> = with_pool!(&self.reader, |pool| {
            let mut query = sqlx::query_as(sql);
            for value in &binds {
                query = query.bind(value.as_str());
            }
            query
                .bind(filter.before_seq.unwrap_or(i64::MAX))
                .bind(i64::from(filter.limit.unwrap_or(100)))
                .fetch_all(pool)
                .await
        })?;
        rows.into_iter().map(RunRecord::try_from).collect()
    }

    /// The run's finished steps and undos, in the order they finished.
    pub async fn steps(&self, id: Uuid) -> Result<Vec<StepRecord>, sqlx::Error> {
        let rows: Vec<StepRow> = with_pool!(&self.reader, |pool| {
            sqlx::query_as(
                "SELECT phase, idx, name, status, attempts, output, error, started_at, finished_at \
                 FROM engine_steps WHERE run_id = $1 ORDER BY finished_at, phase, idx",
            )
            .bind(id.to_string())
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(StepRecord::try_from).collect()
    }

    /// The run's timeline after entry `after`, oldest first: its events, and the rows of its
    /// forward steps that succeeded, each read as that step's `step-succeeded` entry.
    pub async fn events(&self, id: Uuid, after: i64) -> Result<Vec<EventRecord>, sqlx::Error> {
        let rows: Vec<EventRow> = with_pool!(&self.reader, |pool| {
            sqlx::query_as(
                "SELECT n, at, kind, step, message, NULL AS attempts, NULL AS took FROM engine_events \
                 WHERE run_id = $1 AND n > $2 \
                 UNION ALL \
                 SELECT n, finished_at, 'step-succeeded', name, NULL, attempts, finished_at - started_at \
                 FROM engine_steps WHERE run_id = $1 AND n > $2 \
                 ORDER BY 1",
            )
            .bind(id.to_string())
            .bind(after)
            .fetch_all(pool)
            .await
        })?;
        Ok(rows.into_iter().map(|row| row.into_record(id)).collect())
    }

    /// The latest payload of signal `name` sent to the run.
    pub(crate) async fn latest_signal(&self, run: Uuid, name: &str) -> Result<Option<Value>, sqlx::Error> {
        let payload: Option<String> = with_pool!(&self.reader, |pool| {
            sqlx::query_scalar(
                "SELECT payload FROM engine_signals WHERE run_id = $1 AND name = $2 ORDER BY seq DESC LIMIT 1",
            )
            .bind(run.to_string())
            .bind(name)
            .fetch_optional(pool)
            .await
        })?;
        payload.as_deref().map(parse_json).transpose()
    }

    /// Stores a signal for the run and wakes it if it waits. With `cancel`, also asks the run
    /// to unwind: a run that never started ends `cancelled` at once; a parked forward run is
    /// made runnable so that it unwinds.
    pub(crate) async fn signal(
        &self,
        run: Uuid,
        name: &str,
        payload: &Value,
        cancel: bool,
        now: Millis,
    ) -> Result<ActionOutcome, sqlx::Error> {
        let id = run.to_string();
        let lock = if self.is_postgres() { " FOR UPDATE" } else { "" };
        let select = AssertSqlSafe(format!(
            "SELECT status, phase, step_index, lease_owner FROM engine_runs WHERE id = $1{lock}"
        ));
        with_pool!(&self.pool, |pool| {
            let mut tx = pool.begin_write().await?;
            let row: Option<(String, String, i64, Option<String>)> =
                sqlx::query_as(select).bind(&id).fetch_optional(&mut *tx).await?;
            let Some((status, phase, step_index, owner)) = row else {
                return Ok(ActionOutcome::NotFound);
            };
            let status = parse_status(&status)?;
            if status.is_final() {
                return Ok(ActionOutcome::NotApplicable(status));
            }
            sqlx::query("INSERT INTO engine_signals (run_id, name, payload, created_at) VALUES ($1, $2, $3, $4)")
                .bind(&id)
                .bind(name)
                .bind(to_json(payload))
                .bind(now)
                .execute(&mut *tx)
                .await?;
            let new_status = if !cancel {
                sqlx::query(
                    "UPDATE engine_runs SET next_at = $2, updated_at = $2 \
                     WHERE id = $1 AND status IN ('waiting', 'retrying') AND next_at > $2",
                )
                .bind(&id)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                insert_event(
                    &mut tx,
                    run,
                    Entry::Next,
                    now,
                    &NewEvent::new("signal", None, format!("signal `{name}` received")),
                )
                .await?;
                status
            } else if status == RunStatus::Pending && step_index == 0 && owner.is_none() {
                sqlx::query(
                    "UPDATE engine_runs SET status = 'cancelled', cancel_requested = TRUE, current_step = NULL, \
                       next_at = $2, finished_at = $2, updated_at = $2 WHERE id = $1",
                )
                .bind(&id)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                insert_event(
                    &mut tx,
                    run,
                    Entry::Next,
                    now,
                    &NewEvent::new("cancelled", None, "cancelled before any step ran"),
                )
                .await?;
                RunStatus::Cancelled
            } else {
                let parked_forward = status == RunStatus::NeedsAttention && Phase::parse(&phase) == Phase::Forward;
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
                } else {
                    "cancel requested; completed steps will be undone in reverse order"
                };
                insert_event(&mut tx, run, Entry::Next, now, &NewEvent::new("cancel-requested", None, message)).await?;
                if parked_forward { RunStatus::Running } else { status }
            };
            tx.commit().await?;
            Ok(ActionOutcome::Done(new_status))
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
                "retry-requested",
                "an operator asked to run the current step now",
            ),
            Wake::Resume => (
                "UPDATE engine_runs SET next_at = $2, updated_at = $2, status_reason = NULL, attempt = 0, \
                   step_started_at = NULL, \
                   status = CASE WHEN phase = 'undo' THEN 'unwinding' ELSE 'running' END \
                 WHERE id = $1 AND status = 'needs-attention' RETURNING status",
                "resumed",
                "an operator resumed the run with a fresh retry budget for its current step",
            ),
        };
        with_pool!(&self.pool, |pool| {
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

/// Where an event goes in its run's timeline.
#[derive(Clone, Copy)]
enum Entry {
    /// The next number of the run's counter, taken here.
    Next,
    /// A number the caller already took from the counter (with the run's own write).
    Numbered(i64),
}

/// Appends an event to the run's timeline.
async fn insert_event<DB: sqlx::Database>(
    tx: &mut Transaction<'static, DB>,
    run: Uuid,
    entry: Entry,
    now: Millis,
    event: &NewEvent,
) -> Result<(), sqlx::Error>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    // Taking the next number: PostgreSQL runs one statement (the counter's UPDATE locks the
    // run's row until the transaction ends, so two writers never take the same number); SQLite
    // runs both in order.
    let sql = match entry {
        Entry::Numbered(_) => {
            "INSERT INTO engine_events (run_id, n, at, kind, step, message) VALUES ($1, $6, $2, $3, $4, $5)"
        }
        Entry::Next if DB::NAME == "PostgreSQL" => {
            "WITH run AS (UPDATE engine_runs SET events = events + 1 WHERE id = $1 RETURNING events) \
             INSERT INTO engine_events (run_id, n, at, kind, step, message) SELECT $1, events, $2, $3, $4, $5 FROM run"
        }
        Entry::Next => {
            "UPDATE engine_runs SET events = events + 1 WHERE id = $1; \
             INSERT INTO engine_events (run_id, n, at, kind, step, message) \
             SELECT $1, events, $2, $3, $4, $5 FROM engine_runs WHERE id = $1"
        }
    };
    let query = sqlx::query(sql)
        .bind(run.to_string())
        .bind(now)
        .bind(event.kind)
        .bind(event.step.as_deref())
        .bind(event.message.as_str());
    let query = match entry {
        Entry::Numbered(number) => query.bind(number),
        Entry::Next => query,
    };
    query.execute(&mut **tx).await?;
    Ok(())
}

fn submitted_message(run: &NewRun<'_>, lease: Option<&Lease>) -> String {
    let key = run.resource_key.map(|key| format!(" under resource key `{key}`")).unwrap_or_default();
    match lease {
        Some(lease) => format!("{} v{} submitted{key}; started at once by {}", run.kind, run.version, lease.owner),
        None => format!("{} v{} submitted{key}", run.kind, run.version),
    }
}
