//! The web console's benchmark, run with `cargo bench -p anycloud --bench console`: each page of
//! `/ui` with 100,000 finished runs and 100,000 deployments stored; its server time (target: p99
//! under 50 ms) and what a browser fetches to show it the first time (target: under 200 KiB).
//!
//! For each store (SQLite in a temporary data directory; PostgreSQL in a fresh database
//! `bench_console_<uuid>` on `ANYCLOUD_TEST_DATABASE_URL`, or
//! `postgres://postgres@127.0.0.1:5432/test`, dropped at the end) it:
//!
//! 1. starts the real `anycloud api serve` binary, waits until it answers `/v1/health` (its
//!    schema is made by then) and stops it with SIGTERM;
//! 2. inserts with plain SQL the finished runs of the API benchmark (`support/runs.rs`) and
//!    credentials, clusters with their VMs, and deployments, jobs and services with their
//!    revisions (`support/fleet.rs`);
//! 3. starts the API again and signs in as a browser does: `POST /v1/console/codes` with the
//!    bearer token of the data directory, then `GET /ui/sign-in?code=`, which answers a
//!    redirect that sets the cookie `anycloud_console`;
//! 4. sends, with that cookie, one at a time over one keep-alive connection, a warm-up and then
//!    N requests of each page: the overview (`/ui`), the workflows newest first
//!    (`/ui/workflows`), filtered by kind and status and by resource as the filter form sends
//!    them, an "Older runs" page (`before=` a run in the older half of the table), one run
//!    (`/ui/workflows/{id}`), one cluster (`/ui/clusters/{name}`), one job and one service
//!    (`/ui/deployments/{id}`), and the API docs (`/ui/api`) when that route answers 200; the
//!    first answer of each page, and the first measured one, must be that page (status 200 and
//!    what it must show);
//! 5. prints p50/p99/max of the server's own time (`Server-Timing: app;dur=`) beside the time
//!    the client saw (send to the last byte of the body), and PASS/MISS against a server p99
//!    under 50 ms;
//! 6. fetches each page once more over a plain socket as a browser does on a cold load
//!    (`Accept-Encoding: gzip, deflate, br, zstd`), then every stylesheet, script and image the
//!    page names (`<link href>`, `<script src>`, `<img src>`) and `/favicon.ico` when it names no
//!    icon, and counts the bytes of each answer as sent (status line, headers and body), with
//!    its `Content-Encoding`; PASS/MISS against 200 KiB in all.
//!
//! Options, after `--`: `--store sqlite|postgres|both` (default both), `--runs N` (default
//! 100000), `--deployments N` (default 100000), `--requests N` per page (default 2000),
//! `--warmup N` per page (default 200), `--quick` (10,000 runs and deployments, 200 requests,
//! 20 warm-up: a smoke run), `--keep` (keep the data directory and the PostgreSQL database, and
//! say where), `--dir PATH` (where the temporary data directory goes).
//!
//! The `anycloud` binary is `ANYCLOUD_BIN` if set, else the one next to this executable
//! (`target/release/anycloud` under `cargo bench`). Without `--bench` in its arguments (as
//! `cargo test --all-targets` runs it) the binary only says how to run it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};

#[path = "../../engine/benches/support/machine.rs"]
mod machine;
use machine::{Cpu, cores, load_average, machine, verdict};

#[path = "support/runs.rs"]
mod runs;
use runs::{Conn, Dataset, KIND_STATUSES, Kind, Res};

#[path = "support/server.rs"]
mod server;
use server::{Server, Stats, find_binary, server_ms};

#[path = "support/fleet.rs"]
mod fleet;
use fleet::Fleet;

/// The target: the server's p99 of each page.
const TARGET_P99_MS: f64 = 50.0;

/// The target: what a browser fetches to show a page the first time.
const TARGET_TRANSFER: usize = 200 * 1024;

/// A browser's own request headers (Chromium's, on Linux).
const USER_AGENT: &str =
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

// ---------------------------------------------------------------------------------------------
// Options

struct Options {
    stores: Vec<Kind>,
    runs: usize,
    deployments: usize,
    requests: usize,
    warmup: usize,
    keep: bool,
    dir: PathBuf,
}

