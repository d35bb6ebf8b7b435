//! SIGKILL of the hosted API in the middle of `cluster.create`, then a restart (same id, port and
//! database), ends with the cluster ready and exactly the VMs it asked for at the provider: none
//! launched twice, none orphaned.
//!
//! The API runs with the crash-test seam `ANYCLOUD_TEST_PAUSE_AFTER_LAUNCH_MS`, which holds each
//! launch step between the provider's answer and the step's checkpoint. The test kills the API
//!
//! 1. after the control plane's VM exists at the provider and before `launch_control_plane` is
//!    checkpointed;
//! 2. after the first worker's VM exists and before `launch_workers` is checkpointed;
//! 3. while the run waits on `wait_for_nodes` (the sim credential boots VMs slowly enough);
//! 4. at a random moment of a second cluster's creation.
//!
//! After the last restart the provider (the simulated cloud's tables `sim_vms` and
//! `sim_networks`, read straight from the API's database) holds exactly three VM rows per
//! cluster, all live, named `cp`, `w0` and `w1` once each, and one live network; anycloud's
//! record names the same VMs; the run's timeline shows the restarts taking the run back and the
//! interrupted launch steps' extra attempts. `cluster delete --wait` then leaves nothing live.
//! A PostgreSQL variant repeats the first kill.
//!
//! A cancel that the API driving the run never hears of (it is sent through a second API on the
//! same database) followed by a SIGKILL before the launch's checkpoint: the restarted API turns
//! the run back, undoes the launch that was cut short first (its VM is found by tag), then the
//! completed steps, and says so truthfully in the timeline; nothing is left at the provider.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anycloud_tests::e2e::{self, Api, ApiOptions, PgDatabase, wait_until};
use rand::Rng;
use serde_json::{Value, json};

/// The seam's pause between a launch's answer and its step's checkpoint.
const PAUSE_AFTER_LAUNCH_MS: &str = "1500";
/// How long the sim credential's VMs take to boot, and their nodes to become Ready after that:
/// the last worker's node is Ready 5 s after its launch, 3.5 s after `wait_for_nodes` first looks.
const BOOT_MS: u64 = 2500;
/// The sim account's name (credential).
const CREDENTIAL: &str = "crash-sim";
/// How long the test waits for one stage of a creation.
const STAGE: Duration = Duration::from_secs(20);

fn start_api(id: &str, database_url: Option<String>) -> Api {
    Api::start_opts(ApiOptions {
        id: id.to_owned(),
        database_url,
        hosted: true,
        env: vec![("ANYCLOUD_TEST_PAUSE_AFTER_LAUNCH_MS".into(), PAUSE_AFTER_LAUNCH_MS.into())],
        ..ApiOptions::default()
    })
}

/// Saves a sim credential whose VMs boot in [`BOOT_MS`] (a knob the CLI does not expose, so
/// through the HTTP API), and waits until it is verified.
fn slow_sim_credential(api: &Api) {
    let body = json!({ "name": CREDENTIAL, "provider": "sim", "sim": { "boot_ms": BOOT_MS } });
    let answer = api.post_json("/v1/credentials", &body);
    assert!(answer.status == 200 || answer.status == 201 || answer.status == 202, "saving the credential: {answer:?}");
    assert_eq!(answer.json()["credential"]["public"]["sim"]["boot_ms"], BOOT_MS, "{answer:?}");
    wait_until(Duration::from_secs(20), "the sim credential to be verified", || {
        (api.credential(CREDENTIAL)["status"] == "valid").then_some(())
    });
}

/// A cluster being created: its name, id and `cluster.create` run.
struct Created {
    name: String,
    id: String,
    run: String,
}

/// `cluster create NAME` of 2 VMs, without `--wait`.
fn create(api: &Api, name: &str) -> Created {
    let out = api.cli(&[
        "--json",
        "cluster",
        "create",
        name,
        "--credentials",
        CREDENTIAL,
        "--region",
        "sim-east-1",
        "--vm-type",
        "sim.small",
        "--min-vms",
        "2",
        "--max-vms",
        "2",
    ]);
    out.expect_code(0);
    let created = out.json();
    assert_eq!(created["cluster"]["phase"], "creating", "{out}");
    Created {
        name: name.to_owned(),
        id: created["cluster"]["id"].as_str().unwrap().to_owned(),
        run: created["workflow_id"].as_str().unwrap().to_owned(),
    }
}

