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
//! Connects have short timeouts and run on tokio: a pass never blocks the runtime.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{network, time};

/// How long a connect may take (loopback: it is refused or accepted at once).
const CONNECT: Duration = Duration::from_millis(300);

/// Whether a running container, started at `started` (seconds since the epoch), is ready.
pub(crate) async fn ready(pod: &Value, container: &Value, started: i64) -> bool {
    let ip = network::pod_ip(pod["metadata"]["uid"].as_str().unwrap_or_default());
    let probe = &container["readinessProbe"];
    if probe.is_object() {
        if time::now_seconds() < started + probe["initialDelaySeconds"].as_i64().unwrap_or(0) {
            return false;
        }
        let timeout = Duration::from_secs(probe["timeoutSeconds"].as_u64().unwrap_or(1).max(1));
        if let Some(tcp) = probe.get("tcpSocket") {
            let Some(port) = network::host_port(pod, container, &tcp["port"]) else { return false };
            return connects(&ip, port).await;
        }
        if let Some(http) = probe.get("httpGet") {
            let Some(port) = network::host_port(pod, container, &http["port"]) else { return false };
            let path = http["path"].as_str().unwrap_or("/");
            return tokio::time::timeout(timeout, http_ok(&ip, port, path)).await.unwrap_or(false);
        }
        return true;
    }
    if container["ports"].as_array().is_some_and(|ports| !ports.is_empty()) {
        let Some(port) = network::first_host_port(pod, container) else { return false };
        return connects(&ip, port).await;
    }
    true
}

/// Whether something accepts a TCP connection at `ip:port`.
pub(crate) async fn connects(ip: &str, port: u16) -> bool {
    matches!(tokio::time::timeout(CONNECT, TcpStream::connect((ip, port))).await, Ok(Ok(_)))
}

/// Whether `GET path` at `ip:port` answers with a status from 200 to 399.
async fn http_ok(ip: &str, port: u16, path: &str) -> bool {
    let Ok(Ok(mut stream)) = tokio::time::timeout(CONNECT, TcpStream::connect((ip, port))).await else {
        return false;
    };
    let request = format!("GET {path} HTTP/1.0\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/1.34\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut head = [0u8; 16];
    let mut read = 0;
    while read < 12 {
        match stream.read(&mut head[read..]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
    let line = String::from_utf8_lossy(&head[..read]);
    let code: u16 = line.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    (200..400).contains(&code)
}