impl Options {
    fn parse(args: &[String]) -> Res<Self> {
        let mut stores = vec![Kind::Sqlite, Kind::Postgres];
        let (mut runs, mut deployments, mut requests, mut warmup) = (None, None, None, None);
        let (mut quick, mut keep) = (false, false);
        let mut dir = std::env::temp_dir();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().cloned().ok_or_else(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--bench" => {}
                "--quick" => quick = true,
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
                "--deployments" => deployments = Some(value("--deployments")?.parse::<usize>()?),
                "--requests" => requests = Some(value("--requests")?.parse::<usize>()?),
                "--warmup" => warmup = Some(value("--warmup")?.parse::<usize>()?),
                "--dir" => dir = PathBuf::from(value("--dir")?),
                other if other.starts_with("--") => return Err(format!("unknown option `{other}`").into()),
                _ => {} // a name filter cargo passes on: there is one benchmark
            }
        }
        let default = if quick { 10_000 } else { 100_000 };
        let (runs, deployments) = (runs.unwrap_or(default), deployments.unwrap_or(default));
        if runs < 1_000 || deployments < 100 {
            return Err("--runs must be at least 1000 and --deployments at least 100".into());
        }
        Ok(Self {
            stores,
            runs,
            deployments,
            requests: requests.unwrap_or(if quick { 200 } else { 2_000 }).max(1),
            warmup: warmup.unwrap_or(if quick { 20 } else { 200 }),
            keep,
            dir,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The pages

/// What the requests pick from.
struct Loaded {
    runs: Dataset,
    fleet: Fleet,
    /// The smallest and largest `seq` of the runs.
    seqs: (i64, i64),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Page {
    Overview,
    Workflows,
    KindStatus,
    Resource,
    Older,
    Workflow,
    Cluster,
    Job,
    Service,
    ApiDocs,
}

/// One request of a page, and what its answer must show: `shows` each appear, `counts` each
/// appear exactly so many times.
struct Ask {
    path: String,
    shows: Vec<String>,
    counts: Vec<(String, usize)>,
}

/// Occurrences of a run's link on a page (the navigation's `/ui/workflows` has no slash after).
const RUN_LINK: &str = r#"href="/ui/workflows/"#;

impl Page {
    const ALL: [Page; 10] = [
        Self::Overview,
        Self::Workflows,
        Self::KindStatus,
        Self::Resource,
        Self::Older,
        Self::Workflow,
        Self::Cluster,
        Self::Job,
        Self::Service,
        Self::ApiDocs,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Overview => "overview /ui",
            Self::Workflows => "workflows, newest first",
            Self::KindStatus => "workflows ?kind&status",
            Self::Resource => "workflows ?resource",
            Self::Older => "workflows ?before (older runs)",
            Self::Workflow => "one workflow",
            Self::Cluster => "one cluster",
            Self::Job => "one deployment (a job)",
            Self::Service => "one deployment (a service)",
            Self::ApiDocs => "API docs /ui/api",
        }
    }

    fn ask(self, rng: &mut StdRng, loaded: &Loaded) -> Ask {
        fn pick<'a, T>(rng: &mut StdRng, values: &'a [T]) -> &'a T {
            &values[rng.random_range(0..values.len())]
        }
        let ask = |path: String, shows: &[&str], counts: Vec<(String, usize)>| Ask {
            path,
            shows: shows.iter().map(|text| (*text).to_owned()).collect(),
            counts,
        };
        let page_of_50 = || vec![(RUN_LINK.to_owned(), 50)];
        match self {
            Self::Overview => {
                let deployments = loaded.fleet.jobs.len() + loaded.fleet.services.len();
                let cluster = format!(r#"href="/ui/clusters/{}""#, loaded.fleet.clusters[0]);
                let counts =
                    vec![(r#"href="/ui/deployments/"#.to_owned(), deployments.min(100)), (RUN_LINK.to_owned(), 10)];
                ask(
                    "/ui".to_owned(),
                    &["<h1>Overview</h1>", "<h2>Clusters</h2>", &cluster, "<h2>Credentials</h2>"],
                    counts,
                )
            }
            Self::Workflows => {
                ask("/ui/workflows".to_owned(), &["<h1>Workflows</h1>", ">Older runs</a>"], page_of_50())
            }
            Self::KindStatus => {
                let (kind, status) = pick(rng, &KIND_STATUSES);
                let mut counts = page_of_50();
                counts.push((format!("<td>{kind}</td>"), 50));
                counts.push((format!(">{status}</span>"), 50));
                ask(format!("/ui/workflows?kind={kind}&resource=&status={status}"), &["<h1>Workflows</h1>"], counts)
            }
            Self::Resource => {
                let key = pick(rng, &loaded.runs.keys);
                let path = format!("/ui/workflows?kind=&resource={}&status=", key.replace('/', "%2F"));
                ask(path, &["<h1>Workflows</h1>", &format!("<td>{key}</td>")], Vec::new())
            }
            Self::Older => {
                let (first, last) = loaded.seqs;
                let before = rng.random_range(first + 100..=first + (last - first) / 2);
                ask(format!("/ui/workflows?before={before}"), &["<h1>Workflows</h1>", ">Older runs</a>"], page_of_50())
            }
            Self::Workflow => {
                let id = pick(rng, &loaded.runs.ids);
                ask(
                    format!("/ui/workflows/{id}"),
                    &["<h2>Steps</h2>", "<h2>Timeline</h2>", r#"class="lines""#],
                    Vec::new(),
                )
            }
            Self::Cluster => {
                let name = pick(rng, &loaded.fleet.clusters);
                let shows =
                    [format!("<h1>Cluster {name}</h1>"), format!("<td>{name}-cp</td>"), "<h2>VMs</h2>".to_owned()];
                ask(format!("/ui/clusters/{name}"), &shows.each_ref().map(String::as_str), Vec::new())
            }
            Self::Job | Self::Service => {
                let (list, title) =
                    if self == Self::Job { (&loaded.fleet.jobs, "Job") } else { (&loaded.fleet.services, "Service") };
                let deployment = pick(rng, list);
                let heading = format!("<h1>{title} {}</h1>", deployment.name);
                let part = if self == Self::Job { r#"id="logs""# } else { "<h2>Revisions, newest first</h2>" };
                ask(format!("/ui/deployments/{}", deployment.id), &[&heading, part], Vec::new())
            }
            Self::ApiDocs => ask("/ui/api".to_owned(), &["<h1>HTTP API</h1>", "/v1/workflows"], Vec::new()),
        }
    }
}

impl Ask {
    /// The answer is this page: 200, and it shows what it must.
    fn check(&self, status: reqwest::StatusCode, body: &str) -> Res<()> {
        let excerpt = || body.chars().take(400).collect::<String>();
        if status != reqwest::StatusCode::OK {
            return Err(format!("GET {}: {status}: {}", self.path, excerpt()).into());
        }
        if let Some(missing) = self.shows.iter().find(|text| !body.contains(text.as_str())) {
            return Err(format!("GET {}: the page does not show `{missing}`: {}", self.path, excerpt()).into());
        }
        for (text, times) in &self.counts {
            let found = body.matches(text.as_str()).count();
            if found != *times {
                return Err(format!("GET {}: `{text}` {found} times, not {times}", self.path).into());
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Signing in, and the timed requests

/// Signs in as a browser does: a code from `POST /v1/console/codes` (bearer token), traded at
/// `GET /ui/sign-in?code=` for the session cookie. Answers `anycloud_console=<session>`.
async fn sign_in(client: &reqwest::Client, server: &Server, token: &str) -> Res<String> {
    let answer = client.post(format!("{}/v1/console/codes", server.url)).bearer_auth(token).send().await?;
    let status = answer.status();
    let body: serde_json::Value = answer.json().await?;
    let path =
        body["path"].as_str().filter(|_| status.is_success()).ok_or_else(|| format!("a code: {status} {body}"))?;
    let answer = client.get(format!("{}{path}", server.url)).send().await?;
    let location = answer.headers().get(LOCATION).and_then(|value| value.to_str().ok()).unwrap_or_default();
    if !answer.status().is_redirection() || location != "/ui" {
        return Err(format!("sign-in answered {} to {location:?}", answer.status()).into());
    }
    let cookie = answer
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|value| value.split(';').next().filter(|pair| pair.starts_with("anycloud_console=")))
        .ok_or("sign-in set no anycloud_console cookie")?;
    Ok(cookie.to_owned())
}

struct Figures {
    server: Vec<f64>,
    client: Vec<f64>,
    machine_busy: f64,
    /// The first measured request's path and body.
    first: (String, String),
}

async fn measure(
    client: &reqwest::Client,
    server: &Server,
    cookie: &str,
    loaded: &Loaded,
    page: Page,
    options: &Options,
) -> Res<Figures> {
    let mut rng = StdRng::seed_from_u64(page as u64 + 1);
    let mut figures = Figures {
        server: Vec::with_capacity(options.requests),
        client: Vec::with_capacity(options.requests),
        machine_busy: 0.0,
        first: Default::default(),
    };
    let mut cpu = Cpu::now();
    for n in 0..options.warmup + options.requests {
        if n == options.warmup {
            cpu = Cpu::now();
        }
        let ask = page.ask(&mut rng, loaded);
        let sent = Instant::now();
        let response = client.get(format!("{}{}", server.url, ask.path)).header(COOKIE, cookie).send().await?;
        let status = response.status();
        let server_ms = server_ms(response.headers());
        let body = response.bytes().await?;
        let client_ms = sent.elapsed().as_secs_f64() * 1000.0;
        let server_ms = server_ms.ok_or_else(|| format!("GET {}: {status} with no Server-Timing header", ask.path))?;
        if n == 0 || n == options.warmup {
            let body = String::from_utf8(body.to_vec())?;
            ask.check(status, &body)?;
            if n == options.warmup {
                figures.first = (ask.path, body);
            }
        } else if status != reqwest::StatusCode::OK {
            return Err(format!("GET {}: {status}", ask.path).into());
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
// What a browser fetches

/// One answer as it came off the socket.
struct Raw {
    status: u16,
    head: usize,
    body: usize,
    encoding: String,
}

/// `GET path` as a browser sends it (with the cookie, which the browser sends to every `/ui`
/// path), over a new connection; the bytes of the answer as sent.
fn raw_get(address: &str, path: &str, cookie: &str, accept: &str) -> Res<Raw> {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nUser-Agent: {USER_AGENT}\r\nAccept: {accept}\r\n\
         Accept-Encoding: gzip, deflate, br, zstd\r\nAccept-Language: en-GB,en;q=0.9\r\nCookie: {cookie}\r\n\r\n"
    );
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(request.as_bytes())?;
    let mut bytes = Vec::new();
    let mut buffer = [0_u8; 16 * 1024];
    let head = loop {
        if let Some(at) = bytes.windows(4).position(|four| four == b"\r\n\r\n") {
            break at + 4;
        }
        let read = stream.read(&mut buffer)?;
        if read == 0 {
            return Err(format!("GET {path}: the answer ended in its head").into());
        }
        bytes.extend_from_slice(&buffer[..read]);
    };
    let text = String::from_utf8_lossy(&bytes[..head]).to_string();
    let header = |name: &str| {
        text.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
        })
    };
    let length: usize = header("content-length").ok_or_else(|| format!("GET {path}: no content-length"))?.parse()?;
    while bytes.len() < head + length {
        let read = stream.read(&mut buffer)?;
        if read == 0 {
            return Err(format!("GET {path}: the body ended early").into());
        }
        bytes.extend_from_slice(&buffer[..read]);
    }
    let status = text.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    Ok(Raw { status, head, body: length, encoding: header("content-encoding").unwrap_or_else(|| "none".to_owned()) })
}

/// The value of `attribute="..."` in an element's text.
fn attribute<'a>(element: &'a str, attribute: &str) -> Option<&'a str> {
    let (_, rest) = element.split_once(&format!(r#" {attribute}=""#))?;
    rest.split('"').next()
}

/// What a page makes the browser fetch: its stylesheets, scripts and images on this origin,
/// and `/favicon.ico` when no `<link rel="icon">` names another.
fn subresources(html: &str) -> Vec<(String, &'static str)> {
    let mut found: Vec<(String, &'static str)> = Vec::new();
    let mut icon = false;
    for (tag, name, accept) in [
        ("<link", "href", "text/css,*/*;q=0.1"),
        ("<script", "src", "*/*"),
        ("<img", "src", "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"),
    ] {
        for part in html.split(tag).skip(1) {
            let element = part.split('>').next().unwrap_or_default();
            let rel = attribute(element, "rel").unwrap_or_default();
            if tag == "<link" && rel.contains("icon") {
                icon = true;
            } else if tag == "<link" && rel != "stylesheet" {
                continue;
            }
            if let Some(path) = attribute(element, name).filter(|path| path.starts_with('/'))
                && !found.iter().any(|(seen, _)| seen == path)
            {
                found.push((path.to_owned(), accept));
            }
        }
    }
    if !icon {
        found.push(("/favicon.ico".to_owned(), "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"));
    }
    found
}

/// A cold load of a page: the page, then what it names.
struct Transfer {
    page: Raw,
    /// Each subresource: its path and answer.
    parts: Vec<(String, Raw)>,
}

impl Transfer {
    fn of(server: &Server, cookie: &str, path: &str, html: &str) -> Res<Self> {
        let accept = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";
        let page = raw_get(server.address(), path, cookie, accept)?;
        if page.status != 200 {
            return Err(format!("GET {path} (cold load): {}", page.status).into());
        }
        let mut parts = Vec::new();
        for (part, accept) in subresources(html) {
            let answer = raw_get(server.address(), &part, cookie, accept)?;
            if answer.status != 200 && part != "/favicon.ico" {
                return Err(format!("GET {part} (named by {path}): {}", answer.status).into());
            }
            parts.push((part, answer));
        }
        Ok(Self { page, parts })
    }

    fn total(&self) -> usize {
        self.page.head + self.page.body + self.parts.iter().map(|(_, raw)| raw.head + raw.body).sum::<usize>()
    }

    /// `/ui/assets/console.css 2.9 KiB (none), ...`.
    fn parts(&self) -> String {
        let each: Vec<String> = self
            .parts
            .iter()
            .map(|(path, raw)| format!("{path} {} {:.1} KiB ({})", raw.status, kib(raw.head + raw.body), raw.encoding))
            .collect();
        each.join(", ")
    }
}

fn kib(bytes: usize) -> f64 {
    bytes as f64 / 1024.0
}

// ---------------------------------------------------------------------------------------------
// One store

struct Line {
    store: Kind,
    page: Page,
    requests: usize,
    server: Stats,
    client: Stats,
    transfer: Transfer,
}

async fn bench_store(kind: Kind, bin: &Path, options: &Options) -> Res<Vec<Line>> {
    let dir = tempfile::Builder::new().prefix("anycloud-console-bench-").tempdir_in(&options.dir)?;
    let data_dir = dir.path().join("data");
    let log = dir.path().join("api.log");
    let database = if kind == Kind::Postgres { Some(runs::create_database("bench_console").await?) } else { None };
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

/// Makes the schema, loads the data, and answers what the requests pick from.
async fn prepare(
    kind: Kind,
    bin: &Path,
    options: &Options,
    data_dir: &Path,
    url: Option<&str>,
    log: &Path,
) -> Res<Loaded> {
    let store = kind.name();
    let mut server = Server::start(bin, data_dir, url, log)?;
    server.stop()?;
    println!("[{store}] the API made its schema and stopped");
    let mut conn = Conn::open(kind, data_dir, url).await?;
    let runs = runs::load(&mut conn, kind, options.runs).await?;
    let fleet = fleet::load(&mut conn, kind, options.deployments).await?;
    println!("[{store}] {}", conn.describe().await?);
    println!("[{store}] {}", conn.schema().await?);
    let seqs = conn.texts("SELECT CAST(MIN(seq) AS TEXT) || ' ' || CAST(MAX(seq) AS TEXT) FROM engine_runs").await?;
    let seqs = seqs.first().and_then(|both| both.split_once(' ')).ok_or("no seq")?;
    let seqs = (seqs.0.parse()?, seqs.1.parse()?);
    conn.close().await?;
    Ok(Loaded { runs, fleet, seqs })
}

async fn bench_on(
    kind: Kind,
    bin: &Path,
    options: &Options,
    data_dir: &Path,
    url: Option<&str>,
    log: &Path,
) -> Res<Vec<Line>> {
    let store = kind.name();
    let loaded = prepare(kind, bin, options, data_dir, url, log).await?;
    let mut server = Server::start(bin, data_dir, url, log)?;
    println!("[{store}] the API listens on {} again", server.url);
    let token = std::fs::read_to_string(data_dir.join("token"))?.trim().to_owned();
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()?;
    let cookie = sign_in(&client, &server, &token).await?;
    println!("[{store}] signed in: POST /v1/console/codes, GET /ui/sign-in?code= set anycloud_console");
    let mut lines = Vec::new();
    for page in Page::ALL {
        if page == Page::ApiDocs {
            let answer = client.get(format!("{}/ui/api", server.url)).header(COOKIE, &cookie).send().await?;
            if answer.status() != reqwest::StatusCode::OK {
                println!(
                    "[{store}] {:<30} absent: GET /ui/api answered {}; not measured",
                    page.name(),
                    answer.status()
                );
                continue;
            }
        }
        let before = load_average();
        let figures = measure(&client, &server, &cookie, &loaded, page, options).await?;
        let transfer = Transfer::of(&server, &cookie, &figures.first.0, &figures.first.1)?;
        let (mut server_ms, mut client_ms) = (figures.server, figures.client);
        let line = Line {
            store: kind,
            page,
            requests: server_ms.len(),
            server: Stats::of(&mut server_ms),
            client: Stats::of(&mut client_ms),
            transfer,
        };
        print_line(&line, figures.machine_busy, &before);
        lines.push(line);
    }
    server.stop()?;
    Ok(lines)
}

fn print_line(line: &Line, machine_busy: f64, before: &str) {
    let page = &line.transfer.page;
    println!(
        "[{}] {:<30} server p50 {:>6.3} p99 {:>6.3} max {:>7.3} ms | client p50 {:>6.3} p99 {:>6.3} max {:>7.3} ms \
         | {} requests, machine {machine_busy:.2} of {} cores busy, load {before} -> {} | p99 < {TARGET_P99_MS} ms {}",
        line.store.name(),
        line.page.name(),
        line.server.p50,
        line.server.p99,
        line.server.max,
        line.client.p50,
        line.client.p99,
        line.client.max,
        line.requests,
        cores(),
        load_average(),
        verdict(line.server.p99 < TARGET_P99_MS),
    );
    println!(
        "[{}] {:<30} cold load {:.1} KiB: page {:.1} KiB (head {} B, body {} B, encoding {}), {} | < {} KiB {}",
        line.store.name(),
        "",
        kib(line.transfer.total()),
        kib(page.head + page.body),
        page.head,
        page.body,
        page.encoding,
        line.transfer.parts(),
        TARGET_TRANSFER / 1024,
        verdict(line.transfer.total() < TARGET_TRANSFER),
    );
}

fn summary(lines: &[Line]) {
    println!();
    println!("== summary: server time (Server-Timing) and client time (loopback), ms; a cold load's bytes ==");
    println!(
        "| store | page | requests | server p50 | server p99 | server max | client p50 | client p99 | client max | \
         server p99 < {TARGET_P99_MS} ms | page | cold load | < {} KiB |",
        TARGET_TRANSFER / 1024
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for line in lines {
        let page = &line.transfer.page;
        println!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {:.1} KiB | {:.1} KiB | {} |",
            line.store.name(),
            line.page.name(),
            line.requests,
            line.server.p50,
            line.server.p99,
            line.server.max,
            line.client.p50,
            line.client.p99,
            line.client.max,
            verdict(line.server.p99 < TARGET_P99_MS),
            kib(page.head + page.body),
            kib(line.transfer.total()),
            verdict(line.transfer.total() < TARGET_TRANSFER),
        );
    }
}

fn run(options: &Options) -> Res<()> {
    let bin = find_binary()?;
    println!(
        "anycloud console benchmark: every page of /ui with {} finished runs and {} deployments",
        options.runs, options.deployments
    );
    println!("machine: {}", machine());
    println!("binary: {}", bin.display());
    println!(
        "{} requests per page after {} of warm-up, one at a time over one keep-alive connection",
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
        println!("console benchmark: run it with `cargo bench -p anycloud --bench console`");
        return;
    }
    if let Err(err) = Options::parse(&args).and_then(|options| run(&options)) {
        eprintln!("console benchmark failed: {err}");
        std::process::exit(1);
    }
}
