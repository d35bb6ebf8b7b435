//! A fake Compute Engine API, in process, for the tests of the GCP provider: the REST surface
//! google-cloud-compute-v1 calls for zones, machine types, instances, firewall rules, regional
//! static external addresses and zonal, regional and global operations, answered the way Compute
//! Engine answers where a client can tell.
//!
//! What it does like the real API:
//! - paths `/compute/v1/projects/{project}/...` with `$alt=json`, camelCase JSON resources,
//!   numeric ids as strings, `selfLink`s under `https://www.googleapis.com/compute/v1/`;
//! - every request must carry `Authorization: Bearer <JWT>` (the self-signed JWT of a
//!   service-account key: RS256 header, `iss`, `exp` in the future); the signature is not
//!   checked, the issuer is recorded ([`FakeGce::principals`]) and becomes the operations' `user`;
//! - inserts and deletes answer an `Operation` (`RUNNING`, then `DONE` after [`FakeGce::set_latency`]),
//!   `operations/{op}/wait` blocks until it is `DONE`; instances go `PROVISIONING`, `STAGING`,
//!   `RUNNING`, and `STOPPING` while being deleted, after which they are gone;
//! - a repeated `requestId` answers the original operation (no second resource, no 409); a name
//!   in use is HTTP 409 `alreadyExists`; a missing resource is 404 `notFound`; a delete while
//!   another operation runs on the instance is 400 `resourceNotReady`; invalid names, labels,
//!   machine types or filters are 400 `invalid`; all in Google's error shape
//!   (`{"error":{"code","message","errors":[{"message","domain","reason"}]}}`);
//! - `instances.list` takes `filter` expressions `field = "value"`, `field != "value"` and
//!   `field:*` on `name`, `status`, `id` and `labels.KEY`, parenthesized and joined by
//!   whitespace or `AND` (OR is refused as unsupported), and pages with `maxResults` and
//!   `pageToken`;
//! - a CPU quota ([`FakeGce::set_cpu_quota`]) fails an insert's operation with `QUOTA_EXCEEDED`
//!   and HTTP 403, as Compute Engine does;
//! - `regions/{region}/addresses` reserves static external addresses (`EXTERNAL`, the only type
//!   served; an `address` field asks for a given IP): `RESERVED`, then `IN_USE` with `users`
//!   while an instance has it as an access config's `natIP` ("Reserve a static external IP
//!   address"); an instance insert whose `natIP` is not an address reserved in its region is 400,
//!   one whose address another instance uses is 400 too, and deleting an address in use is 400
//!   `resourceInUseByAnotherResource`. Labels in an insert's body are ignored: the API sets an
//!   address's labels with `setLabels` only (its reference, `Address.labels`).
//!
//! - behind the fake Google front, an instance's service account must be one the fake IAM holds
//!   (400 naming it otherwise, as Compute Engine refuses an account the caller cannot act as);
//!
//! What it does not: every project exists; the zones are `us-central1-a`, `us-central1-b` and
//! `europe-west1-b`, each offering `e2-standard-2`, `e2-medium` and `n2-standard-4`; the only
//! network is `default`; instances never boot anything.
//!
//! Knobs for faults: [`FakeGce::fail_next`] (503 before acting), [`FakeGce::fail_next_with`]
//! (any status, optionally for one HTTP method only) and [`FakeGce::lose_next`] (act, then answer
//! 503: a lost response).
// Errors are the responses themselves; their size does not matter to a test server.
#![allow(clippy::missing_panics_doc, clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The base of every `selfLink`.
const BASE: &str = "https://www.googleapis.com/compute/v1";

/// The zones of every project, with their regions.
const ZONES: [(&str, &str); 3] =
    [("us-central1-a", "us-central1"), ("us-central1-b", "us-central1"), ("europe-west1-b", "europe-west1")];

/// The machine types of every zone: name, vCPUs, memory (MB).
/// Machine types: name, vCPUs, memory (MB), architecture (as machineTypes.get names it).
const MACHINE_TYPES: [(&str, u32, u32, &str); 4] = [
    ("e2-standard-2", 2, 8192, "X86_64"),
    ("e2-medium", 2, 4096, "X86_64"),
    ("n2-standard-4", 4, 16384, "X86_64"),
    ("t2a-standard-1", 1, 4096, "ARM64"),
];

/// The running fake: a server on its own thread and runtime, and its state for inspection.
pub struct FakeGce {
    addr: SocketAddr,
    state: Arc<Mutex<Fake>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl FakeGce {
    /// Starts a fake on a free port of 127.0.0.1, with an operation latency of 100 ms.
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("binding the fake GCE server");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the fake GCE server's address");
        let state = Arc::new(Mutex::new(Fake::new()));
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let app_state = state.clone();
        std::thread::Builder::new()
            .name("fake-gce".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("the fake GCE server's runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    let app = Router::new().fallback(handle).with_state(app_state);
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = stop.await;
                        })
                        .await;
                });
            })
            .expect("spawning the fake GCE server");
        Self { addr, state, shutdown: Some(shutdown) }
    }

    /// The endpoint to give the Compute client (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Refuses, from now on, an instance whose service account `iam` does not hold, as Compute
    /// Engine refuses one the caller cannot act as (an account that does not exist included).
    pub fn check_service_accounts_at(&self, iam: Arc<crate::fake_iam::FakeIam>) {
        self.lock().iam = Some(iam);
    }

    fn lock(&self) -> MutexGuard<'_, Fake> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The project's instances, as `instances.get` would show them, in every zone (including
    /// those being deleted), ordered by zone and name.
    pub fn instances(&self, project: &str) -> Vec<Value> {
        let mut fake = self.lock();
        let now = Instant::now();
        fake.tick(now);
        let latency = fake.latency;
        fake.projects.get(project).map_or_else(Vec::new, |p| {
            p.instances.iter().map(|((zone, _), i)| i.render(project, zone, now, latency)).collect()
        })
    }

    /// The project's instances labelled `label` = `value` that run or are starting
    /// (`PROVISIONING`, `STAGING`, `RUNNING`), as [`instances`](Self::instances) shows them.
    pub fn live_instances(&self, project: &str, label: &str, value: &str) -> Vec<Value> {
        self.instances(project)
            .into_iter()
            .filter(|i| i["labels"][label] == value)
            .filter(|i| ["PROVISIONING", "STAGING", "RUNNING"].contains(&i["status"].as_str().unwrap_or_default()))
            .collect()
    }

    /// The project's firewall rules, as `firewalls.get` would show them, ordered by name.
    pub fn firewalls(&self, project: &str) -> Vec<Value> {
        let mut fake = self.lock();
        fake.tick(Instant::now());
        fake.projects.get(project).map_or_else(Vec::new, |p| p.firewalls.values().map(|f| f.resource.clone()).collect())
    }

    /// The project's static addresses in every region (those being deleted included), as
    /// `addresses.get` would show them, ordered by region and name.
    pub fn addresses(&self, project: &str) -> Vec<Value> {
        let mut fake = self.lock();
        fake.tick(Instant::now());
        fake.projects
            .get(project)
            .map_or_else(Vec::new, |p| p.addresses.values().map(|a| p.render_address(a)).collect())
    }

    /// The project's operations, in the order they were created.
    pub fn operations(&self, project: &str) -> Vec<Value> {
        let fake = self.lock();
        let now = Instant::now();
        fake.projects.get(project).map_or_else(Vec::new, |p| {
            let mut ops: Vec<&FakeOperation> = p.operations.values().collect();
            ops.sort_by_key(|op| op.seq);
            ops.iter().map(|op| op.render(project, now)).collect()
        })
    }

    /// The `iss` of every distinct bearer JWT the fake has seen, in order.
    pub fn principals(&self) -> Vec<String> {
        self.lock().principals.clone()
    }

    /// Every request: `METHOD /path?query`, in order.
    pub fn requests(&self) -> Vec<String> {
        self.lock().requests.clone()
    }

    /// Answers the next `n` requests with 503 `backendError`, without acting on them.
    pub fn fail_next(&self, n: u32) {
        self.fail_next_with(n, 503, None);
    }

    /// Answers the next `n` requests (of `method` only, when given) with `status` in Google's
    /// error shape, without acting on them.
    pub fn fail_next_with(&self, n: u32, status: u16, method: Option<&str>) {
        self.lock().faults.push(Fault { remaining: n, status, method: method.map(str::to_owned), lose: false });
    }

    /// Acts on the next `n` inserts and deletes but answers 503, as when a response is lost.
    pub fn lose_next(&self, n: u32) {
        self.lock().faults.push(Fault { remaining: n, status: 503, method: None, lose: true });
    }

    /// How long an operation runs before it is `DONE` (100 ms by default).
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// Limits the vCPUs of the instances of a project's region (`None`: no limit).
    pub fn set_cpu_quota(&self, cpus: Option<u32>) {
        self.lock().cpu_quota = cpus;
    }
}

