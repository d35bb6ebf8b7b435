//! Bad job requests, through the real binary: each is refused with a message that names what is
//! wrong (plainly, and as the `--json` error with its stable code), the documented exit code (3
//! bad input or conflict, 2 unknown), and changes nothing: the rows of `deployments`, every
//! `job.run` run in `engine_runs`, and the simulated kubelet's processes are the same before and
//! after each case.
//!
//! Cases: an unknown cluster, a cluster that is not ready, placement flags with `--cluster`, no
//! `--cluster`, no command, `-e` without `=`, an invalid image reference, `--cpus 0`, an
//! impossible `--memory`, a taken name, a deployment of another kind (`resubmit` of a service),
//! `logs` and `exec` of a job that never started, `resubmit` of a job that has not ended, and
//! `status` / `logs` / `terminate` of an unknown deployment.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{self, Api};
use serde_json::json;

/// What a bad request may not change.
#[derive(Debug, PartialEq, Eq)]
struct Footprint {
    deployments: Vec<String>,
    job_runs: Vec<String>,
    processes: Vec<u32>,
}

impl Footprint {
    fn of(api: &Api) -> Self {
        Self {
            deployments: api.query_strings(
                "SELECT json_array(id, name, kind, cluster_id, status, attempt, workflow_id, updated_at) \
                 FROM deployments ORDER BY id",
            ),
            job_runs: api.query_strings(
                "SELECT json_array(id, kind, status, updated_at) FROM engine_runs WHERE kind = 'job.run' ORDER BY seq",
            ),
            processes: e2e::processes_under(&api.data_dir()),
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

fn job<'a>(cluster: &'a str, extra: &[&'a str], command: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["job", "python:3.12", "--cluster", cluster];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    args
}

#[test]
fn bad_job_requests_are_refused_and_change_nothing() {
    let api = Api::start_hosted("jobs-bad-input").with_demo_cluster(&[]);
    // Its nodes never become Ready: it stays `creating` for the whole test.
    let answer = api
        .post_json("/v1/credentials", &json!({ "name": "stuck", "provider": "sim", "sim": { "never_ready": true } }));
    assert_eq!(answer.status, 201, "{answer:?}");
    e2e::wait_until(Duration::from_secs(30), "credential stuck to be valid", || {
        (api.credential("stuck")["status"] == "valid").then_some(())
    });
    api.cli(&e2e::sim_cluster_create("creating", "stuck", "1")).expect_code(0);
    let cluster_id =
        api.cli(&["--json", "cluster", "status", "demo"]).json()["cluster"]["id"].as_str().unwrap().to_owned();

    let ok = ["echo", "hi"];
    refused(
        &api,
        "an unknown cluster",
        &job("nowhere", &[], &ok),
        2,
        "CLUSTER_NOT_FOUND",
        &["`nowhere` does not exist"],
    );
    refused(&api, "a cluster that is not ready", &job("creating", &[], &ok), 3, "CLUSTER_NOT_READY", &["creating"]);
    refused(
        &api,
        "placement flags with --cluster",
        &job("demo", &["--region", "sim-east-1"], &ok),
        3,
        "PLACEMENT_WITH_CLUSTER",
        &["--region"],
    );
    refused(
        &api,
        "no --cluster",
        &["job", "python:3.12", "--", "echo", "hi"],
        3,
        "CLUSTER_REQUIRED",
        &["anycloud cluster create"],
    );
    refused(&api, "no command", &["job", "python:3.12", "--cluster", "demo"], 3, "INVALID_WORKLOAD", &["no command"]);
    refused(&api, "-e without =", &job("demo", &["-e", "NOVALUE"], &ok), 3, "INVALID_ARGUMENT", &["NOVALUE"]);
    refused(
        &api,
        "an invalid image",
        &["job", "Not_An/Image::", "--cluster", "demo", "--", "echo"],
        3,
        "INVALID_WORKLOAD",
        &["not a valid image reference"],
    );
    refused(&api, "--cpus 0", &job("demo", &["--cpus", "0"], &ok), 3, "INVALID_WORKLOAD", &["--cpus `0`"]);
    refused(
        &api,
        "an impossible --memory",
        &job("demo", &["--memory", "5Pi"], &ok),
        3,
        "INVALID_WORKLOAD",
        &["--memory"],
    );

    // A taken name: the first job is untouched.
    api.cli(&job("demo", &["-i", "taken", "--wait"], &ok)).expect_code(0);
    refused(
        &api,
        "a taken name",
        &job("demo", &["-i", "taken"], &ok),
        3,
        "DEPLOYMENT_EXISTS",
        &["anycloud resubmit taken"],
    );

    // Another kind of deployment, and a job whose run never started.
    api.add_deployment(&uuid::Uuid::new_v4().to_string(), "svc", "service", &cluster_id, "running");
    refused(&api, "resubmit of a service", &["resubmit", "svc"], 3, "WRONG_DEPLOYMENT_KIND", &["service"]);
    refused(
        &api,
        "logs of a service",
        &["logs", "svc"],
        3,
        "NOT_SUPPORTED_FOR_CLUSTER_SERVICES",
        &["not supported yet"],
    );
    api.add_deployment(&uuid::Uuid::new_v4().to_string(), "never", "job", &cluster_id, "queued");
    refused(
        &api,
        "logs of a job that never started",
        &["logs", "never"],
        3,
        "DEPLOYMENT_NOT_STARTED",
        &["not started"],
    );
    refused(
        &api,
        "exec in a job that never started",
        &["exec", "never", "--", "ls"],
        3,
        "DEPLOYMENT_NOT_STARTED",
        &["not started"],
    );
    refused(
        &api,
        "resubmit of a job that has not ended",
        &["resubmit", "never"],
        3,
        "DEPLOYMENT_NOT_ENDED",
        &["queued"],
    );

    // Unknown deployments.
    for args in [&["status", "ghost"][..], &["logs", "ghost"], &["terminate", "ghost"], &["resubmit", "ghost"]] {
        refused(&api, &format!("`{}` of an unknown deployment", args[0]), args, 2, "DEPLOYMENT_NOT_FOUND", &["ghost"]);
    }
    api.cli(&["wait", "deployment/ghost"]).expect_code(2);
}
