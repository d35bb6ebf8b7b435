//! Jobs on a simulated cluster, end to end through the real binary and a hosted API on SQLite.
//! The simulated kubelet runs each container's command as a local process, so what a job does is
//! checked outside anycloud too: its process (found by a marker in its command line) and its
//! output.
//!
//! - a job that prints and exits 0 ends `completed` with its logs; one that exits 3 ends
//!   `errored`, showing exit code 3;
//! - a long job: `logs --follow` streams lines while it runs; `exec` returns a command's output
//!   and exit code, with stdin passed through; the cluster's delete is refused while it runs,
//!   naming it; `terminate` ends it `terminated` and its process is gone;
//! - `resubmit` runs attempt 2 to completion;
//! - a SIGKILL of the API while a job runs: the job's process keeps running, the run resumes after
//!   the restart, and the job ends `completed` with all of its logs;
//! - once no job runs, the cluster's delete is accepted.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, Output};
use serde_json::Value;

/// How long a `--wait` may take before the test fails.
const WAIT: Duration = Duration::from_secs(90);

fn status(api: &Api, name: &str) -> Value {
    let out = api.cli(&["--json", "status", name]);
    out.expect_code(0);
    out.json()
}

/// Waits until the job's state is `state`.
fn wait_for_state(api: &Api, name: &str, state: &str) -> Value {
    e2e::wait_until(WAIT, &format!("job {name} to be {state}"), || {
        let detail = status(api, name);
        (detail["state"] == state).then_some(detail)
    })
}

/// A hosted API on the simulated cloud with a ready one-worker cluster `demo`.
fn api_with_cluster() -> Api {
    Api::start_hosted("jobs").with_demo_cluster(&[])
}

/// `job python:3.12 --cluster demo -i NAME [extra] -- sh -c SCRIPT MARKER`: the marker is the
/// shell's `$0`, so the process can be found by its command line.
fn job(api: &Api, name: &str, extra: &[&str], script: &str) -> Output {
    let marker = format!("anycloud-test-{name}");
    let mut args = vec!["job", "python:3.12", "--cluster", "demo", "-i", name];
    args.extend_from_slice(extra);
    args.extend(["--", "sh", "-c", script, &marker]);
    api.cli(&args)
}

fn process_of(name: &str) -> Vec<u32> {
    e2e::processes_with(&format!("anycloud-test-{name}"))
}

