//! kubectl 1.32 against a simulated cluster, over plain HTTP with the cluster's bearer token:
//! get (server-side Tables), describe, logs (and -f), exec (its exit code is kubectl's) and
//! delete (which watches the Job until it is gone); on a Deployment behind a Service, get,
//! `rollout status`, `rollout history`, describe and delete. Skipped, with a notice, without
//! kubectl.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use support::{Cluster, eventually, job};

fn kubectl_found() -> bool {
    Command::new("kubectl").arg("version").arg("--client").output().is_ok_and(|out| out.status.success())
}

/// Runs kubectl (off the test's runtime threads) and returns (exit code, stdout, stderr).
async fn kubectl(config: &Path, args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new("kubectl");
    command.arg("--kubeconfig").arg(config).args(args);
    let output: Output = tokio::task::spawn_blocking(move || command.output()).await.unwrap().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

async fn succeeds(config: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = kubectl(config, args).await;
    assert_eq!(code, 0, "kubectl {args:?} failed:\n{stdout}\n{stderr}");
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_describes_logs_execs_and_deletes() {
    if !kubectl_found() {
        println!("NOTICE: kubectl is not on PATH; skipping the kubectl test");
        return;
    }
    let cluster = Cluster::start().await;
    let config = cluster.kubeconfig();
    let jobs: Api<Job> = Api::default_namespaced(cluster.client());
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    let apply = PatchParams::apply("test");
    jobs.patch("greet", &apply, &Patch::Apply(job("greet", "echo one; echo two", &[]))).await.unwrap();
    jobs.patch(
        "ticker",
        &apply,
        &Patch::Apply(job("ticker", "for i in 1 2 3 4 5; do echo tick $i; sleep 0.2; done", &[])),
    )
    .await
    .unwrap();
    jobs.patch("waiter", &apply, &Patch::Apply(job("waiter", "exec sleep 60", &[]))).await.unwrap();
    eventually(20, "greet complete and waiter running", || async {
        let greet = jobs.get("greet").await.unwrap().status?.succeeded == Some(1);
        let waiter = pods.list(&ListParams::default().labels("job-name=waiter")).await.unwrap().items;
        let running = waiter.first()?.status.as_ref()?.phase.as_deref() == Some("Running");
        (greet && running).then_some(())
    })
    .await;

    let nodes = succeeds(&config, &["get", "nodes"]).await;
    println!("{nodes}");
    assert!(nodes.starts_with("NAME"), "{nodes}");
    assert!(
        nodes.lines().any(|l| l.starts_with("cp ") && l.contains("Ready") && l.contains("control-plane")),
        "{nodes}"
    );
    assert!(nodes.lines().any(|l| l.starts_with("w1 ") && l.contains("Ready")), "{nodes}");

    let listed = succeeds(&config, &["get", "jobs,pods", "-o", "wide"]).await;
    println!("{listed}");
    let greet_job = listed.lines().find(|l| l.starts_with("job.batch/greet ")).unwrap();
    assert!(greet_job.contains("Complete") && greet_job.contains("1/1"), "{listed}");
    let greet_pod = listed.lines().find(|l| l.starts_with("pod/greet-")).unwrap();
    assert!(greet_pod.contains("Completed") && greet_pod.contains("0/1"), "{listed}");
    assert!(greet_pod.contains(" w0 ") || greet_pod.contains(" w1 "), "the NODE column: {listed}");
    assert!(listed.lines().any(|l| l.starts_with("pod/waiter-") && l.contains("Running") && l.contains("1/1")));

    let described = succeeds(&config, &["describe", "job", "greet"]).await;
    println!("{described}");
    assert!(described.contains("Name:") && described.contains("greet"), "{described}");
    assert!(described.contains("Pods Statuses:    0 Active (0 Ready) / 1 Succeeded / 0 Failed"), "{described}");
    assert!(described.contains("SuccessfulCreate") && described.contains("Job completed"), "{described}");

    assert_eq!(succeeds(&config, &["logs", "job/greet"]).await, "one\ntwo\n");
    let followed = succeeds(&config, &["logs", "-f", "job/ticker"]).await;
    assert_eq!(followed, "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\n");

    let waiter = pods.list(&ListParams::default().labels("job-name=waiter")).await.unwrap().items;
    let waiter = waiter[0].metadata.name.clone().unwrap();
    let (code, stdout, stderr) = kubectl(&config, &["exec", &waiter, "--", "sh", "-c", "echo hi; exit 2"]).await;
    assert_eq!((code, stdout.as_str()), (2, "hi\n"), "{stderr}");
    let (code, stdout, _) = kubectl(&config, &["exec", &waiter, "--", "sh", "-c", "pwd; echo $HOSTNAME"]).await;
    assert_eq!(code, 0);
    assert!(stdout.ends_with(&format!("{waiter}\n")), "{stdout}");

    let deleted = succeeds(&config, &["delete", "job", "waiter"]).await;
    assert_eq!(deleted, "job.batch \"waiter\" deleted\n");
    let (code, _, stderr) = kubectl(&config, &["get", "job", "waiter"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("jobs.batch \"waiter\" not found"), "{stderr}");
}

/// The `web` Deployment: 2 replicas of Python's HTTP server on `$PORT`, serving `dir`.
fn web(dir: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "web" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{
                    "name": "main", "image": "python:3.12",
                    "command": ["sh", "-c", format!("mkdir -p {dir} && exec python3 -m http.server -d {dir} \"$PORT\"")],
                    "ports": [{ "containerPort": 8080 }],
                }] },
            },
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_follows_a_deployment_behind_a_service() {
    if !kubectl_found() {
        println!("NOTICE: kubectl is not on PATH; skipping the kubectl test");
        return;
    }
    let cluster = Cluster::start().await;
    let config = cluster.kubeconfig();
    let deployments: Api<Deployment> = Api::default_namespaced(cluster.client());
    let services: Api<Service> = Api::default_namespaced(cluster.client());
    let apply = PatchParams::apply("test").force();
    let service = serde_json::json!({
        "apiVersion": "v1", "kind": "Service", "metadata": { "name": "web" },
        "spec": { "selector": { "app": "web" }, "ports": [{ "port": 8080 }] },
    });
    let service = services.patch("web", &apply, &Patch::Apply(&service)).await.unwrap();
    let ip = service.spec.unwrap().cluster_ip.unwrap();
    deployments.patch("web", &apply, &Patch::Apply(web("one"))).await.unwrap();

    let status = succeeds(&config, &["rollout", "status", "deployment/web", "--timeout=60s"]).await;
    assert!(status.ends_with("deployment \"web\" successfully rolled out\n"), "{status}");
    let listed = succeeds(&config, &["get", "deployments,replicasets,services,pods"]).await;
    println!("{listed}");
    let line =
        |prefix: &str| listed.lines().find(|l| l.starts_with(prefix)).map(|l| l.split_whitespace().collect::<Vec<_>>());
    assert_eq!(line("deployment.apps/web ").unwrap()[1..4], ["2/2", "2", "2"], "{listed}");
    assert_eq!(line("replicaset.apps/web-").unwrap()[1..4], ["2", "2", "2"], "{listed}");
    assert_eq!(line("service/web ").unwrap()[1..5], ["ClusterIP", ip.as_str(), "<none>", "8080/TCP"], "{listed}");
    let pods: Vec<&str> = listed.lines().filter(|l| l.starts_with("pod/web-")).collect();
    assert_eq!(pods.len(), 2, "{listed}");
    assert!(pods.iter().all(|l| l.contains(" 1/1 ") && l.contains(" Running ")), "{listed}");
    let endpoints = succeeds(&config, &["get", "endpoints", "web"]).await;
    assert!(endpoints.contains("127.42."), "{endpoints}");

    deployments.patch("web", &apply, &Patch::Apply(web("two"))).await.unwrap();
    let status = succeeds(&config, &["rollout", "status", "deployment/web", "--timeout=60s"]).await;
    assert!(status.contains("successfully rolled out"), "{status}");
    let history = succeeds(&config, &["rollout", "history", "deployment/web"]).await;
    println!("{history}");
    let revisions: Vec<&str> = history.lines().skip(2).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(revisions, ["1", "2"], "{history}");

    let described = succeeds(&config, &["describe", "deployment", "web"]).await;
    println!("{described}");
    assert!(described.contains("2 desired | 2 updated | 2 total | 2 available | 0 unavailable"), "{described}");
    assert!(described.contains("NewReplicaSetAvailable") && described.contains("ScalingReplicaSet"), "{described}");

    let deleted = succeeds(&config, &["delete", "deployment", "web"]).await;
    assert_eq!(deleted, "deployment.apps \"web\" deleted\n");
    succeeds(&config, &["delete", "service", "web"]).await;
    eventually(45, "the Pods gone", || async {
        let pods: Api<Pod> = Api::default_namespaced(cluster.client());
        pods.list(&ListParams::default().labels("app=web")).await.unwrap().items.is_empty().then_some(())
    })
    .await;
}
