//! Opening the store on SQLite or PostgreSQL (migrations included), and what the store says of
//! its database: which one it is, whether it answers, whether an error means it cannot be
//! reached, whether its disk takes writes.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::fault::{DiskSpace, StoreFault};
use super::group_commit::GroupCommit;
use super::handle::Store;
use super::kept_connections::KeptConnections;
use super::pool::{BeginWrite, Pool, WriteTx};
use super::writer::Writer;
use crate::error::EngineError;

/// How long a query waits for a connection to PostgreSQL. While the server is down (restarting,
/// unreachable) sqlx keeps trying to connect, backing off up to a fifth of this between tries,
/// and the query fails once it runs out: an API request then answers `DATABASE_UNAVAILABLE`
/// after this long rather than sqlx's default 30 s, and the pool reconnects within a second of
/// the server coming back.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

impl Store {
    /// Opens the store named by `url` (`sqlite://PATH` or `postgres://...`) and brings its
    /// schema up to date.
    pub async fn connect(url: &str) -> Result<Self, EngineError> {
        if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?;
            Self::open_sqlite(options).await
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::open_postgres(PgConnectOptions::from_str(url)?, 16).await
        } else {
            Err(EngineError::UnsupportedUrl(url.to_owned()))
        }
    }

    /// Opens (creating if needed) the SQLite database at `path`.
    pub async fn sqlite(path: &Path) -> Result<Self, EngineError> {
        Self::open_sqlite(SqliteConnectOptions::new().filename(path)).await
    }

    /// Opens SQLite with these options, adding the engine's: WAL, a full sync on every
    /// commit (an acknowledged checkpoint survives power loss too), and a busy timeout.
    pub async fn open_sqlite(options: SqliteConnectOptions) -> Result<Self, EngineError> {
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        let path = options.get_filename().to_owned();
        if path.as_os_str() == ":memory:" {
            let err = std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an in-memory SQLite database keeps nothing across a restart; name a file (sqlite://PATH)",
            );
            return Err(EngineError::Store(sqlx::Error::Io(err)));
        }
        // SQLite would open a database on a read-only mount read-only, without a word, and
        // refuse every write after; say so now.
        if DiskSpace::of(&directory_of(&path)).is_ok_and(|disk| disk.read_only) {
            let err = std::io::Error::new(
                std::io::ErrorKind::ReadOnlyFilesystem,
                format!("{} is on a file system mounted read-only", path.display()),
            );
            return Err(EngineError::Storage { fault: StoreFault::ReadOnly, source: sqlx::Error::Io(err) });
        }
        // One connection: SQLite has one writer at a time anyway, and queueing writers in the
        // pool (first come, first served) beats SQLite's busy handler, which sleeps up to 100 ms.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .after_release(|conn, _| Box::pin(still_usable(conn)))
            .connect_with(options.clone())
            .await?;
        let mut migrator = sqlx::migrate!("./migrations/sqlite");
        migrator.set_ignore_missing(true);
        migrator.run(&pool).await.map_err(EngineError::Migrate)?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.read_only(true))
            .await?;
        let group_commit = Some(GroupCommit::start(pool.clone(), Writer::open(&path, &pool).await?));
        Ok(Self {
            pool: Pool::Sqlite(pool),
            reader: Pool::Sqlite(reader),
            group_commit,
            kept_connections: None,
            sqlite_path: Some(path),
        })
    }

    /// How long the server lets a transaction sit idle before it ends the session. A process
    /// frozen (SIGSTOP, a stalled VM) inside a claim's transaction would otherwise keep the rows
    /// it locked, and every other replica's claim skips locked rows, until it resumed; the
    /// engine's transactions never wait on anything but the database.
    pub const IDLE_IN_TRANSACTION: &'static str = "10s";

    /// Opens PostgreSQL with these options and a pool of `max_connections`.
    pub async fn open_postgres(options: PgConnectOptions, max_connections: u32) -> Result<Self, EngineError> {
        let options = options.options([("idle_in_transaction_session_timeout", Self::IDLE_IN_TRANSACTION)]);
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .test_before_acquire(false)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await?;
        let mut migrator = sqlx::migrate!("./migrations/postgres");
        migrator.set_ignore_missing(true);
        migrator.run(&pool).await.map_err(EngineError::Migrate)?;
        Ok(Self {
            pool: Pool::Postgres(pool.clone()),
            reader: Pool::Postgres(pool),
            group_commit: None,
            kept_connections: Some(Arc::new(KeptConnections::new(options, max_connections as usize, ACQUIRE_TIMEOUT))),
            sqlite_path: None,
        })
    }

    /// `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    /// The connection pool, for the domain's own tables in the same database.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The pool for reads outside a transaction: on SQLite, read connections beside the one
    /// writer, so that a read does not queue behind the writes (WAL: each sees every commit made
    /// before it began); on PostgreSQL, the same pool as [`Store::pool`].
    pub fn reader(&self) -> &Pool {
        &self.reader
    }

    /// Begins a write transaction, in which the domain can write its records and submit runs
    /// (with `Engine::submit_in`) atomically.
    pub async fn begin_write(&self) -> Result<WriteTx, sqlx::Error> {
        Ok(match &self.pool {
            Pool::Sqlite(pool) => WriteTx::Sqlite(pool.begin_write().await?),
            Pool::Postgres(pool) => WriteTx::Postgres(pool.begin_write().await?),
        })
    }

    /// Whether the database answers a query within `timeout`.
    pub async fn ping(&self, timeout: Duration) -> Result<(), sqlx::Error> {
        let ping = async {
            crate::with_pool!(&self.pool, |pool| {
                let mut conn = pool.acquire().await?;
                conn.ping().await
            })
        };
        tokio::time::timeout(timeout, ping).await.unwrap_or(Err(sqlx::Error::PoolTimedOut))
    }

    /// Whether `err`, or an error in its chain of causes, says that the database cannot be
    /// reached or written now (it is restarting, a connection was cut, the server is gone, the
    /// disk is read-only or full) rather than that the request was wrong: trying again later
    /// may succeed.
    pub fn is_unreachable(err: &(dyn std::error::Error + 'static)) -> bool {
        let mut cause = Some(err);
        while let Some(err) = cause {
            if let Some(err) = err.downcast_ref::<sqlx::Error>()
                && unreachable(err)
            {
                return true;
            }
            if let Some(EngineError::Store(err)) = err.downcast_ref::<EngineError>()
                && unreachable(err)
            {
                return true;
            }
            cause = err.source();
        }
        false
    }

    /// On SQLite, whether the disk under the database is full or read-only now (see
    /// [`DiskSpace`]): what a write would meet, without waiting for one to fail. `None` on
    /// PostgreSQL, whose disk is the server's (it reports its own).
    pub fn storage_fault(&self) -> Option<StoreFault> {
        DiskSpace::of(&directory_of(self.sqlite_path.as_deref()?)).ok()?.fault()
    }

    /// Closes the pool, waiting for connections to be returned, and on SQLite the checkpoint
    /// writer's connection.
    pub async fn close(&self) {
        if let Some(group) = &self.group_commit {
            group.close().await;
        }
        if let Some(connections) = &self.kept_connections {
            connections.close().await;
        }
        crate::with_pool!(&self.pool, |pool| pool.close().await);
        crate::with_pool!(&self.reader, |pool| pool.close().await)
    }
}