impl Drop for FakeGce {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl std::fmt::Debug for FakeGce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeGce").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// A fault to inject.
struct Fault {
    remaining: u32,
    status: u16,
    method: Option<String>,
    /// Act, then answer the error.
    lose: bool,
}

/// Everything the fake holds.
struct Fake {
    latency: Duration,
    cpu_quota: Option<u32>,
    faults: Vec<Fault>,
    projects: HashMap<String, Project>,
    principals: Vec<String>,
    requests: Vec<String>,
    op_seq: u64,
    /// The IAM whose accounts an instance may run as, when set.
    iam: Option<Arc<crate::fake_iam::FakeIam>>,
}

/// One project's resources.
#[derive(Default)]
struct Project {
    /// By (zone, name).
    instances: BTreeMap<(String, String), FakeInstance>,
    firewalls: BTreeMap<String, FakeFirewall>,
    /// By (region, name).
    addresses: BTreeMap<(String, String), FakeAddress>,
    operations: HashMap<String, FakeOperation>,
    /// requestId -> operation name.
    request_ids: HashMap<String, String>,
    next_ip: u32,
}

struct FakeInstance {
    /// The resource without `status` (rendered from the clock).
    resource: Value,
    created: Instant,
    /// When its deletion completes.
    deleted_at: Option<Instant>,
    cpus: u32,
}

impl FakeInstance {
    fn status(&self, now: Instant, latency: Duration) -> &'static str {
        if self.deleted_at.is_some() {
            "STOPPING"
        } else if now >= self.created + latency {
            "RUNNING"
        } else if now >= self.created + latency / 2 {
            "STAGING"
        } else {
            "PROVISIONING"
        }
    }

    fn render(&self, _project: &str, _zone: &str, now: Instant, latency: Duration) -> Value {
        let mut resource = self.resource.clone();
        let status = self.status(now, latency);
        resource["status"] = json!(status);
        if status == "RUNNING" {
            resource["cpuPlatform"] = json!("Intel Broadwell");
            resource["lastStartTimestamp"] = resource["creationTimestamp"].clone();
        }
        resource
    }
}

struct FakeAddress {
    /// The resource without `status` and `users` (rendered from the instances that use it).
    resource: Value,
    region: String,
    deleted_at: Option<Instant>,
}

impl Project {
    /// The instances (by `selfLink`) whose access configs have `ip` as their `natIP`, in `region`.
    fn users_of(&self, region: &str, ip: &str) -> Vec<String> {
        self.instances
            .iter()
            .filter(|((zone, _), _)| zone_region(zone) == Some(region))
            .filter(|(_, i)| {
                i.resource["networkInterfaces"].as_array().into_iter().flatten().any(|nic| {
                    nic["accessConfigs"].as_array().into_iter().flatten().any(|a| a["natIP"].as_str() == Some(ip))
                })
            })
            .filter_map(|(_, i)| i.resource["selfLink"].as_str().map(str::to_owned))
            .collect()
    }

    fn render_address(&self, address: &FakeAddress) -> Value {
        let mut resource = address.resource.clone();
        let users = self.users_of(&address.region, resource["address"].as_str().unwrap_or_default());
        resource["status"] = json!(if users.is_empty() { "RESERVED" } else { "IN_USE" });
        if !users.is_empty() {
            resource["users"] = json!(users);
        }
        resource
    }
}

struct FakeFirewall {
    resource: Value,
    deleted_at: Option<Instant>,
}

struct FakeOperation {
    seq: u64,
    /// The resource without `status`, `progress` and `endTime`.
    resource: Value,
    zone: Option<String>,
    region: Option<String>,
    done_at: Instant,
    end_time: String,
}

impl FakeOperation {
    fn done(&self, now: Instant) -> bool {
        now >= self.done_at
    }

    fn render(&self, _project: &str, now: Instant) -> Value {
        let mut resource = self.resource.clone();
        if self.done(now) {
            resource["status"] = json!("DONE");
            resource["progress"] = json!(100);
            resource["endTime"] = json!(self.end_time);
        } else {
            resource["status"] = json!("RUNNING");
            resource["progress"] = json!(0);
        }
        resource
    }
}

impl Fake {
    fn new() -> Self {
        Self {
            latency: Duration::from_millis(100),
            cpu_quota: None,
            faults: Vec::new(),
            projects: HashMap::new(),
            principals: Vec::new(),
            requests: Vec::new(),
            op_seq: 0,
            iam: None,
        }
    }

    /// Completes what is due: deleted instances and rules disappear.
    fn tick(&mut self, now: Instant) {
        for project in self.projects.values_mut() {
            project.instances.retain(|_, i| i.deleted_at.is_none_or(|at| now < at));
            project.firewalls.retain(|_, f| f.deleted_at.is_none_or(|at| now < at));
            project.addresses.retain(|_, a| a.deleted_at.is_none_or(|at| now < at));
        }
    }

    /// Creates an operation and returns it rendered.
    #[allow(clippy::too_many_arguments)]
    fn operation(
        &mut self,
        project: &str,
        zone: Option<&str>,
        kind: &str,
        target_link: String,
        target_id: &str,
        user: &str,
        error: Option<(u16, &str, String)>,
        now: Instant,
    ) -> Value {
        self.op_seq += 1;
        let seq = self.op_seq;
        let latency = if error.is_some() { Duration::ZERO } else { self.latency };
        let name = format!(
            "operation-{}-{:013x}-{:08x}-{:08x}",
            unix_ms(),
            rand::random::<u64>() & 0x1f_ffff_ffff_ffff,
            rand::random::<u32>(),
            rand::random::<u32>()
        );
        let (scope, self_link) = match zone {
            Some(zone) => (
                json!(format!("{BASE}/projects/{project}/zones/{zone}")),
                format!("{BASE}/projects/{project}/zones/{zone}/operations/{name}"),
            ),
            None => (Value::Null, format!("{BASE}/projects/{project}/global/operations/{name}")),
        };
        let started = rfc3339(SystemTime::now());
        let mut resource = json!({
            "kind": "compute#operation",
            "id": numeric_id(),
            "name": name,
            "operationType": kind,
            "targetLink": target_link,
            "targetId": target_id,
            "user": user,
            "insertTime": started,
            "startTime": started,
            "selfLink": self_link,
        });
        if !scope.is_null() {
            resource["zone"] = scope;
        }
        if let Some((http, code, message)) = error {
            resource["error"] = json!({"errors": [{"code": code, "message": message}]});
            resource["httpErrorStatusCode"] = json!(http);
            resource["httpErrorMessage"] = json!(http_reason(http));
        }
        let op = FakeOperation {
            seq,
            resource,
            zone: zone.map(str::to_owned),
            region: None,
            done_at: now + latency,
            end_time: rfc3339(SystemTime::now() + latency),
        };
        let rendered = op.render(project, now);
        self.projects.entry(project.to_owned()).or_default().operations.insert(name, op);
        rendered
    }
}

