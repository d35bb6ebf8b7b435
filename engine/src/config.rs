//! How an engine instance behaves: its name, its capacity, its leases.

use std::time::Duration;

/// Settings of one engine instance.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The name this instance holds leases under. Give a process a stable name (the API's id)
    /// so that after a crash its restart takes its runs back at once instead of waiting for
    /// their leases to lapse. Two live processes never share a name: [`Engine::start`] holds a
    /// lock on it for as long as the engine lives, and refuses a name another process holds.
    ///
    /// [`Engine::start`]: crate::Engine::start
    pub owner: String,
    /// Runs driven at the same time.
    pub max_concurrency: usize,
    /// How long a claim lasts without a heartbeat. Heartbeats renew it every third of this.
    pub lease_ttl: Duration,
    /// How often the store is asked for due runs when nothing wakes the engine sooner.
    pub poll_interval: Duration,
    /// Runs taken in one claim. While claims come back full (a backlog) each next one takes
    /// twice as many, up to 16 times this; the first that does not starts from this again.
    pub claim_batch: u32,
    /// Renew leases (turn off only to test fencing).
    pub heartbeats: bool,
    /// Faults to inject, for tests of workflows.
    pub faults: Faults,
    /// Awaited before every attempt of a step or an undo: what makes the store's commits so far
    /// durable beyond this process. An API whose SQLite state is shipped to a bucket waits for
    /// the ship here, so a step acts on the world only once the checkpoints before it (a secret
    /// it uses, the output it builds on) would survive a lost disk. `None`: the store's own
    /// commit is durable enough.
    pub before_act: Option<BeforeAct>,
}

/// See [`EngineConfig::before_act`]. An error is the reason the attempt waits (it is retried).
#[derive(Clone)]
pub struct BeforeAct(
    pub std::sync::Arc<dyn Fn() -> futures::future::BoxFuture<'static, Result<(), String>> + Send + Sync>,
);

impl std::fmt::Debug for BeforeAct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeforeAct(..)")
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            owner: format!("engine-{}", uuid::Uuid::new_v4().simple()),
            max_concurrency: 64,
            lease_ttl: Duration::from_secs(30),
            poll_interval: Duration::from_millis(250),
            claim_batch: 64,
            heartbeats: true,
            faults: Faults::default(),
            before_act: None,
        }
    }
}

impl EngineConfig {
    /// The defaults, under a stable owner name.
    pub fn named(owner: impl Into<String>) -> Self {
        Self { owner: owner.into(), ..Self::default() }
    }
}

/// Faults the engine injects on purpose, so that tests can prove a workflow's steps are
/// idempotent and its undos leave a clean slate. All off by default.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Fail this step (by name) with a terminal error instead of running it.
    pub fail_step: Option<String>,
    /// Run every action twice, keeping the second output, as a crash before the checkpoint would.
    pub run_steps_twice: bool,
    /// Run every undo twice.
    pub run_undos_twice: bool,
    /// Once this step (by name) has done its work, act as if a cancel arrived while it ran and
    /// the process died before its checkpoint: the cancel is recorded, the step's output is lost,
    /// and the run turns back with the step's undo first.
    pub cancel_in_flight: Option<String>,
}
