//! On SQLite, the thread that writes checkpoints, lone submits and the domain's one-statement
//! writes: it owns a connection of its own (rusqlite, on the same SQLite library that sqlx
//! links) and runs a whole transaction per call, its statements prepared once, with no thread
//! hop between them.
//!
//! ```text
//!   group commit ──(checkpoints, submits, statements: one transaction)──> writer thread ── BEGIN IMMEDIATE
//!        ^                                                                              ── each one's statements
//!        └──── one answer each: a checkpoint's, the run's seq, the rows changed ───────── ── COMMIT
//! ```
//!
//! Through sqlx every statement goes to its connection's worker thread and its result comes back
//! over a channel: a transaction of four statements is four round trips between threads, or one
//! long batch whose rows and results still come back one message each. Here the caller sends the
//! transaction once and is woken once. Everything else (claims, operators' actions, the domain's
//! transactions and the submits inside them) still writes through sqlx's one writer connection;
//! the group-commit task holds that connection while the thread writes, so the two never contend
//! for SQLite's write lock inside this process.

use std::path::Path;
use std::sync::mpsc;

use rusqlite::{Connection, OpenFlags, ToSql};
use tokio::sync::oneshot;

use super::commit_args::CommitArgs;
use super::commit_sql::SQLITE_STATEMENTS;
use super::submit_args::{SUBMIT_SQLITE, SubmitArgs};
use super::value::Value;

/// Most statements the connection keeps prepared: each checkpoint shape's few and the domain's
/// one-statement writes, with room.
const PREPARED: usize = 128;

/// One write of a transaction.
#[expect(clippy::large_enum_variant, reason = "checkpoints are most writes: boxing them would allocate for every step")]
pub(crate) enum Write {
    /// A checkpoint.
    Checkpoint(CommitArgs),
    /// A lone submit: a run with no resource key and its `submitted` entry.
    Submit(SubmitArgs),
    /// One of the domain's statements, outside any transaction of its own.
    Statement(Statement),
}

/// A statement and its values, `$1` first.
#[derive(Debug)]
pub(crate) struct Statement {
    pub(crate) sql: String,
    pub(crate) values: Vec<Value>,
}

/// What a [`Write`] answers.
#[derive(Debug)]
pub(crate) enum Written {
    /// A checkpoint: `None` if it was fenced, else whether a cancel is requested.
    Checkpoint(Option<bool>),
    /// A submit: the run's `seq`.
    Submit(i64),
    /// A statement: the rows it changed.
    Changed(u64),
    /// A statement that failed on its own (a constraint, say): SQLite undid it and kept the
    /// transaction, so the group's other writes commit.
    Refused(sqlx::Error),
}

type Answers = Result<Vec<Written>, sqlx::Error>;

/// What the thread is asked to do.
enum Job {
    /// Write these in order in one transaction, and answer.
    Write { writes: Vec<Write>, answer: oneshot::Sender<Answers> },
    /// Close the connection and end, then say so.
    Close { closed: oneshot::Sender<()> },
}

/// The writer thread's queue; the thread ends when the last clone is dropped.
#[derive(Clone, Debug)]
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
}

/// The settings of a connection that SQLite keeps per connection, not in the file: the writer
/// thread's connection takes them from sqlx's writer connection, so that it writes as the rest
/// of the store does (a checkpointed API's `wal_autocheckpoint=0` above all: a connection that
/// folded the WAL into the database by itself would rewrite frames not yet shipped).
const PER_CONNECTION: [&str; 4] = ["synchronous", "wal_autocheckpoint", "foreign_keys", "busy_timeout"];

