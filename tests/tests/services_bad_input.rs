//! Bad service requests, through the real binary: each is refused with a message that names what
//! is wrong (plainly, and as the `--json` error with its stable code), exit 3 (bad input or
//! conflict; 2 for an unknown deployment or cluster), and changes nothing: the rows of `deployments` and
//! `deployment_revisions` and every run in `engine_runs` are the same before and after each case.
//!
//! Cases: a public URL (`--public`, `--domain`), a checkpoint bucket, placement flags with
//! `--cluster`, `--replicas` and `--port` out of range, `-e PORT=...`, a name that does not start
//! with a letter, an unknown cluster, a taken name; on a running service: `logs`, `exec`, `status
//! --health`, `resubmit`, an upgrade to zero replicas; an upgrade of a job, and of an unknown
//! deployment.
#![allow(clippy::unwrap_used)]

use anycloud_tests::e2e::Api;

/// What a bad request may not change.
#[derive(Debug, PartialEq, Eq)]
struct Footprint {
    deployments: Vec<String>,
    revisions: Vec<String>,
    runs: Vec<String>,
}

impl Footprint {
    fn of(api: &Api) -> Self {
        Self {
            deployments: api.query_strings(
                "SELECT json_array(id, name, kind, status, revision, workflow_id, updated_at) FROM deployments ORDER BY id",
            ),
            revisions: api.query_strings(
                "SELECT json_array(deployment_id, number, result) FROM deployment_revisions ORDER BY deployment_id, number",
            ),
            runs: api.query_strings("SELECT json_array(id, kind) FROM engine_runs ORDER BY seq"),
        }
    }
}

/// Runs `anycloud ARGS` plainly and with `--json`: exit `code`, `error[ERROR_CODE]` with `words`
/// in its message, nothing on stdout, and nothing changed.
#[track_caller]
fn refused(api: &Api, what: &str, args: &[&str], code: i32, error_code: &str, words: &[&str]) {
    let before = Footprint::of(api);
    let out = api.cli(args);
    assert_eq!(out.code, code, "{what}: exit code\n{out}");
    let prefix = format!("error[{error_code}]: ");
    assert!(out.stderr.starts_with(&prefix), "{what}: stderr should start with {prefix:?}\n{out}");
    for word in words {
        assert!(out.stderr.contains(word), "{what}: stderr lacks {word:?}\n{out}");
    }
    assert!(out.stdout.is_empty(), "{what}: stdout should be empty\n{out}");
    let mut json_args = vec!["--json"];
    json_args.extend(args);
    let out = api.cli(&json_args);
    assert_eq!(out.code, code, "{what} (--json): exit code\n{out}");
    assert_eq!(out.json_error()["error"]["code"], error_code, "{what} (--json)\n{out}");
    assert_eq!(Footprint::of(api), before, "{what} changed something");
}

/// `service python:3.12 --cluster CLUSTER [extra] -- python3 -m http.server` (it serves on $PORT
/// through the shell).
fn service<'a>(cluster: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["service", "python:3.12", "--cluster", cluster];
    args.extend_from_slice(extra);
    args.extend(["--", "sh", "-c", "exec python3 -m http.server \"$PORT\""]);
    args
}

#[test]
fn bad_service_requests_are_refused_and_change_nothing() {
    let api = Api::start_hosted("services-bad-input").with_demo_cluster(&[]);

    let unsupported = "NOT_SUPPORTED_FOR_CLUSTER_SERVICES";
    refused(&api, "--public", &service("demo", &["--public"]), 3, unsupported, &["public Anycloud URL"]);
    refused(&api, "--domain", &service("demo", &["--domain", "api.example.com"]), 3, unsupported, &["public"]);
    refused(&api, "--checkpoint-bucket", &service("demo", &["--checkpoint-bucket", "b"]), 3, unsupported, &["bucket"]);
    refused(
        &api,
        "placement",
        &service("demo", &["--vm-type", "t3.small"]),
        3,
        "PLACEMENT_WITH_CLUSTER",
        &["--vm-type"],
    );
    for replicas in ["0", "101", "-1"] {
        refused(&api, "--replicas", &service("demo", &["--replicas", replicas]), 3, "INVALID_SERVICE", &["--replicas"]);
    }
    for port in ["0", "65536"] {
        refused(&api, "--port", &service("demo", &["--port", port]), 3, "INVALID_SERVICE", &["--port"]);
    }
    refused(&api, "-e PORT", &service("demo", &["-e", "PORT=1"]), 3, "INVALID_SERVICE", &["--port"]);
    refused(&api, "a name with a digit first", &service("demo", &["-i", "1web"]), 3, "INVALID_WORKLOAD", &["letter"]);
    refused(&api, "an unknown cluster", &service("nowhere", &[]), 2, "CLUSTER_NOT_FOUND", &["nowhere"]);

    // A running service, and a job.
    api.cli(&service("demo", &["-i", "web", "--wait"])).expect_code(0);
    refused(&api, "a taken name", &service("demo", &["-i", "web"]), 3, "DEPLOYMENT_EXISTS", &["web"]);
    refused(&api, "logs of a service", &["logs", "web"], 3, unsupported, &["not supported yet"]);
    refused(&api, "exec in a service", &["exec", "web", "--", "ls"], 3, unsupported, &["not supported yet"]);
    refused(&api, "live Pod health", &["status", "web", "--health"], 3, unsupported, &["live Pod health"]);
    refused(&api, "resubmit of a service", &["resubmit", "web"], 3, "WRONG_DEPLOYMENT_KIND", &["upgrade"]);
    let upgrade_zero = ["deployment", "upgrade", "web", "--replicas", "0"];
    refused(&api, "an upgrade to no replicas", &upgrade_zero, 3, "INVALID_SERVICE", &["--replicas"]);
    api.cli(&["job", "python:3.12", "--cluster", "demo", "-i", "batch", "--wait", "--", "true"]).expect_code(0);
    let upgrade_job = ["deployment", "upgrade", "batch", "--image", "python:3.13"];
    refused(&api, "an upgrade of a job", &upgrade_job, 3, "WRONG_DEPLOYMENT_KIND", &["resubmit"]);
    let upgrade_ghost = ["deployment", "upgrade", "ghost"];
    refused(&api, "an upgrade of an unknown deployment", &upgrade_ghost, 2, "DEPLOYMENT_NOT_FOUND", &["ghost"]);
}
