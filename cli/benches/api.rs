//! The API's read benchmark, run with `cargo bench -p anycloud --bench api`: the latency of
//! `workflow inspect` and `workflow list` with 100,000 finished runs in the database.
//!
//! For each store (SQLite in a temporary data directory; PostgreSQL in a fresh database
//! `bench_api_<uuid>` on `ANYCLOUD_TEST_DATABASE_URL`, or `postgres://postgres@127.0.0.1:5432/test`,
//! dropped at the end) it:
//!
//! 1. starts the real `anycloud api serve` binary, waits until it listens and answers
//!    `/v1/health` (its schema is made by then) and stops it with SIGTERM;
//! 2. inserts the finished runs directly with SQL, in multi-row `INSERT`s of 1,000 runs and
//!    transactions of 10,000: kinds `credentials.verify` and `cluster.create`, statuses
//!    succeeded, failed and cancelled, 1,000 resource keys, and for each run the step rows and
//!    events the engine would have written (2–3 steps and 3–6 events);
//! 3. starts the API again and sends, one at a time over one keep-alive connection, a warm-up
//!    and then N requests of each kind: inspect a random run (`GET /v1/workflows/{id}`), its
//!    timeline (`.../events`, what `inspect --events` adds), the newest 50
//!    (`GET /v1/workflows?limit=50`), and the newest 50 filtered by status, by kind, by resource
//!    key, and by kind and status together; each filter also with values no run has (a status,
//!    a kind, a pair of common kind and status), right after the same filter with values that
//!    match, as the API's connections have prepared the statement by then;
//! 4. prints p50/p99/max of the server's own time (the `Server-Timing: app;dur=` header, from
//!    the router getting the request to the response being built) beside the time the client
//!    saw (send to the last byte of the body, over loopback), and PASS/MISS against a server
//!    p99 under 20 ms.
//!
//! Options, after `--`: `--store sqlite|postgres|both` (default both), `--runs N` (default
//! 100000), `--requests N` per query (default 2000), `--warmup N` per query (default 200),
//! `--quick` (10,000 runs, 200 requests, 20 warm-up: a smoke run), `--explain` (print each
//! query's plan: SQLite `EXPLAIN QUERY PLAN`, PostgreSQL `EXPLAIN ANALYZE` of the prepared
//! statement after 5 executions, i.e. the plan the API's cached statement uses), `--keep`
//! (keep the data directory and the PostgreSQL database, and say where), `--dir PATH` (where
//! the temporary data directory goes; default the temporary directory).
//!
//! The `anycloud` binary is `ANYCLOUD_BIN` if set, else the one next to this executable
//! (`target/release/anycloud` under `cargo bench`, which builds it with the bench profile, that
//! is the release settings). Without `--bench` in its arguments (as `cargo test --all-targets`
//! runs it) the binary only says how to run it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use sqlx::{AssertSqlSafe, Row};

#[path = "../../engine/benches/support/machine.rs"]
mod machine;
use machine::{Cpu, cores, load_average, machine, verdict};

#[path = "support/runs.rs"]
mod runs;
use runs::{Conn, Dataset, KEYS_PER_KIND, KIND_STATUSES, KINDS, Kind, NEW_KIND, Res, STATUSES, lit, load};

#[path = "support/server.rs"]
mod server;
use server::{Server, Stats, find_binary};

/// The target: the server's p99 for each query.
const TARGET_P99_MS: f64 = 20.0;

// ---------------------------------------------------------------------------------------------
// Options

struct Options {
    stores: Vec<Kind>,
    runs: usize,
    requests: usize,
    warmup: usize,
    explain: bool,
    keep: bool,
    dir: PathBuf,
}

