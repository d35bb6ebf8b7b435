//! The SQLite checkpoint writer (`store/writer.rs`) writes with its own connection, and that
//! connection keeps the settings that the store's own connections were opened with. The one that
//! matters most: a checkpointed API opens its database with `wal_autocheckpoint=0`, because its
//! checkpointer ships the WAL's frames to a bucket and folds the log into the database itself; a
//! connection that folded it by itself (SQLite's default, past 1,000 pages) would let later frames
//! overwrite ones not yet shipped. So a run whose checkpoints write well over 1,000 pages of WAL
//! leaves the database file as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use anycloud_engine::{
    Engine, EngineConfig, Registry, RunStatus, Step, StepCtx, StepError, StepKey, Steps, Store, Workflow,
};
use sqlx::sqlite::SqliteConnectOptions;

const STEPS: usize = 200;
/// Each step's output: two overflow pages and more, so the run writes ~5 MB of WAL.
const OUTPUT_BYTES: usize = 6 * 1024;

struct Wide;

impl Workflow for Wide {
    const KIND: &'static str = "wide";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = ();

    fn steps() -> Steps<Self> {
        let mut steps = Steps::new();
        for index in 0..STEPS {
            let name: &'static str = Box::leak(format!("step-{index}").into_boxed_str());
            steps = steps.then(Step::action(StepKey::<String>::new(name), move |_: StepCtx<Self>| async move {
                Ok(format!("{index}:{}", "x".repeat(OUTPUT_BYTES)))
            }));
        }
        steps
    }

    fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

fn size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|meta| meta.len()).unwrap_or(0)
}

#[tokio::test]
async fn the_checkpoint_writer_keeps_the_stores_wal_autocheckpoint() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("api.db");
    let wal = dir.path().join("api.db-wal");
    let options = SqliteConnectOptions::new().filename(&db).pragma("wal_autocheckpoint", "0");
    let store = Store::open_sqlite(options).await.unwrap();
    // The schema as the migrations left it, folded into the file, and the log emptied.
    fold_wal(&store).await;
    let before = size(&db);

    let engine =
        Engine::start(store.clone(), Registry::new().with(std::sync::Arc::new(Wide)), EngineConfig::named("wide"))
            .await
            .unwrap();
    let id = engine.submit::<Wide>(&(), None).await.unwrap();
    let run = engine.wait(id, Duration::from_secs(120)).await.unwrap();
    assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");
    engine.shutdown(Duration::from_secs(5)).await;

    let pages = size(&wal) / 4096;
    assert!(pages > 1_000, "the run wrote {pages} pages of WAL; the test needs more than SQLite's default 1,000");
    assert_eq!(size(&db), before, "a connection folded the WAL ({pages} pages) into the database by itself");
    store.close().await;
}

/// `PRAGMA wal_checkpoint(TRUNCATE)` through the store's writer pool.
async fn fold_wal(store: &Store) {
    let anycloud_engine::Pool::Sqlite(pool) = store.pool() else { unreachable!("a SQLite store") };
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(pool).await.unwrap();
}
