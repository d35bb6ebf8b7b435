//! Clusters end to end on the simulated cloud, through the real binary and a hosted API on
//! SQLite, checked at the provider (the simulated cloud's own tables, `sim_vms` and
//! `sim_networks`, read from the API's database file) and not only through what anycloud says:
//!
//! - `cluster create --wait` brings up a ready cluster: 1 control plane + 2 workers, all tagged
//!   with the cluster's id, one network; `status` shows the VMs, endpoint and workflow; the
//!   create run's 10 steps succeeded and neither `inspect` nor logs nor the engine's tables hold
//!   the cluster's tokens, CA or user-data (the sealed `secrets` column holds no PEM in clear);
//! - `cluster delete --wait` leaves the provider with no live VM and no network rule of the
//!   cluster, the cluster disappears from `list`, `status` says deleted, and the name can be
//!   used again;
//! - a delete accepted while the create runs waits for it (same resource key `cluster/NAME`);
//! - a terminal failure (a VM quota too small) and VMs that never become Ready both end
//!   `failed`, with the reason, and leave nothing at the provider;
//! - `wait cluster/NAME --timeout 1s` on a slow create exits 4.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, ApiOptions, Output};
use serde_json::{Value, json};

/// Steps of `cluster.create`, in order.
const CREATE_STEPS: [&str; 12] = [
    "pin_placement",
    "pin_control_plane",
    "ensure_network",
    "ensure_control_plane_network",
    "reserve_control_plane_address",
    "generate_secrets",
    "launch_control_plane",
    "wait_for_api",
    "launch_workers",
    "open_node_paths",
    "wait_for_nodes",
    "mark_ready",
];

/// Steps of `cluster.delete`, in order.
const DELETE_STEPS: [&str; 7] = [
    "mark_deleting",
    "remove_workloads",
    "terminate_vms",
    "delete_network",
    "wait_gone",
    "release_address",
    "mark_deleted",
];

/// How long a `--wait` on the simulated cloud may take before the test fails.
const WAIT: Duration = Duration::from_secs(90);

/// Saves a sim credential through the CLI and waits until it is valid.
fn sim_credential(api: &Api, name: &str) {
    api.cli(&["credentials", "new", name, "--provider", "sim", "--wait"]).expect_code(0);
}

/// Saves a sim credential with settings the CLI has no flag for (quota, never-ready nodes,
/// latency), as a raw `POST /v1/credentials`, and waits until it is valid.
fn sim_credential_with(api: &Api, name: &str, sim: Value) {
    let answer = api.post_json("/v1/credentials", &json!({ "name": name, "provider": "sim", "sim": sim }));
    assert_eq!(answer.status, 201, "saving credential {name}: {answer:?}");
    e2e::wait_until(Duration::from_secs(30), &format!("credential {name} to be valid"), || {
        let credential = api.credential(name);
        assert_ne!(credential["status"], "invalid", "{credential}");
        (credential["status"] == "valid").then_some(())
    });
}

/// `cluster create NAME` with `vms` capacity VMs of sim.small in sim-east-1, plus `extra`.
fn create(api: &Api, name: &str, credential: &str, vms: &str, extra: &[&str]) -> Output {
    let mut args = e2e::sim_cluster_create(name, credential, vms);
    args.extend(extra);
    let child = api.spawn_cli(&args);
    child.wait(WAIT)
}

/// `cluster status NAME --json`.
fn status(api: &Api, name: &str) -> Value {
    let out = api.cli(&["--json", "cluster", "status", name]);
    out.expect_code(0);
    out.json()
}

/// One VM as the simulated cloud holds it.
#[derive(Debug, Clone)]
struct ProviderVm {
    id: String,
    account: String,
    tags: Value,
    /// Its user-data, opened with the API's key (the row holds it sealed).
    user_data: String,
    /// Its user-data as the row holds it.
    sealed_user_data: String,
    live: bool,
}

