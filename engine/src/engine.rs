//! The engine: a claim loop and a heartbeat per instance, one task per run it drives, and the
//! calls that submit, wait for, inspect and steer runs.
//!
//! ```text
//!   submit ──insert (+ eager lease)──> store <──claim due runs── claim loop ──spawn──> driver
//!                                       ^  ^                        ^                   │
//!                                       │  └──renew leases── heartbeat                  │
//!                                       └────────── one commit per step ────────────────┘
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, broadcast, watch};
use tokio::task::AbortHandle;
use tracing::{Instrument, debug, info, warn};
use uuid::Uuid;

use crate::clock::{after, now_ms};
use crate::config::EngineConfig;
use crate::definition::Workflow;
use crate::engine_state::{DriverHandle, Inner};
use crate::error::EngineError;
use crate::registry::Registry;
use crate::status::{RunStatus, StepLimits};
use crate::store::{
    ActionOutcome, Claimed, EventRecord, Lease, Millis, NewRun, RunFilter, RunRecord, StepRecord, Store, Wake, WriteTx,
};
use crate::submitted::Submitted;
use crate::worker;

/// A running engine instance. Dropping it without [`Engine::shutdown`] leaves its leases to
/// lapse, as a crash would.
pub struct Engine {
    inner: Arc<Inner>,
}

/// A run with everything `inspect` shows.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunDetail {
    /// The run.
    pub run: RunRecord,
    /// Its finished steps and undos.
    pub steps: Vec<StepRecord>,
    /// The definition's step names, if this binary knows the run's version.
    pub plan: Option<Vec<String>>,
    /// The step in hand's deadlines and what happens when it gives up, if this binary knows
    /// the run's version.
    #[serde(default)]
    pub limits: Option<StepLimits>,
}