#[test]
fn jobs_run_report_and_end_on_a_simulated_cluster() {
    let mut api = api_with_cluster();

    // ---- Exit 0: completed, with its logs.
    let out = job(&api, "hello", &["-e", "WHO=world", "--wait"], "echo hello $WHO; echo second line");
    out.expect_code(0);
    let detail = status(&api, "hello");
    assert_eq!(detail["state"], "completed", "{detail:#}");
    assert_eq!(detail["deployment"]["exit_code"], 0, "{detail:#}");
    assert_eq!(detail["deployment"]["attempt"], 1, "{detail:#}");
    assert_eq!(detail["workflow"]["status"], "succeeded", "{detail:#}");
    let logs = api.cli(&["logs", "hello"]);
    logs.expect_code(0);
    assert_eq!(logs.stdout, "hello world\nsecond line\n");
    let shown = api.cli(&["status", "hello"]);
    shown.expect_code(0);
    for words in ["completed", "python:3.12", "demo", "not pulled"] {
        assert!(shown.stdout.contains(words), "`status hello` does not say {words:?}:\n{shown}");
    }

    // ---- Exit 3: errored, showing the exit code; `wait` exits 1.
    job(&api, "three", &["--wait"], "echo failing >&2; exit 3").expect_code(1);
    let detail = status(&api, "three");
    assert_eq!(detail["state"], "errored", "{detail:#}");
    assert_eq!(detail["deployment"]["exit_code"], 3, "{detail:#}");
    let shown = api.cli(&["status", "three"]);
    assert!(shown.stdout.contains("exit code 3"), "{shown}");
    api.cli(&["wait", "deployment/three"]).expect_code(1);
    assert!(api.cli(&["logs", "three"]).stdout.contains("failing"));

    // ---- A long job: follow its logs, exec in it, refuse the cluster's delete, terminate it.
    job(&api, "long", &[], "i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo line $i; sleep 0.1; done").expect_code(0);
    wait_for_state(&api, "long", "running");
    let follow = api.spawn_cli(&["logs", "long", "--follow"]);
    e2e::wait_until(Duration::from_secs(30), "`logs --follow` to stream lines", || {
        let so_far = follow.stdout_so_far();
        (so_far.contains("line 1\n") && so_far.contains("line 3\n")).then_some(())
    });
    let exec = api.cli(&["exec", "long", "--", "sh", "-c", "echo in the container; echo oops >&2; exit 7"]);
    exec.expect_code(7);
    assert_eq!(exec.stdout, "in the container\n", "{exec}");
    assert!(exec.stderr.contains("oops"), "{exec}");
    let echoed = api.cli_stdin(&["exec", "long", "--", "cat"], b"piped through stdin\n");
    echoed.expect_code(0);
    assert_eq!(echoed.stdout, "piped through stdin\n", "{echoed}");

    let refused = api.cli(&["cluster", "delete", "demo"]);
    refused.expect_code(3).expect_stderr("CLUSTER_IN_USE").expect_stderr("long").expect_stderr("anycloud terminate");

    assert!(!process_of("long").is_empty(), "the long job's process is not running");
    api.cli(&["terminate", "long"]).expect_code(0);
    api.cli(&["wait", "deployment/long"]).expect_code(1);
    let detail = status(&api, "long");
    assert_eq!(detail["state"], "terminated", "{detail:#}");
    e2e::wait_until(Duration::from_secs(30), "the long job's process to be gone", || {
        process_of("long").is_empty().then_some(())
    });
    let follow = follow.wait(Duration::from_secs(30));
    assert!(follow.stdout.contains("line 3\n"), "{follow}");
    // Terminating again changes nothing.
    api.cli(&["terminate", "long"]).expect_code(0);
    assert_eq!(status(&api, "long")["state"], "terminated");

    // ---- Resubmit: attempt 2 runs to completion.
    api.cli(&["resubmit", "hello", "--wait"]).expect_code(0);
    let detail = status(&api, "hello");
    assert_eq!(detail["deployment"]["attempt"], 2, "{detail:#}");
    assert_eq!(detail["state"], "completed", "{detail:#}");
    assert_eq!(api.cli(&["logs", "hello"]).stdout, "hello world\nsecond line\n");

    // ---- SIGKILL of the API while a job runs: the process survives, the run resumes.
    let script = "i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo tick $i; sleep 0.1; done";
    job(&api, "survivor", &[], script).expect_code(0);
    wait_for_state(&api, "survivor", "running");
    api.kill();
    let pids = process_of("survivor");
    assert!(!pids.is_empty(), "the job's process died with the API");
    let killed_at = Instant::now();
    api.restart();
    api.cli(&["wait", "deployment/survivor", "--timeout", "90s"]).expect_code(0);
    assert!(killed_at.elapsed() < WAIT);
    let logs = api.cli(&["logs", "survivor"]).stdout;
    let expected: String = (1..=40).map(|i| format!("tick {i}\n")).collect();
    assert_eq!(logs, expected, "the job's logs lost lines across the API's restart");

    // ---- Lists, then the cluster's delete once no job runs.
    let listed = api.cli(&["--json", "job", "list"]);
    listed.expect_code(0);
    let listed = listed.json();
    let names: Vec<&str> =
        listed["deployments"].as_array().unwrap().iter().map(|d| d["deployment"]["name"].as_str().unwrap()).collect();
    for name in ["hello", "three", "long", "survivor"] {
        assert!(names.contains(&name), "`job list` lacks {name}: {names:?}");
    }
    let completed = api.cli(&["--json", "list", "--status", "completed"]).json();
    assert_eq!(completed["deployments"].as_array().unwrap().len(), 2, "{completed:#}");
    api.cli(&["cluster", "delete", "demo", "--wait"]).expect_code(0);
}
