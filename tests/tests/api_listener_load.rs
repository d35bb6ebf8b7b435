//! The API's listener under abuse, against the real `anycloud` binary serving HTTPS
//! (`cli/src/server/listener.rs`; docs/security.md, "An attacker on the network"):
//!
//! - 2,000 connections that open and send nothing, and 200 that finish their TLS handshake and
//!   then trickle a request header a byte a second. Meanwhile a real request (a new connection,
//!   its handshake and `GET /v1/status`) is answered within 1 s, every second; the API's CPU
//!   (utime + stime of `/proc/PID/stat`) stays under half a core over the whole window; every one
//!   of those connections is closed by its timeout (`TLS_HANDSHAKE_TIMEOUT` for the silent ones,
//!   `HEADER_READ_TIMEOUT` after the handshake for the trickling ones), not before and not much
//!   after, and so is a kept-alive connection left idle after its answer; then the API holds no
//!   more open files than before.
//! - With every one of its connection slots taken, one more connection is closed at once; when
//!   one of them leaves, the next is held and served.
//! - With its limit on open files lowered under it, the API cannot accept and does not spin: its
//!   CPU stays near zero while connections wait, it says so once in its log, and once it may open
//!   files again it answers.
//!
//! The two tests take one at a time (each measures the API's CPU on a shared machine).
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anycloud_cli::listener::{ACCEPT_PAUSE_MAX, HEADER_READ_TIMEOUT, TLS_HANDSHAKE_TIMEOUT};
use anycloud_tests::e2e::{self, Api, ApiOptions};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Connections that open and send nothing.
const SILENT: usize = 2000;
/// Connections that trickle a header, a byte a second.
const TRICKLING: usize = 200;
/// How long a real request may take, connection and handshake included.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);
/// The most CPU the API may use meanwhile, in cores.
const CPU_AT_MOST: f64 = 0.5;
/// How late after its timeout a connection may be closed.
const LATE: Duration = Duration::from_secs(3);
/// How early before its timeout (the client's clock starts before the server's accept).
const EARLY: Duration = Duration::from_millis(250);
/// What `/proc/PID/stat` counts CPU time in: `USER_HZ`, 100 on Linux whatever the kernel's `HZ`.
const TICKS_PER_SECOND: f64 = 100.0;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// An HTTPS API with a self-signed certificate for 127.0.0.1, and a client that pins it.
struct Target {
    api: Api,
    client: Client,
    _dir: tempfile::TempDir,
}

/// Connections to the API.
#[derive(Clone)]
struct Client {
    addr: String,
    token: String,
    connector: TlsConnector,
}

impl Target {
    fn start(id: &str) -> Self {
        raise_open_files(SILENT + TRICKLING + 1000);
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().self_signed(&key).unwrap();
        let (cert_path, key_path) = (dir.path().join("api.crt"), dir.path().join("api.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        let api = Api::start_opts(ApiOptions {
            id: id.into(),
            args: vec![
                "--tls-cert".into(),
                cert_path.display().to_string(),
                "--tls-key".into(),
                key_path.display().to_string(),
            ],
            ..ApiOptions::default()
        });
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let addr = api.url.trim_start_matches("https://").to_owned();
        let token = api.token();
        Self { api, client: Client { addr, token, connector: TlsConnector::from(Arc::new(config)) }, _dir: dir }
    }
}

