//! Workloads that wait say why, end to end through the real binary and a hosted API on SQLite
//! with a simulated cluster, whose kubelet and scheduler report what real ones do (the readiness
//! probe's `Unhealthy` events, `Unschedulable`, `ErrImagePull`/`ImagePullBackOff`):
//!
//! - a service whose command listens on another port than `$PORT`: within 15 s of its deploy,
//!   `status` and the `--wait` follower's line name the port the probe tried and that nothing
//!   listens there; when its progress deadline passes it ends `failed`, its lines say nothing
//!   serves, and `workflow inspect` of its ended run shows the run's own error, not its undo's
//!   progress;
//! - a job asking for more CPUs than any node has says it cannot be scheduled and ends
//!   `invalid` with why, its lines true;
//! - a job on an image of a private registry ends `failed` once the kubelet backs off, naming
//!   the registry and the command that gives the cluster a pull secret; after that command,
//!   `resubmit` runs it;
//! - an upgrade to an image of a private registry rolls back, naming the registry, and revision
//!   1 keeps serving.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api};
use serde_json::Value;

/// How long a `--wait` may take before the test fails.
const WAIT: Duration = Duration::from_secs(120);

fn status(api: &Api, name: &str) -> Value {
    let out = api.cli(&["--json", "status", name]);
    out.expect_code(0);
    out.json()
}

/// A hosted API on the simulated cloud (private registry `registry.acme.test`) with a ready
/// one-worker cluster `demo`.
fn api_with_cluster(id: &str) -> Api {
    Api::start_hosted(id).with_demo_cluster(&["--sim-private-registry", "registry.acme.test"])
}

/// Every line that claims a revision serves.
fn serving_claims(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| {
            line.split("revision ").skip(1).any(|rest| {
                let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                digits > 0 && rest[digits..].starts_with(" serves")
            })
        })
        .collect()
}

#[test]
fn a_service_listening_on_the_wrong_port_says_so_and_ends_with_true_lines() {
    let api = api_with_cluster("waits-port");
    let wrong = e2e::free_port().to_string();
    let deployed = Instant::now();
    let follower = api.spawn_cli(&[
        "service",
        "python:3.12",
        "--cluster",
        "demo",
        "-i",
        "web",
        "--progress-deadline",
        "20s",
        "--wait",
        "--",
        "python3",
        "-m",
        "http.server",
        "--bind",
        "0.0.0.0",
        &wrong,
    ]);

    // Within 15 s, `status` names the port the probe tried and that nothing listens there.
    let says = "nothing listens on port 8080 in the container; the app must listen on $PORT (8080)";
    let detail = e2e::wait_until(Duration::from_secs(15), "status to say nothing listens on 8080", || {
        // The follower may not have sent the deploy yet.
        let out = api.cli(&["--json", "status", "web"]);
        let detail = (out.code == 0).then(|| out.json())?;
        detail["deployment"]["reason"].as_str().is_some_and(|reason| reason.contains(says)).then_some(detail)
    });
    assert!(deployed.elapsed() < Duration::from_secs(15));
    assert_eq!(detail["state"], "deploying", "{detail:#}");
    let shown = api.cli(&["status", "web"]);
    shown.expect_code(0);
    assert!(shown.stdout.contains("state      deploying, nothing serves yet"), "{}", shown.stdout);
    assert!(shown.stdout.contains(says), "{}", shown.stdout);
    assert!(serving_claims(&shown.stdout).is_empty(), "{}", shown.stdout);
    // ... and so does the follower's line.
    e2e::wait_until(Duration::from_secs(15), "the --wait line to say nothing listens on 8080", || {
        follower
            .stdout_so_far()
            .lines()
            .any(|line| line.contains("web deploying (nothing serves yet)") && line.contains(says))
            .then_some(())
    });

    // The progress deadline passes: failed, and no line claims a revision serves.
    let out = follower.wait(WAIT);
    out.expect_code(1);
    assert!(serving_claims(&out.stdout).is_empty(), "{}", out.stdout);
    let last = out.stdout.lines().last().unwrap();
    assert!(last.starts_with("service web failed: it could not be deployed"), "{}", out.stdout);
    assert!(last.contains("progress deadline of 20s") && last.contains(says), "{last}");
    let detail = status(&api, "web");
    assert_eq!(detail["state"], "failed", "{detail:#}");
    assert!(detail["deployment"]["revision"].is_null(), "a service that never served has no revision: {detail:#}");
    let shown = api.cli(&["status", "web"]);
    assert!(shown.stdout.contains("state      failed, nothing serves"), "{}", shown.stdout);
    assert!(serving_claims(&shown.stdout).is_empty(), "{}", shown.stdout);
    let listed = api.cli(&["list"]);
    let row = listed.stdout.lines().find(|line| line.starts_with("web ")).unwrap();
    assert!(row.contains("failed") && !row.contains("rev 1"), "{}", listed.stdout);

    // `workflow inspect` of the ended run shows the run's error, not the undo's progress.
    let run = detail["deployment"]["workflow_id"].as_str().unwrap();
    let inspected = api.inspect(run, false);
    assert_eq!(inspected["run"]["status"], "failed", "{inspected:#}");
    let error = inspected["run"]["error"]["chain"].to_string();
    assert!(error.contains("progress deadline of 20s"), "{inspected:#}");
    assert!(!error.contains("waiting until it lists none"), "{inspected:#}");
    let text = api.cli(&["workflow", "inspect", run]).stdout;
    let error_line = text.lines().find(|line| line.starts_with("error ")).unwrap();
    assert!(error_line.contains("progress deadline of 20s"), "{text}");
}

