//! One replica of the replica tests (`tests/replicas.rs`): an engine under its own owner name on
//! a PostgreSQL schema that other replicas (other processes) share, running a four-step workflow
//! whose every execution of a step is recorded in a table of its own.
//!
//! ```text
//! replica_child --database-url URL --schema NAME --owner NAME
//!               [--lease-ms N] [--step-ms N] [--max-concurrency N]
//! ```
//!
//! It prints `started` once its engine runs. Commands come on stdin, one a line: `submit N`
//! submits N runs in one transaction, unleased, so that every replica's claim loop competes for
//! them, and prints `submitted`. At the end of stdin it stops (so that a test that panics leaves
//! no replica behind); the tests end it with SIGKILL, or freeze it with SIGSTOP.
//!
//! Each step inserts its execution row (run, step, owner), sleeps `--step-ms` (the window in
//! which a test kills or freezes the replica inside the step), marks the row finished, and
//! returns the owner's name, which the engine checkpoints.

use std::io::BufRead;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anycloud_engine::{
    Engine, EngineConfig, Registry, RetryPolicy, Step, StepCtx, StepError, StepKey, Steps, Store, Workflow,
};
use anycloud_tests::replicas::{EXECUTIONS_TABLE, STARTED, STEP_NAMES, SUBMITTED, WORKFLOW_KIND};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tracing_subscriber::EnvFilter;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    database_url: String,
    schema: String,
    owner: String,
    lease: Duration,
    step: Duration,
    max_concurrency: usize,
}

impl Args {
    fn parse() -> Result<Self, String> {
        let (mut database_url, mut schema, mut owner) = (None, None, None);
        let (mut lease_ms, mut step_ms, mut max_concurrency) = (3000u64, 100u64, 4usize);
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--database-url" => database_url = Some(value()?),
                "--schema" => schema = Some(value()?),
                "--owner" => owner = Some(value()?),
                "--lease-ms" => lease_ms = value()?.parse().map_err(|err| format!("--lease-ms: {err}"))?,
                "--step-ms" => step_ms = value()?.parse().map_err(|err| format!("--step-ms: {err}"))?,
                "--max-concurrency" => {
                    max_concurrency = value()?.parse().map_err(|err| format!("--max-concurrency: {err}"))?
                }
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        Ok(Self {
            database_url: database_url.ok_or("--database-url is required")?,
            schema: schema.ok_or("--schema is required")?,
            owner: owner.ok_or("--owner is required")?,
            lease: Duration::from_millis(lease_ms),
            step: Duration::from_millis(step_ms),
            max_concurrency,
        })
    }
}

/// The workflow: four steps, each recording its execution.
struct RecordedSteps {
    executions: PgPool,
    owner: String,
    step: Duration,
}

impl Workflow for RecordedSteps {
    const KIND: &'static str = WORKFLOW_KIND;
    const VERSION: u32 = 1;
    type Input = u32;
    type Output = Vec<String>;

    fn steps() -> Steps<Self> {
        let policy = RetryPolicy::fixed(Duration::from_millis(50), 100);
        STEP_NAMES.iter().fold(Steps::new(), |steps, &name| {
            steps.then(Step::action(StepKey::new(name), execute).retry(policy.clone()))
        })
    }

    fn output(ctx: &StepCtx<Self>) -> Result<Vec<String>, StepError> {
        STEP_NAMES.iter().map(|&name| ctx.output(StepKey::<String>::new(name))).collect()
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or_default()
}

async fn execute(ctx: StepCtx<RecordedSteps>) -> Result<String, StepError> {
    let workflow = ctx.workflow();
    let insert = sqlx::AssertSqlSafe(format!(
        "INSERT INTO {EXECUTIONS_TABLE} (run_id, step, owner, started_at) VALUES ($1, $2, $3, $4) RETURNING id"
    ));
    let id: i64 = sqlx::query_scalar(insert)
        .bind(ctx.run_id().to_string())
        .bind(ctx.step_name())
        .bind(&workflow.owner)
        .bind(now_ms())
        .fetch_one(&workflow.executions)
        .await
        .map_err(|err| StepError::retryable(err).context("recording the step's start"))?;
    tokio::time::sleep(workflow.step).await;
    let finish = sqlx::AssertSqlSafe(format!("UPDATE {EXECUTIONS_TABLE} SET finished_at = $2 WHERE id = $1"));
    sqlx::query(finish)
        .bind(id)
        .bind(now_ms())
        .execute(&workflow.executions)
        .await
        .map_err(|err| StepError::retryable(err).context("recording the step's end"))?;
    Ok(workflow.owner.clone())
}

async fn run(args: Args) -> Result<(), BoxError> {
    let options = PgConnectOptions::from_str(&args.database_url)?.options([("search_path", args.schema.as_str())]);
    let store = Store::open_postgres(options.clone(), 8).await?;
    let executions = PgPoolOptions::new().max_connections(args.max_concurrency as u32).connect_with(options).await?;
    let workflow = Arc::new(RecordedSteps { executions, owner: args.owner.clone(), step: args.step });
    let config = EngineConfig {
        max_concurrency: args.max_concurrency,
        lease_ttl: args.lease,
        poll_interval: Duration::from_millis(100),
        ..EngineConfig::named(&args.owner)
    };
    let engine = Engine::start(store.clone(), Registry::new().with(workflow), config).await?;
    println!("{STARTED}");

    let (lines, mut commands) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = commands.recv().await {
        let Some(count) = line.strip_prefix("submit ") else {
            return Err(format!("unknown command `{line}`").into());
        };
        let count: u32 = count.trim().parse()?;
        let mut tx = store.begin_write().await?;
        for number in 0..count {
            engine.submit_in::<RecordedSteps>(&mut tx, &number, None).await?;
        }
        tx.commit().await?;
        engine.wake_up();
        println!("{SUBMITTED}");
    }
    engine.shutdown(Duration::from_secs(5)).await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let args = match Args::parse() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("replica_child: {err}");
            return ExitCode::from(2);
        }
    };
    let owner = args.owner.clone();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("replica_child {owner}: {err}");
            ExitCode::FAILURE
        }
    }
}
