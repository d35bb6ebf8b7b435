//! The kubelet of every simulated node, one pass over one Pod:
//!
//! 1. A Pod being deleted: its containers' process groups get SIGTERM, then SIGKILL once its
//!    grace period is over; when none runs, the Pod, its records and its directory go. A
//!    container with a `lifecycle.preStop.sleep` hook gets its SIGTERM only once that many
//!    seconds have passed since the deletion (within the grace period), as the kubelet runs the
//!    hook before it signals ("Container hooks", "Termination of Pods"): the time a Service's
//!    proxies take to stop sending new connections to a Pod that is going away.
//! 2. A scheduled Pod's containers start: first its image is "pulled" ([`super::images`]: an
//!    image on a private registry host needs a registry secret among the Pod's
//!    `imagePullSecrets`, else the container waits in `ErrImagePull` / `ImagePullBackOff`), then
//!    its environment is made ([`super::container_env`]: `env`, `envFrom` and `secretKeyRef` from
//!    the Pod's namespace's Secrets; a missing Secret or key leaves it waiting with reason
//!    `CreateContainerConfigError`, message `secret "NAME" not found` or `couldn't find key KEY in
//!    Secret NS/NAME`, and a Warning `Failed` event `Error: ...`), and each pass tries again
//!    until it can. Then its `command` + `args` runs as a local process (see [`super::process`])
//!    in the Pod's scratch directory `{kubelet dir}/{pod uid}/`. A command that cannot be found
//!    ends the container `terminated` with reason `StartError` and exit code 128, as containerd
//!    reports it.
//! 3. Its containers' states follow their processes: `waiting` (`ContainerCreating`), `running`
//!    (`startedAt`), `terminated` (`exitCode`, `Completed` or `Error`, `startedAt`,
//!    `finishedAt`), and its phase follows them: `Pending`, `Running`, then `Succeeded` when every
//!    container exited 0, else `Failed`.
//! 4. With `restartPolicy: Always` (a Deployment's Pods) a container whose process exits is
//!    restarted: its exit goes to `lastState.terminated`, `restartCount` grows, and it waits in
//!    `waiting` with reason `CrashLoopBackOff` for its back-off, as the kubelet's: the first
//!    restart at once, then 10 s doubling to 5 min. Its log file goes on (`logs --previous` is
//!    not simulated). With `Never` and `OnFailure` (Jobs' Pods) a container is never restarted.
//! 5. A running container is ready as [`super::probes`] says; the Pod is `Ready` when all are
//!    (else `ContainersNotReady`, `containers with unready status: [NAME]`). A failed readiness
//!    check is a Warning `Unhealthy` event (`Readiness probe failed: dial tcp IP:PORT: connect:
//!    connection refused`), counted again once per `periodSeconds` (10 s by default) while it
//!    fails, as the prober reports each failed probe.
//!    Each Pod has its own loopback address and host ports (see [`super::network`]).
//!
//! Nothing is pulled: a container's image is recorded (`imageID: sim://not-pulled/{image}`)
//! and its `Pulled` event says so.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde_json::{Value, json};

use super::events::{self, Note, Severity};
use super::exits::{Exit, Exits};
use super::probes::Readiness;
use super::process::{self, ContainerFiles, Probe};
use super::resources::PODS;
use super::status::ApiError;
use super::{Kube, container_env, images, network, probes, time};

/// The kubelets' shared directory, the Pods this process has sent SIGTERM, the image pulls
/// that failed, the Pods a pass holds now, and the containers' exits not yet recorded.
pub(crate) struct Kubelet {
    dir: PathBuf,
    terminated: Mutex<HashSet<String>>,
    pub(crate) pulls: images::Pulls,
    held: Mutex<HashSet<String>>,
    pub(crate) exits: Exits,
}

/// Whether a pass over a Pod ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Synced {
    Done,
    /// Another pass holds the Pod now (the loop's, or one for an exit): nothing was done.
    Busy,
}

/// A Pod that one pass holds: no other starts, stops or records its containers meanwhile (the
/// kubelet's one worker per Pod).
pub(crate) struct Held<'a> {
    kubelet: &'a Kubelet,
    uid: String,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.kubelet.held.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.uid);
    }
}

/// What a kubelet knows of its cluster on a pass.
pub(crate) struct Node<'a> {
    /// The cluster (its control plane's VM id).
    pub(crate) cluster: &'a str,
    /// The registry hosts whose images need a pull secret.
    pub(crate) private_registries: &'a [String],
}