impl Fake {
    /// Creates a region operation and returns it rendered.
    fn region_operation(
        &mut self,
        project: &str,
        region: &str,
        kind: &str,
        target: (String, &str),
        user: &str,
        now: Instant,
    ) -> Value {
        let rendered = self.operation(project, None, kind, target.0, target.1, user, None, now);
        let name = rendered["name"].as_str().unwrap_or_default().to_owned();
        let region_link = format!("{BASE}/projects/{project}/regions/{region}");
        match self.projects.get_mut(project).and_then(|p| p.operations.get_mut(&name)) {
            Some(op) => {
                op.region = Some(region.to_owned());
                op.resource["region"] = json!(region_link);
                op.resource["selfLink"] = json!(format!("{region_link}/operations/{name}"));
                op.render(project, now)
            }
            None => rendered,
        }
    }
}

/// A Google API error response.
fn error(status: u16, reason: &str, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    });
    (code, axum::Json(body)).into_response()
}

fn not_found(resource: &str) -> Response {
    error(404, "notFound", &format!("The resource '{resource}' was not found"))
}

fn invalid(message: String) -> Response {
    error(400, "invalid", &message)
}

fn ok(value: Value) -> Response {
    (StatusCode::OK, axum::Json(value)).into_response()
}

/// The default reason phrase, as operations carry it.
fn http_reason(status: u16) -> &'static str {
    match status {
        400 => "BAD REQUEST",
        403 => "FORBIDDEN",
        404 => "NOT FOUND",
        409 => "CONFLICT",
        429 => "TOO MANY REQUESTS",
        _ => "INTERNAL SERVER ERROR",
    }
}

/// A fault's error response.
fn fault_response(status: u16) -> Response {
    match status {
        429 => error(429, "rateLimitExceeded", "Rate Limit Exceeded"),
        403 => error(403, "quotaExceeded", "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute'"),
        400 => error(400, "badRequest", "Bad request"),
        500 => error(500, "backendError", "Internal error. Please try again or contact Google Support."),
        status => error(status, "backendError", "The service is currently unavailable."),
    }
}

