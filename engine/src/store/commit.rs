//! Checkpoints: a run's new state, its finished step and its events, written atomically if the
//! writer still holds the lease generation it claimed. This is the engine's hot path (one per
//! step), so it is one round trip: on PostgreSQL one statement of data-modifying CTEs, on
//! SQLite one transaction of a few statements (`commit_sql.rs`) run by the writer thread
//! (`writer.rs`), grouped with the other drivers' checkpoints when several are in flight
//! (`group_commit.rs`).

use super::commit_args::{Commit, CommitArgs, bind_commit};
use super::commit_sql::COMMIT_SQL;
use super::events::{Entry, insert_event};
use super::handle::Store;
use super::kept_connections::on_kept_connection;
use super::pool::{BeginWrite, Pool};
use super::records::NewEvent;
use crate::timeline::EventKind;

/// What a commit found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitOutcome {
    /// Written. Carries whether a cancel has been requested meanwhile.
    Committed { cancel_requested: bool },
    /// The lease was taken over: nothing was written.
    Fenced,
}

impl Store {
    /// Adds a `late-commit-refused` entry to a run whose commit by `commit.owner` was fenced:
    /// only the timeline, never the run's state, which belongs to the claim that holds it.
    pub(crate) async fn late_commit_refused(&self, commit: &Commit<'_>) -> Result<(), sqlx::Error> {
        let run = commit.run;
        let step = commit.step.map(|step| step.name.as_str()).or(run.current_step.as_deref());
        let what = step.map_or_else(|| "its progress".to_owned(), |step| format!("step `{step}`"));
        let message = format!(
            "{} finished {what} after its lease (claim {}) had lapsed and the run was claimed again: its commit was \
             refused and nothing of it was written; the step may have run twice",
            commit.owner, run.lease_generation
        );
        let event = NewEvent::new(EventKind::LateCommitRefused, step, message);
        crate::with_pool!(&self.pool, |pool| {
            let mut tx = pool.begin_write().await?;
            insert_event(&mut tx, run.id, Entry::Next, commit.now, &event).await?;
            tx.commit().await
        })
    }

    /// Writes the run's new state, its finished step and its events atomically, if the caller
    /// still holds the lease generation it claimed.
    pub(crate) async fn commit(&self, commit: &Commit<'_>) -> Result<CommitOutcome, sqlx::Error> {
        let sql = COMMIT_SQL[usize::from(!self.is_postgres())][commit.shape.index()].as_str();
        let args = CommitArgs::new(sql, commit);
        let cancel_requested = match (&self.pool, &self.group_commit) {
            (Pool::Postgres(pool), _) => {
                on_kept_connection!(self.kept_connections.as_deref(), pool, |executor| {
                    bind_commit!(args).fetch_optional(executor)
                })
            }
            (Pool::Sqlite(_), Some(group)) => group.commit(args).await?,
            (Pool::Sqlite(pool), None) => {
                let mut tx = pool.begin_write().await?;
                let cancel_requested = bind_commit!(args).fetch_optional(&mut *tx).await?;
                tx.commit().await?;
                cancel_requested
            }
        };
        Ok(match cancel_requested {
            Some(cancel_requested) => CommitOutcome::Committed { cancel_requested },
            None => CommitOutcome::Fenced,
        })
    }
}
