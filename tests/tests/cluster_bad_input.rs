//! Bad cluster requests, through the real binary: each is refused with a message that names what
//! is wrong (checked by its key words, plainly and as the `--json` error with its stable code) and
//! the documented exit code (3 bad input or conflict, 2 unknown name), and changes nothing. "Nothing"
//! is checked in the API's SQLite file, opened read-only: the rows of `clusters` and `vms`, every
//! `cluster.*` run in `engine_runs`, and what the simulated cloud holds (`sim_vms`,
//! `sim_networks`) are the same before and after each case.
//!
//! Cases: min != max, min = max = 0, a name that is not a DNS label, an unknown, an invalid and a
//! not yet verified credential, an unknown region and VM type, a duplicate name (the first
//! cluster untouched), status / wait / delete of an unknown cluster, a delete while a
//! deployment references the cluster (refused with `CLUSTER_IN_USE` naming it; accepted once it
//! ended), and a create on a local API (refused, saying how to get a hosted one).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_tests::e2e::{self, Api};

/// What a bad request may not change: rows of `clusters`, `vms`, `cluster.*` runs, and the
/// simulated cloud's VMs and network rules.
#[derive(Debug, PartialEq, Eq)]
struct Footprint {
    clusters: Vec<String>,
    vms: Vec<String>,
    cluster_runs: Vec<String>,
    sim_vms: Vec<String>,
    sim_networks: Vec<String>,
}

impl Footprint {
    fn of(api: &Api) -> Self {
        Self {
            clusters: api.query_strings(
                "SELECT json_array(id, name, credential, region, vm_type, min_vms, max_vms, phase, reason, endpoint, \
                 network_id, secrets, workflow_id, delete_requested_at, created_at, updated_at) FROM clusters \
                 ORDER BY id",
            ),
            vms: api.query_strings(
                "SELECT json_array(cluster_id, provider_id, name, role, state, updated_at) FROM vms \
                 ORDER BY cluster_id, provider_id",
            ),
            cluster_runs: api.query_strings(
                "SELECT json_array(id, kind, status, resource_key, updated_at) FROM engine_runs \
                 WHERE kind LIKE 'cluster.%' ORDER BY seq",
            ),
            sim_vms: api.query_strings("SELECT json_array(id, tags, terminated_at) FROM sim_vms ORDER BY id"),
            sim_networks: api.query_strings("SELECT json_array(id, cluster, deleted_at) FROM sim_networks ORDER BY id"),
        }
    }

    fn is_empty(&self) -> bool {
        self.clusters.is_empty()
            && self.vms.is_empty()
            && self.cluster_runs.is_empty()
            && self.sim_vms.is_empty()
            && self.sim_networks.is_empty()
    }
}

/// A refused CLI command: arguments, exit code, key words of the message, the API's error code.
struct Case<'a> {
    what: &'a str,
    args: Vec<&'a str>,
    code: i32,
    words: Vec<&'a str>,
    error_code: &'a str,
}

impl<'a> Case<'a> {
    fn new(what: &'a str, args: &[&'a str], code: i32, words: &[&'a str], error_code: &'a str) -> Self {
        Self { what, args: args.to_vec(), code, words: words.to_vec(), error_code }
    }
}

/// Runs `case` plainly and with `--json`, and checks that the footprint did not move.
#[track_caller]
fn refused(api: &Api, case: &Case<'_>) {
    let before = Footprint::of(api);
    let out = api.cli(&case.args);
    assert_eq!(out.code, case.code, "{}: exit code\n{out}", case.what);
    let prefix = format!("error[{}]: ", case.error_code);
    assert!(out.stderr.starts_with(&prefix), "{}: stderr should start with {prefix:?}\n{out}", case.what);
    for word in &case.words {
        assert!(out.stderr.contains(word), "{}: stderr lacks {word:?}\n{out}", case.what);
    }
    assert!(out.stdout.is_empty(), "{}: stdout should be empty\n{out}", case.what);
    let mut args = vec!["--json"];
    args.extend(&case.args);
    let out = api.cli(&args);
    assert_eq!(out.code, case.code, "{} (--json): exit code\n{out}", case.what);
    let error = out.json_error();
    assert_eq!(error["error"]["code"], case.error_code, "{} (--json)\n{out}", case.what);
    let message = error["error"]["message"].as_str().unwrap();
    for word in &case.words {
        assert!(message.contains(word), "{} (--json): the message lacks {word:?}\n{out}", case.what);
    }
    assert!(out.stdout.is_empty(), "{} (--json): stdout should be empty\n{out}", case.what);
    let after = Footprint::of(api);
    assert_eq!(after, before, "{} changed something", case.what);
}