impl Client {
    async fn tls(&self) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(&self.addr).await?;
        self.connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await
    }

    /// A real request on a new connection: how long it took, handshake included.
    async fn real_request(&self) -> Duration {
        let started = Instant::now();
        let mut tls = self.tls().await.unwrap();
        let request = format!(
            "GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            self.token
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = tls.read_to_end(&mut answer).await;
        let took = started.elapsed();
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 200") && text.contains("\"engine_owner\""), "{text}");
        took
    }

    /// Opens `count` connections to the API whose process is `pid`, a batch at a time, each batch
    /// taken by the API before the next: a connect ends once the kernel has queued the
    /// connection, not once the API accepted it, and a full listen backlog drops SYNs, which a
    /// client (the measured requests' too) sends again only a second later.
    async fn connect_many(&self, count: usize, pid: u32) -> Vec<(TcpStream, Instant)> {
        let files_before = settled_open_files(pid).await;
        let mut connected = Vec::new();
        while connected.len() < count {
            let batch = (count - connected.len()).min(100);
            let opened = futures::future::join_all((0..batch).map(|_| async {
                let tcp = TcpStream::connect(&self.addr).await.unwrap();
                (tcp, Instant::now())
            }))
            .await;
            connected.extend(opened);
            let deadline = Instant::now() + Duration::from_secs(5);
            while open_files(pid) < files_before + connected.len() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(
                open_files(pid) >= files_before + connected.len(),
                "the API did not take {} connections within 5 s: it holds {} files ({files_before} before)",
                connected.len(),
                open_files(pid)
            );
        }
        connected
    }

    /// How long a connection that sends nothing stays open after it connected.
    async fn silent((mut tcp, connected): (TcpStream, Instant)) -> Duration {
        let mut buffer = [0u8; 256];
        let closed = async {
            loop {
                match tcp.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT * 3, closed).await {
            Ok(()) => connected.elapsed(),
            Err(_) => Duration::MAX,
        }
    }

    /// How long a connection that trickles a header after its handshake stays open; an error if
    /// it got an answer.
    async fn trickling(&self) -> Result<Duration, String> {
        let tls = self.tls().await.map_err(|err| format!("handshake: {err}"))?;
        let ready = Instant::now();
        let (mut reader, mut writer) = tokio::io::split(tls);
        let writing = async {
            for byte in b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n\r\n" {
                if writer.write_all(&[*byte]).await.is_err() || writer.flush().await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            std::future::pending::<()>().await;
        };
        let reading = async {
            let mut answer = Vec::new();
            let _ = reader.read_to_end(&mut answer).await;
            answer
        };
        let closed = async {
            tokio::select! {
                answer = reading => answer,
                () = writing => Vec::new(),
            }
        };
        match tokio::time::timeout(HEADER_READ_TIMEOUT * 3, closed).await {
            Ok(answer) if answer.is_empty() => Ok(ready.elapsed()),
            Ok(answer) => Err(format!("answered: {}", String::from_utf8_lossy(&answer))),
            Err(_) => Ok(Duration::MAX),
        }
    }

    /// How long a kept-alive connection stays open after its answer.
    async fn kept_alive(&self) -> Duration {
        let mut tls = self.tls().await.unwrap();
        tls.write_all(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let mut buffer = [0u8; 4096];
        let answered = loop {
            let read = tls.read(&mut buffer).await.unwrap();
            assert!(read > 0, "closed before answering: {}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&answer).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length:").map(str::to_owned))
                    .and_then(|length| length.trim().parse::<usize>().ok())
                    .unwrap_or_else(|| panic!("no Content-Length: {head}"));
                if body.len() >= length {
                    assert!(head.starts_with("HTTP/1.1 200"), "{text}");
                    break Instant::now();
                }
            }
        };
        let closed = async {
            loop {
                match tls.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        match tokio::time::timeout(HEADER_READ_TIMEOUT * 3, closed).await {
            Ok(()) => answered.elapsed(),
            Err(_) => Duration::MAX,
        }
    }
}

/// Raises this process's soft limit on open files to at least `needed` (its children, the API
/// among them, inherit it).
fn raise_open_files(needed: usize) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let files = getrlimit(Resource::Nofile);
    if files.current.is_some_and(|current| current < needed as u64) {
        setrlimit(Resource::Nofile, Rlimit { current: files.maximum, maximum: files.maximum }).unwrap();
    }
    let now = getrlimit(Resource::Nofile).current;
    assert!(
        now.is_none_or(|current| current >= needed as u64),
        "this test needs {needed} open files and may open {now:?}: raise the hard limit (ulimit -Hn)"
    );
}

/// CPU time the process has used, in ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The files the API holds once the connection of a request just answered is gone: the
/// client reads the answer to its end before the server's task has dropped the socket.
async fn settled_open_files(pid: u32) -> usize {
    let mut last = open_files(pid);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = open_files(pid);
        if now == last {
            return now;
        }
        last = now;
    }
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Whether `open` is within the window of `timeout`.
fn closed_by(open: Duration, timeout: Duration) -> bool {
    open >= timeout.saturating_sub(EARLY) && open <= timeout + LATE
}

