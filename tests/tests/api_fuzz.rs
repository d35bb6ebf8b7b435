//! Property-based fuzzing of every route of a real running API (`anycloud api serve`, SQLite):
//! random methods, path segments, query strings, headers and bodies (raw bytes, any JSON, and
//! JSON shaped like the routes' bodies with wrong, missing, extra or hostile fields). Whatever
//! is sent, the API answers without a 500 (the only 5xx is a 503 saying what outside it is
//! away, [`UNAVAILABLE`]) and keeps running (a panicking handler would drop the
//! connection), every refusal is a JSON error with a code, and a refusal writes nothing: every
//! table of the database is read (full rows, opened read-only) before and after each refused
//! request and must be the same.
//!
//! Without the API's token, every route but health answers 401 and nothing else, whatever the
//! method, path, query, headers or body (each route is also swept once with each kind of wrong
//! token). The simulated Kubernetes' routes (`/sim/kube/VM/...`, on a hosted API with a running
//! simulated cluster) are fuzzed the same way: without the cluster's token (none, a wrong one,
//! the API's), every one answers 401 before anything else (no 404 for a VM that does not exist,
//! no 405, 406, 413 or 400); with it, no 5xx, every refusal a Kubernetes `Status` whose `code`
//! is the HTTP status, and the API keeps answering.
//!
//! The cases are bounded so that the default run takes well under a minute;
//! `ANYCLOUD_FUZZ_CASES=5000 cargo test -p anycloud-tests --test api_fuzz` runs longer
//! (docs/reliability.md, "Inputs fuzzed").
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, HttpResponse};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};

/// Cases in the default test run.
const DEFAULT_CASES: u32 = 1000;

/// Cases of the simulated Kubernetes' routes in the default test run.
const DEFAULT_KUBE_CASES: u32 = 600;

/// Every route of `cli/src/server/mod.rs`, with `{}` for a path parameter.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/health"),
    ("GET", "/v1/status"),
    ("GET", "/v1/openapi.json"),
    ("POST", "/v1/console/codes"),
    ("GET", "/v1/apis"),
    ("POST", "/v1/apis"),
    ("GET", "/v1/apis/{}"),
    ("DELETE", "/v1/apis/{}"),
    ("GET", "/v1/apis/{}/access"),
    ("POST", "/v1/apis/{}/rotate-ca"),
    ("PUT", "/v1/binaries/{}"),
    ("GET", "/v1/credentials/{}/vm-types/{}"),
    ("GET", "/v1/credentials"),
    ("POST", "/v1/credentials"),
    ("GET", "/v1/credentials/{}"),
    ("DELETE", "/v1/credentials/{}"),
    ("GET", "/v1/clusters"),
    ("POST", "/v1/clusters"),
    ("GET", "/v1/clusters/{}"),
    ("DELETE", "/v1/clusters/{}"),
    ("GET", "/v1/clusters/{}/kubeconfig"),
    ("POST", "/v1/jobs"),
    ("POST", "/v1/services"),
    ("GET", "/v1/deployments"),
    ("GET", "/v1/deployments/{}"),
    ("POST", "/v1/deployments/{}/terminate"),
    ("POST", "/v1/deployments/{}/resubmit"),
    ("POST", "/v1/deployments/{}/upgrade"),
    ("GET", "/v1/deployments/{}/logs"),
    ("GET", "/v1/deployments/{}/exec"),
    ("GET", "/v1/workflows"),
    ("GET", "/v1/workflows/{}"),
    ("GET", "/v1/workflows/{}/events"),
    ("POST", "/v1/workflows/{}/retry"),
    ("POST", "/v1/workflows/{}/resume"),
    ("POST", "/v1/workflows/{}/cancel"),
    ("POST", "/v1/tls/renew"),
    ("GET", "/v1/secrets"),
    ("POST", "/v1/secrets"),
    ("GET", "/v1/secrets/{}"),
    ("PUT", "/v1/secrets/{}"),
    ("DELETE", "/v1/secrets/{}"),
];

/// The only 5xx an answer may be: 503 with one of these codes, when something outside the API
/// (its database, a cluster's control plane, a provider) is away; the request changed nothing
/// and may be sent again (docs/cli.md). The seeded job's cluster has no control plane, so its
/// logs answer `CLUSTER_UNREACHABLE`.
const UNAVAILABLE: &[&str] = &["DATABASE_UNAVAILABLE", "CLUSTER_UNREACHABLE", "PROVIDER_UNAVAILABLE"];

