//! Claims and leases: taking due runs (first in their resource key), renewing the leases of the
//! runs an engine drives, and giving them up.

use serde_json::Value;
use sqlx::{AssertSqlSafe, FromRow, Row};
use uuid::Uuid;

use super::events::{Entry, insert_event};
use super::handle::Store;
use super::pool::BeginWrite;
use super::records::{Claimed, Millis, NewEvent, RUN_COLUMNS, RunRecord, RunRow, parse_json, parse_uuid};
use crate::status::Phase;
use crate::timeline::EventKind;

/// Due runs, with their previous holder if its lease lapsed, and, for a waiting run (a poll or
/// sleep due for its next check), the message of its latest claim entry.
const CLAIM_CANDIDATES: &str = "SELECT seq, lease_owner, \
       CASE WHEN r.status = 'waiting' AND r.lease_owner IS NULL THEN ( \
         SELECT e.message FROM engine_events e WHERE e.run_id = r.id AND e.kind IN ('claimed', 'recovered') \
         ORDER BY e.n DESC LIMIT 1) END AS last_claim \
     FROM engine_runs r \
     WHERE r.finished_at IS NULL AND r.status <> 'needs-attention' AND r.next_at <= $1 \
       AND (r.lease_owner IS NULL OR r.lease_expires_at < $1) \
       AND (r.resource_key IS NULL OR NOT EXISTS ( \
            SELECT 1 FROM engine_runs p \
            WHERE p.resource_key = r.resource_key AND p.finished_at IS NULL AND p.seq < r.seq)) \
     ORDER BY r.next_at, r.seq LIMIT $2";

/// A lease a heartbeat renewed, and whether its run has been asked to cancel meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RenewedLease {
    pub(crate) run: Uuid,
    pub(crate) cancel_requested: bool,
}

