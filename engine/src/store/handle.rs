//! The store's handle, [`Store`]: what each clone shares (the writer's and the reader's pools, on
//! SQLite the group-commit queue and the database file). Its operations are in the files of their
//! ideas (`connect.rs`, `submit.rs`, `claim.rs`, `commit.rs`, ...).

use std::path::PathBuf;
use std::sync::Arc;

use super::group_commit::GroupCommit;
use super::kept_connections::KeptConnections;
use super::pool::Pool;

/// The workflow store. Cheap to clone: it is a connection pool.
#[derive(Clone, Debug)]
pub struct Store {
    /// Every write, and the domain's queries.
    pub(super) pool: Pool,
    /// The engine's own reads (inspection, outputs, signals). On SQLite a separate read-only
    /// pool, so that reads never queue behind the single writer connection; on PostgreSQL the
    /// same pool.
    pub(super) reader: Pool,
    /// On SQLite, the task that commits many drivers' checkpoints in one transaction.
    pub(super) group_commit: Option<GroupCommit>,
    /// On PostgreSQL, the connections checkpoints and lone submits run on, apart from the pool.
    pub(super) kept_connections: Option<Arc<KeptConnections>>,
    /// On SQLite, the database file (its owner locks live beside it).
    pub(super) sqlite_path: Option<PathBuf>,
}

impl Store {
    pub(super) fn is_postgres(&self) -> bool {
        matches!(self.pool, Pool::Postgres(_))
    }

    /// What a `SELECT` inside a write transaction adds to keep its rows until the commit: ` FOR
    /// UPDATE` on PostgreSQL; nothing on SQLite, whose write transaction already excludes every
    /// other writer.
    pub(super) fn row_lock(&self) -> &'static str {
        if self.is_postgres() { " FOR UPDATE" } else { "" }
    }
}
