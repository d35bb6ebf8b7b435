//! SQLite on a full or read-only disk: the store lives on a small tmpfs of its own, which the
//! test fills with a ballast file while runs are mid-flight. Writes are refused with an error
//! that says the disk is full, reads still answer, the database stays whole (`PRAGMA
//! integrity_check`), and once the ballast is removed every run continues and completes with
//! every step's checkpoint, and new runs are taken again. A read-only disk: the store refuses to
//! open and says so, and opens once the disk is writable again.
//!
//! Mounting a tmpfs needs root (as CI runs); see `support/tmpfs.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anycloud_engine::{
    Engine, EngineConfig, EngineError, Registry, RunStatus, Step, StepCtx, StepError, StepKey, Steps, Store,
    StoreFault, Workflow,
};
use sqlx::Connection;
use support::tmpfs::Tmpfs;

const STEPS: usize = 40;
/// Each step's output: a run's checkpoints take about `STEPS` × this on disk.
const OUTPUT_BYTES: usize = 8 * 1024;
const STEP_TIME: Duration = Duration::from_millis(10);

/// When a step ran, every time one ran (each run's output checks its own checkpoints).
#[derive(Clone, Default)]
struct Ledger(Arc<Mutex<Vec<Instant>>>);

impl Ledger {
    fn record(&self) {
        self.0.lock().unwrap().push(Instant::now());
    }

    fn executions(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn first_after(&self, at: Instant) -> Option<Instant> {
        self.0.lock().unwrap().iter().copied().filter(|time| *time > at).min()
    }
}

/// `STEPS` actions, each recording that it ran and returning `OUTPUT_BYTES` of output.
struct Bulky {
    ledger: Ledger,
}

impl Workflow for Bulky {
    const KIND: &'static str = "bulky";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = usize;

    fn steps() -> Steps<Self> {
        let mut steps = Steps::new();
        for (index, name) in step_names().iter().enumerate() {
            steps = steps.then(Step::action(StepKey::<String>::new(name), move |ctx: StepCtx<Self>| async move {
                ctx.workflow().ledger.record();
                tokio::time::sleep(STEP_TIME).await;
                Ok(format!("{index}:{}", "x".repeat(OUTPUT_BYTES)))
            }));
        }
        steps
    }

    fn output(ctx: &StepCtx<Self>) -> Result<usize, StepError> {
        let mut bytes = 0;
        for (index, name) in step_names().iter().enumerate() {
            let output = ctx.output(StepKey::<String>::new(name))?;
            assert!(output.starts_with(&format!("{index}:")), "step {index}'s checkpoint is another's");
            bytes += output.len();
        }
        Ok(bytes)
    }
}

fn step_names() -> &'static [&'static str] {
    static NAMES: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        (0..STEPS).map(|index| &*Box::leak(format!("step-{index}").into_boxed_str())).collect()
    });
    &NAMES
}

fn config() -> EngineConfig {
    EngineConfig {
        poll_interval: Duration::from_millis(20),
        // Shorter than the time the disk stays full: the drivers give their runs up and the
        // claim loop takes them again once there is room.
        lease_ttl: Duration::from_secs(2),
        ..EngineConfig::named("disk-full")
    }
}

async fn integrity_check(db: &Path) -> String {
    let url = format!("sqlite://{}", db.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let verdict: String = sqlx::query_scalar("PRAGMA integrity_check").fetch_one(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    verdict
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_the_database_whole_and_runs_resume_when_there_is_room() {
    let _ = tracing_subscriber::fmt().with_env_filter("anycloud_engine=debug").with_test_writer().try_init();
    let disk = Tmpfs::mount(8 << 20);
    let db = disk.path().join("engine.db");
    let store = Store::sqlite(&db).await.unwrap();
    let ledger = Ledger::default();
    let registry = Registry::new().with(Arc::new(Bulky { ledger: ledger.clone() }));
    let engine = Engine::start(store.clone(), registry, config()).await.unwrap();
    let mut runs = Vec::new();
    for _ in 0..4 {
        runs.push(engine.submit::<Bulky>(&(), None).await.unwrap());
    }
    while ledger.executions() < 20 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(store.storage_fault(), None);

    // Full, to the last byte. Writes go on into the WAL's space already on disk for a while; a
    // submit is refused once one needs a page more.
    let ballast = disk.fill();
    let full_at = Instant::now();
    assert_eq!(store.storage_fault(), Some(StoreFault::DiskFull));
    let refusal = loop {
        match engine.submit::<Bulky>(&(), None).await {
            Ok(id) => runs.push(id),
            Err(err) => break err,
        }
        assert!(full_at.elapsed() < Duration::from_secs(30), "no write was refused 30 s after the disk filled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let refused_after = full_at.elapsed();
    assert!(
        matches!(refusal, EngineError::Storage { fault: StoreFault::DiskFull, .. }),
        "the refusal does not say the disk is full: {refusal:?}"
    );
    let message = anycloud_engine::error_chain(&refusal);
    assert!(message.contains("the disk holding the database is full"), "{message}");

    // Full for longer than a lease: the runs stall, and reads still answer.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stalled = ledger.executions();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in &runs {
        engine.inspect(*id).await.unwrap();
    }
    assert_eq!(integrity_check(&db).await, "ok", "the database is damaged while the disk is full");

    // Room again: every run continues and completes, with every step's checkpoint.
    ballast.remove();
    let room_at = Instant::now();
    assert_eq!(store.storage_fault(), None);
    for id in &runs {
        let run = engine.wait(*id, Duration::from_secs(60)).await.unwrap();
        assert_eq!(run.status, RunStatus::Succeeded, "run {id}: {run:?}");
        let bytes: usize = serde_json::from_value(run.output.unwrap()).unwrap();
        assert!(bytes > STEPS * OUTPUT_BYTES, "run {id} lost checkpoints: {bytes} bytes of output");
    }
    let resumed_after = ledger.first_after(room_at).map(|at| at - room_at);
    // New work is taken again on the same store (its writer connection is usable).
    let late = engine.submit::<Bulky>(&(), None).await.unwrap();
    assert_eq!(engine.wait(late, Duration::from_secs(60)).await.unwrap().status, RunStatus::Succeeded);
    engine.shutdown(Duration::from_secs(10)).await;
    store.close().await;
    assert_eq!(integrity_check(&db).await, "ok");
    eprintln!(
        "disk_full: {} runs; first refusal {refused_after:?} after the disk filled; {stalled} step executions \
         before the stall; the first step ran {resumed_after:?} after the ballast was removed",
        runs.len()
    );
}

#[tokio::test]
async fn a_store_on_a_read_only_disk_refuses_to_open_and_opens_once_it_is_writable() {
    let disk = Tmpfs::mount(8 << 20);
    let db = disk.path().join("engine.db");
    let store = Store::sqlite(&db).await.unwrap();
    store.close().await;
    drop(store);
    disk.remount("ro").expect("remount read-only with no file open");

    let err = Store::sqlite(&db).await.unwrap_err();
    assert_eq!(StoreFault::of(&err), Some(StoreFault::ReadOnly), "{err:?}");
    let message = anycloud_engine::error_chain(&err);
    assert!(message.contains("read-only"), "{message}");

    disk.remount("rw").unwrap();
    let store = Store::sqlite(&db).await.unwrap();
    assert_eq!(store.storage_fault(), None);
    store.close().await;
    assert_eq!(integrity_check(&db).await, "ok");
}