impl Engine {
    /// Starts an engine on `store`: takes the exclusive hold on its owner name (refused with
    /// [`EngineError::OwnerInUse`] while another live process holds it), takes back the runs a
    /// previous incarnation of the same owner left, then claims and drives due runs until
    /// [`Engine::shutdown`].
    pub async fn start(store: Store, registry: Registry, config: EngineConfig) -> Result<Self, EngineError> {
        let owner_lock = store.lock_owner(&config.owner).await?;
        let recovered = store.expire_leases_of(&config.owner).await?;
        if recovered > 0 {
            info!(owner = %config.owner, runs = recovered, "taking back runs held by a previous incarnation");
        }
        let (stop, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            label: format!("{} (pid {})", config.owner, std::process::id()),
            slots: Arc::new(Semaphore::new(config.max_concurrency)),
            store,
            registry,
            config,
            wake: Notify::new(),
            stop,
            finished: broadcast::channel(1024).0,
            drivers: Mutex::new(HashMap::new()),
            backlog: AtomicBool::new(false),
            loops: Mutex::new(Vec::new()),
            owner_lock: Mutex::new(Some(owner_lock)),
        });
        let mut loops = vec![tokio::spawn(claim_loop(inner.clone())).abort_handle()];
        if inner.config.heartbeats {
            loops.push(tokio::spawn(heartbeat_loop(inner.clone())).abort_handle());
        }
        if let Ok(mut handles) = inner.loops.lock() {
            *handles = loops;
        }
        Ok(Self { inner })
    }

    /// The store this engine runs on.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The name this engine holds leases under.
    pub fn owner(&self) -> &str {
        &self.inner.config.owner
    }

    /// Submits a run of `W`. With a resource key, it runs after every earlier unfinished run
    /// with that key. The run is durable when this returns; with a free slot, this engine
    /// starts it at once.
    pub async fn submit<W: Workflow>(&self, input: &W::Input, resource_key: Option<&str>) -> Result<Uuid, EngineError> {
        let input = serde_json::to_value(input).map_err(EngineError::Json)?;
        self.submit_value(W::KIND, W::VERSION, input, resource_key).await
    }

    /// Submits a run of a registered kind and version, with a JSON input.
    pub async fn submit_value(
        &self,
        kind: &str,
        version: u32,
        input: Value,
        resource_key: Option<&str>,
    ) -> Result<Uuid, EngineError> {
        let inner = &self.inner;
        let now = now_ms();
        let (slot, lease) = inner.free_slot(now);
        let new_run = self.new_run(kind, version, &input, resource_key, now)?;
        let run = if resource_key.is_none() {
            inner.store.submit_run(&new_run, lease.as_ref()).await?
        } else {
            let mut tx = inner.store.begin_write().await?;
            let run = Store::insert_run(&mut tx, &new_run, lease.as_ref()).await?;
            tx.commit().await?;
            run
        };
        let id = run.id;
        Submitted::new(run, slot, inner).start();
        Ok(id)
    }

    /// Submits a run of `W` inside the caller's transaction, so that the domain's records and
    /// the run commit together. Call [`Engine::wake_up`] after the commit to start it at once.
    pub async fn submit_in<W: Workflow>(
        &self,
        tx: &mut WriteTx,
        input: &W::Input,
        resource_key: Option<&str>,
    ) -> Result<Uuid, EngineError> {
        let input = serde_json::to_value(input).map_err(EngineError::Json)?;
        let run = self.new_run(W::KIND, W::VERSION, &input, resource_key, now_ms())?;
        Ok(Store::insert_run(tx, &run, None).await?.id)
    }

    /// [`Engine::submit_in`], leasing the run to this engine when it has a free slot: once the
    /// caller's transaction commits, [`Submitted::start`] drives it at once, with no claim (each
    /// claim is a write transaction of its own beside the caller's next one). Its
    /// [`Submitted::run`] is the run as inserted (what an API answers a submit with, without
    /// reading it back).
    pub async fn submit_in_leased<W: Workflow>(
        &self,
        tx: &mut WriteTx,
        input: &W::Input,
        resource_key: Option<&str>,
    ) -> Result<Submitted, EngineError> {
        let input = serde_json::to_value(input).map_err(EngineError::Json)?;
        let now = now_ms();
        let run = self.new_run(W::KIND, W::VERSION, &input, resource_key, now)?;
        let (slot, lease) = self.inner.free_slot(now);
        let run = Store::insert_run(tx, &run, lease.as_ref()).await?;
        Ok(Submitted::new(run, slot, &self.inner))
    }

    /// Tells the claim loop that runs may be due (after a [`Engine::submit_in`] commits).
    pub fn wake_up(&self) {
        self.inner.wake.notify_one();
    }

    /// A new run of a registered kind and version, unless the engine is stopping.
    fn new_run<'a>(
        &self,
        kind: &'a str,
        version: u32,
        input: &'a Value,
        resource_key: Option<&'a str>,
        now: Millis,
    ) -> Result<NewRun<'a>, EngineError> {
        if self.inner.stopping() {
            return Err(EngineError::ShuttingDown);
        }
        let names =
            self.inner.registry.step_names(kind, version).ok_or_else(|| EngineError::UnknownKind(kind.into()))?;
        Ok(NewRun { id: Uuid::new_v4(), kind, version, resource_key, input, first_step: names.first().copied(), now })
    }

    /// Waits until the run has ended and returns it.
    ///
    /// A run this engine is driving is not read from the store while it runs: its driver hands
    /// over the run as committed when it stops (see `Inner::spawn_driver`). Other runs are read,
    /// and read again every 500 ms.
    pub async fn wait(&self, id: Uuid, timeout: Duration) -> Result<RunRecord, EngineError> {
        let mut finished = self.inner.finished.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Subscribed first, so that a driver present now tells us when it stops.
            if !self.inner.drives(id) {
                let run = self.run(id).await?;
                if run.status.is_final() {
                    return Ok(run);
                }
            }
            let poll = tokio::time::sleep(Duration::from_millis(500));
            tokio::pin!(poll);
            loop {
                tokio::select! {
                    _ = &mut poll => break,
                    _ = tokio::time::sleep_until(deadline) => return Err(EngineError::Timeout(id)),
                    message = finished.recv() => match message {
                        Ok((done, _)) if done != id => continue,
                        Ok((_, Some(run))) => return Ok(Arc::unwrap_or_clone(run)),
                        // Its driver stopped short of the end, it was cancelled, or messages
                        // were missed: look again.
                        _ => break,
                    },
                }
            }
        }
    }

    /// Waits for a run of `W` to end and decodes its output; a run that ended another way
    /// returns its record as the error.
    pub async fn wait_output<W: Workflow>(
        &self,
        id: Uuid,
        timeout: Duration,
    ) -> Result<Result<W::Output, Box<RunRecord>>, EngineError> {
        let run = self.wait(id, timeout).await?;
        match (&run.status, &run.output) {
            (RunStatus::Succeeded, Some(output)) => {
                Ok(Ok(serde_json::from_value(output.clone()).map_err(EngineError::Json)?))
            }
            _ => Ok(Err(Box::new(run))),
        }
    }

    /// One run.
    pub async fn run(&self, id: Uuid) -> Result<RunRecord, EngineError> {
        self.inner.store.run(id).await?.ok_or(EngineError::UnknownRun(id))
    }

    /// Runs matching `filter`, newest first.
    pub async fn list(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, EngineError> {
        Ok(self.inner.store.list_runs(filter).await?)
    }

    /// A run with its steps and its definition's plan.
    pub async fn inspect(&self, id: Uuid) -> Result<RunDetail, EngineError> {
        let run = self.run(id).await?;
        let steps = self.inner.store.steps(id).await?;
        let plan = self.inner.registry.step_names(&run.kind, run.version);
        let plan = plan.map(|names| names.into_iter().map(str::to_owned).collect());
        let limits = if run.status.is_final() { None } else { self.inner.registry.limits(&run) };
        Ok(RunDetail { run, steps, plan, limits })
    }

    /// How many steps a definition has (`None`: a kind or version this binary does not know).
    pub fn step_count(&self, kind: &str, version: u32) -> Option<usize> {
        self.inner.registry.step_names(kind, version).map(|names| names.len())
    }

    /// The run's timeline after entry `after` (0 for all); entries are numbered 1, 2, ... within
    /// the run (`EventRecord::seq`).
    pub async fn events(&self, id: Uuid, after: i64) -> Result<Vec<EventRecord>, EngineError> {
        self.run(id).await?;
        Ok(self.inner.store.events(id, after).await?)
    }

    /// The first `limit` entries of the run's timeline after entry `after`: a page of it.
    pub async fn events_page(&self, id: Uuid, after: i64, limit: u32) -> Result<Vec<EventRecord>, EngineError> {
        self.run(id).await?;
        Ok(self.inner.store.events_page(id, after, i64::from(limit)).await?)
    }

    /// Runs the current step of a waiting, backing-off or parked run now. A parked step gets
    /// one more attempt; if it fails again it parks again.
    pub async fn retry(&self, id: Uuid) -> Result<RunStatus, EngineError> {
        let outcome = self.inner.store.wake(id, Wake::Retry, now_ms()).await?;
        self.after_action(id, outcome, "only a waiting, retrying or parked run can be retried")
    }

    /// Continues a parked run, giving its current step a fresh retry budget.
    pub async fn resume(&self, id: Uuid) -> Result<RunStatus, EngineError> {
        let outcome = self.inner.store.wake(id, Wake::Resume, now_ms()).await?;
        self.after_action(id, outcome, "only a run in needs-attention can be resumed")
    }

    /// Cancels a run: it turns back and ends `cancelled`. A step running now is stopped (at
    /// once if this engine drives the run, at the driver's next heartbeat otherwise) and its undo
    /// runs first, then the undos of the completed steps in reverse order. A run that never
    /// started and whose first step has no undo ends at once. A run whose every step is
    /// checkpointed is ending: its cancel is refused, as if it had ended.
    pub async fn cancel(&self, id: Uuid) -> Result<RunStatus, EngineError> {
        let registry = &self.inner.registry;
        let nothing_to_undo = |kind: &str, version: u32| !registry.first_step_has_undo(kind, version);
        let step_count = |kind: &str, version: u32| registry.step_count(kind, version);
        let outcome = self.inner.store.cancel(id, now_ms(), nothing_to_undo, step_count).await?;
        if matches!(outcome, ActionOutcome::Done(_)) {
            self.inner.tell_cancelled(id);
        }
        self.after_action(id, outcome, "the run has already ended")
    }

    /// Sends a durable signal to a run; a waiting run is woken to see it.
    pub async fn signal(&self, id: Uuid, name: &str, payload: &Value) -> Result<RunStatus, EngineError> {
        let outcome = self.inner.store.signal(id, name, payload, now_ms()).await?;
        self.after_action(id, outcome, "the run has already ended")
    }

    /// Tells the engine that something under `resource_key` changed (a watch saw it): its runs
    /// that wait in a poll or a sleep check now rather than at their planned time, and one in a
    /// check now, which may have looked too early, checks once more right after. No timeline
    /// entry: a check is not an event, and the planned checks stay as the safety net should a
    /// change go unreported. Returns how many waiting runs were made due.
    pub async fn changed(&self, resource_key: &str) -> Result<u64, EngineError> {
        self.changed_all(&[resource_key]).await
    }

    /// [`Engine::changed`] for many keys at once, in one transaction: what a watch that saw many
    /// changes since it last told the engine asks, so that a burst of changes costs one commit
    /// rather than one each.
    pub async fn changed_all(&self, resource_keys: &[&str]) -> Result<u64, EngineError> {
        for resource_key in resource_keys {
            self.inner.tell_changed(resource_key);
        }
        let due = self.inner.store.make_due(resource_keys, now_ms()).await?;
        if due > 0 {
            self.inner.wake.notify_one();
        }
        Ok(due)
    }

    fn after_action(&self, id: Uuid, outcome: ActionOutcome, hint: &'static str) -> Result<RunStatus, EngineError> {
        match outcome {
            ActionOutcome::Done(status) => {
                self.inner.wake.notify_one();
                if status == RunStatus::Cancelled {
                    let _ = self.inner.finished.send((id, None));
                }
                Ok(status)
            }
            ActionOutcome::NotApplicable(status) => Err(EngineError::InvalidState { run: id, status, hint }),
            ActionOutcome::NotFound => Err(EngineError::UnknownRun(id)),
        }
    }

    /// Stops claiming, lets each step in flight finish and checkpoint (for at most `grace`),
    /// then gives up every lease this engine holds, so another engine can continue at once.
    pub async fn shutdown(self, grace: Duration) {
        let inner = self.inner.clone();
        inner.stop.send_replace(true);
        inner.wake.notify_waiters();
        let all = inner.config.max_concurrency as u32;
        if tokio::time::timeout(grace, inner.slots.acquire_many(all)).await.is_err() {
            let drivers: Vec<AbortHandle> = inner
                .drivers
                .lock()
                .map(|d| d.values().map(|driver| driver.task.clone()).collect())
                .unwrap_or_default();
            warn!(owner = %inner.config.owner, runs = drivers.len(), "steps still running after the grace period; stopping them");
            for driver in drivers {
                driver.abort();
            }
            // The aborted steps were cut short: the next claim counts them as interrupted.
            if let Err(err) = inner.store.expire_leases_of(&inner.config.owner).await {
                warn!(error = %crate::error::error_chain(&err), "could not give up leases on shutdown");
            }
        }
        inner.release_owner();
    }
}