impl Store {
    /// Claims up to `limit` runnable runs for `owner` until `lease_until`, writing a `claimed`
    /// event naming `label` (the owner and its process). A run whose previous holder's lease
    /// lapsed counts its interrupted attempt and gets a `recovered` event instead. A waiting run
    /// due for its next check, whose latest claim was already this process's, gets no entry: a
    /// poll checked every few seconds would otherwise add one per check, and the timeline still
    /// shows every process that took it.
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
               updated_at = $3, attempt_started_at = $3, events = events + $5 \
             WHERE seq = $4 RETURNING {RUN_COLUMNS}, events"
        );
        let runs = crate::with_pool!(&self.pool, |pool| {
            let mut tx = BeginWrite::begin_write(pool).await?;
            let candidates: Vec<(i64, Option<String>, Option<String>)> =
                sqlx::query_as(candidates_sql).bind(now).bind(i64::from(limit)).fetch_all(&mut *tx).await?;
            let mut runs = Vec::with_capacity(candidates.len());
            for (seq, previous_owner, last_claim) in candidates {
                let claimed_message = format!("claimed by {label}");
                let quiet = last_claim.as_deref() == Some(claimed_message.as_str());
                // The claim's event is the run's next timeline entry: its number comes with the row.
                let row = sqlx::query(AssertSqlSafe(update_sql.as_str()))
                    .bind(owner)
                    .bind(lease_until)
                    .bind(now)
                    .bind(seq)
                    .bind(i64::from(!quiet))
                    .fetch_one(&mut *tx)
                    .await?;
                let entry: i64 = row.try_get("events")?;
                let run = RunRecord::try_from(RunRow::from_row(&row)?)?;
                let recovered = previous_owner.is_some();
                let event = match previous_owner {
                    Some(previous) => NewEvent::new(
                        EventKind::Recovered,
                        run.current_step.as_deref(),
                        format!("claimed by {label} after the lease of {previous} lapsed: {}", cut_short(&run)),
                    ),
                    None => NewEvent::new(EventKind::Claimed, run.current_step.as_deref(), claimed_message),
                };
                if !quiet {
                    insert_event(&mut tx, run.id, Entry::Numbered(entry), now, &event).await?;
                }
                // Read before the commit, on the claim's own connection: a read that failed
                // after it (a connection cut) would leave the run leased to no driver until
                // its lease lapsed.
                let outputs: Vec<OutputRow> =
                    sqlx::query_as(COMPLETED_OUTPUTS).bind(run.id.to_string()).fetch_all(&mut *tx).await?;
                runs.push((run, recovered, outputs));
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(runs)
        })?;
        let mut claimed = Vec::with_capacity(runs.len());
        for (run, recovered, outputs) in runs {
            claimed.push(Claimed { run, outputs: parse_outputs(outputs)?, recovered });
        }
        Ok(claimed)
    }

    /// Extends to `until` the leases `owner` holds on `runs` (the runs it is driving now) that
    /// have not lapsed, and says which of them an operator has asked to cancel. A lapsed lease
    /// is never revived: another engine may be taking it over, and a run this engine holds but
    /// no longer drives must be free to be claimed again.
    pub(crate) async fn heartbeat(
        &self,
        owner: &str,
        runs: &[Uuid],
        now: Millis,
        until: Millis,
    ) -> Result<Vec<RenewedLease>, sqlx::Error> {
        let mut renewed = Vec::with_capacity(runs.len());
        for chunk in runs.chunks(500) {
            let placeholders: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 4)).collect();
            let sql = AssertSqlSafe(format!(
                "UPDATE engine_runs SET lease_expires_at = $2 \
                 WHERE lease_owner = $1 AND lease_expires_at > $3 AND id IN ({}) \
                 RETURNING id, cancel_requested",
                placeholders.join(", ")
            ));
            let rows: Vec<(String, bool)> = crate::with_pool!(&self.pool, |pool| {
                let mut query = sqlx::query_as(sql).bind(owner).bind(until).bind(now);
                for id in chunk {
                    query = query.bind(id.to_string());
                }
                query.fetch_all(pool).await
            })?;
            for (id, cancel_requested) in rows {
                renewed.push(RenewedLease { run: parse_uuid(&id)?, cancel_requested });
            }
        }
        Ok(renewed)
    }

    /// Lets the leases of a previous incarnation of `owner` lapse at once: it is dead (the
    /// caller holds the owner's lock). The next claim records the recovery.
    pub(crate) async fn expire_leases_of(&self, owner: &str) -> Result<u64, sqlx::Error> {
        crate::execute!(&self.pool, "UPDATE engine_runs SET lease_expires_at = 0 WHERE lease_owner = $1", owner)
    }

    /// Gives up the leases that claims which reported an error may have taken anyway (a COMMIT
    /// that landed, its answer lost): those `owner` holds until a time in `lease_until` (the
    /// failed claims' first and last), but for the runs it drives (`driving`). No driver runs
    /// them, and they would wait for their leases to lapse.
    pub(crate) async fn release_lost_claims(
        &self,
        owner: &str,
        lease_until: (Millis, Millis),
        driving: &[Uuid],
    ) -> Result<u64, sqlx::Error> {
        let driving: Vec<String> = driving.iter().map(Uuid::to_string).collect();
        let driving = serde_json::to_string(&driving).map_err(|err| sqlx::Error::Protocol(err.to_string()))?;
        let list = if self.is_postgres() {
            "SELECT jsonb_array_elements_text($4::jsonb)"
        } else {
            "SELECT value FROM json_each($4)"
        };
        let sql = AssertSqlSafe(format!(
            "UPDATE engine_runs SET lease_owner = NULL, lease_expires_at = NULL \
             WHERE lease_owner = $1 AND lease_expires_at BETWEEN $2 AND $3 AND id NOT IN ({list})"
        ));
        crate::with_pool!(&self.pool, |pool| {
            let query = sqlx::query(sql).bind(owner).bind(lease_until.0).bind(lease_until.1).bind(driving);
            query.execute(pool).await.map(|done| done.rows_affected())
        })
    }

    /// Gives up the lease on one run without changing it (a clean stop between steps).
    pub(crate) async fn release(&self, run: &RunRecord, owner: &str) -> Result<(), sqlx::Error> {
        crate::execute!(
            &self.pool,
            "UPDATE engine_runs SET lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $1 AND lease_generation = $2 AND lease_owner = $3",
            run.id.to_string(),
            run.lease_generation,
            owner
        )?;
        Ok(())
    }
}

/// Outputs of the run's completed forward steps, by position.
const COMPLETED_OUTPUTS: &str = "SELECT idx, name, output FROM engine_steps \
     WHERE run_id = $1 AND phase = 'forward' AND status = 'succeeded' ORDER BY idx";

type OutputRow = (i64, String, Option<String>);

fn parse_outputs(rows: Vec<OutputRow>) -> Result<Vec<(u32, String, Value)>, sqlx::Error> {
    rows.into_iter()
        .map(|(idx, name, output)| {
            let output = output.as_deref().map(parse_json).transpose()?.unwrap_or(Value::Null);
            Ok((idx as u32, name, output))
        })
        .collect()
}

/// What the lapsed lease means for the run: which attempt ended without its checkpoint.
fn cut_short(run: &RunRecord) -> String {
    match (run.phase, run.current_step.as_deref()) {
        (Phase::Forward, Some(step)) => format!("attempt {} of step `{step}` ended without a checkpoint", run.attempt),
        (Phase::Undo, Some(step)) => {
            format!("attempt {} of the undo of step `{step}` ended without a checkpoint", run.attempt)
        }
        (_, None) => "the run was between steps".to_owned(),
    }
}