/// The single handler: routes by path, after authentication and fault injection.
async fn handle(
    State(state): State<Arc<Mutex<Fake>>>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let lock = || state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let path = uri.path().to_owned();
    let principal = match authenticate(&headers) {
        Ok(principal) => principal,
        Err(response) => return response,
    };
    let mutating = !path.ends_with("/wait") && (method == Method::POST || method == Method::DELETE);
    let lose = {
        let mut fake = lock();
        fake.requests.push(format!("{method} {}", uri.path_and_query().map_or(path.as_str(), |p| p.as_str())));
        if !fake.principals.contains(&principal) {
            fake.principals.push(principal.clone());
        }
        let mut fail = None;
        let mut lose = false;
        for fault in fake.faults.iter_mut().filter(|f| f.remaining > 0) {
            if fault.method.as_deref().is_some_and(|m| m != method.as_str()) || (fault.lose && !mutating) {
                continue;
            }
            fault.remaining -= 1;
            if fault.lose {
                lose = true;
            } else {
                fail = Some(fault.status);
            }
            break;
        }
        fake.faults.retain(|f| f.remaining > 0);
        if let Some(status) = fail {
            return fault_response(status);
        }
        lose
    };
    match query.get("$alt").map(String::as_str) {
        None | Some("json") => {}
        Some(other) => return invalid(format!("Invalid value for parameter '$alt': '{other}'")),
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let response = match segments.as_slice() {
        ["compute", "v1", "projects", project, rest @ ..] => {
            route(&state, &method, project, rest, &query, &body, &principal).await
        }
        _ => error(404, "notFound", &format!("The requested URL {path} was not found on this server.")),
    };
    if lose && response.status().is_success() {
        return fault_response(503);
    }
    response
}

async fn route(
    state: &Arc<Mutex<Fake>>,
    method: &Method,
    project: &str,
    rest: &[&str],
    query: &HashMap<String, String>,
    body: &Bytes,
    principal: &str,
) -> Response {
    let lock = || state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let get = method == Method::GET;
    let post = method == Method::POST;
    let delete = method == Method::DELETE;
    match rest {
        ["zones"] if get => list_zones(project, query),
        ["zones", zone] if get => match zone_region(zone) {
            Some(_) => ok(zone_resource(project, zone)),
            None => not_found(&format!("projects/{project}/zones/{zone}")),
        },
        ["zones", zone, "machineTypes", machine_type] if get => get_machine_type(project, zone, machine_type),
        ["zones", zone, "instances"] if get => list_instances(&mut lock(), project, zone, query),
        ["zones", zone, "instances"] if post => insert_instance(&mut lock(), project, zone, query, body, principal),
        ["zones", zone, "instances", name] if get => get_instance(&mut lock(), project, zone, name),
        ["zones", zone, "instances", name] if delete => {
            delete_instance(&mut lock(), project, zone, name, query, principal)
        }
        ["zones", zone, "operations", op] if get => get_operation(&lock(), project, Scope::Zone(zone), op),
        ["zones", zone, "operations", op, "wait"] if post => {
            wait_operation(state, project, Scope::Zone(zone), op).await
        }
        ["regions", region, "addresses"] if get => list_addresses(&mut lock(), project, region, query),
        ["regions", region, "addresses"] if post => {
            insert_address(&mut lock(), project, region, query, body, principal)
        }
        ["regions", region, "addresses", name] if get => get_address(&mut lock(), project, region, name),
        ["regions", region, "addresses", name] if delete => {
            delete_address(&mut lock(), project, region, name, query, principal)
        }
        ["regions", region, "operations", op] if get => get_operation(&lock(), project, Scope::Region(region), op),
        ["regions", region, "operations", op, "wait"] if post => {
            wait_operation(state, project, Scope::Region(region), op).await
        }
        ["global", "firewalls"] if get => list_firewalls(&mut lock(), project),
        ["global", "firewalls"] if post => insert_firewall(&mut lock(), project, query, body, principal),
        ["global", "firewalls", name] if get => get_firewall(&mut lock(), project, name),
        ["global", "firewalls", name] if delete => delete_firewall(&mut lock(), project, name, query, principal),
        ["global", "operations", op] if get => get_operation(&lock(), project, Scope::Global, op),
        ["global", "operations", op, "wait"] if post => wait_operation(state, project, Scope::Global, op).await,
        _ => error(
            404,
            "notFound",
            &format!(
                "The requested URL /compute/v1/projects/{project}/{} was not found on this server.",
                rest.join("/")
            ),
        ),
    }
}

/// Checks the bearer JWT and returns its issuer.
fn authenticate(headers: &HeaderMap) -> Result<String, Response> {
    let unauthenticated = |message: &str| {
        let body = json!({"error": {
            "code": 401,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": "required", "location": "Authorization", "locationType": "header"}],
            "status": "UNAUTHENTICATED",
        }});
        (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
    };
    let Some(token) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return Err(unauthenticated(
            "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        ));
    };
    let invalid = || {
        unauthenticated(
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        )
    };
    let parts: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = parts.as_slice() else {
        return Err(invalid());
    };
    let decode = |part: &str| base64url_decode(part).and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    let (Some(header), Some(claims)) = (decode(header), decode(claims)) else {
        return Err(invalid());
    };
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let expired = claims["exp"].as_u64().is_none_or(|exp| exp < now);
    let issuer = claims["iss"].as_str().unwrap_or_default();
    if header["alg"] != "RS256"
        || issuer.is_empty()
        || expired
        || base64url_decode(signature).is_none_or(|s| s.is_empty())
    {
        return Err(invalid());
    }
    Ok(issuer.to_owned())
}

fn zone_region(zone: &str) -> Option<&'static str> {
    ZONES.iter().find(|(z, _)| *z == zone).map(|(_, r)| *r)
}

fn zone_resource(project: &str, zone: &str) -> Value {
    let region = zone_region(zone).unwrap_or_default();
    json!({
        "kind": "compute#zone",
        "id": stable_id(zone),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": zone,
        "description": zone,
        "status": "UP",
        "region": format!("{BASE}/projects/{project}/regions/{region}"),
        "selfLink": format!("{BASE}/projects/{project}/zones/{zone}"),
        "availableCpuPlatforms": ["Intel Broadwell", "AMD Milan"],
        "supportsPzs": false,
    })
}

fn list_zones(project: &str, query: &HashMap<String, String>) -> Response {
    let items: Vec<Value> = ZONES.iter().map(|(zone, _)| zone_resource(project, zone)).collect();
    page(items, query, "compute#zoneList", &format!("{BASE}/projects/{project}/zones"))
}

/// One page of a list, by `maxResults` (default 500) and an offset `pageToken`.
fn page(items: Vec<Value>, query: &HashMap<String, String>, kind: &str, self_link: &str) -> Response {
    let max = match query.get("maxResults").map(|m| m.parse::<usize>()) {
        None => 500,
        Some(Ok(max)) if max > 0 => max.min(500),
        Some(_) => return invalid("Invalid value for field 'maxResults'".into()),
    };
    let start = match query.get("pageToken").filter(|t| !t.is_empty()).map(|t| t.parse::<usize>()) {
        None => 0,
        Some(Ok(start)) if start <= items.len() => start,
        Some(_) => return invalid("Invalid value for field 'pageToken'".into()),
    };
    let end = (start + max).min(items.len());
    let mut list = json!({"kind": kind, "id": self_link.trim_start_matches(BASE), "items": items[start..end], "selfLink": self_link});
    if end < items.len() {
        list["nextPageToken"] = json!(end.to_string());
    }
    ok(list)
}

fn get_machine_type(project: &str, zone: &str, machine_type: &str) -> Response {
    if zone_region(zone).is_none() {
        return invalid(format!("Invalid value for field 'zone': '{zone}'. Unknown zone."));
    }
    match MACHINE_TYPES.iter().find(|(name, ..)| *name == machine_type) {
        Some((name, cpus, memory, architecture)) => ok(json!({
            "kind": "compute#machineType",
            "id": stable_id(name),
            "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
            "name": name,
            "description": format!("{cpus} vCPUs, {} GB RAM", memory / 1024),
            "guestCpus": cpus,
            "memoryMb": memory,
            "imageSpaceGb": 0,
            "maximumPersistentDisks": 128,
            "maximumPersistentDisksSizeGb": "263168",
            "zone": zone,
            "selfLink": format!("{BASE}/projects/{project}/zones/{zone}/machineTypes/{name}"),
            "isSharedCpu": false,
            "architecture": architecture,
        })),
        None => not_found(&format!("projects/{project}/zones/{zone}/machineTypes/{machine_type}")),
    }
}

/// The operation a known `requestId` started, when it is one.
fn remembered(
    fake: &Fake,
    project: &str,
    query: &HashMap<String, String>,
    now: Instant,
) -> Result<Option<Value>, Response> {
    let Some(request_id) = query.get("requestId") else {
        return Ok(None);
    };
    match uuid::Uuid::parse_str(request_id) {
        Ok(id) if !id.is_nil() => {}
        _ => {
            return Err(invalid(format!(
                "Invalid value for field 'requestId': '{request_id}'. The request id must be a valid UUID with the exception that zero UUID is not supported."
            )));
        }
    }
    Ok(fake.projects.get(project).and_then(|p| {
        p.request_ids.get(request_id).and_then(|name| p.operations.get(name)).map(|op| op.render(project, now))
    }))
}

fn remember(fake: &mut Fake, project: &str, query: &HashMap<String, String>, op: &Value) {
    if let (Some(request_id), Some(name)) = (query.get("requestId"), op["name"].as_str()) {
        fake.projects.entry(project.to_owned()).or_default().request_ids.insert(request_id.clone(), name.to_owned());
    }
}

/// `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`
fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-'
}

/// Label keys `[a-z][a-z0-9_-]{0,62}`, values `[a-z0-9_-]{0,63}` (ASCII only here).
fn check_labels(labels: &Value) -> Result<BTreeMap<String, String>, Response> {
    let mut out = BTreeMap::new();
    let Some(map) = labels.as_object() else {
        return if labels.is_null() {
            Ok(out)
        } else {
            Err(invalid("Invalid value for field 'resource.labels'".into()))
        };
    };
    let ok_char = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-';
    for (key, value) in map {
        let value = value.as_str().unwrap_or_default();
        let key_ok =
            key.len() <= 63 && key.as_bytes().first().is_some_and(u8::is_ascii_lowercase) && key.bytes().all(ok_char);
        if !key_ok {
            return Err(invalid(format!(
                "Invalid value for field 'resource.labels': '{key}'. Label keys must start with a lowercase letter and contain only lowercase letters, digits, underscores and dashes."
            )));
        }
        if value.len() > 63 || !value.bytes().all(ok_char) {
            return Err(invalid(format!(
                "Invalid value for field 'resource.labels': '{value}'. Label values may contain only lowercase letters, digits, underscores and dashes."
            )));
        }
        out.insert(key.clone(), value.to_owned());
    }
    Ok(out)
}

/// The machine type name of `zones/ZONE/machineTypes/TYPE` (or a URL ending so) in `zone`.
fn machine_type_of<'a>(value: &'a str, zone: &str) -> Option<&'a str> {
    let tail = value.rsplit_once(&format!("zones/{zone}/machineTypes/")).map(|(_, t)| t)?;
    MACHINE_TYPES.iter().find(|(name, ..)| *name == tail).map(|_| tail)
}

/// Whether `network` names the project's `default` network.
fn default_network(network: &str, project: &str) -> bool {
    network == "global/networks/default"
        || network == format!("projects/{project}/global/networks/default")
        || network == format!("{BASE}/projects/{project}/global/networks/default")
        || network == format!("https://compute.googleapis.com/compute/v1/projects/{project}/global/networks/default")
}

