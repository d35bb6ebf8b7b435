//! The domain's one-statement writes outside a transaction of its own (a job's status, a
//! cluster's phase): on SQLite they go to the group commit with the runs' checkpoints, so that a
//! run's status write is not a transaction of its own that holds the one writer connection (a
//! submit waits for that connection); on PostgreSQL they run on a kept connection, as a
//! checkpoint does.

use sqlx::AssertSqlSafe;

use super::handle::Store;
use super::kept_connections::on_kept_connection;
use super::pool::{BeginWrite, Pool};
use super::value::Value;
use super::writer::Statement;

impl Store {
    /// Runs `sql` with `values` bound to `$1`, `$2`, … in order, committed when this returns;
    /// returns the rows it changed. See [`write_statement!`](crate::write_statement).
    pub async fn write_statement(&self, sql: impl Into<String>, values: Vec<Value>) -> Result<u64, sqlx::Error> {
        let sql = sql.into();
        match (&self.pool, &self.group_commit) {
            (Pool::Postgres(pool), _) => {
                let done = on_kept_connection!(self.kept_connections.as_deref(), pool, |executor| {
                    bound(sqlx::query(AssertSqlSafe(sql)), values).execute(executor)
                });
                Ok(done.rows_affected())
            }
            (Pool::Sqlite(_), Some(group)) => group.execute(Statement { sql, values }).await,
            (Pool::Sqlite(pool), None) => {
                let mut tx = pool.begin_write().await?;
                let done = bound(sqlx::query(AssertSqlSafe(sql)), values).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(done.rows_affected())
            }
        }
    }
}

/// `query` with `values` bound in order.
fn bound<'q, DB>(
    mut query: sqlx::query::Query<'q, DB, DB::Arguments>,
    values: Vec<Value>,
) -> sqlx::query::Query<'q, DB, DB::Arguments>
where
    DB: sqlx::Database,
    Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<String>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for value in values {
        query = match value {
            Value::Integer(value) => query.bind(value),
            Value::Text(value) => query.bind(value),
        };
    }
    query
}

/// Runs one write statement outside a transaction on a [`Store`] (or anything with its
/// `write_statement`), binding `$1`, `$2`, … in order, each converted into a [`Value`](crate::store::Value);
/// yields `Result<u64, sqlx::Error>`, the rows it changed.
#[macro_export]
macro_rules! write_statement {
    ($store:expr, $sql:expr $(, $bind:expr)* $(,)?) => {
        $store.write_statement($sql, vec![$($crate::store::Value::from($bind)),*]).await
    };
}
