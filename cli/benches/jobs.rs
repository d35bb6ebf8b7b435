//! The jobs benchmark, run with `cargo bench -p anycloud --bench jobs`: 1,000 jobs submitted to
//! one simulated cluster, then `status` and `list` with 100,000 deployments stored.
//!
//! Part `jobs`:
//! 1. starts the real `anycloud api serve` binary as a hosted API on the simulated cloud
//!    (SQLite in a temporary data directory; `--hosted-by sim`, as `api serve --credentials sim`
//!    runs it), and with the real CLI saves a credential and creates a cluster of 2 capacity VMs
//!    (`--wait`);
//! 2. submits N jobs (default 1,000) one after another over one keep-alive connection
//!    (`POST /v1/jobs`, `sh -c 'echo job N'`), each timed by the client (send to last byte) and by
//!    the server (`Server-Timing: app;dur=`): the run of each job starts while later ones are
//!    being submitted, as it would;
//! 3. waits until every job has ended, reading the deployments' statuses from the API's SQLite
//!    database once a second (a reader beside the API, not through it), and meanwhile samples the
//!    API's resident memory (`VmRSS`) and CPU time;
//! 4. prints submit p50/p99/max, the time from the first submit until all are completed, jobs
//!    per second, the API's memory (largest sample and `VmHWM`, its peak) and its CPU use;
//! 5. prints, over every job, the time from its container's exit (the exit file the simulated
//!    kubelet's wrapper writes) to the end of its run's `wait_for_end` check, which saw it,
//!    against a p99 under 1 s.
//!
//! Part `reads`: with the API stopped, adds finished deployments directly with SQL (multi-row
//! `INSERT`s) until 100,000 are stored, starts the API again and sends, one at a time,
//! `GET /v1/deployments/{name}` (what `anycloud status NAME` asks; names of the jobs that really
//! ran, so each answer includes its workflow run) and `GET /v1/deployments`, `?status=completed`,
//! `?status=running` (none: the index must say so at once), `?kind=job` and `?kind=service`
//! (none) (what `anycloud list`, `job list` and `service list` ask: the newest 100) and
//! `?limit=500` (the largest page), and prints p50/p99/max of server and client time against a
//! server p99 under 20 ms.
//!
//! Options, after `--`: `--jobs N` (default 1000), `--deployments N` (default 100000),
//! `--requests N` per read (default 1000), `--part jobs|reads|both` (default both; `reads`
//! alone needs the jobs part's cluster, so it runs the jobs part with 10 jobs first), `--quick`
//! (100 jobs, 10,000 deployments, 200 requests), `--keep` (keep the data directory and say
//! where).
//!
//! The `anycloud` binary is `ANYCLOUD_BIN` if set, else the one next to this executable
//! (`target/release/anycloud` under `cargo bench`). Without `--bench` in its arguments (as
//! `cargo test --all-targets` runs it) the binary only says how to run it.

use std::error::Error;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

#[path = "../../engine/benches/support/machine.rs"]
mod machine;
use machine::{Cpu, cores, load_average, machine, now_ms, verdict};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// The target: the server's p99 of each read.
const TARGET_P99_MS: f64 = 20.0;

/// The target: a job's end is seen by its workflow within this (p99).
const END_SEEN_TARGET: Duration = Duration::from_secs(1);

/// How long the jobs may take to end before the benchmark gives up.
const JOBS_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// Deployments per multi-row `INSERT`.
const ROWS_PER_INSERT: usize = 1_000;

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Jobs,
    Reads,
    Both,
}

struct Options {
    jobs: usize,
    deployments: usize,
    requests: usize,
    part: Part,
    keep: bool,
}

