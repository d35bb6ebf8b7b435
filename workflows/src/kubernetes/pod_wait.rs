//! Why a workload's Pod is not running, or runs and is not ready, in Kubernetes' own words and
//! with the next thing to do: what `kubectl describe pod` would show a person who knows where to
//! look. The job's and the service's state lines, their `--wait` followers and their records'
//! reasons say it while they wait, instead of only "waiting".
//!
//! The signals, from the Pod and its `Warning` events (the shapes of a real kubelet and
//! scheduler, which the simulated cloud reproduces):
//! - not scheduled: condition `PodScheduled` `False` reason `Unschedulable` (or a
//!   `FailedScheduling` event) and its message (`0/3 nodes are available: 2 Insufficient cpu.`);
//!   one that asks for more CPU or memory than any schedulable node can give can never be
//!   scheduled ([`beyond_every_node`]);
//! - an image that cannot be pulled: the container waits `ErrImagePull`, then `ImagePullBackOff`
//!   once the kubelet backs off (its `Failed` event says why: not found, unauthorized);
//!   `InvalidImageName`;
//! - a container that cannot be created: `CreateContainerConfigError` (a Secret or a key it
//!   takes is missing), `CreateContainerError`;
//! - restarts: `restartCount` and `lastState.terminated` (exit code, `OOMKilled`),
//!   `CrashLoopBackOff`;
//! - a running container that is not ready: the readiness probe's `Unhealthy` events
//!   (`Readiness probe failed: dial tcp 10.42.0.7:8080: connect: connection refused`).
//!
//! [`explain`] is pure (recorded Pod and Event JSON in, words out); [`explain_live`] reads them.

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Event, Node, Pod, Toleration};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams};

use crate::kubernetes;
use crate::kubernetes::CONTAINER;
use crate::kubernetes::client::KubeError;

/// The workload whose Pod waits, as the words about it need it.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    /// Its name, as `anycloud` commands take it.
    pub name: &'a str,
    /// Its image reference.
    pub image: &'a str,
    /// A service's `$PORT`; `None` for a job.
    pub port: Option<i64>,
    /// What to run once the cause is fixed (`anycloud resubmit NAME`), in backquotes.
    pub again: String,
}

/// Whether Kubernetes can get past what the Pod waits for by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It may still start or become ready: waiting goes on.
    Waits,
    /// It cannot: the kubelet has backed off pulling its image (`ImagePullBackOff`), or the
    /// image's name is invalid. The workload ends with the reason.
    CannotStart,
    /// It asks for more CPU or memory than any node of the cluster can give: the workload is
    /// invalid as given.
    TooLarge,
}

/// Why a Pod waits, and whether it may still get past it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodWait {
    /// What Kubernetes says, and what to do.
    pub why: String,
    /// Whether to keep waiting.
    pub verdict: Verdict,
}

impl PodWait {
    fn waits(why: String) -> Self {
        Self { why, verdict: Verdict::Waits }
    }
}

/// Reads the Pod's events (and, for a Pod that cannot be scheduled, the nodes) and says why it
/// waits; `None` when it runs and is ready, has ended, or is being deleted.
pub async fn explain_live(
    client: &kube::Client,
    pod: &Pod,
    subject: &Subject<'_>,
) -> Result<Option<PodWait>, KubeError> {
    if !waits(pod) {
        return Ok(None);
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let selector = format!("involvedObject.kind=Pod,involvedObject.name={name}");
    let events = events.list(&ListParams::default().fields(&selector)).await?.items;
    if unscheduled(pod) {
        let nodes: Api<Node> = Api::all(client.clone());
        let nodes = nodes.list(&ListParams::default()).await?.items;
        if let Some(why) = beyond_every_node(pod, &nodes) {
            return Ok(Some(PodWait { why, verdict: Verdict::TooLarge }));
        }
    }
    Ok(explain(pod, &events, subject))
}

/// Whether the Pod has something to explain: it is not being deleted, has not ended, and is not
/// running ready.
fn waits(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let phase = pod.status.as_ref().and_then(|status| status.phase.as_deref()).unwrap_or("Pending");
    if matches!(phase, "Succeeded" | "Failed") {
        return false;
    }
    !container_status(pod)
        .is_some_and(|status| status.ready && status.state.as_ref().is_some_and(|s| s.running.is_some()))
}

fn unscheduled(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()).is_none_or(str::is_empty)
}

