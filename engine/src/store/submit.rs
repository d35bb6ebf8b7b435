//! Inserting runs: alone, in one round trip, or inside the domain's own transaction so that its
//! records and the run commit together.

use std::sync::LazyLock;

use super::events::{Entry, insert_event};
use super::handle::Store;
use super::kept_connections::on_kept_connection;
use super::pool::{Pool, WriteTx};
use super::records::{Lease, NewEvent, RUN_COLUMNS, RunRecord, RunRow};
use super::submit_args::{INSERT_RUN, NewRun, SubmitArgs, status_of};
use crate::status::Phase;
use crate::timeline::EventKind;

/// [`INSERT_RUN`] and its `submitted` event ($12: the message) as one statement, on PostgreSQL.
static SUBMIT_POSTGRES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH run AS ({}), \
         submitted AS (INSERT INTO engine_events (run_id, n, at, kind, step, message) \
                       SELECT id, 1, $8, 'submitted', NULL, $12 FROM run) \
         SELECT {RUN_COLUMNS} FROM run",
        INSERT_RUN.as_str()
    )
});

/// The record [`INSERT_RUN`] stores for `run`, as reading it back would return it: what the
/// writer thread's submit answers with its `seq` alone.
fn submitted_record(run: &NewRun<'_>, lease: Option<&Lease>, seq: i64) -> RunRecord {
    RunRecord {
        seq,
        id: run.id,
        kind: run.kind.to_owned(),
        version: run.version,
        resource_key: run.resource_key.map(str::to_owned),
        input: run.input.clone(),
        output: None,
        status: status_of(lease),
        phase: Phase::Forward,
        step_index: 0,
        current_step: run.first_step.map(str::to_owned),
        attempt: 0,
        step_started_at: None,
        attempt_started_at: lease.map(|_| run.now),
        next_at: Some(run.now),
        status_reason: None,
        error: None,
        unwind_reason: None,
        cancel_requested: false,
        lease: lease.cloned(),
        lease_generation: i64::from(lease.is_some()),
        created_at: run.now,
        updated_at: run.now,
        finished_at: None,
    }
}

/// Binds a submit's values ([`SubmitArgs`], the same the SQLite writer thread binds) to the
/// parameters of [`INSERT_RUN`], $1-$11.
macro_rules! bind_new_run {
    ($query:expr, $args:expr) => {{
        let args: &SubmitArgs = $args;
        $query
            .bind(args.id.as_str())
            .bind(args.kind.as_str())
            .bind(args.version)
            .bind(args.resource_key.as_deref())
            .bind(args.input.as_str())
            .bind(args.status)
            .bind(args.first_step.as_deref())
            .bind(args.now)
            .bind(args.lease_owner.as_deref())
            .bind(args.lease_expires_at)
            .bind(args.generation)
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
            let args = SubmitArgs::new(run, lease, submitted_message(run, lease));
            let row: RunRow = bind_new_run!(sqlx::query_as(INSERT_RUN.as_str()), &args).fetch_one(&mut **tx).await?;
            // INSERT_RUN set the run's counter to 1.
            let submitted = NewEvent::new(EventKind::Submitted, None, args.message);
            insert_event(tx, run.id, Entry::Numbered(1), run.now, &submitted).await?;
            row.try_into()
        })
    }

    /// Submits a run with no resource key in one round trip: the run and its `submitted`
    /// event in one statement on PostgreSQL, one transaction of the writer thread on SQLite.
    /// With `lease`, the run is claimed by that owner at once.
    pub(crate) async fn submit_run(&self, run: &NewRun<'_>, lease: Option<&Lease>) -> Result<RunRecord, sqlx::Error> {
        debug_assert!(run.resource_key.is_none(), "a run with a resource key is inserted with insert_run");
        let args = SubmitArgs::new(run, lease, submitted_message(run, lease));
        match (&self.pool, &self.group_commit) {
            (Pool::Postgres(pool), _) => {
                let row: RunRow = on_kept_connection!(self.kept_connections.as_deref(), pool, |executor| {
                    bind_new_run!(sqlx::query_as(SUBMIT_POSTGRES.as_str()), &args)
                        .bind(args.message.as_str())
                        .fetch_one(executor)
                });
                row.try_into()
            }
            (Pool::Sqlite(_), Some(group)) => {
                let seq = group.submit(args).await?;
                Ok(submitted_record(run, lease, seq))
            }
            (Pool::Sqlite(_), None) => {
                let mut tx = self.begin_write().await?;
                let record = Self::insert_run(&mut tx, run, lease).await?;
                tx.commit().await?;
                Ok(record)
            }
        }
    }
}

fn submitted_message(run: &NewRun<'_>, lease: Option<&Lease>) -> String {
    let key = run.resource_key.map(|key| format!(" under resource key `{key}`")).unwrap_or_default();
    match lease {
        Some(lease) => format!("{} v{} submitted{key}; started at once by {}", run.kind, run.version, lease.owner),
        None => format!("{} v{} submitted{key}", run.kind, run.version),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uuid::Uuid;

    use super::*;

    /// On SQLite the writer thread answers a submit with the run's `seq` alone, and the record
    /// is built from what was inserted: it must be the record that reading the run back gives,
    /// leased at once or not. (A driver starts from it, and a wrong field would be written back.)
    #[tokio::test]
    async fn a_lone_submit_on_sqlite_answers_the_record_it_stored() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Store::sqlite(&dir.path().join("engine.db")).await.expect("open the store");
        let input = json!({"name": "demo", "sizes": [1, 2.5], "note": null});
        for lease in [None, Some(Lease { owner: "engine-a".into(), expires_at: 1_700_000_060_000 })] {
            let now = 1_700_000_000_000 + i64::from(lease.is_some());
            let run = NewRun {
                id: Uuid::new_v4(),
                kind: "demo.kind",
                version: 3,
                resource_key: None,
                input: &input,
                first_step: Some("first"),
                now,
            };
            let answered = store.submit_run(&run, lease.as_ref()).await.expect("submit");
            let stored = store.run(run.id).await.expect("read the run").expect("the run is stored");
            let as_json = |record: &RunRecord| serde_json::to_value(record).expect("a record as JSON");
            assert_eq!(as_json(&answered), as_json(&stored), "leased at once: {}", lease.is_some());
            let entries = store.events(run.id, 0).await.expect("its timeline");
            assert_eq!(entries.len(), 1, "the `submitted` entry alone");
        }
        store.close().await;
    }
}
