//! A run submitted inside the caller's transaction and leased at once to this engine, when it
//! had a free slot: [`Submitted::start`], after the caller's commit, hands it to a driver with no
//! claim. A lone submit (`Engine::submit_value`) starts its run the same way, after its own commit.
//!
//! ```text
//!   caller's transaction ── insert run (leased to this engine) ── the caller's records ── COMMIT
//!                                                                                         │
//!   Submitted::start ──> driver, at once (no claim transaction queued beside the next submit)
//!   dropped instead ───> the lease given up (nothing if the run was never committed), claim loop woken
//! ```

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use crate::engine_state::Inner;
use crate::store::{Claimed, RunRecord};

/// A run inserted in the caller's transaction. Call [`Submitted::start`] once that commits.
#[must_use = "a submitted run is started with `start` after the commit"]
pub struct Submitted {
    run: RunRecord,
    /// This engine's slot, when the run was leased to it.
    slot: Option<OwnedSemaphorePermit>,
    inner: Arc<Inner>,
}

impl Submitted {
    /// `run` as inserted, with the slot taken for it; a run that was not leased (an earlier run
    /// of its resource key is unfinished) gives the slot back: the claim loop takes it in turn.
    pub(crate) fn new(run: RunRecord, slot: Option<OwnedSemaphorePermit>, inner: &Arc<Inner>) -> Self {
        let slot = slot.filter(|_| run.lease.is_some());
        Self { run, slot, inner: inner.clone() }
    }

    /// The run as inserted.
    pub fn run(&self) -> &RunRecord {
        &self.run
    }

    /// After the caller's commit: drives the run at once if it was leased to this engine, else
    /// wakes the claim loop.
    pub fn start(mut self) {
        match self.slot.take() {
            Some(slot) => {
                let claimed = Claimed { run: self.run.clone(), outputs: Vec::new(), recovered: false };
                self.inner.spawn_driver(claimed, slot);
            }
            None => self.inner.wake.notify_one(),
        }
    }
}

impl Drop for Submitted {
    /// Not started: the caller's transaction failed, or its outcome is unknown. The lease is
    /// given up (a no-op if the run was never committed) so that the claim loop takes the run at
    /// once rather than when the lease lapses.
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (inner, run) = (self.inner.clone(), self.run.clone());
        runtime.spawn(async move {
            let _ = inner.store.release(&run, &inner.config.owner).await;
            drop(slot);
            inner.wake.notify_one();
        });
    }
}