/// The waiting reasons of a container that has not started yet and that the kubelet tries to
/// start again on each pass.
const NOT_STARTED: [&str; 3] = ["ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError"];

impl Kubelet {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            terminated: Mutex::new(HashSet::new()),
            pulls: images::Pulls::default(),
            held: Mutex::new(HashSet::new()),
            exits: Exits::new(),
        }
    }

    /// Holds the Pod for one pass, unless another pass holds it.
    pub(crate) fn hold(&self, uid: &str) -> Option<Held<'_>> {
        let fresh = self.held.lock().unwrap_or_else(PoisonError::into_inner).insert(uid.to_owned());
        fresh.then(|| Held { kubelet: self, uid: uid.to_owned() })
    }

    /// A Pod's scratch directory (its containers' working directory).
    pub(crate) fn pod_dir(&self, pod_uid: &str) -> PathBuf {
        self.dir.join(pod_uid)
    }

    /// The files of a Pod's container.
    pub(crate) fn files(&self, pod_uid: &str, container: &str) -> ContainerFiles {
        ContainerFiles::new(&self.pod_dir(pod_uid), container)
    }
}

/// One container's `command` followed by its `args`.
fn argv(container: &Value) -> Vec<String> {
    ["command", "args"]
        .iter()
        .flat_map(|field| container[*field].as_array().cloned().unwrap_or_default())
        .filter_map(|part| part.as_str().map(str::to_owned))
        .collect()
}

/// Reconciles one Pod with its processes, unless another pass holds it now.
pub(crate) async fn sync(kube: &Kube, node: &Node<'_>, pod: Value) -> Result<Synced, ApiError> {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
    let Some(_held) = kube.kubelet.hold(&uid) else { return Ok(Synced::Busy) };
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        finish_deletion(kube, node.cluster, &uid, pod).await?;
    } else if pod["spec"]["nodeName"].is_string()
        && !matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
    {
        run(kube, node, &uid, pod).await?;
    }
    Ok(Synced::Done)
}