fn container_status(pod: &Pod) -> Option<&ContainerStatus> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find(|status| status.name == CONTAINER)
}

fn container(pod: &Pod) -> Option<&Container> {
    pod.spec.as_ref()?.containers.iter().find(|container| container.name == CONTAINER)
}

/// Says why the Pod waits, from the Pod and its events; `None` when it runs and is ready, has
/// ended, or is being deleted.
pub fn explain(pod: &Pod, events: &[Event], subject: &Subject<'_>) -> Option<PodWait> {
    if !waits(pod) {
        return None;
    }
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let events = Events { pod, all: events };
    if unscheduled(pod) {
        return Some(PodWait::waits(unschedulable(pod, name, &events)));
    }
    let node = pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()).unwrap_or("?");
    let Some(status) = container_status(pod) else {
        return Some(PodWait::waits(format!("Pod {name} is on node {node}; its container is being created")));
    };
    let state = status.state.as_ref();
    if let Some(waiting) = state.and_then(|state| state.waiting.as_ref()) {
        let reason = waiting.reason.as_deref().unwrap_or("Waiting");
        let message = waiting.message.as_deref().filter(|message| !message.is_empty());
        return Some(match reason {
            "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" => {
                let cause = events.pull_failure().or(message);
                let verdict = if reason == "ErrImagePull" { Verdict::Waits } else { Verdict::CannotStart };
                PodWait { why: pull_failure(pod, reason, cause, subject), verdict }
            }
            "CreateContainerConfigError" | "CreateContainerError" => PodWait::waits(format!(
                "the container of Pod {name} cannot be created ({reason}: {}); the kubelet tries again{}",
                message.or(events.latest_warning(&["Failed"])).unwrap_or("no message"),
                config_advice(message.unwrap_or_default())
            )),
            "CrashLoopBackOff" => PodWait::waits(
                restarts(pod, status, subject)
                    .unwrap_or_else(|| format!("the container of Pod {name} waits to be restarted (CrashLoopBackOff)")),
            ),
            _ => {
                let warning = events.latest_warning(&[]);
                let detail = message.or(warning).map(|text| format!(": {text}")).unwrap_or_default();
                PodWait::waits(format!("Pod {name} is on node {node}; its container waits ({reason}{detail})"))
            }
        });
    }
    if state.is_some_and(|state| state.running.is_some()) {
        let probe = events.latest_probe_failure().map(|message| probe_failure(pod, name, message, subject));
        let restarted = restarts(pod, status, subject);
        let why = match (probe, restarted) {
            (Some(probe), Some(restarted)) => format!("{probe}; {restarted}"),
            (Some(probe), None) => probe,
            (None, Some(restarted)) => restarted,
            (None, None) => match readiness_port(pod) {
                Some(port) => format!("Pod {name} runs; its readiness probe (TCP port {port}) has not passed yet"),
                None => format!("Pod {name} runs and is not ready yet"),
            },
        };
        return Some(PodWait::waits(why));
    }
    None
}

/// The Pod's events, newest first as asked.
struct Events<'a> {
    pod: &'a Pod,
    all: &'a [Event],
}

impl<'a> Events<'a> {
    /// The Pod's events of type Warning (of one of `reasons`, when given), newest first.
    fn warnings(&self, reasons: &[&str]) -> Vec<&'a Event> {
        let uid = self.pod.metadata.uid.as_deref();
        let name = self.pod.metadata.name.as_deref();
        let mut found: Vec<&Event> = self
            .all
            .iter()
            .filter(|event| {
                let object = &event.involved_object;
                let same = match (object.uid.as_deref(), uid) {
                    (Some(theirs), Some(ours)) => theirs == ours,
                    _ => object.name.as_deref() == name,
                };
                same && event.type_.as_deref() == Some("Warning")
                    && (reasons.is_empty() || event.reason.as_deref().is_some_and(|reason| reasons.contains(&reason)))
            })
            .collect();
        found.sort_by_key(|event| std::cmp::Reverse(when(event)));
        found
    }

    fn latest_warning(&self, reasons: &[&str]) -> Option<&'a str> {
        self.warnings(reasons).into_iter().find_map(|event| event.message.as_deref())
    }

    /// Why the latest pull failed, from its `Failed` event (`Failed to pull image "I": CAUSE`),
    /// without the image named again; not the kubelet's `Error: ErrImagePull` that follows it.
    fn pull_failure(&self) -> Option<&'a str> {
        let message = self
            .warnings(&["Failed"])
            .into_iter()
            .filter_map(|event| event.message.as_deref())
            .find(|message| message.starts_with("Failed to pull image"))?;
        Some(message.split_once("\": ").map_or(message, |(_, cause)| cause))
    }

    /// The message of the latest readiness probe failure (`Readiness probe failed: ...`).
    fn latest_probe_failure(&self) -> Option<&'a str> {
        self.warnings(&["Unhealthy"])
            .into_iter()
            .filter_map(|event| event.message.as_deref())
            .find(|message| message.starts_with("Readiness probe"))
    }
}

