//! What an operator sees when a workflow is stuck, through the real binary and a real API
//! process:
//!
//! - a cancel reaches a step that never returns: a verification whose simulated account takes
//!   60 s per call is cancelled while its `ask_provider` call is in flight; the run is `cancelled`
//!   within seconds (not when the call would have returned), its timeline says the step was
//!   stopped, and the credential, refused for deletion while the run was live, can then be
//!   deleted;
//! - every follower returns as soon as a run needs a person: a verification whose account fails
//!   every call is driven to park (`workflow retry` runs the failing step at once; the retry
//!   budget is 8 attempts) and the `credentials new --wait` started before, and `workflow
//!   inspect --follow` (plain and `--json`) started before or after, exit 5 within seconds with
//!   `error[NEEDS_ATTENTION]` naming the retry, resume and cancel commands with the run's id;
//! - the same holds for `wait cluster/NAME`: a cluster's delete is made to park (its provider
//!   starts failing every call, by changing the simulated account's settings in the API's
//!   database), `wait` exits 5 naming the commands, and once the provider answers again
//!   `workflow resume` finishes the delete and leaves nothing at the provider;
//! - a create whose check of the region and VM type meets two passing faults (the account's next
//!   two calls fail transiently) is accepted, not refused with `PROVIDER_UNAVAILABLE`: the API
//!   asks the provider again before it answers; three faults in a row are refused, writing
//!   nothing.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, Output};
use serde_json::Value;
use sqlx::Connection;

/// How long a follower may take to notice that its run parked (it polls every 250 ms).
const PROMPTLY: Duration = Duration::from_secs(5);

/// `workflow inspect ID --json`: the run's record.
fn run_of(api: &Api, id: &str) -> Value {
    api.inspect(id, false)["run"].clone()
}

/// The id of the only run whose resource key is `resource`, once it is listed.
fn run_on(api: &Api, resource: &str) -> String {
    e2e::wait_until(Duration::from_secs(20), &format!("a run on {resource}"), || {
        let out = api.cli(&["--json", "workflow", "list", "--resource", resource]);
        out.expect_code(0);
        let runs = out.json().as_array().cloned().unwrap();
        assert!(runs.len() <= 1, "more than one run on {resource}: {runs:#?}");
        runs.first().map(|run| run["id"].as_str().unwrap().to_owned())
    })
}