/// A scheduled Pod that has not ended: its containers start, run, end or restart.
async fn run(kube: &Kube, node: &Node<'_>, uid: &str, pod: Value) -> Result<(), ApiError> {
    let cluster = node.cluster;
    let pod = if network::needs_setup(&pod) {
        match network::setup(kube, cluster, &pod).await? {
            Some(written) => written,
            None => return Ok(()),
        }
    } else {
        pod
    };
    let pod_dir = kube.kubelet.pod_dir(uid);
    let containers = pod["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let previous = pod["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
    let restarts = pod["spec"]["restartPolicy"] == "Always";
    let mut statuses = Vec::new();
    let mut notes = Vec::new();
    let mut unhealthy = Vec::new();
    for container in &containers {
        let name = container["name"].as_str().unwrap_or_default();
        let before = previous.iter().find(|s| s["name"] == name).cloned().unwrap_or(Value::Null);
        let mut last_state = before.get("lastState").cloned().unwrap_or_else(|| json!({}));
        let mut restart_count = before["restartCount"].as_i64().unwrap_or(0);
        let mut state = match before.get("state") {
            Some(state) if state.get("terminated").is_some() => state.clone(),
            Some(state) if state["waiting"]["reason"] == "CrashLoopBackOff" => {
                let finished = time::seconds(&last_state["terminated"]["finishedAt"]).unwrap_or(0);
                if time::now_seconds() >= finished + back_off(restart_count) {
                    kube.kubelet.files(uid, name).clear();
                    start(kube, node, uid, &pod_dir, &pod, container, &mut notes).await?
                } else {
                    state.clone()
                }
            }
            // Not started yet (its image, or its environment, was not there): try again, unless
            // a start whose status was never written left its process.
            Some(state)
                if state["waiting"]["reason"].as_str().is_some_and(|reason| NOT_STARTED.contains(&reason))
                    && kube.kubelet.files(uid, name).started().is_none() =>
            {
                start(kube, node, uid, &pod_dir, &pod, container, &mut notes).await?
            }
            _ => container_state(kube, node, uid, &pod_dir, &pod, container, &mut notes).await?,
        };
        if restarts && before["state"].get("terminated").is_none() && state.get("terminated").is_some() {
            last_state = state.clone();
            restart_count += 1;
            let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
            let message = format!(
                "back-off {}s restarting failed container={name} pod={pod_name}_{}({uid})",
                back_off(restart_count).max(10),
                pod["metadata"]["namespace"].as_str().unwrap_or_default(),
            );
            notes.push(Note {
                severity: Severity::Warning,
                component: "kubelet",
                reason: "BackOff",
                message: format!("Back-off restarting failed container {name} in pod {pod_name}"),
            });
            state = if back_off(restart_count) == 0 {
                kube.kubelet.files(uid, name).clear();
                start(kube, node, uid, &pod_dir, &pod, container, &mut notes).await?
            } else {
                json!({ "waiting": { "reason": "CrashLoopBackOff", "message": message } })
            };
        }
        let ready = match time::seconds(&state["running"]["startedAt"]) {
            Some(started) => match probes::ready(&pod, container, started).await {
                Readiness::Ready => true,
                Readiness::Waiting => false,
                Readiness::Failed(output) => {
                    let period = container["readinessProbe"]["periodSeconds"].as_i64().unwrap_or(10).max(1);
                    unhealthy.push((format!("Readiness probe failed: {output}"), period));
                    false
                }
            },
            None => false,
        };
        statuses.push(container_status(uid, container, state, last_state, restart_count, ready));
    }
    let mut next = pod.clone();
    next["status"] = pod_status(&pod, &statuses);
    let written = if next == pod {
        Some(pod)
    } else {
        let written = kube.store.update(cluster, &PODS, next).await?;
        if let Some(written) = &written {
            for note in notes {
                events::record(kube, cluster, &PODS, written, note).await;
            }
        }
        written
    };
    // A probe's failure is reported whether or not the Pod changed: once per probe period.
    if let Some(written) = written {
        for (message, period) in unhealthy {
            let note = Note { severity: Severity::Warning, component: "kubelet", reason: "Unhealthy", message };
            events::record_every(kube, cluster, &PODS, &written, note, period).await;
        }
    }
    Ok(())
}

/// How long a container that has restarted `restarts` times waits before its next start: none
/// before the first restart, then 10 s doubling to 5 min, as the kubelet's back-off.
fn back_off(restarts: i64) -> i64 {
    if restarts <= 1 { 0 } else { (10i64 << (restarts - 2).min(5)).min(300) }
}

/// The state of a container that has not terminated yet: started now if it was not, else as
/// its process stands.
async fn container_state(
    kube: &Kube,
    node: &Node<'_>,
    uid: &str,
    pod_dir: &Path,
    pod: &Value,
    container: &Value,
    notes: &mut Vec<Note<'static>>,
) -> Result<Value, ApiError> {
    let name = container["name"].as_str().unwrap_or_default();
    let files = kube.kubelet.files(uid, name);
    let record = match kube.store.process(uid, name).await? {
        Some(record) => Some(record),
        // An API that died between starting the process and recording it left its pid file.
        None => match files.started() {
            Some(found) => {
                kube.store.record_process(uid, name, found).await?;
                Some(found)
            }
            // It died before even that: the wrapper is starting; look again next pass.
            None if files.log().exists() => return Ok(json!({ "waiting": { "reason": "ContainerCreating" } })),
            None => None,
        },
    };
    let Some(record) = record else {
        return start(kube, node, uid, pod_dir, pod, container, notes).await;
    };
    let started = pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|statuses| statuses.iter().find(|s| s["name"] == name))
        .and_then(|s| s["state"]["running"]["startedAt"].as_str().map(str::to_owned))
        .unwrap_or_else(time::now);
    Ok(match process::probe(record, &files) {
        Probe::Running => json!({ "running": { "startedAt": started } }),
        Probe::Exited(code) => terminated(code, None, &started),
        Probe::Vanished => {
            terminated(137, Some("the container's process ended without an exit code (killed)"), &started)
        }
    })
}

fn terminated(code: i32, message: Option<&str>, started: &str) -> Value {
    let mut state = json!({
        "exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" },
        "startedAt": started, "finishedAt": time::now(),
    });
    if let Some(message) = message {
        state["message"] = json!(message);
    }
    json!({ "terminated": state })
}