/// Every VM the simulated cloud holds for `cluster_id` (by its `anycloud-cluster` tag), live
/// (`terminated_at IS NULL`) or not, in launch order.
fn provider_vms(api: &Api, cluster_id: &str) -> Vec<ProviderVm> {
    let sealer = anycloud_workflows::secrets::SecretBox::load_or_create(&api.data_dir()).unwrap();
    api.query_strings(
        "SELECT json_object('id', id, 'account', account, 'tags', json(tags), 'user_data', user_data, \
         'live', terminated_at IS NULL) FROM sim_vms ORDER BY launched_at, id",
    )
    .iter()
    .map(|row| serde_json::from_str::<Value>(row).unwrap())
    .filter(|row| row["tags"]["anycloud-cluster"] == cluster_id)
    .map(|row| {
        let id = row["id"].as_str().unwrap().to_owned();
        let sealed_user_data = row["user_data"].as_str().unwrap().to_owned();
        ProviderVm {
            user_data: anycloud_sim::open_user_data(&sealer, &id, &sealed_user_data).unwrap(),
            sealed_user_data,
            id,
            account: row["account"].as_str().unwrap().to_owned(),
            tags: row["tags"].clone(),
            live: row["live"] == 1,
        }
    })
    .collect()
}

/// The live VMs the simulated cloud holds for `cluster_id`.
fn live_vms(api: &Api, cluster_id: &str) -> Vec<ProviderVm> {
    provider_vms(api, cluster_id).into_iter().filter(|vm| vm.live).collect()
}

/// How many of the simulated cloud's network rules of `cluster_id` are not deleted, and how many
/// it ever held.
fn provider_networks(api: &Api, cluster_id: &str) -> (usize, usize) {
    let sql = format!(
        "SELECT CASE WHEN deleted_at IS NULL THEN 'live' ELSE 'deleted' END FROM sim_networks WHERE cluster = '{}'",
        cluster_id.replace('\'', "''")
    );
    let rows = api.query_strings(&sql);
    (rows.iter().filter(|row| *row == "live").count(), rows.len())
}

/// Fails the test unless the provider holds no live VM and no live network rule of `cluster_id`.
#[track_caller]
fn assert_provider_clean(api: &Api, cluster_id: &str) {
    let live = live_vms(api, cluster_id);
    assert!(live.is_empty(), "the provider still holds live VMs of cluster {cluster_id}: {live:#?}");
    let (networks, _) = provider_networks(api, cluster_id);
    assert_eq!(networks, 0, "the provider still holds network rules of cluster {cluster_id}");
    let reserved = api
        .query_strings(&format!("SELECT ip FROM sim_addresses WHERE owner = '{cluster_id}' AND released_at IS NULL"));
    assert!(reserved.is_empty(), "the provider still holds the reserved address of cluster {cluster_id}: {reserved:?}");
}

/// The text after `key` up to the next `'` (or end of line) in `text`.
fn after<'a>(text: &'a str, key: &str) -> &'a str {
    let start = text.find(key).unwrap_or_else(|| panic!("{key:?} is not in {text:?}")) + key.len();
    let rest = &text[start..];
    &rest[..rest.find(['\'', ',', '\n']).unwrap_or(rest.len())]
}

/// Every text column of the engine's tables, joined (for searching for secrets).
fn engine_text(api: &Api) -> String {
    let mut text = String::new();
    for sql in [
        "SELECT json_array(id, kind, resource_key, input, output, status_reason, error) FROM engine_runs",
        "SELECT json_array(run_id, name, output, error) FROM engine_steps",
        "SELECT json_array(run_id, kind, step, message) FROM engine_events",
    ] {
        text.push_str(&api.query_strings(sql).join("\n"));
    }
    text
}

