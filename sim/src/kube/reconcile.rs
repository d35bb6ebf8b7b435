//! The control loop: every 250 ms, the garbage collector ([`super::garbage`]) deletes the objects
//! whose owners are all gone (across every cluster, when something was removed), then, for every
//! cluster with objects it still drives (a Job not finished, a Pod not ended, any Deployment,
//! ReplicaSet or Service, anything being deleted: see [`super::store::settled`]), in this order:
//!
//! 1. namespaces being deleted lose their objects (Pods through the kubelet), then go;
//! 2. the Job controller ([`super::jobs`]) passes over every Job;
//! 3. the Deployment controller ([`super::deployments`]) and the ReplicaSet controller
//!    ([`super::replicasets`]) pass over theirs;
//! 4. the scheduler ([`super::scheduler`]) binds new Pods to nodes;
//! 5. the Endpoints controller ([`super::endpoints`]) lists each Service's Pods, and the
//!    cluster's kube-proxy ([`super::proxies`]) is handed the ready ones;
//! 6. the kubelet ([`super::kubelet`]) passes over every Pod: it starts, probes, restarts,
//!    follows and ends their processes.
//!
//! Beside the loop, a container's exit is recorded the moment its process ends ([`super::exits`]):
//! a second task takes each exit and passes the kubelet over that one Pod.
//!
//! Each step reads the objects it needs once and groups them by owner. State advances without
//! anyone asking, and after an API restart the first pass picks up every Pod whose process still
//! runs or exited meanwhile (their pids and exit files are on disk and in SQL), and hands each
//! cluster's proxy, which went on serving meanwhile, the routes it finds now. A cluster whose control plane VM is terminated loses its Jobs,
//! Deployments, ReplicaSets and Services (and its proxy stops), and its Pods' processes are
//! killed at once, as they would die with their VMs. The loop holds the routes' state weakly: it
//! stops when the routes are dropped.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;

use super::exits::Exit;
use super::resources::{self, ALL, DEPLOYMENTS, ENDPOINTS, JOBS, NAMESPACES, PODS, REPLICASETS, SERVICES};
use super::status::ApiError;
use super::{Kube, deployments, endpoints, garbage, jobs, kubelet, objects, replicasets, scheduler, store};

/// How often the loop passes.
const PERIOD: Duration = Duration::from_millis(250);

/// How long an exit whose Pod another pass holds waits before it is tried again.
const BUSY_RETRY: Duration = Duration::from_millis(50);

/// How long a deleted object's tombstone stays for watches.
const TOMBSTONE_MS: i64 = 5 * 60 * 1000;

/// Starts the loop on the current tokio runtime.
pub(crate) fn start(kube: &Arc<Kube>) {
    handle_exits(kube);
    let kube: Weak<Kube> = Arc::downgrade(kube);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(PERIOD);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut collected_after = None;
        for pass in 0u64.. {
            ticker.tick().await;
            let Some(kube) = kube.upgrade() else { return };
            let removals = kube.store.removals();
            if collected_after != Some(removals) || pass.is_multiple_of(garbage::EVERY_PASSES) {
                match garbage::collect(&kube).await {
                    Ok(()) => collected_after = Some(removals),
                    Err(err) => {
                        tracing::warn!(error = ?err, "simulated Kubernetes: collecting garbage; the next pass retries")
                    }
                }
            }
            if let Err(err) = run(&kube, pass).await {
                tracing::warn!(error = ?err, "simulated Kubernetes: a reconcile pass failed; the next one retries");
            }
        }
    });
}

/// Starts handling the containers' exits ([`super::exits`]) on the current tokio runtime; the
/// task ends with the routes.
fn handle_exits(kube: &Arc<Kube>) {
    let Some(mut receiver) = kube.kubelet.exits.take() else { return };
    let kube: Weak<Kube> = Arc::downgrade(kube);
    tokio::spawn(async move {
        while let Some(exit) = receiver.recv().await {
            let Some(kube) = kube.upgrade() else { return };
            if let Err(err) = exit_pass(&kube, &exit).await {
                tracing::warn!(cluster = %exit.cluster, pod = %exit.name, error = ?err,
                    "simulated kubelet: recording a container's exit; the next pass does");
            }
        }
    });
}

