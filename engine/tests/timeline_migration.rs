//! The migration that numbers each run's timeline (`20261202300000_timeline_per_run.sql`) on a
//! database written by the engine before it: every event keeps its place, each `step-succeeded`
//! event becomes its step row's entry, and the runs' counters continue from there.

mod support;

use std::path::Path;
use std::time::Duration;

use anycloud_engine::{Engine, Registry, RunStatus, Store};
use sqlx::migrate::Migrator;
use support::{TestDb, config};
use uuid::Uuid;

/// The first migration that numbers timelines per run.
const PER_RUN: i64 = 20261202300000;

/// A run as the engine wrote it before: (kind, step) of its events in order, and its forward
/// steps that succeeded.
const FINISHED: [(&str, Option<&str>); 6] = [
    ("submitted", None),
    ("claimed", Some("s0")),
    ("step-succeeded", Some("s0")),
    ("step-failed", Some("s1")),
    ("step-succeeded", Some("s1")),
    ("succeeded", None),
];
const WAITING: [(&str, Option<&str>); 4] =
    [("submitted", None), ("claimed", Some("s0")), ("step-succeeded", Some("s0")), ("waiting", Some("nap"))];

#[tokio::test]
async fn sqlite_timelines_are_numbered_per_run() {
    numbered_per_run("sqlite").await;
}

#[tokio::test]
async fn postgres_timelines_are_numbered_per_run() {
    numbered_per_run("postgres").await;
}

async fn numbered_per_run(kind: &str) {
    let db = TestDb::open(kind).await;
    let (finished, waiting) = (Uuid::new_v4(), Uuid::new_v4());
    write_old_runs(&db, finished, waiting).await;

    // Opening the store runs the migration.
    let store = db.store().await;
    let timeline = store.events(finished, 0).await.expect("timeline");
    let entries: Vec<(i64, &str, Option<&str>)> =
        timeline.iter().map(|event| (event.seq, event.kind.as_str(), event.step.as_deref())).collect();
    let expected: Vec<(i64, &str, Option<&str>)> =
        FINISHED.iter().enumerate().map(|(i, (kind, step))| (i as i64 + 1, *kind, *step)).collect();
    assert_eq!(entries, expected, "{kind}: {timeline:#?}");
    assert_eq!(timeline[2].message, "attempt 1 succeeded after 5 ms", "{kind}");
    assert_eq!(timeline[4].message, "attempt 2 succeeded after 7 ms", "{kind}");
    assert_eq!(store.events(finished, 4).await.expect("timeline").len(), 2, "{kind}: paging after entry 4");
    assert_eq!(counter(&store, finished).await, 6, "{kind}");
    assert_eq!(counter(&store, waiting).await, 4, "{kind}");

    // The next entry of the unfinished run comes after the migrated ones.
    let engine = Engine::start(store.clone(), Registry::new(), config("after-migration")).await.expect("engine");
    assert_eq!(engine.cancel(waiting).await.expect("cancel"), RunStatus::Waiting);
    let timeline = store.events(waiting, 4).await.expect("timeline");
    assert_eq!((timeline[0].seq, timeline[0].kind.as_str()), (5, "cancel-requested"), "{kind}: {timeline:#?}");
    engine.shutdown(Duration::from_secs(5)).await;
}

/// Applies the migrations before [`PER_RUN`] and writes two runs as the engine did then.
async fn write_old_runs(db: &TestDb, finished: Uuid, waiting: Uuid) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations").join(db.kind);
    let old = tempfile::tempdir().expect("temporary directory");
    for entry in std::fs::read_dir(&source).expect("migrations") {
        let path = entry.expect("migration").path();
        let name = path.file_name().and_then(|name| name.to_str()).expect("file name").to_owned();
        let version: i64 = name.split('_').next().and_then(|v| v.parse().ok()).expect("version");
        if version < PER_RUN {
            std::fs::copy(&path, old.path().join(&name)).expect("copy migration");
        }
    }
    let migrator = Migrator::new(old.path()).await.expect("old migrations");
    let pool = db.raw_pool().await;
    anycloud_engine::with_pool!(&pool, |pool| {
        migrator.run(pool).await.expect("run old migrations");
        let runs = [
            (finished, "succeeded", 2_i64, None, 1_i64 << 62, Some(100_i64)),
            (waiting, "waiting", 1, Some("nap"), 1 << 61, None),
        ];
        for (id, status, step_index, current_step, next_at, finished_at) in runs {
            sqlx::query(
                "INSERT INTO engine_runs (id, kind, version, input, status, phase, step_index, current_step, \
                 attempt, next_at, lease_generation, created_at, updated_at, finished_at) \
                 VALUES ($1, 'old.kind', 1, 'null', $2, 'forward', $3, $4, 0, $5, 1, 1, 1, $6)",
            )
            .bind(id.to_string())
            .bind(status)
            .bind(step_index)
            .bind(current_step)
            .bind(next_at)
            .bind(finished_at)
            .execute(pool)
            .await
            .expect("old run");
        }
        // Interleave the two runs' events, as concurrent runs did: numbers were global.
        let (mut a, mut b) = (FINISHED.iter().peekable(), WAITING.iter().peekable());
        let mut at = 10_i64;
        while a.peek().is_some() || b.peek().is_some() {
            for (run, event) in [(finished, a.next()), (waiting, b.next())] {
                let Some((kind, step)) = event else { continue };
                at += 1;
                sqlx::query("INSERT INTO engine_events (run_id, at, kind, step, message) VALUES ($1, $2, $3, $4, $5)")
                    .bind(run.to_string())
                    .bind(at)
                    .bind(*kind)
                    .bind(*step)
                    .bind(format!("{kind} as written before"))
                    .execute(pool)
                    .await
                    .expect("old event");
            }
        }
        let steps: [(Uuid, i64, &str, i64, i64, i64); 3] =
            [(finished, 0, "s0", 1, 20, 25), (finished, 1, "s1", 2, 30, 37), (waiting, 0, "s0", 1, 20, 21)];
        for (run, idx, name, attempts, started, done) in steps {
            sqlx::query(
                "INSERT INTO engine_steps (run_id, phase, idx, name, status, attempts, output, started_at, finished_at) \
                 VALUES ($1, 'forward', $2, $3, 'succeeded', $4, 'null', $5, $6)",
            )
            .bind(run.to_string())
            .bind(idx)
            .bind(name)
            .bind(attempts)
            .bind(started)
            .bind(done)
            .execute(pool)
            .await
            .expect("old step");
        }
        pool.close().await;
    });
}

/// The run's timeline counter.
async fn counter(store: &Store, run: Uuid) -> i64 {
    anycloud_engine::with_pool!(store.pool(), |pool| {
        sqlx::query_scalar::<_, i64>("SELECT events FROM engine_runs WHERE id = $1")
            .bind(run.to_string())
            .fetch_one(pool)
            .await
            .expect("counter")
    })
}