impl Drop for Engine {
    /// Stops every task of this engine where it stands, as a crash would: leases are left to
    /// lapse (or to be taken back by the next engine with the same owner name).
    fn drop(&mut self) {
        self.inner.stop.send_replace(true);
        let loops = self.inner.loops.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default();
        let drivers = self.inner.drivers.lock().map(|mut d| std::mem::take(&mut *d)).unwrap_or_default();
        for task in loops.into_iter().chain(drivers.into_values().map(|driver| driver.task)) {
            task.abort();
        }
        self.inner.release_owner();
    }
}

impl Inner {
    /// A free slot of this engine, if there is one, and the lease a run submitted at `now` takes
    /// with it.
    fn free_slot(&self, now: Millis) -> (Option<OwnedSemaphorePermit>, Option<Lease>) {
        let slot = self.slots.clone().try_acquire_owned().ok();
        let lease = slot
            .as_ref()
            .map(|_| Lease { owner: self.config.owner.clone(), expires_at: after(now, self.config.lease_ttl) });
        (slot, lease)
    }

    pub(crate) fn spawn_driver(self: &Arc<Self>, claimed: Claimed, permit: OwnedSemaphorePermit) {
        let inner = self.clone();
        let id = claimed.run.id;
        let span = tracing::info_span!("run", run_id = %id, kind = %claimed.run.kind);
        let (cancel, cancelled) = watch::channel(false);
        let resource_key = claimed.run.resource_key.clone();
        let changed = Arc::new(AtomicBool::new(false));
        let told = changed.clone();
        // Hold the map while spawning, so the task's own removal comes after this insert.
        let Ok(mut drivers) = self.drivers.lock() else { return };
        let handle = tokio::spawn(
            async move {
                let ended = worker::drive(&inner, claimed, cancelled, &told).await;
                if let Ok(mut drivers) = inner.drivers.lock()
                    && drivers.get(&id).is_some_and(|driver| driver.task.id() == tokio::task::id())
                {
                    drivers.remove(&id);
                    // Under the lock: a waiter that found this driver in the map was
                    // subscribed by then, and gets this message.
                    let _ = inner.finished.send((id, ended.map(Arc::new)));
                }
                drop(permit);
                if inner.backlog.load(Ordering::Relaxed) {
                    inner.wake.notify_one();
                }
            }
            .instrument(span),
        );
        // A driver already here lost its lease (its heartbeat failed) and is fenced: stop it.
        if let Some(stale) =
            drivers.insert(id, DriverHandle { task: handle.abort_handle(), cancel, resource_key, changed })
        {
            stale.task.abort();
        }
    }
}

