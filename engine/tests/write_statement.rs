//! The domain's one-statement writes (`Store::write_statement`, `store/write_statement.rs`): on
//! SQLite they commit through the group commit with the runs' checkpoints, on PostgreSQL on a kept
//! connection. Each binds `$N` to the N-th value whatever order the statement names them in,
//! answers the rows it changed, and, when it fails on its own (a unique key), fails alone: the
//! writes committed beside it stay.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use anycloud_engine::{Store, execute, with_pool, write_statement};
use support::TestDb;
use tokio::task::JoinSet;

const TABLE: &str = "CREATE TABLE notes (id TEXT PRIMARY KEY, n BIGINT, note TEXT)";

async fn notes(store: &Store) -> Vec<(String, Option<i64>, Option<String>)> {
    with_pool!(store.reader(), |pool| {
        sqlx::query_as("SELECT id, n, note FROM notes ORDER BY id").fetch_all(pool).await.unwrap()
    })
}

async fn binds_by_number_and_answers_the_rows_changed(kind: &str) {
    let db = TestDb::open(kind).await;
    let store = db.store().await;
    execute!(store.pool(), TABLE).unwrap();

    let sql = "INSERT INTO notes (note, n, id) VALUES ($3, $2, $1)";
    assert_eq!(write_statement!(store, sql, "a", 7_i64, None::<&str>).unwrap(), 1, "{kind}");
    assert_eq!(write_statement!(store, sql, "b", None::<i64>, "second").unwrap(), 1, "{kind}");
    let update = "UPDATE notes SET n = COALESCE(n, 0) + $1 WHERE id <> $2";
    assert_eq!(write_statement!(store, update, 1_i64, "none").unwrap(), 2, "{kind}");
    assert_eq!(write_statement!(store, "DELETE FROM notes WHERE id = $1", "missing").unwrap(), 0, "{kind}");

    assert_eq!(
        notes(&store).await,
        vec![("a".into(), Some(8), None), ("b".into(), Some(1), Some("second".into()))],
        "{kind}"
    );
    store.close().await;
}

#[tokio::test]
async fn sqlite_binds_by_number_and_answers_the_rows_changed() {
    binds_by_number_and_answers_the_rows_changed("sqlite").await;
}

#[tokio::test]
async fn postgres_binds_by_number_and_answers_the_rows_changed() {
    binds_by_number_and_answers_the_rows_changed("postgres").await;
}

/// 64 writes at once (on SQLite most of them share a transaction), one of which takes a key
/// another already holds: it alone fails, saying why, and the 63 others are committed.
async fn a_refused_statement_fails_alone(kind: &str) {
    let db = TestDb::open(kind).await;
    let store = db.store().await;
    execute!(store.pool(), TABLE).unwrap();
    write_statement!(store, "INSERT INTO notes (id) VALUES ($1)", "taken").unwrap();

    let mut writes = JoinSet::new();
    for index in 0..64_i64 {
        let store = store.clone();
        let id = if index == 32 { "taken".to_owned() } else { format!("note-{index:02}") };
        writes.spawn(async move {
            let written = write_statement!(store, "INSERT INTO notes (id, n) VALUES ($1, $2)", &id, index);
            (id, written)
        });
    }
    let mut refused = Vec::new();
    while let Some(joined) = writes.join_next().await {
        let (id, written) = joined.unwrap();
        match written {
            Ok(changed) => assert_eq!(changed, 1, "{kind}: {id}"),
            Err(err) => refused.push((id, err.to_string())),
        }
    }
    assert_eq!(refused.len(), 1, "{kind}: {refused:?}");
    let (id, err) = &refused[0];
    assert_eq!(id, "taken", "{kind}");
    let err = err.to_lowercase();
    assert!(err.contains("unique") || err.contains("duplicate key"), "{kind}: {err}");

    let stored = notes(&store).await;
    assert_eq!(stored.len(), 64, "{kind}: the taken row and the 63 others");
    assert!(stored.iter().any(|(id, n, _)| id == "note-63" && *n == Some(63)), "{kind}");
    store.close().await;
}

#[tokio::test]
async fn sqlite_a_refused_statement_fails_alone() {
    a_refused_statement_fails_alone("sqlite").await;
}

#[tokio::test]
async fn postgres_a_refused_statement_fails_alone() {
    a_refused_statement_fails_alone("postgres").await;
}
