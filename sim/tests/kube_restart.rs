//! A Job's process outlives the API that started it, as a real container outlives a restart of
//! its control plane: the next API finds it again, and learns how it ended even if it ended
//! while no API ran.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, LogParams, Patch, PatchParams};
use support::{Cluster, eventually, job, process_runs};

async fn log_lines(pods: &Api<Pod>, name: &str) -> Vec<String> {
    pods.log_stream(name, &LogParams::default()).await.unwrap().lines().try_collect().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_survives_the_death_of_its_api() {
    let mut cluster = Cluster::start().await;
    let script = "echo $$; for i in $(seq 1 12); do echo line $i; sleep 0.25; done";
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    let jobs: Api<Job> = Api::default_namespaced(cluster.client());
    jobs.patch("long", &PatchParams::apply("test"), &Patch::Apply(job("long", script, &[]))).await.unwrap();
    let (name, pid) = eventually(20, "the Job's process running", || async {
        let pod = pods.list(&ListParams::default().labels("job-name=long")).await.unwrap().items.into_iter().next()?;
        let name = pod.metadata.name.clone()?;
        let log = pods.logs(&name, &LogParams::default()).await.ok()?;
        let pid: i32 = log.lines().next()?.parse().ok()?;
        Some((name, pid))
    })
    .await;

    cluster.kill_api().await;
    assert!(process_runs(pid), "the process runs on while no API does");
    // It ends while no API runs (12 lines at 250 ms).
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!process_runs(pid));

    cluster.serve().await;
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    let jobs: Api<Job> = Api::default_namespaced(cluster.client());
    eventually(20, "the Job complete after the restart", || async {
        let job = jobs.get("long").await.unwrap();
        (job.status?.succeeded == Some(1)).then_some(())
    })
    .await;
    let pod = pods.get(&name).await.unwrap();
    assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Succeeded"));
    let lines = log_lines(&pods, &name).await;
    assert_eq!(lines.len(), 13, "{lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some("line 12"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_api_follows_a_process_that_still_runs() {
    let mut cluster = Cluster::start().await;
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    let jobs: Api<Job> = Api::default_namespaced(cluster.client());
    let script = "echo $$; sleep 2; echo finished";
    jobs.patch("across", &PatchParams::apply("test"), &Patch::Apply(job("across", script, &[]))).await.unwrap();
    let (name, pid) = eventually(20, "the Job's process running", || async {
        let pod =
            pods.list(&ListParams::default().labels("job-name=across")).await.unwrap().items.into_iter().next()?;
        let name = pod.metadata.name.clone()?;
        let log = pods.logs(&name, &LogParams::default()).await.ok()?;
        let pid: i32 = log.lines().next()?.parse().ok()?;
        Some((name, pid))
    })
    .await;

    cluster.kill_api().await;
    cluster.serve().await;
    assert!(process_runs(pid), "the process still runs when the new API starts");
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    let jobs: Api<Job> = Api::default_namespaced(cluster.client());
    assert_eq!(pods.get(&name).await.unwrap().status.unwrap().phase.as_deref(), Some("Running"));
    eventually(20, "the Job complete", || async {
        (jobs.get("across").await.unwrap().status?.succeeded == Some(1)).then_some(())
    })
    .await;
    assert_eq!(log_lines(&pods, &name).await, [pid.to_string(), "finished".to_owned()]);
}
