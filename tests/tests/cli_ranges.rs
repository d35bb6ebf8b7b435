//! No number a user types panics the CLI: each has a range, and a number outside it (or too large
//! for any integer) is refused with a clear error before anything is sent, through the real
//! binary against a hosted API on SQLite with a valid sim credential.
//!
//! For every case, plainly and with `--json`: exit 3, no `panicked` anywhere, stderr starting
//! `error[INVALID_ARGUMENT]: ` that names the flag and the value (or the JSON error body with
//! that code), nothing on stdout, and nothing changed: the API's SQLite file, opened read-only,
//! holds the same rows of `credentials`, `clusters`, `vms`, `engine_runs` and of the simulated
//! cloud (`sim_vms`, `sim_networks`, `sim_api_calls`) before and after, and `cluster list` stays
//! empty. Cases: durations (`--timeout` of `cluster create --wait`, `cluster delete --wait` and
//! `wait`: past a week, zero, past `u64` seconds, past `u64` itself), the `--sim-*` numbers of
//! `credentials new` one past their limits (and negative, and past `u64`), capacities past `i64`,
//! `--limit` past `u32`, and `--port` past `u16`.
//!
//! The API checks the same ranges (a raw `POST /v1/credentials` with sim settings one past
//! their limits is refused `400 INVALID_CREDENTIAL`, naming the setting and its range, and a
//! number past its type is `400 INVALID_REQUEST`), and `workflow list --limit` past 1000 is the
//! API's `INVALID_LIMIT`.
#![allow(clippy::unwrap_used)]

use anycloud_tests::e2e::{self, Api};
use serde_json::json;

/// What a refused command may not change.
#[derive(Debug, PartialEq, Eq)]
struct Footprint(Vec<Vec<String>>);

impl Footprint {
    fn of(api: &Api) -> Self {
        Self(
            [
                "SELECT json_array(name, provider, public, status, status_message, verify_run, updated_at) \
                 FROM credentials ORDER BY name",
                "SELECT json_array(id, name, credential, phase, workflow_id, updated_at) FROM clusters ORDER BY id",
                "SELECT json_array(cluster_id, provider_id, state, updated_at) FROM vms ORDER BY cluster_id, provider_id",
                "SELECT json_array(id, kind, status, resource_key, updated_at) FROM engine_runs ORDER BY seq",
                "SELECT json_array(id, terminated_at) FROM sim_vms ORDER BY id",
                "SELECT json_array(id, deleted_at) FROM sim_networks ORDER BY id",
                "SELECT json_array(account, calls) FROM sim_api_calls ORDER BY account",
            ]
            .iter()
            .map(|sql| api.query_strings(sql))
            .collect(),
        )
    }
}

/// `cluster create c` on the valid credential, with these extra arguments.
fn create<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = e2e::sim_cluster_create("c", "good", "1");
    args.extend(extra);
    args
}

/// `credentials new s --provider sim` with these extra arguments.
fn sim_credential<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["credentials", "new", "s", "--provider", "sim", "--wait"];
    args.extend(extra);
    args
}

/// Runs `args` plainly and with `--json`: refused with `code` (exit 3), naming `words`,
/// nothing changed.
#[track_caller]
fn refused(api: &Api, args: &[&str], code: &str, words: &[&str]) {
    let before = Footprint::of(api);
    let out = api.cli(args);
    out.expect_code(3);
    let prefix = format!("error[{code}]: ");
    assert!(out.stderr.starts_with(&prefix), "stderr should start with {prefix:?}\n{out}");
    assert!(!out.stderr.contains("panicked") && !out.stdout.contains("panicked"), "{out}");
    for word in words {
        assert!(out.stderr.contains(word), "stderr lacks {word:?}\n{out}");
    }
    assert!(out.stdout.is_empty(), "stdout should be empty\n{out}");

    let mut json_args = vec!["--json"];
    json_args.extend(args);
    let out = api.cli(&json_args);
    out.expect_code(3);
    assert!(!out.stderr.contains("panicked"), "{out}");
    let error = out.json_error();
    assert_eq!(error["error"]["code"], code, "{out}");
    let message = error["error"]["message"].as_str().unwrap();
    for word in words {
        assert!(message.contains(word), "the JSON message lacks {word:?}\n{out}");
    }
    assert!(out.stdout.is_empty(), "stdout should be empty\n{out}");
    assert_eq!(Footprint::of(api), before, "`anycloud {}` changed something", args.join(" "));
}

/// Sends a sim credential with these settings as a raw `POST /v1/credentials`; it must be
/// refused 400 with `code`, naming `words`, and change nothing.
#[track_caller]
fn refused_by_api(api: &Api, sim: serde_json::Value, code: &str, words: &[&str]) {
    let before = Footprint::of(api);
    let body = json!({ "name": "raw", "provider": "sim", "sim": sim });
    let answer = api.post_json("/v1/credentials", &body);
    assert_eq!(answer.status, 400, "{body}: {answer:?}");
    let error = answer.json();
    assert_eq!(error["error"]["code"], code, "{body}: {answer:?}");
    let message = error["error"]["message"].as_str().unwrap();
    for word in words {
        assert!(message.contains(word), "{body}: the message lacks {word:?}: {message}");
    }
    assert_eq!(Footprint::of(api), before, "{body} changed something");
}

