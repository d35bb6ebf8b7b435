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
//! A checkpoint that finds no other in flight is committed at once by its own driver, so one
//! driver pays no queue hand-off. A failure of the
//! transaction fails every checkpoint in it (none is acknowledged): each driver tries its own
//! again while it holds its lease (`worker.rs`, `commit_again`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::SqlitePool;
use tokio::sync::{mpsc, oneshot};

use super::commit_args::{CommitArgs, bind_commit};
use super::commit_sql::{CommitShape, SQLITE_SELF_COMMIT};
use super::pool::BeginWrite;
use super::self_commit::self_commit;

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
    pool: SqlitePool,
    /// Checkpoints being committed now, directly or by the task.
    in_flight: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}

impl GroupCommit {
    /// Starts the commit task on `pool`; it ends when the last store clone is dropped.
    pub(crate) fn start(pool: SqlitePool) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(commit_task(pool.clone(), queue));
        Self { jobs, pool, in_flight: Arc::new(AtomicUsize::new(0)) }
    }

    /// Commits a checkpoint: at once when no other is being committed (no queue to wait
    /// for, no hand-off to the task), else through the queue. Returns after COMMIT.
    pub(crate) async fn commit(&self, args: CommitArgs, shape: CommitShape) -> Answer {
        let _in_flight = InFlight::enter(&self.in_flight);
        if _in_flight.alone {
            return self.commit_alone(args, shape).await;
        }
        let (answer, answered) = oneshot::channel();
        self.jobs.send(Job { args, answer }).map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

impl GroupCommit {
    /// The whole transaction as one batch, in one round trip.
    async fn commit_alone(&self, mut args: CommitArgs, shape: CommitShape) -> Answer {
        args.sql = SQLITE_SELF_COMMIT[shape.index()].as_str();
        self_commit(&self.pool, move |conn| {
            Box::pin(async move { Ok(bind_commit!(args).fetch_all(conn).await?.into_iter().next()) })
        })
        .await
    }
}

async fn commit_task(pool: SqlitePool, mut queue: mpsc::UnboundedReceiver<Job>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while queue.recv_many(&mut group, MAX_GROUP).await > 0 {
        match commit_group(&pool, &group).await {
            Ok(answers) => {
                for (job, answer) in group.drain(..).zip(answers) {
                    let _ = job.answer.send(Ok(answer));
                }
            }
            Err(err) => {
                let message = crate::error::error_chain(&err);
                for job in group.drain(..) {
                    let _ = job.answer.send(Err(sqlx::Error::Protocol(format!("group commit failed: {message}"))));
                }
            }
        }
    }
}

async fn commit_group(pool: &SqlitePool, group: &[Job]) -> Result<Vec<Option<bool>>, sqlx::Error> {
    let mut tx = pool.begin_write().await?;
    let mut answers = Vec::with_capacity(group.len());
    for job in group {
        answers.push(bind_commit!(job.args).fetch_optional(&mut *tx).await?);
    }
    tx.commit().await?;
    Ok(answers)
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
