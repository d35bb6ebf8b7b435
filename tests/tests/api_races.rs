//! Every loser of a race for a unique name gets the right 409, on both stores.
//!
//! On a hosted API (SQLite, then PostgreSQL) with a valid simulated credential, 8 threads send
//! the same raw `POST /v1/clusters` at once (released by one barrier, each on its own
//! connection): exactly one answers 201, every other one 409 with `CLUSTER_EXISTS` naming the
//! cluster (never a 500 from the unique index the loser's insert hit), and the database holds
//! one live cluster row of that name and one `cluster.create` run under its resource key, the
//! ones the winner was given. The same for 8 `POST /v1/credentials` of one name: one 201, seven
//! 409 `CREDENTIAL_EXISTS`, one credential row and one `credentials.verify` run, the winner's.
//! Each race runs 3 rounds with fresh names, so that a loser that reaches the insert (rather than
//! seeing the winner's row first) is likely in at least one of them. The clusters are deleted
//! (`cluster delete NAME --wait`) at the end, so nothing is left running at the simulated cloud.
#![allow(clippy::unwrap_used)]

use std::sync::Barrier;
use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, ApiOptions, HttpResponse, PgDatabase};
use serde_json::{Value, json};

/// Requests in one race.
const RACERS: usize = 8;
/// Races of each kind, with fresh names.
const ROUNDS: usize = 3;

/// Sends `body` to `POST path` from [`RACERS`] threads at once; returns the answers.
fn race(api: &Api, path: &str, body: &Value) -> Vec<HttpResponse> {
    let token = api.token();
    let url = api.url.as_str();
    let body = body.to_string();
    let barrier = Barrier::new(RACERS);
    std::thread::scope(|scope| {
        let racers: Vec<_> = (0..RACERS)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    e2e::post_json(url, &token, path, &body)
                })
            })
            .collect();
        racers.into_iter().map(|racer| racer.join().unwrap()).collect()
    })
}

/// Fails the test unless exactly one answer is 201 and every other one is 409 with `code` and a
/// message naming `name`; returns the winner's body.
#[track_caller]
fn one_winner(answers: &[HttpResponse], code: &str, name: &str) -> Value {
    let shown: Vec<String> = answers.iter().map(|answer| format!("{} {}", answer.status, answer.body)).collect();
    let winners: Vec<&HttpResponse> = answers.iter().filter(|answer| answer.status == 201).collect();
    assert_eq!(winners.len(), 1, "exactly one request should win the name {name}: {shown:#?}");
    for answer in answers.iter().filter(|answer| answer.status != 201) {
        assert_eq!(answer.status, 409, "every loser should get 409 {code}: {shown:#?}");
        let error = answer.json();
        assert_eq!(error["error"]["code"], code, "{shown:#?}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{name}` already exists")), "{shown:#?}");
    }
    winners[0].json()
}

/// Races for cluster names, then for credential names, then deletes the clusters.
fn races(api: &Api) {
    let started = Instant::now();
    api.cli(&["credentials", "new", "c", "--provider", "sim", "--sim-boot-ms", "50", "--wait"]).expect_code(0);

    let mut clusters = Vec::new();
    for round in 0..ROUNDS {
        let name = format!("race-{round}");
        let body = json!({
            "name": name,
            "credentials": "c",
            "region": "sim-east-1",
            "vm_type": "sim.small",
            "min_vms": 1,
            "max_vms": 1,
        });
        let answers = race(api, "/v1/clusters", &body);
        let won = one_winner(&answers, "CLUSTER_EXISTS", &name);
        let rows = api.query_strings(&format!("SELECT id FROM clusters WHERE name = '{name}'"));
        assert_eq!(rows, [won["cluster"]["id"].as_str().unwrap()], "cluster rows of {name}");
        let runs = api.query_strings(&format!(
            "SELECT id FROM engine_runs WHERE kind = 'cluster.create' AND resource_key = 'cluster/{name}'"
        ));
        assert_eq!(runs, [won["workflow_id"].as_str().unwrap()], "cluster.create runs of {name}");
        let linked = api.query_strings(&format!("SELECT workflow_id FROM clusters WHERE name = '{name}'"));
        assert_eq!(linked, runs, "the cluster's row names another run");
        clusters.push(name);
    }

    for round in 0..ROUNDS {
        let name = format!("cred-{round}");
        let answers = race(api, "/v1/credentials", &json!({ "name": name, "provider": "sim" }));
        let won = one_winner(&answers, "CREDENTIAL_EXISTS", &name);
        let rows = api.query_strings(&format!("SELECT name FROM credentials WHERE name = '{name}'"));
        assert_eq!(rows, [name.as_str()], "credential rows of {name}");
        let runs = api.query_strings(&format!(
            "SELECT id FROM engine_runs WHERE kind = 'credentials.verify' AND resource_key = 'credential/{name}'"
        ));
        assert_eq!(runs, [won["workflow_id"].as_str().unwrap()], "credentials.verify runs of {name}");
        let linked = api.query_strings(&format!("SELECT verify_run FROM credentials WHERE name = '{name}'"));
        assert_eq!(linked, runs, "the credential's row names another run");
    }
    for round in 0..ROUNDS {
        let name = format!("cred-{round}");
        e2e::wait_until(Duration::from_secs(20), "the raced credential to be verified", || {
            (api.credential(&name)["status"] == "valid").then_some(())
        });
    }

    // Nothing left running: every raced cluster is deleted (after its create).
    let deletes: Vec<_> = clusters.iter().map(|name| api.spawn_cli(&["cluster", "delete", name, "--wait"])).collect();
    for delete in deletes {
        delete.wait(Duration::from_secs(60)).expect_code(0);
    }
    let live = api.query_strings("SELECT name FROM clusters WHERE phase <> 'deleted'");
    assert!(live.is_empty(), "clusters left: {live:?}");
    eprintln!("{} races on {} took {:?}", 2 * ROUNDS, api.id, started.elapsed());
}

#[test]
fn racing_creates_on_sqlite_get_one_201_and_409s() {
    let api = Api::start_hosted("races");
    races(&api);
}

#[test]
fn racing_creates_on_postgres_get_one_201_and_409s() {
    let db = PgDatabase::create();
    let api = Api::start_opts(ApiOptions {
        id: "races-pg".to_owned(),
        database_url: Some(db.url.clone()),
        hosted: true,
        ..ApiOptions::default()
    });
    races(&api);
}
