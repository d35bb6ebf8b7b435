//! Replicas on one PostgreSQL, run with `cargo bench -p anycloud-engine --bench replicas`.
//!
//! For 1, 2 and 3 replica processes (this binary, with `--replica`), each an `Engine` with the
//! defaults under its own owner name on one fresh PostgreSQL schema, it prints the durable
//! steps/s of workflows of 10 no-op steps, beside the bare commit rate of that PostgreSQL, and the
//! ratio of the two. The offered load is the same at every level: `--clients` client tasks in
//! all (16 by default), split evenly over the replicas; each loops submit and wait on its own
//! replica, as clients of API replicas behind a load balancer would.
//!
//! Each level alternates rounds, as the engine benchmark does (`engine.rs`): bare commits for a
//! window (C = `--clients` tasks, each `BEGIN`, one single-row insert, `COMMIT`, through one pool
//! of 16 connections as `Store::connect` opens), then the replicas for a window (the parent
//! hands each replica the window's start and end as wall-clock times; a replica counts the
//! workflows that end inside it). The ratio is that of the totals.
//!
//! Options, after `--`: `--seconds N` measured per figure (default 10), `--rounds N` that split
//! them (default 10), `--clients N` (default 16), `--replicas 1,2,3` (the levels), `--quick` (1 s
//! in one round). PostgreSQL is `ANYCLOUD_TEST_DATABASE_URL`, or
//! `postgres://postgres@127.0.0.1:5432/test`; the schema is dropped at the end. Without `--bench`
//! in its arguments (as `cargo test --all-targets` runs it) the binary only says how to run it.

use std::error::Error;
use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anycloud_engine::{Engine, EngineConfig, Registry, RunStatus, Step, StepCtx, StepError, Steps, Store, Workflow};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

#[path = "support/machine.rs"]
mod machine;
use machine::{Cpu, load_average, machine, now_ms};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Steps of the workflow.
const STEPS: usize = 10;
/// Connections of each replica's store and of the bare commits' pool (as `Store::connect`).
const POOL: u32 = 16;
/// What a bare commit inserts.
const PAYLOAD: &str = "x";

/// Ten steps that do nothing: what is measured is the engine and its commits.
struct Noop;

async fn nothing(_: StepCtx<Noop>) -> Result<(), StepError> {
    Ok(())
}

impl Workflow for Noop {
    const KIND: &'static str = "bench.noop";
    const VERSION: u32 = 1;
    type Input = u64;
    type Output = u64;

    fn steps() -> Steps<Self> {
        const NAMES: [&str; STEPS] = ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"];
        NAMES.into_iter().fold(Steps::new(), |steps, name| steps.then(Step::action(name, nothing)))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<u64, StepError> {
        Ok(*ctx.input())
    }
}

struct Options {
    seconds: f64,
    rounds: usize,
    clients: usize,
    levels: Vec<usize>,
    /// Set in a replica: its number, its schema and its clients.
    replica: Option<(usize, String, usize)>,
}

impl Options {
    fn parse(args: &[String]) -> Res<Self> {
        let (mut seconds, mut rounds, mut quick, mut clients) = (None, None, false, 16);
        let (mut levels, mut index, mut schema) = (vec![1, 2, 3], None, None);
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().cloned().ok_or_else(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--bench" => {}
                "--quick" => quick = true,
                "--seconds" => seconds = Some(value("--seconds")?.parse::<f64>()?),
                "--rounds" => rounds = Some(value("--rounds")?.parse::<usize>()?.max(1)),
                "--clients" => clients = value("--clients")?.parse::<usize>()?.max(1),
                "--replicas" => {
                    levels = value("--replicas")?.split(',').map(|n| n.trim().parse()).collect::<Result<_, _>>()?
                }
                "--replica" => index = Some(value("--replica")?.parse::<usize>()?),
                "--schema" => schema = Some(value("--schema")?),
                other if other.starts_with("--") => return Err(format!("unknown option `{other}`").into()),
                _ => {} // a name filter cargo passes on: there is one benchmark
            }
        }
        let replica = match (index, schema) {
            (Some(index), Some(schema)) => Some((index, schema, clients)),
            (None, None) => None,
            _ => return Err("--replica and --schema go together".into()),
        };
        Ok(Self {
            seconds: seconds.unwrap_or(if quick { 1.0 } else { 10.0 }),
            rounds: rounds.unwrap_or(if quick { 1 } else { 10 }),
            clients,
            levels,
            replica,
        })
    }

