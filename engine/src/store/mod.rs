//! The durable store: SQLite (WAL, the embedded default) or PostgreSQL, through sqlx.
//!
//! Both databases run the same SQL text (sqlx binds `$1` on both); where they differ (row
//! locks, advisory locks, how a write transaction begins) the difference is named at the
//! point of use. Every state change of a run is one transaction that names the lease
//! generation it was claimed under, so a worker that lost its lease writes nothing.
//!
//! | file | what it does |
//! | --- | --- |
//! | `connect.rs` | opens either database, runs the migrations, and holds the SQL surface the domain shares: [`Pool`], [`WriteTx`], and the macros that run one SQL text on either (`with_pool!`, `with_tx!`, `execute!`, `execute_in!`) |
//! | `owner.rs` | one live process per engine owner name |
//! | `submit.rs` | inserts runs, alone or inside the domain's transaction |
//! | `claim.rs` | claims due runs, renews and releases leases |
//! | `commit.rs` | checkpoints: a run's new state, its finished step and its events in one round trip (with `commit_args.rs`, `group_commit.rs`, `self_commit.rs`) |
//! | `read.rs` | runs, steps, timelines, outputs and signals, as inspection and the worker read them |
//! | `operator.rs` | cancel, signal, retry, resume |
//! | `fault.rs` | a full or read-only disk under SQLite: [`StoreFault`] names it in an error, [`DiskSpace`] on the disk itself |
//! | `events.rs` | appends an entry to a run's timeline |
//! | `records.rs` | the typed rows |

mod claim;
mod commit;
mod commit_args;
mod connect;
mod events;
mod fault;
mod group_commit;
mod operator;
mod owner;
mod read;
mod records;
mod self_commit;
mod submit;

pub(crate) use commit::{Commit, CommitOutcome, CommitShape};
pub use connect::{Pool, WriteTx};
pub use fault::{DiskSpace, StoreFault};
pub(crate) use operator::{ActionOutcome, Wake};
pub(crate) use owner::OwnerLock;
pub(crate) use records::{Claimed, NewEvent};
pub use records::{EventRecord, Lease, Millis, RunFilter, RunRecord, StepRecord};
pub(crate) use submit::NewRun;

use group_commit::GroupCommit;

/// The workflow store. Cheap to clone: it is a connection pool.
#[derive(Clone, Debug)]
pub struct Store {
    /// Every write, and the domain's queries.
    pool: Pool,
    /// The engine's own reads (inspection, outputs, signals). On SQLite a separate read-only
    /// pool, so that reads never queue behind the single writer connection; on PostgreSQL the
    /// same pool.
    reader: Pool,
    /// On SQLite, the task that commits many drivers' checkpoints in one transaction.
    group_commit: Option<GroupCommit>,
    /// On SQLite, the database file (its owner locks live beside it).
    sqlite_path: Option<std::path::PathBuf>,
}

impl Store {
    fn is_postgres(&self) -> bool {
        matches!(self.pool, Pool::Postgres(_))
    }

    /// What a `SELECT` inside a write transaction adds to keep its rows until the commit: ` FOR
    /// UPDATE` on PostgreSQL; nothing on SQLite, whose write transaction already excludes every
    /// other writer.
    fn row_lock(&self) -> &'static str {
        if self.is_postgres() { " FOR UPDATE" } else { "" }
    }
}
