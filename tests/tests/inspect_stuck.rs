//! A stuck run explains itself, through the real binary and a hosted API on the simulated cloud:
//!
//! - a cluster whose nodes never become Ready waits on `wait_for_nodes`: `workflow inspect`'s
//!   first three lines say how long it has waited and on what, its deadline and what happens
//!   then, and the commands to run with the run's id; `cluster status` says the same;
//! - the poll's checks (every 2 s) are one `waiting` entry with a count, and the claims that
//!   resume it add none;
//! - a credential whose verification keeps failing says why in `credentials list`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{self, Api};
use serde_json::{Value, json};

/// Saves a sim credential with `sim` settings as a raw `POST /v1/credentials`.
fn sim_credential_with(api: &Api, name: &str, sim: Value) {
    let answer = api.post_json("/v1/credentials", &json!({ "name": name, "provider": "sim", "sim": sim }));
    assert_eq!(answer.status, 201, "saving credential {name}: {answer:?}");
}

#[test]
fn a_stuck_run_explains_itself() {
    let api = Api::start_hosted("inspect-stuck");

    // A verification that keeps failing: `credentials list` says why it is still verifying.
    sim_credential_with(&api, "flaky", json!({ "fail_first": 1000 }));
    let run = api.credential("flaky")["verify_run"].as_str().unwrap().to_owned();
    e2e::wait_until(Duration::from_secs(30), "the verification to retry", || {
        (api.inspect(&run, false)["run"]["status"] == "retrying").then_some(())
    });
    let list = api.cli(&["credentials", "list"]);
    list.expect_code(0);
    let row = list.stdout.lines().find(|line| line.starts_with("flaky ")).unwrap_or_else(|| panic!("{list}"));
    assert!(row.contains(" verifying ") && row.contains("retrying step `"), "{list}");
    assert!(row.contains(&format!("`anycloud workflow retry {run}` tries now")), "{list}");

    // A cluster whose nodes never become Ready.
    sim_credential_with(&api, "never", json!({ "never_ready": true }));
    e2e::wait_until(Duration::from_secs(30), "credential never to be valid", || {
        (api.credential("never")["status"] == "valid").then_some(())
    });
    api.cli(&e2e::sim_cluster_create("stuck", "never", "1")).expect_code(0);
    let status = api.cli(&["--json", "cluster", "status", "stuck"]);
    status.expect_code(0);
    let run = status.json()["cluster"]["workflow_id"].as_str().unwrap().to_owned();
    let timeline = e2e::wait_until(Duration::from_secs(90), "three checks of wait_for_nodes", || {
        let detail = api.inspect(&run, true);
        let events = e2e::events(&detail);
        let checks =
            events.iter().find(|e| e["kind"] == "waiting" && e["step"] == "wait_for_nodes")?["count"].as_u64()?;
        (detail["run"]["status"] == "waiting" && checks >= 3).then_some(events)
    });

    // One waiting entry for every check, no claim for each check: the timeline stays short.
    let of = |kind: &str, step: &str| {
        timeline.iter().filter(|event| event["kind"] == kind && (step.is_empty() || event["step"] == step)).count()
    };
    assert_eq!(of("waiting", "wait_for_nodes"), 1, "{timeline:#?}");
    assert!(of("claimed", "") <= 3, "{timeline:#?}");

    // The first three lines are enough.
    let out = api.cli(&["workflow", "inspect", &run]);
    out.expect_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("status    waiting ") && lines[0].contains(" on step `wait_for_nodes` ("), "{out}");
    assert!(lines[0].contains(" check(s), the latest ") && lines[0].contains("nodes Ready"), "{out}");
    assert!(
        lines[1].starts_with("deadline  in ")
            && lines[1].contains("after it began waiting; not ready by then, the run ")
    );
    assert!(lines[1].contains("next check in "), "{out}");
    assert_eq!(
        lines[2],
        format!(
            "do now    `anycloud workflow retry {run}` checks now; `anycloud workflow cancel {run}` gives up and undoes \
             what was done"
        ),
        "{out}"
    );

    // `cluster status` says the same about its run.
    let status = api.cli(&["cluster", "status", "stuck"]);
    status.expect_code(0);
    assert!(status.stdout.contains("  status     waiting ") && status.stdout.contains("`wait_for_nodes`"), "{status}");
    assert!(status.stdout.contains(&format!("  do now     `anycloud workflow retry {run}`")), "{status}");

    // A cancel shows in the header until it takes effect, then the run unwinds and ends.
    api.cli(&["workflow", "cancel", &run]).expect_code(0);
    let followed = api.cli(&["workflow", "inspect", &run, "--follow"]);
    followed.expect_code(1);
    let out = api.cli(&["workflow", "inspect", &run]);
    assert!(out.stdout.starts_with("status    cancelled: "), "{out}");
}