    fn window(&self) -> Duration {
        Duration::from_secs_f64(self.seconds / self.rounds as f64)
    }

    fn warmup(&self) -> Duration {
        Duration::from_secs_f64((self.seconds / self.rounds as f64 / 5.0).min(1.0))
    }
}

fn schema_options(schema: &str) -> Res<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(&anycloud_engine::testing::postgres_url())?.options([("search_path", schema)]))
}

/// Latencies (µs) of the workflows that ended inside one window.
fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1e3
}

// ---------------------------------------------------------------------------------------------
// A replica

/// Starts an engine on the schema and answers the parent's rounds: `round START END` (wall-clock
/// milliseconds) runs the clients until END and prints `done N LAT...` (the workflows that ended
/// inside [START, END) and their latencies in µs). Stops at the end of stdin.
async fn replica(index: usize, schema: &str, clients: usize) -> Res<()> {
    let store = Store::open_postgres(schema_options(schema)?, POOL).await?;
    let config = EngineConfig::named(format!("bench-replica-{index}"));
    let engine = Arc::new(Engine::start(store, Registry::new().with(Arc::new(Noop)), config).await?);
    println!("ready");
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
        let window: Vec<i64> = line
            .strip_prefix("round ")
            .ok_or("expected `round START END`")?
            .split(' ')
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        let [start, end] = window[..] else { return Err("expected `round START END`".into()) };
        let mut tasks = Vec::with_capacity(clients);
        for client in 0..clients {
            let engine = engine.clone();
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut n = client as u64 * 1_000_000_000;
                while now_ms() < end {
                    let began = Instant::now();
                    let id = engine.submit::<Noop>(&n, None).await?;
                    let run = engine.wait(id, Duration::from_secs(120)).await?;
                    if run.status != RunStatus::Succeeded {
                        return Err::<_, Box<dyn Error + Send + Sync>>(
                            format!("run {id} ended {}: {:?}", run.status, run.error).into(),
                        );
                    }
                    let ended = now_ms();
                    if ended >= start && ended < end {
                        latencies.push(began.elapsed().as_micros() as u64);
                    }
                    n += 1;
                }
                Ok(latencies)
            }));
        }
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await??);
        }
        let listed: Vec<String> = latencies.iter().map(u64::to_string).collect();
        println!("done {} {}", latencies.len(), listed.join(" "));
    }
    if let Ok(engine) = Arc::try_unwrap(engine) {
        engine.shutdown(Duration::from_secs(5)).await;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The parent

/// A replica process and its pipes.
struct Replica {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Replica {
    fn spawn(index: usize, schema: &str, clients: usize) -> Res<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--bench", "--replica", &index.to_string(), "--schema", schema, "--clients", &clients.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut replica = Self { child, stdin, lines };
        replica.expect("ready")?;
        Ok(replica)
    }

    fn next_line(&mut self) -> Res<String> {
        Ok(self.lines.next().ok_or("a replica ended early (its stderr is above)")??)
    }

    fn expect(&mut self, word: &str) -> Res<String> {
        let line = self.next_line()?;
        match line.strip_prefix(word) {
            Some(rest) => Ok(rest.trim().to_owned()),
            None => Err(format!("a replica said `{line}`, expected `{word} ...`").into()),
        }
    }

    fn stop(mut self) -> Res<()> {
        drop(self.stdin.take());
        let status = self.child.wait()?;
        if !status.success() {
            return Err(format!("a replica ended with {status}").into());
        }
        Ok(())
    }
}

/// What one level measured over its rounds.
struct Level {
    replicas: usize,
    bare_commits: usize,
    bare_seconds: f64,
    latencies: Vec<u64>,
    engine_seconds: f64,
    per_replica: Vec<usize>,
    round_ratios: Vec<f64>,
    busy_bare: f64,
    busy_engine: f64,
}

impl Level {
    fn bare_per_sec(&self) -> f64 {
        self.bare_commits as f64 / self.bare_seconds
    }

    fn steps_per_sec(&self) -> f64 {
        (self.latencies.len() * STEPS) as f64 / self.engine_seconds
    }
}

/// Bare commits on `clients` tasks through `pool` during one window after a warm-up: how many
/// ended inside the window, and how busy the machine was.
async fn bare_window(pool: &sqlx::PgPool, clients: usize, options: &Options) -> Res<(usize, f64)> {
    let start = Instant::now() + options.warmup();
    let end = start + options.window();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut count = 0;
            while Instant::now() < end {
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO bench_commits (payload) VALUES ($1)").bind(PAYLOAD).execute(&mut *tx).await?;
                tx.commit().await?;
                let ended = Instant::now();
                count += usize::from(ended >= start && ended < end);
            }
            Ok::<_, sqlx::Error>(count)
        }));
    }
    tokio::time::sleep_until(start.into()).await;
    let first = Cpu::now();
    tokio::time::sleep_until(end.into()).await;
    let busy = first.machine_busy(Cpu::now());
    let mut count = 0;
    for task in tasks {
        count += task.await??;
    }
    Ok((count, busy))
}