#[test]
fn a_job_larger_than_every_node_says_it_cannot_be_scheduled_and_ends_invalid() {
    let api = api_with_cluster("waits-cpus");
    let out =
        api.cli(&["job", "python:3.12", "--cluster", "demo", "-i", "big", "--cpus", "64", "--wait", "--", "true"]);
    out.expect_code(1);
    let last = out.stdout.lines().last().unwrap();
    assert!(last.starts_with("job big invalid: Pod big-1-"), "{}", out.stdout);
    assert!(last.contains("can never be scheduled: it asks for 64 CPU(s) while the largest node offers"), "{last}");
    assert!(last.contains("with --cpus"), "{last}");
    let detail = status(&api, "big");
    assert_eq!(detail["state"], "invalid", "{detail:#}");
    assert!(detail["deployment"]["started_at"].is_null(), "it never started: {detail:#}");
    // Its run ends once its Job is deleted, with the job's reason as its error.
    let run = detail["deployment"]["workflow_id"].as_str().unwrap();
    let inspected = e2e::wait_until(WAIT, "the job's run to end", || {
        let inspected = api.inspect(run, false);
        (inspected["run"]["status"] == "failed").then_some(inspected)
    });
    assert_eq!(e2e::undone_steps(&inspected), ["apply"], "{inspected:#}");
    assert!(inspected["run"]["error"]["chain"].to_string().contains("can never be scheduled"), "{inspected:#}");
}

#[test]
fn a_job_on_a_private_image_fails_naming_the_registry_and_the_pull_secret_command() {
    let api = api_with_cluster("waits-pull");
    let started = Instant::now();
    let out = api.cli(&[
        "job",
        "registry.acme.test/team/batch:1",
        "--cluster",
        "demo",
        "-i",
        "batch",
        "--wait",
        "--",
        "python3",
        "-c",
        "print('hello')",
    ]);
    out.expect_code(1);
    assert!(started.elapsed() < Duration::from_secs(90), "it ended once the kubelet backed off");
    let detail = status(&api, "batch");
    assert_eq!(detail["state"], "failed", "{detail:#}");
    let reason = detail["deployment"]["reason"].as_str().unwrap();
    for words in [
        "cannot be pulled from registry.acme.test",
        "ImagePullBackOff",
        "`anycloud secret new NAME --registry registry.acme.test --username USER --password-stdin`",
        "`anycloud resubmit batch`",
    ] {
        assert!(reason.contains(words), "the reason does not say {words:?}: {reason}");
    }
    assert!(out.stdout.lines().last().unwrap().contains("cannot be pulled from registry.acme.test"), "{}", out.stdout);

    // Doing what it says: the registry secret, then `resubmit`, runs it.
    api.cli_stdin(
        &["secret", "new", "acme", "--registry", "registry.acme.test", "--username", "robot", "--password-stdin"],
        b"s3cret\n",
    )
    .expect_code(0);
    api.cli(&["resubmit", "batch", "--wait"]).expect_code(0);
    assert_eq!(api.cli(&["logs", "batch"]).stdout, "hello\n");
}

#[test]
fn an_upgrade_to_a_private_image_rolls_back_and_the_old_revision_keeps_serving() {
    let api = api_with_cluster("waits-upgrade");
    let marker = "anycloud-test-waits-upgrade";
    let out = api.cli(&[
        "service",
        "acme/web:1",
        "--cluster",
        "demo",
        "-i",
        "web",
        "-e",
        "VERSION=v1",
        "--wait",
        "--",
        "python3",
        "-c",
        e2e::VERSION_SERVER,
        marker,
    ]);
    out.expect_code(0);
    let out = api.cli(&["deployment", "upgrade", "web", "--image", "registry.acme.test/team/web:2", "--wait"]);
    out.expect_code(1);
    let last = out.stdout.lines().last().unwrap();
    assert!(last.starts_with("service web: the upgrade to revision 2 failed"), "{}", out.stdout);
    assert!(
        last.contains("cannot be pulled from registry.acme.test") && last.ends_with("; revision 1 serves"),
        "{last}"
    );
    let detail = status(&api, "web");
    assert_eq!((detail["state"].as_str(), detail["deployment"]["revision"].as_i64()), (Some("running"), Some(1)));
    let second = detail["revisions"].as_array().unwrap().iter().find(|revision| revision["number"] == 2).unwrap();
    assert_eq!(second["result"], "failed", "{detail:#}");
    let cause = second["reason"].as_str().unwrap();
    assert!(cause.contains("ImagePullBackOff"), "{cause}");
    assert!(
        cause.contains("`anycloud secret new NAME --registry registry.acme.test --username USER --password-stdin`"),
        "{cause}"
    );
    assert!(cause.contains("`anycloud deployment upgrade web --image registry.acme.test/team/web:2`"), "{cause}");
    // Revision 1 still answers at the ClusterIP.
    let addr = format!("{}:8080", detail["address"]["cluster_ip"].as_str().unwrap());
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(&mut stream, b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.0 200") && answer.ends_with("v1"), "{answer}");
    api.cli(&["terminate", "web", "--wait"]).expect_code(0);
    let shown = api.cli(&["status", "web"]).stdout;
    assert!(shown.contains("state      terminated, nothing serves"), "{shown}");
}