/// Field names of the routes' bodies and query strings (`workflows/src/wire/`), so that shaped
/// bodies and queries reach the checks behind deserialization.
const FIELDS: &[&str] = &[
    "name",
    "values",
    "registry",
    "host",
    "username",
    "password",
    "secrets",
    "pull_secrets",
    "provider",
    "access_key_id",
    "secret_access_key",
    "service_account_json",
    "region",
    "endpoint",
    "sim",
    "credentials",
    "vm_type",
    "min_vms",
    "max_vms",
    "cluster",
    "image",
    "command",
    "env",
    "cpus",
    "memory",
    "port",
    "replicas",
    "progress_deadline_s",
    "checkpoint_bucket",
    "checkpoint_storage_credentials",
    "binary",
    "binary_url",
    "binary_sha256",
    "delete_bucket",
    "kind",
    "status",
    "resource",
    "limit",
    "before",
    "after",
    "follow",
    "stdin",
    "value",
];

/// The seeded resources' names and ids, so that some requests reach an existing record.
struct Known {
    names: Vec<String>,
    ids: Vec<String>,
}

/// One request.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    auth: Auth,
    content_type: Option<String>,
    extra_headers: Vec<(String, String)>,
    body: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    Token,
    None,
    Wrong,
    TokenWithSuffix,
    Basic,
    /// The other router's token: the API's on a cluster's routes, a cluster's on the API's.
    Other,
}

/// Every way of not holding the token.
const NO_TOKEN: [Auth; 5] = [Auth::None, Auth::Wrong, Auth::TokenWithSuffix, Auth::Basic, Auth::Other];

/// Whether `request` is the one the API answers without a token: `GET /v1/health`.
fn is_health(request: &Request) -> bool {
    request.method == "GET" && request.path.split('?').next() == Some("/v1/health")
}

/// Text a person or an attacker might put anywhere: names, look-alikes, zero-width and control
/// characters, escapes, numbers, very long strings, anything.
fn hostile_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "[a-z0-9-]{0,70}",
        1 => Just("tеam".to_owned()),        // Cyrillic е
        1 => Just("ｔｅａｍ".to_owned()),     // fullwidth
        1 => Just("te\u{200b}am".to_owned()), // zero-width space
        1 => Just("red\x1b[31m".to_owned()),
        1 => Just("../../etc/passwd".to_owned()),
        1 => Just("'; DROP TABLE credentials; --".to_owned()),
        1 => Just("%00%ff%".to_owned()),
        1 => Just("\u{0}".to_owned()),
        1 => Just("-1".to_owned()),
        1 => Just("18446744073709551616".to_owned()),
        1 => (1usize..5000).prop_map(|n| "a".repeat(n)),
        3 => any::<String>(),
    ]
    .boxed()
}

/// A path segment: a seeded name or id, encoded hostile text, or raw request-target characters.
fn segment(known: &Known) -> BoxedStrategy<String> {
    let names: Vec<String> = known.names.iter().chain(&known.ids).cloned().collect();
    prop_oneof![
        2 => proptest::sample::select(names),
        4 => hostile_text().prop_map(|text| encode(&text)),
        2 => "[A-Za-z0-9%._~!$&'()*+,;=:@-]{0,40}",
        1 => Just(String::new()),
    ]
    .boxed()
}

fn query() -> BoxedStrategy<String> {
    let key = prop_oneof![4 => proptest::sample::select(FIELDS).prop_map(str::to_owned), 1 => "[a-z_%]{0,10}"];
    let value = prop_oneof![
        1 => Just("true".to_owned()),
        1 => Just("0".to_owned()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => "[a-z_]{0,12}",
        2 => hostile_text().prop_map(|text| encode(&text)),
    ];
    prop_oneof![
        2 => Just(String::new()),
        3 => proptest::collection::vec((key, value), 1..4).prop_map(|pairs| {
            let pairs: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("?{}", pairs.join("&"))
        }),
        1 => "[?&=a-z0-9%]{0,30}".prop_map(|raw| format!("?{raw}")),
    ]
    .boxed()
}

fn json_leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        3 => hostile_text().prop_map(Value::String),
        2 => proptest::sample::select(&["sim", "aws", "gcp", "azure", "sim.small", "sim-east-1"][..])
            .prop_map(Value::from),
    ]
    .boxed()
}

fn any_json() -> BoxedStrategy<Value> {
    json_leaf()
        .prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![proptest::sample::select(FIELDS).prop_map(str::to_owned), any::<String>()],
                    inner,
                    0..6
                )
                .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
        .boxed()
}

