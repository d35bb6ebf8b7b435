//! Group commit on SQLite: the checkpoints that drivers send while a transaction is being
//! written wait in a queue, and the next transaction commits all of them with one fsync.
//!
//! ```text
//!   driver ─┐                          ┌─ BEGIN IMMEDIATE
//!   driver ─┼─> queue ─> commit task ──┼─ checkpoint 1 .. checkpoint n (up to 64)
//!   driver ─┘     ^                    └─ COMMIT ──> each driver gets its own answer
//!                 └── a driver waits for its answer, which comes only after COMMIT
//! ```
//!
//! The transaction itself is written by the writer thread (`writer.rs`), while the sender holds
//! sqlx's one writer connection, so that no other write of this process (a submit, a claim, the
//! domain's) contends for SQLite's lock meanwhile. A checkpoint that finds no other in flight is
//! sent at once by its own driver, so one driver pays no queue hand-off. A failure of the
//! transaction fails every checkpoint in it (none is acknowledged): each driver tries its own
//! again while it holds its lease (`worker.rs`, `commit_again`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::SqlitePool;
use tokio::sync::{mpsc, oneshot};

use super::commit_args::CommitArgs;
use super::writer::Writer;

/// Most checkpoints in one transaction.
const MAX_GROUP: usize = 64;

type Answer = Result<Option<bool>, sqlx::Error>;

struct Job {
    args: CommitArgs,
    answer: oneshot::Sender<Answer>,
}

/// The queue in front of the commit task.
#[derive(Clone, Debug)]
pub(crate) struct GroupCommit {
    jobs: mpsc::UnboundedSender<Job>,
    /// sqlx's writer pool (one connection): held while the writer thread writes.
    pool: SqlitePool,
    writer: Writer,
    /// Checkpoints being committed now, directly or by the task.
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

    /// Commits a checkpoint: at once when no other is being committed (no queue to wait
    /// for, no hand-off to the task), else through the queue. Returns after COMMIT.
    pub(crate) async fn commit(&self, args: CommitArgs) -> Answer {
        let _in_flight = InFlight::enter(&self.in_flight);
        if _in_flight.alone {
            let answers = write(&self.pool, &self.writer, vec![args]).await?;
            return Ok(answers.into_iter().next().flatten());
        }
        let (answer, answered) = oneshot::channel();
        self.jobs.send(Job { args, answer }).map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }

    /// Closes the writer thread's connection; later checkpoints fail.
    pub(crate) async fn close(&self) {
        self.writer.close().await;
    }
}

async fn commit_task(pool: SqlitePool, writer: Writer, mut queue: mpsc::UnboundedReceiver<Job>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while queue.recv_many(&mut group, MAX_GROUP).await > 0 {
        let (commits, answers): (Vec<_>, Vec<_>) = group.drain(..).map(|job| (job.args, job.answer)).unzip();
        match write(&pool, &writer, commits).await {
            Ok(written) => {
                for (answer, written) in answers.into_iter().zip(written) {
                    let _ = answer.send(Ok(written));
                }
            }
            Err(err) => {
                let message = crate::error::error_chain(&err);
                for answer in answers {
                    let _ = answer.send(Err(sqlx::Error::Protocol(format!("group commit failed: {message}"))));
                }
            }
        }
    }
}

/// Writes `commits` in one transaction on the writer thread, holding sqlx's writer connection
/// meanwhile. (A caller whose future is dropped lets the connection go early; the transaction
/// still runs, and a sqlx write that starts meanwhile waits for it in SQLite's busy handler.)
async fn write(pool: &SqlitePool, writer: &Writer, commits: Vec<CommitArgs>) -> Result<Vec<Option<bool>>, sqlx::Error> {
    let _writer_connection = pool.acquire().await?;
    writer.write(commits).await
}

/// Counts a checkpoint in flight for as long as it lives (also when its future is dropped).
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

fn stopped() -> sqlx::Error {
    sqlx::Error::Protocol("the group-commit task has stopped".into())
}
