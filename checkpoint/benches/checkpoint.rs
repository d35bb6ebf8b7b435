//! What checkpointing an API's SQLite state to a bucket costs, against moto's S3 on loopback:
//!
//! 1. **Acknowledgement latency**: a client submits a workflow of five durable steps and waits
//!    for `flush` (what the API does before answering), one after another; beside it the same
//!    submissions on the same store without a bucket (the bare commit), and moto's own `PUT` of
//!    the segments' mean stored size, alone (the floor a ship adds). p50/p99 of each.
//! 2. **Bytes per workflow**: WAL bytes shipped per finished five-step workflow.
//! 3. **Restore of 10,000 runs**: a fresh directory restores the bucket (HEAD, snapshot, every
//!    WAL segment), then begins its own generation (truncate, upload, HEAD); both timed.
//!
//! `cargo bench -p anycloud-checkpoint --bench checkpoint [-- --runs N --restore-runs N]`.
//! moto comes from `$ANYCLOUD_TEST_MOTO_VENV` (default /var/tmp/anycloud-venv; scripts/test makes it).
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anycloud_checkpoint::{BucketUrl, Checkpointer, Layout, LocalFiles, S3Access, S3Bucket, restore};
use anycloud_engine::{Engine, EngineConfig, Registry, Step, StepCtx, StepError, Steps, Store, Workflow};

struct Five;

async fn nothing(_: StepCtx<Five>) -> Result<(), StepError> {
    Ok(())
}

impl Workflow for Five {
    const KIND: &'static str = "bench.five";
    const VERSION: u32 = 1;
    type Input = u64;
    type Output = u64;