impl Options {
    fn parse(args: &[String]) -> Res<Self> {
        let mut options = Self { jobs: 1_000, deployments: 100_000, requests: 1_000, part: Part::Both, keep: false };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut number = |name: &str| -> Res<usize> {
                let value = args.next().ok_or_else(|| format!("{name} needs a number"))?;
                Ok(value.parse().map_err(|_| format!("{name}: `{value}` is not a number"))?)
            };
            match arg.as_str() {
                "--bench" => {}
                "--jobs" => options.jobs = number("--jobs")?.max(1),
                "--deployments" => options.deployments = number("--deployments")?,
                "--requests" => options.requests = number("--requests")?.max(1),
                "--quick" => (options.jobs, options.deployments, options.requests) = (100, 10_000, 200),
                "--keep" => options.keep = true,
                "--part" => {
                    options.part = match args.next().map(String::as_str) {
                        Some("jobs") => Part::Jobs,
                        Some("reads") => Part::Reads,
                        Some("both") => Part::Both,
                        other => return Err(format!("--part takes jobs, reads or both, not {other:?}").into()),
                    }
                }
                other => return Err(format!("unknown option `{other}` (see the header of cli/benches/jobs.rs)").into()),
            }
        }
        if options.part == Part::Reads {
            options.jobs = 10;
        }
        Ok(options)
    }
}

// ---------------------------------------------------------------------------------------------
// The API and the CLI

struct Api {
    bin: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
    url: String,
}

