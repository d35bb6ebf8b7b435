//! Database outages: PostgreSQL's connections cut (`pg_terminate_backend`) or the server
//! restarted while runs are mid-flight. Every run finishes, every step's action runs once (the
//! one in flight may run again), and the runs continue within about a second of the database
//! answering again, far sooner than the 30 s a lapsed lease would take.
//!
//! The cut runs on a database of its own, created for the test, so that no other test's
//! connection is touched. The restart runs a private server (`initdb`, `pg_ctl` from the
//! PostgreSQL that scripts/test finds or installs), in the default run: a few seconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anycloud_engine::{Engine, EngineConfig, Registry, RunStatus, Step, StepCtx, StepError, Steps, Store, Workflow};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use uuid::Uuid;

const STEPS: usize = 30;
const RUNS: usize = 8;
/// Each step's own work: long enough that a cut finds steps in flight.
const STEP_TIME: Duration = Duration::from_millis(40);

/// What the steps did: when each (run, step) ran, every time it ran.
#[derive(Clone, Default)]
struct Ledger(Arc<Mutex<HashMap<StepOfRun, Vec<Instant>>>>);

type StepOfRun = (Uuid, usize);

impl Ledger {
    fn record(&self, run: Uuid, step: usize) {
        self.0.lock().unwrap().entry((run, step)).or_default().push(Instant::now());
    }

    fn runs_of(&self, run: Uuid, step: usize) -> usize {
        self.0.lock().unwrap().get(&(run, step)).map_or(0, Vec::len)
    }

    /// Steps that have run at least once.
    fn steps_run(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// For each run, the first time any of its steps started after `at`; `None` for a run none
    /// of whose steps started after it.
    fn first_after(&self, runs: &[Uuid], at: Instant) -> Vec<Option<Instant>> {
        let ledger = self.0.lock().unwrap();
        runs.iter()
            .map(|run| {
                ledger
                    .iter()
                    .filter(|((id, _), _)| id == run)
                    .flat_map(|(_, times)| times.iter().copied().filter(|time| *time > at))
                    .min()
            })
            .collect()
    }
}

/// `STEPS` steps: actions that record that they ran and take `STEP_TIME`, and every third a
/// short sleep.
struct Steady {
    ledger: Ledger,
}

impl Workflow for Steady {
    const KIND: &'static str = "steady";
    const VERSION: u32 = 1;
    type Input = ();
    type Output = ();

    fn steps() -> Steps<Self> {
        let mut steps = Steps::new();
        for index in 0..STEPS {
            let name: &'static str = Box::leak(format!("step-{index}").into_boxed_str());
            if index % 3 == 2 {
                // The run waits as a row and is claimed again: claims meet the cuts too.
                steps = steps.then(Step::sleep(name, |_: &StepCtx<Self>| Duration::from_millis(20)));
                continue;
            }
            steps = steps.then(Step::action(name, move |ctx: StepCtx<Self>| async move {
                ctx.workflow().ledger.record(ctx.run_id(), index);
                tokio::time::sleep(STEP_TIME).await;
                Ok(())
            }));
        }
        steps
    }

    fn output(_: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

/// A database of its own on the test server, dropped at the end.
struct OwnDatabase {
    admin_url: String,
    name: String,
}

impl OwnDatabase {
    async fn create() -> Self {
        let admin_url = support::postgres_url();
        let name = format!("dbout_{}", Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&admin_url).await.expect("PostgreSQL for the tests");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await.unwrap();
        Self { admin_url, name }
    }

    fn options(&self) -> PgConnectOptions {
        PgConnectOptions::from_str(&self.admin_url).unwrap().database(&self.name)
    }

    /// Cuts every connection to this database (the engine's pool and its owner lock), as a
    /// failover or a server restart does; returns how many were cut.
    async fn cut_connections(&self) -> i64 {
        let mut admin = PgConnection::connect(&self.admin_url).await.unwrap();
        let cut: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(&self.name)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        cut.len() as i64
    }

    /// Advisory locks held on this database (the engine's hold on its owner name).
    async fn advisory_locks(&self) -> i64 {
        let mut admin = PgConnection::connect(&self.admin_url).await.unwrap();
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
             WHERE l.locktype = 'advisory' AND l.granted AND d.datname = $1",
        )
        .bind(&self.name)
        .fetch_one(&mut admin)
        .await
        .unwrap()
    }

    async fn drop_it(self) {
        let mut admin = PgConnection::connect(&self.admin_url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)))
            .execute(&mut admin)
            .await
            .unwrap();
    }
}

