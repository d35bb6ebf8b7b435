//! A durable workflow engine: typed steps, checkpointed in SQLite or PostgreSQL, retried and
//! undone by a generic worker.
//!
//! 1. **Define** a [`Workflow`]: a stable kind, a version, a serde input and output, and an
//!    ordered list of named [`Step`]s. A step is an async function whose output is
//!    checkpointed; it may have an undo, a [`RetryPolicy`], an attempt deadline, or be a durable
//!    poll or sleep. A step whose output others read is named by a typed [`StepKey`].
//! 2. **Register** it in a [`Registry`] and **start** an [`Engine`] on a [`Store`].
//! 3. **Submit** runs. Each finished step is committed with the run's advance in one
//!    transaction; a crash re-runs only the step that was in flight, with the same
//!    [`StepCtx::idempotency_key`]. A terminal failure or a cancel undoes completed steps in
//!    reverse order, and first a step that was cut short ([`Effect::Unknown`]).
//! 4. **Inspect** and steer runs: [`Engine::inspect`], [`Engine::events`], [`Engine::retry`],
//!    [`Engine::resume`], [`Engine::cancel`]. [`testing`] proves a workflow's steps are
//!    idempotent and its undos complete.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use anycloud_engine::{Effect, Engine, EngineConfig, Registry, Step, StepCtx, StepError, StepKey, Steps, Store, Workflow};
//!
//! /// Books a trip: a hotel, then a flight. If the flight cannot be had, the hotel is cancelled.
//! struct BookTrip;
//!
//! /// The steps whose outputs are read, each declared once with its output's type.
//! const BOOK_HOTEL: StepKey<String> = StepKey::new("book_hotel");
//! const BOOK_FLIGHT: StepKey<String> = StepKey::new("book_flight");
//!
//! impl Workflow for BookTrip {
//!     const KIND: &'static str = "trip.book";
//!     const VERSION: u32 = 1;
//!     type Input = String;
//!     type Output = String;
//!
//!     fn steps() -> Steps<Self> {
//!         Steps::new()
//!             .then(Step::action(BOOK_HOTEL, book_hotel).undo(cancel_hotel))
//!             .then(Step::action(BOOK_FLIGHT, book_flight))
//!     }
//!
//!     fn output(ctx: &StepCtx<Self>) -> Result<String, StepError> {
//!         Ok(format!("{} + {}", ctx.output(BOOK_HOTEL)?, ctx.output(BOOK_FLIGHT)?))
//!     }
//! }
//!
//! async fn book_hotel(ctx: StepCtx<BookTrip>) -> Result<String, StepError> {
//!     // Pass the key to the hotel's API so that a repeated call books one room, not two.
//!     Ok(format!("hotel in {} (request {})", ctx.input(), ctx.idempotency_key()))
//! }
//!
//! /// `Done(booking)` when the booking completed; `Unknown` when the step was cut short: then
//! /// the hotel is asked for a booking made under the step's idempotency key.
//! async fn cancel_hotel(_ctx: StepCtx<BookTrip>, _booking: Effect<String>) -> Result<(), StepError> {
//!     Ok(())
//! }
//!
//! async fn book_flight(ctx: StepCtx<BookTrip>) -> Result<String, StepError> {
//!     Ok(format!("flight to {}", ctx.input()))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("engine-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! let store = Store::connect(&format!("sqlite://{}", dir.join("runs.db").display())).await?;
//! let registry = Registry::new().with(Arc::new(BookTrip));
//! let engine = Engine::start(store, registry, EngineConfig::named("doc-example")).await?;
//!
//! let run = engine.submit::<BookTrip>(&"Lisbon".to_owned(), Some("traveller/ada")).await?;
//! let trip = engine.wait_output::<BookTrip>(run, Duration::from_secs(10)).await?;
//! assert!(trip.is_ok_and(|trip| trip.ends_with("flight to Lisbon")));
//!
//! let detail = engine.inspect(run).await?;
//! assert_eq!(detail.steps.len(), 2);
//! engine.shutdown(Duration::from_secs(5)).await;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! The model, the state diagram of a run and the guarantees are in `docs/engine.md`.

mod clock;
mod config;
mod context;
mod definition;
mod engine;
mod engine_state;
mod error;
mod registry;
mod retry;
mod status;
pub mod store;
mod submitted;
pub mod testing;
mod timeline;
mod worker;

pub use config::{BeforeAct, EngineConfig, Faults};
pub use definition::{Check, DEFAULT_ATTEMPT_TIMEOUT, Effect, Step, StepCtx, StepKey, StepName, Steps, Workflow};
pub use engine::{Engine, RunDetail};
pub use error::{EngineError, ErrorKind, StepError, error_chain};
pub use registry::Registry;
pub use retry::{OnExhausted, RetryPolicy};
pub use status::{Phase, RunStatus, StepLimits, StepShape};
pub use store::{
    DiskSpace, EventRecord, Lease, Millis, Pool, RunFilter, RunRecord, StepRecord, Store, StoreFault, WriteTx,
};
pub use submitted::Submitted;
pub use timeline::{EventKind, StepStatus, retry_delay};