impl Options {
    fn parse(args: &[String]) -> Res<Self> {
        let mut stores = vec![Kind::Sqlite, Kind::Postgres];
        let (mut runs, mut requests, mut warmup) = (None, None, None);
        let (mut quick, mut explain, mut keep) = (false, false, false);
        let mut dir = std::env::temp_dir();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().cloned().ok_or_else(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--bench" => {}
                "--quick" => quick = true,
                "--explain" => explain = true,
                "--keep" => keep = true,
                "--store" => {
                    stores = match value("--store")?.as_str() {
                        "sqlite" => vec![Kind::Sqlite],
                        "postgres" => vec![Kind::Postgres],
                        "both" => vec![Kind::Sqlite, Kind::Postgres],
                        other => return Err(format!("unknown store `{other}`").into()),
                    }
                }
                "--runs" => runs = Some(value("--runs")?.parse::<usize>()?),
                "--requests" => requests = Some(value("--requests")?.parse::<usize>()?),
                "--warmup" => warmup = Some(value("--warmup")?.parse::<usize>()?),
                "--dir" => dir = PathBuf::from(value("--dir")?),
                other if other.starts_with("--") => return Err(format!("unknown option `{other}`").into()),
                _ => {} // a name filter cargo passes on: there is one benchmark
            }
        }
        let runs = runs.unwrap_or(if quick { 10_000 } else { 100_000 });
        if runs == 0 {
            return Err("--runs must be at least 1".into());
        }
        Ok(Self {
            stores,
            runs,
            requests: requests.unwrap_or(if quick { 200 } else { 2_000 }).max(1),
            warmup: warmup.unwrap_or(if quick { 20 } else { 200 }),
            explain,
            keep,
            dir,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The queries

#[derive(Clone, Copy)]
enum Query {
    Inspect,
    Events,
    List,
    ListStatus,
    ListStatusNone,
    ListKind,
    ListKindNone,
    ListResource,
    ListKindStatus,
    ListKindStatusNone,
    ListNewKindStatusNone,
}

impl Query {
    /// In this order: a filter that matches nothing comes right after the same filter with
    /// values that match, so that it meets the statement as the API's connections have cached it.
    const ALL: [Query; 11] = [
        Self::Inspect,
        Self::Events,
        Self::List,
        Self::ListStatus,
        Self::ListStatusNone,
        Self::ListKind,
        Self::ListKindNone,
        Self::ListResource,
        Self::ListKindStatus,
        Self::ListKindStatusNone,
        Self::ListNewKindStatusNone,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Inspect => "inspect",
            Self::Events => "inspect --events (timeline)",
            Self::List => "list (newest 50)",
            Self::ListStatus => "list --status",
            Self::ListStatusNone => "list --status (no run has it)",
            Self::ListKind => "list --kind",
            Self::ListKindNone => "list --kind (no run of it)",
            Self::ListResource => "list --resource",
            Self::ListKindStatus => "list --kind --status",
            Self::ListKindStatusNone => "list --kind --status (no run has the pair)",
            Self::ListNewKindStatusNone => "list --kind --status (no run of the kind)",
        }
    }

    fn path(self, rng: &mut StdRng, data: &Dataset) -> String {
        fn pick<'a, T>(rng: &mut StdRng, values: &'a [T]) -> &'a T {
            &values[rng.random_range(0..values.len())]
        }
        match self {
            Self::Inspect => format!("/v1/workflows/{}", pick(rng, &data.ids)),
            Self::Events => format!("/v1/workflows/{}/events", pick(rng, &data.ids)),
            Self::List => "/v1/workflows?limit=50".to_owned(),
            Self::ListStatus => format!("/v1/workflows?limit=50&status={}", pick(rng, &STATUSES)),
            Self::ListStatusNone => "/v1/workflows?limit=50&status=needs-attention".to_owned(),
            Self::ListKind => format!("/v1/workflows?limit=50&kind={}", pick(rng, &KINDS)),
            Self::ListKindNone => format!("/v1/workflows?limit=50&kind={NEW_KIND}"),
            Self::ListResource => {
                format!("/v1/workflows?limit=50&resource={}", pick(rng, &data.keys).replace('/', "%2F"))
            }
            Self::ListKindStatus => {
                let (kind, status) = pick(rng, &KIND_STATUSES);
                format!("/v1/workflows?limit=50&kind={kind}&status={status}")
            }
            Self::ListKindStatusNone => "/v1/workflows?limit=50&kind=credentials.verify&status=cancelled".to_owned(),
            Self::ListNewKindStatusNone => format!("/v1/workflows?limit=50&kind={NEW_KIND}&status=succeeded"),
        }
    }

