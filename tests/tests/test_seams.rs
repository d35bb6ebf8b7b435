//! No test seam can be switched on in the `anycloud` binary.
//!
//! The seams (a simulated Kubernetes for clusters whose VMs cannot boot here, which receives the
//! clusters' admin tokens; a pause between a launch and its checkpoint; a pause in the follower)
//! are read from the environment only by the test suite's own binary, `anycloud-seamed`, which
//! links the CLI library and passes them in. This test proves it three ways:
//!
//! - the `anycloud` binary does not even contain the seams' variable names, while
//!   `anycloud-seamed` does (so the byte search would see them);
//! - `anycloud` run with every seam variable set (Kubernetes at a dead address, a minute's pause
//!   after each launch, a 30 s follower gap) creates and follows a simulated cluster as if none
//!   were set: ready in seconds, its `api status` listing no seam;
//! - `anycloud-seamed` with a seam announces it loudly, on the API's stdout and in `api status`.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, ApiOptions, SEAM_VARS};

/// Every seam, set to a value that would be visible: a dead Kubernetes, long pauses.
fn every_seam() -> Vec<(String, String)> {
    vec![
        ("ANYCLOUD_TEST_SIMULATED_KUBE".into(), "http://127.0.0.1:9/sim/kube".into()),
        ("ANYCLOUD_TEST_PAUSE_AFTER_LAUNCH_MS".into(), "60000".into()),
        ("ANYCLOUD_TEST_FOLLOW_GAP_MS".into(), "30000".into()),
    ]
}

#[test]
fn the_production_binary_does_not_contain_the_seams() {
    let production = std::fs::read(e2e::anycloud_bin()).unwrap();
    let seamed = std::fs::read(e2e::anycloud_seamed_bin()).unwrap();
    for name in SEAM_VARS {
        assert!(!e2e::contains_bytes(&production, name.as_bytes()), "the anycloud binary contains {name}");
        assert!(e2e::contains_bytes(&seamed, name.as_bytes()), "anycloud-seamed lacks {name}: the search is blind");
    }
}

#[test]
fn the_production_binary_ignores_seam_variables() {
    let api = Api::start_opts(ApiOptions {
        id: "seams-ignored".into(),
        hosted: true,
        env: every_seam(),
        production_binary: true,
        ..ApiOptions::default()
    });
    assert!(!api.logs().contains("TEST SEAM"), "{}", api.logs());
    let status = api.cli(&["--json", "api", "status"]);
    status.expect_code(0);
    assert!(status.json().get("test_seams").is_none(), "{status}");

    let seams = every_seam();
    let env: Vec<(&str, &str)> = seams.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let started = Instant::now();
    api.cli(&["credentials", "new", "plain", "--provider", "sim", "--wait"]).expect_code(0);
    // With the seams honoured, the Kubernetes calls would go to a dead port (the create would
    // never become ready) and each launch would pause a minute.
    let mut args = e2e::sim_cluster_create("plain", "plain", "1");
    args.push("--wait");
    let out = api.cli_production(&args, &env);
    out.expect_code(0);
    assert!(out.stdout.contains("cluster plain is ready"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}: a seam was honoured", started.elapsed());
    api.spawn_cli(&["cluster", "delete", "plain", "--wait"]).wait(Duration::from_secs(60)).expect_code(0);
}

#[test]
fn the_seamed_binary_announces_its_seams() {
    let api = Api::start_opts(ApiOptions {
        id: "seams-announced".into(),
        hosted: true,
        env: vec![("ANYCLOUD_TEST_PAUSE_AFTER_LAUNCH_MS".into(), "10".into())],
        ..ApiOptions::default()
    });
    assert!(api.logs().contains("WARNING: TEST SEAM ON (never in production): each launch step pauses 10 ms"));
    let status = api.cli(&["api", "status"]);
    status.expect_code(0);
    assert!(status.stdout.contains("TEST SEAM   each launch step pauses 10 ms"), "{status}");
}
