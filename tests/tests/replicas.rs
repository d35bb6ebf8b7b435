//! Several replicas on one PostgreSQL: three engine processes (`src/bin/replica_child.rs`), each
//! under its own owner name, on one schema, running four-step workflows whose every execution of
//! a step is recorded in a table of its own (`replica_executions`).
//!
//! What must hold:
//!
//! * the replicas share the runs: each of them drives steps;
//! * when one is killed with SIGKILL (once it has checkpointed steps and has steps in hand), the
//!   others take over every run it held
//!   once its leases lapse, and not before (between two thirds of a lease and a lease after the
//!   kill, plus a claim poll), and finish them; a step ran twice only if it was one the killed
//!   replica had in hand, and then once more, by another replica;
//! * when one is frozen with SIGSTOP past its lease, the others take over its runs and finish
//!   them while it is frozen; resumed with SIGCONT, it completes the steps it had in hand (their
//!   second execution, the one in-flight duplicate the guarantees allow) and its commits are
//!   refused: the runs' timelines and checkpoints are those the other replicas wrote (a
//!   `recovered` entry naming the frozen replica's lapsed lease, one `step-succeeded` per step),
//!   nothing is added to them, and the frozen replica says it dropped each run.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::str::FromStr;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anycloud_engine::{EventKind, Phase, RunFilter, RunStatus, Store};
use anycloud_tests::replicas::{EXECUTIONS_DDL, EXECUTIONS_TABLE, STARTED, STEP_NAMES, SUBMITTED, WORKFLOW_KIND};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};
use uuid::Uuid;

/// Each replica's lease: short, so that a takeover is quick, and long enough that heartbeats
/// (every third of it) keep up on a loaded 2-core machine running a debug build.
const LEASE: Duration = Duration::from_secs(4);
/// The replicas' claim poll (`replica_child` sets it).
const POLL: Duration = Duration::from_millis(100);
/// Slack for scheduling on a loaded machine, on top of the lease and the poll.
const SLACK: Duration = Duration::from_millis(1500);
/// Runs each replica drives at once.
const MAX_CONCURRENCY: usize = 4;
/// Replicas started.
const REPLICAS: usize = 3;
/// How long any one wait may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn replicas_share_the_runs_and_finish_a_killed_ones_within_its_lease() {
    let rt = runtime();
    rt.block_on(async {
        // Few enough runs that the others have free slots by the time the lease lapses: the
        // takeover is then timed by the lease, not by a queue.
        let mut cluster = Cluster::start("replicas_kill", Duration::from_millis(150)).await;
        let runs = 24;
        cluster.submit(runs).await;

        // Kill replica-1 while it is inside steps, once it has checkpointed some (more steps
        // done than it has slots: two of them were steps of one run, the first checkpointed).
        let victim = 1;
        cluster.until_progress(victim, MAX_CONCURRENCY + 1, 1).await;
        cluster.replicas[victim].child.kill().unwrap(); // SIGKILL
        let killed_at = now_ms();
        cluster.replicas[victim].child.wait().unwrap();
        // A signal lands on a running process a moment after `kill` returns: a step may stamp its
        // start in the same millisecond. Once `wait` returns, nothing the replica stamps is later.
        let dead_at = now_ms();
        let held = cluster.held_by(victim).await;
        let in_flight = cluster.unfinished_executions(victim).await;
        assert!(!held.is_empty(), "replica-1 held no run when it was killed");

        cluster.until_all_succeeded(runs).await;
        let report = cluster.check_takeover(victim, killed_at, &held).await;
        let executions = cluster.executions().await;
        check_duplicates(&executions, &cluster.owner(victim), dead_at, &in_flight, runs);

        // Every replica drove steps, and the survivors drove the killed one's runs to the end.
        let drivers = cluster.step_drivers().await;
        for index in 0..REPLICAS {
            assert!(
                drivers.get(&cluster.owner(index)).copied().unwrap_or(0) > 0,
                "{} drove no step: {drivers:?}",
                cluster.owner(index)
            );
        }
        eprintln!(
            "replicas: {runs} runs of {} steps on {REPLICAS} replicas; steps checkpointed per replica {drivers:?}; \
             replica-1 killed holding {} runs ({} steps in hand); {report}",
            STEP_NAMES.len(),
            held.len(),
            in_flight.len()
        );
        cluster.stop().await;
    });
}