/// Runs the failing current step of `id` again and again (`workflow retry`) until the run parks;
/// returns when it saw it parked.
fn drive_to_park(api: &Api, id: &str) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut retries = 0;
    loop {
        let run = run_of(api, id);
        match run["status"].as_str().unwrap() {
            "needs-attention" => return Instant::now(),
            "retrying" | "waiting" => {
                // Refused (exit 3) when the attempt is already running: then the next poll retries.
                let out = api.cli(&["workflow", "retry", id]);
                if out.code == 0 {
                    retries += 1;
                }
            }
            "pending" | "running" => {}
            other => panic!("run {id} ended {other} instead of parking: {run:#}"),
        }
        assert!(Instant::now() < deadline, "run {id} did not park after {retries} retries: {run:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Fails the test unless `out` is the plain needs-attention error of run `id`, with the commands
/// that move it on.
#[track_caller]
fn assert_needs_attention(out: &Output, id: &str) {
    out.expect_code(5);
    assert!(out.stderr.starts_with("error[NEEDS_ATTENTION]: "), "{out}");
    for words in [
        format!("workflow {id} needs attention"),
        format!("`anycloud workflow retry {id}`"),
        format!("`anycloud workflow resume {id}`"),
        format!("`anycloud workflow cancel {id}`"),
    ] {
        assert!(out.stderr.contains(&words), "stderr lacks {words:?}\n{out}");
    }
    assert!(!out.stderr.contains("panicked"), "{out}");
}

/// Fails the test unless `out` is the `--json` needs-attention error of run `id`.
#[track_caller]
fn assert_needs_attention_json(out: &Output, id: &str) {
    out.expect_code(5);
    let error = out.json_error();
    assert_eq!(error["error"]["code"], "NEEDS_ATTENTION", "{out}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("anycloud workflow retry {id}")), "{out}");
    assert!(message.contains(&format!("anycloud workflow resume {id}")), "{out}");
}

#[test]
fn a_cancel_stops_a_step_that_never_returns_and_frees_the_credential() {
    let started = Instant::now();
    let api = Api::start("cancel-in-flight");
    // Each call to this account takes 60 s: the verification's `ask_provider` hangs in its call.
    let saved = api.cli(&["--json", "credentials", "new", "slow", "--provider", "sim", "--sim-latency-ms", "60000"]);
    saved.expect_code(0);
    let id = saved.json()["workflow_id"].as_str().unwrap().to_owned();
    assert_eq!(run_on(&api, "credential/slow"), id);
    e2e::wait_until(Duration::from_secs(20), "the verification to run its first step", || {
        let run = run_of(&api, &id);
        (run["status"] == "running" && !run["lease"].is_null()).then_some(())
    });
    // Well inside the 60 s call.
    std::thread::sleep(Duration::from_secs(1));
    let run = run_of(&api, &id);
    assert_eq!(run["status"], "running", "{run:#}");
    assert_eq!(run["current_step"], "ask_provider", "{run:#}");

    // While the run lives, the credential may not be deleted: the refusal names the run.
    let refused = api.cli(&["credentials", "delete", "slow"]);
    refused.expect_code(3);
    assert!(refused.stderr.starts_with("error[CREDENTIAL_IN_USE]: "), "{refused}");
    assert!(refused.stderr.contains(&format!("anycloud workflow cancel {id}")), "{refused}");
    assert_eq!(api.credential("slow")["status"], "verifying");

    let cancel_at = Instant::now();
    api.cli(&["workflow", "cancel", &id]).expect_code(0);
    e2e::wait_until(PROMPTLY, "the cancelled run to end", || {
        let run = run_of(&api, &id);
        (run["status"] == "cancelled").then_some(())
    });
    let took = cancel_at.elapsed();
    eprintln!("cancel to cancelled: {took:?}");

    let detail = api.inspect(&id, true);
    let events = e2e::events(&detail);
    let unwinding: Vec<&Value> = events.iter().filter(|event| event["kind"] == "unwinding").collect();
    assert_eq!(unwinding.len(), 1, "{events:#?}");
    let message = unwinding[0]["message"].as_str().unwrap();
    assert!(
        message.contains("cancelled by an operator while step `ask_provider` ran; it was stopped"),
        "the timeline should say the step in flight was stopped: {message}"
    );
    assert!(detail["run"]["finished_at"].is_i64(), "{detail:#}");

    let deleted = api.cli(&["credentials", "delete", "slow"]);
    deleted.expect_code(0);
    assert!(deleted.stdout.contains("credential slow deleted"), "{deleted}");
    assert!(api.credentials().is_empty(), "{:#?}", api.credentials());
    // All of it well before the 60 s call would have returned.
    assert!(started.elapsed() < Duration::from_secs(50), "took {:?}", started.elapsed());
}

#[test]
fn followers_return_as_soon_as_a_verification_needs_a_person() {
    let api = Api::start("needs-attention");
    // Every call to this account fails transiently: `ask_provider` retries until its budget runs out.
    let waiting =
        api.spawn_cli(&["credentials", "new", "flaky", "--provider", "sim", "--sim-fail-first", "1000000", "--wait"]);
    let id = run_on(&api, "credential/flaky");
    // Followers started before the park.
    let follower = api.spawn_cli(&["workflow", "inspect", &id, "--follow"]);
    let follower_json = api.spawn_cli(&["--json", "workflow", "inspect", &id, "--follow"]);

    let parked_at = drive_to_park(&api, &id);
    let run = run_of(&api, &id);
    let reason = run["status_reason"].as_str().unwrap();
    assert!(reason.contains("step `ask_provider` ran out of retries after 8 attempts"), "{run:#}");

    let waited = waiting.wait(PROMPTLY);
    eprintln!("`credentials new --wait` had ended {:?} after the park was seen", parked_at.elapsed());
    assert_needs_attention(&waited, &id);
    assert!(waited.stdout.contains(&format!("verifying it with workflow {id}")), "{waited}");
    assert!(waited.stderr.contains("ran out of retries after 8 attempts"), "{waited}");
    assert_needs_attention(&follower.wait(PROMPTLY), &id);
    assert_needs_attention_json(&follower_json.wait(PROMPTLY), &id);

    // Followed after the park: exit 5 at once, plainly and as JSON.
    let at = Instant::now();
    let out = api.cli(&["workflow", "inspect", &id, "--follow"]);
    assert_needs_attention(&out, &id);
    let out_json = api.cli(&["--json", "workflow", "inspect", &id, "--follow"]);
    assert_needs_attention_json(&out_json, &id);
    assert!(at.elapsed() < Duration::from_secs(3), "following a parked run took {:?}", at.elapsed());

    // Nothing moved while it waited for a person; the command it names gives up.
    assert_eq!(run_of(&api, &id)["status"], "needs-attention");
    assert_eq!(api.credential("flaky")["status"], "verifying");
    api.cli(&["workflow", "cancel", &id]).expect_code(0);
    e2e::wait_until(PROMPTLY, "the parked run to be cancelled", || {
        (run_of(&api, &id)["status"] == "cancelled").then_some(())
    });
    api.cli(&["credentials", "delete", "flaky"]).expect_code(0);
}

/// Sets one number of the simulated account behind credential `name`, in the API's SQLite file
/// (a second connection; the API keeps running): what the account does from its next call on.
fn set_sim_setting(api: &Api, name: &str, setting: &str, value: i64) {
    e2e::block_on(async {
        let options =
            sqlx::sqlite::SqliteConnectOptions::new().filename(api.sqlite_path()).busy_timeout(Duration::from_secs(10));
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
        let changed = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE credentials SET public = json_set(public, '$.sim.{setting}', $2) WHERE name = $1"
        )))
        .bind(name)
        .bind(value)
        .execute(&mut conn)
        .await
        .unwrap()
        .rows_affected();
        assert_eq!(changed, 1, "credential {name} is not stored");
        conn.close().await.unwrap();
    });
}