async fn claim_loop(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    // Said once per outage of the store, not at every poll.
    let mut failing = false;
    // The leases that failed claims may have taken all the same (the first and last expiry),
    // until they are given up.
    let mut lost_claims: Option<(Millis, Millis)> = None;
    let mut batch = inner.config.claim_batch;
    while !inner.stopping() {
        let free = inner.slots.available_permits().min(batch as usize) as u32;
        let mut full_batch = false;
        if free > 0 {
            let now = now_ms();
            let lease_until = after(now, inner.config.lease_ttl);
            match inner.store.claim(&inner.config.owner, &inner.label, now, lease_until, free).await {
                Ok(claimed) => {
                    if std::mem::take(&mut failing) {
                        info!("claiming runs works again");
                    }
                    full_batch = claimed.len() as u32 == free;
                    inner.backlog.store(full_batch, Ordering::Relaxed);
                    batch = next_batch(&inner.config, batch, full_batch);
                    for run in claimed {
                        match inner.slots.clone().try_acquire_owned() {
                            Ok(permit) => inner.spawn_driver(run, permit),
                            Err(_) => {
                                // A submit took the slot meanwhile: hand the run back.
                                let _ = inner.store.release(&run.run, &inner.config.owner).await;
                            }
                        }
                    }
                    if let Some(lost) = lost_claims {
                        let driving: Vec<Uuid> =
                            inner.drivers.lock().map(|drivers| drivers.keys().copied().collect()).unwrap_or_default();
                        match inner.store.release_lost_claims(&inner.config.owner, lost, &driving).await {
                            Ok(runs) => {
                                lost_claims = None;
                                if runs > 0 {
                                    info!(runs, "gave up the runs a failed claim had taken; they are claimed again");
                                }
                            }
                            Err(err) => {
                                debug!(error = %crate::error::error_chain(&err), "giving up lost claims failed")
                            }
                        }
                    }
                }
                Err(err) => {
                    lost_claims =
                        Some(lost_claims.map_or((lease_until, lease_until), |(first, _)| (first, lease_until)));
                    if !std::mem::replace(&mut failing, true) {
                        warn!(error = %crate::error::error_chain(&err), "claiming runs failed; trying again at every poll");
                    }
                }
            }
        }
        if full_batch {
            continue;
        }
        tokio::select! {
            _ = inner.wake.notified() => {}
            _ = tokio::time::sleep(inner.config.poll_interval) => {}
            _ = stop.changed() => {}
        }
    }
}