#[test]
fn numbers_out_of_range_are_refused_before_anything_happens() {
    let api = Api::start_hosted("cli-ranges");
    api.cli(&["credentials", "new", "good", "--provider", "sim", "--wait"]).expect_code(0);
    let start = Footprint::of(&api);
    assert_eq!(start.0[1].len(), 0, "no cluster yet: {start:#?}");

    let week = "out of range: use 1s to 7d";
    for timeout in ["18446744073709551615h", "8d", "169h", "604801s", "0s", "0"] {
        let words = ["--timeout", timeout, week];
        refused(&api, &create(&["--wait", "--timeout", timeout]), "INVALID_ARGUMENT", &words);
        refused(&api, &["wait", "cluster/x", "--timeout", timeout], "INVALID_ARGUMENT", &words);
        refused(&api, &["cluster", "delete", "x", "--wait", "--timeout", timeout], "INVALID_ARGUMENT", &words);
    }
    refused(&api, &["wait", "cluster/x", "--timeout", "99999999999h"], "INVALID_ARGUMENT", &["99999999999h", week]);
    // Past u64 itself: out of range all the same.
    refused(
        &api,
        &create(&["--wait", "--timeout", "99999999999999999999999999s"]),
        "INVALID_ARGUMENT",
        &["--timeout", "99999999999999999999999999s", week],
    );

    for (flag, value, range) in [
        ("--sim-latency-ms", "60001", "out of range: use 0 to 60000"),
        ("--sim-boot-ms", "3600001", "out of range: use 0 to 3600000"),
        ("--sim-error-rate", "101", "0..=100"),
        ("--sim-error-rate", "256", "0..=100"),
        ("--sim-fail-first", "1000001", "0..=1000000"),
        ("--sim-quota-vms", "10001", "0..=10000"),
        ("--sim-fail-first", "-1", "0..=1000000"),
    ] {
        let flag_value = format!("{flag}={value}");
        refused(&api, &sim_credential(&[&flag_value]), "INVALID_ARGUMENT", &[flag, value, range]);
    }
    refused(
        &api,
        &sim_credential(&["--sim-latency-ms", "99999999999999999999999"]),
        "INVALID_ARGUMENT",
        &["--sim-latency-ms", "99999999999999999999999", "out of range: use 0 to 60000"],
    );
    // A negative number gets the same answer: the range.
    refused(
        &api,
        &sim_credential(&["--sim-latency-ms=-1"]),
        "INVALID_ARGUMENT",
        &["--sim-latency-ms", "out of range: use 0 to 60000"],
    );
    refused(
        &api,
        &sim_credential(&["--sim-seed", "18446744073709551616"]),
        "INVALID_ARGUMENT",
        &["--sim-seed", "number too large"],
    );
    // The largest values in range are accepted by the CLI's parser: the same command with
    // `--sim-latency-ms 60000` is only refused by the API for its name (a taken one).
    refused(
        &api,
        &["credentials", "new", "good", "--provider", "sim", "--sim-latency-ms", "60000", "--sim-boot-ms", "3600000"],
        "CREDENTIAL_EXISTS",
        &["credential `good` already exists"],
    );

    let mut too_large = create(&[]);
    too_large[10] = "99999999999999999999";
    refused(&api, &too_large, "INVALID_ARGUMENT", &["--min-vms", "99999999999999999999", "number too large"]);
    let mut too_small = create(&[]);
    too_small.truncate(11);
    too_small.push("--max-vms=-99999999999999999999");
    refused(&api, &too_small, "INVALID_ARGUMENT", &["--max-vms", "-99999999999999999999", "number too small"]);

    refused(&api, &["workflow", "list", "--limit", "4294967296"], "INVALID_ARGUMENT", &["--limit", "4294967296"]);
    refused(
        &api,
        &["workflow", "list", "--limit", "1001"],
        "INVALID_LIMIT",
        &["limit 1001 is out of range: use 1 to 1000"],
    );
    refused(&api, &["workflow", "list", "--limit", "0"], "INVALID_LIMIT", &["limit 0 is out of range"]);
    refused(&api, &["api", "serve", "--port", "70000"], "INVALID_ARGUMENT", &["--port", "70000", "0..=65535"]);

    // The API holds the same ranges for a client that is not the CLI.
    for (sim, words) in [
        (json!({ "latency_ms": 99_999_999 }), "--sim-latency-ms 99999999 is out of range: use 0 to 60000"),
        (json!({ "latency_ms": 60_001 }), "--sim-latency-ms 60001 is out of range: use 0 to 60000"),
        (json!({ "boot_ms": 3_600_001 }), "--sim-boot-ms 3600001 is out of range: use 0 to 3600000"),
        (json!({ "error_rate": 101 }), "--sim-error-rate 101 is out of range: use 0 to 100"),
        (json!({ "fail_first": 1_000_001 }), "--sim-fail-first 1000001 is out of range: use 0 to 1000000"),
        (json!({ "quota_vms": 10_001 }), "--sim-quota-vms 10001 is out of range: use 0 to 10000"),
    ] {
        refused_by_api(&api, sim, "INVALID_CREDENTIAL", &["credential `raw`", words]);
    }
    for sim in [json!({ "latency_ms": 1e30 }), json!({ "error_rate": 256 }), json!({ "fail_first": -1 })] {
        refused_by_api(&api, sim, "INVALID_REQUEST", &["the request body has the wrong shape"]);
    }

    // Nothing was made by any of them.
    assert_eq!(Footprint::of(&api), start);
    let list = api.cli(&["--json", "cluster", "list"]);
    list.expect_code(0);
    assert_eq!(list.json()["clusters"], json!([]), "{list}");
    assert!(api.query_strings("SELECT id FROM clusters").is_empty());
    assert!(api.query_strings("SELECT id FROM engine_runs WHERE kind LIKE 'cluster.%'").is_empty());
    let names: Vec<String> =
        api.credentials().iter().map(|credential| credential["name"].as_str().unwrap().to_owned()).collect();
    assert_eq!(names, ["good"]);
}
