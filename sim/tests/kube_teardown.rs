//! The end of a simulated Kubernetes whose owner ends first (a test's harness, a temporary
//! storage): `kill_processes_under` kills its Pods' processes and kube-proxy, and from then on
//! its reconcile loop, still running, starts none of them again (no Pod restarted after the
//! kill, no proxy brought back), so nothing outlives the test.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::{Cluster, eventually, process_runs};

/// The live processes working under `dir` (none before it exists).
fn processes_under(dir: &Path) -> Vec<i32> {
    let Ok(dir) = dir.canonicalize() else { return Vec::new() };
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir)))
        .filter(|pid| process_runs(*pid))
        .collect()
}

/// The command lines of `pids`, for a failure's message.
fn command_lines(pids: &[i32]) -> Vec<String> {
    pids.iter()
        .map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
        .map(|line| String::from_utf8_lossy(&line).replace('\0', " "))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pod_or_proxy_starts_again_once_its_kubelet_directory_is_closed() {
    let cluster = Cluster::start().await;
    let deployments: Api<Deployment> = Api::default_namespaced(cluster.client());
    let services: Api<Service> = Api::default_namespaced(cluster.client());
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "sleeper" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "sleeper" } },
            "template": {
                "metadata": { "labels": { "app": "sleeper" } },
                "spec": { "containers": [{
                    "name": "main", "image": "busybox:1.36", "command": ["sleep", "300"],
                    "ports": [{ "name": "http", "containerPort": 8080 }],
                }] },
            },
        },
    });
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": { "name": "sleeper" },
        "spec": { "selector": { "app": "sleeper" }, "ports": [{ "name": "http", "port": 8080, "targetPort": "http" }] },
    });
    let apply = PatchParams::apply("test");
    deployments.patch("sleeper", &apply, &Patch::Apply(deployment)).await.unwrap();
    services.patch("sleeper", &apply, &Patch::Apply(service)).await.unwrap();
    let kubelet_dir = cluster.kubelet_dir();
    // Two replicas (a wrapping shell and its `sleep` each) and the cluster's kube-proxy.
    eventually(30, "both replicas' processes and the kube-proxy running", || async {
        let running = command_lines(&processes_under(&kubelet_dir));
        let sleeps = running.iter().filter(|line| line.starts_with("sleep 300")).count();
        let proxies = running.iter().filter(|line| line.contains(".routes")).count();
        (sleeps == 2 && proxies == 1).then_some(())
    })
    .await;

    // The loop still runs (the routes and their task live on): it must not start them again.
    anycloud_sim::kube::kill_processes_under(&kubelet_dir);
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let left = processes_under(&kubelet_dir);
        assert!(left.is_empty(), "started again after the kill: {:?}", command_lines(&left));
    }
    drop(cluster);
}
