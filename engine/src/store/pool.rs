//! The SQL surface the store shares with the domain: the same database, a [`Pool`] for its own
//! tables, a [`WriteTx`] in which its records and a submitted run commit together, the macros
//! that run one SQL text on either database, and [`BeginWrite`], how a write transaction begins
//! on each.

use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;
use sqlx::{Postgres, Sqlite, Transaction};

/// The store's connection pool. The domain keeps its own tables in the same database and
/// reaches them through [`with_pool!`](crate::with_pool).
#[derive(Clone, Debug)]
pub enum Pool {
    /// An embedded SQLite database.
    Sqlite(SqlitePool),
    /// A PostgreSQL server.
    Postgres(PgPool),
}

/// A write transaction on either database; see [`with_tx!`](crate::with_tx).
pub enum WriteTx {
    /// On SQLite (begun `IMMEDIATE`).
    Sqlite(Transaction<'static, Sqlite>),
    /// On PostgreSQL.
    Postgres(Transaction<'static, Postgres>),
}

impl WriteTx {
    /// Commits the transaction.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Self::Sqlite(tx) => tx.commit().await,
            Self::Postgres(tx) => tx.commit().await,
        }
    }

    /// Whether this is a PostgreSQL transaction.
    pub fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }
}

/// Runs `$body` with `$pool` bound to whichever pool a [`Pool`] holds. Both databases take the
/// same SQL text (sqlx binds `$1` on both), so the body is written once.
#[macro_export]
macro_rules! with_pool {
    ($pool_ref:expr, |$pool:ident| $body:expr) => {
        match $pool_ref {
            $crate::store::Pool::Sqlite($pool) => $body,
            $crate::store::Pool::Postgres($pool) => $body,
        }
    };
}

/// Runs `$body` with `$tx` bound to the `&mut Transaction` a [`WriteTx`] holds; execute on
/// `&mut **$tx`.
#[macro_export]
macro_rules! with_tx {
    ($write_tx:expr, |$tx:ident| $body:expr) => {
        match $write_tx {
            $crate::store::WriteTx::Sqlite($tx) => $body,
            $crate::store::WriteTx::Postgres($tx) => $body,
        }
    };
}

/// Runs one statement with these binds (`$1`, `$2`, … in order) on whichever pool a [`Pool`]
/// holds; yields `Result<u64, sqlx::Error>`, the number of rows it changed.
#[macro_export]
macro_rules! execute {
    ($pool_ref:expr, $sql:expr $(, $bind:expr)* $(,)?) => {
        $crate::with_pool!($pool_ref, |pool| {
            ::sqlx::query($sql)$(.bind($bind))*.execute(pool).await.map(|done| done.rows_affected())
        })
    };
}

/// [`execute!`] inside the caller's [`WriteTx`].
#[macro_export]
macro_rules! execute_in {
    ($write_tx:expr, $sql:expr $(, $bind:expr)* $(,)?) => {
        $crate::with_tx!($write_tx, |tx| {
            ::sqlx::query($sql)$(.bind($bind))*.execute(&mut **tx).await.map(|done| done.rows_affected())
        })
    };
}

/// Starts a transaction that will write. SQLite takes its write lock at once (`BEGIN
/// IMMEDIATE`), so that a transaction that reads first never deadlocks on upgrading its lock.
pub(super) trait BeginWrite {
    type Db: sqlx::Database;
    async fn begin_write(&self) -> Result<Transaction<'static, Self::Db>, sqlx::Error>;
}

impl BeginWrite for SqlitePool {
    type Db = Sqlite;
    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        self.begin_with("BEGIN IMMEDIATE").await
    }
}

impl BeginWrite for PgPool {
    type Db = Postgres;
    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin().await
    }
}