impl Writer {
    /// Opens the database at `path` (already created and migrated), with the per-connection
    /// settings that `pool`'s connection has, and starts the thread.
    pub(crate) async fn open(path: &Path, pool: &sqlx::SqlitePool) -> Result<Self, sqlx::Error> {
        let mut settings = Vec::with_capacity(PER_CONNECTION.len());
        for name in PER_CONNECTION {
            let value: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("PRAGMA {name}"))).fetch_one(pool).await?;
            settings.push((name, value));
        }
        let conn = connect(path, &settings).map_err(to_sqlx)?;
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("anycloud-sqlite-writer".into())
            .spawn(move || serve(conn, &queue))
            .map_err(sqlx::Error::Io)?;
        Ok(Self { jobs })
    }

    /// Writes `writes` in order in one transaction; returns what each one answered. All or
    /// none: an error fails every one of them.
    pub(crate) async fn write(&self, writes: Vec<Write>) -> Answers {
        let (answer, answered) = oneshot::channel();
        self.jobs.send(Job::Write { writes, answer }).map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }

    /// Closes the thread's connection (its file is then closed, as `Store::close` promises) and
    /// ends the thread; later writes fail.
    pub(crate) async fn close(&self) {
        let (closed, done) = oneshot::channel();
        if self.jobs.send(Job::Close { closed }).is_ok() {
            let _ = done.await;
        }
    }
}

/// A connection to the store's file (in WAL mode already: that is the file's) with these
/// per-connection settings.
fn connect(path: &Path, settings: &[(&str, i64)]) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    for (name, value) in settings {
        conn.pragma_update(None, name, value)?;
    }
    conn.set_prepared_statement_cache_capacity(PREPARED);
    Ok(conn)
}

fn serve(conn: Connection, queue: &mpsc::Receiver<Job>) {
    while let Ok(job) = queue.recv() {
        match job {
            Job::Write { writes, answer } => {
                let written = transaction(&conn, |conn| writes.iter().map(|write| write.run(conn)).collect());
                let _ = answer.send(written.map_err(to_sqlx));
            }
            Job::Close { closed } => {
                drop(conn);
                let _ = closed.send(());
                return;
            }
        }
    }
}

/// One transaction around `body`. If a statement fails, the transaction is rolled back (unless
/// SQLite already did, as it may on a full disk) and nothing of it stays.
fn transaction<T>(conn: &Connection, body: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let committed = body(conn).and_then(|answer| conn.execute_batch("COMMIT").map(|()| answer));
    if committed.is_err() && !conn.is_autocommit() {
        // Failing too would mean the connection is broken; the next BEGIN says so.
        let _ = conn.execute_batch("ROLLBACK");
    }
    committed
}

impl Write {
    /// Runs this write's statements inside the transaction in hand; returns its answer. An
    /// error returned fails the whole transaction.
    fn run(&self, conn: &Connection) -> rusqlite::Result<Written> {
        match self {
            Self::Checkpoint(commit) => checkpoint(conn, commit).map(Written::Checkpoint),
            Self::Submit(submit) => insert_run(conn, submit).map(Written::Submit),
            Self::Statement(statement) => execute(conn, statement),
        }
    }
}

/// Runs one of the domain's statements; answers the rows it changed. When it fails, SQLite
/// undoes that statement alone and keeps the transaction (<https://www.sqlite.org/lang_conflict.html>,
/// ABORT), except on the errors after which it may roll the whole transaction back (a full disk,
/// an I/O error: <https://www.sqlite.org/lang_transaction.html>, "Response To Errors Within A
/// Transaction"); then the error is the group's, and no write of it stays.
fn execute(conn: &Connection, statement: &Statement) -> rusqlite::Result<Written> {
    let values: Vec<&dyn ToSql> = statement.values.iter().map(|value| value as &dyn ToSql).collect();
    match first_column::<rusqlite::types::Value>(conn, &statement.sql, &values) {
        Ok(_) => Ok(Written::Changed(conn.changes())),
        Err(err) if conn.is_autocommit() => Err(err),
        Err(err) => Ok(Written::Refused(to_sqlx(err))),
    }
}

/// Runs one checkpoint's statements in order (`commit_sql.rs`, split once); the last
/// statement's row is the answer.
fn checkpoint(conn: &Connection, commit: &CommitArgs) -> rusqlite::Result<Option<bool>> {
    let values = commit.values();
    let mut answer = None;
    for &sql in &SQLITE_STATEMENTS[commit.shape.index()] {
        answer = first_column(conn, sql, &values)?;
    }
    Ok(answer)
}