fn spread(durations: &[Duration]) -> String {
    let min = durations.iter().min().copied().unwrap_or_default();
    let max = durations.iter().max().copied().unwrap_or_default();
    format!("{:.2}-{:.2} s", min.as_secs_f64(), max.as_secs_f64())
}

#[test]
fn silent_and_trickling_connections_are_closed_by_their_timeouts_while_the_api_answers() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let api = Target::start("load");
    let pid = api.api.pid();
    let target = api.client.clone();
    runtime().block_on(async {
        target.real_request().await;
        let files_before = settled_open_files(pid).await;
        let cpu_before = cpu_ticks(pid);
        let started = Instant::now();
        let silent: Vec<_> =
            target.connect_many(SILENT, pid).await.into_iter().map(|tcp| tokio::spawn(Client::silent(tcp))).collect();
        let trickling: Vec<_> = (0..TRICKLING)
            .map(|_| {
                let target = target.clone();
                tokio::spawn(async move { target.trickling().await })
            })
            .collect();
        let kept = {
            let target = target.clone();
            tokio::spawn(async move { target.kept_alive().await })
        };
        // The real requests come from a thread and runtime of their own, so that what they
        // measure is the API, not this process's clients of it.
        let measured = {
            let target = target.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async {
                    let mut latencies = Vec::new();
                    let mut files_held = 0;
                    for second in 1..=9 {
                        tokio::time::sleep_until((started + Duration::from_secs(second)).into()).await;
                        latencies.push(target.real_request().await);
                        files_held = files_held.max(open_files(pid));
                    }
                    (latencies, files_held)
                })
            })
        };
        let silent: Vec<Duration> = futures::future::join_all(silent).await.into_iter().map(Result::unwrap).collect();
        let trickling: Vec<Duration> = futures::future::join_all(trickling)
            .await
            .into_iter()
            .map(|result| result.unwrap().unwrap_or_else(|err| panic!("a trickling connection: {err}")))
            .collect();
        let kept = kept.await.unwrap();
        let (latencies, files_held) = measured.join().unwrap();
        let window = started.elapsed();
        let cpu = (cpu_ticks(pid) - cpu_before) as f64 / TICKS_PER_SECOND / window.as_secs_f64();
        let slowest = latencies.iter().max().copied().unwrap_or_default();
        eprintln!(
            "{SILENT} silent connections closed after {} (TLS handshake timeout {} s); {TRICKLING} trickling ones \
             {} after their handshake (header timeout {} s); a kept-alive one {:.2} s after its answer; the API held \
             at most {files_held} open files ({files_before} before); real requests answered in {:?} (slowest {:.0} \
             ms); the API's CPU over {:.1} s: {:.3} of a core",
            spread(&silent),
            TLS_HANDSHAKE_TIMEOUT.as_secs(),
            spread(&trickling),
            HEADER_READ_TIMEOUT.as_secs(),
            kept.as_secs_f64(),
            latencies.iter().map(|latency| latency.as_millis()).collect::<Vec<_>>(),
            slowest.as_secs_f64() * 1000.0,
            window.as_secs_f64(),
            cpu
        );
        assert!(
            files_held >= files_before + SILENT + TRICKLING,
            "the API held {files_held} files with {SILENT} + {TRICKLING} connections open ({files_before} before): \
             they were not all accepted"
        );
        assert!(slowest <= ANSWER_WITHIN, "a real request took {slowest:?}: {latencies:?}");
        assert!(cpu < CPU_AT_MOST, "the API used {cpu:.3} of a core");
        let early_or_late = silent.iter().filter(|open| !closed_by(**open, TLS_HANDSHAKE_TIMEOUT)).count();
        assert_eq!(early_or_late, 0, "silent connections closed outside their timeout: {}", spread(&silent));
        let early_or_late = trickling.iter().filter(|open| !closed_by(**open, HEADER_READ_TIMEOUT)).count();
        assert_eq!(early_or_late, 0, "trickling connections closed outside their timeout: {}", spread(&trickling));
        assert!(closed_by(kept, HEADER_READ_TIMEOUT), "a kept-alive connection closed {kept:?} after its answer");
        // Every connection's file is given back.
        let deadline = Instant::now() + Duration::from_secs(5);
        while open_files(pid) > files_before + 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(open_files(pid) <= files_before + 2, "{} open files, {files_before} before", open_files(pid));
        target.real_request().await;
    });
    let logs = api.api.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Connections opened at once before the API is let take them.