/// One row of the simulated cloud's `sim_vms`.
#[derive(Debug, Clone)]
struct ProviderVm {
    id: String,
    name: String,
    role: String,
    live: bool,
}

/// Every VM the provider ever launched for `cluster_id`, terminated or not.
fn provider_vms(api: &Api, cluster_id: &str) -> Vec<ProviderVm> {
    api.query_strings(
        "SELECT id || '|' || COALESCE(CAST(terminated_at AS TEXT), '-') || '|' || tags FROM sim_vms ORDER BY launched_at, id",
    )
    .into_iter()
    .filter_map(|row| {
        let mut parts = row.splitn(3, '|');
        let (id, terminated, tags) = (parts.next()?, parts.next()?, parts.next()?);
        let tags: BTreeMap<String, String> = serde_json::from_str(tags).unwrap();
        (tags.get("anycloud-cluster").map(String::as_str) == Some(cluster_id)).then(|| ProviderVm {
            id: id.to_owned(),
            name: tags.get("anycloud-vm").cloned().unwrap_or_default(),
            role: tags.get("anycloud-role").cloned().unwrap_or_default(),
            live: terminated == "-",
        })
    })
    .collect()
}

/// The provider's network rules of `cluster_id`: (id, live).
fn provider_networks(api: &Api, cluster_id: &str) -> Vec<(String, bool)> {
    api.query_strings(&format!(
        "SELECT id || '|' || COALESCE(CAST(deleted_at AS TEXT), '-') FROM sim_networks WHERE cluster = '{cluster_id}'"
    ))
    .into_iter()
    .map(|row| {
        let (id, deleted) = row.split_once('|').unwrap();
        (id.to_owned(), deleted == "-")
    })
    .collect()
}

/// The forward steps of `run` the engine has checkpointed.
fn checkpointed(api: &Api, run: &str) -> Vec<String> {
    api.query_strings(&format!(
        "SELECT name FROM engine_steps WHERE run_id = '{run}' AND phase = 'forward' ORDER BY idx"
    ))
}

/// `STATUS|CURRENT_STEP` of `run` in `engine_runs`.
fn run_state(api: &Api, run: &str) -> String {
    api.query_strings(&format!(
        "SELECT status || '|' || COALESCE(current_step, '') FROM engine_runs WHERE id = '{run}'"
    ))
    .pop()
    .unwrap_or_else(|| panic!("run {run} is not in engine_runs"))
}

/// Waits until the provider holds a live VM named `name` for the cluster while `step` is not
/// checkpointed, kills the API, and checks that the kill landed there: the VM exists and the
/// step has no checkpoint.
fn kill_between_launch_and_checkpoint(api: &mut Api, cluster: &Created, vm: &str, step: &str) {
    wait_until(STAGE, &format!("VM {vm} of cluster {} at the provider", cluster.name), || {
        provider_vms(api, &cluster.id).iter().any(|found| found.name == vm && found.live).then_some(())
    });
    let done = checkpointed(api, &cluster.run);
    assert!(
        !done.iter().any(|name| name == step),
        "`{step}` was checkpointed before the test saw VM {vm}: the seam's pause did not hold it ({done:?})"
    );
    api.kill();
    let done = checkpointed(api, &cluster.run);
    assert!(!done.iter().any(|name| name == step), "the kill did not land before `{step}`'s checkpoint: {done:?}");
    assert!(run_state(api, &cluster.run).ends_with(&format!("|{step}")), "{}", run_state(api, &cluster.run));
    let vms = provider_vms(api, &cluster.id);
    assert_eq!(vms.iter().filter(|found| found.name == vm).count(), 1, "VM {vm}: {vms:?}");
    eprintln!("killed the API after VM {vm} appeared, before `{step}`'s checkpoint");
}

