//! engine
#![allow(missing_docs)]
mod config;
mod context;
mod definition;
mod engine;
mod error;
mod registry;
mod retry;
mod status;
pub mod testing;
pub mod store;
mod worker;

pub use config::{EngineConfig, Faults};
pub use context::StepCtx;
pub use definition::{Check, Step, Steps, Workflow};
pub use engine::{Engine, RunDetail};
pub use error::{EngineError, ErrorKind, StepError, error_chain};
pub use registry::Registry;
pub use retry::{OnExhausted, RetryPolicy};
pub use status::{Phase, RunStatus};
pub use store::{EventRecord, Lease, Millis, RunFilter, RunRecord, StepRecord, Store};