impl Api {
    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Starts `api serve` (the first time with `--use`, so the CLI talks to it) and waits until
    /// it answers.
    async fn start(&mut self, client: &reqwest::Client) -> Res<()> {
        let log = File::options().create(true).append(true).open(self.dir.join("api.log"))?;
        let mut child = self
            .cli_command()
            .args(["api", "serve", "--id", "bench", "--hosted-by", "sim", "--port", "0", "--use", "--data-dir"])
            .arg(self.data_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some((_, rest)) = line.split_once("listening on ") {
                    let _ = sender.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
                }
            }
        });
        self.child = Some(child);
        self.url = receiver.recv_timeout(Duration::from_secs(120)).map_err(|_| self.failure("did not start"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let health = format!("{}/v1/health", self.url);
        while !client.get(&health).send().await.is_ok_and(|answer| answer.status().is_success()) {
            if Instant::now() > deadline {
                return Err(self.failure("never answered /v1/health"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    fn token(&self) -> Res<String> {
        Ok(std::fs::read_to_string(self.data_dir().join("token"))?.trim().to_owned())
    }

    fn failure(&self, what: &str) -> Box<dyn Error + Send + Sync> {
        let log = std::fs::read_to_string(self.dir.join("api.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!("the API {what}; the end of its log:\n{}", lines[lines.len().saturating_sub(30)..].join("\n")).into()
    }

    /// The CLI with this benchmark's own config directory.
    fn cli_command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .env("ANYCLOUD_CONFIG_DIR", self.dir.join("config"))
            .env("XDG_DATA_HOME", self.dir.join("xdg-data"))
            .env("NO_COLOR", "1")
            .env_remove("ANYCLOUD_DATABASE_URL");
        command
    }

    fn cli(&self, args: &[&str]) -> Res<()> {
        let output = self.cli_command().args(args).stdin(Stdio::null()).output()?;
        if !output.status.success() {
            return Err(format!(
                "anycloud {}: {}\n{}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        Ok(())
    }

    /// SIGTERM, then wait for the API to exit.
    fn stop(&mut self) -> Res<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        Command::new("kill").args(["-TERM", &child.id().to_string()]).status()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err("the API did not stop within 60 s of SIGTERM; killed it".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for Api {
    /// Kills the API and the processes its simulated kubelet started (they outlive it by design).
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let kubelet = self.data_dir().join("sim-kubelet");
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let cwd = std::fs::read_link(entry.path().join("cwd")).unwrap_or_default();
            if let (true, Ok(pid)) = (cwd.starts_with(&kubelet), entry.file_name().to_string_lossy().parse::<i32>()) {
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            }
        }
    }
}

fn find_binary() -> Res<PathBuf> {
    if let Some(path) = std::env::var_os("ANYCLOUD_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().ok_or("the bench executable has no directory")?;
    for candidate in [dir.join("anycloud"), dir.join("../anycloud")] {
        if candidate.is_file() {
            return Ok(candidate.canonicalize()?);
        }
    }
    Err(format!("no anycloud binary next to {}: set ANYCLOUD_BIN", exe.display()).into())
}

// ---------------------------------------------------------------------------------------------
// Figures

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

struct Stats {
    p50: f64,
    p99: f64,
    max: f64,
}

impl Stats {
    fn of(values: &mut [f64]) -> Self {
        values.sort_by(f64::total_cmp);
        Self { p50: percentile(values, 0.50), p99: percentile(values, 0.99), max: percentile(values, 1.0) }
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "p50 {:.2} p99 {:.2} max {:.2} ms", self.p50, self.p99, self.max)
    }
}

/// A field of `/proc/{pid}/status` (`VmRSS`, `VmHWM`) in MB (10^6 bytes).
fn process_mb(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib * 1024.0 / 1e6)
}

/// The process's CPU time so far (user + system), in seconds.
fn process_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |index: usize| fields.get(index).and_then(|field| field.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command: state is field 3, utime 14 and stime 15 (1-based), so 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// The server's time from `Server-Timing: app;dur=`.
fn server_ms(response: &reqwest::Response) -> Option<f64> {
    response
        .headers()
        .get("server-timing")?
        .to_str()
        .ok()?
        .split(';')
        .find_map(|part| part.trim().strip_prefix("dur="))?
        .parse()
        .ok()
}

/// Sends one request and returns its body with the server's and the client's time.
async fn timed(request: reqwest::RequestBuilder, what: &str) -> Res<(Value, f64, f64)> {
    let sent = Instant::now();
    let response = request.send().await?;
    let status = response.status();
    let server = server_ms(&response).ok_or_else(|| format!("{what}: no Server-Timing header"))?;
    let body = response.bytes().await?;
    let client = sent.elapsed().as_secs_f64() * 1000.0;
    if !status.is_success() {
        return Err(format!("{what}: {status}: {}", String::from_utf8_lossy(&body)).into());
    }
    Ok((serde_json::from_slice(&body)?, server, client))
}

// ---------------------------------------------------------------------------------------------
// Part `jobs`

async fn sqlite(api: &Api) -> Res<SqliteConnection> {
    let path = api.data_dir().join("anycloud.db");
    Ok(SqliteConnectOptions::new().filename(&path).busy_timeout(Duration::from_secs(30)).connect().await?)
}

/// How many of the benchmark's jobs are in each status.
async fn statuses(conn: &mut SqliteConnection) -> Res<Vec<(String, i64)>> {
    Ok(sqlx::query_as("SELECT status, count(*) FROM deployments WHERE kind = 'job' GROUP BY status ORDER BY status")
        .fetch_all(conn)
        .await?)
}

async fn bench_jobs(api: &Api, client: &reqwest::Client, jobs: usize) -> Res<()> {
    let token = api.token()?;
    let pid = api.pid();
    let mut server = Vec::with_capacity(jobs);
    let mut total = Vec::with_capacity(jobs);
    let cpu_before = process_cpu_seconds(pid);
    let machine_before = Cpu::now();
    let first = Instant::now();
    let mut rss_max = process_mb(pid, "VmRSS");
    for n in 0..jobs {
        let body = json!({
            "cluster": "bench", "name": format!("job-{n}"), "image": "busybox:1.36",
            "command": ["sh", "-c", format!("echo job {n}")],
        });
        let request = client.post(format!("{}/v1/jobs", api.url)).bearer_auth(&token).json(&body);
        let (_, server_ms, client_ms) = timed(request, &format!("submitting job-{n}")).await?;
        server.push(server_ms);
        total.push(client_ms);
        if n % 100 == 99 {
            rss_max = rss_max.max(process_mb(pid, "VmRSS"));
        }
    }
    let submitted = first.elapsed();
    println!(
        "[jobs] submitted {jobs} in {:.1} s: server {} | client {}",
        submitted.as_secs_f64(),
        Stats::of(&mut server),
        Stats::of(&mut total)
    );
    let mut conn = sqlite(api).await?;
    let deadline = Instant::now() + JOBS_DEADLINE;
    let mut last_print = Instant::now();
    let finished = loop {
        let counts = statuses(&mut conn).await?;
        rss_max = rss_max.max(process_mb(pid, "VmRSS"));
        let ended: i64 = counts
            .iter()
            .filter(|(status, _)| {
                matches!(status.as_str(), "completed" | "errored" | "failed" | "invalid" | "terminated")
            })
            .map(|(_, count)| count)
            .sum();
        if ended as usize >= jobs {
            break counts;
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            println!("[jobs] after {:>5.0} s: {counts:?}", first.elapsed().as_secs_f64());
            last_print = Instant::now();
        }
        if Instant::now() > deadline {
            return Err(format!("the jobs had not all ended after {JOBS_DEADLINE:?}: {counts:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let all = first.elapsed();
    let completed = finished.iter().find(|(status, _)| status == "completed").map_or(0, |(_, count)| *count);
    let cpu = process_cpu_seconds(pid) - cpu_before;
    println!(
        "[jobs] all {jobs} ended {:.1} s after the first submit ({:.1} jobs/s); {completed} completed; {finished:?}",
        all.as_secs_f64(),
        jobs as f64 / all.as_secs_f64()
    );
    println!(
        "[jobs] API memory: largest VmRSS sample {rss_max:.0} MB, peak VmHWM {:.0} MB; API CPU {cpu:.1} s \
         ({:.2} cores over the run); machine {:.2} of {} cores busy; load {}",
        process_mb(pid, "VmHWM"),
        cpu / all.as_secs_f64(),
        machine_before.machine_busy(Cpu::now()),
        cores(),
        load_average()
    );
    if completed as usize != jobs {
        return Err(format!("{} of {jobs} jobs did not complete: {finished:?}", jobs - completed as usize).into());
    }
    let mut seen = end_seen(api, &mut conn).await?;
    let measured = seen.len();
    let seen = Stats::of(&mut seen);
    println!(
        "[jobs] a Pod's end (its process's exit) to its workflow seeing it (`wait_for_end` done), {measured} jobs: {seen}; \
         p99 < {} ms {}",
        END_SEEN_TARGET.as_millis(),
        verdict(measured == jobs && seen.p99 < END_SEEN_TARGET.as_secs_f64() * 1000.0)
    );
    conn.close().await?;
    Ok(())
}

/// For each job: from its container's exit (the mtime of the exit file the simulated kubelet's
/// wrapper writes when the command ends) to the end of its run's `wait_for_end` step (the check
/// that saw the Job or Pod ended), in ms.
async fn end_seen(api: &Api, conn: &mut SqliteConnection) -> Res<Vec<f64>> {
    // The simulated cluster's objects are in a file of their own beside the API's.
    let objects = api.data_dir().join(anycloud_sim::kube::OBJECTS_FILE);
    sqlx::query("ATTACH DATABASE $1 AS kube").bind(objects.display().to_string()).execute(&mut *conn).await?;
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT o.uid, s.finished_at FROM kube.sim_kube_objects o \
         JOIN deployments d ON d.id = json_extract(o.body, '$.metadata.labels.\"anycloud.dev/deployment-id\"') \
         JOIN engine_steps s ON s.run_id = d.workflow_id AND s.phase = 'forward' AND s.name = 'wait_for_end' \
         WHERE o.resource = 'pods' AND d.kind = 'job'",
    )
    .fetch_all(&mut *conn)
    .await?;
    let kubelet = api.data_dir().join("sim-kubelet");
    let mut seen = Vec::with_capacity(rows.len());
    for (uid, finished_at) in rows {
        let exit = kubelet.join(&uid).join(".sim").join("main.exit");
        let Ok(modified) = std::fs::metadata(&exit).and_then(|metadata| metadata.modified()) else { continue };
        let exited_ms = modified.duration_since(std::time::UNIX_EPOCH)?.as_secs_f64() * 1000.0;
        seen.push(finished_at as f64 - exited_ms);
    }
    Ok(seen)
}

// ---------------------------------------------------------------------------------------------
// Part `reads`

fn lit(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Adds finished jobs on the benchmark's cluster until `target` deployments are stored: a mix of
/// completed, errored and terminated ones, created over the last 30 days.
async fn fill(api: &Api, target: usize) -> Res<usize> {
    let mut conn = sqlite(api).await?;
    let (cluster,): (String,) =
        sqlx::query_as("SELECT id FROM clusters WHERE name = 'bench'").fetch_one(&mut conn).await?;
    let (stored,): (i64,) = sqlx::query_as("SELECT count(*) FROM deployments").fetch_one(&mut conn).await?;
    let missing = target.saturating_sub(stored as usize);
    let now = now_ms();
    let mut tx = conn.begin().await?;
    for chunk in (0..missing).collect::<Vec<_>>().chunks(ROWS_PER_INSERT) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|n| {
                let created = now - 30 * 86_400_000 + (*n as i64 * 86_400_000 * 30 / missing.max(1) as i64);
                let (status, exit, reason) = match n % 10 {
                    0 => ("errored", "3", "'Error'"),
                    1 => ("terminated", "NULL", "'terminated by a person'"),
                    _ => ("completed", "0", "'Completed'"),
                };
                format!(
                    "({}, {}, 'job', {}, '{status}', {created}, 'busybox:1.36', {}, '[]', NULL, NULL, 1, 'anycloud', \
                     {exit}, {reason}, NULL, {}, {}, {})",
                    lit(&uuid::Uuid::new_v4().to_string()),
                    lit(&format!("filler-{n}")),
                    lit(&cluster),
                    lit(&format!(r#"["sh","-c","echo filler {n}"]"#)),
                    created + 2_000,
                    created + 9_000,
                    created + 9_000,
                )
            })
            .collect();
        let sql = format!(
            "INSERT INTO deployments (id, name, kind, cluster_id, status, created_at, image, command, env, cpus, \
             memory, attempt, namespace, exit_code, reason, workflow_id, started_at, ended_at, updated_at) VALUES {}",
            rows.join(", ")
        );
        sqlx::query(AssertSqlSafe(sql)).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    sqlx::query("ANALYZE").execute(&mut conn).await?;
    conn.close().await?;
    Ok(missing)
}

#[derive(Clone, Copy)]
enum Read {
    Status,
    List,
    ListCompleted,
    ListRunning,
    ListJobs,
    ListServices,
    ListLargest,
}

impl Read {
    const ALL: [Read; 7] = [
        Read::Status,
        Read::List,
        Read::ListCompleted,
        Read::ListRunning,
        Read::ListJobs,
        Read::ListServices,
        Read::ListLargest,
    ];

    fn name(self) -> &'static str {
        match self {
            Read::Status => "status NAME (GET /v1/deployments/{name})",
            Read::List => "list (GET /v1/deployments)",
            Read::ListCompleted => "list --status completed",
            Read::ListRunning => "list --status running (none)",
            Read::ListJobs => "job list (?kind=job)",
            Read::ListServices => "service list (?kind=service, none)",
            Read::ListLargest => "list --limit 500",
        }
    }

    fn path(self, n: usize, jobs: usize) -> String {
        match self {
            Read::Status => format!("/v1/deployments/job-{}", (n * 7919) % jobs),
            Read::List => "/v1/deployments".into(),
            Read::ListCompleted => "/v1/deployments?status=completed".into(),
            Read::ListRunning => "/v1/deployments?status=running".into(),
            Read::ListJobs => "/v1/deployments?kind=job".into(),
            Read::ListServices => "/v1/deployments?kind=service".into(),
            Read::ListLargest => "/v1/deployments?limit=500".into(),
        }
    }
}

async fn bench_reads(api: &Api, client: &reqwest::Client, jobs: usize, requests: usize) -> Res<Vec<(Read, Stats)>> {
    let token = api.token()?;
    let mut lines = Vec::new();
    for read in Read::ALL {
        let (mut server, mut total) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
        let warmup = requests / 10;
        for n in 0..warmup + requests {
            let path = read.path(n, jobs);
            let (body, server_ms, client_ms) =
                timed(client.get(format!("{}{path}", api.url)).bearer_auth(&token), &path).await?;
            if n == warmup {
                check(read, &body)?;
            }
            if n >= warmup {
                server.push(server_ms);
                total.push(client_ms);
            }
        }
        let server = Stats::of(&mut server);
        println!(
            "[reads] {:<42} server {server} | client {} | p99 < {TARGET_P99_MS} ms {}",
            read.name(),
            Stats::of(&mut total),
            verdict(server.p99 < TARGET_P99_MS)
        );
        lines.push((read, server));
    }
    Ok(lines)
}

/// The answer is what was asked for: a job with its run, or a page of deployments.
fn check(read: Read, body: &Value) -> Res<()> {
    let ok = match read {
        Read::Status => body["deployment"]["status"] == "completed" && body["workflow"].is_object(),
        Read::ListRunning | Read::ListServices => body["deployments"].as_array().is_some_and(Vec::is_empty),
        Read::ListLargest => body["deployments"].as_array().is_some_and(|page| page.len() == 500),
        _ => body["deployments"].as_array().is_some_and(|page| !page.is_empty()),
    };
    if !ok {
        return Err(format!("{}: unexpected answer {}", read.name(), truncate(&body.to_string())).into());
    }
    Ok(())
}

fn truncate(text: &str) -> &str {
    &text[..text.len().min(600)]
}

// ---------------------------------------------------------------------------------------------

async fn run(options: &Options) -> Res<()> {
    let bin = find_binary()?;
    println!(
        "anycloud jobs benchmark: {} jobs on one simulated cluster; reads with {} deployments",
        options.jobs, options.deployments
    );
    println!("machine: {}", machine());
    println!("binary: {}", bin.display());
    let dir = tempfile::Builder::new().prefix("anycloud-bench-jobs-").tempdir()?;
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60)).build()?;
    let mut api = Api { bin, dir: dir.path().to_owned(), child: None, url: String::new() };
    api.start(&client).await?;
    println!("[setup] the API listens on {}", api.url);
    api.cli(&["credentials", "new", "sim-bench", "--provider", "sim", "--wait"])?;
    let created = Instant::now();
    api.cli(&[
        "cluster",
        "create",
        "bench",
        "--credentials",
        "sim-bench",
        "--region",
        "sim-east-1",
        "--vm-type",
        "sim.small",
        "--min-vms",
        "2",
        "--max-vms",
        "2",
        "--wait",
    ])?;
    println!("[setup] cluster `bench` (2 capacity VMs) ready in {:.1} s", created.elapsed().as_secs_f64());
    bench_jobs(&api, &client, options.jobs).await?;
    if options.part != Part::Jobs {
        api.stop()?;
        let added = fill(&api, options.deployments).await?;
        println!("[reads] added {added} finished deployments directly with SQL: {} stored", options.deployments);
        api.start(&client).await?;
        let lines = bench_reads(&api, &client, options.jobs, options.requests).await?;
        println!();
        println!("| read | requests | server p50 | server p99 | server max | server p99 < {TARGET_P99_MS} ms |");
        println!("|---|---|---|---|---|---|");
        for (read, stats) in lines {
            println!(
                "| {} | {} | {:.2} | {:.2} | {:.2} | {} |",
                read.name(),
                options.requests,
                stats.p50,
                stats.p99,
                stats.max,
                verdict(stats.p99 < TARGET_P99_MS)
            );
        }
    }
    api.stop()?;
    if options.keep {
        println!("kept {}", dir.keep().display());
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|arg| arg == "--bench") {
        println!("jobs benchmark: run it with `cargo bench -p anycloud --bench jobs`");
        return;
    }
    let result = Options::parse(&args).and_then(|options| {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(run(&options))
    });
    if let Err(err) = result {
        eprintln!("jobs benchmark failed: {err}");
        std::process::exit(1);
    }
}
