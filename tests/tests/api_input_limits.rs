//! Limits on what people send, the same through the CLI and the API.
//!
//! One set of limits on the names people give, the same for every kind of resource
//! (`workflows/src/names.rs`): a DNS label of 1 to 63 ASCII lowercase letters, digits and
//! hyphens. Unicode look-alikes (a Cyrillic `а`, fullwidth letters), zero-width characters,
//! control characters, capitals, underscores, dots, a leading or trailing hyphen, an empty name
//! and a 64-character one are each refused for a credential, a cluster, a job, a service and a
//! hosted API, with 400, the kind's error code, a message that names the rule and shows the name
//! with every non-ASCII character escaped, and nothing written.
//!
//! A credential's fields of another provider are refused, not ignored, by the CLI (exit 3) and
//! the API (400 `INVALID_CREDENTIAL`), and nothing is stored.
//!
//! Every list answers a page at a time: credentials, clusters and hosted APIs by name, a run's
//! timeline by position, at most 1000 (`limit` 1 to 1000, else `400 INVALID_LIMIT`; the next page
//! `after` the last name or `seq`); the CLI reads every page (1,003 credentials and a timeline of
//! 1,500 entries are shown whole).
#![allow(clippy::unwrap_used)]

use anycloud_tests::e2e::{self, Api};
use serde_json::{Value, json};

/// A name that is refused, and why it looks as if it should not be.
const BAD_NAMES: &[(&str, &str)] = &[
    ("te\u{0430}m", "a Cyrillic а in place of a Latin a"),
    ("\u{ff54}\u{ff45}\u{ff41}\u{ff4d}", "fullwidth letters"),
    ("te\u{200b}am", "a zero-width space"),
    ("team\u{200d}", "a trailing zero-width joiner"),
    ("\u{feff}team", "a leading byte-order mark"),
    ("red\u{1b}[31m", "a terminal escape"),
    ("Team", "a capital"),
    ("team_aws", "an underscore"),
    ("team.aws", "a dot"),
    ("-team", "a leading hyphen"),
    ("team-", "a trailing hyphen"),
    ("team aws", "a space"),
    ("", "an empty name"),
];

/// The tables that hold what people name, and the runs that would act on them.
const NAMED: &[&str] = &["credentials", "clusters", "deployments", "hosted_apis", "engine_runs"];

fn counts(api: &Api) -> Vec<String> {
    NAMED
        .iter()
        .map(|table| {
            let rows = api.query_strings(&format!("SELECT CAST(count(*) AS TEXT) FROM {table}"));
            format!("{table}: {}", rows.join(""))
        })
        .collect()
}

/// A body for `kind` with `name`, valid in every other way (with a good name, each is accepted
/// or refused for another reason than its name).
fn body(kind: &str, name: &str) -> (&'static str, Value) {
    match kind {
        "credential" => ("/v1/credentials", json!({"name": name, "provider": "sim"})),
        "cluster" => (
            "/v1/clusters",
            json!({"name": name, "credentials": "names-sim", "region": "sim-east-1", "vm_type": "sim.small",
                   "min_vms": 1, "max_vms": 1}),
        ),
        "job" => ("/v1/jobs", json!({"cluster": "none", "name": name, "image": "python:3.12", "command": ["true"]})),
        "service" => (
            "/v1/services",
            json!({"cluster": "none", "name": name, "image": "python:3.12", "command": ["true"], "port": 8080}),
        ),
        "API" => (
            "/v1/apis",
            json!({"name": name, "credentials": "names-sim", "vm_type": "sim.small",
                   "checkpoint_bucket": "s3://names-bucket"}),
        ),
        other => panic!("no body for {other}"),
    }
}