/// When the event last happened, in ms since the epoch (0 when it does not say).
fn when(event: &Event) -> i64 {
    event
        .last_timestamp
        .as_ref()
        .map(|time| time.0.as_millisecond())
        .or_else(|| event.event_time.as_ref().map(|time| time.0.as_millisecond()))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|time| time.0.as_millisecond()))
        .unwrap_or(0)
}

/// A Pod the scheduler has not placed: the scheduler's words, and what it waits for.
fn unschedulable(pod: &Pod, name: &str, events: &Events<'_>) -> String {
    let condition = pod
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False"))
        .and_then(|condition| condition.message.as_deref());
    let Some(message) = condition.or_else(|| events.latest_warning(&["FailedScheduling"])) else {
        return format!("Pod {name} waits to be scheduled on a node");
    };
    // Its first sentence: what follows is about preemption (and, since 1.32, claims).
    let short = message.split(". ").next().unwrap_or(message).trim_end_matches('.');
    let advice = if short.contains("Insufficient") {
        "; it waits until a node has that much free (other workloads end, or the cluster gets more nodes); ask \
         for less with --cpus/--memory to start sooner"
    } else if short.contains("not ready") || short.contains("taint") {
        "; it waits until a worker node is Ready (`anycloud cluster status` shows the nodes)"
    } else {
        "; it waits until the scheduler finds a node"
    };
    format!("Pod {name} cannot be scheduled: {short}{advice}")
}

/// The Anycloud secrets behind the Pod's `imagePullSecrets`: a Kubernetes Secret Anycloud
/// writes is named `{owner}.{secret}.v{version}` ([`crate::kubernetes::secret::object_name`]); another
/// keeps its own name.
fn pull_secrets(pod: &Pod) -> Vec<String> {
    let listed = pod.spec.as_ref().and_then(|spec| spec.image_pull_secrets.as_deref()).unwrap_or_default();
    listed
        .iter()
        .filter_map(|reference| {
            let name = reference.name.as_str();
            let parts: Vec<&str> = name.split('.').collect();
            let versioned = parts.len() >= 3
                && parts[parts.len() - 1]
                    .strip_prefix('v')
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            let secret = if versioned { parts[parts.len() - 2] } else { name };
            (!secret.is_empty()).then(|| secret.to_owned())
        })
        .collect()
}

/// An image the kubelet cannot pull: which registry, why, and the commands that fix it.
fn pull_failure(pod: &Pod, reason: &str, cause: Option<&str>, subject: &Subject<'_>) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let image = subject.image;
    let host = crate::workload::registry_host(image);
    let again = &subject.again;
    let cause_text = cause.map(|cause| format!(": {cause}")).unwrap_or_default();
    let head = format!("the image {image} cannot be pulled from {host} for Pod {name} ({reason}{cause_text})");
    if reason == "InvalidImageName" {
        return format!("{head}; correct the image reference, then {again}");
    }
    let lower = cause.unwrap_or_default().to_ascii_lowercase();
    let missing = ["not found", "manifest unknown", "does not exist", "no such host"].iter().any(|w| lower.contains(w));
    let denied = ["unauthorized", "401", "403", "denied", "forbidden", "authentication required", "credentials"]
        .iter()
        .any(|w| lower.contains(w));
    // A Pod that has pull secrets and is still refused has the wrong login; one without needs one.
    let secret = match pull_secrets(pod).as_slice() {
        [] => format!(
            "give the cluster a pull secret for {host}: `anycloud secret new NAME --registry {host} --username USER \
             --password-stdin`, then {again}"
        ),
        [first, ..] => format!(
            "the Pod has pull secret(s) {} and {host} did not take them: correct the login with `anycloud secret set \
             {first} --registry {host} --username USER --password-stdin` (or `anycloud secret new` one for {host}), \
             then {again}",
            pull_secrets(pod).iter().map(|secret| format!("`{secret}`")).collect::<Vec<_>>().join(", ")
        ),
    };
    let pending = if reason == "ErrImagePull" { "; the kubelet tries again" } else { "" };
    if missing && !denied {
        format!("{head}{pending}; check the image's name and tag, or, if {host} is private, {secret}")
    } else if denied {
        let without = if pull_secrets(pod).is_empty() { " without credentials" } else { "" };
        format!("{head}{pending}; {host} refuses it{without}: {secret}")
    } else {
        format!("{head}{pending}; if {host} is private, {secret}; otherwise check the image's name and tag")
    }
}

