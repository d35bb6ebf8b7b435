//! A submit guarded by the domain's record: the run and one statement of the domain (the record
//! that names the run, written only where the statement's own conditions hold) commit together,
//! or neither stays. The domain decides in SQL, inside the write, what it would otherwise read
//! and hold in a transaction of its own; on SQLite the whole of it is one write of the group
//! commit, with no round trip between its statements and no wait for sqlx's writer connection
//! between them.
//!
//! ```text
//!   SAVEPOINT ── insert run (+ `submitted`) ── guard: INSERT … SELECT … WHERE <the domain's conditions>
//!       │                                          │ changed a row ──> RELEASE: both stay
//!       └──────────────────────────────────────────┴ changed none, or failed ──> ROLLBACK TO: neither
//! ```

use sqlx::AssertSqlSafe;

use super::handle::Store;
use super::pool::{Pool, WriteTx};
use super::records::{Lease, RunRecord};
use super::submit::submitted_record;
use super::submit_args::{NewRun, SubmitArgs};
use super::value::Value;
use super::write_statement::bound;
use super::writer::{GuardedSubmit, Statement};

impl Store {
    /// Inserts `run` (leased with `lease`, unless an unfinished run holds its resource key) and
    /// runs `guard` with `values` bound to `$1`, `$2`, … in the same transaction, committed when
    /// this returns. Returns the stored run, or `None` when the guard changed no row or failed
    /// on its own (a constraint, say): then nothing of either was written.
    pub(crate) async fn submit_guarded(
        &self,
        run: &NewRun<'_>,
        lease: Option<&Lease>,
        guard: String,
        values: Vec<Value>,
    ) -> Result<Option<RunRecord>, sqlx::Error> {
        if let (Pool::Sqlite(_), Some(group)) = (&self.pool, &self.group_commit) {
            let submit = SubmitArgs::new(run, lease);
            let guarded = GuardedSubmit { submit, guard: Statement { sql: guard, values } };
            let stored = group.submit_guarded(guarded).await?;
            return Ok(stored.map(|(seq, leased)| submitted_record(run, lease.filter(|_| leased), seq)));
        }
        let mut tx = self.begin_write().await?;
        let record = Self::insert_run(&mut tx, run, lease).await?;
        let guarded = match &mut tx {
            WriteTx::Sqlite(tx) => bound(sqlx::query(AssertSqlSafe(guard)), values)
                .execute(&mut **tx)
                .await
                .map(|done| done.rows_affected()),
            WriteTx::Postgres(tx) => bound(sqlx::query(AssertSqlSafe(guard)), values)
                .execute(&mut **tx)
                .await
                .map(|done| done.rows_affected()),
        };
        match guarded {
            Ok(changed) if changed > 0 => {
                tx.commit().await?;
                Ok(Some(record))
            }
            // Dropped, the transaction rolls back.
            Ok(_) | Err(sqlx::Error::Database(_)) => Ok(None),
            Err(err) => Err(err),
        }
    }
}
