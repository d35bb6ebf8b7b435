//! Jobs on a simulated cluster, through the real kube client: they become Pods that run as
//! local processes, with their logs, exec, deletion and the apiserver's errors.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{AttachParams, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use support::{Cluster, eventually, job, process_runs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "work";

async fn setup() -> (Cluster, Api<Job>, Api<Pod>) {
    let cluster = Cluster::start().await;
    let client = cluster.client();
    let namespace: Namespace = serde_json::from_value(serde_json::json!({ "metadata": { "name": NS } })).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.patch(NS, &PatchParams::apply("test").force(), &Patch::Apply(&namespace)).await.unwrap();
    (cluster, Api::namespaced(client.clone(), NS), Api::namespaced(client, NS))
}

async fn apply(jobs: &Api<Job>, job: &Job) -> Job {
    let name = job.metadata.name.clone().unwrap();
    jobs.patch(&name, &PatchParams::apply("test").force(), &Patch::Apply(job)).await.unwrap()
}

/// Waits for the Job's condition `kind` and returns the Job.
async fn condition(jobs: &Api<Job>, name: &str, kind: &str) -> Job {
    eventually(20, &format!("Job {name} {kind}"), || async {
        let job = jobs.get(name).await.unwrap();
        let conditions = job.status.as_ref()?.conditions.as_ref()?;
        conditions.iter().any(|c| c.type_ == kind && c.status == "True").then_some(job)
    })
    .await
}

async fn the_pod(pods: &Api<Pod>, job: &str) -> Pod {
    let listed = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.unwrap();
    assert_eq!(listed.items.len(), 1, "one Pod for Job {job}");
    listed.items.into_iter().next().unwrap()
}