fn insert_instance(
    fake: &mut Fake,
    project: &str,
    zone: &str,
    query: &HashMap<String, String>,
    body: &Bytes,
    principal: &str,
) -> Response {
    let now = Instant::now();
    fake.tick(now);
    let Some(region) = zone_region(zone) else {
        return invalid(format!("Invalid value for field 'zone': '{zone}'. Unknown zone."));
    };
    match remembered(fake, project, query, now) {
        Ok(Some(op)) => return ok(op),
        Ok(None) => {}
        Err(response) => return response,
    }
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return error(400, "parseError", "Invalid JSON payload received.");
    };
    let name = body["name"].as_str().unwrap_or_default();
    if !valid_name(name) {
        return invalid(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        ));
    }
    let machine_type_field = body["machineType"].as_str().unwrap_or_default();
    let Some(machine_type) = machine_type_of(machine_type_field, zone) else {
        return invalid(format!(
            "Invalid value for field 'resource.machineType': '{machine_type_field}'. Machine type with name '{}' does not exist in zone '{zone}'.",
            machine_type_field.rsplit('/').next().unwrap_or_default()
        ));
    };
    let cpus = MACHINE_TYPES.iter().find(|(n, ..)| *n == machine_type).map_or(0, |(_, c, ..)| *c);
    let labels = match check_labels(&body["labels"]) {
        Ok(labels) => labels,
        Err(response) => return response,
    };
    let disks = body["disks"].as_array().cloned().unwrap_or_default();
    let Some(boot) = disks.iter().find(|d| d["boot"] == true) else {
        return invalid("Invalid value for field 'resource.disks': ''. Boot disk must be specified.".into());
    };
    let image = boot["initializeParams"]["sourceImage"].as_str().unwrap_or_default();
    if !(image.starts_with("projects/") || image.starts_with("global/images/") || image.starts_with("https://"))
        || !image.contains("/images/")
    {
        return invalid(format!(
            "Invalid value for field 'resource.disks[0].initializeParams.sourceImage': '{image}'. The URL is malformed."
        ));
    }
    let nics = body["networkInterfaces"].as_array().cloned().unwrap_or_default();
    if nics.len() != 1 {
        return invalid("Invalid value for field 'resource.networkInterfaces': exactly one network interface is supported by the fake.".into());
    }
    let network = nics[0]["network"].as_str().unwrap_or("global/networks/default");
    if !default_network(network, project) {
        return not_found(network);
    }
    let accounts = body["serviceAccounts"].as_array().cloned().unwrap_or_default();
    for (index, email) in accounts.iter().filter_map(|a| a["email"].as_str()).enumerate() {
        if let Some(iam) = &fake.iam
            && email != "default"
            && !iam.exists(email)
        {
            return invalid(format!(
                "Invalid value for field 'resource.serviceAccounts[{index}].email': '{email}'. The user does not have \
                 access to service account '{email}'. User: '{principal}'. Ask a project owner to grant you the \
                 iam.serviceAccountUser role on the service account"
            ));
        }
    }
    let tags: Vec<String> = body["tags"]["items"]
        .as_array()
        .map(|t| t.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    if let Some(tag) = tags.iter().find(|t| !valid_name(t)) {
        return invalid(format!(
            "Invalid value for field 'resource.tags.items[0]': '{tag}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        ));
    }
    let items = body["metadata"]["items"].as_array().cloned().unwrap_or_default();
    let mut total = 0;
    for item in &items {
        let key = item["key"].as_str().unwrap_or_default();
        let value = item["value"].as_str().unwrap_or_default();
        total += key.len() + value.len();
        let key_ok = !key.is_empty()
            && key.len() <= 128
            && key.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_');
        if !key_ok || value.len() > 256 * 1024 {
            return invalid(format!("Invalid value for field 'resource.metadata': metadata item '{key}' is invalid."));
        }
    }
    if total > 512 * 1024 {
        return invalid("Invalid value for field 'resource.metadata': the metadata exceeds 512 KB.".into());
    }
    let instance_link = format!("{BASE}/projects/{project}/zones/{zone}/instances/{name}");
    if fake.projects.get(project).is_some_and(|p| p.instances.contains_key(&(zone.to_owned(), name.to_owned()))) {
        return error(
            409,
            "alreadyExists",
            &format!("The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists"),
        );
    }
    let id = numeric_id();
    if let Some(quota) = fake.cpu_quota {
        let used: u32 = fake.projects.get(project).map_or(0, |p| {
            p.instances
                .iter()
                .filter(|((z, _), i)| zone_region(z) == Some(region) && i.deleted_at.is_none())
                .map(|(_, i)| i.cpus)
                .sum()
        });
        if used + cpus > quota {
            let message = format!("Quota 'CPUS' exceeded.  Limit: {quota}.0 in region {region}.");
            let op = fake.operation(
                project,
                Some(zone),
                "insert",
                instance_link,
                &id,
                principal,
                Some((403, "QUOTA_EXCEEDED", message)),
                now,
            );
            remember(fake, project, query, &op);
            return ok(op);
        }
    }
    // A `natIP` must be a static address reserved in the instance's region that no other
    // instance uses; none asks for an ephemeral one.
    let asked: Vec<&str> = nics[0]["accessConfigs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["natIP"].as_str())
        .filter(|ip| !ip.is_empty())
        .collect();
    for ip in &asked {
        let held = fake.projects.get(project);
        let reserved = held.is_some_and(|p| {
            p.addresses.values().any(|a| a.region == region && a.deleted_at.is_none() && a.resource["address"] == *ip)
        });
        if !reserved {
            return invalid(format!(
                "Invalid value for field 'resource.networkInterfaces[0].accessConfigs[0].natIP': '{ip}'. The specified \
                 external IP address '{ip}' was not found in region '{region}'."
            ));
        }
        if let Some(user) = held.and_then(|p| p.users_of(region, ip).into_iter().next()) {
            return error(
                400,
                "invalid",
                &format!(
                    "Invalid value for field 'resource.networkInterfaces[0].accessConfigs[0].natIP': '{ip}'. IP \
                          '{ip}' is already being used by another resource ('{user}')."
                ),
            );
        }
    }
    let entry = fake.projects.entry(project.to_owned()).or_default();
    entry.next_ip += 1;
    let n = entry.next_ip + 1;
    let network_ip = format!("10.128.{}.{}", n / 250, n % 250 + 2);
    let access_configs: Vec<Value> = nics[0]["accessConfigs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|a| {
            json!({
                "kind": "compute#accessConfig",
                "type": a["type"].as_str().unwrap_or("ONE_TO_ONE_NAT"),
                "name": a["name"].as_str().unwrap_or("External NAT"),
                "natIP": a["natIP"].as_str().filter(|ip| !ip.is_empty()).map_or_else(
                    || format!("34.{}.{}.{}", rand::random::<u8>() % 200 + 10, rand::random::<u8>(), rand::random::<u8>() % 250 + 2),
                    str::to_owned,
                ),
                "networkTier": "PREMIUM",
            })
        })
        .collect();
    let created = rfc3339(SystemTime::now());
    let mut metadata = json!({"kind": "compute#metadata", "fingerprint": fingerprint()});
    if !items.is_empty() {
        metadata["items"] = json!(items);
    }
    let mut resource = json!({
        "kind": "compute#instance",
        "id": id,
        "creationTimestamp": created,
        "name": name,
        "machineType": format!("{BASE}/projects/{project}/zones/{zone}/machineTypes/{machine_type}"),
        "zone": format!("{BASE}/projects/{project}/zones/{zone}"),
        "canIpForward": false,
        "networkInterfaces": [{
            "kind": "compute#networkInterface",
            "network": format!("{BASE}/projects/{project}/global/networks/default"),
            "subnetwork": format!("{BASE}/projects/{project}/regions/{region}/subnetworks/default"),
            "networkIP": network_ip,
            "name": "nic0",
            "accessConfigs": access_configs,
            "fingerprint": fingerprint(),
            "stackType": "IPV4_ONLY",
        }],
        "disks": [{
            "kind": "compute#attachedDisk",
            "type": "PERSISTENT",
            "mode": "READ_WRITE",
            "source": format!("{BASE}/projects/{project}/zones/{zone}/disks/{name}"),
            "deviceName": "persistent-disk-0",
            "index": 0,
            "boot": true,
            "autoDelete": boot["autoDelete"].as_bool().unwrap_or(true),
            "interface": "SCSI",
            "diskSizeGb": "10",
            "architecture": "X86_64",
        }],
        "metadata": metadata,
        "tags": {"items": tags, "fingerprint": fingerprint()},
        "serviceAccounts": body["serviceAccounts"].as_array().cloned().unwrap_or_default(),
        "scheduling": {"onHostMaintenance": "MIGRATE", "automaticRestart": true, "preemptible": false, "provisioningModel": "STANDARD"},
        "cpuPlatform": "Unknown CPU Platform",
        "labels": labels,
        "labelFingerprint": fingerprint(),
        "startRestricted": false,
        "deletionProtection": false,
        "fingerprint": fingerprint(),
        "selfLink": instance_link,
    });
    if let Some(description) = body["description"].as_str() {
        resource["description"] = json!(description);
    }
    entry
        .instances
        .insert((zone.to_owned(), name.to_owned()), FakeInstance { resource, created: now, deleted_at: None, cpus });
    let op = fake.operation(project, Some(zone), "insert", instance_link, &id, principal, None, now);
    remember(fake, project, query, &op);
    ok(op)
}

fn get_instance(fake: &mut Fake, project: &str, zone: &str, name: &str) -> Response {
    let now = Instant::now();
    fake.tick(now);
    if zone_region(zone).is_none() {
        return invalid(format!("Invalid value for field 'zone': '{zone}'. Unknown zone."));
    }
    let latency = fake.latency;
    match fake.projects.get(project).and_then(|p| p.instances.get(&(zone.to_owned(), name.to_owned()))) {
        Some(instance) => ok(instance.render(project, zone, now, latency)),
        None => not_found(&format!("projects/{project}/zones/{zone}/instances/{name}")),
    }
}

fn delete_instance(
    fake: &mut Fake,
    project: &str,
    zone: &str,
    name: &str,
    query: &HashMap<String, String>,
    principal: &str,
) -> Response {
    let now = Instant::now();
    fake.tick(now);
    if zone_region(zone).is_none() {
        return invalid(format!("Invalid value for field 'zone': '{zone}'. Unknown zone."));
    }
    match remembered(fake, project, query, now) {
        Ok(Some(op)) => return ok(op),
        Ok(None) => {}
        Err(response) => return response,
    }
    let latency = fake.latency;
    let Some(instance) =
        fake.projects.get_mut(project).and_then(|p| p.instances.get_mut(&(zone.to_owned(), name.to_owned())))
    else {
        return not_found(&format!("projects/{project}/zones/{zone}/instances/{name}"));
    };
    if instance.deleted_at.is_some() || now < instance.created + latency {
        return error(
            400,
            "resourceNotReady",
            &format!("The resource 'projects/{project}/zones/{zone}/instances/{name}' is not ready"),
        );
    }
    instance.deleted_at = Some(now + latency);
    let id = instance.resource["id"].as_str().unwrap_or_default().to_owned();
    let link = format!("{BASE}/projects/{project}/zones/{zone}/instances/{name}");
    let op = fake.operation(project, Some(zone), "delete", link, &id, principal, None, now);
    remember(fake, project, query, &op);
    ok(op)
}

fn list_instances(fake: &mut Fake, project: &str, zone: &str, query: &HashMap<String, String>) -> Response {
    let now = Instant::now();
    fake.tick(now);
    if zone_region(zone).is_none() {
        return invalid(format!("Invalid value for field 'zone': '{zone}'. Unknown zone."));
    }
    let filter = match query.get("filter").map(|f| Filter::parse(f)) {
        None => Filter::default(),
        Some(Ok(filter)) => filter,
        Some(Err(message)) => {
            return invalid(format!(
                "Invalid value for field 'filter': '{}'. {message}",
                query.get("filter").map_or("", String::as_str)
            ));
        }
    };
    let latency = fake.latency;
    let items: Vec<Value> = fake.projects.get(project).map_or_else(Vec::new, |p| {
        p.instances
            .iter()
            .filter(|((z, _), _)| z == zone)
            .map(|(_, i)| i.render(project, zone, now, latency))
            .filter(|i| filter.matches(i))
            .collect()
    });
    page(items, query, "compute#instanceList", &format!("{BASE}/projects/{project}/zones/{zone}/instances"))
}

fn insert_firewall(
    fake: &mut Fake,
    project: &str,
    query: &HashMap<String, String>,
    body: &Bytes,
    principal: &str,
) -> Response {
    let now = Instant::now();
    fake.tick(now);
    match remembered(fake, project, query, now) {
        Ok(Some(op)) => return ok(op),
        Ok(None) => {}
        Err(response) => return response,
    }
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return error(400, "parseError", "Invalid JSON payload received.");
    };
    let name = body["name"].as_str().unwrap_or_default();
    if !valid_name(name) {
        return invalid(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        ));
    }
    let network = body["network"].as_str().unwrap_or("global/networks/default");
    if !default_network(network, project) {
        return not_found(network);
    }
    let allowed = body["allowed"].as_array().cloned().unwrap_or_default();
    if allowed.is_empty() && body["denied"].as_array().is_none_or(Vec::is_empty) {
        return invalid(
            "Invalid value for field 'resource.allowed': ''. At least one allowed or denied rule must be specified."
                .into(),
        );
    }
    for rule in &allowed {
        let protocol = rule["IPProtocol"].as_str().unwrap_or_default();
        if !["tcp", "udp", "icmp", "esp", "ah", "sctp", "ipip", "all"].contains(&protocol)
            && protocol.parse::<u8>().is_err()
        {
            return invalid(format!("Invalid value for field 'resource.allowed[0].IPProtocol': '{protocol}'."));
        }
        let ports = rule["ports"].as_array().map_or(0, Vec::len);
        if ports > 0 && !["tcp", "udp", "sctp"].contains(&protocol) {
            return invalid(format!(
                "Invalid value for field 'resource.allowed[0].ports': ports are only allowed for tcp, udp and sctp, not '{protocol}'."
            ));
        }
    }
    for field in ["sourceTags", "targetTags"] {
        if let Some(tag) =
            body[field].as_array().into_iter().flatten().filter_map(Value::as_str).find(|t| !valid_name(t))
        {
            return invalid(format!("Invalid value for field 'resource.{field}[0]': '{tag}'."));
        }
    }
    let link = format!("{BASE}/projects/{project}/global/firewalls/{name}");
    if fake.projects.get(project).is_some_and(|p| p.firewalls.contains_key(name)) {
        return error(
            409,
            "alreadyExists",
            &format!("The resource 'projects/{project}/global/firewalls/{name}' already exists"),
        );
    }
    let id = numeric_id();
    let mut resource = json!({
        "kind": "compute#firewall",
        "id": id,
        "creationTimestamp": rfc3339(SystemTime::now()),
        "name": name,
        "network": format!("{BASE}/projects/{project}/global/networks/default"),
        "priority": body["priority"].as_i64().unwrap_or(1000),
        "direction": body["direction"].as_str().unwrap_or("INGRESS"),
        "logConfig": {"enable": false},
        "disabled": false,
        "selfLink": link,
    });
    for field in ["description", "allowed", "denied", "sourceRanges", "sourceTags", "targetTags"] {
        if !body[field].is_null() {
            resource[field] = body[field].clone();
        }
    }
    fake.projects
        .entry(project.to_owned())
        .or_default()
        .firewalls
        .insert(name.to_owned(), FakeFirewall { resource, deleted_at: None });
    let op = fake.operation(project, None, "insert", link, &id, principal, None, now);
    remember(fake, project, query, &op);
    ok(op)
}

