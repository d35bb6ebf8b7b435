//! A fault-injecting HTTP reverse proxy on 127.0.0.1, put in front of a fake provider (moto's EC2
//! query API, the fake Compute server) by giving its URL as a credential's `--endpoint`.
//!
//! Each request either goes through to the peer untouched or meets one fault, drawn at the
//! configured rate of each kind ([`FaultPlan`]):
//! - [`FaultKind::Throttle`]: answered without reaching the peer, in the provider's own words
//!   (EC2: HTTP 503 `RequestLimitExceeded`; Compute: HTTP 429 `rateLimitExceeded`);
//! - [`FaultKind::ServerError`]: likewise (EC2: 500 `InternalError`; Compute: 503 `backendError`);
//! - [`FaultKind::Timeout`]: held for [`FaultPlan::hold`] and then dropped unanswered, as a call
//!   that hangs past the client's timeout (or takes very long) looks to the client;
//! - [`FaultKind::Reset`]: the connection is reset without an answer, the peer never asked;
//! - [`FaultKind::Latency`]: forwarded after [`FaultPlan::latency`];
//! - [`FaultKind::LostAnswer`]: mutating calls only: forwarded, the peer acts, and then the
//!   connection is reset instead of answering. This is the fault a non-idempotent create fails.
//!
//! The draw is a pure function of the seed, the request (method, path, body) and how many times
//! that same request has been seen, so a run with the same seed meets the same faults at the same
//! calls however the requests interleave (as far as the requests themselves repeat: ids a peer
//! makes up differ from run to run). [`FaultProxy::counts`] says how many of each were injected.
//!
//! It also keeps the head of every request ([`FaultProxy::seen`]), and can answer for S3 what
//! moto does not check: a call that names an `x-amz-expected-bucket-owner` other than the
//! bucket's owner ([`FaultProxy::set_bucket_owner`]) is refused 403 `AccessDenied`, as S3 refuses
//! it, without reaching moto.
//!
//! The proxy speaks HTTP/1.1 with `Content-Length` bodies (what the AWS SDK and the Google client
//! send to an `http://` endpoint), keeps connections alive, and forwards through its own client.
#![allow(clippy::missing_panics_doc)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Whose error shapes the proxy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// EC2's query API (moto): `<Response><Errors><Error><Code>...` XML.
    Ec2,
    /// Compute Engine's REST API (the fake Compute server): Google's JSON error shape.
    Compute,
}

/// The kinds of fault the proxy injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// The provider's throttling error.
    Throttle,
    /// The provider's own internal failure (5xx).
    ServerError,
    /// Held past the client's patience, then dropped unanswered.
    Timeout,
    /// The connection reset without an answer; the peer is never asked.
    Reset,
    /// Forwarded late.
    Latency,
    /// A mutating call forwarded (the peer acts) whose answer is then lost.
    LostAnswer,
}

impl FaultKind {
    /// Every kind, in the order the draw walks them.
    pub const ALL: [Self; 6] =
        [Self::Throttle, Self::ServerError, Self::Timeout, Self::Reset, Self::Latency, Self::LostAnswer];

    /// The kind's name in a report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Throttle => "throttle",
            Self::ServerError => "server-error",
            Self::Timeout => "timeout",
            Self::Reset => "reset",
            Self::Latency => "latency",
            Self::LostAnswer => "lost-answer",
        }
    }
}

/// What the proxy injects, and how often.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// Makes the draw reproducible.
    pub seed: u64,
    /// The chance of each kind per request; their sum (at most 1) is the chance of any fault.
    pub rates: BTreeMap<FaultKind, f64>,
    /// How long a [`FaultKind::Timeout`] holds a request before dropping it.
    pub hold: Duration,
    /// How late a [`FaultKind::Latency`] forwards.
    pub latency: Duration,
}

