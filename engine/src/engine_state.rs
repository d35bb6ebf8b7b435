//! What a running engine's tasks share ([`Inner`]): its store, registry and settings, which its
//! run drivers (`worker.rs`) read, and the claim loop's, the heartbeat's and the drivers' own
//! state, which `engine.rs` keeps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, Semaphore, broadcast, watch};
use tokio::task::AbortHandle;
use uuid::Uuid;

use crate::config::EngineConfig;
use crate::registry::Registry;
use crate::store::{OwnerLock, RunRecord, Store};

/// The state of one engine instance, shared by its claim loop, its heartbeat and the driver of
/// each run it drives.
pub(crate) struct Inner {
    pub(crate) store: Store,
    pub(crate) registry: Registry,
    pub(crate) config: EngineConfig,
    /// The owner and this process, as the timeline names it.
    pub(crate) label: String,
    pub(crate) slots: Arc<Semaphore>,
    pub(crate) wake: Notify,
    pub(crate) stop: watch::Sender<bool>,
    /// A run's driver here has stopped, with the run as committed if it ended; or (`None`) a
    /// run was cancelled before it started.
    pub(crate) finished: broadcast::Sender<(Uuid, Option<Arc<RunRecord>>)>,
    pub(crate) drivers: Mutex<HashMap<Uuid, DriverHandle>>,
    /// The last claim filled every free slot: more runs may be due, so a slot that frees up
    /// should be used at once rather than at the next poll.
    pub(crate) backlog: AtomicBool,
    /// The claim loop and the heartbeat.
    pub(crate) loops: Mutex<Vec<AbortHandle>>,
    /// This engine's exclusive hold on its owner name, released when it stops.
    pub(crate) owner_lock: Mutex<Option<OwnerLock>>,
}

/// A run this engine drives now: its task, how to tell it that the run was cancelled, and how
/// to tell it that what it polls for may have changed ([`crate::Engine::changed`]).
pub(crate) struct DriverHandle {
    pub(crate) task: AbortHandle,
    pub(crate) cancel: watch::Sender<bool>,
    /// The run's resource key, which [`crate::Engine::changed`] names.
    pub(crate) resource_key: Option<String>,
    /// Set when a change was reported while the run is driven here: a check that finds the
    /// step not ready then plans its next check for now, since it may have looked too early.
    pub(crate) changed: Arc<AtomicBool>,
}

impl Inner {
    pub(crate) fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Whether a driver of this engine is driving the run now.
    pub(crate) fn drives(&self, id: Uuid) -> bool {
        self.drivers.lock().is_ok_and(|drivers| drivers.contains_key(&id))
    }

    /// Tells the run's driver, if this engine has one, that the run was cancelled: a step in
    /// flight is stopped.
    pub(crate) fn tell_cancelled(&self, id: Uuid) {
        if let Ok(drivers) = self.drivers.lock()
            && let Some(driver) = drivers.get(&id)
        {
            driver.cancel.send_replace(true);
        }
    }

    /// Tells the drivers here of runs under `resource_key` that what they poll for may have
    /// changed.
    pub(crate) fn tell_changed(&self, resource_key: &str) {
        if let Ok(drivers) = self.drivers.lock() {
            for driver in drivers.values().filter(|driver| driver.resource_key.as_deref() == Some(resource_key)) {
                driver.changed.store(true, Ordering::Release);
            }
        }
    }

    /// Gives up the owner name (the engine has stopped, cleanly or not).
    pub(crate) fn release_owner(&self) {
        if let Ok(mut lock) = self.owner_lock.lock() {
            lock.take();
        }
    }

    /// Stops claiming and aborts every driver, as a crash would.
    pub(crate) fn stop_where_it_stands(&self) {
        self.stop.send_replace(true);
        let drivers = self.drivers.lock().map(|mut d| std::mem::take(&mut *d)).unwrap_or_default();
        for driver in drivers.into_values() {
            driver.task.abort();
        }
    }
}
