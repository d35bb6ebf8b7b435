//! A SQLite write transaction sent as one batch (`BEGIN IMMEDIATE; ...; COMMIT`): one round
//! trip to the connection's worker thread instead of one per statement.
//!
//! The batch runs in a task of its own. A caller whose future is dropped half-way (a fenced
//! driver is aborted; an HTTP client goes away) must not stop it between its `BEGIN` and its
//! `COMMIT` and hand the writer connection back to the pool inside a transaction. If a statement
//! fails, the batch stops there and the task rolls its transaction back.

use futures::future::BoxFuture;
use sqlx::{SqliteConnection, SqlitePool};

/// Runs `batch` (whose SQL begins with `BEGIN IMMEDIATE` and ends with `COMMIT`) on a connection
/// of `pool` and returns what it returned.
pub(crate) async fn self_commit<T, F>(pool: &SqlitePool, batch: F) -> Result<T, sqlx::Error>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, Result<T, sqlx::Error>> + Send + 'static,
{
    let pool = pool.clone();
    let task = tokio::spawn(async move {
        let mut conn = pool.acquire().await?;
        let result = batch(&mut conn).await;
        if result.is_err() && sqlx::query("ROLLBACK").execute(&mut *conn).await.is_err() {
            // The batch stopped at a failing statement and its transaction could not be ended
            // here: it never began, or SQLite rolled it back itself (as on a full disk), or the
            // connection is broken. Not knowing which, the pool opens a new connection.
            conn.close_on_drop();
        }
        result
    });
    task.await.map_err(|err| sqlx::Error::Protocol(format!("the commit task ended early: {err}")))?
}