#[test]
fn bad_cluster_requests_are_refused_and_change_nothing() {
    let api = Api::start_hosted("cluster-bad-input");
    api.cli(&["credentials", "new", "good", "--provider", "sim", "--wait"]).expect_code(0);
    // The simulated cloud rejects this one's keys: it ends invalid (exit 1).
    let rejected =
        api.cli(&["credentials", "new", "rejected", "--provider", "sim", "--sim-reject", "bad keys", "--wait"]);
    rejected.expect_code(1);
    assert_eq!(api.credential("rejected")["status"], "invalid");
    // Each call to this account takes 60 s: it stays `verifying` for the whole test.
    api.cli(&["credentials", "new", "slow", "--provider", "sim", "--sim-latency-ms", "60000"]).expect_code(0);
    assert_eq!(api.credential("slow")["status"], "verifying");
    let empty = Footprint::of(&api);
    assert!(empty.is_empty(), "{empty:#?}");

    let cases = [
        Case::new(
            "min != max",
            &e2e::cluster_create("c1", "good", "sim-east-1", "sim.small", "1", "2"),
            3,
            &["--min-vms (1) and --max-vms (2) differ", "minimum and maximum must be equal", "fixed capacity"],
            "INVALID_CLUSTER",
        ),
        Case::new(
            "min = max = 0",
            &e2e::cluster_create("c1", "good", "sim-east-1", "sim.small", "0", "0"),
            3,
            &["--min-vms 0 is out of range", "1 to 100 capacity VMs"],
            "INVALID_CLUSTER",
        ),
        Case::new(
            "a negative capacity",
            &[
                "cluster",
                "create",
                "c1",
                "--credentials",
                "good",
                "--region",
                "sim-east-1",
                "--vm-type",
                "sim.small",
                "--min-vms=-2",
                "--max-vms=-2",
            ],
            3,
            &["--min-vms -2 is out of range"],
            "INVALID_CLUSTER",
        ),
        Case::new(
            "a name that is not a DNS label",
            &e2e::cluster_create("Bad_Name", "good", "sim-east-1", "sim.small", "1", "1"),
            3,
            &["cluster name `Bad_Name` is not a DNS label", "lowercase letters, digits and hyphens"],
            "INVALID_CLUSTER",
        ),
        Case::new(
            "an unknown credential",
            &e2e::cluster_create("c1", "nope", "sim-east-1", "sim.small", "1", "1"),
            2,
            &["credential `nope` does not exist", "anycloud credentials list"],
            "CREDENTIAL_NOT_FOUND",
        ),
        Case::new(
            "an invalid credential",
            &e2e::cluster_create("c1", "rejected", "sim-east-1", "sim.small", "1", "1"),
            3,
            &["credential `rejected` is invalid", "bad keys", "save it again"],
            "CREDENTIAL_INVALID",
        ),
        Case::new(
            "a credential still being verified",
            &e2e::cluster_create("c1", "slow", "sim-east-1", "sim.small", "1", "1"),
            3,
            &["credential `slow` is still being verified", "try again"],
            "CREDENTIAL_NOT_VERIFIED",
        ),
        Case::new(
            "an unknown region",
            &e2e::cluster_create("c1", "good", "mars-1", "sim.small", "1", "1"),
            3,
            &["unknown region `mars-1`", "sim-east-1, sim-west-1, sim-north-1"],
            "INVALID_PLACEMENT",
        ),
        Case::new(
            "an unknown VM type",
            &e2e::cluster_create("c1", "good", "sim-east-1", "sim.huge", "1", "1"),
            3,
            &["unknown VM type `sim.huge`", "sim.small, sim.medium, sim.large"],
            "INVALID_PLACEMENT",
        ),
        Case::new(
            "delete of an unknown cluster",
            &["cluster", "delete", "ghost"],
            2,
            &["cluster `ghost` does not exist", "anycloud cluster list"],
            "CLUSTER_NOT_FOUND",
        ),
        Case::new(
            "delete --wait of an unknown cluster",
            &["cluster", "delete", "ghost", "--wait"],
            2,
            &["cluster `ghost` does not exist"],
            "CLUSTER_NOT_FOUND",
        ),
        Case::new(
            "status of an unknown cluster",
            &["cluster", "status", "ghost"],
            2,
            &["cluster `ghost` does not exist"],
            "CLUSTER_NOT_FOUND",
        ),
        Case::new(
            "status of a name carrying a terminal escape and a look-alike letter",
            &["cluster", "status", "r\u{435}d\u{1b}[31m"],
            2,
            &["cluster `r\\u{435}d\\u{1b}[31m` does not exist"],
            "CLUSTER_NOT_FOUND",
        ),
        Case::new(
            "wait for an unknown cluster",
            &["wait", "cluster/ghost", "--timeout", "5s"],
            2,
            &["cluster `ghost` does not exist"],
            "CLUSTER_NOT_FOUND",
        ),
    ];
    for case in &cases {
        refused(&api, case);
    }
    assert!(Footprint::of(&api).is_empty(), "{:#?}", Footprint::of(&api));

    // ---- A cluster to protect.
    let mut args = e2e::cluster_create("taken", "good", "sim-east-1", "sim.small", "1", "1");
    args.push("--wait");
    api.spawn_cli(&args).wait(Duration::from_secs(90)).expect_code(0);
    let detail = api.cli(&["--json", "cluster", "status", "taken"]);
    detail.expect_code(0);
    let detail = detail.json();
    assert_eq!(detail["cluster"]["phase"], "ready", "{detail:#}");
    let id = detail["cluster"]["id"].as_str().unwrap().to_owned();
    let taken = Footprint::of(&api);
    assert_eq!(taken.clusters.len(), 1, "{taken:#?}");
    assert_eq!(taken.cluster_runs.len(), 1, "{taken:#?}");
    assert_eq!(taken.sim_vms.len(), 2, "{taken:#?}");

    // A second cluster of the same name, even elsewhere: refused, the first untouched.
    refused(
        &api,
        &Case::new(
            "a duplicate name",
            &e2e::cluster_create("taken", "good", "sim-west-1", "sim.large", "3", "3"),
            3,
            &["cluster `taken` already exists (ready)", "anycloud cluster delete taken"],
            "CLUSTER_EXISTS",
        ),
    );

    // ---- A deployment on it: the delete is refused, naming the deployment.
    api.add_deployment("dep-1", "train-job", "job", &id, "running");
    refused(
        &api,
        &Case::new(
            "a delete while a deployment references the cluster",
            &["cluster", "delete", "taken"],
            3,
            &[
                "cluster `taken` is still referenced by 1 deployment(s) that have not ended: train-job",
                "anycloud terminate train-job",
            ],
            "CLUSTER_IN_USE",
        ),
    );
    refused(
        &api,
        &Case::new(
            "a delete --wait while a deployment references the cluster",
            &["cluster", "delete", "taken", "--wait"],
            3,
            &["train-job"],
            "CLUSTER_IN_USE",
        ),
    );
    let after = api.cli(&["--json", "cluster", "status", "taken"]);
    after.expect_code(0);
    let after = after.json();
    assert_eq!(after["cluster"]["phase"], "ready", "{after:#}");
    assert!(after["cluster"]["delete_requested_at"].is_null(), "{after:#}");
    assert_eq!(after["workflow"]["kind"], "cluster.create", "{after:#}");
    let deletes = api.query_strings("SELECT id FROM engine_runs WHERE kind = 'cluster.delete'");
    assert!(deletes.is_empty(), "a delete run was submitted: {deletes:?}");
    assert_eq!(Footprint::of(&api), taken);

    // Once the deployment has ended, the same delete goes through and the provider is emptied:
    // the refusal was the deployment's doing.
    api.add_deployment("dep-1", "train-job", "job", &id, "completed");
    api.spawn_cli(&["cluster", "delete", "taken", "--wait"]).wait(Duration::from_secs(90)).expect_code(0);
    let live = api.query_strings("SELECT id FROM sim_vms WHERE terminated_at IS NULL");
    assert!(live.is_empty(), "{live:?}");
    let networks = api.query_strings("SELECT id FROM sim_networks WHERE deleted_at IS NULL");
    assert!(networks.is_empty(), "{networks:?}");
}

#[test]
fn a_local_api_refuses_to_create_clusters() {
    let api = Api::start("cluster-local");
    api.cli(&["credentials", "new", "good", "--provider", "sim", "--wait"]).expect_code(0);
    refused(
        &api,
        &Case::new(
            "a create on a local API",
            &e2e::cluster_create("c1", "good", "sim-east-1", "sim.small", "1", "1"),
            3,
            &[
                "cluster creation requires a hosted API",
                "`cluster-local` is a local API",
                "anycloud api serve --id NAME --credentials sim --use",
            ],
            "HOSTED_API_REQUIRED",
        ),
    );
    let mut args = e2e::cluster_create("c1", "good", "sim-east-1", "sim.small", "1", "1");
    args.push("--wait");
    refused(
        &api,
        &Case::new("a create --wait on a local API", &args, 3, &["--credentials sim"], "HOSTED_API_REQUIRED"),
    );
    let footprint = Footprint::of(&api);
    assert!(footprint.is_empty(), "{footprint:#?}");
    let list = api.cli(&["--json", "cluster", "list"]);
    list.expect_code(0);
    assert_eq!(list.json()["clusters"], serde_json::json!([]), "{list}");
}
