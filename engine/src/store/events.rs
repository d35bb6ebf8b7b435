//! Appending to a run's timeline. Each run numbers its own entries (`engine_runs.events` is the
//! counter); a forward step that succeeded is an entry too, read from its own row.

use sqlx::Transaction;
use uuid::Uuid;

use super::records::{Millis, NewEvent};

/// Where an event goes in its run's timeline.
#[derive(Clone, Copy)]
pub(super) enum Entry {
    /// The next number of the run's counter, taken here.
    Next,
    /// A number the caller already took from the counter (with the run's own write).
    Numbered(i64),
}

/// Appends an event to the run's timeline.
pub(super) async fn insert_event<DB: sqlx::Database>(
    tx: &mut Transaction<'static, DB>,
    run: Uuid,
    entry: Entry,
    now: Millis,
    event: &NewEvent,
) -> Result<(), sqlx::Error>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    // Taking the next number: PostgreSQL runs one statement (the counter's UPDATE locks the
    // run's row until the transaction ends, so two writers never take the same number); SQLite
    // runs both in order.
    let sql = match entry {
        Entry::Numbered(_) => {
            "INSERT INTO engine_events (run_id, n, at, kind, step, message) VALUES ($1, $6, $2, $3, $4, $5)"
        }
        Entry::Next if DB::NAME == "PostgreSQL" => {
            "WITH run AS (UPDATE engine_runs SET events = events + 1 WHERE id = $1 RETURNING events) \
             INSERT INTO engine_events (run_id, n, at, kind, step, message) SELECT $1, events, $2, $3, $4, $5 FROM run"
        }
        Entry::Next => {
            "UPDATE engine_runs SET events = events + 1 WHERE id = $1; \
             INSERT INTO engine_events (run_id, n, at, kind, step, message) \
             SELECT $1, events, $2, $3, $4, $5 FROM engine_runs WHERE id = $1"
        }
    };
    let query = sqlx::query(sql)
        .bind(run.to_string())
        .bind(now)
        .bind(event.kind.as_str())
        .bind(event.step.as_deref())
        .bind(event.message.as_str());
    let query = match entry {
        Entry::Numbered(number) => query.bind(number),
        Entry::Next => query,
    };
    query.execute(&mut **tx).await?;
    Ok(())
}
