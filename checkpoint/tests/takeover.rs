//! Restore, ship and fence on an in-memory bucket with the stores' conditional semantics: what
//! one API acknowledged another restores; a taker seals the first one out.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anycloud_checkpoint::{Bucket, BucketError, Checkpointer, Layout, LocalFiles, Version, restore};
use bytes::Bytes;
use sqlx::Connection;

/// Objects with a version counter, conditional writes as S3 and GCS do them.
#[derive(Default)]
struct MemoryBucket {
    objects: Mutex<HashMap<String, (Bytes, u64)>>,
    next: Mutex<u64>,
}

impl MemoryBucket {
    fn version(&self) -> u64 {
        let mut next = self.next.lock().unwrap();
        *next += 1;
        *next
    }
}

#[async_trait::async_trait]
impl Bucket for MemoryBucket {
    async fn get(&self, key: &str) -> Result<Option<(Bytes, Version)>, BucketError> {
        Ok(self.objects.lock().unwrap().get(key).map(|(body, v)| (body.clone(), Version(v.to_string()))))
    }
    async fn create(&self, key: &str, body: Bytes) -> Result<Version, BucketError> {
        let version = self.version();
        let mut objects = self.objects.lock().unwrap();
        if objects.contains_key(key) {
            return Err(BucketError::Conflict(key.to_owned()));
        }
        objects.insert(key.to_owned(), (body, version));
        Ok(Version(version.to_string()))
    }
    async fn replace(&self, key: &str, body: Bytes, version: &Version) -> Result<Version, BucketError> {
        let next = self.version();
        let mut objects = self.objects.lock().unwrap();
        match objects.get(key) {
            Some((_, current)) if current.to_string() == version.0 => {
                objects.insert(key.to_owned(), (body, next));
                Ok(Version(next.to_string()))
            }
            _ => Err(BucketError::Conflict(key.to_owned())),
        }
    }
    async fn delete(&self, keys: &[String]) -> Result<(), BucketError> {
        let mut objects = self.objects.lock().unwrap();
        for key in keys {
            objects.remove(key);
        }
        Ok(())
    }
}

fn files(dir: &Path) -> LocalFiles {
    // `kept-elsewhere` never exists locally (as a sealing key given in the environment).
    let identity = vec!["token".into(), "kept-elsewhere".into()];
    LocalFiles { database: dir.join("state.db"), identity_dir: dir.to_owned(), identity }
}

async fn open(dir: &Path) -> sqlx::SqliteConnection {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join("state.db"))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .pragma("wal_autocheckpoint", "0");
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
    sqlx::query("CREATE TABLE IF NOT EXISTS t (n INTEGER)").execute(&mut conn).await.unwrap();
    conn
}

async fn start(bucket: &Arc<MemoryBucket>, dir: &Path, api: &str) -> (Checkpointer, sqlx::SqliteConnection) {
    let layout = Layout::new("p/");
    let restored = restore(bucket.as_ref(), &layout, &files(dir), api).await.unwrap();
    if !dir.join("token").exists() {
        std::fs::write(dir.join("token"), api).unwrap();
    }
    let conn = open(dir).await;
    let checkpointer = Checkpointer::start(bucket.clone(), layout, files(dir), api, restored).await.unwrap();
    (checkpointer, conn)
}

async fn insert(conn: &mut sqlx::SqliteConnection, n: i64) {
    sqlx::query("INSERT INTO t VALUES (?)").bind(n).execute(conn).await.unwrap();
}

async fn count(conn: &mut sqlx::SqliteConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM t").fetch_one(conn).await.unwrap()
}

#[tokio::test]
async fn a_taker_restores_what_was_acknowledged_and_fences_the_first() {
    let bucket = Arc::new(MemoryBucket::default());
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, mut a_conn) = start(&bucket, a_dir.path(), "a").await;
    for n in 0..10 {
        insert(&mut a_conn, n).await;
        a.flush().await.unwrap();
    }
    let (b, mut b_conn) = start(&bucket, b_dir.path(), "b").await;
    assert_eq!(count(&mut b_conn).await, 10, "every acknowledged row came over");
    assert_eq!(std::fs::read_to_string(b_dir.path().join("token")).unwrap(), "a", "the identity came over");
    assert!(bucket.get("p/identity/token").await.unwrap().is_some());
    assert!(bucket.get("p/identity/kept-elsewhere").await.unwrap().is_none(), "a file kept elsewhere is not shipped");

    insert(&mut a_conn, 10).await;
    let refused = a.flush().await.expect_err("a fenced API cannot acknowledge");
    assert!(refused.contains("took the checkpoint bucket over"), "{refused}");
    assert!(a.fenced().await.contains("`b`"));

    insert(&mut b_conn, 11).await;
    b.flush().await.unwrap();
    let c_dir = tempfile::tempdir().unwrap();
    let (_c, mut c_conn) = start(&bucket, c_dir.path(), "c").await;
    let rows: Vec<i64> = sqlx::query_scalar("SELECT n FROM t ORDER BY n").fetch_all(&mut c_conn).await.unwrap();
    assert_eq!(rows, (0..10).chain([11]).collect::<Vec<_>>(), "b's write is there, a's fenced one is not");
    drop(b);
}