/// One level: `n` replicas, the clients split over them, alternating rounds.
async fn level(n: usize, schema: &str, pool: &sqlx::PgPool, options: &Options) -> Res<Level> {
    let mut replicas = (0..n)
        .map(|index| Replica::spawn(index, schema, options.clients / n + usize::from(index < options.clients % n)))
        .collect::<Res<Vec<_>>>()?;
    let mut level = Level {
        replicas: n,
        bare_commits: 0,
        bare_seconds: 0.0,
        latencies: Vec::new(),
        engine_seconds: 0.0,
        per_replica: vec![0; n],
        round_ratios: Vec::new(),
        busy_bare: 0.0,
        busy_engine: 0.0,
    };
    let window = options.window();
    for _ in 0..options.rounds {
        let (commits, busy) = bare_window(pool, options.clients, options).await?;
        level.bare_commits += commits;
        level.bare_seconds += window.as_secs_f64();
        level.busy_bare += busy / options.rounds as f64;

        let start = now_ms() + options.warmup().as_millis() as i64;
        let end = start + window.as_millis() as i64;
        for replica in &mut replicas {
            writeln!(replica.stdin.as_mut().ok_or("no stdin")?, "round {start} {end}")?;
        }
        tokio::time::sleep(Duration::from_millis((start - now_ms()).max(0) as u64)).await;
        let first = Cpu::now();
        tokio::time::sleep(Duration::from_millis((end - now_ms()).max(0) as u64)).await;
        level.busy_engine += first.machine_busy(Cpu::now()) / options.rounds as f64;
        let mut workflows = 0;
        for (index, replica) in replicas.iter_mut().enumerate() {
            let answer = tokio::task::block_in_place(|| replica.expect("done"))?;
            let mut numbers = answer.split(' ').filter(|s| !s.is_empty()).map(str::parse::<u64>);
            let count = numbers.next().ok_or("an empty `done`")?? as usize;
            let latencies = numbers.collect::<Result<Vec<_>, _>>()?;
            if latencies.len() != count {
                return Err(
                    format!("a replica counted {count} workflows but sent {} latencies", latencies.len()).into()
                );
            }
            level.per_replica[index] += count;
            workflows += count;
            level.latencies.extend(latencies);
        }
        level.engine_seconds += window.as_secs_f64();
        let round_steps = (workflows * STEPS) as f64 / window.as_secs_f64();
        level.round_ratios.push(round_steps / (commits as f64 / window.as_secs_f64()));
    }
    for replica in replicas {
        replica.stop()?;
    }
    level.latencies.sort_unstable();
    Ok(level)
}

