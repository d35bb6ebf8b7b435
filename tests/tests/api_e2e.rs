//! The local API end to end, as a user runs it, on SQLite and on PostgreSQL: a credential
//! whose verification fails three times (the simulated cloud's injected 503s) retries with
//! backoff; the API is SIGKILLed while the run backs off and started again with the same id,
//! data directory and database; a `workflow inspect --follow` started before the kill rides
//! through the outage and exits 0; the timeline shows the run claimed by both processes, every
//! step succeeded exactly once, and the credential is valid. SIGTERM stops the API cleanly
//! (exit 0), letting a step in flight finish and checkpoint first.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, PgDatabase};
use serde_json::Value;

/// Steps of `credentials.verify`, in order.
const PLAN: [&str; 2] = ["ask_provider", "record_verdict"];

fn count(events: &[Value], kind: &str, step: &str) -> usize {
    events.iter().filter(|event| event["kind"] == kind && event["step"] == step).count()
}

fn verification_survives_a_sigkill_while_it_backs_off(mut api: Api) {
    let created = api.cli(&["--json", "credentials", "new", "flaky", "--provider", "sim", "--sim-fail-first", "3"]);
    created.expect_code(0);
    let saved = created.json();
    assert_eq!(saved["credential"]["status"], "verifying", "{saved}");
    let id = saved["workflow_id"].as_str().unwrap().to_owned();

    let follow = api.spawn_cli(&["workflow", "inspect", &id, "--follow"]);

    // Kill the API while the run backs off after a failed attempt, with the next attempt far
    // enough away that the kill lands in the backoff.
    e2e::wait_until(Duration::from_secs(30), "the verification to back off after a failed attempt", || {
        let run = api.inspect(&id, false)["run"].clone();
        let next_at = run["next_at"].as_i64()?;
        (run["status"] == "retrying" && next_at - e2e::now_ms() > 300).then_some(())
    });
    api.kill();
    // The follower polls every 250 ms: it sees the API gone, and says so.
    e2e::wait_until(Duration::from_secs(10), "the follower to notice the API is gone", || {
        follow.stdout_so_far().contains("API unreachable").then_some(())
    });
    api.restart();
    assert_ne!(api.pids()[0], api.pids()[1]);

    let followed = follow.wait(Duration::from_secs(60));
    followed.expect_code(0);
    assert!(followed.stdout.contains("(API reachable again)"), "{followed}");
    assert!(followed.stdout.contains("step-succeeded") && followed.stdout.contains("[record_verdict]"), "{followed}");

    eprintln!("{} follower of {id} through the restart:\n{}", api.id, followed.stdout);

    let detail = api.inspect(&id, true);
    assert_eq!(detail["run"]["status"], "succeeded", "{detail:#}");
    let events = e2e::events(&detail);
    let timeline = serde_json::to_string_pretty(&events).unwrap();

    // The restart is on the timeline: claims by both processes, the first's before the second's.
    let (first, second) = (api.pids()[0], api.pids()[1]);
    let pids = e2e::claim_pids(&events);
    assert_eq!(pids.iter().copied().collect::<BTreeSet<_>>(), BTreeSet::from([first, second]), "{timeline}");
    let last_by_first = pids.iter().rposition(|pid| *pid == first).unwrap();
    let first_by_second = pids.iter().position(|pid| *pid == second).unwrap();
    assert!(last_by_first < first_by_second, "the processes' claims interleave: {pids:?}\n{timeline}");
    let owner = format!("claimed by api-{} (pid {second})", api.id);
    assert!(events.iter().any(|event| event["message"].as_str().unwrap().starts_with(&owner)), "{timeline}");

    // Every step succeeded exactly once; the failed attempts were the injected faults.
    let plan: Vec<&str> = detail["plan"].as_array().unwrap().iter().map(|step| step.as_str().unwrap()).collect();
    assert_eq!(plan, PLAN);
    for step in PLAN {
        assert_eq!(count(&events, "step-succeeded", step), 1, "step {step}\n{timeline}");
    }
    let failures = count(&events, "step-failed", "ask_provider");
    assert!((1..=3).contains(&failures), "{failures} failed attempts\n{timeline}");
    assert!(
        events
            .iter()
            .filter(|event| event["kind"] == "step-failed")
            .all(|event| event["message"].as_str().unwrap().contains("injected fault")),
        "{timeline}"
    );
    assert_eq!(events.iter().filter(|event| event["kind"] == "succeeded").count(), 1, "{timeline}");
    let steps = detail["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{detail:#}");
    assert!(steps.iter().all(|step| step["status"] == "succeeded"), "{detail:#}");

    // The credential is valid, in the JSON list and the table.
    let credential = api.credential("flaky");
    assert_eq!(credential["status"], "valid", "{credential}");
    assert!(credential["status_message"].as_str().unwrap().starts_with("simulated cloud: 3 regions"), "{credential}");
    assert_eq!(credential["verify_run"], id.as_str());
    let table = api.cli(&["credentials", "list"]);
    table.expect_code(0);
    let row = table.stdout.lines().find(|line| line.starts_with("flaky ")).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains(" valid "), "{table}");

    // The workflow list shows it succeeded.
    let list = api.cli(&["--json", "workflow", "list", "--kind", "credentials.verify"]);
    list.expect_code(0);
    let runs = list.json();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs:#}");
    assert_eq!(runs[0]["status"], "succeeded");

    // SIGTERM: a clean stop.
    let status = api.terminate(Duration::from_secs(40));
    assert_eq!(status.code(), Some(0), "SIGTERM: the API exited with {status}\n{}", api.logs());
    assert!(api.logs().contains("stopping: letting steps in flight finish and releasing leases"), "{}", api.logs());
}