/// How far a backlog grows the claim's batch: up to this many times `claim_batch`.
const BACKLOG_GROWTH: u32 = 16;

/// The next claim's batch: twice this one while claims come back full (a backlog, such as the
/// runs of a dead engine: a few large transactions rather than one per `claim_batch`), and
/// `claim_batch` again once one does not.
fn next_batch(config: &EngineConfig, batch: u32, full: bool) -> u32 {
    if full {
        batch.saturating_mul(2).min(config.claim_batch.saturating_mul(BACKLOG_GROWTH))
    } else {
        config.claim_batch
    }
}

/// How soon the heartbeat tries again after the store failed: the leases must be renewed as
/// soon as the store answers again, before they lapse.
const HEARTBEAT_RETRY: Duration = Duration::from_secs(1);

async fn heartbeat_loop(inner: Arc<Inner>) {
    let every = inner.config.lease_ttl / 3;
    let mut stop = inner.stop.subscribe();
    let mut failing = false;
    loop {
        let wait = if failing { every.min(HEARTBEAT_RETRY) } else { every };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => {}
        }
        let drained = inner.stopping() && inner.slots.available_permits() == inner.config.max_concurrency;
        if drained {
            return;
        }
        let driving: Vec<Uuid> =
            inner.drivers.lock().map(|drivers| drivers.keys().copied().collect()).unwrap_or_default();
        let now = now_ms();
        let until = after(now, inner.config.lease_ttl);
        match inner.store.heartbeat(&inner.config.owner, &driving, now, until).await {
            // A cancel sent through another engine (another API replica) reaches the step here.
            Ok(renewed) => {
                if std::mem::take(&mut failing) {
                    info!(runs = renewed.len(), "renewing leases works again");
                }
                renewed.iter().filter(|lease| lease.cancel_requested).for_each(|lease| inner.tell_cancelled(lease.run))
            }
            Err(err) => {
                if !std::mem::replace(&mut failing, true) {
                    warn!(error = %crate::error::error_chain(&err), "renewing leases failed; trying again every second");
                }
                continue;
            }
        }
        if !inner.keep_owner_name().await {
            return;
        }
    }
}

