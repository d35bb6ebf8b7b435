//! Why a Pod waits, in Kubernetes' own words, on a simulated cluster: a Pod whose requests fit
//! on no node stays Pending with the scheduler's `Unschedulable` message and one counted
//! `FailedScheduling` event (requests add up per node); a readiness probe that fails says what
//! it saw in an `Unhealthy` event (`tcpSocket`, the implicit port check, `httpGet`: refused, or
//! a bad status), counted rather than repeated.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use support::{Cluster, eventually, job};

/// A Job that runs `sleep 60` and requests `resources`.
fn requesting(name: &str, resources: Value) -> Job {
    let mut job = serde_json::to_value(job(name, "sleep 60", &[])).unwrap();
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = resources;
    serde_json::from_value(job).unwrap()
}

async fn pod_of(pods: &Api<Pod>, job: &str) -> Option<Pod> {
    pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.unwrap().items.pop()
}

async fn events_of(cluster: &Cluster, pod: &str, reason: &str) -> Vec<Event> {
    let events: Api<Event> = Api::default_namespaced(cluster.client());
    let all = events.list(&ListParams::default()).await.unwrap().items;
    all.into_iter()
        .filter(|event| event.involved_object.name.as_deref() == Some(pod) && event.reason.as_deref() == Some(reason))
        .collect()
}

