//! The test seams of the whole binary: the API's (where Kubernetes is, a pause after a launch)
//! and the CLI's own (a pause in the follower). The `anycloud` binary runs with none: only the
//! test suite's `anycloud-seamed` binary, which links this library, passes any in. A binary with
//! seams says so, loudly, whenever it serves an API.

use std::time::Duration;

use anycloud_workflows::seams::TestSeams;

/// Every seam; the default is none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seams {
    /// The API's.
    pub api: TestSeams,
    /// A pause between a follower's read of the run and its read of the events, so that a test
    /// can end a run between them.
    pub follow_gap: Option<Duration>,
}

impl Seams {
    /// The seams that are on, in words.
    pub fn describe(&self) -> Vec<String> {
        let mut on = self.api.describe();
        if let Some(gap) = self.follow_gap {
            on.push(format!("the follower pauses {} ms between its reads", gap.as_millis()));
        }
        on
    }
}

static SEAMS: std::sync::OnceLock<Seams> = std::sync::OnceLock::new();

/// Sets the process's seams, once, at start.
pub(crate) fn install(seams: Seams) {
    let _ = SEAMS.set(seams);
}

/// The process's seams.
pub(crate) fn get() -> &'static Seams {
    SEAMS.get_or_init(Seams::default)
}