    /// Checks one answer: the right run, or up to 50 runs that match the filter, newest first.
    fn check(self, path: &str, body: &Value) -> Res<()> {
        match self {
            Self::Inspect => {
                let id = path.trim_start_matches("/v1/workflows/");
                let steps = body["workflow"]["steps"].as_array().map_or(0, Vec::len);
                if body["workflow"]["run"]["id"].as_str() != Some(id) || steps < 2 {
                    return Err(format!("inspect of {id} answered {body}").into());
                }
            }
            Self::Events => {
                let events = body["events"].as_array().ok_or("no events")?;
                if events.len() < 5 {
                    return Err(format!("{path}: {} events", events.len()).into());
                }
            }
            _ => {
                let runs = body["workflows"].as_array().ok_or("no workflows")?;
                let none = matches!(
                    self,
                    Self::ListStatusNone | Self::ListKindNone | Self::ListKindStatusNone | Self::ListNewKindStatusNone
                );
                if runs.is_empty() != none || runs.len() > 50 {
                    return Err(format!("{path}: {} runs", runs.len()).into());
                }
                let query = path.split_once('?').map_or("", |(_, query)| query);
                for pair in query.split('&') {
                    let (field, want) = pair.split_once('=').unwrap_or((pair, ""));
                    let want = want.replace("%2F", "/");
                    let field = match field {
                        "status" => "status",
                        "kind" => "kind",
                        "resource" => "resource_key",
                        _ => continue,
                    };
                    if let Some(run) = runs.iter().find(|run| run[field].as_str() != Some(want.as_str())) {
                        return Err(format!("{path}: a run with {field} {}", run[field]).into());
                    }
                }
                let seqs: Vec<i64> = runs.iter().filter_map(|run| run["seq"].as_i64()).collect();
                if seqs.windows(2).any(|pair| pair[0] <= pair[1]) {
                    return Err(format!("{path}: not newest first").into());
                }
            }
        }
        Ok(())
    }
}

struct Figures {
    server: Vec<f64>,
    client: Vec<f64>,
    machine_busy: f64,
}

async fn measure(
    client: &reqwest::Client,
    server: &Server,
    token: &str,
    data: &Dataset,
    query: Query,
    options: &Options,
) -> Res<Figures> {
    let mut rng = StdRng::seed_from_u64(query as u64 + 1);
    let mut figures = Figures {
        server: Vec::with_capacity(options.requests),
        client: Vec::with_capacity(options.requests),
        machine_busy: 0.0,
    };
    let mut cpu = Cpu::now();
    for n in 0..options.warmup + options.requests {
        if n == options.warmup {
            cpu = Cpu::now();
        }
        let path = query.path(&mut rng, data);
        let sent = Instant::now();
        let response = client.get(format!("{}{path}", server.url)).bearer_auth(token).send().await?;
        let status = response.status();
        let server_ms = response
            .headers()
            .get("server-timing")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').find_map(|part| part.trim().strip_prefix("dur=")))
            .and_then(|ms| ms.parse::<f64>().ok());
        let body = response.bytes().await?;
        let client_ms = sent.elapsed().as_secs_f64() * 1000.0;
        if !status.is_success() {
            return Err(format!("GET {path}: {status}: {}", String::from_utf8_lossy(&body)).into());
        }
        let server_ms = server_ms.ok_or_else(|| format!("GET {path}: no Server-Timing header"))?;
        if n == 0 || n == options.warmup {
            query.check(&path, &serde_json::from_slice(&body)?)?;
        }
        if n >= options.warmup {
            figures.server.push(server_ms);
            figures.client.push(client_ms);
        }
    }
    figures.machine_busy = cpu.machine_busy(Cpu::now());
    Ok(figures)
}

// ---------------------------------------------------------------------------------------------
// Query plans

const RUN_COLUMNS: &str = "seq, id, kind, version, resource_key, input, output, status, phase, \
     step_index, current_step, attempt, step_started_at, next_at, status_reason, error, \
     cancel_requested, lease_owner, lease_expires_at, lease_generation, created_at, updated_at, finished_at";

/// A statement `Store` sends (as in `engine/src/store/mod.rs`), with example values: `warm` to
/// execute it with 5 times first (on PostgreSQL), then `values` to show the plan of.
struct Plan {
    name: &'static str,
    sql: String,
    warm: Vec<String>,
    values: Vec<String>,
}

