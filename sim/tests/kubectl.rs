//! kubectl 1.32 against a simulated cluster, over plain HTTP with the cluster's bearer token:
//! get (server-side Tables), describe, logs (and -f), exec (its exit code is kubectl's) and
//! delete (which watches the Job until it is gone). Skipped, with a notice, without kubectl.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
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
