//! Claims and leases: taking due runs (first in their resource key), renewing the leases of the
//! runs an engine drives, and giving them up.

use std::sync::LazyLock;

use serde_json::Value;
use sqlx::{AssertSqlSafe, FromRow, Row};
use uuid::Uuid;

use super::handle::Store;
use super::pool::BeginWrite;
use super::records::{Claimed, Millis, NewEvent, RUN_COLUMNS, RunRecord, RunRow, parse_json, parse_uuid, to_json};
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
        let sql = &CLAIM_SQL[usize::from(!self.is_postgres())];
        let claimed_message = claimed_by(label);
        let (runs, outputs) = crate::with_pool!(&self.pool, |pool| {
            let mut tx = BeginWrite::begin_write(pool).await?;
            let candidates: Vec<(i64, Option<String>, Option<String>)> =
                sqlx::query_as(AssertSqlSafe(sql.candidates.as_str()))
                    .bind(now)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *tx)
                    .await?;
            if candidates.is_empty() {
                return Ok(Vec::new());
            }
            // A waiting run whose latest claim was this process's is claimed quietly.
            let quiet: Vec<i64> = candidates
                .iter()
                .filter(|(_, _, last)| last.as_deref() == Some(claimed_message.as_str()))
                .map(|(seq, _, _)| *seq)
                .collect();
            let seqs: Vec<i64> = candidates.iter().map(|(seq, _, _)| *seq).collect();
            // Each claim's event is its run's next timeline entry: the number comes with the row.
            let rows = sqlx::query(AssertSqlSafe(sql.update.as_str()))
                .bind(owner)
                .bind(lease_until)
                .bind(now)
                .bind(to_json(&seqs))
                .bind(to_json(&quiet))
                .fetch_all(&mut *tx)
                .await?;
            let mut runs = Vec::with_capacity(rows.len());
            let mut events = Vec::with_capacity(rows.len());
            for row in rows {
                let entry: i64 = row.try_get("events")?;
                let run = RunRecord::try_from(RunRow::from_row(&row)?)?;
                let previous =
                    candidates.iter().find(|(seq, _, _)| *seq == run.seq).and_then(|(_, owner, _)| owner.clone());
                if !quiet.contains(&run.seq) {
                    let event = claim_entry(&run, previous.as_deref(), label);
                    events.push(serde_json::json!({
                        "run": run.id.to_string(), "n": entry, "kind": event.kind.as_str(),
                        "step": event.step, "message": event.message,
                    }));
                }
                runs.push((run, previous.is_some()));
            }
            if !events.is_empty() {
                sqlx::query(AssertSqlSafe(sql.events.as_str()))
                    .bind(now)
                    .bind(to_json(&events))
                    .execute(&mut *tx)
                    .await?;
            }
            // Read before the commit, on the claim's own connection: a read that failed after it
            // (a connection cut) would leave the runs leased to no driver until their leases
            // lapsed.
            let ids: Vec<String> = runs.iter().map(|(run, _)| run.id.to_string()).collect();
            let outputs: Vec<(String, i64, String, Option<String>)> =
                sqlx::query_as(AssertSqlSafe(sql.outputs.as_str())).bind(to_json(&ids)).fetch_all(&mut *tx).await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>((runs, outputs))
        })?;
        let mut claimed = Vec::with_capacity(runs.len());
        for (run, recovered) in runs {
            let id = run.id.to_string();
            let mine = outputs.iter().filter(|(run_id, ..)| *run_id == id);
            let mine = mine.map(|(_, idx, name, output)| (*idx, name.clone(), output.clone())).collect();
            claimed.push(Claimed { run, outputs: parse_outputs(mine)?, recovered });
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

/// A claim's statements on one database: each claims a whole batch at once, so a batch of 64 is
/// four statements rather than three per run (each statement is a round trip: to the server on
/// PostgreSQL, to the connection's thread on SQLite).
struct ClaimSql {
    /// The due runs ($1 now, $2 limit), locked on PostgreSQL.
    candidates: String,
    /// Leases the runs whose `seq` is in the JSON array $4 to $1 until $2 at $3, counting a
    /// timeline entry for each but those in $5 (claimed quietly); returns the runs and their
    /// counters.
    update: String,
    /// The claims' entries: the JSON array $2 of `{run, n, kind, step, message}`, at $1.
    events: String,
    /// The outputs of the completed forward steps of the runs whose ids are in the JSON array $1.
    outputs: String,
}

/// [PostgreSQL, SQLite].
static CLAIM_SQL: LazyLock<[ClaimSql; 2]> = LazyLock::new(|| {
    let postgres = |name: &str, cast: &str| format!("SELECT jsonb_array_elements_text(${name}::jsonb){cast}");
    let sqlite = |name: &str| format!("SELECT value FROM json_each(${name})");
    [
        ClaimSql {
            candidates: format!("{CLAIM_CANDIDATES} FOR UPDATE SKIP LOCKED"),
            update: claim_update(&postgres("4", "::bigint"), &postgres("5", "::bigint")),
            events: "INSERT INTO engine_events (run_id, n, at, kind, step, message) \
                 SELECT e ->> 'run', CAST(e ->> 'n' AS BIGINT), $1, e ->> 'kind', e ->> 'step', e ->> 'message' \
                 FROM jsonb_array_elements($2::jsonb) AS e"
                .to_owned(),
            outputs: completed_outputs(&postgres("1", "")),
        },
        ClaimSql {
            candidates: CLAIM_CANDIDATES.to_owned(),
            update: claim_update(&sqlite("4"), &sqlite("5")),
            events: "INSERT INTO engine_events (run_id, n, at, kind, step, message) \
                 SELECT e.value ->> 'run', CAST(e.value ->> 'n' AS INTEGER), $1, e.value ->> 'kind', \
                   e.value ->> 'step', e.value ->> 'message' \
                 FROM json_each($2) AS e"
                .to_owned(),
            outputs: completed_outputs(&sqlite("1")),
        },
    ]
});

/// See [`ClaimSql::update`]; `claimed` and `quiet` list the `seq`s of $4 and $5.
fn claim_update(claimed: &str, quiet: &str) -> String {
    format!(
        "UPDATE engine_runs SET lease_owner = $1, lease_expires_at = $2, \
           lease_generation = lease_generation + 1, \
           status = CASE WHEN status IN ('pending', 'waiting', 'retrying') THEN 'running' ELSE status END, \
           attempt = CASE WHEN lease_owner IS NOT NULL THEN attempt + 1 ELSE attempt END, \
           updated_at = $3, attempt_started_at = $3, \
           events = events + CASE WHEN seq IN ({quiet}) THEN 0 ELSE 1 END \
         WHERE seq IN ({claimed}) RETURNING {RUN_COLUMNS}, events"
    )
}

/// Outputs of the completed forward steps of the runs `ids` lists, by run and position.
fn completed_outputs(ids: &str) -> String {
    format!(
        "SELECT run_id, idx, name, output FROM engine_steps \
         WHERE run_id IN ({ids}) AND phase = 'forward' AND status = 'succeeded' ORDER BY run_id, idx"
    )
}

type OutputRow = (i64, String, Option<String>);

fn parse_outputs(rows: Vec<OutputRow>) -> Result<Vec<(u32, String, Value)>, sqlx::Error> {
    rows.into_iter()
        .map(|(idx, name, output)| {
            let output = output.as_deref().map(parse_json).transpose()?.unwrap_or(Value::Null);
            Ok((idx as u32, name, output))
        })
        .collect()
}

/// The entry a claim writes for `run`: `recovered` if the lease of `previous` lapsed, else
/// `claimed`, both naming `label` (the owner and its process).
fn claim_entry(run: &RunRecord, previous: Option<&str>, label: &str) -> NewEvent {
    let step = run.current_step.as_deref();
    match previous {
        Some(previous) => NewEvent::new(
            EventKind::Recovered,
            step,
            format!("claimed by {label} after the lease of {previous} lapsed: {}", cut_short(run)),
        ),
        None => NewEvent::new(EventKind::Claimed, step, claimed_by(label)),
    }
}

/// The message of a `claimed` entry. A claim compares it with a waiting run's latest one to
/// claim the run quietly when this process claimed it last, so both are made here.
fn claimed_by(label: &str) -> String {
    format!("claimed by {label}")
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
