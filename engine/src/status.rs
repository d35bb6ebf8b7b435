//! The life of a run, as stored and shown.
//!
//! ```text
//!                    submit
//!                      |
//!                      v
//!   +-------------> pending ------------------------------+
//!   |                  | claimed by a worker              | cancel (nothing ran yet)
//!   |                  v                                  v
//!   |   +---------> running <------+               cancelled
//!   |   |              |           | due again            ^
//!   |   |  poll/sleep  |  error    |                      |
//!   |   +-- waiting <--+--> retrying                      |
//!   |                  |                                  |
//!   |   exhausted,     |  terminal error, exhausted       |
//!   |   policy=park    |  (policy=unwind) or cancel       |
//!   |       v          v                                  |
//!   +- needs-attention  unwinding --(undo all)--> failed / cancelled
//!      (resume/retry)   |
//!                       +--(undo keeps failing)--> needs-attention
//!                  running --(last step)--> succeeded
//! ```

use serde::{Deserialize, Serialize};

use crate::retry::OnExhausted;

/// Where a run is in its life. The text form is what the database and `inspect` show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Submitted; no step has started. May wait behind an earlier run with its resource key.
    Pending,
    /// A step is runnable or running now.
    Running,
    /// A poll or sleep step is waiting for its next check.
    Waiting,
    /// A step failed with a retryable error and waits for its next attempt.
    Retrying,
    /// Parked: an operator must `retry`, `resume` or `cancel` it.
    NeedsAttention,
    /// Undoing completed steps in reverse order, after a terminal failure or a cancel.
    Unwinding,
    /// Every step succeeded.
    Succeeded,
    /// A step failed terminally and every completed step was undone.
    Failed,
    /// Cancelled, and every completed step was undone.
    Cancelled,
}

impl RunStatus {
    /// Every status, in the order of a run's life.
    pub const ALL: [RunStatus; 9] = [
        Self::Pending,
        Self::Running,
        Self::Waiting,
        Self::Retrying,
        Self::NeedsAttention,
        Self::Unwinding,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Retrying => "retrying",
            Self::NeedsAttention => "needs-attention",
            Self::Unwinding => "unwinding",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the run has ended for good.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|status| status.as_str() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|status| status.as_str()).collect();
            format!("unknown run status `{s}`; expected one of {}", names.join(", "))
        })
    }
}

/// Which way a run is moving through its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Running steps first to last.
    Forward,
    /// Undoing completed steps last to first.
    Undo,
}

impl Phase {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forward => "forward",
            Self::Undo => "undo",
        }
    }

    pub(crate) fn parse(s: &str) -> Phase {
        if s == "undo" { Self::Undo } else { Self::Forward }
    }
}

/// What a step's definition says about how long it may take and what happens when it gives up,
/// for the step in hand of a run (`RunDetail::limits`): `inspect` turns it into the deadline a
/// person reads ("in 11 min; then the run unwinds").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StepLimits {
    /// The step (in the undo phase, the step being undone).
    pub step: String,
    /// Forward, or its undo.
    pub phase: Phase,
    /// How the step waits, if it does.
    pub shape: StepShape,
    /// A poll's first interval between checks, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// A poll gives up this long after it began (`step_started_at`), in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Each attempt is stopped this long after it began (`attempt_started_at`), in milliseconds.
    pub attempt_timeout_ms: u64,
    /// Attempts in all before retries run out (`None`: no limit by count).
    pub max_attempts: Option<u32>,
    /// Retries run out this long after the first attempt, in milliseconds (`None`: no limit).
    pub max_elapsed_ms: Option<u64>,
    /// What happens when the step gives up: the run unwinds, or parks for an operator.
    pub on_exhausted: OnExhausted,
    /// The step has an undo.
    pub has_undo: bool,
}

/// How a step waits, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum StepShape {
    /// Runs once per attempt.
    Action,
    /// Checks until ready, up to its timeout.
    Poll,
    /// Ends a fixed time after it began.
    Sleep,
}
