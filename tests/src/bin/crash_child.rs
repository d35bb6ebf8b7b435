//! The child process of the crash test (`tests/crash.rs`): an engine over a real database that
//! runs a six-step workflow whose every step writes a side effect to an independent table.
//!
//! The test kills it with SIGKILL at random moments and starts it again; it never shuts down
//! on its own unless asked to with `--until-done`.
//!
//! ```text
//! crash_child --database-url URL --effects-url URL [--schema NAME] --incarnation N
//!             [--journal FILE] [--submit K] [--until-done]
//! ```
//!
//! * `--database-url`: the engine's store (`sqlite://PATH` or `postgres://...`).
//! * `--effects-url`: where the `side_effects` table lives (a separate pool; for PostgreSQL it
//!   may be the same database).
//! * `--schema`: for PostgreSQL, the schema both pools use (`search_path`).
//! * `--journal`: a file to which each step appends `start <incarnation> <run> <step>` before
//!   it does anything, so the test can tell a kill inside a step from an idle one.
//! * `--submit K`: submit runs until the store holds K in all, then print `submitted`.
//! * `--until-done`: exit 0 once every run has ended (3 if one is parked).
//!
//! Each step: appends its start to the journal, sleeps 0–5 ms, inserts its side effect
//! (run, step, idempotency key, incarnation) and commits it, sleeps 0–15 ms (the window in
//! which a kill leaves an effect without its checkpoint), then returns the row's `seq`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anycloud_engine::{
    Engine, EngineConfig, Registry, RetryPolicy, RunFilter, RunStatus, Step, StepCtx, StepError, StepKey, Steps, Store,
    Workflow,
};
use anycloud_tests::crash::{MAX_CONCURRENCY, OWNER, SIDE_EFFECTS_TABLE, STEP_NAMES, StepOutput, WORKFLOW_KIND};
use rand::Rng;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use tracing_subscriber::EnvFilter;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The command line.
struct Args {
    database_url: String,
    effects_url: String,
    schema: Option<String>,
    incarnation: i64,
    journal: Option<PathBuf>,
    submit: Option<u32>,
    until_done: bool,
}

impl Args {
    fn parse() -> Result<Self, String> {
        let mut database_url = None;
        let mut effects_url = None;
        let mut schema = None;
        let mut incarnation = None;
        let mut journal = None;
        let mut submit = None;
        let mut until_done = false;
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--database-url" => database_url = Some(value()?),
                "--effects-url" => effects_url = Some(value()?),
                "--schema" => schema = Some(value()?),
                "--incarnation" => {
                    incarnation = Some(value()?.parse().map_err(|err| format!("--incarnation: {err}"))?);
                }
                "--journal" => journal = Some(PathBuf::from(value()?)),
                "--submit" => submit = Some(value()?.parse().map_err(|err| format!("--submit: {err}"))?),
                "--until-done" => until_done = true,
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        let database_url = database_url.ok_or("--database-url is required")?;
        Ok(Self {
            effects_url: effects_url.unwrap_or_else(|| database_url.clone()),
            database_url,
            schema,
            incarnation: incarnation.ok_or("--incarnation is required")?,
            journal,
            submit,
            until_done,
        })
    }
}

/// The pool the side effects are written through: never the engine's.
enum Effects {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Effects {
    async fn open(url: &str, schema: Option<&str>) -> Result<Self, BoxError> {
        if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(30));
            let pool = SqlitePoolOptions::new().max_connections(MAX_CONCURRENCY as u32).connect_with(options).await?;
            Ok(Self::Sqlite(pool))
        } else {
            let pool = PgPoolOptions::new()
                .max_connections(MAX_CONCURRENCY as u32)
                .connect_with(pg_options(url, schema)?)
                .await?;
            Ok(Self::Postgres(pool))
        }
    }

    /// Inserts one side effect in its own (autocommitted) transaction; returns its `seq`.
    async fn record(
        &self,
        run_id: &str,
        step: &str,
        step_index: i64,
        key: &str,
        incarnation: i64,
    ) -> Result<i64, sqlx::Error> {
        let sql = sqlx::AssertSqlSafe(format!(
            "INSERT INTO {SIDE_EFFECTS_TABLE} (run_id, step, step_index, idempotency_key, incarnation) \
             VALUES ($1, $2, $3, $4, $5) RETURNING seq"
        ));
        match self {
            Self::Sqlite(pool) => {
                sqlx::query_scalar(sql)
                    .bind(run_id)
                    .bind(step)
                    .bind(step_index)
                    .bind(key)
                    .bind(incarnation)
                    .fetch_one(pool)
                    .await
            }
            Self::Postgres(pool) => {
                sqlx::query_scalar(sql)
                    .bind(run_id)
                    .bind(step)
                    .bind(step_index)
                    .bind(key)
                    .bind(incarnation)
                    .fetch_one(pool)
                    .await
            }
        }
    }
}

fn pg_options(url: &str, schema: Option<&str>) -> Result<PgConnectOptions, BoxError> {
    let options = PgConnectOptions::from_str(url)?;
    Ok(match schema {
        Some(schema) => options.options([("search_path", schema)]),
        None => options,
    })
}