fn plan_queries(data: &Dataset) -> Vec<Plan> {
    let id = lit(&data.ids[data.ids.len() / 2]);
    let list = |filters: &[&str]| {
        let mut conditions: Vec<String> =
            filters.iter().enumerate().map(|(at, column)| format!("{column} = ${}", at + 1)).collect();
        conditions.push(format!("seq < ${}", filters.len() + 1));
        format!(
            "SELECT {RUN_COLUMNS} FROM engine_runs WHERE {} ORDER BY seq DESC LIMIT ${}",
            conditions.join(" AND "),
            filters.len() + 2
        )
    };
    let page = |values: &[&str]| {
        let mut values: Vec<String> = values.iter().map(|value| lit(value)).collect();
        values.push(i64::MAX.to_string());
        values.push("50".to_owned());
        values
    };
    let plan = |name, sql: String, warm: Vec<String>, values: Vec<String>| Plan { name, sql, warm, values };
    let key = data.keys[KEYS_PER_KIND + 7].as_str();
    vec![
        plan(
            "inspect: the run",
            format!("SELECT {RUN_COLUMNS} FROM engine_runs WHERE id = $1"),
            vec![id.clone()],
            vec![id.clone()],
        ),
        plan(
            "inspect: its steps",
            "SELECT phase, idx, name, status, attempts, output, error, started_at, finished_at \
             FROM engine_steps WHERE run_id = $1 ORDER BY finished_at, phase, idx"
                .to_owned(),
            vec![id.clone()],
            vec![id.clone()],
        ),
        plan(
            "inspect --events: the timeline",
            "SELECT n, at, kind, step, message, NULL AS attempts, NULL AS took FROM engine_events \
             WHERE run_id = $1 AND n > $2 \
             UNION ALL \
             SELECT n, finished_at, 'step-succeeded', name, NULL, attempts, finished_at - started_at \
             FROM engine_steps WHERE run_id = $1 AND n > $2 \
             ORDER BY 1"
                .to_owned(),
            vec![id.clone(), "0".to_owned()],
            vec![id, "0".to_owned()],
        ),
        plan("list (newest 50)", list(&[]), page(&[]), page(&[])),
        plan("list --status cancelled", list(&["status"]), page(&["failed"]), page(&["cancelled"])),
        plan(
            "list --status needs-attention (no match)",
            list(&["status"]),
            page(&["failed"]),
            page(&["needs-attention"]),
        ),
        plan("list --kind cluster.create", list(&["kind"]), page(&["credentials.verify"]), page(&["cluster.create"])),
        plan("list --kind cluster.delete (no match)", list(&["kind"]), page(&["cluster.create"]), page(&[NEW_KIND])),
        plan("list --resource", list(&["resource_key"]), page(&[key]), page(&[key])),
        plan(
            "list --kind cluster.create --status cancelled",
            list(&["kind", "status"]),
            page(&["credentials.verify", "failed"]),
            page(&["cluster.create", "cancelled"]),
        ),
        plan(
            "list --kind credentials.verify --status cancelled (no match)",
            list(&["kind", "status"]),
            page(&["credentials.verify", "failed"]),
            page(&["credentials.verify", "cancelled"]),
        ),
        plan(
            "list --kind cluster.delete --status succeeded (no match)",
            list(&["kind", "status"]),
            page(&["credentials.verify", "failed"]),
            page(&[NEW_KIND, "succeeded"]),
        ),
    ]
}

