//! Crash test: a child process runs the engine over a real database (SQLite; PostgreSQL)
//! and is killed with SIGKILL at random moments, again and again, then restarted once more to
//! finish. Side effects are counted through an independent record, the `side_effects` table,
//! which each step writes through its own connection pool, never through the engine's tables.
//!
//! What must hold afterwards:
//!
//! * every run ended `succeeded`;
//! * every step of every run has a side effect, all with the step's idempotency key;
//! * no incarnation executed a step of a run twice;
//! * a step executed more than once only because it was the run's step in flight when an
//!   incarnation was killed: every execution but the last was made by a killed incarnation,
//!   as the last thing that incarnation did for that run;
//! * along each run, side effects go forward one step at a time: once a step has run, no
//!   earlier step runs again (a checkpoint, once written, is never lost);
//! * the checkpoint the engine kept for each step is the output of that step's last execution;
//! * the kills landed both inside steps (before the side effect) and between a side effect and
//!   its checkpoint (a journal file of step starts tells which).
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anycloud_tests::crash::{MAX_CONCURRENCY, SIDE_EFFECTS_TABLE, STEP_NAMES, StepOutput, WORKFLOW_KIND};
use rand::Rng;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, Connection};
use uuid::Uuid;

/// Unfinished runs the store is topped up to before an incarnation starts, whenever fewer
/// than [`LOW_WATER`] are left: the engine is busy at every kill, and the final incarnation
/// starts with seconds of work queued before the runs the killed incarnations held (longer than
/// a heartbeat period, so it must take those back while it renews its own leases). A debug
/// build on 2 cores gets through 30 to 100 runs a second.
const BACKLOG: usize = 400;
/// See [`BACKLOG`].
const LOW_WATER: usize = 250;
/// Incarnations killed with SIGKILL, per store.
const KILLS: usize = 25;
/// How long an incarnation lives before its kill, from its spawn (milliseconds).
const KILL_AFTER_MS: std::ops::RangeInclusive<u64> = 30..=400;
/// Every this many incarnations, one lives longer than a heartbeat period (a third of the
/// child's 5 s lease) before it is killed, so that kills also land after heartbeats. The last
/// killed incarnation is a short one.
const LONG_LIVED_EVERY: usize = 8;
/// How long those live (milliseconds).
const LONG_LIFE_MS: std::ops::RangeInclusive<u64> = 1_800..=2_500;
/// How long the final incarnation may take to finish every run.
const FINAL_TIMEOUT: Duration = Duration::from_secs(120);
/// The final incarnation fails at once if it writes no side effect for this long while runs
/// remain unfinished (it needs a few seconds in all).
const STALL: Duration = Duration::from_secs(15);

#[test]
fn sqlite_survives_sigkill() {
    crash_test(Backend::Sqlite);
}

#[test]
fn postgres_survives_sigkill() {
    crash_test(Backend::Postgres);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

/// Where one test's databases and files live. The directory is removed only when the test
/// passes, so that a failure can be examined.
struct Target {
    backend: Backend,
    dir: PathBuf,
    database_url: String,
    effects_url: String,
    schema: Option<String>,
}

impl Target {
    fn name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("children.log")
    }

    fn journal_path(&self) -> PathBuf {
        self.dir.join("starts.log")
    }
}

/// One row of the independent record.
#[derive(Debug, Clone)]
struct Effect {
    seq: i64,
    run_id: String,
    step: String,
    step_index: i64,
    key: String,
    incarnation: i64,
}

/// What the engine checkpointed for one forward step.
#[derive(Debug, Clone)]
struct Checkpoint {
    run_id: String,
    index: i64,
    name: String,
    status: String,
    output: Option<String>,
}