/// The directory holding a database file.
fn directory_of(path: &Path) -> std::path::PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => ".".into(),
    }
}

/// Whether the writer connection can go back to the pool: not if it is still inside a
/// transaction. A write that fails on a full disk (`SQLITE_FULL`) may make SQLite roll the
/// whole transaction back by itself; the `ROLLBACK` that sqlx sends for the dropped
/// transaction then fails ("no transaction is active"), sqlx keeps counting the transaction as
/// open, and every later `BEGIN` on the connection was refused ("attempted to call begin_with
/// at non-zero transaction depth") until the process restarted. Such a connection is closed
/// and the pool opens a new one.
async fn still_usable(conn: &mut sqlx::SqliteConnection) -> Result<bool, sqlx::Error> {
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    // A transaction dropped unfinished has queued its ROLLBACK on the connection's worker: a
    // round trip behind it lets it run, then the count says whether it ended the transaction.
    conn.ping().await?;
    if conn.is_in_transaction() {
        tracing::debug!("closing the database's writer connection, left inside a transaction by a failed write");
        return Ok(false);
    }
    Ok(true)
}

/// See [`Store::is_unreachable`].
fn unreachable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(err) => {
            let code = err.code().unwrap_or_default();
            match code.parse::<i32>() {
                // SQLite's extended result codes: the primary code is the low byte. BUSY,
                // LOCKED, READONLY, IOERR, FULL, CANTOPEN.
                Ok(extended) if err.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() => {
                    matches!(extended & 0xff, 5 | 6 | 8 | 10 | 13 | 14)
                }
                // PostgreSQL: connection exceptions (class 08), the server shutting down,
                // crashed or starting (57P01-57P03), out of connections or disk (53xxx), a
                // read-only transaction on a standby (25006).
                _ => code.starts_with("08") || code.starts_with("57P") || code.starts_with("53") || code == "25006",
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::Store;

    #[test]
    fn a_cut_connection_is_unreachable_and_a_bad_query_is_not() {
        let cut = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(Store::is_unreachable(&cut));
        assert!(Store::is_unreachable(&sqlx::Error::PoolTimedOut));
        let wrapped = crate::EngineError::Store(sqlx::Error::PoolTimedOut);
        assert!(Store::is_unreachable(&wrapped));
        assert!(!Store::is_unreachable(&sqlx::Error::RowNotFound));
        assert!(!Store::is_unreachable(&sqlx::Error::PoolClosed));
    }
}