async fn running_pod(pods: &Api<Pod>, job: &str) -> Pod {
    eventually(20, &format!("a running Pod of {job}"), || async {
        let listed = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.unwrap();
        let pod = listed.items.into_iter().next()?;
        (pod.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(pod)
    })
    .await
}

async fn log_of(pods: &Api<Pod>, pod: &str) -> String {
    let mut lines = pods.log_stream(pod, &LogParams::default()).await.unwrap().lines();
    let mut text = String::new();
    while let Some(line) = lines.try_next().await.unwrap() {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_its_command_to_completion_and_keeps_its_log() {
    let (_cluster, jobs, pods) = setup().await;
    let applied = apply(&jobs, &job("hello", "echo hello; echo err >&2; exit 0", &[])).await;
    let uid = applied.metadata.uid.clone().unwrap();
    let selector = applied.spec.as_ref().unwrap().selector.as_ref().unwrap();
    assert_eq!(selector.match_labels.as_ref().unwrap()["batch.kubernetes.io/controller-uid"], uid);

    let done = condition(&jobs, "hello", "Complete").await;
    let status = done.status.unwrap();
    assert_eq!(status.succeeded, Some(1));
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    let kinds: Vec<_> = status.conditions.unwrap().iter().map(|c| c.type_.clone()).collect();
    assert_eq!(kinds, ["SuccessCriteriaMet", "Complete"]);

    let pod = the_pod(&pods, "hello").await;
    let name = pod.metadata.name.clone().unwrap();
    assert!(name.starts_with("hello-") && name.len() == "hello-".len() + 5, "{name}");
    let labels = pod.metadata.labels.clone().unwrap();
    assert_eq!(labels["batch.kubernetes.io/job-name"], "hello");
    assert_eq!(labels["controller-uid"], uid);
    let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
    assert!(node == "w0" || node == "w1", "scheduled on a worker, not {node}");
    let status = pod.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let container = &status.container_statuses.unwrap()[0];
    assert_eq!(container.image_id, "sim://not-pulled/busybox:1.36");
    let terminated = container.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((terminated.exit_code, terminated.reason.as_deref()), (0, Some("Completed")));

    assert_eq!(log_of(&pods, &name).await, "hello\nerr\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_command_fails_fails_with_its_exit_code() {
    let (_cluster, jobs, pods) = setup().await;
    apply(&jobs, &job("fails", "echo trying; exit 3", &[])).await;
    let failed = condition(&jobs, "fails", "Failed").await;
    let status = failed.status.unwrap();
    assert_eq!(status.failed, Some(1));
    let conditions = status.conditions.unwrap();
    assert_eq!(conditions[1].reason.as_deref(), Some("BackoffLimitExceeded"));

    let pod = the_pod(&pods, "fails").await;
    let status = pod.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let terminated = status.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
    assert_eq!((terminated.exit_code, terminated.reason.as_deref()), (3, Some("Error")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_does_not_exist_cannot_start() {
    let (_cluster, jobs, pods) = setup().await;
    let mut missing = job("missing", "", &[]);
    let container = &mut missing.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0];
    container.command = Some(vec!["no-such-program-anywhere".into()]);
    apply(&jobs, &missing).await;
    condition(&jobs, "missing", "Failed").await;
    let pod = the_pod(&pods, "missing").await;
    let terminated = pod.status.unwrap().container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
    assert_eq!((terminated.exit_code, terminated.reason.as_deref()), (128, Some("StartError")));
    assert!(terminated.message.unwrap().contains("executable file not found in $PATH"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_streams_lines_as_they_are_written() {
    let (_cluster, jobs, pods) = setup().await;
    apply(&jobs, &job("ticker", "for i in 1 2 3 4 5 6 7 8 9 10; do echo line $i; sleep 0.2; done", &[])).await;
    let pod = running_pod(&pods, "ticker").await;
    let name = pod.metadata.name.unwrap();
    let params = LogParams { follow: true, ..LogParams::default() };
    let mut lines = pods.log_stream(&name, &params).await.unwrap().lines();
    let first = tokio::time::timeout(Duration::from_secs(3), lines.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(first, "line 1");
    let second = lines.next().await.unwrap().unwrap();
    assert_eq!(second, "line 2");
    let job = jobs.get("ticker").await.unwrap();
    assert_eq!(job.status.unwrap().active, Some(1), "the first lines arrive while the Job still runs");
    let rest: Vec<String> = lines.try_collect().await.unwrap();
    assert_eq!(rest.len(), 8, "{rest:?}");
    assert_eq!(rest.last().map(String::as_str), Some("line 10"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_in_the_container_environment_and_reports_the_exit_code() {
    let (_cluster, jobs, pods) = setup().await;
    apply(&jobs, &job("sleeper", "echo $$; exec sleep 60", &[("FOO", "from-the-pod-spec")])).await;
    let pod = running_pod(&pods, "sleeper").await;
    let name = pod.metadata.name.unwrap();
    let pid: i32 =
        eventually(10, "the sleeper's pid in its log", || async { log_of(&pods, &name).await.trim().parse().ok() })
            .await;
    assert!(process_runs(pid));

    let params = AttachParams::default().stdin(true).stdout(true).stderr(true);
    let mut attached = pods.exec(&name, ["sh", "-c", "echo $FOO; cat; echo done >&2; exit 4"], &params).await.unwrap();
    let mut stdin = attached.stdin().unwrap();
    stdin.write_all(b"ping\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    drop(stdin);
    let mut stdout = String::new();
    attached.stdout().unwrap().read_to_string(&mut stdout).await.unwrap();
    let mut stderr = String::new();
    attached.stderr().unwrap().read_to_string(&mut stderr).await.unwrap();
    let status = attached.take_status().unwrap().await.unwrap();
    assert_eq!(stdout, "from-the-pod-spec\nping\n");
    assert_eq!(stderr, "done\n");
    assert_eq!(status.status.as_deref(), Some("Failure"));
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    let cause = &status.details.unwrap().causes.unwrap()[0];
    assert_eq!((cause.reason.as_deref(), cause.message.as_deref()), (Some("ExitCode"), Some("4")));

    // Deleting the Job in the foreground takes its Pod and its process with it.
    jobs.delete("sleeper", &DeleteParams::foreground()).await.unwrap();
    eventually(20, "the sleeper Job and Pod gone", || async {
        let left = pods.list(&ListParams::default().labels("job-name=sleeper")).await.unwrap().items.len();
        (left == 0 && jobs.get_opt("sleeper").await.unwrap().is_none()).then_some(())
    })
    .await;
    eventually(5, "the sleeper's process gone", || async { (!process_runs(pid)).then_some(()) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_the_apiservers() {
    let (_cluster, jobs, _pods) = setup().await;
    let api_error = |result: Result<Job, kube::Error>| match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    };
    let missing = api_error(jobs.get("nope").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "jobs.batch \"nope\" not found");

    jobs.create(&PostParams::default(), &job("twice", "true", &[])).await.unwrap();
    let exists = api_error(jobs.create(&PostParams::default(), &job("twice", "true", &[])).await);
    assert_eq!((exists.code, exists.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(exists.message, "jobs.batch \"twice\" already exists");

    let mut empty = job("empty", "true", &[]);
    empty.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers.clear();
    let invalid = api_error(jobs.create(&PostParams::default(), &empty).await);
    assert_eq!((invalid.code, invalid.reason.as_str()), (422, "Invalid"));
    assert_eq!(invalid.message, "Job.batch \"empty\" is invalid: spec.template.spec.containers: Required value");

    let bad_name = api_error(jobs.create(&PostParams::default(), &job("Bad_Name", "true", &[])).await);
    assert_eq!((bad_name.code, bad_name.reason.as_str()), (422, "Invalid"));
    assert!(bad_name.message.contains("a lowercase RFC 1123 subdomain"), "{}", bad_name.message);

    // Only the cluster's own token opens its API: not another, not a prefix of it, not none.
    let token = _cluster.secrets.api_token.clone();
    for wrong in [format!("{token}x"), token[..token.len() - 1].to_owned(), "anycloud".to_owned(), String::new()] {
        let secrets = anycloud_workflows::cluster::secrets::ClusterSecrets {
            api_token: wrong.clone(),
            .._cluster.secrets.clone()
        };
        let endpoint = anycloud_workflows::kubernetes::KubeEndpoint::url(_cluster.url());
        let client = anycloud_workflows::kubernetes::client::client(&endpoint, &secrets).unwrap();
        let refused = api_error(Api::<Job>::namespaced(client, "anycloud").get("twice").await);
        assert_eq!((refused.code, refused.reason.as_str()), (401, "Unauthorized"), "token {wrong:?}");
    }

    let elsewhere: Api<Job> = Api::namespaced(_cluster.client(), "no-such-namespace");
    let no_namespace = api_error(elsewhere.create(&PostParams::default(), &job("x", "true", &[])).await);
    assert_eq!((no_namespace.code, no_namespace.message.as_str()), (404, "namespaces \"no-such-namespace\" not found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusters_processes_die_with_its_vms() {
    let (cluster, jobs, pods) = setup().await;
    apply(&jobs, &job("doomed", "echo $$; exec sleep 60", &[])).await;
    let pod = running_pod(&pods, "doomed").await;
    let name = pod.metadata.name.unwrap();
    let pid: i32 =
        eventually(10, "the process's pid in its log", || async { log_of(&pods, &name).await.trim().parse().ok() })
            .await;
    cluster.terminate_vms();
    eventually(10, "the process gone with its VMs", || async { (!process_runs(pid)).then_some(()) }).await;
}