/// Starts a container's process (or fails to, as containerd would): pulls its image, makes its
/// environment, then runs its command. A container whose image or environment is not there
/// yet is left waiting (`ErrImagePull`, `ImagePullBackOff`, `CreateContainerConfigError`).
async fn start(
    kube: &Kube,
    node: &Node<'_>,
    uid: &str,
    pod_dir: &Path,
    pod: &Value,
    container: &Value,
    notes: &mut Vec<Note<'static>>,
) -> Result<Value, ApiError> {
    let name = container["name"].as_str().unwrap_or_default();
    let image = container["image"].as_str().unwrap_or_default();
    if let Some(waiting) = images::pull(kube, node.cluster, node.private_registries, pod, container, notes).await? {
        return Ok(waiting);
    }
    notes.push(Note {
        severity: Severity::Normal,
        component: "kubelet",
        reason: "Pulled",
        message: format!(
            "Container image \"{image}\" not pulled: the simulated cluster runs the container's command as a local \
             process on the API's host (no image, no isolation, resources not enforced)"
        ),
    });
    let env = match container_env::environment(kube, node.cluster, pod, container).await {
        Ok(env) => env,
        Err(message) => {
            notes.push(Note {
                severity: Severity::Warning,
                component: "kubelet",
                reason: "Failed",
                message: format!("Error: {message}"),
            });
            return Ok(json!({ "waiting": { "reason": "CreateContainerConfigError", "message": message } }));
        }
    };
    let argv = argv(container);
    let path = env.iter().find(|(key, _)| key == "PATH").map(|(_, value)| value.as_str()).unwrap_or_default();
    let now = time::now();
    let command = argv.first().map(String::as_str).unwrap_or_default();
    let files = kube.kubelet.files(uid, name);
    // A closed directory (its owner ended) gets no new Pod directory: the spawn below refuses too.
    let made = if process::closed(pod_dir) {
        Err(std::io::Error::other("the simulated Kubernetes that owns it has ended"))
    } else {
        std::fs::create_dir_all(pod_dir)
    };
    let cannot = match made {
        Err(err) => Some(format!("creating the Pod's directory {}: {err}", pod_dir.display())),
        Ok(()) => process::cannot_start(pod_dir, command, path),
    };
    let spawned = match cannot {
        Some(message) => Err(message),
        None => {
            let on_exit = kube.kubelet.exits.reporter(Exit {
                cluster: node.cluster.to_owned(),
                namespace: pod["metadata"]["namespace"].as_str().unwrap_or_default().to_owned(),
                name: pod["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                uid: uid.to_owned(),
            });
            process::spawn(pod_dir, &files, &argv, &env, on_exit).map_err(|err| format!("starting {command}: {err}"))
        }
    };
    match spawned {
        Ok(record) => {
            kube.store.record_process(uid, name, record).await?;
            notes.push(Note {
                severity: Severity::Normal,
                component: "kubelet",
                reason: "Created",
                message: format!("Created container: {name}"),
            });
            notes.push(Note {
                severity: Severity::Normal,
                component: "kubelet",
                reason: "Started",
                message: format!("Started container {name}"),
            });
            Ok(json!({ "running": { "startedAt": now } }))
        }
        Err(message) => {
            notes.push(Note {
                severity: Severity::Warning,
                component: "kubelet",
                reason: "Failed",
                message: message.clone(),
            });
            Ok(json!({ "terminated": {
                "exitCode": 128, "reason": "StartError", "message": message, "startedAt": "1970-01-01T00:00:00Z",
                "finishedAt": now,
            } }))
        }
    }
}

fn container_status(
    uid: &str,
    container: &Value,
    state: Value,
    last_state: Value,
    restart_count: i64,
    ready: bool,
) -> Value {
    let name = container["name"].as_str().unwrap_or_default();
    let image = container["image"].as_str().unwrap_or_default();
    let running = state.get("running").is_some();
    let started = running || state.get("terminated").is_some_and(|t| t["reason"] != "StartError");
    json!({
        "name": name, "state": state, "lastState": last_state, "ready": ready, "restartCount": restart_count,
        "image": image, "imageID": format!("sim://not-pulled/{image}"),
        "containerID": format!("sim://{uid}/{name}"), "started": started,
    })
}

/// The Pod's status from its containers'.
fn pod_status(pod: &Value, statuses: &[Value]) -> Value {
    let status = &pod["status"];
    let terminated: Vec<&Value> = statuses.iter().filter_map(|s| s["state"].get("terminated")).collect();
    let all_ended = !statuses.is_empty() && terminated.len() == statuses.len();
    let phase = if all_ended {
        if terminated.iter().all(|t| t["exitCode"] == 0) { "Succeeded" } else { "Failed" }
    } else if statuses
        .iter()
        .any(|s| s["state"].get("running").is_some() || s["restartCount"].as_i64().unwrap_or(0) > 0)
        || !terminated.is_empty()
    {
        "Running"
    } else {
        "Pending"
    };
    let all_ready = statuses.iter().all(|s| s["ready"] == true);
    let now = time::now();
    let since = |kind: &str, value: &str| {
        status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == kind && c["status"] == value))
            .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_owned))
            .unwrap_or_else(|| now.clone())
    };
    let unready: Vec<&str> =
        statuses.iter().filter(|s| s["ready"] != true).filter_map(|s| s["name"].as_str()).collect();
    let not_ready_message = format!("containers with unready status: [{}]", unready.join(" "));
    let condition = |kind: &str, on: bool, reason: Option<&str>| {
        let value = if on { "True" } else { "False" };
        let mut condition =
            json!({ "type": kind, "status": value, "lastProbeTime": null, "lastTransitionTime": since(kind, value) });
        if let Some(reason) = reason.filter(|_| !on) {
            condition["reason"] = json!(reason);
            if reason == "ContainersNotReady" {
                condition["message"] = json!(not_ready_message);
            }
        }
        condition
    };
    let not_ready_reason = match phase {
        "Succeeded" => "PodCompleted",
        "Failed" => "PodFailed",
        _ => "ContainersNotReady",
    };
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let pod_ip = network::pod_ip(uid);
    let mut next = json!({
        "phase": phase,
        "conditions": [
            condition("PodReadyToStartContainers", phase != "Succeeded" && phase != "Failed", None),
            condition("Initialized", true, None),
            condition("Ready", all_ready, Some(not_ready_reason)),
            condition("ContainersReady", all_ready, Some(not_ready_reason)),
            condition("PodScheduled", true, None),
        ],
        "hostIP": status["hostIP"], "hostIPs": status["hostIPs"],
        "podIP": pod_ip, "podIPs": [{ "ip": pod_ip }],
        "startTime": status.get("startTime").filter(|t| !t.is_null()).cloned().unwrap_or_else(|| json!(now)),
        "containerStatuses": statuses,
        "qosClass": status.get("qosClass").cloned().unwrap_or_else(|| json!("BestEffort")),
    });
    if let Some(observed) = pod["metadata"].get("generation") {
        next["observedGeneration"] = observed.clone();
    }
    next
}