/// The kubelet's pass over the Pod whose container ended.
async fn exit_pass(kube: &Kube, exit: &Exit) -> Result<(), ApiError> {
    let Some(pod) = kube.store.get(&exit.cluster, &PODS, &exit.namespace, &exit.name).await? else {
        return Ok(());
    };
    let another = pod["metadata"]["uid"].as_str() != Some(exit.uid.as_str());
    if another || !pod["metadata"]["deletionTimestamp"].is_null() {
        return Ok(());
    }
    let Some(private_registries) = private_registries(kube, &exit.cluster).await else { return Ok(()) };
    let node = kubelet::Node { cluster: &exit.cluster, private_registries: &private_registries };
    if kubelet::sync(kube, &node, pod).await? == kubelet::Synced::Busy {
        let retry = kube.kubelet.exits.reporter(exit.clone());
        tokio::spawn(async move {
            tokio::time::sleep(BUSY_RETRY).await;
            retry();
        });
    }
    Ok(())
}

/// One pass over every cluster.
async fn run(kube: &Kube, pass: u64) -> Result<(), ApiError> {
    let busy = kube.store.busy_clusters().await?;
    // A cluster with no Service left is not busy: its listeners go.
    kube.proxies.retain_clusters(&busy);
    for cluster in busy {
        if let Err(err) = cluster_pass(kube, &cluster).await {
            tracing::warn!(%cluster, error = ?err, "simulated Kubernetes: reconciling a cluster");
        }
    }
    if pass.is_multiple_of(240) {
        kube.store.purge_tombstones(anycloud_workflows::now_ms() - TOMBSTONE_MS).await?;
    }
    Ok(())
}

async fn cluster_pass(kube: &Kube, cluster: &str) -> Result<(), ApiError> {
    let Some(private_registries) = private_registries(kube, cluster).await else {
        return wind_down(kube, cluster).await;
    };
    let node = kubelet::Node { cluster, private_registries: &private_registries };
    for namespace in kube.store.list(cluster, &NAMESPACES, None).await? {
        if !namespace["metadata"]["deletionTimestamp"].is_null() {
            empty_namespace(kube, cluster, namespace).await?;
        }
    }
    // Finished Jobs and ended Pods are left alone: a pass reads only what may still change.
    let owned = kube.store.owned_by_unsettled(cluster, &PODS, &JOBS).await?;
    let mut by_owner: HashMap<&str, Vec<&Value>> = HashMap::new();
    for pod in &owned {
        let owner = store::controller(pod).and_then(|owner| owner["uid"].as_str());
        by_owner.entry(owner.unwrap_or_default()).or_default().push(pod);
    }
    for job in kube.store.unsettled(cluster, &JOBS).await? {
        let pods = by_owner.get(job["metadata"]["uid"].as_str().unwrap_or_default()).cloned().unwrap_or_default();
        jobs::sync(kube, cluster, job, &pods).await?;
    }
    deployments_and_replica_sets(kube, cluster).await?;
    scheduler::schedule(kube, cluster, &kube.store.unsettled(cluster, &PODS).await?).await?;
    let pods = kube.store.unsettled(cluster, &PODS).await?;
    // Endpoints before the kubelet: a Pod deleted in this pass leaves the Services before its
    // process gets SIGTERM.
    let routes = endpoints::sync(kube, cluster, &kube.store.unsettled(cluster, &SERVICES).await?, &pods).await?;
    kube.proxies.serve(cluster, &routes);
    for pod in pods {
        kubelet::sync(kube, &node, pod).await?;
    }
    Ok(())
}

