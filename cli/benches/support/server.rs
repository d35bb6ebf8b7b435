//! The real `anycloud api serve` process of a benchmark, the binary it runs, and the figures
//! taken of its answers. Shared by `cli/benches/api.rs` and `cli/benches/console.rs` (included
//! with `#[path]`).
// Each benchmark uses a part of this module.
#![allow(dead_code)]

use std::error::Error;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

pub struct Server {
    child: Child,
    pub url: String,
    log: PathBuf,
}

impl Server {
    pub fn start(bin: &Path, data_dir: &Path, database_url: Option<&str>, log: &Path) -> Res<Self> {
        let stderr = File::options().create(true).append(true).open(log)?;
        let mut command = Command::new(bin);
        command.args(["api", "serve", "--id", "bench", "--port", "0", "--data-dir"]).arg(data_dir);
        if let Some(url) = database_url {
            command.args(["--database-url", url]);
        }
        let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr).spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.split_once("listening on ").map(|(_, rest)| rest) {
                    let url = rest.split_whitespace().next().unwrap_or_default().to_owned();
                    let _ = sender.send(url);
                }
            }
        });
        let mut server = Self { child, url: String::new(), log: log.to_owned() };
        match receiver.recv_timeout(Duration::from_secs(120)) {
            Ok(url) => server.url = url,
            Err(_) => {
                let _ = server.child.kill();
                let _ = server.child.wait();
                return Err(format!("the API did not start; its log:\n{}", server.log_tail()).into());
            }
        }
        // The API prints its address before it serves (and before it handles SIGTERM): wait
        // until it answers.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.healthy() {
            if Instant::now() > deadline {
                return Err(format!("the API never answered /v1/health; its log:\n{}", server.log_tail()).into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(server)
    }

    /// `host:port` of the API.
    pub fn address(&self) -> &str {
        self.url.strip_prefix("http://").unwrap_or(&self.url)
    }

    /// `GET /v1/health` answers 200.
    fn healthy(&self) -> bool {
        let Some(address) = self.url.strip_prefix("http://") else { return false };
        let Ok(mut stream) = TcpStream::connect(address) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut answer = String::new();
        stream.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").is_ok()
            && stream.read_to_string(&mut answer).is_ok()
            && answer.starts_with("HTTP/1.1 200")
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGTERM, then wait for a clean exit (the engine releases its leases).
    pub fn stop(&mut self) -> Res<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    return Err(format!("the API exited with {status}; its log:\n{}", self.log_tail()).into());
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err("the API did not stop within 60 s of SIGTERM; killed it".into())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `ANYCLOUD_BIN`, else the `anycloud` next to this executable.
pub fn find_binary() -> Res<PathBuf> {
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
    Err(format!(
        "no `anycloud` binary next to {}: build it with `cargo build -p anycloud --release`, or set ANYCLOUD_BIN",
        exe.display()
    )
    .into())
}

// ---------------------------------------------------------------------------------------------
// Figures

/// The server's own time of an answer: its `Server-Timing: app;dur=<ms>` header.
pub fn server_ms(headers: &reqwest::header::HeaderMap) -> Option<f64> {
    headers
        .get("server-timing")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').find_map(|part| part.trim().strip_prefix("dur=")))
        .and_then(|ms| ms.parse::<f64>().ok())
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub struct Stats {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Stats {
    /// By nearest rank.
    pub fn of(values: &mut [f64]) -> Self {
        values.sort_by(f64::total_cmp);
        Self { p50: percentile(values, 0.50), p99: percentile(values, 0.99), max: percentile(values, 1.0) }
    }
}
