//! Reads: one run, a filtered list of runs, a run's steps and timeline, the latest payload of a
//! signal, and (inside the domain's transaction) the unfinished runs on a resource.

use serde_json::Value;
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use super::handle::Store;
use super::pool::WriteTx;
use super::records::{EventRecord, EventRow, RUN_COLUMNS, RunFilter, RunRecord, RunRow, StepRecord, StepRow};
use super::records::{parse_json, parse_status, parse_uuid};
use crate::status::RunStatus;

impl Store {
    /// One run.
    pub async fn run(&self, id: Uuid) -> Result<Option<RunRecord>, sqlx::Error> {
        let sql = AssertSqlSafe(format!("SELECT {RUN_COLUMNS} FROM engine_runs WHERE id = $1"));
        let row: Option<RunRow> = crate::with_pool!(&self.reader, |pool| {
            sqlx::query_as(sql).bind(id.to_string()).fetch_optional(pool).await
        })?;
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
        let rows: Vec<RunRow> = crate::with_pool!(&self.reader, |pool| {
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
        let rows: Vec<StepRow> = crate::with_pool!(&self.reader, |pool| {
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
        self.events_page(id, after, i64::MAX).await
    }

    /// The first `limit` entries of the run's timeline after entry `after`, oldest first.
    pub async fn events_page(&self, id: Uuid, after: i64, limit: i64) -> Result<Vec<EventRecord>, sqlx::Error> {
        let rows: Vec<EventRow> = crate::with_pool!(&self.reader, |pool| {
            sqlx::query_as(
                "SELECT n, at, kind, step, message, count, first_at, NULL AS attempts, NULL AS took \
                 FROM engine_events WHERE run_id = $1 AND n > $2 \
                 UNION ALL \
                 SELECT n, finished_at, 'step-succeeded', name, NULL, 1, NULL, attempts, finished_at - started_at \
                 FROM engine_steps WHERE run_id = $1 AND n > $2 \
                 ORDER BY 1 LIMIT $3",
            )
            .bind(id.to_string())
            .bind(after)
            .bind(limit)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(|row| row.into_record(id)).collect()
    }

    /// The latest payload of signal `name` sent to the run.
    pub(crate) async fn latest_signal(&self, run: Uuid, name: &str) -> Result<Option<Value>, sqlx::Error> {
        let payload: Option<String> = crate::with_pool!(&self.reader, |pool| {
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

    /// Unfinished runs under `resource_key`, oldest first, read inside the caller's transaction
    /// (so that a check "nothing is running on this resource" and the change it guards commit
    /// together).
    pub async fn unfinished_runs_in(
        tx: &mut WriteTx,
        resource_key: &str,
    ) -> Result<Vec<(Uuid, RunStatus)>, sqlx::Error> {
        let rows: Vec<(String, String)> = crate::with_tx!(tx, |tx| {
            sqlx::query_as(
                "SELECT id, status FROM engine_runs WHERE resource_key = $1 AND finished_at IS NULL ORDER BY seq",
            )
            .bind(resource_key)
            .fetch_all(&mut **tx)
            .await
        })?;
        rows.into_iter().map(|(id, status)| Ok((parse_uuid(&id)?, parse_status(&status)?))).collect()
    }
}