#[test]
fn every_resource_refuses_the_same_bad_names() {
    let api = Api::start_hosted("names");
    api.cli(&["credentials", "new", "names-sim", "--provider", "sim", "--wait"]).expect_code(0);
    let long = "a".repeat(64);
    let mut names: Vec<(&str, &str)> = BAD_NAMES.to_vec();
    names.push((&long, "64 characters"));
    let kinds = [
        ("credential", "INVALID_CREDENTIAL", "credential"),
        ("cluster", "INVALID_CLUSTER", "cluster"),
        ("job", "INVALID_WORKLOAD", "deployment"),
        ("service", "INVALID_WORKLOAD", "deployment"),
        ("API", "INVALID_HOSTED_API", "API"),
    ];
    let before = counts(&api);
    for (kind, code, called) in kinds {
        for (name, why) in &names {
            let (path, request) = body(kind, name);
            let answer = api.post_json(path, &request);
            let what = format!("a {kind} named with {why} ({name:?})");
            assert_eq!(answer.status, 400, "{what}: {answer:?}");
            let json = answer.json();
            assert_eq!(json["error"]["code"], code, "{what}: {answer:?}");
            let message = json["error"]["message"].as_str().unwrap();
            assert!(message.contains(&format!("{called} name `")), "{what}: {message}");
            assert!(message.contains("is not a DNS label: use 1 to 63 lowercase letters"), "{what}: {message}");
            assert!(
                message.chars().all(|c| c.is_ascii_graphic() || c == ' '),
                "{what}: not shown escaped: {message:?}"
            );
            if !name.is_ascii() {
                assert!(message.contains("\\u{"), "{what}: the look-alike is not shown for what it is: {message}");
            }
            assert_eq!(counts(&api), before, "{what}: something was written");
        }
    }
    // The limits are the only reason: the same bodies with a good name get past the name check.
    for (kind, code, _) in kinds {
        let (path, request) = body(kind, "good-name");
        let answer = api.post_json(path, &request);
        let json: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
        assert!(
            answer.status < 300 || json["error"]["code"] != code || !answer.body.contains("is not a DNS label"),
            "a {kind} with a good name was refused for its name: {answer:?}"
        );
    }
    e2e::wait_until(std::time::Duration::from_secs(30), "the API to still answer", || {
        (api.cli(&["--json", "credentials", "list"]).code == 0).then_some(())
    });
}

#[test]
fn fields_of_another_provider_are_refused_not_ignored() {
    let api = Api::start("foreign");
    let out = api.cli(&["credentials", "new", "x", "--provider", "sim", "--endpoint", "http://127.0.0.1:1"]);
    out.expect_code(3);
    out.expect_stderr("credential `x`: --endpoint (--provider aws or gcp) does not apply to --provider sim; remove it");
    let cases = [
        (
            json!({"name": "x", "provider": "gcp", "service_account_json": "{}", "access_key_id": "AKIAEXAMPLE"}),
            "credential `x`: `access_key_id` does not apply to provider gcp; remove it",
        ),
        (
            json!({"name": "x", "provider": "aws", "access_key_id": "AKIAEXAMPLE", "secret_access_key": "s",
                   "service_account_json": "{}"}),
            "credential `x`: `service_account_json` does not apply to provider aws; remove it",
        ),
        (
            json!({"name": "x", "provider": "sim", "endpoint": "https://example.com", "region": "us-east-1"}),
            "credential `x`: `region`, `endpoint` do not apply to provider sim; remove them",
        ),
        (
            json!({"name": "x", "provider": "aws", "access_key_id": "AKIAEXAMPLE", "secret_access_key": "s",
                   "sim": {}}),
            "credential `x`: `sim` does not apply to provider aws; remove it",
        ),
    ];
    for (request, message) in cases {
        let answer = api.post_json("/v1/credentials", &request);
        assert_eq!(answer.status, 400, "{request}: {answer:?}");
        let json = answer.json();
        assert_eq!(json["error"]["code"], "INVALID_CREDENTIAL", "{request}: {answer:?}");
        assert_eq!(json["error"]["message"], message, "{request}: {answer:?}");
    }
    assert!(api.credentials().is_empty(), "a refused credential was stored: {:?}", api.credentials());
    assert!(api.query_strings("SELECT id FROM engine_runs").is_empty(), "a refused credential started a run");
}

