//! A submit's values: the run to insert ([`NewRun`]), owned so that a lone submit can be handed to
//! the SQLite writer thread ([`SubmitArgs`]), and the statement that inserts a run, on both
//! databases (same parameter numbers).

use std::sync::LazyLock;

use serde_json::Value;
use uuid::Uuid;

use super::records::{Lease, Millis, RUN_COLUMNS, to_json};
use crate::status::RunStatus;

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
pub(super) static INSERT_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO engine_runs (id, kind, version, resource_key, input, status, phase, step_index, \
           current_step, attempt, next_at, lease_owner, lease_expires_at, lease_generation, \
           created_at, updated_at, events, attempt_started_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 'forward', 0, $7, 0, $8, $9, $10, $11, $8, $8, 1, \
           CASE WHEN $11 = 1 THEN $8 END) \
         RETURNING {RUN_COLUMNS}"
    )
});

/// [`INSERT_RUN`] and its `submitted` event ($12: the message) on SQLite, as the statements the
/// writer thread runs in order in one transaction (`writer.rs`); the first one's row starts with
/// the run's `seq`.
pub(super) static SUBMIT_SQLITE: LazyLock<[&'static str; 2]> = LazyLock::new(|| {
    [
        INSERT_RUN.as_str(),
        "INSERT INTO engine_events (run_id, n, at, kind, step, message) VALUES ($1, 1, $8, 'submitted', NULL, $12)",
    ]
});

/// A submit's values, as [`INSERT_RUN`] and the `submitted` entry bind them, in the order of
/// their parameters ($1 first); owned, so that a lone submit can be handed to the SQLite writer
/// thread.
pub(crate) struct SubmitArgs {
    pub(super) id: String,
    pub(super) kind: String,
    pub(super) version: i64,
    pub(super) resource_key: Option<String>,
    pub(super) input: String,
    pub(super) status: &'static str,
    pub(super) first_step: Option<String>,
    pub(super) now: Millis,
    pub(super) lease_owner: Option<String>,
    pub(super) lease_expires_at: Option<Millis>,
    pub(super) generation: i64,
    pub(super) message: String,
}

impl SubmitArgs {
    pub(super) fn new(run: &NewRun<'_>, lease: Option<&Lease>, message: String) -> Self {
        Self {
            id: run.id.to_string(),
            kind: run.kind.to_owned(),
            version: i64::from(run.version),
            resource_key: run.resource_key.map(str::to_owned),
            input: to_json(run.input),
            status: status_of(lease).as_str(),
            first_step: run.first_step.map(str::to_owned),
            now: run.now,
            lease_owner: lease.map(|lease| lease.owner.clone()),
            lease_expires_at: lease.map(|lease| lease.expires_at),
            generation: i64::from(lease.is_some()),
            message,
        }
    }
}

/// A submitted run starts running when it is leased at once, else it is pending.
pub(super) fn status_of(lease: Option<&Lease>) -> RunStatus {
    if lease.is_some() { RunStatus::Running } else { RunStatus::Pending }
}