/// The engine as an API runs it: the default 30 s lease, so that a run stalled until its
/// lease lapses shows.
fn config() -> EngineConfig {
    EngineConfig { poll_interval: Duration::from_millis(50), ..EngineConfig::named("dbout") }
}

async fn submit_all(engine: &Engine) -> Vec<Uuid> {
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        runs.push(engine.submit::<Steady>(&(), None).await.unwrap());
    }
    runs
}

/// Waits until the runs have done `steps` steps between them.
async fn until_steps_run(ledger: &Ledger, steps: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while ledger.steps_run() < steps {
        assert!(Instant::now() < deadline, "the runs did not get going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `engine.wait` for `run`, asked again when it fails: a pooled connection the cut killed answers
/// its next query with the cut's error once (the pool does not test a connection before use),
/// as an API request would get a 503 and ask again.
async fn wait_asking_again(engine: &Engine, run: Uuid) -> anycloud_engine::RunRecord {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match engine.wait(run, Duration::from_secs(60)).await {
            Ok(record) => return record,
            Err(err) if Instant::now() < deadline => {
                eprintln!("waiting for {run}: {err}; asking again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("waiting for {run}: {err}"),
        }
    }
}

/// Every run succeeded, with every step's action run once, but for at most `repeats` steps per
/// run (those in flight at a cut). Returns when the last run ended.
async fn every_run_finished(engine: &Engine, ledger: &Ledger, runs: &[Uuid], repeats: usize) -> Instant {
    for &run in runs {
        let record = wait_asking_again(engine, run).await;
        assert_eq!(record.status, RunStatus::Succeeded, "{run}: {:?}", record.error);
    }
    let ended = Instant::now();
    for &run in runs {
        let counts: Vec<usize> =
            (0..STEPS).filter(|step| step % 3 != 2).map(|step| ledger.runs_of(run, step)).collect();
        assert!(counts.iter().all(|&count| count >= 1), "{run}: a step never ran: {counts:?}");
        let repeated = counts.iter().filter(|&&count| count > 1).count();
        assert!(repeated <= repeats, "{run}: {repeated} steps ran more than once: {counts:?}");
        let events = match engine.events(run, 0).await {
            Ok(events) => events,
            // A second connection the cut killed, as above.
            Err(_) => engine.events(run, 0).await.unwrap(),
        };
        let succeeded = events.iter().filter(|event| event.kind == "step-succeeded").count();
        assert_eq!(succeeded, STEPS, "{run}: every step succeeded once in the timeline");
        let positions: Vec<i64> = events.iter().map(|event| event.seq).collect();
        let expected: Vec<i64> = (1..=events.len() as i64).collect();
        assert_eq!(positions, expected, "{run}: the timeline has no gap and no repeat");
    }
    ended
}

/// How long after `at` the last of the runs started a step again.
fn continued_within(ledger: &Ledger, runs: &[Uuid], at: Instant) -> Duration {
    ledger.first_after(runs, at).into_iter().flatten().map(|time| time - at).max().unwrap_or_default()
}

#[tokio::test]
async fn runs_continue_when_postgres_connections_are_cut() {
    let db = OwnDatabase::create().await;
    let store = Store::open_postgres(db.options(), 16).await.unwrap();
    let ledger = Ledger::default();
    let registry = Registry::new().with(Arc::new(Steady { ledger: ledger.clone() }));
    let engine = Engine::start(store.clone(), registry, config()).await.unwrap();
    let runs = submit_all(&engine).await;

    // Three cuts, a third of a second apart, while every run is mid-flight.
    until_steps_run(&ledger, RUNS * 3).await;
    let mut cut_at = Instant::now();
    let mut cuts = Vec::new();
    for _ in 0..3 {
        cut_at = Instant::now();
        cuts.push(db.cut_connections().await);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(cuts[0] > 0, "the engine's connections were cut: {cuts:?}");
    let ended = every_run_finished(&engine, &ledger, &runs, 3).await;
    let continued = continued_within(&ledger, &runs, cut_at);
    let rest = ended - cut_at;
    println!(
        "connections cut: {cuts:?}; after the last cut: every run continued within {continued:?}; all {RUNS} runs ended after {rest:?}"
    );
    assert!(continued < Duration::from_secs(3), "the runs continued {continued:?} after the cut");
    // The runs had at most STEPS steps of STEP_TIME left: no lapsed lease (30 s) in there.
    assert!(rest < Duration::from_secs(10), "the runs ended {rest:?} after the cut");

    // The engine takes its owner name back (at its next heartbeat): a second engine under it
    // is refused.
    let deadline = Instant::now() + Duration::from_secs(15);
    while db.advisory_locks().await == 0 {
        assert!(Instant::now() < deadline, "the engine did not take its name back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let registry = Registry::new().with(Arc::new(Steady { ledger: ledger.clone() }));
    let second = Engine::start(store.clone(), registry, config()).await;
    assert!(matches!(second, Err(anycloud_engine::EngineError::OwnerInUse(_))), "the name is held again");

    engine.shutdown(Duration::from_secs(5)).await;
    store.close().await;
    db.drop_it().await;
}

/// A PostgreSQL server of the test's own: `initdb` into a temporary directory, on a free port.
struct PrivateServer {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
    _temp: tempfile::TempDir,
}

impl PrivateServer {
    fn create() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's binaries in /usr/lib/postgresql/*/bin")
            .filter_map(|entry| entry.ok().map(|entry| entry.path().join("bin")))
            .find(|bin| bin.join("initdb").exists())
            .expect("initdb");
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("data");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let server = Self { dir, port, bin, _temp: temp };
        if as_root() {
            // initdb and pg_ctl refuse root: the server runs as `postgres`.
            std::process::Command::new("chown").arg("postgres:").arg(server._temp.path()).status().unwrap();
        }
        server.run("initdb", &["-A", "trust", "-U", "postgres", "-D", &server.dir.display().to_string()]);
        server
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn start(&self) {
        let options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.display());
        let log = self.dir.join("server.log").display().to_string();
        self.run("pg_ctl", &["-D", &self.dir.display().to_string(), "-o", &options, "-l", &log, "-w", "start"]);
    }

    /// Stops the server as a crash would: no shutdown checkpoint, every connection dropped.
    fn crash(&self) {
        self.run("pg_ctl", &["-D", &self.dir.display().to_string(), "-m", "immediate", "-w", "stop"]);
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let mut command = if as_root() {
            let mut command = std::process::Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            std::process::Command::new(&program)
        };
        let status = command.args(args).stdout(std::process::Stdio::null()).status();
        assert!(status.unwrap().success(), "{tool} {args:?} failed");
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if Path::new(&self.dir).join("postmaster.pid").exists() {
            self.crash();
        }
    }
}

fn as_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

#[tokio::test]
async fn runs_continue_when_postgres_restarts() {
    let server = PrivateServer::create();
    server.start();
    let store = Store::connect(&server.url()).await.unwrap();
    let ledger = Ledger::default();
    let registry = Registry::new().with(Arc::new(Steady { ledger: ledger.clone() }));
    let engine = Engine::start(store.clone(), registry, config()).await.unwrap();
    let runs = submit_all(&engine).await;

    until_steps_run(&ledger, RUNS * 3).await;
    let down_at = Instant::now();
    server.crash();
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.start();
    let up_at = Instant::now();
    let ended = every_run_finished(&engine, &ledger, &runs, 1).await;
    let continued = continued_within(&ledger, &runs, up_at);
    println!(
        "server down for {:?}; after it was up again every run continued within {continued:?}; all {RUNS} runs \
         ended after {:?}",
        up_at - down_at,
        ended - up_at
    );
    assert!(continued < Duration::from_secs(3), "the runs continued {continued:?} after the restart");
    engine.shutdown(Duration::from_secs(5)).await;
    store.close().await;
}