/// A JSON object with some of the routes' fields, each with any JSON value.
fn shaped_json(known: &Known) -> BoxedStrategy<Value> {
    let names: Vec<Value> = known.names.iter().map(|name| Value::from(name.as_str())).collect();
    let value = prop_oneof![3 => any_json(), 1 => proptest::sample::select(names)];
    proptest::collection::btree_map(proptest::sample::select(FIELDS).prop_map(str::to_owned), value, 0..8)
        .prop_map(|map| Value::Object(map.into_iter().collect()))
        .boxed()
}

fn body(known: &Known) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        2 => Just(Vec::new()),
        2 => proptest::collection::vec(any::<u8>(), 0..512),
        3 => any_json().prop_map(|value| value.to_string().into_bytes()),
        6 => shaped_json(known).prop_map(|value| value.to_string().into_bytes()),
        1 => (60_000usize..70_000).prop_map(|n| json!({"name": "x".repeat(n), "provider": "sim"}).to_string().into_bytes()),
    ]
    .boxed()
}

fn headers() -> BoxedStrategy<Vec<(String, String)>> {
    let name = "x-[a-z0-9-]{0,20}|accept|accept-encoding|user-agent|cookie|origin|range|if-none-match|x-forwarded-for";
    proptest::collection::vec((name, "[ -~]{0,120}"), 0..4).boxed()
}

fn request(known: &Known) -> BoxedStrategy<Request> {
    let route = proptest::sample::select(ROUTES);
    let method = prop_oneof![
        8 => Just(None),
        1 => proptest::sample::select(&["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"][..]).prop_map(Some),
    ];
    let auth = auth();
    let content_type = prop_oneof![
        6 => Just(Some("application/json".to_owned())),
        1 => Just(None),
        1 => Just(Some("text/plain".to_owned())),
        1 => Just(Some("application/json; charset=latin1".to_owned())),
        1 => "[ -~]{0,40}".prop_map(Some),
    ];
    (route, method, segment(known), query(), auth, content_type, headers(), body(known))
        .prop_map(|((route_method, template), method, segment, query, auth, content_type, extra_headers, body)| {
            Request {
                method: method.unwrap_or(route_method).to_owned(),
                path: format!("{}{query}", template.replace("{}", &segment)),
                auth,
                content_type,
                extra_headers,
                body,
            }
        })
        .boxed()
}

/// With the token three times in four, else any way of not holding it.
fn auth() -> BoxedStrategy<Auth> {
    prop_oneof![15 => Just(Auth::Token), 5 => proptest::sample::select(&NO_TOKEN[..])].boxed()
}

/// Percent-encodes every byte outside RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Sends `request` with `token` (or a wrong one, or `other`, as it says).
fn send_with(api: &Api, token: &str, other: &str, request: &Request) -> HttpResponse {
    let auth = match request.auth {
        Auth::Token => Some(format!("Bearer {token}")),
        Auth::None => None,
        Auth::Wrong => Some("Bearer not-the-token".to_owned()),
        Auth::TokenWithSuffix => Some(format!("Bearer {token}x")),
        Auth::Basic => Some(format!("Basic {token}")),
        Auth::Other => Some(format!("Bearer {other}")),
    };
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if let Some(auth) = &auth {
        headers.push(("Authorization", auth));
    }
    if let Some(content_type) = &request.content_type {
        headers.push(("Content-Type", content_type));
    }
    for (name, value) in &request.extra_headers {
        headers.push((name, value));
    }
    e2e::http(&api.url, &request.method, &request.path, &headers, &request.body)
}

fn send(api: &Api, token: &str, request: &Request) -> HttpResponse {
    send_with(api, token, "a-cluster-token", request)
}

/// Every table of the SQLite file (full rows, sorted), opened read-only.
type Tables = BTreeMap<String, Vec<String>>;

fn all_tables(path: &Path) -> Tables {
    e2e::block_on(async {
        use sqlx::Connection;
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path).read_only(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
        let tables: Vec<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        let mut all = Tables::new();
        for table in tables {
            let columns: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_info($1) ORDER BY cid")
                .bind(&table)
                .fetch_all(&mut conn)
                .await
                .unwrap();
            let select: Vec<String> = columns.iter().map(|column| format!("quote(\"{column}\")")).collect();
            let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT json_array({}) AS row FROM \"{table}\" ORDER BY row",
                select.join(", ")
            )))
            .fetch_all(&mut conn)
            .await
            .unwrap();
            all.insert(table, rows);
        }
        conn.close().await.unwrap();
        all
    })
}