/// The Deployment controller, then the ReplicaSet controller. Every object is read once and
/// grouped by owner.
async fn deployments_and_replica_sets(kube: &Kube, cluster: &str) -> Result<(), ApiError> {
    let deployments = kube.store.unsettled(cluster, &DEPLOYMENTS).await?;
    let replica_sets = kube.store.unsettled(cluster, &REPLICASETS).await?;
    let mut by_deployment: HashMap<&str, Vec<&Value>> = HashMap::new();
    for replica_set in &replica_sets {
        if let Some((_, uid)) = controller(replica_set) {
            by_deployment.entry(uid).or_default().push(replica_set);
        }
    }
    if deployments.is_empty() && replica_sets.is_empty() {
        return Ok(());
    }
    let owned = kube.store.owned_by_unsettled(cluster, &PODS, &REPLICASETS).await?;
    let mut by_replica_set: HashMap<&str, Vec<&Value>> = HashMap::new();
    for pod in &owned {
        by_replica_set.entry(controller(pod).map(|(_, uid)| uid).unwrap_or_default()).or_default().push(pod);
    }
    for deployment in &deployments {
        let uid = deployment["metadata"]["uid"].as_str().unwrap_or_default();
        let sets = by_deployment.get(uid).cloned().unwrap_or_default();
        deployments::sync(kube, cluster, deployment.clone(), &sets, &by_replica_set).await?;
    }
    // Read again: the Deployments have just scaled them.
    for replica_set in kube.store.unsettled(cluster, &REPLICASETS).await? {
        let uid = replica_set["metadata"]["uid"].as_str().unwrap_or_default();
        let pods = by_replica_set.get(uid).cloned().unwrap_or_default();
        replicasets::sync(kube, cluster, replica_set, &pods).await?;
    }
    Ok(())
}

/// The kind and uid of the object's controller.
fn controller(object: &Value) -> Option<(&str, &str)> {
    let owner = store::controller(object)?;
    Some((owner["kind"].as_str()?, owner["uid"].as_str()?))
}

/// Whether the cluster's control plane VM (as just read) is terminated (or no longer known): its
/// workloads die with its VMs.
/// The private registries the cluster's kubelets pull from, as its control plane's VM says, or
/// `None` if that VM is gone (a VM that cannot be read now is not gone: it pulls from none).
async fn private_registries(kube: &Kube, cluster: &str) -> Option<Vec<String>> {
    let control_plane = kube.machines.machine(cluster).await;
    if control_plane_gone(&control_plane) {
        return None;
    }
    Some(control_plane.ok().flatten().map(|cp| cp.private_registries).unwrap_or_default())
}

fn control_plane_gone(control_plane: &Result<Option<super::Machine>, String>) -> bool {
    match control_plane {
        Ok(None) => true,
        Ok(Some(cp)) => matches!(cp.state.as_str(), "terminated" | "shutting-down"),
        // Unknown is not gone: the next pass asks again.
        Err(_) => false,
    }
}

/// A cluster whose VMs are gone: its Jobs go, and its Pods' processes are killed at once.
async fn wind_down(kube: &Kube, cluster: &str) -> Result<(), ApiError> {
    kube.proxies.serve(cluster, &HashMap::new());
    for resource in [&JOBS, &DEPLOYMENTS, &REPLICASETS, &SERVICES, &ENDPOINTS] {
        for object in kube.store.list(cluster, resource, None).await? {
            kube.store.remove(cluster, resource, &object).await?;
        }
    }
    for pod in kube.store.list(cluster, &PODS, None).await? {
        if pod["metadata"]["deletionTimestamp"].is_null() {
            objects::delete_pod(kube, cluster, pod, Some(0)).await?;
        }
    }
    let node = kubelet::Node { cluster, private_registries: &[] };
    for pod in kube.store.list(cluster, &PODS, None).await? {
        kubelet::sync(kube, &node, pod).await?;
    }
    Ok(())
}

