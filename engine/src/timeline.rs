//! The kinds of entries in a run's timeline, how a finished step is recorded, and the words
//! for durations and retried attempts in its messages.
//! Entry kinds and step statuses are stored as their kebab-case names, which is also how `inspect`
//! shows them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::status::RunStatus;

/// Declares a stored enum: its variants with their stored names, `as_str`, parsing, serde as
/// the same names, `Display`, and comparison with a `str` (so that a test may write
/// `event.kind == "parked"`).
macro_rules! stored_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The stored and shown name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| {
                    let names: Vec<&str> = Self::ALL.iter().map(|v| v.as_str()).collect();
                    format!("unknown {} `{s}`; expected one of {}", stringify!($name), names.join(", "))
                })
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

stored_enum! {
    /// What happened, in one timeline entry.
    EventKind {
        /// The run was stored (always entry 1).
        Submitted = "submitted",
        /// An engine took the run to drive it.
        Claimed = "claimed",
        /// An engine took the run over from a holder whose lease lapsed (it died or stalled).
        Recovered = "recovered",
        /// A process whose lease had lapsed (it stalled past it, and another claim took the run)
        /// finished a step and tried to commit it: refused by the fence, nothing of it landed.
        /// The step may have run twice: here and under the claim that took the run over.
        LateCommitRefused = "late-commit-refused",
        /// A forward step completed; read from the step's own row.
        StepSucceeded = "step-succeeded",
        /// An attempt of a forward step failed (it will be retried, or the run turns back).
        StepFailed = "step-failed",
        /// A poll or sleep is not done; the run waits as a row until its next check. Repeated
        /// checks of one step are one entry, with their count and the latest condition.
        Waiting = "waiting",
        /// The run stopped for an operator.
        Parked = "parked",
        /// The run turned back: its undos run in reverse order.
        Unwinding = "unwinding",
        /// An undo completed.
        UndoSucceeded = "undo-succeeded",
        /// An attempt of an undo failed.
        UndoFailed = "undo-failed",
        /// Every step succeeded.
        Succeeded = "succeeded",
        /// A step failed and every completed step was undone.
        Failed = "failed",
        /// The run was cancelled and every completed step was undone.
        Cancelled = "cancelled",
        /// Every step succeeded but the workflow could not build its output.
        OutputFailed = "output-failed",
        /// A signal was delivered.
        Signal = "signal",
        /// An operator asked to cancel the run.
        CancelRequested = "cancel-requested",
        /// An operator asked to run the current step now.
        RetryRequested = "retry-requested",
        /// An operator resumed a parked run with a fresh retry budget.
        Resumed = "resumed",
    }
}

impl EventKind {
    /// The entry that says a run ended with `status`.
    pub(crate) fn ended(status: RunStatus) -> Self {
        match status {
            RunStatus::Cancelled => Self::Cancelled,
            RunStatus::Succeeded => Self::Succeeded,
            _ => Self::Failed,
        }
    }
}

stored_enum! {
    /// How a step (or its undo) finished.
    StepStatus {
        /// The step's action completed; its output is checkpointed.
        Succeeded = "succeeded",
        /// The step's action failed for good, and the run turned back.
        Failed = "failed",
        /// The step's undo completed.
        Undone = "undone",
    }
}

/// A duration as the timeline's words say it: `250 ms`, `1.5 s`, `3 min`.
pub(crate) fn humanize(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 120_000 {
        format!("{:.1} s", duration.as_secs_f64())
    } else {
        format!("{} min", duration.as_secs() / 60)
    }
}

/// The timeline's words for an attempt that failed and is retried after `delay`:
/// `attempt 2 failed (retrying in 1.5 s): <error>` (`undo attempt ...` for an undo).
pub(crate) fn retrying(undo: bool, attempts: u32, delay: Duration, error: &impl std::fmt::Display) -> String {
    let undo = if undo { "undo " } else { "" };
    format!("{undo}attempt {attempts} failed (retrying in {}): {error}", humanize(delay))
}

/// The delay that a retried attempt's entry names (see [`retrying`]), to the precision it was
/// written with: a picture of the run draws the back-off from it.
pub fn retry_delay(message: &str) -> Option<Duration> {
    let (_, rest) = message.split_once(" failed (retrying in ")?;
    let (amount, unit) = rest.split_once(')')?.0.split_once(' ')?;
    let amount: f64 = amount.parse().ok().filter(|amount: &f64| amount.is_finite() && *amount >= 0.0)?;
    let seconds = match unit {
        "ms" => amount / 1000.0,
        "s" => amount,
        "min" => amount * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retried_attempt_names_its_delay() {
        for (delay, read) in [(250, 250), (1_500, 1_500), (119_940, 119_900), (600_000, 600_000)] {
            let message = retrying(false, 2, Duration::from_millis(delay), &"boom (at x)");
            assert_eq!(retry_delay(&message), Some(Duration::from_millis(read)), "{message}");
        }
        let undo = retrying(true, 1, Duration::from_secs(3), &"gone");
        assert_eq!(undo, "undo attempt 1 failed (retrying in 3.0 s): gone");
        assert_eq!(retry_delay(&undo), Some(Duration::from_secs(3)));
        assert_eq!(retry_delay("step `a` failed for good: boom"), None);
    }

    #[test]
    fn stored_names_round_trip() {
        for kind in EventKind::ALL {
            assert_eq!(kind.as_str().parse::<EventKind>(), Ok(*kind));
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
        assert!("stepped".parse::<EventKind>().unwrap_err().contains("expected one of submitted, claimed"));
        assert!(EventKind::Parked == "parked");
        assert_eq!(StepStatus::Undone.to_string(), "undone");
    }
}