/// Runs `sql` on the API's SQLite file, beside the running API.
fn write_sql(api: &Api, sql: &str) {
    e2e::block_on(async {
        use sqlx::Connection;
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(api.sqlite_path())
            .busy_timeout(std::time::Duration::from_secs(10));
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    });
}

fn get(api: &Api, path: &str) -> e2e::HttpResponse {
    e2e::http(&api.url, "GET", path, &[("Authorization", &format!("Bearer {}", api.token()))], b"")
}

#[test]
fn lists_and_timelines_answer_a_page_at_a_time_and_the_cli_reads_them_all() {
    let api = Api::start("pages");
    api.cli(&["credentials", "new", "base", "--provider", "sim", "--wait"]).expect_code(0);
    // 1,002 more credentials, copies of `base` under other names, and 1,500 more entries in the
    // timeline of `base`'s verification.
    write_sql(
        &api,
        "WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < 1002) \
         INSERT INTO credentials (name, provider, public, secret, status, status_message, verify_run, created_at, \
         updated_at) SELECT printf('c-%04d', n), provider, public, secret, status, status_message, verify_run, \
         created_at, updated_at FROM credentials, k WHERE name = 'base'",
    );
    let run = api.query_strings("SELECT verify_run FROM credentials WHERE name = 'base'").remove(0);
    let before = get(&api, &format!("/v1/workflows/{run}/events")).json()["events"].as_array().unwrap().len();
    write_sql(
        &api,
        &format!(
            "WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < 1500) \
             INSERT INTO engine_events (run_id, n, at, kind, step, message) \
             SELECT '{run}', 1000 + n, 1, 'claimed', NULL, 'claimed by page-test (pid 1)' FROM k"
        ),
    );

    // A page of at most 1000, by name; the next after the last name.
    let names = |answer: &e2e::HttpResponse| -> Vec<String> {
        answer.json()["credentials"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let first = names(&get(&api, "/v1/credentials"));
    assert_eq!((first.len(), first[0].as_str(), first[999].as_str()), (1000, "base", "c-0999"));
    let rest = names(&get(&api, "/v1/credentials?after=c-0999"));
    assert_eq!(rest, ["c-1000", "c-1001", "c-1002"]);
    assert_eq!(names(&get(&api, "/v1/credentials?limit=2&after=c-0500")), ["c-0501", "c-0502"]);
    // The timeline too, by position.
    let events = |answer: &e2e::HttpResponse| answer.json()["events"].as_array().unwrap().clone();
    let page = events(&get(&api, &format!("/v1/workflows/{run}/events")));
    assert_eq!(page.len(), 1000);
    let last = page[999]["seq"].as_i64().unwrap();
    let next = events(&get(&api, &format!("/v1/workflows/{run}/events?after={last}")));
    assert_eq!(page.len() + next.len(), before + 1500);
    assert_eq!(events(&get(&api, &format!("/v1/workflows/{run}/events?limit=3"))).len(), 3);
    // A limit out of range, on every list.
    for path in [
        "/v1/credentials?limit=0".to_owned(),
        "/v1/clusters?limit=1001".to_owned(),
        "/v1/apis?limit=5000".to_owned(),
        format!("/v1/workflows/{run}/events?limit=0"),
        "/v1/workflows?limit=1001".to_owned(),
        "/v1/deployments?limit=501".to_owned(),
    ] {
        let answer = get(&api, &path);
        assert_eq!((answer.status, answer.json()["error"]["code"].as_str()), (400, Some("INVALID_LIMIT")), "{path}");
    }
    let answer = get(&api, "/v1/clusters?name=x");
    assert_eq!((answer.status, answer.json()["error"]["code"].as_str()), (400, Some("INVALID_REQUEST")));

    // The CLI reads every page.
    let listed = api.cli(&["--json", "credentials", "list"]);
    listed.expect_code(0);
    assert_eq!(listed.json().as_array().unwrap().len(), 1003);
    let inspected = api.cli(&["--json", "workflow", "inspect", &run, "--events"]);
    inspected.expect_code(0);
    assert_eq!(inspected.json()["events"].as_array().unwrap().len(), before + 1500);
}
