//! Deployments and ClusterIP Services on a simulated cluster, through the real kube client and
//! real TCP: replicas are local HTTP servers on their `$PORT`, the Service answers on its
//! `clusterIP:port`, rolling updates never drop a request, broken revisions never take the old
//! replicas down, and a rollback reuses the old ReplicaSet.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::{Cluster, eventually, job, process_runs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An HTTP server on `$PORT` that answers every GET with `$VERSION`.
const SERVER: &str = r#"
import http.server, os
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = os.environ["VERSION"].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
"#;

/// The `web` Deployment: 2 replicas of `command`, with `VERSION=version`, `maxSurge: 1`,
/// `maxUnavailable: 0`, a 3 s progress deadline, and a 1 s `preStop` sleep: as on a real
/// cluster, a Pod being deleted leaves the Service's endpoints while its kubelet starts to stop
/// it, and without the hook a connection the proxy routed just before it heard of the change
/// reaches a process that SIGTERM has ended (kube-proxy reads the new routes up to 100 ms late).
fn web(version: &str, command: &[&str]) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "web" },
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 3,
            "selector": { "matchLabels": { "app": "web" } },
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 0 } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{
                    "name": "main", "image": "python:3.12", "command": command,
                    "ports": [{ "name": "http", "containerPort": 8080 }],
                    "env": [{ "name": "VERSION", "value": version }, { "name": "PORT", "value": "8080" }],
                    "lifecycle": { "preStop": { "sleep": { "seconds": 1 } } },
                }] },
            },
        },
    })
}

fn serving(version: &str) -> Value {
    web(version, &["python3", "-c", SERVER])
}

fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service", "metadata": { "name": "web" },
        "spec": { "selector": { "app": "web" }, "ports": [{ "name": "http", "port": 8080, "targetPort": "http" }] },
    })
}

struct Apis {
    deployments: Api<Deployment>,
    replica_sets: Api<ReplicaSet>,
    pods: Api<Pod>,
    services: Api<Service>,
}

fn apis(cluster: &Cluster) -> Apis {
    let client = cluster.client();
    Apis {
        deployments: Api::default_namespaced(client.clone()),
        replica_sets: Api::default_namespaced(client.clone()),
        pods: Api::default_namespaced(client.clone()),
        services: Api::default_namespaced(client),
    }
}

async fn apply<K>(api: &Api<K>, object: &Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object["metadata"]["name"].as_str().unwrap();
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(object)).await.unwrap()
}

/// One GET through the Service: its body, or why it failed.
async fn get(address: &str) -> Result<String, String> {
    let attempt = async {
        let mut stream = TcpStream::connect(address).await.map_err(|e| format!("connect: {e}"))?;
        stream.write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n").await.map_err(|e| format!("write: {e}"))?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.map_err(|e| format!("read: {e}"))?;
        match answer.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.0 200") => Ok(body.to_owned()),
            _ => Err(format!("answer: {answer:?}")),
        }
    };
    tokio::time::timeout(Duration::from_secs(3), attempt).await.unwrap_or_else(|_| Err("timed out".into()))
}