/// The `PodScheduled` condition's (status, reason, message).
fn scheduled(pod: &Pod) -> Option<(String, String, String)> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let condition = conditions.iter().find(|c| c.type_ == "PodScheduled")?;
    Some((
        condition.status.clone(),
        condition.reason.clone().unwrap_or_default(),
        condition.message.clone().unwrap_or_default(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_fits_on_no_node_says_why() {
    let cluster = Cluster::start().await;
    let jobs: Api<Job> = Api::default_namespaced(cluster.client());
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    let cpus = std::thread::available_parallelism().unwrap().get();

    // More than any node has.
    jobs.create(
        &PostParams::default(),
        &requesting("huge", json!({ "requests": { "cpu": "1000", "memory": "64Mi" } })),
    )
    .await
    .unwrap();
    let message = "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. no new claims to \
                   deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No \
                   preemption victims found for incoming pod.";
    let (status, reason, said) = eventually(10, "the huge Pod found unschedulable", || async {
        let pods = pods.list(&ListParams::default().labels("job-name=huge")).await.unwrap();
        pods.items.first().and_then(scheduled).filter(|(status, _, _)| status == "False")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str(), said.as_str()), ("False", "Unschedulable", message));
    let huge = pod_of(&pods, "huge").await.unwrap();
    assert_eq!(huge.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert!(huge.spec.as_ref().unwrap().node_name.is_none());
    // One event, counted, not one per pass of the scheduler.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let name = huge.metadata.name.clone().unwrap();
    let failed = events_of(&cluster, &name, "FailedScheduling").await;
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    assert_eq!(failed[0].message.as_deref(), Some(message));
    assert_eq!(failed[0].source.as_ref().and_then(|s| s.component.as_deref()), Some("default-scheduler"));
    assert_eq!(failed[0].count, Some(1), "{failed:#?}");

    // Requests add up on a node: a whole node's CPU each, two fit (one per worker), the third
    // waits; a limit without a request stands for it.
    let whole = cpus.to_string();
    jobs.create(&PostParams::default(), &requesting("a", json!({ "requests": { "cpu": whole } }))).await.unwrap();
    jobs.create(&PostParams::default(), &requesting("b", json!({ "limits": { "cpu": whole } }))).await.unwrap();
    let nodes = eventually(10, "both Pods bound", || async {
        let a = pod_of(&pods, "a").await?.spec?.node_name?;
        let b = pod_of(&pods, "b").await?.spec?.node_name?;
        Some((a, b))
    })
    .await;
    assert_ne!(nodes.0, nodes.1, "each takes a whole node");
    jobs.create(&PostParams::default(), &requesting("c", json!({ "requests": { "cpu": "1" } }))).await.unwrap();
    let (_, reason, said) = eventually(10, "the third Pod found unschedulable", || async {
        let pods = pods.list(&ListParams::default().labels("job-name=c")).await.unwrap();
        pods.items.first().and_then(scheduled).filter(|(status, _, _)| status == "False")
    })
    .await;
    assert_eq!((reason.as_str(), said.as_str()), ("Unschedulable", message));
    // What asks for no CPU still fits on the full nodes.
    jobs.create(&PostParams::default(), &requesting("small", json!({ "requests": { "memory": "64Mi" } })))
        .await
        .unwrap();
    eventually(10, "the memory-only Pod bound", || async { pod_of(&pods, "small").await?.spec?.node_name }).await;
}

/// A bare Pod that runs `script` under `sh -c`, declares port 8080 and has `probe` (if any).
fn serving(name: &str, script: &str, probe: Option<Value>) -> Pod {
    let mut container = json!({
        "name": "main", "image": "python:3.12", "command": ["sh", "-c", script],
        "ports": [{ "name": "http", "containerPort": 8080 }],
    });
    if let Some(probe) = probe {
        container["readinessProbe"] = probe;
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name }, "spec": { "containers": [container] },
    }))
    .unwrap()
}

/// The Pod's address and the host port its app is given as `$PORT`.
async fn address(pods: &Api<Pod>, name: &str) -> (String, u16) {
    eventually(10, "the Pod's address and port", || async {
        let pod = pods.get(name).await.unwrap();
        let ip = pod.status.as_ref()?.pod_ip.clone()?;
        let ports: Value =
            serde_json::from_str(pod.metadata.annotations.as_ref()?.get("sim.anycloud/host-ports")?).ok()?;
        Some((ip, u16::try_from(ports["main"]["8080"].as_u64()?).ok()?))
    })
    .await
}

async fn unhealthy(cluster: &Cluster, pod: &str) -> Vec<Event> {
    eventually(10, "an Unhealthy event", || async {
        let found = events_of(cluster, pod, "Unhealthy").await;
        (!found.is_empty()).then_some(found)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_readiness_probe_says_what_it_saw() {
    let cluster = Cluster::start().await;
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    // Nothing listens: the implicit port check, a tcpSocket probe, an httpGet probe.
    pods.create(&PostParams::default(), &serving("implicit", "sleep 60", None)).await.unwrap();
    let tcp = json!({ "tcpSocket": { "port": "http" }, "periodSeconds": 5 });
    pods.create(&PostParams::default(), &serving("tcp", "sleep 60", Some(tcp))).await.unwrap();
    let http = json!({ "httpGet": { "path": "/healthz", "port": 8080 } });
    pods.create(&PostParams::default(), &serving("http", "sleep 60", Some(http.clone()))).await.unwrap();
    // Something listens, and answers 500.
    let failing = "exec python3 -c 'import http.server, os\nclass H(http.server.BaseHTTPRequestHandler):\n    def do_GET(self):\n        self.send_response(500); self.end_headers()\n    def log_message(self, *a): pass\nhttp.server.HTTPServer((\"0.0.0.0\", int(os.environ[\"PORT\"])), H).serve_forever()'";
    pods.create(&PostParams::default(), &serving("status", failing, Some(http))).await.unwrap();

    for name in ["implicit", "tcp"] {
        let (ip, port) = address(&pods, name).await;
        let events = unhealthy(&cluster, name).await;
        assert_eq!(events[0].type_.as_deref(), Some("Warning"));
        assert_eq!(events[0].source.as_ref().and_then(|s| s.component.as_deref()), Some("kubelet"));
        assert_eq!(
            events[0].message.as_deref(),
            Some(format!("Readiness probe failed: dial tcp {ip}:{port}: connect: connection refused").as_str()),
            "{name}"
        );
    }
    let (ip, port) = address(&pods, "http").await;
    let events = unhealthy(&cluster, "http").await;
    assert_eq!(
        events[0].message.as_deref(),
        Some(
            format!(
                "Readiness probe failed: Get \"http://{ip}:{port}/healthz\": dial tcp {ip}:{port}: connect: connection \
                 refused"
            )
            .as_str()
        )
    );
    let events = eventually(15, "the bad status reported", || async {
        let found = events_of(&cluster, "status", "Unhealthy").await;
        found
            .into_iter()
            .find(|e| e.message.as_deref() == Some("Readiness probe failed: HTTP probe failed with statuscode: 500"))
    })
    .await;
    assert_eq!(events.count, Some(1));

    // Counted, not repeated: one event per failure while it lasts, its count growing once a
    // period (5 s for `tcp`), not every pass.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let tcp_events = events_of(&cluster, "tcp", "Unhealthy").await;
    assert_eq!(tcp_events.len(), 1, "{tcp_events:#?}");
    let count = tcp_events[0].count.unwrap();
    assert!((2..=3).contains(&count), "counted once per period: {count}");
    // The Pod is not Ready, and its condition says which container.
    let pod = pods.get("tcp").await.unwrap();
    let conditions = pod.status.unwrap().conditions.unwrap();
    let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(ready.message.as_deref(), Some("containers with unready status: [main]"));
}
