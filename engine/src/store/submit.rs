//! Inserting runs: alone, in one round trip, or inside the domain's own transaction so that its
//! records and the run commit together.

use std::sync::LazyLock;

use serde_json::Value;
use uuid::Uuid;

use super::events::{Entry, insert_event};
use super::handle::Store;
use super::kept_connections::on_kept_connection;
use super::pool::{Pool, WriteTx};
use super::records::{Lease, Millis, NewEvent, RUN_COLUMNS, RunRecord, RunRow, to_json};
use super::self_commit::self_commit;
use crate::status::RunStatus;
use crate::timeline::EventKind;

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

/// Inserts a run and returns it; its `submitted` event is to be entry 1 of its timeline.
/// Parameters: $1 id, $2 kind, $3 version, $4 resource key, $5 input, $6 status, $7 first step,
/// $8 now, $9-$10 lease owner and expiry, $11 generation.
static INSERT_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO engine_runs (id, kind, version, resource_key, input, status, phase, step_index, \
           current_step, attempt, next_at, lease_owner, lease_expires_at, lease_generation, \
           created_at, updated_at, events, attempt_started_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 'forward', 0, $7, 0, $8, $9, $10, $11, $8, $8, 1, \
           CASE WHEN $11 = 1 THEN $8 END) \
         RETURNING {RUN_COLUMNS}"
    )
});

/// [`INSERT_RUN`] and its `submitted` event ($12: the message) in one round trip:
/// [PostgreSQL (one statement), SQLite (one self-committing batch)].
static SUBMIT_SQL: LazyLock<[String; 2]> = LazyLock::new(|| {
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

impl Store {
    /// Inserts a run in `tx`. With `lease`, the run is claimed by that owner at once (an eager
    /// start) unless an earlier unfinished run holds its resource key. Returns the stored run.
    pub(crate) async fn insert_run(
        tx: &mut WriteTx,
        run: &NewRun<'_>,
        lease: Option<&Lease>,
    ) -> Result<RunRecord, sqlx::Error> {
        let postgres = tx.is_postgres();
        crate::with_tx!(tx, |tx| {
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
            let submitted = NewEvent::new(EventKind::Submitted, None, submitted_message(run, lease));
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
            Pool::Postgres(pool) => on_kept_connection!(self.kept_connections.as_deref(), pool, |executor| {
                bind_new_run!(sqlx::query_as(SUBMIT_SQL[0].as_str()), run, lease).bind(message).fetch_one(executor)
            }),
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
}

fn submitted_message(run: &NewRun<'_>, lease: Option<&Lease>) -> String {
    let key = run.resource_key.map(|key| format!(" under resource key `{key}`")).unwrap_or_default();
    match lease {
        Some(lease) => format!("{} v{} submitted{key}; started at once by {}", run.kind, run.version, lease.owner),
        None => format!("{} v{} submitted{key}", run.kind, run.version),
    }
}