/// Whether a container's `lifecycle.preStop.sleep` (none: at once) is over for a Pod deleted at
/// `since` (whole seconds, so it waits until a whole `seconds` more has passed for sure).
fn pre_stop_over(container: &Value, since: i64) -> bool {
    match container["lifecycle"]["preStop"]["sleep"]["seconds"].as_i64() {
        Some(seconds) if seconds > 0 => time::now_seconds() > since + seconds,
        _ => true,
    }
}

/// Ends a Pod being deleted: signals while its processes run, removes it when none does.
async fn finish_deletion(kube: &Kube, cluster: &str, uid: &str, pod: Value) -> Result<(), ApiError> {
    let grace = pod["metadata"]["deletionGracePeriodSeconds"].as_i64().unwrap_or(30);
    let since = time::seconds(&pod["metadata"]["deletionTimestamp"]).unwrap_or_else(time::now_seconds);
    let kill = time::now_seconds() >= since + grace;
    let mut running = false;
    for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let name = container["name"].as_str().unwrap_or_default();
        let files = kube.kubelet.files(uid, name);
        let Some(record) = kube.store.process(uid, name).await?.or_else(|| files.started()) else { continue };
        if !process::alive(record) {
            continue;
        }
        running = true;
        if kill {
            process::signal_group(record, true);
        } else if pre_stop_over(container, since) {
            let first_term =
                kube.kubelet.terminated.lock().map(|mut sent| sent.insert(format!("{uid}/{name}"))).unwrap_or(true);
            if first_term {
                process::signal_group(record, false);
            }
        }
    }
    if running {
        return Ok(());
    }
    if kube.store.remove(cluster, &PODS, &pod).await? {
        kube.store.forget_processes(uid).await?;
        kube.kubelet.pulls.forget(uid);
        if let Ok(mut sent) = kube.kubelet.terminated.lock() {
            sent.retain(|key| !key.starts_with(uid));
        }
        let dir = kube.kubelet.pod_dir(uid);
        if let Err(err) = std::fs::remove_dir_all(&dir)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(pod_dir = %dir.display(), error = %err, "simulated kubelet: removing a deleted Pod's directory");
        }
    }
    Ok(())
}
