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