impl Inner {
    /// Checks that this engine still holds its owner name, and takes it again if the database
    /// dropped it (a PostgreSQL restart, or its connection cut). Returns false, having stopped
    /// the engine, if another live process took the name meanwhile: that process takes back
    /// every run held under the name, so this one must stop driving them.
    async fn keep_owner_name(self: &Arc<Self>) -> bool {
        let taken = self.owner_lock.lock().ok().and_then(|mut lock| lock.take());
        let held = match taken {
            Some(mut lock) => lock.is_held().await.then_some(lock),
            // Given up on shutdown; or lost, and taking it again failed last time.
            None if self.stopping() => return true,
            None => None,
        };
        let lock = match held {
            Some(lock) => lock,
            None => match self.store.lock_owner(&self.config.owner).await {
                Ok(lock) => {
                    info!(owner = %self.config.owner, "the database dropped this engine's hold on its name; it holds it again");
                    lock
                }
                Err(EngineError::OwnerInUse(_)) => {
                    tracing::error!(
                        owner = %self.config.owner,
                        "another process took this engine's name while the database was unreachable; it takes \
                         back the runs held under it, so this engine stops driving them"
                    );
                    self.stop_where_it_stands();
                    return false;
                }
                Err(err) => {
                    // Still unreachable: the next heartbeat tries again. Until then no other
                    // process can start under the name either, since it cannot reach the
                    // database.
                    warn!(error = %crate::error::error_chain(&err), "taking this engine's name again failed");
                    return true;
                }
            },
        };
        if !self.stopping()
            && let Ok(mut slot) = self.owner_lock.lock()
        {
            *slot = Some(lock);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backlog_doubles_the_claim_up_to_sixteen_times_and_a_short_claim_resets_it() {
        let config = EngineConfig { claim_batch: 64, ..EngineConfig::named("test") };
        let mut batch = config.claim_batch;
        let mut seen = Vec::new();
        for _ in 0..6 {
            batch = next_batch(&config, batch, true);
            seen.push(batch);
        }
        assert_eq!(seen, [128, 256, 512, 1024, 1024, 1024]);
        assert_eq!(next_batch(&config, batch, false), 64, "a claim that came back short starts over");
        let huge = EngineConfig { claim_batch: u32::MAX, ..EngineConfig::named("test") };
        assert_eq!(next_batch(&huge, u32::MAX, true), u32::MAX, "no overflow");
    }
}
