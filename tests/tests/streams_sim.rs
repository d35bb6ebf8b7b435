//! Streams that stay open: `logs --follow` and `exec` on a simulated cluster, end to end through
//! the real binary and a hosted API on SQLite.
//!
//! - a job that prints a line, stays silent for 60 s and prints again: `logs --follow` shows both
//!   lines and exits 0 when the job ends, while in the same job `exec -- sh -c 'sleep 60; echo
//!   done; exit 3'` returns `done` and exit code 3 (no hop cuts a silent stream: the Kubernetes
//!   client's read timeout once did after 20 s);
//! - a SIGKILL of the API during a `logs --follow`, and its restart: the CLI opens the stream
//!   again and prints every line exactly once (stamped lines, `sinceTime`);
//! - the exec idle limit (shortened through the seam `ANYCLOUD_TEST_EXEC_IDLE_LIMIT_MS`): a
//!   silent session ends with `EXEC_IDLE` and exit 2, in words; one whose command prints now and
//!   then outlives the limit.
//!
//! The two tests run in parallel: about 70 s of wall time.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, ApiOptions};
use serde_json::Value;

/// How long a job may take to start.
const START: Duration = Duration::from_secs(90);

/// A hosted API on the simulated cloud, with `env`, and a ready one-worker cluster `demo`.
fn api_with_cluster(id: &str, env: &[(&str, &str)]) -> Api {
    let env = env.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect();
    Api::start_opts(ApiOptions { id: id.to_owned(), hosted: true, env, ..ApiOptions::default() }).with_demo_cluster(&[])
}

/// Submits job `name` running `sh -c SCRIPT` and waits until its container runs.
fn running_job(api: &Api, name: &str, script: &str) {
    let marker = format!("anycloud-test-{name}");
    api.cli(&["job", "python:3.12", "--cluster", "demo", "-i", name, "--", "sh", "-c", script, &marker]).expect_code(0);
    e2e::wait_until(START, &format!("job {name} to run"), || {
        let out = api.cli(&["--json", "status", name]);
        out.expect_code(0);
        let detail: Value = out.json();
        (detail["state"] == "running").then_some(())
    });
}

#[test]
fn silent_streams_stay_open_for_as_long_as_their_container_runs() {
    let api = api_with_cluster("streams-silent", &[]);
    // The exec below starts a second or two after the job: the job outlives it.
    running_job(&api, "quiet", "echo first line; sleep 60; echo second line; sleep 5");
    let started = Instant::now();
    let follow = api.spawn_cli(&["logs", "quiet", "--follow"]);
    let exec = api.spawn_cli(&["exec", "quiet", "--", "sh", "-c", "sleep 60; echo done; exit 3"]);

    let exec = exec.wait(Duration::from_secs(120));
    exec.expect_code(3);
    assert_eq!(exec.stdout, "done\n", "{exec}");
    assert!(started.elapsed() >= Duration::from_secs(60), "the exec ended before its command could have");

    let follow = follow.wait(Duration::from_secs(120));
    follow.expect_code(0);
    assert_eq!(follow.stdout, "first line\nsecond line\n", "{follow}");
    assert!(e2e::processes_with("anycloud-test-quiet").is_empty(), "the follow ended before the job's container did");
    // The follow ended with the container: the job ends `completed` (once its run has seen it).
    e2e::wait_until(Duration::from_secs(30), "job quiet to be completed", || {
        let detail: Value = api.cli(&["--json", "status", "quiet"]).json();
        (detail["state"] == "completed").then_some(())
    });
}

#[test]
fn a_followed_log_resumes_across_an_api_restart_and_idle_exec_sessions_end() {
    let mut api = api_with_cluster("streams-resume", &[("ANYCLOUD_TEST_EXEC_IDLE_LIMIT_MS", "3000")]);

    // ---- The exec idle limit: silence ends the session, in words; output keeps it open.
    running_job(&api, "idle", "sleep 300");
    let began = Instant::now();
    let idle = api.cli(&["exec", "idle", "--", "sleep", "60"]);
    idle.expect_code(2).expect_stderr("EXEC_IDLE").expect_stderr("no input and no output for 3 seconds");
    assert!(began.elapsed() < Duration::from_secs(30), "the idle session was not ended: {idle}");
    let chatty = api.cli(&["exec", "idle", "--", "sh", "-c", "for i in 1 2 3 4 5 6; do echo $i; sleep 1; done"]);
    chatty.expect_code(0);
    assert_eq!(chatty.stdout, "1\n2\n3\n4\n5\n6\n", "{chatty}");
    api.cli(&["terminate", "idle"]).expect_code(0);

    // ---- A SIGKILL of the API during a follow: the CLI resumes, losing and repeating nothing.
    running_job(&api, "steady", "i=0; while [ $i -lt 150 ]; do i=$((i+1)); echo line $i; sleep 0.1; done");
    let follow = api.spawn_cli(&["logs", "steady", "--follow"]);
    e2e::wait_until(Duration::from_secs(30), "`logs --follow` to stream lines", || {
        follow.stdout_so_far().contains("line 5\n").then_some(())
    });
    api.kill();
    // The job goes on writing while the API is down.
    std::thread::sleep(Duration::from_secs(2));
    api.restart();
    let follow = follow.wait(Duration::from_secs(120));
    follow.expect_code(0);
    let expected: String = (1..=150).map(|i| format!("line {i}\n")).collect();
    assert_eq!(follow.stdout, expected, "the follow lost or repeated lines across the API's restart\n{follow}");
    assert!(follow.stderr.contains("reading on from where it was"), "the break was not told: {follow}");
}