async fn parent(options: &Options) -> Res<()> {
    let url = anycloud_engine::testing::postgres_url();
    let schema = format!("bench_replicas_{}", now_ms());
    let mut conn = sqlx::PgConnection::connect(&url).await?;
    sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await?;
    // Migrated here, once, before the replicas open it.
    let store = Store::open_postgres(schema_options(&schema)?, 1).await?;
    store.close().await;
    let pool = PgPoolOptions::new().max_connections(POOL).connect_with(schema_options(&schema)?).await?;
    sqlx::query("CREATE TABLE bench_commits (id BIGSERIAL PRIMARY KEY, payload TEXT)").execute(&pool).await?;
    println!("replicas benchmark: {}; load average {}", machine(), load_average());
    println!(
        "{} client tasks in all, split over the replicas; {} rounds of {:?} per figure, each after {:?} of warm-up",
        options.clients,
        options.rounds,
        options.window(),
        options.warmup()
    );
    let mut levels = Vec::new();
    let result = async {
        for &n in &options.levels {
            let measured = level(n, &schema, &pool, options).await?;
            println!(
                "{} replica(s): {:.0} bare commits/s, {:.0} durable steps/s, ratio {:.3}",
                n,
                measured.bare_per_sec(),
                measured.steps_per_sec(),
                measured.steps_per_sec() / measured.bare_per_sec()
            );
            levels.push(measured);
        }
        Ok::<_, Box<dyn Error + Send + Sync>>(())
    }
    .await;
    pool.close().await;
    sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut conn).await?;
    result?;

    println!();
    println!(
        "| replicas | clients | bare commits/s | workflows/s | durable steps/s | p50 workflow latency | p99 workflow \
         latency | steps/s ÷ bare commits/s | steps/s ÷ 1 replica's | workflows per replica | round by round | \
         machine CPU busy, bare / engine |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let single = levels.iter().find(|level| level.replicas == 1).map(Level::steps_per_sec);
    for level in &levels {
        let rounds: Vec<String> = level.round_ratios.iter().map(|r| format!("{r:.2}")).collect();
        let shares: Vec<String> = level.per_replica.iter().map(usize::to_string).collect();
        println!(
            "| {} | {} | {:.0} | {:.1} | {:.0} | {:.2} ms | {:.2} ms | {:.3} | {} | {} | {} | {:.2} / {:.2} of {} cores |",
            level.replicas,
            options.clients,
            level.bare_per_sec(),
            level.latencies.len() as f64 / level.engine_seconds,
            level.steps_per_sec(),
            percentile(&level.latencies, 0.5),
            percentile(&level.latencies, 0.99),
            level.steps_per_sec() / level.bare_per_sec(),
            single.map_or("-".to_owned(), |one| format!("{:.2}", level.steps_per_sec() / one)),
            shares.join(" "),
            rounds.join(" "),
            level.busy_bare,
            level.busy_engine,
            machine::cores(),
        );
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|arg| arg == "--bench") {
        println!("replicas benchmark: run it with `cargo bench -p anycloud-engine --bench replicas`");
        return;
    }
    let result = Options::parse(&args).and_then(|options| {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        match &options.replica {
            Some((index, schema, clients)) => {
                let _ = tracing_subscriber::fmt()
                    .with_env_filter(
                        tracing_subscriber::EnvFilter::try_from_default_env()
                            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
                    )
                    .with_writer(std::io::stderr)
                    .try_init();
                runtime.block_on(replica(*index, schema, *clients))
            }
            None => runtime.block_on(parent(&options)),
        }
    });
    if let Err(err) = result {
        eprintln!("replicas benchmark failed: {err}");
        std::process::exit(1);
    }
}