/// What to do about a container that cannot be created, from the kubelet's message.
pub(crate) fn config_advice(message: &str) -> String {
    if message.contains("secret") && message.contains("not found") {
        return "; a Secret it takes its environment from is missing: create it with `anycloud secret new NAME`, or \
                check the names given with --secret"
            .to_owned();
    }
    if message.contains("couldn't find key") {
        return "; a key it takes from a Secret is missing: add it with `anycloud secret set NAME`".to_owned();
    }
    String::new()
}

/// A container that has restarted: how many times, how it last ended, and where to look.
fn restarts(pod: &Pod, status: &ContainerStatus, subject: &Subject<'_>) -> Option<String> {
    if status.restart_count == 0 {
        return None;
    }
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let last = status.last_state.as_ref().and_then(|state| state.terminated.as_ref());
    let how = match last {
        Some(last) if last.reason.as_deref() == Some("OOMKilled") => format!(
            ", last killed for using more memory than its limit (OOMKilled, exit code {}): ask for more with \
             --memory",
            last.exit_code
        ),
        Some(last) => {
            format!(", last with exit code {} ({})", last.exit_code, last.reason.as_deref().unwrap_or("Terminated"))
        }
        None => String::new(),
    };
    let backoff = status
        .state
        .as_ref()
        .and_then(|state| state.waiting.as_ref())
        .and_then(|waiting| waiting.reason.as_deref())
        .filter(|reason| *reason == "CrashLoopBackOff")
        .map(|_| "; Kubernetes waits before it starts it again (CrashLoopBackOff)")
        .unwrap_or_default();
    // `anycloud logs` reads a job's; a service's are kubectl's (`anycloud cluster kubeconfig`).
    let logs = match subject.port {
        None => format!("`anycloud logs {}`", subject.name),
        Some(_) => format!("`kubectl logs -n {namespace} {name} --previous`"),
    };
    Some(format!(
        "the container of Pod {name} exited and was restarted {} time(s){how}{backoff}; {logs} shows what it printed",
        status.restart_count
    ))
}

/// The port the container's TCP readiness probe connects to, a named port resolved.
fn readiness_port(pod: &Pod) -> Option<i64> {
    let container = container(pod)?;
    let port = &container.readiness_probe.as_ref()?.tcp_socket.as_ref()?.port;
    match port {
        IntOrString::Int(port) => Some(i64::from(*port)),
        IntOrString::String(named) => container
            .ports
            .as_ref()?
            .iter()
            .find(|port| port.name.as_deref() == Some(named.as_str()))
            .map(|port| i64::from(port.container_port)),
    }
}

/// The port a probe's message names (`dial tcp 10.42.0.7:8081: ...`).
fn dialled_port(message: &str) -> Option<i64> {
    let rest = &message[message.find("dial tcp ")? + "dial tcp ".len()..];
    let address = rest.split([' ', '"']).next()?.trim_end_matches(':');
    address.rsplit_once(':')?.1.parse().ok()
}

/// A readiness probe that fails: the port it tried, what it found there, what the app must do.
fn probe_failure(pod: &Pod, name: &str, message: &str, subject: &Subject<'_>) -> String {
    let port = readiness_port(pod).or_else(|| dialled_port(message));
    let at = port.map(|port| format!(" on port {port}")).unwrap_or_default();
    let found = if message.contains("connection refused") {
        format!("nothing listens{at} in the container")
    } else if message.contains("i/o timeout") || message.contains("deadline exceeded") || message.contains("Timeout") {
        format!("nothing answered{at} within the probe's timeout")
    } else if message.contains("connection reset") {
        format!("the connection{at} was reset")
    } else {
        format!("the probe{at} failed")
    };
    let must = match subject.port {
        Some(env_port) => format!("; the app must listen on $PORT ({env_port})"),
        None => String::new(),
    };
    format!("Pod {name} is not ready: {found}{must} (Kubernetes: {message})")
}