fn get_firewall(fake: &mut Fake, project: &str, name: &str) -> Response {
    fake.tick(Instant::now());
    match fake.projects.get(project).and_then(|p| p.firewalls.get(name)) {
        Some(rule) => ok(rule.resource.clone()),
        None => not_found(&format!("projects/{project}/global/firewalls/{name}")),
    }
}

fn list_firewalls(fake: &mut Fake, project: &str) -> Response {
    fake.tick(Instant::now());
    let items: Vec<Value> = fake
        .projects
        .get(project)
        .map_or_else(Vec::new, |p| p.firewalls.values().map(|f| f.resource.clone()).collect());
    page(items, &HashMap::new(), "compute#firewallList", &format!("{BASE}/projects/{project}/global/firewalls"))
}

fn delete_firewall(
    fake: &mut Fake,
    project: &str,
    name: &str,
    query: &HashMap<String, String>,
    principal: &str,
) -> Response {
    let now = Instant::now();
    fake.tick(now);
    match remembered(fake, project, query, now) {
        Ok(Some(op)) => return ok(op),
        Ok(None) => {}
        Err(response) => return response,
    }
    let latency = fake.latency;
    let Some(rule) = fake.projects.get_mut(project).and_then(|p| p.firewalls.get_mut(name)) else {
        return not_found(&format!("projects/{project}/global/firewalls/{name}"));
    };
    if rule.deleted_at.is_some() {
        return error(
            400,
            "resourceNotReady",
            &format!("The resource 'projects/{project}/global/firewalls/{name}' is not ready"),
        );
    }
    rule.deleted_at = Some(now + latency);
    let id = rule.resource["id"].as_str().unwrap_or_default().to_owned();
    let link = format!("{BASE}/projects/{project}/global/firewalls/{name}");
    let op = fake.operation(project, None, "delete", link, &id, principal, None, now);
    remember(fake, project, query, &op);
    ok(op)
}

