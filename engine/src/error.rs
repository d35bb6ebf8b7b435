//! Errors: what a step returns, and what the engine's own calls return.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::status::RunStatus;

/// Whether the engine should try a failed step again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// Transient: retried under the step's [`RetryPolicy`](crate::RetryPolicy).
    Retryable,
    /// Permanent: the run unwinds at once.
    Terminal,
    /// The attempt did not return: it was stopped at its deadline, or the process running it
    /// died or lost its lease. Retried like a retryable error, but its effect is unknown: if the
    /// run turns back from here, the step's undo runs too.
    Interrupted,
}

/// The error a step returns, kept whole (with its cause chain) in the run's record.
///
/// Any `std::error::Error` converts into a *retryable* `StepError` with `?`, cause chain
/// included; say [`StepError::terminal`] when retrying cannot help.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StepError {
    /// Retry or give up.
    pub kind: ErrorKind,
    /// The error's message first, then each `source()` in turn.
    pub chain: Vec<String>,
}

impl StepError {
    /// A transient failure, with the cause chain of `err`.
    pub fn retryable(err: impl std::error::Error) -> Self {
        Self::from_error(ErrorKind::Retryable, &err)
    }

    /// A permanent failure, with the cause chain of `err`.
    pub fn terminal(err: impl std::error::Error) -> Self {
        Self::from_error(ErrorKind::Terminal, &err)
    }

    /// A transient failure described by a message.
    pub fn retryable_msg(msg: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Retryable, chain: vec![msg.into()] }
    }

    /// A permanent failure described by a message.
    pub fn terminal_msg(msg: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Terminal, chain: vec![msg.into()] }
    }

    /// An attempt that did not return (stopped at its deadline, or cut short by a crash).
    pub(crate) fn interrupted_msg(msg: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Interrupted, chain: vec![msg.into()] }
    }

    /// Puts `context` in front of the chain, keeping the kind.
    #[must_use]
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.chain.insert(0, context.into());
        self
    }

    /// Whether the engine will give up on this error at once.
    pub fn is_terminal(&self) -> bool {
        self.kind == ErrorKind::Terminal
    }

    /// Whether the attempt was cut short, so that its effect is unknown.
    pub fn is_interrupted(&self) -> bool {
        self.kind == ErrorKind::Interrupted
    }

    fn from_error(kind: ErrorKind, err: &dyn std::error::Error) -> Self {
        let mut chain = vec![err.to_string()];
        let mut source = err.source();
        while let Some(cause) = source {
            chain.push(cause.to_string());
            source = cause.source();
        }
        Self { kind, chain }
    }
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.chain.join(": "))
    }
}

impl<E: std::error::Error> From<E> for StepError {
    fn from(err: E) -> Self {
        Self::retryable(err)
    }
}

/// An error from the engine's own API (submitting, inspecting, operator actions).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The database failed or could not be reached.
    #[error("workflow store")]
    Store(#[source] sqlx::Error),
    /// The database refused a write because its disk is full or read-only; it answers reads,
    /// and nothing was written.
    #[error("workflow store: {fault}")]
    Storage {
        /// Which of the two.
        fault: crate::store::fault::StoreFault,
        /// What SQLite said.
        #[source]
        source: sqlx::Error,
    },
    /// The schema could not be brought up to date.
    #[error("migrating the workflow store")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// No run has this id.
    #[error("workflow run {0} does not exist; `workflow list` shows the runs that do")]
    UnknownRun(Uuid),
    /// The workflow kind is not registered with this engine.
    #[error("workflow kind `{0}` is not registered with this engine")]
    UnknownKind(String),
    /// The run is in a state where the operator action does not apply.
    #[error("workflow run {run} is {status}: {hint}")]
    InvalidState {
        /// The run.
        run: Uuid,
        /// Its status now.
        status: RunStatus,
        /// What the operator can do instead.
        hint: &'static str,
    },
    /// A value could not be encoded or decoded as JSON.
    #[error("workflow data is not valid JSON for its type")]
    Json(#[source] serde_json::Error),
    /// The database URL names no store the engine knows.
    #[error("unsupported database URL `{0}`: use sqlite://PATH or postgres://...")]
    UnsupportedUrl(String),
    /// Waiting for a run gave up.
    #[error("workflow run {0} did not finish in time")]
    Timeout(Uuid),
    /// The engine is shutting down and accepts no more work.
    #[error("the workflow engine is shutting down")]
    ShuttingDown,
    /// Another live engine holds this owner name on this database.
    #[error(
        "engine owner `{0}` is held by another live process on this database; two processes must never drive \
         runs under one name: stop the other one, or start this one under another name"
    )]
    OwnerInUse(String),
}

impl From<sqlx::Error> for EngineError {
    fn from(err: sqlx::Error) -> Self {
        match crate::store::fault::StoreFault::of_sqlx(&err) {
            Some(fault) => Self::Storage { fault, source: err },
            None => Self::Store(err),
        }
    }
}

/// Writes an error and its causes on one line, `outer: inner: root`.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