#[test]
fn wait_cluster_returns_as_soon_as_the_delete_needs_a_person() {
    let api = Api::start_hosted("wait-needs-attention");
    api.cli(&["credentials", "new", "w", "--provider", "sim", "--wait"]).expect_code(0);
    let mut create = e2e::sim_cluster_create("k", "w", "1");
    create.push("--wait");
    api.spawn_cli(&create).wait(Duration::from_secs(90)).expect_code(0);

    // From now on every call to the account fails transiently.
    set_sim_setting(&api, "w", "fail_first", 1_000_000);
    api.cli(&["cluster", "delete", "k"]).expect_code(0);
    let status = api.cli(&["--json", "cluster", "status", "k"]);
    status.expect_code(0);
    let id = status.json()["cluster"]["workflow_id"].as_str().unwrap().to_owned();
    assert_eq!(run_of(&api, &id)["kind"], "cluster.delete");
    let waiting = api.spawn_cli(&["wait", "cluster/k"]);
    let waiting_json = api.spawn_cli(&["--json", "wait", "cluster/k"]);

    let parked_at = drive_to_park(&api, &id);
    let waited = waiting.wait(PROMPTLY);
    eprintln!("`wait cluster/k` had ended {:?} after the park was seen", parked_at.elapsed());
    assert_needs_attention(&waited, &id);
    assert!(waited.stdout.contains(&format!("following workflow {id}")), "{waited}");
    assert_needs_attention_json(&waiting_json.wait(PROMPTLY), &id);
    let at = Instant::now();
    assert_needs_attention(&api.cli(&["wait", "cluster/k"]), &id);
    assert!(at.elapsed() < Duration::from_secs(3), "waiting on a parked delete took {:?}", at.elapsed());

    // The provider answers again; `resume`, as the message says, finishes the delete.
    set_sim_setting(&api, "w", "fail_first", 0);
    api.cli(&["workflow", "resume", &id]).expect_code(0);
    api.spawn_cli(&["wait", "cluster/k"]).wait(Duration::from_secs(90)).expect_code(0);
    let live = api.query_strings("SELECT id FROM sim_vms WHERE terminated_at IS NULL");
    assert!(live.is_empty(), "{live:?}");
    let networks = api.query_strings("SELECT id FROM sim_networks WHERE deleted_at IS NULL");
    assert!(networks.is_empty(), "{networks:?}");
}

/// How many calls the (one) simulated account has answered or failed so far.
fn sim_calls(api: &Api) -> i64 {
    api.query_strings("SELECT CAST(calls AS TEXT) FROM sim_api_calls").pop().map_or(0, |calls| calls.parse().unwrap())
}

#[test]
fn a_create_asks_the_provider_again_after_a_passing_fault() {
    let api = Api::start_hosted("placement-asked-again");
    api.cli(&["credentials", "new", "p", "--provider", "sim", "--wait"]).expect_code(0);

    // The check makes one call per ask: the next two fail, the third is answered.
    set_sim_setting(&api, "p", "fail_first", sim_calls(&api) + 2);
    let created = api.cli(&[
        "--json",
        "cluster",
        "create",
        "two-faults",
        "--credentials",
        "p",
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
    let status = api.cli(&["--json", "cluster", "status", "two-faults"]);
    assert_eq!(status.json()["cluster"]["phase"], "ready", "{status}");

    // Three in a row: refused, nothing stored.
    set_sim_setting(&api, "p", "fail_first", sim_calls(&api) + 3);
    let refused = api.cli(&[
        "cluster",
        "create",
        "three-faults",
        "--credentials",
        "p",
        "--region",
        "sim-east-1",
        "--vm-type",
        "sim.small",
        "--min-vms",
        "1",
        "--max-vms",
        "1",
    ]);
    refused.expect_code(1).expect_stderr("PROVIDER_UNAVAILABLE").expect_stderr("try again");
    assert!(api.query_strings("SELECT id FROM clusters WHERE name = 'three-faults'").is_empty());
    set_sim_setting(&api, "p", "fail_first", 0);
    api.cli(&["cluster", "delete", "two-faults", "--wait"]).expect_code(0);
}
