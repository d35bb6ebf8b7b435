//! The rows the store reads and writes, in their typed form.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::error::StepError;
use crate::status::{Phase, RunStatus};
use crate::timeline::{EventKind, StepStatus};

/// Milliseconds since the Unix epoch: every time the engine stores.
pub type Millis = i64;

/// `next_at` of a run that nothing will wake but an operator.
pub(crate) const NEVER: Millis = i64::MAX;

/// One run, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunRecord {
    /// Submission order.
    pub seq: i64,
    /// The run's id.
    pub id: Uuid,
    /// Workflow kind, e.g. `cluster.create`.
    pub kind: String,
    /// Definition version the run started with.
    pub version: u32,
    /// Runs with the same key execute one at a time, in submission order.
    pub resource_key: Option<String>,
    /// The input, as JSON.
    pub input: Value,
    /// The output, once succeeded.
    pub output: Option<Value>,
    /// Where the run is in its life.
    pub status: RunStatus,
    /// Forward through the steps, or undoing them.
    pub phase: Phase,
    /// Forward: how many steps have completed. Undo: how many completed steps remain to undo.
    pub step_index: u32,
    /// The step running, waiting or failing now.
    pub current_step: Option<String>,
    /// Attempts of the current step that ended without success (failed, or cut short by a crash).
    pub attempt: u32,
    /// When the current step was first attempted.
    pub step_started_at: Option<Millis>,
    /// When the attempt in hand began, while one runs (the run is leased and not waiting).
    #[serde(default)]
    pub attempt_started_at: Option<Millis>,
    /// When the run is next runnable (`None`: only an operator can wake it).
    pub next_at: Option<Millis>,
    /// Why the run waits or is parked, in words.
    pub status_reason: Option<String>,
    /// The last error, with its cause chain.
    pub error: Option<StepError>,
    /// Why the run turned back (`step `x` failed: ...`, `cancelled by an operator`), once it has.
    #[serde(default)]
    pub unwind_reason: Option<String>,
    /// An operator asked to cancel the run.
    pub cancel_requested: bool,
    /// Who holds the run now.
    pub lease: Option<Lease>,
    /// Incremented on every claim; a commit must name the generation it claimed.
    pub lease_generation: i64,
    /// Submitted at.
    pub created_at: Millis,
    /// Last changed at.
    pub updated_at: Millis,
    /// Ended at.
    pub finished_at: Option<Millis>,
}

/// A worker's hold on a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Lease {
    /// The engine instance holding the run.
    pub owner: String,
    /// When the hold lapses unless renewed.
    pub expires_at: Millis,
}

/// One finished step (or undo), as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StepRecord {
    /// Forward or undo.
    pub phase: Phase,
    /// Position in the definition.
    pub index: u32,
    /// Stable step name.
    pub name: String,
    /// How it finished.
    pub status: StepStatus,
    /// Attempts in all, the last one included.
    pub attempts: u32,
    /// The checkpointed output.
    pub output: Option<Value>,
    /// The last error seen, even if a later attempt succeeded.
    pub error: Option<StepError>,
    /// First attempt began at.
    pub started_at: Millis,
    /// Finished at.
    pub finished_at: Millis,
}

/// One entry of a run's timeline.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EventRecord {
    /// Position in the run's timeline: 1 for `submitted`, then higher. A repeated `waiting`
    /// entry keeps its position while only its count and time change, and moves to the next
    /// position when its condition (`message`) changes, so `after=seq` never misses a change.
    pub seq: i64,
    /// The run.
    pub run_id: Uuid,
    /// When; for a repeated entry, the latest time.
    pub at: Millis,
    /// How many times it happened in a row (the checks of a waiting poll); 1 for most entries.
    #[serde(default = "one")]
    pub count: u32,
    /// For an entry that happened more than once, the first time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_at: Option<Millis>,
    /// What happened.
    pub kind: EventKind,
    /// The step it concerns.
    pub step: Option<String>,
    /// Details in words.
    pub message: String,
}

fn one() -> u32 {
    1
}

/// An event to append.
#[derive(Debug, Clone)]
pub(crate) struct NewEvent {
    pub(crate) kind: EventKind,
    pub(crate) step: Option<String>,
    pub(crate) message: String,
}

impl NewEvent {
    pub(crate) fn new(kind: EventKind, step: Option<&str>, message: impl Into<String>) -> Self {
        Self { kind, step: step.map(str::to_owned), message: message.into() }
    }
}

/// A run as returned by a claim, with what the worker needs to continue it.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub(crate) run: RunRecord,
    /// Outputs of completed forward steps, by position.
    pub(crate) outputs: Vec<(u32, String, Value)>,
    /// The previous holder's lease lapsed: a step may have been cut short.
    pub(crate) recovered: bool,
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this status.
    pub status: Option<RunStatus>,
    /// Only this resource key.
    pub resource_key: Option<String>,
    /// Only runs submitted before this sequence number (for paging back).
    pub before_seq: Option<i64>,
    /// At most this many (newest first); 100 when unset.
    pub limit: Option<u32>,
}