/// The first table that differs, for a failure message.
fn first_difference(before: &Tables, after: &Tables) -> Option<String> {
    let names: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    names
        .into_iter()
        .find(|name| before.get(*name) != after.get(*name))
        .map(|name| format!("table {name}:\nbefore {:#?}\nafter {:#?}", before.get(name), after.get(name)))
}

/// Waits until no run is in flight (an accepted request may have started one), cancelling any
/// still going after a while, so that the tables are still between requests.
fn settle(api: &Api, token: &str) {
    const IN_FLIGHT: &str =
        "SELECT id FROM engine_runs WHERE status NOT IN ('succeeded', 'failed', 'cancelled', 'needs-attention')";
    let start = Instant::now();
    let mut cancelled = false;
    loop {
        let running = api.query_strings(IN_FLIGHT);
        if running.is_empty() {
            return;
        }
        if !cancelled && start.elapsed() > Duration::from_secs(10) {
            for id in &running {
                e2e::post_json(&api.url, token, &format!("/v1/workflows/{id}/cancel"), "{}");
            }
            cancelled = true;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "runs still in flight after 60 s: {running:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A cluster row whose create failed (an API that is not hosted creates none), written through a
/// second connection to the API's SQLite file.
fn add_failed_cluster(api: &Api, id: &str, name: &str, credential: &str) {
    e2e::block_on(async {
        use sqlx::Connection;
        let options =
            sqlx::sqlite::SqliteConnectOptions::new().filename(api.sqlite_path()).busy_timeout(Duration::from_secs(10));
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
        sqlx::query(
            "INSERT INTO clusters (id, name, credential, provider, region, vm_type, min_vms, max_vms, phase, reason, \
             created_at, updated_at) VALUES ($1, $2, $3, 'sim', 'sim-east-1', 'sim.small', 1, 1, 'failed', 'fuzz', $4, $4)",
        )
        .bind(id)
        .bind(name)
        .bind(credential)
        .bind(e2e::now_ms())
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
    });
}

fn cases() -> u32 {
    std::env::var("ANYCLOUD_FUZZ_CASES").ok().map_or(DEFAULT_CASES, |cases| {
        cases.parse().unwrap_or_else(|_| panic!("ANYCLOUD_FUZZ_CASES={cases:?} is not a number"))
    })
}

/// Sends every route (method and path) once with each way of not holding the token, with its
/// own method and with `PATCH` (which no route takes), a 100 KiB JSON body, and an `Accept` no
/// route answers: each must be 401 (`answer` says the status, whether the body is the router's
/// 401, and the body), but `GET /v1/health`.
fn sweep_without_token(routes: &[(&str, String)], answer: impl Fn(&Request) -> (u16, bool, String)) {
    let big = json!({ "name": "x".repeat(100 * 1024) }).to_string().into_bytes();
    let mut swept = 0;
    for (method, path) in routes {
        for method in [*method, "PATCH"] {
            for auth in NO_TOKEN {
                let request = Request {
                    method: method.to_owned(),
                    path: path.clone(),
                    auth,
                    content_type: Some("application/json".to_owned()),
                    extra_headers: vec![("Accept".to_owned(), "application/vnd.kubernetes.protobuf".to_owned())],
                    body: big.clone(),
                };
                if is_health(&request) {
                    continue;
                }
                let (status, unauthorized, body) = answer(&request);
                assert!(
                    status == 401 && unauthorized,
                    "{method} {path} with {auth:?}: {status} {}",
                    body.chars().take(500).collect::<String>()
                );
                swept += 1;
            }
        }
    }
    eprintln!("{swept} requests without the token, every route: 401");
}

#[test]
fn every_route_survives_any_input_and_a_refusal_writes_nothing() {
    let api = Api::start("fuzz");
    let token = api.token();
    // Something for requests to reach: a verified credential, its verification's run, a cluster
    // whose create failed, and a job row on it.
    api.cli(&["credentials", "new", "fuzz-sim", "--provider", "sim", "--wait"]).expect_code(0);
    let cluster = "5e0c7a1d-2b3f-4c6d-8e9f-0a1b2c3d4e5f";
    add_failed_cluster(&api, cluster, "fuzz-cluster", "fuzz-sim");
    let deployment = "0b9d1c7e-5f42-4a8e-9d6b-3c2a1f0e9d8c";
    api.add_deployment(deployment, "fuzz-job", "job", cluster, "running");
    let runs = api.query_strings("SELECT id FROM engine_runs");
    let known = Known {
        names: ["fuzz-sim", "fuzz-cluster", "fuzz-job", "fuzz"].map(str::to_owned).to_vec(),
        ids: runs.into_iter().chain([deployment.to_owned(), cluster.to_owned()]).collect(),
    };
    settle(&api, &token);
    let before = all_tables(&api.sqlite_path());
    sweep_without_token(
        &ROUTES.iter().map(|(method, route)| (*method, route.replace("{}", deployment))).collect::<Vec<_>>(),
        |request| {
            let answer = send(&api, &token, request);
            let json: Value = serde_json::from_str(&answer.body).unwrap_or_default();
            (answer.status, json["error"]["code"] == "UNAUTHORIZED", answer.body)
        },
    );
    assert_eq!(first_difference(&before, &all_tables(&api.sqlite_path())), None, "a request without the token wrote");

    // `run` takes a `Fn`: what the cases share is in cells.
    let before = RefCell::new(before);
    let statuses: RefCell<BTreeMap<u16, u32>> = RefCell::default();
    let cases = cases();
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let started = Instant::now();
    let result = runner.run(&request(&known), |request| {
        let answer = send(&api, &token, &request);
        *statuses.borrow_mut().entry(answer.status).or_default() += 1;
        let shown = |answer: &HttpResponse| {
            format!(
                "{} {} -> {} {}",
                request.method,
                request.path,
                answer.status,
                answer.body.chars().take(2000).collect::<String>()
            )
        };
        if request.auth != Auth::Token && !is_health(&request) && answer.status != 401 {
            return Err(TestCaseError::fail(format!("not 401 without the token: {}", shown(&answer))));
        }
        if answer.status >= 400 {
            let json: Option<Value> = serde_json::from_str(&answer.body).ok();
            let code = json.as_ref().and_then(|json| json["error"]["code"].as_str()).unwrap_or_default();
            let message = json.as_ref().and_then(|json| json["error"]["message"].as_str()).unwrap_or_default();
            if code.is_empty() || message.is_empty() {
                return Err(TestCaseError::fail(format!("a refusal without a JSON error: {}", shown(&answer))));
            }
            if answer.status >= 500 && !(answer.status == 503 && UNAVAILABLE.contains(&code)) {
                return Err(TestCaseError::fail(format!("a server error: {}", shown(&answer))));
            }
            let after = all_tables(&api.sqlite_path());
            if let Some(difference) = first_difference(&before.borrow(), &after) {
                return Err(TestCaseError::fail(format!("a refusal wrote: {}\n{difference}", shown(&answer))));
            }
        } else {
            settle(&api, &token);
            *before.borrow_mut() = all_tables(&api.sqlite_path());
        }
        Ok(())
    });
    let elapsed = started.elapsed();
    eprintln!(
        "{cases} cases in {:.1} s; answers by status (shrinking included) {:?}",
        elapsed.as_secs_f64(),
        statuses.borrow()
    );
    if let Err(failure) = result {
        panic!("{failure}\nAPI logs:\n{}", api.logs());
    }
    let logs = api.logs();
    assert!(!logs.contains("panicked"), "the API panicked:\n{logs}");
    assert!(api.cli(&["--json", "credentials", "list"]).code == 0, "the API stopped answering");
}

/// Every route of the simulated Kubernetes (`sim/src/kube/mod.rs`), after `/sim/kube/VM`, with `{}`
/// for a path parameter; `*` stands for any method (the catch-all).
const KUBE_ROUTES: &[(&str, &str)] = &[
    ("GET", "/version"),
    ("GET", "/version/"),
    ("GET", "/api"),
    ("GET", "/api/"),
    ("GET", "/api/v1"),
    ("GET", "/api/v1/"),
    ("GET", "/apis"),
    ("GET", "/apis/"),
    ("GET", "/apis/{}/{}"),
    ("GET", "/apis/{}/{}/"),
    ("GET", "/openapi/v2"),
    ("GET", "/openapi/v3"),
    ("GET", "/openapi/v3/"),
    ("GET", "/openapi/v3/{}/{}"),
    ("GET", "/api/v1/nodes"),
    ("GET", "/api/v1/nodes/{}"),
    ("GET", "/api/v1/{}"),
    ("POST", "/api/v1/{}"),
    ("GET", "/api/v1/{}/{}"),
    ("PUT", "/api/v1/{}/{}"),
    ("PATCH", "/api/v1/{}/{}"),
    ("DELETE", "/api/v1/{}/{}"),
    ("GET", "/api/v1/{}/{}/status"),
    ("PUT", "/api/v1/{}/{}/status"),
    ("PATCH", "/api/v1/{}/{}/status"),
    ("GET", "/api/v1/namespaces/{}/{}"),
    ("POST", "/api/v1/namespaces/{}/{}"),
    ("GET", "/api/v1/namespaces/{}/{}/{}"),
    ("PUT", "/api/v1/namespaces/{}/{}/{}"),
    ("PATCH", "/api/v1/namespaces/{}/{}/{}"),
    ("DELETE", "/api/v1/namespaces/{}/{}/{}"),
    ("GET", "/api/v1/namespaces/{}/{}/{}/status"),
    ("PUT", "/api/v1/namespaces/{}/{}/{}/status"),
    ("PATCH", "/api/v1/namespaces/{}/{}/{}/status"),
    ("GET", "/api/v1/namespaces/{}/pods/{}/log"),
    ("GET", "/api/v1/namespaces/{}/pods/{}/exec"),
    ("POST", "/api/v1/namespaces/{}/pods/{}/exec"),
    ("GET", "/apis/{}/{}/{}"),
    ("GET", "/apis/{}/{}/namespaces/{}/{}"),
    ("POST", "/apis/{}/{}/namespaces/{}/{}"),
    ("GET", "/apis/{}/{}/namespaces/{}/{}/{}"),
    ("PUT", "/apis/{}/{}/namespaces/{}/{}/{}"),
    ("PATCH", "/apis/{}/{}/namespaces/{}/{}/{}"),
    ("DELETE", "/apis/{}/{}/namespaces/{}/{}/{}"),
    ("GET", "/apis/{}/{}/namespaces/{}/{}/{}/status"),
    ("PUT", "/apis/{}/{}/namespaces/{}/{}/{}/status"),
    ("PATCH", "/apis/{}/{}/namespaces/{}/{}/{}/status"),
    ("*", ""),
    ("*", "/"),
    ("*", "/{}"),
    ("*", "/{}/{}/{}"),
];

/// Path segments a cluster knows: namespaces, resources, groups, versions, node names.
const KUBE_SEGMENTS: &[&str] = &[
    "default",
    "kube-system",
    "anycloud",
    "pods",
    "jobs",
    "deployments",
    "replicasets",
    "services",
    "endpoints",
    "events",
    "namespaces",
    "nodes",
    "configmaps",
    "batch",
    "apps",
    "v1",
    "v2",
    "cp",
    "w0",
];

/// Query keys the simulated apiserver reads (not `watch` or `follow`, which stream: a watch comes
/// with `timeoutSeconds=1`).
const KUBE_QUERY_KEYS: &[&str] = &[
    "labelSelector",
    "fieldSelector",
    "limit",
    "continue",
    "resourceVersion",
    "resourceVersionMatch",
    "fieldValidation",
    "fieldManager",
    "dryRun",
    "force",
    "propagationPolicy",
    "orphanDependents",
    "gracePeriodSeconds",
    "container",
    "command",
    "stdin",
    "stdout",
    "stderr",
    "tty",
    "tailLines",
    "sinceSeconds",
    "sinceTime",
    "timestamps",
    "previous",
    "limitBytes",
    "pretty",
];

/// A request to a cluster's routes, and whether it names the cluster's control plane.
#[derive(Debug, Clone)]
struct KubeRequest {
    request: Request,
    at_the_cluster: bool,
}

fn kube_segment() -> BoxedStrategy<String> {
    prop_oneof![
        6 => proptest::sample::select(KUBE_SEGMENTS).prop_map(str::to_owned),
        3 => hostile_text().prop_map(|text| encode(&text)),
        1 => "[A-Za-z0-9%._~!$&'()*+,;=:@-]{0,40}",
        1 => Just(String::new()),
    ]
    .boxed()
}

fn kube_query() -> BoxedStrategy<String> {
    let key = proptest::sample::select(KUBE_QUERY_KEYS).prop_map(str::to_owned);
    let value = prop_oneof![
        1 => Just("true".to_owned()),
        1 => Just("0".to_owned()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => proptest::sample::select(&["Strict", "Warn", "Ignore", "All", "Foreground", "app%3Dweb", "metadata.name%3Dx"][..])
            .prop_map(str::to_owned),
        2 => hostile_text().prop_map(|text| encode(&text)),
    ];
    prop_oneof![
        3 => Just(String::new()),
        4 => proptest::collection::vec((key, value), 1..4).prop_map(|pairs| {
            let pairs: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("?{}", pairs.join("&"))
        }),
        1 => Just("?watch=true&timeoutSeconds=1".to_owned()),
        1 => Just("?watch=1&resourceVersion=0&timeoutSeconds=1&labelSelector=a%3Db".to_owned()),
    ]
    .boxed()
}

/// Bodies shaped like the served kinds, with any fields and values; anything; and one just over
/// the 3 MiB limit.
fn kube_body() -> BoxedStrategy<Vec<u8>> {
    let kind = proptest::sample::select(
        &["Namespace", "Pod", "Job", "Deployment", "ReplicaSet", "Service", "Endpoints", "Event", "Status", "x"][..],
    );
    let api_version = proptest::sample::select(&["v1", "batch/v1", "apps/v1", "meta.k8s.io/v1", "v2"][..]);
    let object = (api_version, kind, hostile_text(), any_json(), any_json()).prop_map(
        |(api_version, kind, name, labels, spec)| {
            json!({ "apiVersion": api_version, "kind": kind, "metadata": { "name": name, "labels": labels },
                    "spec": spec })
            .to_string()
            .into_bytes()
        },
    );
    prop_oneof![
        3 => Just(Vec::new()),
        1 => proptest::collection::vec(any::<u8>(), 0..512),
        2 => any_json().prop_map(|value| value.to_string().into_bytes()),
        4 => object,
        1 => Just(format!("{{\"a\": \"{}\"}}", "x".repeat(3 * 1024 * 1024)).into_bytes()),
    ]
    .boxed()
}

fn kube_request(vm: &str) -> BoxedStrategy<KubeRequest> {
    let vm = vm.to_owned();
    let target = prop_oneof![9 => Just(vm.clone()), 1 => kube_segment()];
    let method = prop_oneof![
        8 => Just(None),
        1 => proptest::sample::select(&["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"][..]).prop_map(Some),
    ];
    let content_type = prop_oneof![
        4 => Just(Some("application/json".to_owned())),
        1 => Just(None),
        1 => proptest::sample::select(
            &[
                "application/yaml",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/json-patch+json",
                "application/apply-patch+yaml",
                "application/vnd.kubernetes.protobuf",
                "application/cbor",
            ][..]
        )
        .prop_map(|media| Some(media.to_owned())),
        1 => "[ -~]{0,40}".prop_map(Some),
    ];
    let accept = prop_oneof![
        4 => Just(Vec::new()),
        1 => proptest::sample::select(
            &[
                "application/json",
                "application/vnd.kubernetes.protobuf",
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
                "text/html",
            ][..]
        )
        .prop_map(|accept| vec![("Accept".to_owned(), accept.to_owned())]),
    ];
    let segments = proptest::collection::vec(kube_segment(), 5);
    (
        proptest::sample::select(KUBE_ROUTES),
        method,
        target,
        segments,
        kube_query(),
        auth(),
        content_type,
        accept,
        kube_body(),
    )
        .prop_map(
            move |((route_method, template), method, target, segments, query, auth, content_type, accept, body)| {
                let mut path = template.to_owned();
                for segment in &segments {
                    path = path.replacen("{}", segment, 1);
                }
                let method = method.unwrap_or(if route_method == "*" { "GET" } else { route_method });
                KubeRequest {
                    at_the_cluster: target == vm,
                    request: Request {
                        method: method.to_owned(),
                        path: format!("/sim/kube/{target}{path}{query}"),
                        auth,
                        content_type,
                        extra_headers: accept,
                        body,
                    },
                }
            },
        )
        .boxed()
}

/// The control plane VM and the token of the ready cluster `name`, from its kubeconfig.
fn cluster_access(api: &Api, name: &str) -> (String, String) {
    let answer = e2e::http(
        &api.url,
        "GET",
        &format!("/v1/clusters/{name}/kubeconfig"),
        &[("Authorization", &format!("Bearer {}", api.token()))],
        b"",
    );
    let kubeconfig = answer.json()["kubeconfig"].as_str().unwrap().to_owned();
    let value = |key: &str| {
        kubeconfig
            .lines()
            .find_map(|line| line.trim().strip_prefix(key).map(|value| value.trim().to_owned()))
            .unwrap_or_else(|| panic!("no {key} in {kubeconfig}"))
    };
    let vm = value("tls-server-name:").strip_suffix(anycloud_sim::kube::tls::NAME_SUFFIX).unwrap().to_owned();
    (vm, value("token:"))
}

/// Whether `answer` is the simulated apiserver's `Status` for its own HTTP status.
fn is_status(answer: &HttpResponse) -> bool {
    let json: Value = serde_json::from_str(&answer.body).unwrap_or_default();
    json["kind"] == "Status" && json["code"] == answer.status && json["reason"].is_string()
}

#[test]
fn every_route_of_the_simulated_kubernetes_checks_its_token_first_and_survives_any_input() {
    let api = Api::start_hosted("fuzz-kube");
    let api_token = api.token();
    api.cli(&["credentials", "new", "sim", "--provider", "sim", "--wait"]).expect_code(0);
    let mut create = e2e::sim_cluster_create("fuzzed", "sim", "1");
    create.push("--wait");
    api.cli(&create).expect_code(0);
    let (vm, token) = cluster_access(&api, "fuzzed");
    let seen = e2e::http(
        &api.url,
        "GET",
        &format!("/sim/kube/{vm}/api/v1/namespaces"),
        &[("Authorization", &format!("Bearer {token}"))],
        b"",
    );
    assert_eq!(seen.status, 200, "{seen:?}");

    // Every route, with each way of not holding the token, and with the token for a VM that is
    // not the cluster's: 401, and nothing written.
    let before = all_tables(&api.sqlite_path());
    let fill = |template: &str| template.replace("{}", "default").replace("/default/default", "/default/pods");
    let routes: Vec<(&str, String)> = KUBE_ROUTES
        .iter()
        .flat_map(|(method, route)| {
            let method = if *method == "*" { "DELETE" } else { *method };
            [
                (method, format!("/sim/kube/{vm}{}", fill(route))),
                (method, format!("/sim/kube/no-such-vm{}", fill(route))),
            ]
        })
        .collect();
    sweep_without_token(&routes, |request| {
        let answer = send_with(&api, &token, &api_token, request);
        (answer.status, is_status(&answer) || answer.body.contains("UNAUTHORIZED"), answer.body)
    });
    for (method, path) in routes.iter().filter(|(_, path)| path.contains("no-such-vm")) {
        let request = Request {
            method: (*method).to_owned(),
            path: path.clone(),
            auth: Auth::Token,
            content_type: None,
            extra_headers: Vec::new(),
            body: Vec::new(),
        };
        let answer = send_with(&api, &token, &api_token, &request);
        assert!(answer.status == 401 && is_status(&answer), "{method} {path} with a cluster's token: {answer:?}");
    }
    assert_eq!(first_difference(&before, &all_tables(&api.sqlite_path())), None, "a request without the token wrote");

    let cases = std::env::var("ANYCLOUD_FUZZ_CASES")
        .ok()
        .map_or(DEFAULT_KUBE_CASES, |cases| cases.parse::<u32>().unwrap().max(1) * 3 / 5);
    let statuses: RefCell<BTreeMap<u16, u32>> = RefCell::default();
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let started = Instant::now();
    let result = runner.run(&kube_request(&vm), |KubeRequest { request, at_the_cluster }| {
        let answer = send_with(&api, &token, &api_token, &request);
        *statuses.borrow_mut().entry(answer.status).or_default() += 1;
        let shown = format!(
            "{} {} ({:?}, {} bytes) -> {} {}",
            request.method,
            request.path.chars().take(300).collect::<String>(),
            request.auth,
            request.body.len(),
            answer.status,
            answer.body.chars().take(1000).collect::<String>()
        );
        if request.auth != Auth::Token || !at_the_cluster {
            if answer.status != 401 {
                return Err(TestCaseError::fail(format!("not 401 without the cluster's token: {shown}")));
            }
            return Ok(());
        }
        if answer.status >= 500 {
            return Err(TestCaseError::fail(format!("a server error: {shown}")));
        }
        if answer.status >= 400 && !is_status(&answer) {
            return Err(TestCaseError::fail(format!("a refusal that is not a Status: {shown}")));
        }
        Ok(())
    });
    eprintln!(
        "{cases} cases of the simulated Kubernetes in {:.1} s; answers by status (shrinking included) {:?}",
        started.elapsed().as_secs_f64(),
        statuses.borrow()
    );
    if let Err(failure) = result {
        panic!("{failure}\nAPI logs:\n{}", api.logs());
    }
    let logs = api.logs();
    assert!(!logs.contains("panicked"), "the API panicked:\n{logs}");
    let still = e2e::http(
        &api.url,
        "GET",
        &format!("/sim/kube/{vm}/version"),
        &[("Authorization", &format!("Bearer {token}"))],
        b"",
    );
    assert_eq!(still.status, 200, "the simulated Kubernetes stopped answering: {still:?}");
}