const BATCH: usize = 256;

#[test]
fn beyond_its_connection_limit_the_api_closes_at_once_and_a_failing_accept_does_not_spin() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let api = Target::start("limit");
    let pid = api.api.pid();
    let target = api.client.clone();
    // The listener says its limit as it starts accepting, a moment after the API says it started.
    let said = |logs: String| -> Option<usize> {
        logs.split("accepting at most ").nth(1)?.split_whitespace().next()?.parse().ok()
    };
    let limit: usize =
        e2e::wait_until(Duration::from_secs(10), "the API to say its connection limit", || said(api.api.logs()));
    raise_open_files(limit + 1000);
    runtime().block_on(async {
        let files_before = settled_open_files(pid).await;
        let mut held = Vec::new();
        let opening = Instant::now();
        while held.len() < limit {
            // A batch at a time, each taken by the API before the next: a full listen backlog drops
            // SYNs, which the client sends again only a second later, and the first connections
            // would reach their handshake timeout (10 s) before the last are in.
            for _ in 0..BATCH.min(limit - held.len()) {
                held.push(TcpStream::connect(&target.addr).await.unwrap());
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while open_files(pid) < files_before + held.len() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while open_files(pid) < files_before + limit && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            open_files(pid) >= files_before + limit,
            "the API did not take {limit} connections: it holds {} files ({files_before} before), {:?} after the first",
            open_files(pid),
            opening.elapsed()
        );
        let mut buffer = [0u8; 16];
        let mut one_more = TcpStream::connect(&target.addr).await.unwrap();
        let asked = Instant::now();
        let read = tokio::time::timeout(Duration::from_secs(2), one_more.read(&mut buffer)).await;
        assert!(matches!(read, Ok(Ok(0) | Err(_))), "one connection past {limit} was not closed: {read:?}");
        let closed_after = asked.elapsed();
        // One leaves: the next is held, then served.
        drop(held.pop());
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut next = TcpStream::connect(&target.addr).await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(1), next.read(&mut buffer)).await;
        assert!(read.is_err(), "the connection after one left was not held: {read:?}");
        drop(next);
        drop(held);
        eprintln!(
            "with {limit} connections open, one more was closed after {:.0} ms",
            closed_after.as_secs_f64() * 1000.0
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while open_files(pid) > files_before + 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        target.real_request().await;

        // The API may open only a few more files: its accepts fail while connections wait.
        use rustix::process::{Pid, Resource, Rlimit, getrlimit, prlimit};
        let api_pid = Pid::from_raw(i32::try_from(pid).unwrap());
        let files = getrlimit(Resource::Nofile);
        let few = (open_files(pid) + 4) as u64;
        prlimit(api_pid, Resource::Nofile, Rlimit { current: Some(few), maximum: files.maximum }).unwrap();
        let mut waiting = Vec::new();
        for _ in 0..50 {
            waiting.push(TcpStream::connect(&target.addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let cpu_before = cpu_ticks(pid);
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let cpu = (cpu_ticks(pid) - cpu_before) as f64 / TICKS_PER_SECOND / started.elapsed().as_secs_f64();
        prlimit(api_pid, Resource::Nofile, files).unwrap();
        eprintln!("with accepts failing (EMFILE) and 50 connections waiting, the API used {cpu:.3} of a core");
        assert!(cpu < 0.1, "the API spun on a failing accept: {cpu:.3} of a core");
        let logs = api.api.logs();
        let said = logs.matches("accepting a connection failed").count();
        assert!((1..=3).contains(&said), "the API said {said} times that an accept failed:\n{logs}");
        assert!(logs.contains("Too many open files"), "{logs}");
        // It may open files again: it accepts what waited, then answers.
        drop(waiting);
        let answered = tokio::time::timeout(ANSWER_WITHIN + ACCEPT_PAUSE_MAX, target.real_request()).await;
        assert!(answered.is_ok(), "no answer after the limit was raised again");
    });
}