/// Runs a lone submit's statements in order (`submit.rs`); the first one's row starts with the
/// run's `seq`.
fn insert_run(conn: &Connection, submit: &SubmitArgs) -> rusqlite::Result<i64> {
    let values = submit.values();
    let [insert, submitted] = *SUBMIT_SQLITE;
    let seq = first_column(conn, insert, &values)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    first_column::<i64>(conn, submitted, &values)?;
    Ok(seq)
}

/// Runs one statement, binding each `$N` to `values[N - 1]` (SQLite numbers parameters in the
/// order they first appear, so they are bound by name), and returns its first row's first
/// column, if it returns a row.
fn first_column<T: rusqlite::types::FromSql>(
    conn: &Connection,
    sql: &str,
    values: &[&dyn ToSql],
) -> rusqlite::Result<Option<T>> {
    let mut statement = conn.prepare_cached(sql)?;
    for index in 1..=statement.parameter_count() {
        let number = statement.parameter_name(index).and_then(|name| name.strip_prefix('$')?.parse::<usize>().ok());
        let value = number.and_then(|number| values.get(number.checked_sub(1)?));
        let value = value.ok_or_else(|| rusqlite::Error::InvalidParameterName(sql.to_owned()))?;
        statement.raw_bind_parameter(index, *value)?;
    }
    let mut rows = statement.raw_query();
    rows.next()?.map(|row| row.get::<_, T>(0)).transpose()
}

impl CommitArgs {
    /// The checkpoint's values in parameter order ($1 first), borrowed, bound as sqlx binds them
    /// (`None` as NULL, a bool as 0 or 1).
    fn values(&self) -> [&dyn ToSql; 32] {
        [
            &self.status,
            &self.phase,
            &self.step_index,
            &self.current_step,
            &self.attempt,
            &self.step_started_at,
            &self.next_at,
            &self.status_reason,
            &self.error,
            &self.output,
            &self.finished_at,
            &self.now,
            &self.release,
            &self.id,
            &self.generation,
            &self.owner,
            &self.has_step,
            &self.step_phase,
            &self.step_position,
            &self.step_name,
            &self.step_status,
            &self.step_attempts,
            &self.step_output,
            &self.step_error,
            &self.step_started,
            &self.step_finished,
            &self.events,
            &self.entries,
            &self.step_entry,
            &self.unwind_reason,
            &self.waiting_step,
            &self.waiting_message,
        ]
    }
}

impl SubmitArgs {
    /// The submit's values in parameter order ($1 first), borrowed.
    fn values(&self) -> [&dyn ToSql; 12] {
        [
            &self.id,
            &self.kind,
            &self.version,
            &self.resource_key,
            &self.input,
            &self.status,
            &self.first_step,
            &self.now,
            &self.lease_owner,
            &self.lease_expires_at,
            &self.generation,
            &self.message,
        ]
    }
}

/// A rusqlite error as the store reports errors: a full or read-only disk as the I/O error kind
/// `StoreFault` reads, a busy database or failing disk as an I/O error (the database cannot be
/// written now: `Store::is_unreachable`), anything else as what it says.
fn to_sqlx(err: rusqlite::Error) -> sqlx::Error {
    use rusqlite::ErrorCode;
    use std::io::{Error, ErrorKind};
    let message = err.to_string();
    match err.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => sqlx::Error::Io(Error::new(ErrorKind::StorageFull, message)),
        Some(ErrorCode::ReadOnly) => sqlx::Error::Io(Error::new(ErrorKind::ReadOnlyFilesystem, message)),
        Some(
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked | ErrorCode::SystemIoFailure | ErrorCode::CannotOpen,
        ) => sqlx::Error::Io(Error::other(message)),
        _ => sqlx::Error::Protocol(format!("the SQLite writer thread: {message}")),
    }
}

fn stopped() -> sqlx::Error {
    sqlx::Error::Protocol("the SQLite writer thread has stopped".into())
}