/// A client that GETs the Service every 50 ms until stopped, recording every answer.
struct Poller {
    answers: Arc<Mutex<Vec<Result<String, String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Poller {
    fn start(address: String) -> Self {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let recorded = answers.clone();
        let task = tokio::spawn(async move {
            loop {
                let answer = get(&address).await;
                recorded.lock().unwrap().push(answer);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self { answers, task }
    }

    fn stop(self) -> Vec<Result<String, String>> {
        self.task.abort();
        self.answers.lock().unwrap().clone()
    }
}

/// Waits until the Deployment has rolled out its current template, as `kubectl rollout status`
/// decides it.
async fn rolled_out(deployments: &Api<Deployment>) -> Deployment {
    eventually(40, "the Deployment rolled out", || async {
        let deployment = deployments.get("web").await.unwrap();
        let status = deployment.status.clone()?;
        let done = status.observed_generation == deployment.metadata.generation
            && status.updated_replicas == Some(2)
            && status.replicas == Some(2)
            && status.available_replicas == Some(2);
        done.then_some(deployment)
    })
    .await
}

fn condition(deployment: &Deployment, kind: &str) -> Option<(String, String)> {
    let conditions = deployment.status.as_ref()?.conditions.as_ref()?;
    let found = conditions.iter().find(|c| c.type_ == kind)?;
    Some((found.status.clone(), found.reason.clone().unwrap_or_default()))
}

/// The Deployment's ReplicaSets: (revision, name, wanted replicas).
async fn replica_sets(api: &Api<ReplicaSet>) -> Vec<(i64, String, i32)> {
    let mut sets: Vec<(i64, String, i32)> = api
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|rs| {
            let revision =
                rs.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"].parse().unwrap();
            (revision, rs.metadata.name.unwrap(), rs.spec.unwrap().replicas.unwrap())
        })
        .collect();
    sets.sort();
    sets
}

/// Deploys v1 behind the Service and waits until the Service answers from both replicas.
async fn deploy_v1(apis: &Apis) -> String {
    let created = apply(&apis.services, &service()).await;
    let ip = created.spec.unwrap().cluster_ip.unwrap();
    assert!(ip.starts_with("127.43."), "{ip}");
    apply(&apis.deployments, &serving("v1")).await;
    let deployment = rolled_out(&apis.deployments).await;
    assert_eq!(condition(&deployment, "Available"), Some(("True".into(), "MinimumReplicasAvailable".into())));
    let address = format!("{ip}:8080");
    eventually(10, "the Service answering", || async { get(&address).await.ok().filter(|body| body == "v1") }).await;
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_replaces_replicas_without_a_failed_request() {
    let cluster = Cluster::start().await;
    let apis = apis(&cluster);
    let address = deploy_v1(&apis).await;

    let pods = apis.pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
    assert_eq!(pods.len(), 2);
    let mut ports = Vec::new();
    for pod in &pods {
        let status = pod.status.as_ref().unwrap();
        assert!(status.pod_ip.as_deref().unwrap().starts_with("127.42."), "{status:?}");
        assert!(status.container_statuses.as_ref().unwrap()[0].ready);
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert!(labels.contains_key("pod-template-hash"), "{labels:?}");
        let log = apis.pods.logs(pod.metadata.name.as_deref().unwrap(), &Default::default()).await.unwrap();
        assert!(log.is_empty(), "{log}");
        let endpoints: Api<Endpoints> = Api::default_namespaced(cluster.client());
        let subsets = endpoints.get("web").await.unwrap().subsets.unwrap();
        let port = subsets
            .iter()
            .find(|s| s.addresses.iter().flatten().any(|a| Some(&a.ip) == status.pod_ip.as_ref()))
            .unwrap()
            .ports
            .as_ref()
            .unwrap()[0]
            .port;
        assert_ne!(port, 8080, "each replica listens on its own host port ($PORT)");
        ports.push(port);
    }
    assert_ne!(ports[0], ports[1]);

    let poller = Poller::start(address.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    apply(&apis.deployments, &serving("v2")).await;
    let deployment = rolled_out(&apis.deployments).await;
    eventually(10, "only v2 answering", || async {
        let mut bodies = Vec::new();
        for _ in 0..4 {
            bodies.push(get(&address).await.ok()?);
        }
        bodies.iter().all(|body| body == "v2").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answers = poller.stop();
    let failed: Vec<&String> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    assert!(failed.is_empty(), "{} of {} requests failed: {failed:?}", failed.len(), answers.len());
    let bodies: Vec<&str> = answers.iter().map(|a| a.as_deref().unwrap()).collect();
    let first_v2 = bodies.iter().position(|b| *b == "v2").unwrap();
    assert!(bodies[..first_v2].iter().all(|b| *b == "v1") && bodies[0] == "v1", "{bodies:?}");
    assert_eq!(bodies.last(), Some(&"v2"));

    assert_eq!(condition(&deployment, "Progressing").unwrap().1, "NewReplicaSetAvailable");
    assert_eq!(deployment.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"], "2");
    let sets = replica_sets(&apis.replica_sets).await;
    assert_eq!(sets.iter().map(|(rev, _, replicas)| (*rev, *replicas)).collect::<Vec<_>>(), [(1, 0), (2, 2)]);
    eventually(10, "the old replicas gone", || async {
        let pods = apis.pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
        (pods.len() == 2).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_revision_never_takes_the_old_replicas_down_and_a_rollback_reuses_them() {
    let cluster = Cluster::start().await;
    let apis = apis(&cluster);
    let address = deploy_v1(&apis).await;

    for broken in [web("v2", &["sh", "-c", "echo starting; exit 1"]), web("v3", &["sleep", "600"])] {
        let poller = Poller::start(address.clone());
        apply(&apis.deployments, &broken).await;
        let deployment = eventually(20, "the rollout past its deadline", || async {
            let deployment = apis.deployments.get("web").await.unwrap();
            (condition(&deployment, "Progressing")? == ("False".into(), "ProgressDeadlineExceeded".into()))
                .then_some(deployment)
        })
        .await;
        let status = deployment.status.clone().unwrap();
        assert_eq!((status.available_replicas, status.updated_replicas), (Some(2), Some(1)), "{status:?}");
        assert_eq!(condition(&deployment, "Available").unwrap().0, "True");
        let answers = poller.stop();
        assert!(answers.len() > 20, "{}", answers.len());
        assert!(answers.iter().all(|a| a.as_deref() == Ok("v1")), "{answers:?}");

        let new_pod = apis
            .pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|pod| pod.spec.as_ref().unwrap().containers[0].command.as_ref().unwrap()[0] != "python3")
            .unwrap();
        let container = new_pod.status.unwrap().container_statuses.unwrap().remove(0);
        assert!(!container.ready);
        if broken["spec"]["template"]["spec"]["containers"][0]["command"][0] == "sh" {
            assert!(container.restart_count >= 1, "{container:?}");
            let last = container.last_state.unwrap().terminated.unwrap();
            assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
            let waiting = container.state.unwrap().waiting.map(|w| w.reason.unwrap_or_default());
            assert_eq!(waiting.as_deref(), Some("CrashLoopBackOff"));
        } else {
            assert!(container.state.unwrap().running.is_some());
        }

        // The rollback: the v1 template again reuses its ReplicaSet, with the next revision.
        apply(&apis.deployments, &serving("v1")).await;
        let deployment = rolled_out(&apis.deployments).await;
        assert_eq!(condition(&deployment, "Progressing").unwrap().0, "True");
        let sets = replica_sets(&apis.replica_sets).await;
        let (revision, _, replicas) = sets.last().unwrap().clone();
        assert_eq!(replicas, 2, "{sets:?}");
        assert!(sets[..sets.len() - 1].iter().all(|(_, _, replicas)| *replicas == 0), "{sets:?}");
        assert_eq!(deployment.metadata.annotations.unwrap()["deployment.kubernetes.io/revision"], revision.to_string());
        assert_eq!(get(&address).await.as_deref(), Ok("v1"));
    }
    let sets = replica_sets(&apis.replica_sets).await;
    assert_eq!(sets.len(), 3, "one ReplicaSet per template: {sets:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_reaches_the_service_and_deleting_removes_everything() {
    let mut cluster = Cluster::start().await;
    let apis = apis(&cluster);
    let address = deploy_v1(&apis).await;

    let fetch = "python3 -c \"import os, urllib.request; \
                 print(urllib.request.urlopen('http://%s:%s/' % (os.environ['WEB_SERVICE_HOST'], \
                 os.environ['WEB_SERVICE_PORT'])).read().decode())\"";
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::default_namespaced(cluster.client());
    jobs.patch("fetch", &PatchParams::apply("test"), &Patch::Apply(job("fetch", fetch, &[]))).await.unwrap();
    eventually(20, "the Job done", || async {
        let status = jobs.get("fetch").await.unwrap().status?;
        assert_eq!(status.failed, None, "the Job failed");
        (status.succeeded == Some(1)).then_some(())
    })
    .await;
    let pod = apis.pods.list(&ListParams::default().labels("job-name=fetch")).await.unwrap().items.remove(0);
    let log = apis.pods.logs(pod.metadata.name.as_deref().unwrap(), &Default::default()).await.unwrap();
    assert_eq!(log, "v1\n");

    // An API restart: the replicas run on, and the Service answers while the API is down (its
    // kube-proxy is a process of its own) and after.
    let pids: Vec<i32> = web_pids(&cluster).await;
    cluster.kill_api().await;
    assert!(pids.iter().all(|pid| process_runs(*pid)));
    for _ in 0..10 {
        assert_eq!(get(&address).await.as_deref(), Ok("v1"), "the Service while its API is down");
    }
    cluster.serve().await;
    let apis = self::apis(&cluster);
    eventually(10, "the Service answering after the restart", || async {
        get(&address).await.ok().filter(|body| body == "v1")
    })
    .await;

    apis.deployments.delete("web", &DeleteParams::default()).await.unwrap();
    apis.services.delete("web", &DeleteParams::default()).await.unwrap();
    eventually(45, "the replicas and their processes gone", || async {
        let pods = apis.pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
        let sets = apis.replica_sets.list(&ListParams::default()).await.unwrap().items;
        (pods.is_empty() && sets.is_empty() && pids.iter().all(|pid| !process_runs(*pid))).then_some(())
    })
    .await;
    eventually(5, "the listener gone", || async { TcpStream::connect(&address).await.is_err().then_some(()) }).await;
    let endpoints: Api<Endpoints> = Api::default_namespaced(cluster.client());
    assert!(endpoints.get_opt("web").await.unwrap().is_none());
}

/// The pids of the `web` replicas' servers, from `/proc` (their `PORT`'s listeners).
async fn web_pids(cluster: &Cluster) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir(cluster.kubelet_dir()).unwrap() {
        let dir = entry.unwrap().path().join(".sim");
        if let Ok(pid) = std::fs::read_to_string(dir.join("main.pid")) {
            let pid: i32 = pid.trim().parse().unwrap();
            let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline.contains("http.server") {
                pids.push(pid);
            }
        }
    }
    assert_eq!(pids.len(), 2, "{pids:?}");
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_deletion_waits_for_the_pods_and_the_listeners_go_with_the_vms() {
    let cluster = Cluster::start().await;
    let apis = apis(&cluster);
    let address = deploy_v1(&apis).await;
    let pids = web_pids(&cluster).await;

    apis.deployments.delete("web", &DeleteParams::foreground()).await.unwrap();
    let marked = apis.deployments.get("web").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    eventually(45, "the Deployment gone after its Pods", || async {
        let gone = apis.deployments.get_opt("web").await.unwrap().is_none();
        let pods = apis.pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
        if gone {
            assert!(pods.is_empty(), "the Deployment went before its Pods: {pods:?}");
        }
        gone.then_some(())
    })
    .await;
    assert!(pids.iter().all(|pid| !process_runs(*pid)));
    // No ready endpoint left: the Service's port resets connections.
    assert!(get(&address).await.is_err());

    apply(&apis.deployments, &serving("v1")).await;
    rolled_out(&apis.deployments).await;
    let pids = web_pids(&cluster).await;
    eventually(10, "the Service answering", || async { get(&address).await.ok() }).await;
    cluster.terminate_vms();
    eventually(20, "the listener and the replicas gone with the VMs", || async {
        let refused = TcpStream::connect(&address).await.is_err();
        (refused && pids.iter().all(|pid| !process_runs(*pid))).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreate_update_ends_the_old_replicas_before_starting_new_ones() {
    let cluster = Cluster::start().await;
    let apis = apis(&cluster);
    let mut v1 = serving("v1");
    v1["spec"]["strategy"] = json!({ "type": "Recreate" });
    apply(&apis.deployments, &v1).await;
    rolled_out(&apis.deployments).await;
    let old = web_pids(&cluster).await;
    let mut v2 = serving("v2");
    v2["spec"]["strategy"] = json!({ "type": "Recreate" });
    apply(&apis.deployments, &v2).await;
    eventually(45, "the new replicas started after the old ones ended", || async {
        let pods = apis.pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
        let versions: Vec<String> = pods
            .iter()
            .map(|pod| pod.spec.as_ref().unwrap().containers[0].env.as_ref().unwrap()[0].value.clone().unwrap())
            .collect();
        if versions.iter().any(|v| v == "v2") {
            assert!(old.iter().all(|pid| !process_runs(*pid)), "a v2 Pod while a v1 process runs");
        }
        (versions == ["v2", "v2"]).then_some(())
    })
    .await;
    rolled_out(&apis.deployments).await;
    let sets = replica_sets(&apis.replica_sets).await;
    assert_eq!(sets.iter().map(|(rev, _, replicas)| (*rev, *replicas)).collect::<Vec<_>>(), [(1, 0), (2, 2)]);
}

/// A Pod whose process writes the time it gets SIGTERM to `out`, then exits; `pre_stop`: the
/// seconds of its `preStop` sleep hook, if any.
fn signalled_pod(name: &str, out: &std::path::Path, pre_stop: Option<i64>) -> Pod {
    let script = "import signal, sys, time, os\n\
                  def term(*_):\n    open(os.environ['OUT'], 'w').write(repr(time.time()))\n    sys.exit(0)\n\
                  signal.signal(signal.SIGTERM, term)\n\
                  while True: time.sleep(1)\n";
    let mut container = json!({
        "name": "main", "image": "python:3.12", "command": ["python3", "-c", script],
        "env": [{ "name": "OUT", "value": out.to_str().unwrap() }],
    });
    if let Some(seconds) = pre_stop {
        container["lifecycle"] = json!({ "preStop": { "sleep": { "seconds": seconds } } });
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name },
        "spec": { "restartPolicy": "Never", "containers": [container] },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_stop_sleep_holds_the_sigterm_back_for_its_seconds() {
    let cluster = Cluster::start().await;
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    let dir = tempfile::tempdir().unwrap();
    let (plain_out, hooked_out) = (dir.path().join("plain"), dir.path().join("hooked"));
    for pod in [signalled_pod("plain", &plain_out, None), signalled_pod("hooked", &hooked_out, Some(2))] {
        pods.create(&Default::default(), &pod).await.unwrap();
    }
    eventually(20, "both Pods running", || async {
        let listed = pods.list(&ListParams::default()).await.unwrap().items;
        let running =
            listed.iter().filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        (running.count() == 2).then_some(())
    })
    .await;
    let deleted = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    for name in ["plain", "hooked"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let signalled = |path: std::path::PathBuf| async move {
        std::fs::read_to_string(&path).ok().and_then(|text| text.parse::<f64>().ok())
    };
    let plain = eventually(10, "the plain Pod's SIGTERM", || signalled(plain_out.clone())).await - deleted;
    let hooked = eventually(10, "the hooked Pod's SIGTERM", || signalled(hooked_out.clone())).await - deleted;
    assert!(plain < 1.5, "the Pod without a hook got SIGTERM {plain:.2} s after its deletion");
    assert!(hooked >= 2.0, "the Pod with a 2 s preStop sleep got SIGTERM {hooked:.2} s after its deletion");
    eventually(10, "both Pods gone", || async {
        pods.list(&ListParams::default()).await.unwrap().items.is_empty().then_some(())
    })
    .await;
}