async fn explain(conn: &mut Conn, kind: Kind, data: &Dataset) -> Res<()> {
    for (at, plan) in plan_queries(data).into_iter().enumerate() {
        println!("[{}] plan of {}:", kind.name(), plan.name);
        let lines: Vec<String> = match conn {
            Conn::Sqlite(conn) => {
                // Without ANALYZE statistics SQLite's plan does not depend on the values; they
                // are substituted all the same.
                let mut text = plan.sql.clone();
                for (index, value) in plan.values.iter().enumerate().rev() {
                    text = text.replace(&format!("${}", index + 1), value);
                }
                let rows = sqlx::raw_sql(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {text}"))).fetch_all(conn).await?;
                rows.iter()
                    .map(|row| Ok::<_, sqlx::Error>(format!("  {}", row.try_get::<String, _>(3)?)))
                    .collect::<Result<_, _>>()?
            }
            Conn::Postgres(conn) => {
                // sqlx prepares each statement once per connection and reuses it; after 5
                // executions PostgreSQL may switch that statement to a generic plan. Show the
                // plan it uses then, for the values asked.
                let statement = format!("bench_plan_{at}");
                let sql = format!("PREPARE {statement} AS {}", plan.sql);
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *conn).await?;
                let warm = format!("EXECUTE {statement}({})", plan.warm.join(", "));
                for _ in 0..5 {
                    sqlx::raw_sql(AssertSqlSafe(warm.clone())).execute(&mut *conn).await?;
                }
                let sql = format!("EXPLAIN (ANALYZE, BUFFERS) EXECUTE {statement}({})", plan.values.join(", "));
                let rows = sqlx::raw_sql(AssertSqlSafe(sql)).fetch_all(&mut *conn).await?;
                sqlx::raw_sql(AssertSqlSafe(format!("DEALLOCATE {statement}"))).execute(&mut *conn).await?;
                rows.iter()
                    .map(|row| Ok::<_, sqlx::Error>(format!("  {}", row.try_get::<String, _>(0)?)))
                    .collect::<Result<_, _>>()?
            }
        };
        for line in lines {
            println!("{line}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// One store

struct Line {
    store: Kind,
    query: Query,
    requests: usize,
    server: Stats,
    client: Stats,
    machine_busy: f64,
}

async fn bench_store(kind: Kind, bin: &Path, options: &Options) -> Res<Vec<Line>> {
    let dir = tempfile::Builder::new().prefix("anycloud-api-bench-").tempdir_in(&options.dir)?;
    let data_dir = dir.path().join("data");
    let log = dir.path().join("api.log");
    let database = if kind == Kind::Postgres { Some(runs::create_database("bench_api").await?) } else { None };
    let database_url = database.as_deref().map(runs::database_url);
    let result = bench_on(kind, bin, options, &data_dir, database_url.as_deref(), &log).await;
    if options.keep {
        let kept = dir.keep();
        println!("[{}] kept {} and database {}", kind.name(), kept.display(), database_url.as_deref().unwrap_or("-"));
        return result;
    }
    if let Some(name) = database {
        runs::drop_database(&name).await?;
        println!("[{}] dropped database {name}", kind.name());
    }
    result
}

async fn bench_on(
    kind: Kind,
    bin: &Path,
    options: &Options,
    data_dir: &Path,
    database_url: Option<&str>,
    log: &Path,
) -> Res<Vec<Line>> {
    let store = kind.name();
    let mut server = Server::start(bin, data_dir, database_url, log)?;
    server.stop()?;
    println!("[{store}] the API made its schema and stopped");
    let mut conn = Conn::open(kind, data_dir, database_url).await?;
    let data = load(&mut conn, kind, options.runs).await?;
    println!("[{store}] {}", conn.describe().await?);
    println!("[{store}] {}", conn.schema().await?);
    let mut server = Server::start(bin, data_dir, database_url, log)?;
    println!("[{store}] the API listens on {} again", server.url);
    let token = std::fs::read_to_string(data_dir.join("token"))?.trim().to_owned();
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build()?;
    let mut lines = Vec::new();
    for query in Query::ALL {
        let before = load_average();
        let figures = measure(&client, &server, &token, &data, query, options).await?;
        let (mut server_ms, mut client_ms) = (figures.server, figures.client);
        let line = Line {
            store: kind,
            query,
            requests: server_ms.len(),
            server: Stats::of(&mut server_ms),
            client: Stats::of(&mut client_ms),
            machine_busy: figures.machine_busy,
        };
        println!(
            "[{store}] {:<42} server p50 {:>6.3} p99 {:>6.3} max {:>7.3} ms | client p50 {:>6.3} p99 {:>6.3} max {:>7.3} ms \
             | {} requests, machine {:.2} of {} cores busy, load {before} -> {} | p99 < {TARGET_P99_MS} ms {}",
            query.name(),
            line.server.p50,
            line.server.p99,
            line.server.max,
            line.client.p50,
            line.client.p99,
            line.client.max,
            line.requests,
            line.machine_busy,
            cores(),
            load_average(),
            verdict(line.server.p99 < TARGET_P99_MS),
        );
        lines.push(line);
    }
    if options.explain {
        explain(&mut conn, kind, &data).await?;
    }
    conn.close().await?;
    server.stop()?;
    Ok(lines)
}

fn summary(lines: &[Line]) {
    println!();
    println!("== summary: server time (Server-Timing) and client time (loopback), ms ==");
    println!(
        "| store | query | requests | server p50 | server p99 | server max | client p50 | client p99 | client max | \
         server p99 < {TARGET_P99_MS} ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for line in lines {
        println!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} |",
            line.store.name(),
            line.query.name(),
            line.requests,
            line.server.p50,
            line.server.p99,
            line.server.max,
            line.client.p50,
            line.client.p99,
            line.client.max,
            verdict(line.server.p99 < TARGET_P99_MS),
        );
    }
}

fn run(options: &Options) -> Res<()> {
    let bin = find_binary()?;
    println!("anycloud API benchmark: workflow inspect and list with {} finished runs", options.runs);
    println!("machine: {}", machine());
    println!("binary: {}", bin.display());
    println!(
        "{} requests per query after {} of warm-up, one at a time over one keep-alive connection",
        options.requests, options.warmup
    );
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut lines = Vec::new();
    for kind in &options.stores {
        println!();
        println!("== {} ==", kind.name());
        lines.extend(runtime.block_on(bench_store(*kind, &bin, options))?);
    }
    summary(&lines);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|arg| arg == "--bench") {
        println!("API benchmark: run it with `cargo bench -p anycloud --bench api`");
        return;
    }
    if let Err(err) = Options::parse(&args).and_then(|options| run(&options)) {
        eprintln!("API benchmark failed: {err}");
        std::process::exit(1);
    }
}