/// The names of the forward steps of an inspected run, and whether each succeeded.
fn forward_steps(detail: &Value) -> Vec<(String, String)> {
    detail["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|step| step["phase"] == "forward")
        .map(|step| (step["name"].as_str().unwrap().to_owned(), step["status"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn create_reaches_ready_and_delete_leaves_nothing_at_the_provider() {
    let started = Instant::now();
    let api = Api::start_hosted("cluster-sim");
    sim_credential(&api, "simc");

    // ---- Create, following every step.
    let created = create(&api, "c1", "simc", "2", &["--wait"]);
    created.expect_code(0);
    for step in CREATE_STEPS {
        assert!(created.stdout.contains(&format!("[{step}]")), "step {step} is not shown\n{created}");
    }
    assert!(created.stdout.contains("cluster c1 accepted: 2 x sim.small in sim-east-1 (sim, simulated)"), "{created}");
    assert!(created.stdout.contains("cluster c1 is ready"), "{created}");

    // ---- What anycloud says.
    let detail = status(&api, "c1");
    let cluster = &detail["cluster"];
    let id = cluster["id"].as_str().unwrap().to_owned();
    let run = cluster["workflow_id"].as_str().unwrap().to_owned();
    assert_eq!(cluster["phase"], "ready", "{detail:#}");
    assert_eq!(cluster["provider"], "sim", "{detail:#}");
    assert_eq!(detail["simulated"], true, "{detail:#}");
    assert_eq!(detail["desired_vms"], 2, "{detail:#}");
    assert_eq!(detail["running_vms"], 2, "{detail:#}");
    assert!(detail["last_error"].is_null(), "{detail:#}");
    let endpoint = cluster["endpoint"].as_str().unwrap_or_else(|| panic!("no endpoint: {detail:#}"));
    // The control plane's reserved address (198.18.0.0/15), not a VM's ephemeral one.
    let reserved =
        api.query_strings(&format!("SELECT ip FROM sim_addresses WHERE owner = '{id}' AND released_at IS NULL"));
    assert_eq!(reserved.len(), 1, "one reserved address: {reserved:?}");
    assert!(reserved[0].starts_with("198.18.") || reserved[0].starts_with("198.19."), "{reserved:?}");
    assert_eq!(endpoint, format!("https://{}:6443", reserved[0]), "{detail:#}");
    assert!(cluster["network_id"].as_str().is_some_and(|n| n.starts_with("sg-sim-")), "{detail:#}");
    assert_eq!(detail["workflow"]["id"], run.as_str(), "{detail:#}");
    assert_eq!(detail["workflow"]["kind"], "cluster.create", "{detail:#}");
    assert_eq!(detail["workflow"]["status"], "succeeded", "{detail:#}");
    let vms = detail["vms"].as_array().unwrap();
    assert_eq!(vms.len(), 3, "{detail:#}");
    let workers: Vec<&Value> = vms.iter().filter(|vm| vm["role"] == "worker").collect();
    assert_eq!(workers.len(), 2, "{detail:#}");
    assert_eq!(vms.iter().filter(|vm| vm["role"] == "control-plane").count(), 1, "{detail:#}");
    for vm in vms {
        assert!(vm["provider_id"].as_str().unwrap().starts_with("sim-"), "{vm}");
        assert_eq!(vm["state"], "running", "{vm}");
        assert!(vm["private_ip"].as_str().unwrap().starts_with("10.77."), "{vm}");
        let public = vm["public_ip"].as_str().unwrap();
        match vm["role"].as_str() {
            Some("control-plane") => assert_eq!(public, reserved[0], "{vm}"),
            _ => assert!(public.starts_with("203.0.113."), "{vm}"),
        }
    }
    let shown: BTreeSet<String> = vms.iter().map(|vm| vm["provider_id"].as_str().unwrap().to_owned()).collect();

    // ---- What the provider holds: exactly these 3 VMs, tagged, and one network.
    let live = live_vms(&api, &id);
    assert_eq!(live.len(), 3, "{live:#?}");
    assert_eq!(provider_vms(&api, &id).len(), 3, "a VM was launched twice");
    let all_live = api.query_strings("SELECT id FROM sim_vms WHERE terminated_at IS NULL");
    assert_eq!(all_live.len(), 3, "the provider holds VMs of no cluster: {all_live:?}");
    let held: BTreeSet<String> = live.iter().map(|vm| vm.id.clone()).collect();
    assert_eq!(held, shown, "status shows other VMs than the provider holds");
    let roles: Vec<&str> = live.iter().map(|vm| vm.tags["anycloud-role"].as_str().unwrap()).collect();
    assert_eq!(roles.iter().filter(|role| **role == "control-plane").count(), 1, "{live:#?}");
    assert_eq!(roles.iter().filter(|role| **role == "worker").count(), 2, "{live:#?}");
    for vm in &live {
        assert_eq!(vm.tags["anycloud-cluster"], id.as_str(), "{vm:#?}");
        assert_eq!(vm.account, "sim-account-simc", "{vm:#?}");
    }
    let names: BTreeSet<&str> = live.iter().map(|vm| vm.tags["anycloud-vm"].as_str().unwrap()).collect();
    assert_eq!(names, BTreeSet::from(["cp", "w0", "w1"]), "{live:#?}");
    assert_eq!(provider_networks(&api, &id), (1, 1), "the provider should hold one network rule");

    // ---- The run: 10 steps succeeded, and no secret anywhere it shows.
    let inspected = api.inspect(&run, true);
    assert_eq!(inspected["run"]["status"], "succeeded", "{inspected:#}");
    assert_eq!(inspected["run"]["kind"], "cluster.create", "{inspected:#}");
    let expected: Vec<(String, String)> =
        CREATE_STEPS.iter().map(|step| ((*step).to_owned(), "succeeded".to_owned())).collect();
    assert_eq!(forward_steps(&inspected), expected, "{inspected:#}");
    assert_eq!(inspected["run"]["output"]["endpoint"], endpoint, "{inspected:#}");
    assert_eq!(inspected["run"]["output"]["ready_nodes"], 2, "{inspected:#}");

    // The secrets, as the provider received them in the control plane's user-data (opened with the
    // API's key: the simulated cloud keeps each VM's sealed).
    let cp = live.iter().find(|vm| vm.tags["anycloud-role"] == "control-plane").unwrap();
    let server_token = after(&cp.user_data, "K3S_TOKEN='").to_owned();
    let agent_token = after(&cp.user_data, "K3S_AGENT_TOKEN='").to_owned();
    let api_token = after(&cp.user_data, "anycloud-tokens.csv <<'ANYCLOUD_EOF'\n").to_owned();
    assert!(server_token.len() >= 32 && agent_token.len() >= 32 && api_token.len() >= 32, "{}", cp.user_data);
    let ca_key = after(&cp.user_data, "-----BEGIN PRIVATE KEY-----\n").to_owned();
    assert!(ca_key.len() >= 32, "{}", cp.user_data);
    // The workers joined with the agent token; none holds the server token, the API token or a key.
    for worker in live.iter().filter(|vm| vm.tags["anycloud-role"] == "worker") {
        assert!(worker.user_data.contains(&format!("::node:{agent_token}'")), "{}", worker.user_data);
        for secret in [&server_token, &api_token, &ca_key] {
            assert!(!worker.user_data.contains(secret.as_str()), "{}", worker.user_data);
        }
    }
    // No VM's row holds its user-data in the clear, and the database file (and its WAL) holds
    // none of the secrets anywhere: the sim's copy of the user-data is sealed like the cluster's.
    for vm in &live {
        assert!(!vm.sealed_user_data.contains("#!/bin/sh") && !vm.sealed_user_data.contains("K3S_"), "{vm:#?}");
    }
    for secret in [&server_token, &agent_token, &api_token, &ca_key] {
        api.assert_secret_nowhere(secret);
    }
    let plain_inspect = api.cli(&["workflow", "inspect", &run, "--events"]);
    plain_inspect.expect_code(0);
    let status_text = api.cli(&["cluster", "status", "c1"]);
    status_text.expect_code(0);
    let shown_text = [
        inspected.to_string(),
        plain_inspect.stdout.clone(),
        detail.to_string(),
        status_text.stdout.clone(),
        created.stdout.clone(),
    ]
    .join("\n");
    for (what, secret) in [
        ("K3S_TOKEN", "K3S_TOKEN"),
        ("the user-data", "#!/bin/sh"),
        ("a PEM", "-----BEGIN"),
        ("the server token", &server_token),
        ("the agent token", &agent_token),
        ("the API token", &api_token),
    ] {
        assert!(!shown_text.contains(secret), "{what} appears in inspect or status output:\n{shown_text}");
        assert!(!engine_text(&api).contains(secret), "{what} is in the engine's tables");
        assert!(!api.logs().contains(secret), "{what} is in the API's logs\n{}", api.logs());
        assert!(!api.transcript().contains(secret), "{what} is in CLI output\n{}", api.transcript());
    }
    let sealed = api.query_strings(&format!("SELECT secrets FROM clusters WHERE id = '{id}'"));
    assert_eq!(sealed.len(), 1, "the cluster has no sealed secrets");
    for secret in ["BEGIN", "K3S_TOKEN", server_token.as_str(), agent_token.as_str(), api_token.as_str()] {
        assert!(!sealed[0].contains(secret), "{secret:?} is in the sealed secrets column in clear: {}", sealed[0]);
    }

    // ---- The list.
    let list = api.cli(&["cluster", "list"]);
    list.expect_code(0);
    let row = list.stdout.lines().find(|line| line.starts_with("c1 ")).unwrap_or_else(|| panic!("{list}"));
    assert!(row.contains("ready") && row.contains("sim (simulated)") && row.contains("2/2"), "{list}");

    // ---- Delete.
    let deleted = api.spawn_cli(&["cluster", "delete", "c1", "--wait"]).wait(WAIT);
    deleted.expect_code(0);
    assert!(deleted.stdout.contains("cluster c1 is deleted"), "{deleted}");
    for step in DELETE_STEPS {
        assert!(deleted.stdout.contains(&format!("[{step}]")), "step {step} is not shown\n{deleted}");
    }
    assert_provider_clean(&api, &id);
    assert_eq!(provider_vms(&api, &id).len(), 3, "the VMs' rows are gone, not terminated");
    assert_eq!(provider_networks(&api, &id), (0, 1));
    let left = api.query_strings(&format!("SELECT ip FROM sim_addresses WHERE owner = '{id}' AND released_at IS NULL"));
    assert!(left.is_empty(), "the reserved address is released: {left:?}");
    let list = api.cli(&["cluster", "list"]);
    list.expect_code(0);
    assert!(!list.stdout.lines().any(|line| line.starts_with("c1 ")), "{list}");
    let list = api.cli(&["--json", "cluster", "list"]);
    list.expect_code(0);
    assert_eq!(list.json()["clusters"], json!([]), "{list}");
    let gone = status(&api, "c1");
    assert_eq!(gone["cluster"]["phase"], "deleted", "{gone:#}");
    assert_eq!(gone["cluster"]["id"], id.as_str(), "{gone:#}");
    assert_eq!(gone["workflow"]["kind"], "cluster.delete", "{gone:#}");
    assert_eq!(gone["workflow"]["status"], "succeeded", "{gone:#}");
    assert_eq!(gone["running_vms"], 0, "{gone:#}");
    assert!(gone["vms"].as_array().unwrap().iter().all(|vm| vm["state"] == "terminated"), "{gone:#}");
    assert!(gone["cluster"]["endpoint"].is_null(), "{gone:#}");
    let delete_run = gone["workflow"]["id"].as_str().unwrap().to_owned();
    let inspected = api.inspect(&delete_run, false);
    let expected: Vec<(String, String)> =
        DELETE_STEPS.iter().map(|step| ((*step).to_owned(), "succeeded".to_owned())).collect();
    assert_eq!(forward_steps(&inspected), expected, "{inspected:#}");
    let erased = api.query_strings(&format!("SELECT coalesce(secrets, 'erased') FROM clusters WHERE id = '{id}'"));
    assert_eq!(erased, ["erased"], "a deleted cluster keeps its secrets");

    // ---- The name is free again: a new cluster, with a new id and its own VMs.
    let again = create(&api, "c1", "simc", "1", &["--wait"]);
    again.expect_code(0);
    let detail = status(&api, "c1");
    assert_eq!(detail["cluster"]["phase"], "ready", "{detail:#}");
    let new_id = detail["cluster"]["id"].as_str().unwrap().to_owned();
    assert_ne!(new_id, id);
    assert_eq!(live_vms(&api, &new_id).len(), 2, "{:#?}", provider_vms(&api, &new_id));
    assert_provider_clean(&api, &id);
    let list = api.cli(&["--json", "cluster", "list"]);
    list.expect_code(0);
    let listed = list.json();
    assert_eq!(listed["clusters"].as_array().unwrap().len(), 1, "{listed:#}");
    assert_eq!(listed["clusters"][0]["cluster"]["id"], new_id.as_str(), "{listed:#}");
    eprintln!("create, delete and reuse took {:?}", started.elapsed());
}

#[test]
fn a_delete_accepted_during_the_create_waits_for_it() {
    let api = Api::start_hosted("cluster-queue");
    sim_credential(&api, "simq");

    let created = create(&api, "c2", "simq", "2", &["--json"]);
    created.expect_code(0);
    let created = created.json();
    let id = created["cluster"]["id"].as_str().unwrap().to_owned();
    let create_run = created["workflow_id"].as_str().unwrap().to_owned();
    let deleted = api.cli(&["cluster", "delete", "c2"]);
    deleted.expect_code(0);
    assert!(deleted.stdout.contains("cluster c2 deletion accepted"), "{deleted}");
    assert!(deleted.stdout.contains("anycloud wait cluster/c2"), "{deleted}");

    // The delete is queued: the create has not ended, the delete has not started.
    let list = api.cli(&["--json", "workflow", "list", "--resource", "cluster/c2"]);
    list.expect_code(0);
    let runs = list.json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let create_now = runs.iter().find(|run| run["kind"] == "cluster.create").unwrap();
    let delete_now = runs.iter().find(|run| run["kind"] == "cluster.delete").unwrap();
    assert!(create_now["finished_at"].is_null(), "the create ended before the delete was asked: {runs:#?}");
    assert_eq!(delete_now["status"], "pending", "{runs:#?}");
    let delete_run = delete_now["id"].as_str().unwrap().to_owned();

    let waited = api.spawn_cli(&["wait", "cluster/c2"]).wait(WAIT);
    waited.expect_code(0);
    assert!(waited.stdout.contains(&format!("following workflow {delete_run}")), "{waited}");
    assert!(waited.stdout.contains("cluster c2 is deleted"), "{waited}");

    // The create went all the way (it was not cut short), then the delete removed everything.
    assert_provider_clean(&api, &id);
    let launched = provider_vms(&api, &id);
    assert_eq!(launched.len(), 3, "the create should have launched 3 VMs: {launched:#?}");
    assert_eq!(provider_networks(&api, &id), (0, 1));
    assert_eq!(status(&api, "c2")["cluster"]["phase"], "deleted");

    let list = api.cli(&["--json", "workflow", "list", "--resource", "cluster/c2"]);
    list.expect_code(0);
    let runs = list.json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let create = runs.iter().find(|run| run["kind"] == "cluster.create").unwrap();
    let delete = runs.iter().find(|run| run["kind"] == "cluster.delete").unwrap();
    assert_eq!(create["id"], create_run.as_str());
    assert_eq!(create["status"], "succeeded", "{runs:#?}");
    assert_eq!(delete["status"], "succeeded", "{runs:#?}");
    let create_ended = create["finished_at"].as_i64().unwrap();
    let delete_asked = delete["created_at"].as_i64().unwrap();
    assert!(delete_asked < create_ended, "the delete was asked after the create ended: {runs:#?}");
    let detail = api.inspect(&delete_run, true);
    let first_step = detail["steps"].as_array().unwrap().iter().filter_map(|step| step["started_at"].as_i64()).min();
    let first_claim = e2e::events(&detail)
        .iter()
        .filter(|event| event["kind"] == "claimed")
        .filter_map(|event| event["at"].as_i64())
        .min();
    let delete_started = first_step.unwrap().min(first_claim.unwrap());
    assert!(
        create_ended <= delete_started,
        "the delete started at {delete_started}, before the create ended at {create_ended}: {runs:#?}\n{detail:#}"
    );
}

#[test]
fn a_vm_quota_too_small_ends_failed_and_unwinds() {
    let api = Api::start_hosted("cluster-quota");
    // 2 capacity VMs need 3: the second worker's launch hits the quota.
    sim_credential_with(&api, "tight", json!({ "quota_vms": 2 }));
    let out = create(&api, "q1", "tight", "2", &["--wait"]);
    out.expect_code(1);
    assert!(out.stdout.contains("cluster q1 is failed"), "{out}");

    let detail = status(&api, "q1");
    let id = detail["cluster"]["id"].as_str().unwrap().to_owned();
    assert_eq!(detail["cluster"]["phase"], "failed", "{detail:#}");
    let reason = detail["cluster"]["reason"].as_str().unwrap_or_else(|| panic!("no reason: {detail:#}"));
    assert!(reason.contains("creation failed") && reason.contains("workflow inspect"), "{detail:#}");
    let error = detail["last_error"].as_str().unwrap_or_else(|| panic!("no last error: {detail:#}"));
    assert!(error.contains("quota of 2 VMs"), "{detail:#}");
    assert_eq!(detail["workflow"]["status"], "failed", "{detail:#}");
    let text = api.cli(&["cluster", "status", "q1"]);
    text.expect_code(0);
    assert!(text.stdout.contains("phase        failed") && text.stdout.contains("quota"), "{text}");

    // The control plane and the first worker were launched, then swept; the network is gone.
    let launched = provider_vms(&api, &id);
    assert_eq!(launched.len(), 2, "{launched:#?}");
    assert_provider_clean(&api, &id);
    assert_eq!(provider_networks(&api, &id), (0, 1));
    assert!(api.query_strings("SELECT id FROM sim_vms WHERE terminated_at IS NULL").is_empty());
    let erased = api.query_strings(&format!("SELECT coalesce(secrets, 'erased') FROM clusters WHERE id = '{id}'"));
    assert_eq!(erased, ["erased"], "a failed cluster keeps its secrets");
    let run = detail["workflow"]["id"].as_str().unwrap();
    let inspected = api.inspect(run, false);
    let undone = e2e::undone_steps(&inspected);
    assert!(undone.contains(&"launch_control_plane") && undone.contains(&"ensure_network"), "{inspected:#}");
    // A failed cluster still holds its name until it is deleted; the delete has nothing to remove.
    let list = api.cli(&["cluster", "list"]);
    assert!(list.stdout.lines().any(|line| line.starts_with("q1 ") && line.contains("failed")), "{list}");
    api.spawn_cli(&["cluster", "delete", "q1", "--wait"]).wait(WAIT).expect_code(0);
    assert_provider_clean(&api, &id);
}

#[test]
fn vms_that_never_become_ready_end_failed_and_unwind() {
    let api = Api::start_opts(ApiOptions {
        id: "cluster-never-ready".into(),
        hosted: true,
        env: vec![("ANYCLOUD_CLUSTER_READY_TIMEOUT_SECS".into(), "5".into())],
        ..ApiOptions::default()
    });
    sim_credential_with(&api, "stuck", json!({ "never_ready": true }));
    let started = Instant::now();
    let out = create(&api, "n1", "stuck", "2", &["--wait"]);
    out.expect_code(1);
    assert!(started.elapsed() >= Duration::from_secs(5), "failed before the ready timeout: {out}");
    assert!(out.stdout.contains("cluster n1 is failed"), "{out}");

    let detail = status(&api, "n1");
    let id = detail["cluster"]["id"].as_str().unwrap().to_owned();
    assert_eq!(detail["cluster"]["phase"], "failed", "{detail:#}");
    assert!(detail["cluster"]["reason"].as_str().is_some_and(|r| r.contains("creation failed")), "{detail:#}");
    let error = detail["last_error"].as_str().unwrap_or_else(|| panic!("no last error: {detail:#}"));
    assert!(error.contains("wait_for_nodes") || error.contains("capacity nodes Ready"), "{detail:#}");

    // All three VMs were launched (they booted, their nodes never got Ready), then swept.
    let launched = provider_vms(&api, &id);
    assert_eq!(launched.len(), 3, "{launched:#?}");
    assert_provider_clean(&api, &id);
    assert_eq!(provider_networks(&api, &id), (0, 1));
    assert!(api.query_strings("SELECT id FROM sim_vms WHERE terminated_at IS NULL").is_empty());
}

#[test]
fn waiting_on_a_slow_create_times_out_with_exit_4() {
    let api = Api::start_hosted("cluster-slow");
    sim_credential_with(&api, "slow", json!({ "latency_ms": 1500 }));
    create(&api, "s1", "slow", "1", &[]).expect_code(0);
    let started = Instant::now();
    let out = api.cli(&["wait", "cluster/s1", "--timeout", "1s"]);
    out.expect_code(4);
    assert!(out.stderr.contains("did not end within"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(15), "the 1 s wait took {:?}", started.elapsed());
    assert_eq!(status(&api, "s1")["cluster"]["phase"], "creating");
    let out = api.cli(&["--json", "wait", "cluster/s1", "--timeout", "1s"]);
    out.expect_code(4);
}

/// On an API that places control planes with its own hosting credential (as the VM `api.deploy`
/// launches does, `--control-plane-credentials`): a create is refused, writing nothing, while the
/// API does not hold that credential; then the control plane runs in the hosting account, region
/// and machine type and the capacity in the cluster's, the workers joining over the control
/// plane's public address; the hosting credential cannot be deleted while the cluster lives; the
/// delete leaves nothing in either account.
#[test]
fn the_control_plane_runs_on_the_apis_hosting_credential() {
    let api = Api::start_opts(ApiOptions {
        id: "cp-host".into(),
        hosted: true,
        args: ["--control-plane-credentials", "host", "--control-plane-region", "sim-west-1"]
            .into_iter()
            .chain(["--control-plane-vm-type", "sim.large"])
            .map(str::to_owned)
            .collect(),
        ..ApiOptions::default()
    });
    sim_credential(&api, "cap");
    let out = create(&api, "k", "cap", "1", &["--wait"]);
    out.expect_code(3);
    assert!(out.stderr.contains("its hosting credential `host`, which this API does not hold"), "{out}");
    assert!(api.query_strings("SELECT name FROM clusters").is_empty(), "a refused create wrote a cluster");

    sim_credential(&api, "host");
    create(&api, "k", "cap", "1", &["--wait"]).expect_code(0);
    let detail = status(&api, "k");
    let cluster = &detail["cluster"];
    let id = cluster["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (&cluster["control_plane_credential"], &cluster["control_plane_region"], &cluster["control_plane_vm_type"]),
        (&json!("host"), &json!("sim-west-1"), &json!("sim.large")),
        "{detail:#}"
    );
    let shown = api.cli(&["cluster", "status", "k"]);
    assert!(shown.stdout.contains("control plane: sim / sim-west-1 / sim.large, on the API's hosting credential host"));
    // What the simulated cloud holds, account by account.
    let placed = |vm: &ProviderVm| {
        let sql = format!("SELECT region || ' ' || vm_type FROM sim_vms WHERE id = '{}'", vm.id);
        (vm.tags["anycloud-vm"].as_str().unwrap().to_owned(), vm.account.clone(), api.query_strings(&sql).join(""))
    };
    let live: Vec<_> = live_vms(&api, &id).iter().map(placed).collect();
    assert_eq!(
        live,
        [
            ("cp".to_owned(), "sim-account-host".to_owned(), "sim-west-1 sim.large".to_owned()),
            ("w0".to_owned(), "sim-account-cap".to_owned(), "sim-east-1 sim.small".to_owned()),
        ],
    );
    let vms = live_vms(&api, &id);
    let cp_public =
        detail["vms"].as_array().unwrap().iter().find(|vm| vm["role"] == "control-plane").unwrap()["public_ip"]
            .as_str()
            .unwrap()
            .to_owned();
    assert!(vms[1].user_data.contains(&format!("K3S_URL='https://{cp_public}:6443'")), "{}", vms[1].user_data);

    let out = api.cli(&["credentials", "delete", "host"]);
    out.expect_code(3);
    assert!(out.stderr.contains("credential `host` holds the capacity or the control plane of 1 cluster(s): k"));
    api.spawn_cli(&["cluster", "delete", "k", "--wait"]).wait(WAIT).expect_code(0);
    assert_provider_clean(&api, &id);
    api.cli(&["credentials", "delete", "host"]).expect_code(0);
}