/// The pids named by the `claimed` and `recovered` events of `events`, with the event's kind and step.
fn claims(events: &[Value]) -> Vec<(u32, String, String)> {
    events
        .iter()
        .filter(|event| event["kind"] == "claimed" || event["kind"] == "recovered")
        .map(|event| {
            let message = event["message"].as_str().unwrap();
            let pid = message.split("(pid ").nth(1).and_then(|rest| rest.split(')').next()).unwrap();
            (
                pid.parse().unwrap(),
                event["kind"].as_str().unwrap().to_owned(),
                event["step"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Waits for the cluster to be ready and checks it against the provider: three VMs ever
/// launched, all live, `cp`, `w0`, `w1` once each; one live network; anycloud's record names the
/// same VMs; every step the engine took back after a kill counts exactly one extra attempt per
/// recovery, and nothing was undone. Returns the run's timeline.
fn assert_ready_and_exact(api: &Api, cluster: &Created) -> Vec<Value> {
    api.cli(&["wait", &format!("cluster/{}", cluster.name), "--timeout", "2m"]).expect_code(0);
    let out = api.cli(&["--json", "cluster", "status", &cluster.name]);
    out.expect_code(0);
    let status = out.json();
    assert_eq!(status["cluster"]["phase"], "ready", "{out}");
    assert_eq!(status["running_vms"], 2, "{out}");
    assert_eq!(status["desired_vms"], 2, "{out}");

    let vms = provider_vms(api, &cluster.id);
    assert_eq!(vms.len(), 3, "the provider holds {} VM rows for {} (ever launched): {vms:#?}", vms.len(), cluster.name);
    assert!(vms.iter().all(|vm| vm.live), "a VM of {} was terminated: {vms:#?}", cluster.name);
    let mut names: Vec<&str> = vms.iter().map(|vm| vm.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["cp", "w0", "w1"], "{vms:#?}");
    for vm in &vms {
        let role = if vm.name == "cp" { "control-plane" } else { "worker" };
        assert_eq!(vm.role, role, "{vm:?}");
    }
    let networks = provider_networks(api, &cluster.id);
    assert_eq!(networks.iter().filter(|(_, live)| *live).count(), 1, "{networks:?}");
    assert_eq!(networks.len(), 1, "{networks:?}");
    assert_eq!(status["cluster"]["network_id"].as_str(), Some(networks[0].0.as_str()), "{out}");

    // anycloud's record knows exactly the provider's VMs: nothing orphaned on either side.
    let mut recorded: Vec<(String, String)> = status["vms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|vm| (vm["provider_id"].as_str().unwrap().to_owned(), vm["name"].as_str().unwrap().to_owned()))
        .collect();
    recorded.sort();
    let mut at_provider: Vec<(String, String)> = vms.iter().map(|vm| (vm.id.clone(), vm.name.clone())).collect();
    at_provider.sort();
    assert_eq!(recorded, at_provider, "{out}");
    assert!(status["vms"].as_array().unwrap().iter().all(|vm| vm["state"] == "running"), "{out}");

    let detail = api.inspect(&cluster.run, true);
    assert_eq!(detail["run"]["status"], "succeeded", "{detail:#}");
    let events = e2e::events(&detail);
    let steps = detail["steps"].as_array().unwrap();
    assert!(steps.iter().all(|step| step["phase"] == "forward"), "something was undone: {detail:#}");
    assert_eq!(steps.len(), 12, "{detail:#}");
    for step in steps {
        let name = step["name"].as_str().unwrap();
        let recoveries = events.iter().filter(|event| event["kind"] == "recovered" && event["step"] == name).count();
        assert_eq!(
            step["attempts"].as_u64(),
            Some(1 + recoveries as u64),
            "step `{name}` was taken back {recoveries} time(s) after a kill: {step:#}"
        );
    }
    events
}

/// `cluster delete --wait`, then nothing of the cluster is live at the provider and no VM was
/// launched by the deletion.
fn delete_and_assert_gone(api: &Api, cluster: &Created) {
    api.cli(&["cluster", "delete", &cluster.name, "--wait"]).expect_code(0);
    let vms = provider_vms(api, &cluster.id);
    assert_eq!(vms.len(), 3, "{vms:#?}");
    assert!(vms.iter().all(|vm| !vm.live), "VMs of {} left live at the provider: {vms:#?}", cluster.name);
    let networks = provider_networks(api, &cluster.id);
    assert!(networks.iter().all(|(_, live)| !live), "{networks:?}");
}

#[test]
fn sigkill_during_cluster_create_leaves_exactly_the_cluster() {
    let started = Instant::now();
    let mut api = start_api("cluster-crash", None);
    slow_sim_credential(&api);
    let a = create(&api, "crash-a");

    // 1. The control plane exists at the provider; its step is not checkpointed.
    kill_between_launch_and_checkpoint(&mut api, &a, "cp", "launch_control_plane");
    api.restart();

    // 2. The first worker exists; `launch_workers` is not checkpointed (nor is w1 launched).
    kill_between_launch_and_checkpoint(&mut api, &a, "w0", "launch_workers");
    assert!(!provider_vms(&api, &a.id).iter().any(|vm| vm.name == "w1"), "w1 was launched before the kill");
    api.restart();

    // 3. The run waits on `wait_for_nodes`: the workers are booting.
    wait_until(STAGE, "the run to wait on wait_for_nodes", || {
        (run_state(&api, &a.run) == "waiting|wait_for_nodes").then_some(())
    });
    api.kill();
    let done = checkpointed(&api, &a.run);
    assert!(!done.iter().any(|step| step == "wait_for_nodes"), "the kill came after wait_for_nodes: {done:?}");
    let vms = provider_vms(&api, &a.id);
    assert_eq!(vms.len(), 3, "the provider holds {} VM rows for crash-a (ever launched): {vms:#?}", vms.len());
    eprintln!("killed the API while the run waited on wait_for_nodes ({:?} in)", started.elapsed());
    api.restart();

    let events = assert_ready_and_exact(&api, &a);
    let pids = api.pids().to_vec();
    let taken = claims(&events);
    let by = |pid: u32| taken.iter().filter(|(by, _, _)| *by == pid).collect::<Vec<_>>();
    // Each incarnation took the run; the two killed inside a launch left it for the next to recover.
    assert!(!by(pids[0]).is_empty(), "{taken:?}");
    assert!(
        by(pids[1]).iter().any(|(_, kind, step)| kind == "recovered" && step == "launch_control_plane"),
        "incarnation 2 (pid {}) did not recover launch_control_plane: {taken:?}",
        pids[1]
    );
    assert!(
        by(pids[2]).iter().any(|(_, kind, step)| kind == "recovered" && step == "launch_workers"),
        "incarnation 3 (pid {}) did not recover launch_workers: {taken:?}",
        pids[2]
    );
    assert!(
        by(pids[3]).iter().any(|(_, _, step)| step == "wait_for_nodes"),
        "incarnation 4 (pid {}) did not take back wait_for_nodes: {taken:?}",
        pids[3]
    );
    let steps = api.inspect(&a.run, false)["steps"].as_array().cloned().unwrap();
    let attempts = |name: &str| steps.iter().find(|step| step["name"] == name).unwrap()["attempts"].as_u64();
    assert_eq!(attempts("launch_control_plane"), Some(2));
    assert_eq!(attempts("launch_workers"), Some(2));
    eprintln!("cluster crash-a ready and exact after 3 kills ({:?} in)", started.elapsed());

    // 4. A second cluster, killed at a random moment of its creation.
    let b = create(&api, "crash-b");
    let delay = Duration::from_millis(rand::rng().random_range(100..=7_000));
    std::thread::sleep(delay);
    let state = run_state(&api, &b.run);
    api.kill();
    eprintln!("killed the API {delay:?} into crash-b's creation (run was {state})");
    api.restart();
    let events = assert_ready_and_exact(&api, &b);
    let last = *api.pids().last().unwrap();
    if !state.starts_with("succeeded") {
        assert!(
            claims(&events).iter().any(|(pid, _, _)| *pid == last),
            "the last incarnation did not take back crash-b"
        );
    }

    // The first cluster was untouched by the second's kill.
    assert_ready_and_exact(&api, &a);

    delete_and_assert_gone(&api, &a);
    delete_and_assert_gone(&api, &b);
    eprintln!("done in {:?}", started.elapsed());
}

#[test]
fn postgres_sigkill_between_control_plane_launch_and_checkpoint() {
    let started = Instant::now();
    let db = PgDatabase::create();
    let mut api = start_api("cluster-crash-pg", Some(db.url.clone()));
    slow_sim_credential(&api);
    let a = create(&api, "crash-pg");
    kill_between_launch_and_checkpoint(&mut api, &a, "cp", "launch_control_plane");
    api.restart();
    let events = assert_ready_and_exact(&api, &a);
    let claims = claims(&events);
    assert!(
        claims
            .iter()
            .any(|(pid, kind, step)| *pid == api.pids()[1] && kind == "recovered" && step == "launch_control_plane"),
        "{claims:?}"
    );
    delete_and_assert_gone(&api, &a);
    drop(api);
    eprintln!("done in {:?}", started.elapsed());
}

/// A second API (another id) on the same data directory and database: an operator's cancel
/// through it reaches the run's driver only at its next heartbeat.
struct SecondApi {
    child: std::process::Child,
    url: String,
}

impl SecondApi {
    fn start(api: &Api, id: &str) -> Self {
        let stdout = api.scratch().join(format!("{id}.stdout"));
        let mut command = api.command();
        command
            .args(["api", "serve", "--id", id, "--port", "0", "--hosted-by", "sim", "--data-dir"])
            .arg(api.data_dir())
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(api.scratch().join(format!("{id}.stderr"))).unwrap());
        let child = command.spawn().unwrap();
        let url = wait_until(STAGE, "the second API to listen", || {
            let text = std::fs::read_to_string(&stdout).unwrap_or_default();
            let line = text.lines().find(|line| line.contains("listening on "))?;
            Some(line.split("listening on ").nth(1)?.split_whitespace().next()?.to_owned())
        });
        Self { child, url }
    }
}

impl Drop for SecondApi {
    fn drop(&mut self) {
        e2e::send_sigterm(self.child.id());
        let _ = self.child.wait();
    }
}

#[test]
fn a_cancel_then_a_sigkill_before_the_checkpoint_undoes_the_cut_short_launch() {
    let started = Instant::now();
    let mut api = start_api("cancel-crash", None);
    slow_sim_credential(&api);
    let cluster = create(&api, "cancel-crash");
    let other = SecondApi::start(&api, "cancel-crash-operator");

    // The control plane exists at the provider; the seam holds its step before the checkpoint.
    wait_until(STAGE, "VM cp at the provider", || {
        provider_vms(&api, &cluster.id).iter().any(|vm| vm.name == "cp" && vm.live).then_some(())
    });
    let token = format!("Bearer {}", api.token());
    let path = format!("/v1/workflows/{}/cancel", cluster.run);
    let answer = e2e::http(&other.url, "POST", &path, &[("Authorization", &token)], b"");
    assert_eq!(answer.status, 200, "{answer:?}");
    api.kill();
    assert!(
        !checkpointed(&api, &cluster.run).iter().any(|step| step == "launch_control_plane"),
        "the kill came after the launch's checkpoint"
    );
    let unwinding = api.query_strings(&format!(
        "SELECT message FROM engine_events WHERE run_id = '{}' AND kind = 'unwinding'",
        cluster.run
    ));
    assert!(unwinding.is_empty(), "the killed API had already turned the run back: {unwinding:?}");
    drop(other);

    api.restart();
    let detail = wait_until(STAGE, "the run to end cancelled", || {
        let detail = api.inspect(&cluster.run, true);
        (detail["run"]["status"] == "cancelled").then_some(detail)
    });
    let events = e2e::events(&detail);
    let recovered = events.iter().find(|event| event["kind"] == "recovered").unwrap_or_else(|| panic!("{detail:#}"));
    assert!(
        recovered["message"].as_str().unwrap().contains("of step `launch_control_plane` ended without a checkpoint"),
        "{recovered:#}"
    );
    assert!(events.iter().all(|event| !event["message"].as_str().unwrap().contains("runs again")), "{detail:#}");
    let unwinding = events.iter().find(|event| event["kind"] == "unwinding").unwrap_or_else(|| panic!("{detail:#}"));
    assert!(
        unwinding["message"].as_str().unwrap().contains("undoing step `launch_control_plane` first"),
        "{unwinding:#}"
    );
    let undone = e2e::undone_steps(&detail);
    assert_eq!(undone[0], "launch_control_plane", "the cut-short launch is undone first: {detail:#}");

    // Nothing of the cluster is left at the provider, and the record says why it failed.
    let vms = provider_vms(&api, &cluster.id);
    assert!(vms.iter().all(|vm| !vm.live), "{vms:#?}");
    assert!(provider_networks(&api, &cluster.id).iter().all(|(_, live)| !live));
    let reserved = api
        .query_strings(&format!("SELECT id FROM sim_addresses WHERE owner = '{}' AND released_at IS NULL", cluster.id));
    assert!(reserved.is_empty(), "the control plane's reserved address is released: {reserved:?}");
    let out = api.cli(&["--json", "cluster", "status", &cluster.name]);
    out.expect_code(0);
    let status = out.json();
    assert_eq!(status["cluster"]["phase"], "failed", "{out}");
    assert!(status["cluster"]["reason"].as_str().unwrap().contains("creation was cancelled"), "{out}");
    api.cli(&["cluster", "delete", &cluster.name, "--wait"]).expect_code(0);
    eprintln!("done in {:?}", started.elapsed());
}