#[test]
fn a_frozen_replicas_late_commit_is_refused() {
    let rt = runtime();
    rt.block_on(async {
        // Long steps, so that the replica is frozen inside them.
        // 16 runs: each replica takes four at once, four wait, and the others have free slots
        // again by the time the frozen one's leases lapse.
        let mut cluster = Cluster::start("replicas_freeze", Duration::from_millis(600)).await;
        let runs = 16;
        cluster.submit(runs).await;

        // Freeze replica-1 once every slot it has is inside a step: it then has no claim (and no
        // transaction holding rows) open, only steps in hand.
        let victim = 1;
        cluster.until_progress(victim, 0, MAX_CONCURRENCY).await;
        let pid = cluster.replicas[victim].child.id();
        signal(pid, "STOP");
        let frozen_at = now_ms();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let held = cluster.held_by(victim).await;
        let in_flight = cluster.unfinished_executions(victim).await;
        assert!(!in_flight.is_empty(), "replica-1 was frozen with no step in hand");

        // The others finish every run while it is frozen.
        cluster.until_all_succeeded(runs).await;
        let frozen_for = Duration::from_millis((now_ms() - frozen_at) as u64);
        assert!(frozen_for > LEASE, "the runs ended {frozen_for:?} after the freeze, within the lease");
        let report = cluster.check_takeover(victim, frozen_at, &held).await;
        let before = cluster.histories(&held).await;

        // Resumed, it completes the steps it had in hand; their commits are refused.
        // Read before the signal: the replica may write its first row before `kill` returns.
        let resumed_at = now_ms();
        signal(pid, "CONT");
        let deadline = Instant::now() + PATIENCE;
        loop {
            let unfinished = cluster.unfinished_executions(victim).await;
            let dropped = cluster.replicas[victim].log().matches("lease was taken over by another engine").count();
            if unfinished.is_empty() && dropped >= in_flight.len() {
                break;
            }
            assert!(Instant::now() < deadline, "the resumed replica did not complete its steps: {unfinished:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Time for any late write to land, were one let through.
        tokio::time::sleep(Duration::from_millis(500)).await;

        // Each refused commit is one `late-commit-refused` entry in its run's timeline, naming the
        // replica and the step; nothing else changed.
        let victim_owner = cluster.owner(victim);
        let mut after = cluster.histories(&held).await;
        let late_kind = EventKind::LateCommitRefused.to_string();
        let mut refused_entries = Vec::new();
        for (run, history) in &mut after {
            for (_, message) in history.events.iter().filter(|(kind, _)| kind == &late_kind) {
                assert!(message.contains(&format!("{victim_owner} finished step `")), "run {run}: {message}");
                refused_entries.push((run.clone(), message.clone()));
            }
            history.events.retain(|(kind, _)| kind != &late_kind);
        }
        assert_eq!(before, after, "a run's timeline or checkpoints changed after the frozen replica resumed");
        for (run, step) in &in_flight {
            assert!(
                refused_entries.iter().any(|(late, message)| late == run && message.contains(&format!("`{step}`"))),
                "run {run}: no late-commit-refused entry for step `{step}`: {refused_entries:?}"
            );
        }
        let dropped = cluster.replicas[victim].log().matches("lease was taken over by another engine").count();
        assert_eq!(refused_entries.len(), dropped, "one timeline entry per refused commit: {refused_entries:?}");
        for (run, step) in &in_flight {
            let history = &after[run];
            let kept = history.steps.iter().find(|(name, _)| name == step).map(|(_, owner)| owner.as_str());
            assert!(
                kept.is_some_and(|owner| owner != victim_owner),
                "run {run}: step `{step}`'s checkpoint is {kept:?}, not another replica's"
            );
            assert!(
                history.events.iter().any(|(kind, message)| kind == &EventKind::Recovered.to_string()
                    && message.contains(&format!("after the lease of {victim_owner} lapsed"))
                    && message.contains(&format!("step `{step}` ended without a checkpoint"))),
                "run {run}: no `recovered` entry says step `{step}` of {victim_owner} was cut short: {history:?}"
            );
        }

        let executions = cluster.executions().await;
        let duplicates = check_duplicates(&executions, &victim_owner, frozen_at, &in_flight, runs);
        for (run, step) in &in_flight {
            let late = executions.iter().find(|e| &e.run == run && &e.step == step && e.owner == victim_owner).unwrap();
            assert!(
                late.finished_at.is_some_and(|at| at >= resumed_at),
                "run {run}: the frozen replica's execution of `{step}` finished before it was resumed: {late:?}"
            );
        }
        let dropped = cluster.replicas[victim].log().matches("lease was taken over by another engine").count();
        assert_eq!(dropped, duplicates, "the resumed replica should drop exactly the runs whose step ran twice");
        eprintln!(
            "replicas: replica-1 frozen {} ms holding {} runs ({} steps in hand); {report}; resumed, its {} late \
             commits were refused; {duplicates} steps ran twice, each once by it and once by another replica",
            resumed_at - frozen_at,
            held.len(),
            in_flight.len(),
            dropped,
        );
        cluster.stop().await;
    });
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().unwrap();
    assert!(status.success(), "kill -{name} {pid} failed: {status}");
}

/// One replica process.
struct Replica {
    owner: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    log: PathBuf,
}

impl Replica {
    fn wait_for(&self, line: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(read) if read == line => return,
                Ok(_) => {}
                Err(_) => panic!("{} never printed `{line}`; its stderr:\n{}", self.owner, self.log()),
            }
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An execution of a step, as the step recorded it.
#[derive(Debug, Clone, sqlx::FromRow)]
struct Execution {
    #[sqlx(rename = "run_id")]
    run: String,
    step: String,
    owner: String,
    started_at: i64,
    finished_at: Option<i64>,
}

/// A run's timeline (kind, message) and its forward checkpoints (step, the replica whose
/// execution it kept).
#[derive(Debug, PartialEq, Eq)]
struct History {
    events: Vec<(String, String)>,
    steps: Vec<(String, String)>,
}

/// Replicas on one fresh schema, and the test's own connections to it.
struct Cluster {
    schema: String,
    dir: tempfile::TempDir,
    store: Store,
    pool: PgPool,
    replicas: Vec<Replica>,
}

impl Cluster {
    /// Creates the schema (the engine's tables and the executions table) and starts the replicas.
    async fn start(prefix: &str, step: Duration) -> Self {
        let url = anycloud_tests::e2e::postgres_url();
        let schema = format!("{prefix}_{}", Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&url)
            .await
            .unwrap_or_else(|err| panic!("PostgreSQL at {url} is required (set ANYCLOUD_TEST_DATABASE_URL): {err}"));
        sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
        let options = PgConnectOptions::from_str(&url).unwrap().options([("search_path", schema.as_str())]);
        // Migrated here, once, before the replicas open it.
        let store = Store::open_postgres(options.clone(), 2).await.unwrap();
        let pool = PgPoolOptions::new().max_connections(2).connect_with(options).await.unwrap();
        sqlx::query(EXECUTIONS_DDL).execute(&pool).await.unwrap();
        let dir = tempfile::Builder::new().prefix("anycloud-replicas-").tempdir().unwrap();
        // Owner names are held database-wide: a suffix keeps tests running at once apart.
        let suffix = &Uuid::new_v4().simple().to_string()[..6];
        let replicas =
            (0..REPLICAS).map(|index| spawn(&url, &schema, &format!("replica-{index}.{suffix}"), step, &dir)).collect();
        let cluster = Self { schema, dir, store, pool, replicas };
        for replica in &cluster.replicas {
            replica.wait_for(STARTED);
        }
        cluster
    }

    fn owner(&self, index: usize) -> String {
        self.replicas[index].owner.clone()
    }

    /// Submits `runs` runs through replica-0, unleased: every replica's claim loop competes.
    async fn submit(&mut self, runs: usize) {
        let replica = &mut self.replicas[0];
        writeln!(replica.stdin.as_mut().unwrap(), "submit {runs}").unwrap();
        replica.wait_for(SUBMITTED);
    }

    /// Waits until the replica has finished at least `finished` executions and has at least
    /// `in_hand` steps in hand, the latest started 20 ms ago or more (so that it is inside its
    /// sleep, not about to finish).
    async fn until_progress(&self, index: usize, finished: usize, in_hand: usize) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let sql = format!(
                "SELECT count(*) FILTER (WHERE finished_at IS NOT NULL), count(*) FILTER (WHERE finished_at IS NULL), \
                   coalesce(max(started_at) FILTER (WHERE finished_at IS NULL), 0) \
                 FROM {EXECUTIONS_TABLE} WHERE owner = $1"
            );
            let (done, open, latest): (i64, i64, i64) =
                sqlx::query_as(AssertSqlSafe(sql)).bind(self.owner(index)).fetch_one(&self.pool).await.unwrap();
            if done as usize >= finished && open as usize >= in_hand && now_ms() - latest >= 20 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} never had {finished} steps done and {in_hand} in hand ({done}, {open})",
                self.owner(index)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The unfinished runs leased to the replica.
    async fn held_by(&self, index: usize) -> BTreeSet<String> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT id FROM engine_runs WHERE lease_owner = $1 AND finished_at IS NULL")
                .bind(self.owner(index))
                .fetch_all(&self.pool)
                .await
                .unwrap();
        rows.into_iter().map(|(id,)| id).collect()
    }

    /// The (run, step) the replica has started and not finished.
    async fn unfinished_executions(&self, index: usize) -> BTreeSet<(String, String)> {
        let sql = format!("SELECT run_id, step FROM {EXECUTIONS_TABLE} WHERE owner = $1 AND finished_at IS NULL");
        let rows: Vec<(String, String)> =
            sqlx::query_as(AssertSqlSafe(sql)).bind(self.owner(index)).fetch_all(&self.pool).await.unwrap();
        rows.into_iter().collect()
    }

    async fn executions(&self) -> Vec<Execution> {
        let sql = format!("SELECT run_id, step, owner, started_at, finished_at FROM {EXECUTIONS_TABLE} ORDER BY id");
        sqlx::query_as(AssertSqlSafe(sql)).fetch_all(&self.pool).await.unwrap()
    }

    async fn until_all_succeeded(&self, runs: usize) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let filter = RunFilter { kind: Some(WORKFLOW_KIND.into()), limit: Some(1000), ..RunFilter::default() };
            let all = self.store.list_runs(&filter).await.unwrap();
            assert!(
                all.iter().all(|run| !run.status.is_final() || run.status == RunStatus::Succeeded),
                "a run failed: {all:?}"
            );
            if all.len() == runs && all.iter().all(|run| run.status == RunStatus::Succeeded) {
                return;
            }
            if Instant::now() > deadline {
                let left: Vec<String> = all
                    .iter()
                    .filter(|run| run.status != RunStatus::Succeeded)
                    .map(|run| format!("{} {} {:?} lease {:?}", run.id, run.status, run.current_step, run.lease))
                    .collect();
                let logs: Vec<String> = self.replicas.iter().map(|r| format!("{}:\n{}", r.owner, r.log())).collect();
                panic!("runs unfinished after {PATIENCE:?}:\n{}\n{}", left.join("\n"), logs.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Checks that each run the replica held when it stopped at `stopped_at` was taken over by
    /// another replica once its lease lapsed, not before, and within a lease and a poll (plus
    /// slack); describes when.
    async fn check_takeover(&self, index: usize, stopped_at: i64, held: &BTreeSet<String>) -> String {
        let owner = self.owner(index);
        let (mut first, mut last, mut ended) = (i64::MAX, 0, 0);
        for run in held {
            let id = Uuid::parse_str(run).unwrap();
            let events = self.store.events(id, 0).await.unwrap();
            let recovered: Vec<_> = events
                .iter()
                .filter(|e| {
                    e.kind == EventKind::Recovered && e.message.contains(&format!("the lease of {owner} lapsed"))
                })
                .collect();
            assert_eq!(recovered.len(), 1, "run {run}: expected one takeover of {owner}'s lease: {events:?}");
            let after = recovered[0].at - stopped_at;
            assert!(
                !recovered[0].message.contains(&format!("claimed by {owner} ")),
                "run {run} was taken back by {owner} itself: {}",
                recovered[0].message
            );
            // The lease was renewed at most a third of it before the stop.
            let earliest = (LEASE.as_millis() as i64) * 2 / 3 - 100;
            let latest = (LEASE + POLL + SLACK).as_millis() as i64;
            assert!(after >= earliest, "run {run} was taken over {after} ms after the stop, while its lease held");
            assert!(after <= latest, "run {run} was taken over only {after} ms after the stop (lease {LEASE:?})");
            first = first.min(after);
            last = last.max(after);
            let record = self.store.run(id).await.unwrap().unwrap();
            ended = ended.max(record.finished_at.unwrap() - stopped_at);
        }
        format!(
            "its runs were taken over {first}–{last} ms after (lease {} ms) and all ended {ended} ms after",
            LEASE.as_millis()
        )
    }

    /// How many forward steps each replica's executions were checkpointed from.
    async fn step_drivers(&self) -> BTreeMap<String, usize> {
        let mut drivers = BTreeMap::new();
        let filter = RunFilter { kind: Some(WORKFLOW_KIND.into()), limit: Some(1000), ..RunFilter::default() };
        for run in self.store.list_runs(&filter).await.unwrap() {
            for (_, owner) in self.history(run.id).await.steps {
                *drivers.entry(owner).or_default() += 1;
            }
        }
        drivers
    }

    async fn history(&self, id: Uuid) -> History {
        let events = self.store.events(id, 0).await.unwrap();
        let steps = self.store.steps(id).await.unwrap();
        let forward: Vec<_> = steps.iter().filter(|s| s.phase == Phase::Forward).collect();
        let names: Vec<&str> = forward.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, STEP_NAMES, "run {id}: one checkpoint per step, in order");
        History {
            events: events.iter().map(|e| (e.kind.to_string(), e.message.clone())).collect(),
            steps: forward
                .iter()
                .map(|s| (s.name.clone(), s.output.as_ref().and_then(|o| o.as_str()).unwrap_or_default().to_owned()))
                .collect(),
        }
    }

    async fn histories(&self, runs: &BTreeSet<String>) -> BTreeMap<String, History> {
        let mut histories = BTreeMap::new();
        for run in runs {
            histories.insert(run.clone(), self.history(Uuid::parse_str(run).unwrap()).await);
        }
        histories
    }

    async fn stop(mut self) {
        for replica in &mut self.replicas {
            let _ = signal_quietly(replica.child.id(), "CONT");
            drop(replica.stdin.take());
        }
        for replica in &mut self.replicas {
            let _ = replica.child.wait();
        }
        self.store.close().await;
        self.pool.close().await;
        let mut conn = sqlx::PgConnection::connect(&anycloud_tests::e2e::postgres_url()).await.unwrap();
        sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {} CASCADE", self.schema))).execute(&mut conn).await.unwrap();
        drop(self.dir);
    }
}

fn signal_quietly(pid: u32, name: &str) -> std::io::Result<std::process::ExitStatus> {
    Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).stderr(Stdio::null()).status()
}

fn spawn(url: &str, schema: &str, owner: &str, step: Duration, dir: &tempfile::TempDir) -> Replica {
    let log = dir.path().join(format!("{owner}.log"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_replica_child"))
        .args(["--database-url", url, "--schema", schema, "--owner", owner])
        .args(["--lease-ms", &LEASE.as_millis().to_string(), "--step-ms", &step.as_millis().to_string()])
        .args(["--max-concurrency", &MAX_CONCURRENCY.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap_or_else(|err| panic!("starting {owner}: {err}"));
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Replica { owner: owner.to_owned(), stdin: child.stdin.take(), child, lines, log }
}

/// Checks that every step of every run ran once, or twice when the stopped replica (`owner`)
/// had it in hand at `stopped_at`: then once by it and once by another replica. Every step it
/// had started and not finished (`in_flight`) must have run again elsewhere. Returns how many
/// steps ran twice.
fn check_duplicates(
    executions: &[Execution],
    owner: &str,
    stopped_at: i64,
    in_flight: &BTreeSet<(String, String)>,
    runs: usize,
) -> usize {
    let mut by_step: BTreeMap<(String, String), Vec<&Execution>> = BTreeMap::new();
    for execution in executions {
        by_step.entry((execution.run.clone(), execution.step.clone())).or_default().push(execution);
    }
    assert_eq!(by_step.len(), runs * STEP_NAMES.len(), "not every step of every run ran");
    let mut duplicates = 0;
    for (key, list) in &by_step {
        match list.as_slice() {
            [_] => assert!(!in_flight.contains(key), "{key:?} was in the stopped replica's hands but never ran again"),
            [first, second] => {
                assert!(
                    first.owner == owner && second.owner != owner && first.started_at <= stopped_at,
                    "{key:?} ran twice, not as a step the stopped replica had in hand and another replica repeated: \
                     {list:?}"
                );
                duplicates += 1;
            }
            _ => panic!("{key:?} ran {} times: {list:?}", list.len()),
        }
    }
    duplicates
}
