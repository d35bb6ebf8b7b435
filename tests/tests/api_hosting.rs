//! `anycloud api serve --credentials sim` starts a hosted API as a detached process that outlives
//! the command, makes it the active API (which may then create clusters), and `anycloud api stop`
//! stops it; hosting on other credentials, or with cloud-only flags, is refused clearly.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{Api, wait_until};

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
}

/// Kills the detached API if the test ends before stopping it.
struct Reap(u64);

impl Drop for Reap {
    fn drop(&mut self) {
        if alive(self.0) {
            let _ = std::process::Command::new("kill").args(["-KILL", &self.0.to_string()]).status();
        }
    }
}

#[test]
fn a_sim_hosted_api_runs_detached_creates_clusters_and_stops() {
    // The harness's local API gives this test its own config and data directories.
    let api = Api::start("harness");

    let out = api.cli(&["--json", "api", "serve", "--id", "dev", "--credentials", "SIM", "--use"]);
    out.expect_code(0);
    let started = out.json();
    assert_eq!(started["kind"], "hosted (simulated)", "{out}");
    let pid = started["pid"].as_u64().unwrap();
    let _reap = Reap(pid);
    assert!(alive(pid), "the hosted API must outlive the command that started it");

    let status = api.cli(&["--json", "api", "status"]);
    status.expect_code(0);
    assert_eq!(status.json()["kind"], "hosted (simulated)", "{status}");

    // Hosted: it creates clusters (the local harness API refuses them).
    api.cli(&["credentials", "new", "acct", "--provider", "sim", "--sim-boot-ms", "50", "--wait"]).expect_code(0);
    let created = api.cli(&[
        "cluster",
        "create",
        "c1",
        "--credentials",
        "acct",
        "--region",
        "sim-east-1",
        "--vm-type",
        "sim.small",
        "--min-vms",
        "1",
        "--max-vms",
        "1",
        "--wait",
    ]);
    created.expect_code(0);

    // A second start while it runs is refused.
    api.cli(&["api", "serve", "--id", "dev", "--credentials", "sim"]).expect_code(3).expect_stderr("already running");

    let stopped = api.cli(&["api", "stop", "dev"]);
    stopped.expect_code(0);
    wait_until(Duration::from_secs(10), "the hosted API to exit", || (!alive(pid)).then_some(()));
    api.cli(&["api", "stop", "dev"]).expect_code(2).expect_stderr("not running");
    // It is no longer the active API.
    api.cli(&["api", "status"]).expect_code(2);
}

#[test]
fn hosting_requests_that_cannot_be_are_refused_clearly() {
    let api = Api::start("harness");
    api.cli(&["api", "serve", "--id", "prod", "--credentials", "aws-host", "--use"])
        .expect_code(3)
        .expect_stderr("needs --vm-type");
    api.cli(&["api", "serve", "--id", "prod", "--credentials", "aws-host", "--vm-type", "t3.medium"])
        .expect_code(3)
        .expect_stderr("needs --checkpoint-bucket");
    let deploy = |extra: &[&str]| {
        let mut args = vec!["api", "serve", "--id", "prod", "--vm-type", "t3.medium", "--checkpoint-bucket", "b-1"];
        args.extend_from_slice(extra);
        api.cli(&args)
    };
    deploy(&["--credentials", "aws-host"]).expect_code(2).expect_stderr("credential `aws-host` does not exist");
    api.cli(&["credentials", "new", "simmed", "--provider", "sim", "--wait"]).expect_code(0);
    deploy(&["--credentials", "simmed"]).expect_code(3).expect_stderr("is of the simulated cloud");
    let sum = format!("x86_64={}", "a".repeat(64));
    deploy(&["--credentials", "simmed", "--binary-url", "https://x/y", "--binary-sha256", "abc"])
        .expect_code(3)
        .expect_stderr("is not ARCH=SHA256");
    deploy(&["--credentials", "simmed", "--binary-url", "https://x/y"]).expect_code(3).expect_stderr("--binary-sha256");
    deploy(&["--credentials", "simmed", "--binary-url", "ftp://x/y", "--binary-sha256", &sum])
        .expect_code(3)
        .expect_stderr("is not an https:// URL");
    let script = api.scratch().join("not-a-binary.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    deploy(&["--credentials", "simmed", "--binary", script.to_str().unwrap()])
        .expect_code(3)
        .expect_stderr("cannot run on a cloud VM");
    deploy(&["--credentials", "simmed", "--region", "us-east-1 --database-url x"])
        .expect_code(3)
        .expect_stderr("--region `us-east-1 --database-url x` is not a provider's name");
    api.cli(&["api", "serve", "--id", "prod", "--credentials", "sim", "--checkpoint-bucket", "b"])
        .expect_code(3)
        .expect_stderr("apply to hosting on AWS or GCP");
    // Nothing was started or stored: the harness is still the active API, and it deployed nothing.
    let status = api.cli(&["--json", "api", "status"]);
    status.expect_code(0);
    assert_eq!(status.json()["kind"], "local", "{status}");
    assert!(api.query_strings("SELECT name FROM hosted_apis").is_empty());
    assert!(api.query_strings("SELECT id FROM engine_runs WHERE kind = 'api.deploy'").is_empty());
}
