//! The durable store: SQLite (WAL, the embedded default) or PostgreSQL, through sqlx.
//!
//! Both databases run the same SQL text (sqlx binds `$1` on both); where they differ (row
//! locks, advisory locks, how a write transaction begins) the difference is named at the
//! point of use. Every state change of a run is one transaction that names the lease
//! generation it was claimed under, so a worker that lost its lease writes nothing.
//!
//! | file | what it does |
//! | --- | --- |
//! | `handle.rs` | [`Store`], the handle every clone shares: the writer's and the reader's pools, the group-commit queue, the SQLite file |
//! | `pool.rs` | the SQL surface the domain shares: [`Pool`], [`WriteTx`], the macros that run one SQL text on either database (`with_pool!`, `with_tx!`, `execute!`, `execute_in!`), and how a write transaction begins on each |
//! | `connect.rs` | opens either database and runs the migrations; whether it answers, is unreachable, or its disk takes writes |
//! | `owner.rs` | one live process per engine owner name |
//! | `submit.rs` | inserts runs, alone or inside the domain's transaction |
//! | `submit_args.rs` | a submit's values, as a caller hands them over and owned, and the statement that inserts a run |
//! | `claim.rs` | claims due runs, renews and releases leases |
//! | `commit.rs` | checkpoints: a run's new state, its finished step and its events in one round trip |
//! | `commit_args.rs` | a checkpoint's values, as a driver hands them over and owned, and the one place they are bound |
//! | `kept_connections.rs` | on PostgreSQL, the connections checkpoints and lone submits run on, kept apart from sqlx's pool so that none is pinged after each statement |
//! | `commit_sql.rs` | the statements a checkpoint runs, by shape, on either database |
//! | `group_commit.rs` | on SQLite, the queue that commits many drivers' checkpoints (and lone submits and the domain's one-statement writes) in one transaction |
//! | `writer.rs` | on SQLite, the thread that writes checkpoints', lone submits' and the domain's one-statement writes' transactions on a connection of its own, with no hop between statements |
//! | `write_statement.rs` | the domain's one-statement writes outside a transaction: on SQLite through the group commit, on PostgreSQL on a kept connection (`write_statement!`) |
//! | `value.rs` | [`Value`], a value bound to such a write: owned, and typed when NULL |
//! | `read.rs` | runs, steps, timelines, outputs and signals, as inspection and the worker read them |
//! | `operator.rs` | cancel, signal, retry, resume |
//! | `fault.rs` | a full or read-only disk under SQLite: [`StoreFault`] names it in an error, [`DiskSpace`] on the disk itself |
//! | `events.rs` | appends an entry to a run's timeline |
//! | `records.rs` | the typed rows |
//!
//! This file only shows the folder's face: it declares the files and re-exports what the rest of
//! the engine and the domain use; no file of the store imports through it.

mod claim;
mod commit;
mod commit_args;
mod commit_sql;
mod connect;
mod due;
mod events;
pub(crate) mod fault;
mod group_commit;
mod handle;
mod kept_connections;
mod operator;
mod owner;
mod pool;
mod read;
mod records;
mod submit;
mod submit_args;
mod value;
mod write_statement;
mod writer;

pub(crate) use commit::CommitOutcome;
pub(crate) use commit_args::Commit;
pub(crate) use commit_sql::CommitShape;
pub use fault::{DiskSpace, StoreFault};
pub use handle::Store;
pub(crate) use operator::{ActionOutcome, Wake};
pub(crate) use owner::OwnerLock;
pub use pool::{Pool, WriteTx};
pub(crate) use records::{Claimed, NewEvent};
pub use records::{EventRecord, Lease, Millis, RunFilter, RunRecord, StepRecord};
pub(crate) use submit_args::NewRun;
pub use value::Value;
