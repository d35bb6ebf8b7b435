//! What the replica tests (`tests/replicas.rs`) and their child process
//! (`src/bin/replica_child.rs`) share: several engine processes, each under its own owner name,
//! on one PostgreSQL schema, running one workflow whose steps record each execution.

/// The kind of the workflow every replica registers.
pub const WORKFLOW_KIND: &str = "replicas.steps";

/// The workflow's steps, in order. Each records its execution in [`EXECUTIONS_TABLE`].
pub const STEP_NAMES: [&str; 4] = ["prepare", "launch", "attach", "finish"];

/// One row per execution of a step, written by the step itself through its own pool: inserted
/// when the step starts (`finished_at` NULL), updated when its work is done, before the step
/// returns and the engine checkpoints it. So a row with `finished_at` NULL is a step in flight,
/// and a step with two rows ran twice.
pub const EXECUTIONS_TABLE: &str = "replica_executions";

/// The table's definition (PostgreSQL).
pub const EXECUTIONS_DDL: &str = "CREATE TABLE replica_executions (\
     id BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL, step TEXT NOT NULL, owner TEXT NOT NULL, \
     started_at BIGINT NOT NULL, finished_at BIGINT)";

/// What a child prints on its stdout once its engine has started.
pub const STARTED: &str = "started";

/// What a child prints once the runs it was asked to submit are committed.
pub const SUBMITTED: &str = "submitted";
