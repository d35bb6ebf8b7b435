//! End-to-end and crash tests of anycloud that run real processes against real databases.
//!
//! The library holds what a test and the child processes it starts must agree on; the tests
//! themselves live in `tests/`, the child processes in `src/bin/`. [`e2e`] holds what the
//! end-to-end tests of the `anycloud` binary (`tests/api_*.rs`) share; [`replicas`] what the
//! tests of several engine processes on one PostgreSQL share; [`provider_state`] what the tests
//! that compare a workflow's end with the provider's own state share.

pub mod browser;
pub mod e2e;
pub mod fake_gce;
pub mod fake_gcs;
pub mod fake_gcs_signed_url;
pub mod fake_google;
pub mod fake_iam;
pub mod fake_secret_manager;
pub mod fault_proxy;
pub mod gcp_test_key;
pub mod provider_state;
pub mod replicas;
pub mod rfc3339;
pub mod simulated_kube;
pub mod source_code;
/// A small tmpfs of a test's own, to fill; the one copy is the engine tests' (`support/tmpfs.rs`).
#[path = "../../engine/tests/support/tmpfs.rs"]
pub mod tmpfs;
pub mod vm_runner;

/// What the crash test (`tests/crash.rs`) and its child process (`src/bin/crash_child.rs`)
/// share: the workflow's shape, the engine's settings, and the side-effect record.
pub mod crash {
    use serde::{Deserialize, Serialize};

    /// The kind of the workflow the child registers.
    pub const WORKFLOW_KIND: &str = "crash.steps";

    /// The workflow's steps, in order. Each writes one side effect.
    pub const STEP_NAMES: [&str; 6] = ["reserve", "allocate", "configure", "attach", "verify", "publish"];

    /// The engine owner of every incarnation of the child: stable, so that a restart takes
    /// back the runs of the killed incarnation at once.
    pub const OWNER: &str = "crash-child";

    /// Runs one child drives at the same time; also the most steps a kill can interrupt.
    pub const MAX_CONCURRENCY: usize = 4;

    /// The independent record of side effects: one row per execution of a step, written by
    /// the step itself through its own connection pool, in its own committed transaction.
    pub const SIDE_EFFECTS_TABLE: &str = "side_effects";

    /// What each step returns, and the engine checkpoints: which side-effect row it wrote.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub struct StepOutput {
        /// The `seq` of the side-effect row this execution of the step wrote.
        pub seq: i64,
        /// The child incarnation that executed it.
        pub incarnation: i64,
    }
}