/// Where an operation lives: its zone, its region, or the project (global).
#[derive(Clone, Copy)]
enum Scope<'a> {
    Zone(&'a str),
    Region(&'a str),
    Global,
}

/// Whether `region` is one of the fake's.
fn known_region(region: &str) -> bool {
    ZONES.iter().any(|(_, r)| *r == region)
}

fn insert_address(
    fake: &mut Fake,
    project: &str,
    region: &str,
    query: &HashMap<String, String>,
    body: &Bytes,
    principal: &str,
) -> Response {
    let now = Instant::now();
    fake.tick(now);
    if !known_region(region) {
        return invalid(format!("Invalid value for field 'region': '{region}'. Unknown region."));
    }
    match remembered(fake, project, query, now) {
        Ok(Some(op)) => return ok(op),
        Ok(None) => {}
        Err(response) => return response,
    }
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return error(400, "parseError", "Invalid JSON payload received.");
    };
    let name = body["name"].as_str().unwrap_or_default();
    if !valid_name(name) {
        return invalid(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        ));
    }
    let address_type = body["addressType"].as_str().unwrap_or("EXTERNAL");
    if address_type != "EXTERNAL" {
        return invalid(format!(
            "Invalid value for field 'resource.addressType': '{address_type}'. Only EXTERNAL addresses are served by the fake."
        ));
    }
    let tier = body["networkTier"].as_str().unwrap_or("PREMIUM");
    if !["PREMIUM", "STANDARD"].contains(&tier) {
        return invalid(format!("Invalid value for field 'resource.networkTier': '{tier}'."));
    }
    let link = format!("{BASE}/projects/{project}/regions/{region}/addresses/{name}");
    let key = (region.to_owned(), name.to_owned());
    if fake.projects.get(project).is_some_and(|p| p.addresses.contains_key(&key)) {
        return error(
            409,
            "alreadyExists",
            &format!("The resource 'projects/{project}/regions/{region}/addresses/{name}' already exists"),
        );
    }
    let entry = fake.projects.entry(project.to_owned()).or_default();
    let ip = match body["address"].as_str() {
        Some(ip) if ip.parse::<std::net::Ipv4Addr>().is_err() => {
            return invalid(format!("Invalid value for field 'resource.address': '{ip}'."));
        }
        Some(ip) if entry.addresses.values().any(|a| a.resource["address"] == ip) => {
            return invalid(format!(
                "Invalid value for field 'resource.address': '{ip}'. The address is already reserved."
            ));
        }
        Some(ip) => ip.to_owned(),
        None => {
            entry.next_ip += 1;
            let n = entry.next_ip;
            format!("35.{}.{}.{}", 200 + (n >> 16) % 50, (n >> 8) % 256, n % 250 + 2)
        }
    };
    let id = numeric_id();
    let mut resource = json!({
        "kind": "compute#address",
        "id": id,
        "creationTimestamp": rfc3339(SystemTime::now()),
        "name": name,
        "address": ip,
        "addressType": "EXTERNAL",
        "networkTier": tier,
        "ipVersion": "IPV4",
        "region": format!("{BASE}/projects/{project}/regions/{region}"),
        "labelFingerprint": "42WmSpB8rSM=",
        "selfLink": link,
    });
    if let Some(description) = body["description"].as_str() {
        resource["description"] = json!(description);
    }
    entry.addresses.insert(key, FakeAddress { resource, region: region.to_owned(), deleted_at: None });
    let op = fake.region_operation(project, region, "insert", (link, &id), principal, now);
    remember(fake, project, query, &op);
    ok(op)
}

fn get_address(fake: &mut Fake, project: &str, region: &str, name: &str) -> Response {
    fake.tick(Instant::now());
    let found = fake
        .projects
        .get(project)
        .and_then(|p| p.addresses.get(&(region.to_owned(), name.to_owned())).map(|a| p.render_address(a)));
    match found {
        Some(address) => ok(address),
        None => not_found(&format!("projects/{project}/regions/{region}/addresses/{name}")),
    }
}

fn list_addresses(fake: &mut Fake, project: &str, region: &str, query: &HashMap<String, String>) -> Response {
    fake.tick(Instant::now());
    if !known_region(region) {
        return invalid(format!("Invalid value for field 'region': '{region}'. Unknown region."));
    }
    let filter = match query.get("filter").map(|f| Filter::parse(f)) {
        None => Filter::default(),
        Some(Ok(filter)) => filter,
        Some(Err(message)) => {
            return invalid(format!(
                "Invalid value for field 'filter': '{}'. {message}",
                query.get("filter").map_or("", String::as_str)
            ));
        }
    };
    let items: Vec<Value> = fake.projects.get(project).map_or_else(Vec::new, |p| {
        p.addresses
            .iter()
            .filter(|((r, _), _)| r == region)
            .map(|(_, a)| p.render_address(a))
            .filter(|a| filter.matches(a))
            .collect()
    });
    page(items, query, "compute#addressList", &format!("{BASE}/projects/{project}/regions/{region}/addresses"))
}