impl FaultPlan {
    /// `total` (0.3 for 30%) spread over the kinds: throttling and 5xx a quarter each, resets and
    /// lost answers a sixth each, timeouts and latency a twelfth each. Timeouts hold 3 s, latency
    /// is 500 ms.
    pub fn spread(seed: u64, total: f64) -> Self {
        let shares = [
            (FaultKind::Throttle, 3.0),
            (FaultKind::ServerError, 3.0),
            (FaultKind::Reset, 2.0),
            (FaultKind::LostAnswer, 2.0),
            (FaultKind::Timeout, 1.0),
            (FaultKind::Latency, 1.0),
        ];
        let sum: f64 = shares.iter().map(|(_, s)| s).sum();
        let rates = shares.iter().map(|&(kind, share)| (kind, total * share / sum)).collect();
        Self { seed, rates, hold: Duration::from_secs(3), latency: Duration::from_millis(500) }
    }

    /// The fault for the `occurrence`-th sighting of a request with this signature, if any.
    fn draw(&self, signature: u64, occurrence: u64) -> Option<FaultKind> {
        let roll = unit(splitmix(self.seed ^ splitmix(signature ^ splitmix(occurrence))));
        let mut threshold = 0.0;
        for kind in FaultKind::ALL {
            threshold += self.rates.get(&kind).copied().unwrap_or(0.0);
            if roll < threshold {
                return Some(kind);
            }
        }
        None
    }
}

/// What the proxy saw and did.
#[derive(Debug, Default)]
struct Record {
    /// Requests seen per signature: the occurrence the next draw uses.
    seen: HashMap<u64, u64>,
    /// Faults injected, by kind.
    injected: BTreeMap<FaultKind, u64>,
    /// Requests seen in all.
    requests: u64,
    /// Whether faults are injected at all (off while a test sets up or checks).
    enabled: bool,
    /// Every request's method, target and headers, in order.
    heads: Vec<SeenRequest>,
    /// S3 buckets and the account that owns each (`set_bucket_owner`).
    owners: HashMap<String, String>,
}

/// The head of a request the proxy saw.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    /// `GET`, `PUT`, ...
    pub method: String,
    /// The path and query.
    pub target: String,
    /// The headers, names as sent.
    pub headers: Vec<(String, String)>,
}

impl SeenRequest {
    /// The value of header `name` (any case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }
}

/// The running proxy: a listener on its own thread and runtime.
pub struct FaultProxy {
    addr: SocketAddr,
    record: Arc<Mutex<Record>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`http://127.0.0.1:PORT`) on a free port of 127.0.0.1, with
    /// faults enabled.
    pub fn start(upstream: &str, dialect: Dialect, plan: FaultPlan) -> Self {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("binding the fault proxy");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the fault proxy's address");
        let record = Arc::new(Mutex::new(Record { enabled: true, ..Record::default() }));
        let (shutdown, mut stop) = tokio::sync::oneshot::channel::<()>();
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            dialect,
            plan,
            record: record.clone(),
            client: reqwest::Client::builder().no_proxy().build().expect("the fault proxy's client"),
        });
        std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("the fault proxy's runtime");
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener).expect("a tokio listener");
                    loop {
                        tokio::select! {
                            _ = &mut stop => break,
                            accepted = listener.accept() => {
                                if let Ok((stream, _)) = accepted {
                                    tokio::spawn(serve_connection(shared.clone(), stream));
                                }
                            }
                        }
                    }
                });
            })
            .expect("spawning the fault proxy");
        Self { addr, record, shutdown: Some(shutdown) }
    }

    /// The endpoint to give the client (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Turns injection on or off (requests are forwarded either way).
    pub fn set_enabled(&self, enabled: bool) {
        self.lock().enabled = enabled;
    }

    /// Faults injected so far, by kind (every kind listed, zeros too).
    pub fn counts(&self) -> BTreeMap<FaultKind, u64> {
        let record = self.lock();
        FaultKind::ALL.iter().map(|&kind| (kind, record.injected.get(&kind).copied().unwrap_or(0))).collect()
    }

    /// Requests seen so far.
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    /// The heads of the requests seen so far, in order.
    pub fn seen(&self) -> Vec<SeenRequest> {
        self.lock().heads.clone()
    }

    /// Says S3 bucket `bucket` (path style, `/{bucket}/...`) belongs to `account`: a request on
    /// it naming another expected owner is refused as S3 refuses it.
    pub fn set_bucket_owner(&self, bucket: &str, account: &str) {
        self.lock().owners.insert(bucket.to_owned(), account.to_owned());
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// What every connection's task shares.
struct Shared {
    upstream: String,
    dialect: Dialect,
    plan: FaultPlan,
    record: Arc<Mutex<Record>>,
    client: reqwest::Client,
}

/// One request as read off the connection.
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    /// Whether the call changes something at the provider (its answer can be lost after the fact).
    fn mutating(&self, dialect: Dialect) -> bool {
        match dialect {
            Dialect::Ec2 => {
                let body = String::from_utf8_lossy(&self.body);
                let action = body.split('&').find_map(|pair| pair.strip_prefix("Action=")).unwrap_or_default();
                !(action.starts_with("Describe") || action.starts_with("Get") || action.starts_with("List"))
            }
            Dialect::Compute => self.method != "GET" && !self.target.split('?').next().unwrap_or("").ends_with("/wait"),
        }
    }

    /// The method, path and body, hashed (FNV-1a): the same call hashes the same in every run.
    fn signature(&self) -> u64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in
            self.method.bytes().chain([0]).chain(self.target.bytes()).chain([0]).chain(self.body.iter().copied())
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }
}