    fn steps() -> Steps<Self> {
        ["s0", "s1", "s2", "s3", "s4"]
            .into_iter()
            .fold(Steps::new(), |steps, name| steps.then(Step::action(name, nothing)))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<u64, StepError> {
        Ok(*ctx.input())
    }
}

struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_moto() -> (Moto, String) {
    let venv = std::env::var("ANYCLOUD_TEST_MOTO_VENV").unwrap_or_else(|_| "/var/tmp/anycloud-venv".into());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(Path::new(&venv).join("bin/moto_server"))
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("starting moto from {venv} (run scripts/test once to make it): {err}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "moto did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Moto(child), format!("http://127.0.0.1:{port}"))
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

fn files(dir: &Path) -> LocalFiles {
    LocalFiles { database: dir.join("api.db"), identity_dir: dir.to_owned(), identity: Vec::new() }
}

async fn open_store(dir: &Path) -> Store {
    let options =
        sqlx::sqlite::SqliteConnectOptions::new().filename(dir.join("api.db")).pragma("wal_autocheckpoint", "0");
    Store::open_sqlite(options).await.unwrap()
}

async fn engine(store: &Store) -> Engine {
    let config = EngineConfig { poll_interval: Duration::from_millis(20), ..EngineConfig::named("bench") };
    Engine::start(store.clone(), Registry::new().with(Arc::new(Five)), config).await.unwrap()
}

/// Submits `runs` one after another, each acknowledged by `ack`; the latencies, sorted.
async fn submit_each(engine: &Engine, runs: usize, checkpointer: Option<&Checkpointer>) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(runs);
    for n in 0..runs {
        let started = Instant::now();
        engine.submit::<Five>(&(n as u64), None).await.unwrap();
        if let Some(checkpointer) = checkpointer {
            checkpointer.flush().await.unwrap();
        }
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

/// `count` conditional PUTs of a `size`-byte object, one after another, as the checkpointer
/// writes its segments; their latencies, sorted.
async fn put_each(bucket: &S3Bucket, count: usize, size: usize) -> Vec<Duration> {
    use anycloud_checkpoint::Bucket;
    let body = bytes::Bytes::from((0..size).map(|n| (n * 7919 % 251) as u8).collect::<Vec<u8>>());
    let mut latencies = Vec::with_capacity(count);
    for n in 0..count {
        let started = Instant::now();
        bucket.create(&format!("floor/{n:08}"), body.clone()).await.unwrap();
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

async fn wait_all_done(store: &Store) {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let open: i64 = match store.pool() {
            anycloud_engine::Pool::Sqlite(pool) => sqlx::query_scalar(
                "SELECT count(*) FROM engine_runs WHERE status NOT IN ('succeeded', 'failed', 'cancelled')",
            )
            .fetch_one(pool)
            .await
            .unwrap(),
            anycloud_engine::Pool::Postgres(_) => unreachable!("the bench runs on SQLite"),
        };
        if open == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{open} runs still open");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = arg("--runs", 500);
    let restore_runs = arg("--restore-runs", 10_000);
    let (_moto, endpoint) = start_moto();
    let url = BucketUrl::parse("s3://checkpoint-bench").unwrap();
    let access = S3Access {
        keys: Some(("AKIAANYCLOUDBENCH001".into(), "bench".into())),
        region: Some("us-east-1".into()),
        endpoint: Some(endpoint),
    };
    let bucket = Arc::new(S3Bucket::new(&url, &access).await);
    bucket.client().create_bucket().bucket("checkpoint-bench").send().await.unwrap();

    // ---- 1 and 2: acknowledgement latency and bytes per workflow.
    let bare_dir = tempfile::tempdir().unwrap();
    let bare_store = open_store(bare_dir.path()).await;
    let bare_engine = engine(&bare_store).await;
    let bare = submit_each(&bare_engine, runs, None).await;
    wait_all_done(&bare_store).await;

    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new("latency/");
    let restored = restore(bucket.as_ref(), &layout, &files(dir.path()), "bench").await.unwrap();
    let store = open_store(dir.path()).await;
    let checkpointer = Checkpointer::start(bucket.clone(), layout, files(dir.path()), "bench", restored).await.unwrap();
    let engine_a = engine(&store).await;
    let before = checkpointer.stats();
    let acked = submit_each(&engine_a, runs, Some(&checkpointer)).await;
    wait_all_done(&store).await;
    checkpointer.flush().await.unwrap();
    let after = checkpointer.stats();
    let shipped = after.shipped_bytes - before.shipped_bytes;
    let stored = after.stored_bytes - before.stored_bytes;
    let snapshots = after.snapshot_bytes_uploaded - before.snapshot_bytes_uploaded;
    // The bucket's own PUT of the segments' mean stored size, one after another: the floor that
    // an acknowledgement adds to its commit (every acknowledged submit waits for one).
    let segment = (stored / (after.segments_shipped - before.segments_shipped).max(1)) as usize;
    let floor = put_each(bucket.as_ref(), runs, segment).await;
    println!("checkpoint bench: {runs} five-step workflows submitted one at a time, SQLite, moto S3 on loopback");
    println!(
        "  acknowledged submit (commit + ship): p50 {:.2} ms  p99 {:.2} ms",
        percentile(&acked, 0.5),
        percentile(&acked, 0.99)
    );
    println!(
        "  bare submit (commit only):           p50 {:.2} ms  p99 {:.2} ms   ratio p50 {:.1}x",
        percentile(&bare, 0.5),
        percentile(&bare, 0.99),
        percentile(&acked, 0.5) / percentile(&bare, 0.5)
    );
    println!(
        "  one PUT of a segment's mean stored size ({segment} B) alone: p50 {:.2} ms  p99 {:.2} ms (the floor a ship adds)",
        percentile(&floor, 0.5),
        percentile(&floor, 0.99)
    );
    println!(
        "  WAL shipped: {shipped} bytes = {:.1} KiB per workflow (submit + 5 steps + end), stored deflated as {:.1} KiB; compactions: {} ({snapshots} snapshot bytes uploaded)",
        shipped as f64 / runs as f64 / 1024.0,
        stored as f64 / runs as f64 / 1024.0,
        after.generations_begun - before.generations_begun
    );

    // ---- 3: restore of 10,000 runs.
    let big_dir = tempfile::tempdir().unwrap();
    let layout = Layout::new("restore/");
    let restored = restore(bucket.as_ref(), &layout, &files(big_dir.path()), "bench").await.unwrap();
    let big_store = open_store(big_dir.path()).await;
    let big_ckpt =
        Checkpointer::start(bucket.clone(), layout.clone(), files(big_dir.path()), "bench", restored).await.unwrap();
    let big_engine = engine(&big_store).await;
    let started = Instant::now();
    for n in 0..restore_runs {
        big_engine.submit::<Five>(&(n as u64), None).await.unwrap();
    }
    wait_all_done(&big_store).await;
    big_ckpt.flush().await.unwrap();
    let filled = started.elapsed();
    let stats = big_ckpt.stats();
    big_engine.shutdown(Duration::from_secs(5)).await;
    big_store.close().await;

    let fresh = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let restored = restore(bucket.as_ref(), &layout, &files(fresh.path()), "bench-2").await.unwrap();
    let restore_time = started.elapsed();
    let (segments, bytes) = (restored.segments, restored.bytes);
    let fresh_store = open_store(fresh.path()).await;
    let count: i64 = match fresh_store.pool() {
        anycloud_engine::Pool::Sqlite(pool) => {
            sqlx::query_scalar("SELECT count(*) FROM engine_runs").fetch_one(pool).await.unwrap()
        }
        anycloud_engine::Pool::Postgres(_) => unreachable!(),
    };
    let opened = started.elapsed();
    let taken = Checkpointer::start(bucket.clone(), layout, files(fresh.path()), "bench-2", restored).await.unwrap();
    let begun = started.elapsed();
    println!(
        "restore: {restore_runs} finished runs (filled in {:.1} s; {} generations, now snapshot {} B + {} segments {} B)",
        filled.as_secs_f64(),
        stats.generations_begun,
        stats.snapshot_bytes,
        stats.segments,
        stats.wal_bytes
    );
    println!(
        "  download {} objects' {} bytes: {:.0} ms; open + replay the WAL: {:.0} ms; new generation (snapshot {} B up): {:.0} ms; total {:.0} ms; runs restored: {count}",
        segments + 2,
        bytes,
        restore_time.as_secs_f64() * 1000.0,
        (opened - restore_time).as_secs_f64() * 1000.0,
        taken.stats().snapshot_bytes,
        (begun - opened).as_secs_f64() * 1000.0,
        begun.as_secs_f64() * 1000.0
    );
    assert_eq!(count as usize, restore_runs, "every run came back");
}