/// Why a Pod that cannot be scheduled never will be: it asks for more CPU or memory than any
/// node it may run on can give (`allocatable`: what the node offers Pods). Nodes cordoned, or
/// with a `NoSchedule`/`NoExecute` taint the Pod does not tolerate, do not count. `None` when
/// some node is large enough, or no node is listed (the cluster may still be coming up).
pub fn beyond_every_node(pod: &Pod, nodes: &[Node]) -> Option<String> {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let spec = pod.spec.as_ref()?;
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let usable: Vec<&Node> = nodes.iter().filter(|node| may_run_on(node, tolerations)).collect();
    if usable.is_empty() {
        return None;
    }
    let request = |resource: &str| -> f64 {
        spec.containers
            .iter()
            .filter_map(|container| container.resources.as_ref()?.requests.as_ref()?.get(resource))
            .filter_map(|quantity| kubernetes::quantity::parse(&quantity.0))
            .sum()
    };
    let largest = |resource: &str| -> Option<(f64, &str)> {
        usable
            .iter()
            .filter_map(|node| {
                let allocatable = node.status.as_ref()?.allocatable.as_ref()?.get(resource)?;
                Some((kubernetes::quantity::parse(&allocatable.0)?, node.metadata.name.as_deref().unwrap_or("?")))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };
    let mut beyond = Vec::new();
    let cpu = request("cpu");
    if let Some((most, node)) = largest("cpu").filter(|(most, _)| cpu > *most) {
        beyond.push(format!(
            "{} CPU(s) while the largest node offers {} (node {node}): ask for at most {} with --cpus",
            kubernetes::quantity::cores(cpu),
            kubernetes::quantity::cores(most),
            kubernetes::quantity::cores(most)
        ));
    }
    let memory = request("memory");
    if let Some((most, node)) = largest("memory").filter(|(most, _)| memory > *most) {
        beyond.push(format!(
            "{} of memory while the largest node offers {} (node {node}): ask for less with --memory",
            kubernetes::quantity::bytes(memory),
            kubernetes::quantity::bytes(most)
        ));
    }
    if beyond.is_empty() {
        return None;
    }
    Some(format!(
        "Pod {name} can never be scheduled: it asks for {}; or run it on a cluster with larger nodes",
        beyond.join(", and ")
    ))
}

/// Whether the scheduler may place a Pod with `tolerations` on the node.
fn may_run_on(node: &Node, tolerations: &[Toleration]) -> bool {
    let spec = node.spec.as_ref();
    if spec.and_then(|spec| spec.unschedulable).unwrap_or(false) {
        return false;
    }
    let taints = spec.and_then(|spec| spec.taints.as_deref()).unwrap_or_default();
    taints.iter().filter(|taint| matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")).all(|taint| {
        tolerations.iter().any(|toleration| {
            let key = toleration.key.as_deref().unwrap_or_default();
            let effect = toleration.effect.as_deref().unwrap_or_default();
            let operator = toleration.operator.as_deref().unwrap_or("Equal");
            (key.is_empty() || key == taint.key)
                && (effect.is_empty() || effect == taint.effect)
                && (operator == "Exists" || toleration.value.as_deref() == taint.value.as_deref())
        })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn subject(port: Option<i64>, again: &str) -> Subject<'static> {
        Subject { name: "batch", image: "ghcr.io/acme/batch:latest", port, again: again.to_owned() }
    }

    fn job() -> Subject<'static> {
        subject(None, "`anycloud resubmit batch`")
    }

    /// A Pod as the API returns it, with its `main` container's status (when given).
    fn pod(node: Option<&str>, phase: &str, status: Option<Value>, conditions: Value) -> Pod {
        let mut pod = json!({
            "metadata": { "name": "batch-1-x7k2p", "namespace": "anycloud", "uid": "u-1" },
            "spec": {
                "containers": [{
                    "name": "main",
                    "image": "ghcr.io/acme/batch:latest",
                    "ports": [{ "name": "http", "containerPort": 8080, "protocol": "TCP" }],
                    "readinessProbe": { "tcpSocket": { "port": 8080 }, "periodSeconds": 1 },
                    "resources": { "requests": { "cpu": "64", "memory": "512Mi" } },
                }],
            },
            "status": { "phase": phase, "conditions": conditions },
        });
        if let Some(node) = node {
            pod["spec"]["nodeName"] = json!(node);
        }
        if let Some(status) = status {
            let mut status = status;
            status["name"] = json!("main");
            status["image"] = json!("ghcr.io/acme/batch:latest");
            status["imageID"] = json!("");
            pod["status"]["containerStatuses"] = json!([status]);
        }
        serde_json::from_value(pod).unwrap()
    }

    fn event(reason: &str, message: &str, at: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": { "name": format!("batch-1-x7k2p.{reason}"), "namespace": "anycloud" },
            "involvedObject": { "kind": "Pod", "name": "batch-1-x7k2p", "namespace": "anycloud", "uid": "u-1" },
            "reason": reason, "message": message, "type": "Warning",
            "firstTimestamp": at, "lastTimestamp": at, "count": 3,
        }))
        .unwrap()
    }

    #[test]
    fn a_probe_that_finds_nothing_listening_names_the_port_and_port_env() {
        let running = json!({
            "ready": false, "restartCount": 0, "started": true,
            "state": { "running": { "startedAt": "2026-01-01T00:00:00Z" } },
        });
        let pod = pod(Some("w0"), "Running", Some(running), json!([]));
        let events = [
            event("Unhealthy", "Readiness probe failed: dial tcp 10.42.0.7:8080: i/o timeout", "2026-01-01T00:00:01Z"),
            event(
                "Unhealthy",
                "Readiness probe failed: dial tcp 10.42.0.7:8080: connect: connection refused",
                "2026-01-01T00:00:05Z",
            ),
        ];
        let wait = explain(&pod, &events, &subject(Some(8080), "`anycloud deployment upgrade batch`")).unwrap();
        assert_eq!(wait.verdict, Verdict::Waits);
        assert!(
            wait.why.starts_with(
                "Pod batch-1-x7k2p is not ready: nothing listens on port 8080 in the container; the app must listen \
                 on $PORT (8080)"
            ),
            "{}",
            wait.why
        );
        assert!(wait.why.contains("connect: connection refused"), "{}", wait.why);
        // Without events yet, it says what it waits for.
        let quiet = explain(&pod, &[], &subject(Some(8080), "")).unwrap();
        assert_eq!(quiet.why, "Pod batch-1-x7k2p runs; its readiness probe (TCP port 8080) has not passed yet");
    }

    #[test]
    fn a_probe_message_alone_names_the_port_it_dialled() {
        assert_eq!(
            dialled_port("Readiness probe failed: dial tcp 10.42.0.7:8081: connect: connection refused"),
            Some(8081)
        );
        assert_eq!(dialled_port("Get \"http://10.42.0.7:9000/\": dial tcp 10.42.0.7:9000: i/o timeout"), Some(9000));
        assert_eq!(dialled_port("HTTP probe failed with statuscode: 503"), None);
    }

    #[test]
    fn an_unschedulable_pod_says_the_schedulers_words() {
        let message = "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: \
                       }, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for \
                       scheduling, 2 No preemption victims found for incoming pod.";
        let conditions =
            json!([{ "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message }]);
        let pod = pod(None, "Pending", None, conditions);
        let wait = explain(&pod, &[], &job()).unwrap();
        assert_eq!(wait.verdict, Verdict::Waits);
        assert!(
            wait.why.starts_with(
                "Pod batch-1-x7k2p cannot be scheduled: 0/3 nodes are available: 1 node(s) had untolerated taint \
                 {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu; it waits until a node has that much free"
            ),
            "{}",
            wait.why
        );
        // Since 1.32 the first sentence is followed by claims and preemption.
        let newer = "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient memory. no new claims \
                     to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling.";
        let conditions =
            json!([{ "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": newer }]);
        let wait = explain(&super::tests::pod(None, "Pending", None, conditions), &[], &job()).unwrap();
        assert!(
            wait.why.starts_with(
                "Pod batch-1-x7k2p cannot be scheduled: 0/3 nodes are available: 1 node(s) had untolerated taint(s), \
                 2 Insufficient memory; it waits"
            ),
            "{}",
            wait.why
        );
        // An event says it when the condition does not.
        let pod = super::tests::pod(None, "Pending", None, json!([]));
        let events =
            [event("FailedScheduling", "0/1 nodes are available: 1 node(s) were not ready.", "2026-01-01T00:00:05Z")];
        let wait = explain(&pod, &events, &job()).unwrap();
        assert!(wait.why.contains("1 node(s) were not ready; it waits until a worker node is Ready"), "{}", wait.why);
    }

    fn node(name: &str, cpu: &str, memory: &str, taint: bool) -> Node {
        let taints = if taint {
            json!([{ "key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule" }])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "taints": taints },
            "status": { "allocatable": { "cpu": cpu, "memory": memory, "pods": "110" } },
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_larger_than_every_node_it_may_use_can_never_be_scheduled() {
        let pod = pod(None, "Pending", None, json!([]));
        // The tainted control plane has 128 CPUs, but the Pod does not tolerate its taint.
        let nodes =
            [node("cp", "128", "512Gi", true), node("w0", "1950m", "7Gi", false), node("w1", "2", "3Gi", false)];
        let why = beyond_every_node(&pod, &nodes).unwrap();
        assert_eq!(
            why,
            "Pod batch-1-x7k2p can never be scheduled: it asks for 64 CPU(s) while the largest node offers 2 (node \
             w1): ask for at most 2 with --cpus; or run it on a cluster with larger nodes"
        );
        let big = [node("w0", "96", "1Ti", false)];
        assert_eq!(beyond_every_node(&pod, &big), None);
        // No node listed yet: nothing to say.
        assert_eq!(beyond_every_node(&pod, &[]), None);
        let small_memory = [node("w0", "96", "256Mi", false)];
        let why = beyond_every_node(&pod, &small_memory).unwrap();
        assert!(why.contains("512 MiB of memory while the largest node offers 256 MiB (node w0)"), "{why}");
    }

    #[test]
    fn an_image_the_kubelet_backed_off_pulling_ends_the_wait_with_the_registry_and_the_command() {
        let waiting = json!({
            "ready": false, "restartCount": 0,
            "state": { "waiting": { "reason": "ImagePullBackOff", "message": "Back-off pulling image \"ghcr.io/acme/batch:latest\"" } },
        });
        let pod = pod(Some("w0"), "Pending", Some(waiting), json!([]));
        let denied = "Failed to pull image \"ghcr.io/acme/batch:latest\": failed to pull and unpack image: failed to \
                      resolve reference \"ghcr.io/acme/batch:latest\": failed to authorize: failed to fetch anonymous \
                      token: unexpected status from GET request to https://ghcr.io/token: 401 Unauthorized";
        // The kubelet's `Error: ...` events come after the one that says why.
        let events = [
            event("Failed", denied, "2026-01-01T00:00:05Z"),
            event("Failed", "Error: ErrImagePull", "2026-01-01T00:00:05Z"),
            event("Failed", "Error: ImagePullBackOff", "2026-01-01T00:00:06Z"),
        ];
        let wait = explain(&pod, &events, &job()).unwrap();
        assert_eq!(wait.verdict, Verdict::CannotStart);
        assert!(
            wait.why.contains("(ImagePullBackOff: failed to pull and unpack image: failed to resolve"),
            "{}",
            wait.why
        );
        assert!(
            wait.why.starts_with("the image ghcr.io/acme/batch:latest cannot be pulled from ghcr.io"),
            "{}",
            wait.why
        );
        assert!(wait.why.contains("401 Unauthorized"), "{}", wait.why);
        assert!(
            wait.why.ends_with(
                "ghcr.io refuses it without credentials: give the cluster a pull secret for ghcr.io: `anycloud secret \
                 new NAME --registry ghcr.io --username USER --password-stdin`, then `anycloud resubmit batch`"
            ),
            "{}",
            wait.why
        );
    }

    #[test]
    fn a_pod_whose_pull_secret_is_refused_says_to_correct_that_secret() {
        let waiting = json!({
            "ready": false, "restartCount": 0,
            "state": { "waiting": { "reason": "ImagePullBackOff", "message": "Back-off pulling image \"ghcr.io/acme/batch:latest\"" } },
        });
        let mut pod = pod(Some("w0"), "Pending", Some(waiting), json!([]));
        pod.spec.as_mut().unwrap().image_pull_secrets =
            Some(vec![serde_json::from_value(json!({ "name": "batch.2.ghcr.v3" })).unwrap()]);
        let events = [event(
            "Failed",
            "Failed to pull image \"ghcr.io/acme/batch:latest\": 403 Forbidden",
            "2026-01-01T00:00:05Z",
        )];
        let wait = explain(&pod, &events, &job()).unwrap();
        assert!(
            wait.why.ends_with(
                "ghcr.io refuses it: the Pod has pull secret(s) `ghcr` and ghcr.io did not take \
                 them: correct the login with `anycloud secret set ghcr --registry ghcr.io --username USER \
                 --password-stdin` (or `anycloud secret new` one for ghcr.io), then `anycloud resubmit batch`"
            ),
            "{}",
            wait.why
        );
    }

    #[test]
    fn a_first_failed_pull_waits_for_the_kubelets_next_try() {
        let waiting = json!({
            "ready": false, "restartCount": 0,
            "state": { "waiting": { "reason": "ErrImagePull", "message": "rpc error: code = NotFound desc = failed to pull and unpack image \"ghcr.io/acme/batch:latest\": not found" } },
        });
        let pod = pod(Some("w0"), "Pending", Some(waiting), json!([]));
        let wait = explain(&pod, &[], &job()).unwrap();
        assert_eq!(wait.verdict, Verdict::Waits);
        assert!(wait.why.contains("the kubelet tries again; check the image's name and tag"), "{}", wait.why);
    }

    #[test]
    fn restarts_say_how_often_and_the_last_exit_code() {
        let crashing = json!({
            "ready": false, "restartCount": 3,
            "state": { "waiting": { "reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container" } },
            "lastState": { "terminated": { "exitCode": 1, "reason": "Error" } },
        });
        let pod = pod(Some("w0"), "Running", Some(crashing), json!([]));
        let wait = explain(&pod, &[], &job()).unwrap();
        assert_eq!(
            wait.why,
            "the container of Pod batch-1-x7k2p exited and was restarted 3 time(s), last with exit code 1 (Error); \
             Kubernetes waits before it starts it again (CrashLoopBackOff); `anycloud logs batch` shows what it printed"
        );
        let killed = json!({
            "ready": false, "restartCount": 1,
            "state": { "running": { "startedAt": "2026-01-01T00:00:00Z" } },
            "lastState": { "terminated": { "exitCode": 137, "reason": "OOMKilled" } },
        });
        let pod = super::tests::pod(Some("w0"), "Running", Some(killed), json!([]));
        let wait = explain(&pod, &[], &job()).unwrap();
        assert!(
            wait.why.contains(
                "restarted 1 time(s), last killed for using more memory than its limit (OOMKilled, exit code 137)"
            ),
            "{}",
            wait.why
        );
    }

    #[test]
    fn a_missing_secret_says_which() {
        let waiting = json!({
            "ready": false, "restartCount": 0,
            "state": { "waiting": { "reason": "CreateContainerConfigError", "message": "secret \"db\" not found" } },
        });
        let pod = pod(Some("w0"), "Pending", Some(waiting), json!([]));
        let wait = explain(&pod, &[], &job()).unwrap();
        assert_eq!(wait.verdict, Verdict::Waits);
        assert!(
            wait.why.starts_with(
                "the container of Pod batch-1-x7k2p cannot be created (CreateContainerConfigError: secret \"db\" not \
                 found); the kubelet tries again; a Secret it takes its environment from is missing"
            ),
            "{}",
            wait.why
        );
    }

    #[test]
    fn a_ready_ended_or_deleted_pod_has_nothing_to_explain() {
        let ready = json!({ "ready": true, "restartCount": 0, "state": { "running": { "startedAt": "2026-01-01T00:00:00Z" } } });
        assert_eq!(explain(&pod(Some("w0"), "Running", Some(ready), json!([])), &[], &job()), None);
        let ended = json!({ "ready": false, "restartCount": 0, "state": { "terminated": { "exitCode": 0, "reason": "Completed" } } });
        assert_eq!(explain(&pod(Some("w0"), "Succeeded", Some(ended), json!([])), &[], &job()), None);
        let mut deleting = pod(None, "Pending", None, json!([]));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:00Z".parse().unwrap()));
        assert_eq!(explain(&deleting, &[], &job()), None);
    }
}