/// The raw row, decoded the same way from both databases.
#[derive(sqlx::FromRow)]
pub(crate) struct RunRow {
    seq: i64,
    id: String,
    kind: String,
    version: i64,
    resource_key: Option<String>,
    input: String,
    output: Option<String>,
    status: String,
    phase: String,
    step_index: i64,
    current_step: Option<String>,
    attempt: i64,
    step_started_at: Option<i64>,
    attempt_started_at: Option<i64>,
    next_at: i64,
    status_reason: Option<String>,
    error: Option<String>,
    unwind_reason: Option<String>,
    cancel_requested: bool,
    lease_owner: Option<String>,
    lease_expires_at: Option<i64>,
    lease_generation: i64,
    created_at: i64,
    updated_at: i64,
    finished_at: Option<i64>,
}

pub(crate) const RUN_COLUMNS: &str = "seq, id, kind, version, resource_key, input, output, status, phase, \
     step_index, current_step, attempt, step_started_at, attempt_started_at, next_at, status_reason, error, unwind_reason, \
     cancel_requested, lease_owner, lease_expires_at, lease_generation, created_at, updated_at, finished_at";

impl TryFrom<RunRow> for RunRecord {
    type Error = sqlx::Error;

    fn try_from(row: RunRow) -> Result<Self, Self::Error> {
        Ok(Self {
            seq: row.seq,
            id: parse_uuid(&row.id)?,
            kind: row.kind,
            version: row.version as u32,
            resource_key: row.resource_key,
            input: parse_json(&row.input)?,
            output: row.output.as_deref().map(parse_json).transpose()?,
            status: parse_status(&row.status)?,
            phase: Phase::parse(&row.phase),
            step_index: row.step_index as u32,
            current_step: row.current_step,
            attempt: row.attempt as u32,
            step_started_at: row.step_started_at,
            attempt_started_at: row.attempt_started_at,
            next_at: (row.next_at != NEVER).then_some(row.next_at),
            status_reason: row.status_reason,
            error: row.error.as_deref().map(parse_json).transpose()?,
            unwind_reason: row.unwind_reason,
            cancel_requested: row.cancel_requested,
            lease: row.lease_owner.map(|owner| Lease { owner, expires_at: row.lease_expires_at.unwrap_or(0) }),
            lease_generation: row.lease_generation,
            created_at: row.created_at,
            updated_at: row.updated_at,
            finished_at: row.finished_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct StepRow {
    phase: String,
    idx: i64,
    name: String,
    status: String,
    attempts: i64,
    output: Option<String>,
    error: Option<String>,
    started_at: i64,
    finished_at: i64,
}

impl TryFrom<StepRow> for StepRecord {
    type Error = sqlx::Error;

    fn try_from(row: StepRow) -> Result<Self, Self::Error> {
        Ok(Self {
            phase: Phase::parse(&row.phase),
            index: row.idx as u32,
            name: row.name,
            status: parse_text(&row.status)?,
            attempts: row.attempts as u32,
            output: row.output.as_deref().map(parse_json).transpose()?,
            error: row.error.as_deref().map(parse_json).transpose()?,
            started_at: row.started_at,
            finished_at: row.finished_at,
        })
    }
}

/// A timeline entry: an event, or the row of a forward step that succeeded (`message` is
/// then made from its attempts and how long it `took`).
#[derive(sqlx::FromRow)]
pub(crate) struct EventRow {
    n: i64,
    at: i64,
    kind: String,
    step: Option<String>,
    message: Option<String>,
    count: i64,
    first_at: Option<i64>,
    attempts: Option<i64>,
    took: Option<i64>,
}

impl EventRow {
    pub(crate) fn into_record(self, run_id: Uuid) -> Result<EventRecord, sqlx::Error> {
        let message = self.message.unwrap_or_else(|| {
            format!("attempt {} succeeded after {} ms", self.attempts.unwrap_or(1), self.took.unwrap_or(0))
        });
        Ok(EventRecord {
            seq: self.n,
            run_id,
            at: self.at,
            count: self.count.max(1) as u32,
            first_at: self.first_at,
            kind: parse_text(&self.kind)?,
            step: self.step,
            message,
        })
    }
}

pub(crate) fn parse_uuid(text: &str) -> Result<Uuid, sqlx::Error> {
    text.parse().map_err(|err: uuid::Error| sqlx::Error::Decode(err.into()))
}

pub(crate) fn parse_status(text: &str) -> Result<RunStatus, sqlx::Error> {
    parse_text(text)
}

/// A stored name (a status, an event kind) as its enum.
fn parse_text<T: std::str::FromStr<Err = String>>(text: &str) -> Result<T, sqlx::Error> {
    text.parse().map_err(|err: String| sqlx::Error::Decode(err.into()))
}

pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, sqlx::Error> {
    serde_json::from_str(text).map_err(|err| sqlx::Error::Decode(err.into()))
}

pub(crate) fn to_json<T: Serialize>(value: &T) -> String {
    // Serialising plain data (strings, numbers, maps with string keys) cannot fail.
    serde_json::to_string(value).unwrap_or_else(|err| format!("\"unencodable: {err}\""))
}
