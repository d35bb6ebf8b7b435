//! A followed log whose stream the network cuts mid-way: the domain's follower
//! (`kubernetes::job::logs`) opens it again from the second of its last line (`sinceTime`, stamped
//! lines) and passes every line exactly once. The cluster's API is reached through a TCP relay
//! that drops every open connection on demand, as a restarted load balancer or apiserver would.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, LogParams, Patch, PatchParams};
use support::{Cluster, eventually, job};
use tokio::sync::Notify;

const NS: &str = "resume";

/// A TCP relay to `upstream` whose open connections all drop when `cut` is notified.
async fn relay(upstream: String, cut: Arc<Notify>) -> String {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut open = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (mut inbound, _) = accepted.unwrap();
                    let upstream = upstream.clone();
                    open.spawn(async move {
                        let mut outbound = tokio::net::TcpStream::connect(upstream).await.unwrap();
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    });
                }
                () = cut.notified() => open.abort_all(),
            }
        }
    });
    address.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_cut_mid_way_resumes_without_loss_or_repeats() {
    let cluster = Cluster::start().await;
    let url = cluster.url();
    let upstream = url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
    let cut = Arc::new(Notify::new());
    let through = relay(upstream.clone(), cut.clone()).await;
    let endpoint = anycloud_workflows::kubernetes::KubeEndpoint::url(url.replace(&upstream, &through));
    let client = anycloud_workflows::kubernetes::client::client(&endpoint, &cluster.secrets).unwrap();
    let stream = anycloud_workflows::kubernetes::client::stream_client(&endpoint, &cluster.secrets).unwrap();

    let namespace: Namespace = serde_json::from_value(serde_json::json!({ "metadata": { "name": NS } })).unwrap();
    let params = PatchParams::apply("test").force();
    Api::<Namespace>::all(client.clone()).patch(NS, &params, &Patch::Apply(&namespace)).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let script = "i=0; while [ $i -lt 80 ]; do i=$((i+1)); echo line $i; sleep 0.05; done";
    jobs.patch("counter", &params, &Patch::Apply(&job("counter", script, &[]))).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = eventually(20, "a started Pod", || async {
        let listed = pods.list(&ListParams::default().labels("job-name=counter")).await.unwrap();
        let pod = listed.items.into_iter().next()?;
        let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
        statuses
            .iter()
            .any(|s| s.state.as_ref().is_some_and(|s| s.running.is_some() || s.terminated.is_some()))
            .then_some(pod)
    })
    .await;
    let pod = pod.metadata.name.unwrap();

    let mut lines =
        Box::pin(anycloud_workflows::kubernetes::job::logs(&client, &stream, NS, &pod, true, None).await.unwrap());
    let mut passed = Vec::new();
    let mut cuts = 0;
    while let Some(line) = tokio::time::timeout(Duration::from_secs(60), lines.next()).await.unwrap() {
        let line = line.unwrap();
        let (_, text) = anycloud_workflows::kubernetes::log_cursor::split_stamp(&line).unwrap();
        passed.push(String::from_utf8(text.to_vec()).unwrap());
        // Cut every connection twice while the job writes.
        if matches!(passed.len(), 10 | 40) {
            cut.notify_one();
            cuts += 1;
        }
    }
    assert_eq!(cuts, 2);
    let expected: Vec<String> = (1..=80).map(|i| format!("line {i}\n")).collect();
    assert_eq!(passed, expected);

    // The stamps are the cluster's: a plain read of the log shows the same lines.
    let all = Api::<Pod>::namespaced(client, NS)
        .logs(&pod, &LogParams { timestamps: true, ..LogParams::default() })
        .await
        .unwrap();
    assert_eq!(all.lines().count(), 80);
}