fn delete_address(
    fake: &mut Fake,
    project: &str,
    region: &str,
    name: &str,
    query: &HashMap<String, String>,
    principal: &str,
) -> Response {
    let now = Instant::now();
    fake.tick(now);
    match remembered(fake, project, query, now) {
        Ok(Some(op)) => return ok(op),
        Ok(None) => {}
        Err(response) => return response,
    }
    let path = format!("projects/{project}/regions/{region}/addresses/{name}");
    let latency = fake.latency;
    let Some(held) = fake.projects.get_mut(project) else { return not_found(&path) };
    let Some(address) = held.addresses.get(&(region.to_owned(), name.to_owned())) else { return not_found(&path) };
    if address.deleted_at.is_some() {
        return error(400, "resourceNotReady", &format!("The resource '{path}' is not ready"));
    }
    let ip = address.resource["address"].as_str().unwrap_or_default().to_owned();
    if let Some(user) = held.users_of(region, &ip).into_iter().next() {
        let user = user.trim_start_matches(&format!("{BASE}/")).to_owned();
        return error(
            400,
            "resourceInUseByAnotherResource",
            &format!("The address resource '{path}' is already being used by '{user}'"),
        );
    }
    let Some(address) = held.addresses.get_mut(&(region.to_owned(), name.to_owned())) else { return not_found(&path) };
    address.deleted_at = Some(now + latency);
    let id = address.resource["id"].as_str().unwrap_or_default().to_owned();
    let link = format!("{BASE}/{path}");
    let op = fake.region_operation(project, region, "delete", (link, &id), principal, now);
    remember(fake, project, query, &op);
    ok(op)
}

fn find_operation<'a>(fake: &'a Fake, project: &str, scope: Scope<'_>, name: &str) -> Option<&'a FakeOperation> {
    let (zone, region) = match scope {
        Scope::Zone(zone) => (Some(zone), None),
        Scope::Region(region) => (None, Some(region)),
        Scope::Global => (None, None),
    };
    fake.projects
        .get(project)
        .and_then(|p| p.operations.get(name))
        .filter(|op| op.zone.as_deref() == zone && op.region.as_deref() == region)
}

fn operation_path(project: &str, scope: Scope<'_>, name: &str) -> String {
    match scope {
        Scope::Zone(zone) => format!("projects/{project}/zones/{zone}/operations/{name}"),
        Scope::Region(region) => format!("projects/{project}/regions/{region}/operations/{name}"),
        Scope::Global => format!("projects/{project}/global/operations/{name}"),
    }
}

fn get_operation(fake: &Fake, project: &str, scope: Scope<'_>, name: &str) -> Response {
    match find_operation(fake, project, scope, name) {
        Some(op) => ok(op.render(project, Instant::now())),
        None => not_found(&operation_path(project, scope, name)),
    }
}

/// Blocks until the operation is `DONE`, or two minutes, as Compute Engine does.
async fn wait_operation(state: &Arc<Mutex<Fake>>, project: &str, scope: Scope<'_>, name: &str) -> Response {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        {
            let mut fake = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = Instant::now();
            fake.tick(now);
            let Some(op) = find_operation(&fake, project, scope, name) else {
                return not_found(&operation_path(project, scope, name));
            };
            if op.done(now) || now >= deadline {
                return ok(op.render(project, now));
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The subset of Compute Engine's list filter the fake understands.
#[derive(Default, Debug)]
struct Filter {
    /// (field path, operator, value); all must hold.
    terms: Vec<(String, String, String)>,
}

impl Filter {
    fn parse(text: &str) -> Result<Self, String> {
        let unsupported = || "Invalid list filter expression.".to_owned();
        let mut terms = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            let (expr, tail) = if let Some(inner) = rest.strip_prefix('(') {
                let close = inner.find(')').ok_or_else(unsupported)?;
                (&inner[..close], &inner[close + 1..])
            } else if terms.is_empty() {
                (rest, "")
            } else {
                return Err(unsupported());
            };
            terms.push(Self::term(expr.trim()).ok_or_else(unsupported)?);
            rest = tail.trim_start();
            if let Some(after) = rest.strip_prefix("AND ") {
                rest = after.trim_start();
            } else if rest.starts_with("OR ") {
                return Err("OR is not supported by the fake.".into());
            }
        }
        Ok(Self { terms })
    }

    fn term(expr: &str) -> Option<(String, String, String)> {
        let (field, op, value) = if let Some((field, value)) = expr.split_once("!=") {
            (field, "!=", value)
        } else if let Some((field, value)) = expr.split_once('=') {
            (field, "=", value)
        } else if let Some((field, value)) = expr.split_once(':') {
            (field, ":", value)
        } else {
            return None;
        };
        let field = field.trim();
        let value = value.trim();
        let value = if value.len() >= 2
            && ((value.starts_with('"') && value.ends_with('"')) || (value.starts_with('\'') && value.ends_with('\'')))
        {
            &value[1..value.len() - 1]
        } else if value.contains(char::is_whitespace) || value.is_empty() {
            return None;
        } else {
            value
        };
        let known =
            ["name", "status", "id"].contains(&field) || field.strip_prefix("labels.").is_some_and(|k| !k.is_empty());
        if !known || (op == ":" && value != "*") {
            return None;
        }
        Some((field.to_owned(), op.to_owned(), value.to_owned()))
    }

    fn matches(&self, resource: &Value) -> bool {
        self.terms.iter().all(|(field, op, value)| {
            let actual = match field.strip_prefix("labels.") {
                Some(key) => resource["labels"][key].as_str(),
                None => resource[field.as_str()].as_str(),
            };
            match op.as_str() {
                "=" => actual == Some(value.as_str()),
                "!=" => actual != Some(value.as_str()),
                _ => actual.is_some(),
            }
        })
    }
}

/// A random numeric id, as Compute Engine's (19 digits).
fn numeric_id() -> String {
    (1_000_000_000_000_000_000 + rand::random::<u64>() % 8_000_000_000_000_000_000).to_string()
}

/// A numeric id that is the same for the same name.
fn stable_id(name: &str) -> String {
    let hash =
        name.bytes().fold(1_469_598_103_934_665_603_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(1_099_511_628_211));
    (1_000_000_000_000_000_000 + hash % 8_000_000_000_000_000_000).to_string()
}

/// A fingerprint: 9 random bytes, base64 (URL-safe; 12 characters, no padding needed).
fn fingerprint() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    (0..12).map(|_| ALPHABET[usize::from(rand::random::<u8>() % 64)] as char).collect()
}

/// Decodes unpadded base64url (as in a JWT).
fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0_u32;
    let mut bits = 0;
    for c in text.trim_end_matches('=').bytes() {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(out)
}

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

/// RFC 3339 in Pacific time as Compute Engine writes it (fixed -07:00 here).
fn rfc3339(time: SystemTime) -> String {
    crate::rfc3339::at_offset(time, -7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter() {
        let f = Filter::parse("labels.anycloud-cluster = \"abc-1\"").expect("parses");
        assert!(f.matches(&json!({"labels": {"anycloud-cluster": "abc-1"}})));
        assert!(!f.matches(&json!({"labels": {"anycloud-cluster": "abc-2"}})));
        let f = Filter::parse("(labels.a = \"x\") AND (status != TERMINATED)").expect("parses");
        assert!(f.matches(&json!({"labels": {"a": "x"}, "status": "RUNNING"})));
        assert!(!f.matches(&json!({"labels": {"a": "x"}, "status": "TERMINATED"})));
        assert!(Filter::parse("foo = bar").is_err());
        assert!(Filter::parse("(name = a) OR (name = b)").is_err());
    }

    #[test]
    fn encodings() {
        assert_eq!(base64url_decode("eyJhIjoxfQ").as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(7 * 3600)), "1970-01-01T00:00:00.000-07:00");
    }
}
