//! Group commit on SQLite: the checkpoints, lone submits and the domain's one-statement writes
//! that drivers and callers send while a transaction is being written wait in a queue, and the
//! next transaction commits all of them with one fsync.
//!
//! ```text
//!   driver ─┐                          ┌─ BEGIN IMMEDIATE
//!   submit ─┼─> queue ─> commit task ──┼─ write 1 .. write n (up to 64)
//!   driver ─┘     ^                    └─ COMMIT ──> each sender gets its own answer
//!                 └── a sender waits for its answer, which comes only after COMMIT
//! ```
//!
//! The transaction itself is written by the writer thread (`writer.rs`), while the sender holds
//! sqlx's one writer connection, so that no other write of this process (a claim, the domain's)
//! contends for SQLite's lock meanwhile. A write that finds no other in flight is sent at once
//! by its own sender, so one driver pays no queue hand-off. A failure of the transaction fails
//! every write in it (none is acknowledged): each driver tries its own checkpoint again while it
//! holds its lease (`worker.rs`, `commit_again`), and a submit's caller gets the error. A
//! domain statement that fails on its own (a constraint) fails alone: SQLite undoes only it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::SqlitePool;
use tokio::sync::{mpsc, oneshot};

use super::commit_args::CommitArgs;
use super::submit_args::SubmitArgs;
use super::writer::{Statement, Write, Writer, Written};

/// Most writes in one transaction.
const MAX_GROUP: usize = 64;

type Answer = Result<Written, sqlx::Error>;

struct Job {
    write: Write,
    answer: oneshot::Sender<Answer>,
}

/// The queue in front of the commit task.
#[derive(Clone, Debug)]
pub(crate) struct GroupCommit {
    jobs: mpsc::UnboundedSender<Job>,
    /// sqlx's writer pool (one connection): held while the writer thread writes.
    pool: SqlitePool,
    writer: Writer,
    /// Writes being committed now, directly or by the task.
    in_flight: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}

impl GroupCommit {
    /// Starts the commit task, writing through `writer` while it holds `pool`'s connection; it
    /// ends when the last store clone is dropped.
    pub(crate) fn start(pool: SqlitePool, writer: Writer) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(commit_task(pool.clone(), writer.clone(), queue));
        Self { jobs, pool, writer, in_flight: Arc::new(AtomicUsize::new(0)) }
    }

    /// Commits a checkpoint; returns `None` if it was fenced, else whether a cancel is
    /// requested. Returns after COMMIT.
    pub(crate) async fn commit(&self, args: CommitArgs) -> Result<Option<bool>, sqlx::Error> {
        match self.write(Write::Checkpoint(args)).await? {
            Written::Checkpoint(answer) => Ok(answer),
            other => Err(mismatched(&other)),
        }
    }

    /// Inserts a run with no resource key and its `submitted` entry; returns the run's `seq`.
    /// Returns after COMMIT. (Through sqlx each of its statements would be a round trip to its
    /// worker thread, and the connection a ping on its way back to the pool.)
    pub(crate) async fn submit(&self, submit: SubmitArgs) -> Result<i64, sqlx::Error> {
        match self.write(Write::Submit(submit)).await? {
            Written::Submit(seq) => Ok(seq),
            other => Err(mismatched(&other)),
        }
    }

    /// Commits one of the domain's statements; returns the rows it changed. Returns after COMMIT.
    pub(crate) async fn execute(&self, statement: Statement) -> Result<u64, sqlx::Error> {
        match self.write(Write::Statement(statement)).await? {
            Written::Changed(changed) => Ok(changed),
            Written::Refused(err) => Err(err),
            other => Err(mismatched(&other)),
        }
    }

    /// Commits `write`: at once when no other is being committed (no queue to wait for, no
    /// hand-off to the task), else through the queue.
    async fn write(&self, write: Write) -> Answer {
        let _in_flight = InFlight::enter(&self.in_flight);
        if _in_flight.alone {
            let answers = write_all(&self.pool, &self.writer, vec![write]).await?;
            return answers.into_iter().next().ok_or_else(stopped);
        }
        let (answer, answered) = oneshot::channel();
        self.jobs.send(Job { write, answer }).map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }

    /// Closes the writer thread's connection; later writes fail.
    pub(crate) async fn close(&self) {
        self.writer.close().await;
    }
}

async fn commit_task(pool: SqlitePool, writer: Writer, mut queue: mpsc::UnboundedReceiver<Job>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while queue.recv_many(&mut group, MAX_GROUP).await > 0 {
        let (writes, answers): (Vec<_>, Vec<_>) = group.drain(..).map(|job| (job.write, job.answer)).unzip();
        match write_all(&pool, &writer, writes).await {
            Ok(written) => {
                for (answer, written) in answers.into_iter().zip(written) {
                    let _ = answer.send(Ok(written));
                }
            }
            Err(err) => {
                for answer in answers {
                    let _ = answer.send(Err(for_each_write(&err)));
                }
            }
        }
    }
}

/// Writes `writes` in one transaction on the writer thread, holding sqlx's writer connection
/// meanwhile. (A caller whose future is dropped lets the connection go early; the transaction
/// still runs, and a sqlx write that starts meanwhile waits for it in SQLite's busy handler.)
async fn write_all(pool: &SqlitePool, writer: &Writer, writes: Vec<Write>) -> Result<Vec<Written>, sqlx::Error> {
    let _writer_connection = pool.acquire().await?;
    writer.write(writes).await
}

/// Counts a write in flight for as long as it lives (also when its future is dropped).
struct InFlight<'a> {
    count: &'a AtomicUsize,
    alone: bool,
}

impl<'a> InFlight<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        let alone = count.fetch_add(1, Ordering::AcqRel) == 0;
        Self { count, alone }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The error of a failed group, as each of its writes reports it: an I/O error keeps its kind
/// (a full or read-only disk, a database that cannot be written now: what `StoreFault` and
/// `Store::is_unreachable` read), anything else says what it was.
fn for_each_write(err: &sqlx::Error) -> sqlx::Error {
    let message = format!("group commit failed: {}", crate::error::error_chain(err));
    match err {
        sqlx::Error::Io(io) => sqlx::Error::Io(std::io::Error::new(io.kind(), message)),
        _ => sqlx::Error::Protocol(message),
    }
}

/// An answer of the wrong kind: the writer thread answers each write in order, so this is a bug.
fn mismatched(answer: &Written) -> sqlx::Error {
    sqlx::Error::Protocol(format!("the SQLite writer thread answered {answer:?} out of order"))
}

fn stopped() -> sqlx::Error {
    sqlx::Error::Protocol("the group-commit task has stopped".into())
}

#[cfg(test)]
mod tests {
    use std::io::{Error, ErrorKind};

    use super::*;

    #[test]
    fn each_write_of_a_failed_group_keeps_the_kind_of_its_io_error() {
        for kind in [ErrorKind::StorageFull, ErrorKind::ReadOnlyFilesystem, ErrorKind::Other] {
            let err = for_each_write(&sqlx::Error::Io(Error::new(kind, "database or disk is full")));
            assert!(matches!(&err, sqlx::Error::Io(io) if io.kind() == kind), "{kind:?}: {err:?}");
            assert!(err.to_string().contains("group commit failed"), "{err}");
        }
        let err = for_each_write(&sqlx::Error::Protocol("no such table".into()));
        assert!(matches!(&err, sqlx::Error::Protocol(message) if message.contains("no such table")), "{err:?}");
    }
}