async fn serve_connection(shared: Arc<Shared>, mut stream: TcpStream) {
    let mut buffer = Vec::new();
    loop {
        let Some(request) = read_request(&mut stream, &mut buffer).await else { return };
        let (fault, not_owner) = {
            let mut record = shared.record.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            record.requests += 1;
            record.heads.push(SeenRequest {
                method: request.method.clone(),
                target: request.target.clone(),
                headers: request.headers.clone(),
            });
            let bucket = request.target.trim_start_matches('/').split(['/', '?']).next().unwrap_or_default();
            let not_owner = match (record.owners.get(bucket), request.header("x-amz-expected-bucket-owner")) {
                (Some(owner), Some(expected)) => owner != expected,
                _ => false,
            };
            let signature = request.signature();
            let occurrence = record.seen.entry(signature).or_insert(0);
            *occurrence += 1;
            let drawn = shared.plan.draw(signature, *occurrence);
            let fault = drawn
                .filter(|_| record.enabled)
                .filter(|kind| *kind != FaultKind::LostAnswer || request.mutating(shared.dialect));
            if let Some(kind) = fault {
                *record.injected.entry(kind).or_insert(0) += 1;
            }
            (fault, not_owner)
        };
        let answer = match fault {
            // S3's answer to a call on another account's bucket (a HEAD's carries no body).
            _ if not_owner && request.method == "HEAD" => Some(render(403, "application/xml", b"")),
            _ if not_owner => Some(render(
                403,
                "application/xml",
                b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code>\
                  <Message>Access Denied</Message><RequestId>fault-proxy</RequestId></Error>",
            )),
            Some(FaultKind::Throttle) => Some(error_answer(shared.dialect, FaultKind::Throttle)),
            Some(FaultKind::ServerError) => Some(error_answer(shared.dialect, FaultKind::ServerError)),
            Some(FaultKind::Timeout) => {
                tokio::time::sleep(shared.plan.hold).await;
                None
            }
            Some(FaultKind::Reset) => None,
            Some(FaultKind::Latency) => {
                tokio::time::sleep(shared.plan.latency).await;
                Some(forward(&shared, &request).await)
            }
            Some(FaultKind::LostAnswer) => {
                let _ = forward(&shared, &request).await;
                None
            }
            None => Some(forward(&shared, &request).await),
        };
        let Some(answer) = answer else {
            // A reset rather than an orderly close: the client sees the connection die.
            let _ = stream.set_zero_linger();
            return;
        };
        if stream.write_all(&answer).await.is_err() {
            return;
        }
        if request.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close")) {
            return;
        }
    }
}

/// Reads one request (head and `Content-Length` body); `None` when the connection ends or the
/// request is not one the proxy can relay.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0_u8; 8192];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect();
    if headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v != "identity") {
        return None;
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        let mut chunk = [0_u8; 8192];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    let body = buffer[body_start..body_start + length].to_vec();
    buffer.drain(..body_start + length);
    Some(Request { method, target, headers, body })
}

