//! The domain's own tables (credentials, clusters, their VMs, deployments, secrets) in the engine's
//! database: their migrations, and every SQL statement the domain runs, one file per table.
//! Nothing else in the domain names sqlx or a pool: workflows and operations call these
//! functions with a [`Db`], or with the [`WriteTx`] an operation submits its run in.

pub mod clusters;
pub mod console_sessions;
pub mod credentials;
pub mod deployments;
pub mod hosted_apis;
pub mod revisions;
pub mod sealing_key;
pub mod secrets;
pub mod spec;
pub mod vms;

use anycloud_engine::store::Value;
use anycloud_engine::{EngineError, Pool, Store, WriteTx};

use crate::secrets::Place;

/// The database the domain shares with the engine. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Db {
    store: Store,
}

impl Db {
    /// The domain's tables in `store`'s database, brought up to date.
    pub async fn open(store: &Store) -> Result<Self, EngineError> {
        match store.pool() {
            Pool::Sqlite(pool) => {
                let mut migrator = sqlx::migrate!("./migrations/sqlite");
                migrator.set_ignore_missing(true);
                migrator.run(pool).await.map_err(EngineError::Migrate)?;
            }
            Pool::Postgres(pool) => {
                let mut migrator = sqlx::migrate!("./migrations/postgres");
                migrator.set_ignore_missing(true);
                migrator.run(pool).await.map_err(EngineError::Migrate)?;
            }
        }
        Ok(Self { store: store.clone() })
    }

    /// Begins a write transaction: records written in it and runs submitted in it
    /// (`Engine::submit_in`) commit together.
    pub async fn begin(&self) -> Result<WriteTx, sqlx::Error> {
        self.store.begin_write().await
    }

    /// Runs one write outside a transaction, committed when this returns; the table modules
    /// call it through [`write_statement!`](anycloud_engine::write_statement): on SQLite it
    /// commits with the runs' checkpoints, not as a transaction of its own
    /// ([`Store::write_statement`]).
    pub async fn write_statement(&self, sql: impl Into<String>, values: Vec<Value>) -> Result<u64, sqlx::Error> {
        self.store.write_statement(sql, values).await
    }

    /// The pool, for the domain's table modules (and the simulated cloud's, which keeps its
    /// state in the same database).
    pub fn pool(&self) -> &Pool {
        self.store.pool()
    }

    /// The pool for reads outside a transaction ([`anycloud_engine::Store::reader`]): every
    /// such read of the table modules (the API's answers, a step's checks), so that none queues
    /// behind the writer; [`Db::pool`] is for writes, and for reads a startup check makes
    /// beside its writes.
    pub fn reader(&self) -> &Pool {
        self.store.reader()
    }
}

/// Whether a write failed on a unique constraint: another request took the name first.
pub fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error().is_some_and(|err| err.is_unique_violation())
}

/// A column that holds sealed values ([`crate::secrets::SecretBox`]), and the column that keys
/// its rows: a value is sealed for its table, column and row, and opens nowhere else.
#[derive(Clone, Copy, Debug)]
pub struct SealedColumn {
    /// The table.
    pub table: &'static str,
    /// The column that keys its rows (their primary key).
    pub key: &'static str,
    /// The column of sealed values.
    pub column: &'static str,
}

impl SealedColumn {
    /// The place of the value in row `row`.
    pub fn place(self, row: &str) -> Place<'_> {
        Place { table: self.table, column: self.column, row }
    }
}

/// Every column of sealed values, which `sealing_key::check` re-seals for their places when
/// they were sealed without.
pub const SEALED_COLUMNS: [SealedColumn; 4] =
    [credentials::SECRET, clusters::SECRETS, hosted_apis::IDENTITY, secrets::VALUES];