/// What the databases hold after the final incarnation.
struct Observed {
    runs: Vec<(String, String)>,
    effects: Vec<Effect>,
    checkpoints: Vec<Checkpoint>,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn crash_test(backend: Backend) {
    let started = Instant::now();
    let rt = runtime();
    let target = rt.block_on(prepare(backend));
    let name = target.name();

    // An incarnation that tops up the runs submits them before its kill clock starts.
    let mut submitted = 0;
    let mut top_ups = 0;
    let mut incarnation = 0;
    for _ in 0..KILLS {
        let unfinished = if incarnation == 0 { 0 } else { rt.block_on(progress(&target)).unfinished };
        let role = if unfinished < LOW_WATER {
            submitted += BACKLOG - unfinished;
            top_ups += 1;
            Role::Submit(submitted)
        } else {
            Role::Work
        };
        let mut child = spawn_child(&target, incarnation, role);
        if let Role::Submit(_) = role {
            wait_for_line(&target, &mut child, "submitted");
        }
        let long_lived = incarnation % LONG_LIVED_EVERY == LONG_LIVED_EVERY / 2;
        let delay = rand::rng().random_range(if long_lived { LONG_LIFE_MS } else { KILL_AFTER_MS });
        std::thread::sleep(Duration::from_millis(delay));
        if let Some(status) = child.try_wait().unwrap() {
            fail(&target, &format!("incarnation {incarnation} exited on its own ({status}) before its kill"));
        }
        child.kill().unwrap(); // SIGKILL on Unix
        let status = child.wait().unwrap();
        assert_killed(&target, incarnation, status);
        incarnation += 1;
    }
    let backlog = rt.block_on(progress(&target)).unfinished;

    // The final incarnation runs until every run has ended.
    let mut child = spawn_child(&target, incarnation, Role::Finish);
    let deadline = Instant::now() + FINAL_TIMEOUT;
    let (mut effects_seen, mut progressed_at) = (-1, Instant::now());
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let progress = rt.block_on(progress(&target));
        if progress.effects != effects_seen {
            (effects_seen, progressed_at) = (progress.effects, Instant::now());
        }
        let stalled = progressed_at.elapsed() > STALL;
        if stalled || Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            let why = if stalled {
                format!("made no side effect for {STALL:?}")
            } else {
                format!("did not finish within {FINAL_TIMEOUT:?}")
            };
            fail(
                &target,
                &format!("the final incarnation {why}, with runs unfinished:\n{}", progress.described.join("\n")),
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    if !status.success() {
        fail(&target, &format!("the final incarnation failed: {status}"));
    }

    let observed = rt.block_on(observe(&target));
    let journal = std::fs::read_to_string(target.journal_path()).unwrap();
    let summary = match verify(&observed, &journal, submitted, KILLS) {
        Ok(summary) => summary,
        Err(problem) => fail(&target, &problem),
    };
    println!(
        "crash[{name}]: kills={KILLS} runs={} (in {top_ups} submissions) side_effects={} duplicates={} \
         kills_inside_step_before_effect={} kills_between_effect_and_checkpoint={} idle_kills={} \
         runs_left_after_last_kill={backlog} side_effects_after_last_kill={} elapsed={:.1}s",
        summary.runs,
        summary.effects,
        summary.duplicates,
        summary.kills_before_effect,
        summary.kills_between,
        summary.idle_kills,
        summary.final_effects,
        started.elapsed().as_secs_f64()
    );
    assert!(
        summary.duplicates >= 1,
        "no kill landed between a side effect and its checkpoint; the test proved nothing about that window"
    );
    assert!(summary.kills_before_effect >= 1, "no kill landed inside a step before its side effect");
    std::fs::remove_dir_all(&target.dir).unwrap();
    if let Some(schema) = &target.schema {
        rt.block_on(async {
            let mut conn = sqlx::PgConnection::connect(&anycloud_tests::e2e::postgres_url()).await.unwrap();
            sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut conn).await.unwrap();
        });
    }
}

/// Creates the databases and the side-effect table (the engine's own tables are created by the
/// first incarnation).
async fn prepare(backend: Backend) -> Target {
    let dir = tempfile::Builder::new().prefix("anycloud-crash-").tempdir().unwrap().keep();
    let create = |seq: &str| {
        format!(
            "CREATE TABLE {SIDE_EFFECTS_TABLE} (seq {seq}, run_id TEXT NOT NULL, step TEXT NOT NULL, \
             step_index BIGINT NOT NULL, idempotency_key TEXT NOT NULL, incarnation BIGINT NOT NULL)"
        )
    };
    match backend {
        Backend::Sqlite => {
            // The side effects go to a file of their own: nothing the engine writes touches it.
            let database_url = format!("sqlite://{}", dir.join("engine.db").display());
            let effects_url = format!("sqlite://{}", dir.join("effects.db").display());
            let pool = sqlite_pool(&effects_url, true).await;
            sqlx::query(AssertSqlSafe(create("INTEGER PRIMARY KEY AUTOINCREMENT"))).execute(&pool).await.unwrap();
            pool.close().await;
            Target { backend, dir, database_url, effects_url, schema: None }
        }
        Backend::Postgres => {
            let url = anycloud_tests::e2e::postgres_url();
            let schema = format!("crash_{}", Uuid::new_v4().simple());
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap_or_else(|err| {
                panic!("PostgreSQL at {url} is required by the crash test (set ANYCLOUD_TEST_DATABASE_URL): {err}")
            });
            sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await.unwrap();
            let table = create("BIGSERIAL PRIMARY KEY").replacen(
                SIDE_EFFECTS_TABLE,
                &format!("{schema}.{SIDE_EFFECTS_TABLE}"),
                1,
            );
            sqlx::query(AssertSqlSafe(table)).execute(&mut conn).await.unwrap();
            conn.close().await.unwrap();
            Target { backend, dir, database_url: url.clone(), effects_url: url, schema: Some(schema) }
        }
    }
}

async fn sqlite_pool(url: &str, create: bool) -> SqlitePool {
    let options = SqliteConnectOptions::from_str(url)
        .unwrap()
        .create_if_missing(create)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    SqlitePoolOptions::new().max_connections(1).connect_with(options).await.unwrap()
}

async fn postgres_pool(schema: &str) -> PgPool {
    let options =
        PgConnectOptions::from_str(&anycloud_tests::e2e::postgres_url()).unwrap().options([("search_path", schema)]);
    PgPoolOptions::new().max_connections(1).connect_with(options).await.unwrap()
}

/// How far the runs have got.
struct Progress {
    /// Side effects recorded.
    effects: i64,
    /// Runs not ended yet.
    unfinished: usize,
    /// The first of them, described for a failure message.
    described: Vec<String>,
}

async fn progress(target: &Target) -> Progress {
    let effects_sql = AssertSqlSafe(format!("SELECT COUNT(*) FROM {SIDE_EFFECTS_TABLE}"));
    let runs_sql = "SELECT id, status, current_step, attempt, lease_owner, lease_expires_at, lease_generation \
                    FROM engine_runs WHERE finished_at IS NULL ORDER BY seq";
    type Row = (String, String, Option<String>, i64, Option<String>, Option<i64>, i64);
    let (effects, runs): (i64, Vec<Row>) = match target.backend {
        Backend::Sqlite => {
            let effects_pool = sqlite_pool(&target.effects_url, false).await;
            let engine_pool = sqlite_pool(&target.database_url, false).await;
            let effects = sqlx::query_scalar(effects_sql).fetch_one(&effects_pool).await.unwrap();
            let runs = sqlx::query_as(runs_sql).fetch_all(&engine_pool).await.unwrap();
            effects_pool.close().await;
            engine_pool.close().await;
            (effects, runs)
        }
        Backend::Postgres => {
            let pool = postgres_pool(target.schema.as_deref().unwrap()).await;
            let effects = sqlx::query_scalar(effects_sql).fetch_one(&pool).await.unwrap();
            let runs = sqlx::query_as(runs_sql).fetch_all(&pool).await.unwrap();
            pool.close().await;
            (effects, runs)
        }
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let unfinished = runs.len();
    let mut described: Vec<String> = runs
        .into_iter()
        .take(20)
        .map(|(id, status, step, attempt, owner, expires, generation)| {
            let lease = match (owner, expires) {
                (Some(owner), Some(expires)) => {
                    format!("leased by {owner} (generation {generation}), expiring in {} ms", expires - now)
                }
                _ => format!("not leased (generation {generation})"),
            };
            format!("  {id} {status} at step {step:?} (attempt {attempt}), {lease}")
        })
        .collect();
    if unfinished > described.len() {
        described.push(format!("  ... and {} more", unfinished - described.len()));
    }
    Progress { effects, unfinished, described }
}

/// What a child incarnation is started to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Submit runs until the store holds this many in all (and print `submitted`), then work
    /// until killed.
    Submit(usize),
    /// Work until killed.
    Work,
    /// Work until every run has ended, then exit.
    Finish,
}

fn spawn_child(target: &Target, incarnation: usize, role: Role) -> Child {
    let log = OpenOptions::new().create(true).append(true).open(target.log_path()).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_crash_child"));
    command
        .arg("--database-url")
        .arg(&target.database_url)
        .arg("--effects-url")
        .arg(&target.effects_url)
        .arg("--incarnation")
        .arg(incarnation.to_string())
        .arg("--journal")
        .arg(target.journal_path());
    if let Some(schema) = &target.schema {
        command.arg("--schema").arg(schema);
    }
    match role {
        Role::Submit(runs) => command.arg("--submit").arg(runs.to_string()).stdout(Stdio::piped()),
        Role::Work => command.stdout(Stdio::null()),
        Role::Finish => command.arg("--until-done").stdout(Stdio::null()),
    };
    command.stderr(Stdio::from(log)).stdin(Stdio::null());
    command.spawn().unwrap_or_else(|err| panic!("starting the crash child: {err}"))
}

/// Waits until the child prints `line` on its stdout.
fn wait_for_line(target: &Target, child: &mut Child, line: &'static str) {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for read in BufReader::new(stdout).lines() {
            let Ok(read) = read else { break };
            if read == line {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        fail(target, &format!("the first incarnation never printed `{line}`"));
    }
}

fn assert_killed(target: &Target, incarnation: usize, status: ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    if status.signal() != Some(9) {
        fail(target, &format!("incarnation {incarnation} ended with {status}, not by SIGKILL"));
    }
}

/// Panics with `problem` and the tail of the children's stderr.
fn fail(target: &Target, problem: &str) -> ! {
    let log = std::fs::read_to_string(target.log_path()).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(60).collect::<Vec<_>>().into_iter().rev().collect();
    let schema = target.schema.as_ref().map(|s| format!(" (schema {s} kept)")).unwrap_or_default();
    panic!(
        "crash test on {}{schema} failed: {problem}\nfiles kept in {}\nchildren's stderr (last lines):\n{}",
        target.name(),
        target.dir.display(),
        tail.join("\n")
    );
}

/// Reads the independent record, the runs' status and the engine's checkpoints.
async fn observe(target: &Target) -> Observed {
    let effects_sql = AssertSqlSafe(format!(
        "SELECT seq, run_id, step, step_index, idempotency_key, incarnation FROM {SIDE_EFFECTS_TABLE} ORDER BY seq"
    ));
    let runs_sql = "SELECT id, status FROM engine_runs WHERE kind = $1 ORDER BY seq";
    let checkpoints_sql =
        "SELECT run_id, idx, name, status, output FROM engine_steps WHERE phase = 'forward' ORDER BY run_id, idx";
    type EffectRow = (i64, String, String, i64, String, i64);
    type CheckpointRow = (String, i64, String, String, Option<String>);
    let (effects, runs, checkpoints): (Vec<EffectRow>, Vec<(String, String)>, Vec<CheckpointRow>) = match target.backend
    {
        Backend::Sqlite => {
            let effects_pool = sqlite_pool(&target.effects_url, false).await;
            let engine_pool = sqlite_pool(&target.database_url, false).await;
            let effects = sqlx::query_as(effects_sql).fetch_all(&effects_pool).await.unwrap();
            let runs = sqlx::query_as(runs_sql).bind(WORKFLOW_KIND).fetch_all(&engine_pool).await.unwrap();
            let checkpoints = sqlx::query_as(checkpoints_sql).fetch_all(&engine_pool).await.unwrap();
            (effects, runs, checkpoints)
        }
        Backend::Postgres => {
            let pool = postgres_pool(target.schema.as_deref().unwrap()).await;
            let effects = sqlx::query_as(effects_sql).fetch_all(&pool).await.unwrap();
            let runs = sqlx::query_as(runs_sql).bind(WORKFLOW_KIND).fetch_all(&pool).await.unwrap();
            let checkpoints = sqlx::query_as(checkpoints_sql).fetch_all(&pool).await.unwrap();
            pool.close().await;
            (effects, runs, checkpoints)
        }
    };
    Observed {
        runs,
        effects: effects
            .into_iter()
            .map(|(seq, run_id, step, step_index, key, incarnation)| Effect {
                seq,
                run_id,
                step,
                step_index,
                key,
                incarnation,
            })
            .collect(),
        checkpoints: checkpoints
            .into_iter()
            .map(|(run_id, index, name, status, output)| Checkpoint { run_id, index, name, status, output })
            .collect(),
    }
}

/// The figures printed per store.
#[derive(Debug)]
struct Summary {
    runs: usize,
    effects: usize,
    /// Executions beyond the first, over all steps.
    duplicates: usize,
    /// Killed incarnations that left a step started but without its side effect.
    kills_before_effect: usize,
    /// Killed incarnations that left a side effect without its checkpoint.
    kills_between: usize,
    /// Killed incarnations that interrupted no step (killed while starting up, or idle).
    idle_kills: usize,
    /// Side effects of the final incarnation: work still left after the last kill.
    final_effects: usize,
}

/// Checks what the databases hold after `kills` killed incarnations (numbered from 0) and a
/// final one (numbered `kills`) drove `runs` runs.
fn verify(observed: &Observed, journal: &str, runs: usize, kills: usize) -> Result<Summary, String> {
    let steps = STEP_NAMES.len();
    let final_incarnation = kills as i64;

    // Every run ended, and succeeded.
    if observed.runs.len() != runs {
        return Err(format!("{} runs in the store, {runs} submitted", observed.runs.len()));
    }
    let unfinished: Vec<_> = observed.runs.iter().filter(|(_, status)| status != "succeeded").collect();
    if !unfinished.is_empty() {
        return Err(format!("runs that did not succeed: {unfinished:?}"));
    }
    let run_ids: BTreeSet<&str> = observed.runs.iter().map(|(id, _)| id.as_str()).collect();

    // Each record is well-formed: a known run, the step's name and idempotency key.
    for effect in &observed.effects {
        if !run_ids.contains(effect.run_id.as_str()) {
            return Err(format!("side effect of an unknown run: {effect:?}"));
        }
        let name = STEP_NAMES.get(effect.step_index as usize).copied();
        if name != Some(effect.step.as_str()) {
            return Err(format!("side effect with a wrong step name: {effect:?}"));
        }
        let run: Uuid = effect.run_id.parse().map_err(|err| format!("run id {}: {err}", effect.run_id))?;
        let key = Uuid::new_v5(&run, effect.step.as_bytes()).to_string();
        if effect.key != key {
            return Err(format!("side effect with idempotency key {} instead of {key}: {effect:?}", effect.key));
        }
        if effect.incarnation > final_incarnation {
            return Err(format!("side effect of an incarnation that never ran: {effect:?}"));
        }
    }

    // Each run's records in the order they happened: incarnations never overlap, and within
    // one the `seq` of a run's records grows with time.
    let mut by_run: BTreeMap<&str, Vec<&Effect>> = BTreeMap::new();
    for effect in &observed.effects {
        by_run.entry(effect.run_id.as_str()).or_default().push(effect);
    }
    let mut duplicates = 0;
    let mut extra_by_incarnation: BTreeMap<i64, usize> = BTreeMap::new();
    let mut last_of_step: HashMap<(&str, i64), &Effect> = HashMap::new();
    for run in &run_ids {
        let mut records = by_run.remove(run).unwrap_or_default();
        records.sort_by_key(|effect| (effect.incarnation, effect.seq));

        // Forward one step at a time: a step never runs again once a later step has run, and
        // no step is skipped; every step has at least one side effect.
        let indexes: Vec<i64> = records.iter().map(|effect| effect.step_index).collect();
        let in_order = indexes.first() == Some(&0)
            && indexes.last() == Some(&(steps as i64 - 1))
            && indexes.windows(2).all(|pair| pair[1] == pair[0] || pair[1] == pair[0] + 1);
        if !in_order {
            return Err(format!("run {run}: side effects out of order or missing, by step index: {indexes:?}"));
        }

        // Within one incarnation no step ran twice.
        let mut seen = BTreeSet::new();
        for effect in &records {
            if !seen.insert((effect.incarnation, effect.step_index)) {
                return Err(format!(
                    "run {run}: step `{}` ran twice in incarnation {}",
                    effect.step, effect.incarnation
                ));
            }
        }

        // The last step each incarnation executed for this run.
        let mut last_in_incarnation: BTreeMap<i64, i64> = BTreeMap::new();
        for effect in &records {
            last_in_incarnation.insert(effect.incarnation, effect.step_index);
        }

        // A step ran again only if it was in flight when its incarnation was killed.
        for index in 0..steps as i64 {
            let executions: Vec<&&Effect> = records.iter().filter(|effect| effect.step_index == index).collect();
            let (last, earlier) = executions.split_last().unwrap();
            last_of_step.insert((run, index), last);
            for effect in earlier {
                if effect.incarnation == final_incarnation {
                    return Err(format!("run {run}: the final incarnation ran step {index} before its last run"));
                }
                if last_in_incarnation[&effect.incarnation] != index {
                    return Err(format!(
                        "run {run}: step `{}` ran again although incarnation {} had gone on to step {} \
                         (its checkpoint was lost)",
                        effect.step, effect.incarnation, last_in_incarnation[&effect.incarnation]
                    ));
                }
                duplicates += 1;
                *extra_by_incarnation.entry(effect.incarnation).or_default() += 1;
            }
        }
    }
    for (incarnation, extra) in &extra_by_incarnation {
        if *extra > MAX_CONCURRENCY {
            return Err(format!(
                "incarnation {incarnation} left {extra} steps to run again, more than the {MAX_CONCURRENCY} it \
                 could have had in flight"
            ));
        }
    }
    if duplicates > kills * MAX_CONCURRENCY {
        return Err(format!("{duplicates} extra executions for {kills} kills of {MAX_CONCURRENCY} runs each"));
    }

    // The engine's checkpoint of each step is the output of its last execution.
    if observed.checkpoints.len() != runs * steps {
        return Err(format!("{} forward checkpoints, expected {}", observed.checkpoints.len(), runs * steps));
    }
    for checkpoint in &observed.checkpoints {
        let last = last_of_step
            .get(&(checkpoint.run_id.as_str(), checkpoint.index))
            .ok_or_else(|| format!("a checkpoint without side effects: {checkpoint:?}"))?;
        let output: Option<StepOutput> = checkpoint.output.as_deref().and_then(|text| serde_json::from_str(text).ok());
        let expected = StepOutput { seq: last.seq, incarnation: last.incarnation };
        if checkpoint.status != "succeeded" || checkpoint.name != last.step || output != Some(expected) {
            return Err(format!("checkpoint {checkpoint:?} does not match the last execution {last:?}"));
        }
    }

    // What each kill interrupted, from the journal of step starts.
    let mut started: BTreeSet<(i64, &str, &str)> = BTreeSet::new();
    // Only whole lines: a kill may cut the last line of an incarnation short.
    for line in journal.split_inclusive('\n').filter_map(|line| line.strip_suffix('\n')) {
        if let ["start", incarnation, run, step] = line.split(' ').collect::<Vec<_>>().as_slice() {
            let incarnation = incarnation.parse().map_err(|err| format!("journal line `{line}`: {err}"))?;
            started.insert((incarnation, run, step));
        }
    }
    let effected: BTreeSet<(i64, &str, &str)> = observed
        .effects
        .iter()
        .map(|effect| (effect.incarnation, effect.run_id.as_str(), effect.step.as_str()))
        .collect();
    if let Some(missing) = effected.difference(&started).next() {
        return Err(format!("a side effect without a journalled start: {missing:?}"));
    }
    let mut before_effect: BTreeSet<i64> = BTreeSet::new();
    for &(incarnation, run, step) in started.difference(&effected) {
        if incarnation == final_incarnation {
            return Err(format!("the final incarnation started step `{step}` of run {run} without its side effect"));
        }
        before_effect.insert(incarnation);
    }
    let interrupted: BTreeSet<i64> = before_effect.iter().chain(extra_by_incarnation.keys()).copied().collect();
    Ok(Summary {
        runs: observed.runs.len(),
        effects: observed.effects.len(),
        duplicates,
        kills_before_effect: before_effect.len(),
        kills_between: extra_by_incarnation.len(),
        idle_kills: kills - interrupted.len(),
        final_effects: observed.effects.iter().filter(|effect| effect.incarnation == final_incarnation).count(),
    })
}

/// The checker itself: a history that keeps the rules passes, and each kind of violation of
/// exactly-once is caught, so that a passing crash test means something.
#[test]
fn verify_catches_violations() {
    // Two runs, two killed incarnations (0 and 1), the final one is 2.
    let a = "6f1c0f5e-1111-4a4a-8a8a-000000000001";
    let b = "6f1c0f5e-2222-4a4a-8a8a-000000000002";
    let mut effects = Vec::new();
    let mut journal = String::new();
    let mut add = |run: &str, index: usize, incarnation: i64, effect: bool| {
        let step = STEP_NAMES[index];
        journal.push_str(&format!("start {incarnation} {run} {step}\n"));
        if effect {
            let key = Uuid::new_v5(&run.parse().unwrap(), step.as_bytes()).to_string();
            let seq = effects.len() as i64 + 1;
            effects.push(Effect {
                seq,
                run_id: run.into(),
                step: step.into(),
                step_index: index as i64,
                key,
                incarnation,
            });
        }
    };
    // Run a: incarnation 0 is killed after the side effect of step 1, before its checkpoint;
    // incarnation 1 runs step 1 again and step 2, and is killed inside step 3 before its side
    // effect; the final incarnation finishes.
    add(a, 0, 0, true);
    add(a, 1, 0, true);
    add(a, 1, 1, true);
    add(a, 2, 1, true);
    add(a, 3, 1, false);
    for index in 3..STEP_NAMES.len() {
        add(a, index, 2, true);
    }
    // Run b runs whole in the final incarnation.
    for index in 0..STEP_NAMES.len() {
        add(b, index, 2, true);
    }
    let checkpoints_of = |effects: &[Effect]| {
        let mut last: BTreeMap<(String, i64), &Effect> = BTreeMap::new();
        for effect in effects {
            last.insert((effect.run_id.clone(), effect.step_index), effect);
        }
        last.into_iter()
            .map(|((run_id, index), effect)| Checkpoint {
                run_id,
                index,
                name: effect.step.clone(),
                status: "succeeded".into(),
                output: Some(
                    serde_json::to_string(&StepOutput { seq: effect.seq, incarnation: effect.incarnation }).unwrap(),
                ),
            })
            .collect::<Vec<_>>()
    };
    let good = Observed {
        runs: vec![(a.into(), "succeeded".into()), (b.into(), "succeeded".into())],
        checkpoints: checkpoints_of(&effects),
        effects,
    };
    let summary = verify(&good, &journal, 2, 2).unwrap();
    assert_eq!(
        (summary.duplicates, summary.kills_before_effect, summary.kills_between, summary.idle_kills),
        (1, 1, 1, 0)
    );

    let rejects = |observed: &Observed, journal: &str, what: &str| {
        let problem = verify(observed, journal, 2, 2).expect_err(what);
        println!("{what}: {problem}");
    };
    let with = |change: &dyn Fn(&mut Observed)| {
        let mut observed =
            Observed { runs: good.runs.clone(), effects: good.effects.clone(), checkpoints: good.checkpoints.clone() };
        change(&mut observed);
        observed
    };
    let replay = |observed: &mut Observed, run: &str, index: usize, incarnation: i64| {
        let mut effect =
            observed.effects.iter().find(|e| e.run_id == run && e.step_index == index as i64).unwrap().clone();
        effect.incarnation = incarnation;
        effect.seq = 1000;
        observed.effects.push(effect);
    };

    // A step runs again after a later step of its run completed: a lost checkpoint.
    rejects(&with(&|o| replay(o, a, 0, 1)), &format!("{journal}start 1 {a} reserve\n"), "a lost checkpoint");
    // A step runs twice in one incarnation.
    rejects(&with(&|o| replay(o, b, 5, 2)), &journal, "a step run twice in one incarnation");
    // A run that did not succeed.
    rejects(&with(&|o| o.runs[1].1 = "failed".into()), &journal, "a failed run");
    // A step without a side effect.
    rejects(&with(&|o| o.effects.retain(|e| !(e.run_id == b && e.step_index == 3))), &journal, "a missing side effect");
    // A side effect with another step's idempotency key.
    rejects(&with(&|o| o.effects[0].key = Uuid::nil().to_string()), &journal, "a wrong idempotency key");
    // The checkpoint kept is not the output of the step's last execution.
    rejects(
        &with(&|o| {
            let first = o.effects.iter().find(|e| e.run_id == a && e.step_index == 1).unwrap().seq;
            let checkpoint = o.checkpoints.iter_mut().find(|c| c.run_id == a && c.index == 1).unwrap();
            checkpoint.output = Some(serde_json::to_string(&StepOutput { seq: first, incarnation: 0 }).unwrap());
        }),
        &journal,
        "a checkpoint of an earlier execution",
    );
    // A side effect the journal never saw start.
    rejects(&good, "", "an unjournalled side effect");
}