/// Deletes what a terminating namespace holds; removes it once it holds no Pod.
async fn empty_namespace(kube: &Kube, cluster: &str, namespace: serde_json::Value) -> Result<(), ApiError> {
    let name = namespace["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let mut pods_left = false;
    for resource in ALL.into_iter().filter(|r| r.namespaced) {
        for object in kube.store.list(cluster, resource, Some(&name)).await? {
            if resource.plural == resources::PODS.plural {
                pods_left = true;
                if object["metadata"]["deletionTimestamp"].is_null() {
                    objects::delete_pod(kube, cluster, object, None).await?;
                }
            } else {
                kube.store.remove(cluster, resource, &object).await?;
            }
        }
    }
    if !pods_left {
        kube.store.remove(cluster, &NAMESPACES, &namespace).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use async_trait::async_trait;

    use serde_json::json;

    use super::*;
    use crate::kube::{Machine, Machines, ProxyCommand, Storage, defaults, process};

    /// A cluster of one running control plane, `cp-1`.
    struct ControlPlane;

    #[async_trait]
    impl Machines for ControlPlane {
        async fn machine(&self, id: &str) -> Result<Option<Machine>, String> {
            Ok(Some(Machine {
                id: id.to_owned(),
                name: "cp".to_owned(),
                control_plane: true,
                state: "running".to_owned(),
                running: true,
                user_data: String::new(),
                private_ip: Some("10.0.0.2".to_owned()),
                public_ip: None,
                node_ready: true,
                private_registries: Vec::new(),
            }))
        }

        async fn running(&self) -> Result<Vec<Machine>, String> {
            Ok(vec![self.machine("cp-1").await?.unwrap()])
        }
    }

    #[tokio::test]
    async fn an_exit_is_recorded_with_no_pass_of_the_loop() {
        let storage = Storage::temporary().await.unwrap();
        let kubelet_dir = storage.kubelet_dir().to_owned();
        let proxy = ProxyCommand::new("/bin/false", Vec::<String>::new());
        let kube = Arc::new(Kube::new(Arc::new(ControlPlane), storage, proxy));
        // The exits are handled; the control loop is not started.
        handle_exits(&kube);
        let mut pod = json!({
            "metadata": { "name": "p" },
            "spec": { "nodeName": "cp", "restartPolicy": "Never", "containers": [
                { "name": "main", "image": "busybox", "command": ["sh", "-c", "sleep 0.3; exit 3"] },
            ] },
        });
        defaults::on_create(&PODS, "default", &mut pod);
        let pod = kube.store.create("cp-1", &PODS, pod).await.unwrap().unwrap();
        let node = kubelet::Node { cluster: "cp-1", private_registries: &[] };
        // One pass of the kubelet, as the loop's: it starts the container.
        assert_eq!(kubelet::sync(&kube, &node, pod).await.unwrap(), kubelet::Synced::Done);
        let read = || async { kube.store.get("cp-1", &PODS, "default", "p").await.unwrap().unwrap() };
        assert_eq!(read().await["status"]["phase"], "Running");
        let mut ended = read().await;
        for _ in 0..200 {
            if ended["status"]["phase"] != "Running" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            ended = read().await;
        }
        process::kill_processes_under(&kubelet_dir);
        assert_eq!(ended["status"]["phase"], "Failed", "no pass ran: only the exit can have recorded it");
        assert_eq!(ended["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3);
    }

    #[tokio::test]
    async fn a_pod_is_held_by_one_pass_at_a_time() {
        let kubelet = kubelet::Kubelet::new(std::env::temp_dir());
        let held = kubelet.hold("uid-1").unwrap();
        assert!(kubelet.hold("uid-1").is_none(), "held by the first pass");
        assert!(kubelet.hold("uid-2").is_some(), "another Pod is free");
        drop(held);
        assert!(kubelet.hold("uid-1").is_some(), "free once the first pass ends");
    }
}