/// Sends the request to the peer and renders its answer; a peer that fails answers 502.
async fn forward(shared: &Shared, request: &Request) -> Vec<u8> {
    let Ok(method) = reqwest::Method::from_bytes(request.method.as_bytes()) else {
        return render(502, "text/plain", b"bad method");
    };
    let mut outgoing = shared.client.request(method, format!("{}{}", shared.upstream, request.target));
    for (key, value) in &request.headers {
        let hop = ["host", "connection", "content-length", "keep-alive", "transfer-encoding"];
        if !hop.iter().any(|h| key.eq_ignore_ascii_case(h)) {
            outgoing = outgoing.header(key, value);
        }
    }
    let response = match outgoing.body(request.body.clone()).send().await {
        Ok(response) => response,
        Err(err) => return render(502, "text/plain", format!("fault proxy: the peer failed: {err}").as_bytes()),
    };
    let status = response.status().as_u16();
    let headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(key, _)| {
            !matches!(key.as_str(), "connection" | "content-length" | "transfer-encoding" | "keep-alive")
        })
        .filter_map(|(key, value)| Some((key.as_str().to_owned(), value.to_str().ok()?.to_owned())))
        .collect();
    let body = response.bytes().await.unwrap_or_default();
    let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status)).into_bytes();
    for (key, value) in headers {
        out.extend_from_slice(format!("{key}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(&body);
    out
}

/// The provider's own error for a fault answered by the proxy.
fn error_answer(dialect: Dialect, kind: FaultKind) -> Vec<u8> {
    let (status, code, message) = match (dialect, kind) {
        (Dialect::Ec2, FaultKind::Throttle) => (503, "RequestLimitExceeded", "Request limit exceeded."),
        (Dialect::Ec2, _) => (500, "InternalError", "An internal error has occurred"),
        // Compute Engine's words for a per-minute API rate limit: the message says "quota", the
        // reason says it is a rate limit (not a resource quota), and it passes.
        (Dialect::Compute, FaultKind::Throttle) => (
            429,
            "rateLimitExceeded",
            "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service \
             'compute.googleapis.com'",
        ),
        (Dialect::Compute, _) => (503, "backendError", "Internal error. Please try again."),
    };
    match dialect {
        Dialect::Ec2 => {
            let body = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
                 <Message>{message}</Message></Error></Errors><RequestID>fault-proxy</RequestID></Response>"
            );
            render(status, "text/xml;charset=UTF-8", body.as_bytes())
        }
        Dialect::Compute => {
            let domain = if code == "rateLimitExceeded" { "usageLimits" } else { "global" };
            let grpc = if status == 429 { "RESOURCE_EXHAUSTED" } else { "UNAVAILABLE" };
            let body = serde_json::json!({"error": {
                "code": status,
                "message": message,
                "errors": [{"message": message, "domain": domain, "reason": code}],
                "status": grpc,
            }});
            render(status, "application/json; charset=UTF-8", body.to_string().as_bytes())
        }
    }
}

fn render(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn reason(status: u16) -> &'static str {
    reqwest::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Unknown")
}

/// SplitMix64: a well-mixed 64-bit hash of `x`.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `x` as a number in [0, 1).
fn unit(x: u64) -> f64 {
    // The top 53 bits, exactly representable.
    #[allow(clippy::cast_precision_loss)]
    let value = (x >> 11) as f64 / (1_u64 << 53) as f64;
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draw_is_reproducible_and_near_its_rate() {
        let plan = FaultPlan::spread(7, 0.3);
        let draws: Vec<Option<FaultKind>> = (0..10_000).map(|i| plan.draw(i * 31, 1)).collect();
        let again: Vec<Option<FaultKind>> = (0..10_000).map(|i| plan.draw(i * 31, 1)).collect();
        assert_eq!(draws, again);
        let faults = draws.iter().filter(|d| d.is_some()).count();
        assert!((2_700..3_300).contains(&faults), "{faults} faults in 10000 draws at 30%");
        for kind in FaultKind::ALL {
            assert!(draws.contains(&Some(kind)), "{kind:?} never drawn");
        }
        let other_seed = FaultPlan::spread(8, 0.3);
        assert_ne!(draws, (0..10_000).map(|i| other_seed.draw(i * 31, 1)).collect::<Vec<_>>());
    }
}