/// Six steps, each writing one side effect.
struct CrashSteps {
    effects: Effects,
    incarnation: i64,
    journal: Option<Mutex<File>>,
}

impl CrashSteps {
    /// Appends one line to the journal with a single `write` call, so that it reaches the
    /// kernel (and survives a SIGKILL) before the step goes on.
    fn note(&self, line: &str) -> Result<(), StepError> {
        let Some(journal) = &self.journal else { return Ok(()) };
        let mut file = journal.lock().map_err(|_| StepError::terminal_msg("the journal lock is poisoned"))?;
        file.write_all(line.as_bytes()).map_err(|err| StepError::retryable(err).context("writing the journal"))
    }
}

impl Workflow for CrashSteps {
    const KIND: &'static str = WORKFLOW_KIND;
    const VERSION: u32 = 1;
    type Input = u32;
    type Output = Vec<StepOutput>;

    fn steps() -> Steps<Self> {
        // Kills may interrupt one step many times in a row: the retry budget must not be what
        // ends a run in this test.
        let policy = RetryPolicy::fixed(Duration::from_millis(10), 10_000);
        STEP_NAMES.iter().enumerate().fold(Steps::new(), |steps, (index, &name)| {
            steps.then(
                Step::action(StepKey::new(name), move |ctx: StepCtx<Self>| step(ctx, index)).retry(policy.clone()),
            )
        })
    }

    fn output(ctx: &StepCtx<Self>) -> Result<Vec<StepOutput>, StepError> {
        STEP_NAMES.iter().map(|&name| ctx.output(StepKey::<StepOutput>::new(name))).collect()
    }
}

async fn step(ctx: StepCtx<CrashSteps>, index: usize) -> Result<StepOutput, StepError> {
    let workflow = ctx.workflow();
    let run_id = ctx.run_id().to_string();
    let name = ctx.step_name();
    workflow.note(&format!("start {} {run_id} {name}\n", workflow.incarnation))?;
    let before = rand::rng().random_range(0..=5);
    tokio::time::sleep(Duration::from_millis(before)).await;
    let seq = workflow
        .effects
        .record(&run_id, name, index as i64, &ctx.idempotency_key().to_string(), workflow.incarnation)
        .await
        .map_err(|err| StepError::retryable(err).context("recording the side effect"))?;
    // The side effect is committed; a kill from here on leaves it without its checkpoint.
    let after = rand::rng().random_range(0..=15);
    tokio::time::sleep(Duration::from_millis(after)).await;
    Ok(StepOutput { seq, incarnation: workflow.incarnation })
}

async fn open_store(args: &Args) -> Result<Store, BoxError> {
    if args.database_url.starts_with("sqlite:") {
        Ok(Store::connect(&args.database_url).await?)
    } else {
        Ok(Store::open_postgres(pg_options(&args.database_url, args.schema.as_deref())?, 16).await?)
    }
}

/// Every run of the workflow, newest first.
async fn all_runs(store: &Store) -> Result<Vec<anycloud_engine::RunRecord>, BoxError> {
    let filter = RunFilter { kind: Some(WORKFLOW_KIND.into()), limit: Some(100_000), ..RunFilter::default() };
    Ok(store.list_runs(&filter).await?)
}

async fn run(args: Args) -> Result<ExitCode, BoxError> {
    let store = open_store(&args).await?;
    let effects = Effects::open(&args.effects_url, args.schema.as_deref()).await?;
    let journal = match &args.journal {
        Some(path) => Some(Mutex::new(OpenOptions::new().create(true).append(true).open(path)?)),
        None => None,
    };
    let workflow = Arc::new(CrashSteps { effects, incarnation: args.incarnation, journal });
    let config = EngineConfig {
        owner: OWNER.into(),
        max_concurrency: MAX_CONCURRENCY,
        poll_interval: Duration::from_millis(20),
        lease_ttl: Duration::from_secs(5),
        ..EngineConfig::named(OWNER)
    };
    let engine = Engine::start(store.clone(), Registry::new().with(workflow), config).await?;
    println!("started {}", args.incarnation);

    if let Some(count) = args.submit {
        // Only the runs missing from the count are submitted, so that starting this again
        // cannot double them.
        let existing = all_runs(&store).await?.len() as u32;
        for number in existing..count {
            engine.submit::<CrashSteps>(&number, None).await?;
        }
        println!("submitted");
    }

    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !args.until_done {
            continue;
        }
        let runs = all_runs(&store).await?;
        if let Some(parked) = runs.iter().find(|run| run.status == RunStatus::NeedsAttention) {
            eprintln!("crash_child: run {} is parked: {:?}", parked.id, parked.status_reason);
            engine.shutdown(Duration::from_secs(5)).await;
            return Ok(ExitCode::from(3));
        }
        if !runs.is_empty() && runs.iter().all(|run| run.status.is_final()) {
            engine.shutdown(Duration::from_secs(5)).await;
            println!("done");
            return Ok(ExitCode::SUCCESS);
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let args = match Args::parse() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("crash_child: {err}");
            return ExitCode::from(2);
        }
    };
    let incarnation = args.incarnation;
    match run(args).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("crash_child (incarnation {incarnation}): {err}");
            ExitCode::FAILURE
        }
    }
}
