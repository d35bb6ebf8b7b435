//! Readiness, checked by the kubelet on every pass over a running container (every 250 ms,
//! rather than the probe's `periodSeconds`; one failure makes it not ready, one success ready):
//!
//! - a `readinessProbe` decides if the container has one: `tcpSocket` (a TCP connect),
//!   `httpGet` (an HTTP/1.0 `GET` whose status is 200 to 399), both to the Pod's address and the
//!   host port of the probe's port (see [`super::network`]), after `initialDelaySeconds`, within
//!   `timeoutSeconds` (1 s by default); an `exec` or `grpc` probe is not simulated (ready);
//! - else a container that declares `ports` is ready once its process accepts a TCP connection
//!   on the host port of its first one (a real cluster would call it ready at once; the
//!   simulation is stricter, so that "ready" means "serves");
//! - else it is ready as soon as it runs.
//!
//! A failure says what the probe saw, as the kubelet's prober words it: `dial tcp IP:PORT:
//! connect: connection refused` (tcpSocket, and the implicit port check), `Get
//! "http://IP:PORT/PATH": dial tcp IP:PORT: connect: connection refused` or `HTTP probe failed
//! with statuscode: N` (httpGet); the kubelet reports it in an `Unhealthy` event (`Readiness probe
//! failed: ...`). `IP:PORT` is the Pod's address and the host port the app is given as `$PORT`
//! (where a real cluster dials `podIP:containerPort`).
//!
//! Connects have short timeouts and run on tokio: a pass never blocks the runtime.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{network, time};

/// How long a connect may take (loopback: it is refused or accepted at once).
const CONNECT: Duration = Duration::from_millis(300);

/// What a readiness check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// Ready.
    Ready,
    /// Not checked yet (`initialDelaySeconds`): not ready, nothing to report.
    Waiting,
    /// The probe failed; what it saw, in the kubelet's prober's words (`dial tcp IP:PORT:
    /// connect: connection refused`), for its `Unhealthy` event.
    Failed(String),
}

/// Whether a running container, started at `started` (seconds since the epoch), is ready.
pub(crate) async fn ready(pod: &Value, container: &Value, started: i64) -> Readiness {
    let ip = network::pod_ip(pod["metadata"]["uid"].as_str().unwrap_or_default());
    let probe = &container["readinessProbe"];
    if probe.is_object() {
        if time::now_seconds() < started + probe["initialDelaySeconds"].as_i64().unwrap_or(0) {
            return Readiness::Waiting;
        }
        let timeout = Duration::from_secs(probe["timeoutSeconds"].as_u64().unwrap_or(1).max(1));
        if let Some(tcp) = probe.get("tcpSocket") {
            let Some(port) = network::host_port(pod, container, &tcp["port"]) else {
                return Readiness::Failed(format!("unknown port {}", tcp["port"]));
            };
            return verdict(dial(&ip, port).await.map(drop));
        }
        if let Some(http) = probe.get("httpGet") {
            let Some(port) = network::host_port(pod, container, &http["port"]) else {
                return Readiness::Failed(format!("unknown port {}", http["port"]));
            };
            let path = http["path"].as_str().unwrap_or("/");
            let url = format!("http://{ip}:{port}{path}");
            let outcome = tokio::time::timeout(timeout, http_get(&ip, port, path)).await.unwrap_or_else(|_| {
                Err(format!(
                    "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                ))
            });
            return verdict(
                outcome.map_err(|err| if err.starts_with("dial tcp") { format!("Get \"{url}\": {err}") } else { err }),
            );
        }
        return Readiness::Ready;
    }
    if container["ports"].as_array().is_some_and(|ports| !ports.is_empty()) {
        let Some(port) = network::first_host_port(pod, container) else {
            return Readiness::Failed("the container's port has no host port".to_owned());
        };
        return verdict(dial(&ip, port).await.map(drop));
    }
    Readiness::Ready
}

fn verdict(outcome: Result<(), String>) -> Readiness {
    match outcome {
        Ok(()) => Readiness::Ready,
        Err(output) => Readiness::Failed(output),
    }
}

/// A TCP connection to `ip:port`, or Go's `net.Dial` error for it (`dial tcp IP:PORT: connect:
/// connection refused`).
async fn dial(ip: &str, port: u16) -> Result<TcpStream, String> {
    match tokio::time::timeout(CONNECT, TcpStream::connect((ip, port))).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(err)) => {
            let cause = match err.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
                std::io::ErrorKind::HostUnreachable => "no route to host".to_owned(),
                std::io::ErrorKind::NetworkUnreachable => "network is unreachable".to_owned(),
                _ => err.to_string(),
            };
            Err(format!("dial tcp {ip}:{port}: connect: {cause}"))
        }
        Err(_) => Err(format!("dial tcp {ip}:{port}: i/o timeout")),
    }
}

/// `GET path` at `ip:port`: Ok for a status from 200 to 399, else the prober's words.
async fn http_get(ip: &str, port: u16, path: &str) -> Result<(), String> {
    let mut stream = dial(ip, port).await?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/1.36\r\n\r\n");
    let url = format!("http://{ip}:{port}{path}");
    if let Err(err) = stream.write_all(request.as_bytes()).await {
        return Err(format!("Get \"{url}\": write tcp {ip}:{port}: {err}"));
    }
    let mut head = [0u8; 16];
    let mut read = 0;
    while read < 12 {
        match stream.read(&mut head[read..]).await {
            Ok(0) => break,
            Err(err) => return Err(format!("Get \"{url}\": read tcp {ip}:{port}: {err}")),
            Ok(n) => read += n,
        }
    }
    if read == 0 {
        return Err(format!("Get \"{url}\": EOF"));
    }
    let line = String::from_utf8_lossy(&head[..read]);
    let code: u16 = line.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    if (200..400).contains(&code) { Ok(()) } else { Err(format!("HTTP probe failed with statuscode: {code}")) }
}