fn sigterm_lets_the_step_in_flight_finish(mut api: Api) {
    // Each call to the simulated cloud takes 2 s: SIGTERM arrives while the first one runs.
    let created = api.cli(&["--json", "credentials", "new", "slow", "--provider", "sim", "--sim-latency-ms", "2000"]);
    created.expect_code(0);
    let id = created.json()["workflow_id"].as_str().unwrap().to_owned();
    e2e::wait_until(Duration::from_secs(10), "the first step to start", || {
        let detail = api.inspect(&id, true);
        (detail["run"]["status"] == "running" && e2e::events(&detail).iter().any(|event| event["kind"] == "claimed"))
            .then_some(())
    });
    let terminated_at = Instant::now();
    let status = api.terminate(Duration::from_secs(40));
    let took = terminated_at.elapsed();
    let exited_at = e2e::now_ms();
    assert_eq!(status.code(), Some(0), "SIGTERM: the API exited with {status}\n{}", api.logs());

    api.restart();
    let followed = api.cli(&["workflow", "inspect", &id, "--follow"]);
    followed.expect_code(0);
    eprintln!("{} timeline of {id} around SIGTERM (exit took {took:?}):\n{}", api.id, followed.stdout);
    let detail = api.inspect(&id, true);
    let events = e2e::events(&detail);
    let timeline = serde_json::to_string_pretty(&events).unwrap();
    // The step in flight finished and was checkpointed by the first process, before it exited:
    // it ran once, and nothing was recovered.
    let done = events
        .iter()
        .find(|event| event["kind"] == "step-succeeded" && event["step"] == "ask_provider")
        .unwrap_or_else(|| panic!("{timeline}"));
    assert!(done["at"].as_i64().unwrap() <= exited_at, "ask_provider was checkpointed after the exit\n{timeline}");
    assert!(done["message"].as_str().unwrap().starts_with("attempt 1 succeeded"), "{timeline}");
    assert!(!events.iter().any(|event| event["kind"] == "recovered"), "{timeline}");
    for step in PLAN {
        assert_eq!(count(&events, "step-succeeded", step), 1, "step {step}\n{timeline}");
    }
    assert!(took >= Duration::from_millis(500), "the API exited after {took:?}, before the step could finish");
    assert_eq!(api.credential("slow")["status"], "valid");
    let status = api.terminate(Duration::from_secs(40));
    assert_eq!(status.code(), Some(0), "SIGTERM: the API exited with {status}\n{}", api.logs());
}

/// A run that ends while the follower is between its two reads (the seam holds it there for
/// 1.5 s) is still followed to its last step: the follower reads the run, then its events.
#[test]
fn a_follower_shows_every_step_of_a_run_that_ends_between_its_reads() {
    let api = Api::start("e2e-follow");
    let created = api.cli_env(
        &["credentials", "new", "quick", "--provider", "sim", "--sim-latency-ms", "300", "--wait"],
        &[("ANYCLOUD_TEST_FOLLOW_GAP_MS", "1500")],
    );
    created.expect_code(0);
    for step in PLAN {
        assert!(
            created.stdout.contains(&format!("[{step}] attempt 1 succeeded")),
            "step {step} is not shown\n{created}"
        );
    }
}

#[test]
fn sqlite_verification_survives_a_sigkill_while_it_backs_off() {
    verification_survives_a_sigkill_while_it_backs_off(Api::start("e2e"));
}

#[test]
fn postgres_verification_survives_a_sigkill_while_it_backs_off() {
    let database = PgDatabase::create();
    verification_survives_a_sigkill_while_it_backs_off(Api::start_with("e2e", Some(database.url.clone())));
}

#[test]
fn sqlite_sigterm_lets_the_step_in_flight_finish() {
    sigterm_lets_the_step_in_flight_finish(Api::start("e2e-term"));
}

#[test]
fn postgres_sigterm_lets_the_step_in_flight_finish() {
    let database = PgDatabase::create();
    sigterm_lets_the_step_in_flight_finish(Api::start_with("e2e-term", Some(database.url.clone())));
}
