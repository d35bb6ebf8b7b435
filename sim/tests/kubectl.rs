//! kubectl 1.32 against a simulated cluster, over HTTPS with the cluster's bearer token:
//! get (server-side Tables), describe, logs (and -f), exec (its exit code is kubectl's) and
//! delete (which watches the Job until it is gone); on a Deployment behind a Service, get,
//! `rollout status`, `rollout history`, describe and delete; `apply -f` (client-side, then
//! again as a strategic merge patch) and `apply --server-side -f` of Job and Deployment
//! manifests (an unknown field refused), `create job` and `create deployment` (protobuf
//! bodies), `wait --for=condition=complete`, `patch --type=json` and `--type=merge`, `explain`
//! (from the OpenAPI v3 documents), `get --raw /version/`, `get -o yaml` of a Job with its status
//! and of the nodes; and the same through kube's typed API (create, `get_status` and
//! `replace_status`, a strategic merge patch, nodes decoded into `k8s_openapi` types). kubectl
//! is required (scripts/test installs it): without it these tests fail.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use support::{Cluster, eventually, job, kubectl, kubectl_succeeds, require_kubectl};

async fn succeeds(config: &Path, args: &[&str]) -> String {
    kubectl_succeeds(config, args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_describes_logs_execs_and_deletes() {
    require_kubectl();
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
    require_kubectl();
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

/// A Job manifest as an operator writes it.
fn job_manifest(name: &str, script: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      \
         restartPolicy: Never\n      containers:\n      - name: main\n        image: busybox:1.36\n        command: [\"sh\", \
         \"-c\", \"{script}\"]\n"
    )
}

/// A Deployment manifest of `replicas` sleepers, each container with one variable.
fn deployment_manifest(name: &str, replicas: u32, variable: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  selector:\n    \
         matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n      \
         containers:\n      - name: main\n        image: busybox:1.36\n        command: [\"sh\", \"-c\", \"exec sleep 600\"]\n        \
         env:\n        - name: {variable}\n          value: \"1\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_creates_and_waits_as_against_a_real_apiserver() {
    require_kubectl();
    let cluster = Cluster::start().await;
    let config = cluster.kubeconfig();
    let dir = cluster.dir.path();
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };

    // Client-side apply: discovery, the OpenAPI v3 documents (server-side field validation),
    // then a create; again, a strategic merge patch computed from the published schemas.
    let job = write("job.yaml", job_manifest("applied", "echo applied"));
    assert_eq!(succeeds(&config, &["apply", "-f", &job]).await, "job.batch/applied created\n");
    assert_eq!(succeeds(&config, &["apply", "-f", &job]).await, "job.batch/applied unchanged\n");
    let web = write("web.yaml", deployment_manifest("sleepy", 1, "FIRST"));
    assert_eq!(succeeds(&config, &["apply", "-f", &web]).await, "deployment.apps/sleepy created\n");
    let web = write("web.yaml", deployment_manifest("sleepy", 2, "SECOND"));
    assert_eq!(succeeds(&config, &["apply", "-f", &web]).await, "deployment.apps/sleepy configured\n");
    let deployments: Api<Deployment> = Api::default_namespaced(cluster.client());
    let sleepy = deployments.get("sleepy").await.unwrap().spec.unwrap();
    assert_eq!(sleepy.replicas, Some(2));
    let env = sleepy.template.spec.unwrap().containers[0].env.clone().unwrap();
    let names: Vec<&str> = env.iter().map(|variable| variable.name.as_str()).collect();
    assert_eq!(names, ["SECOND"], "the patch removed the variable the manifest no longer has");

    // Server-side apply.
    let job = write("job2.yaml", job_manifest("server-applied", "echo server"));
    assert_eq!(
        succeeds(&config, &["apply", "--server-side", "-f", &job]).await,
        "job.batch/server-applied serverside-applied\n"
    );
    let web = write("web2.yaml", deployment_manifest("server-sleepy", 1, "ONLY"));
    let applied = succeeds(&config, &["apply", "--server-side", "-f", &web]).await;
    assert_eq!(applied, "deployment.apps/server-sleepy serverside-applied\n");

    // Unknown fields: refused under kubectl's default strict validation, as the apiserver does.
    let bad = write(
        "bad.yaml",
        job_manifest("bad", "true").replace("  backoffLimit: 0\n", "  backoffLimit: 0\n  bogus: 1\n"),
    );
    let (code, _, stderr) = kubectl(&config, &["apply", "-f", &bad]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("strict decoding error: unknown field \"spec.bogus\""), "{stderr}");

    // Imperative creates: kubectl's typed clients.
    let created =
        succeeds(&config, &["create", "job", "made", "--image=busybox:1.36", "--", "sh", "-c", "echo made"]).await;
    assert_eq!(created, "job.batch/made created\n");
    let created =
        succeeds(&config, &["create", "deployment", "made", "--image=busybox:1.36", "--", "sleep", "600"]).await;
    assert_eq!(created, "deployment.apps/made created\n");

    for job in ["applied", "server-applied", "made"] {
        let waited =
            succeeds(&config, &["wait", "--for=condition=complete", &format!("job/{job}"), "--timeout=60s"]).await;
        assert_eq!(waited, format!("job.batch/{job} condition met\n"));
    }
    assert_eq!(succeeds(&config, &["logs", "job/made"]).await, "made\n");
    let status = succeeds(&config, &["rollout", "status", "deployment/made", "--timeout=60s"]).await;
    assert!(status.ends_with("successfully rolled out\n"), "{status}");

    let patched = succeeds(
        &config,
        &[
            "patch",
            "deployment",
            "made",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/replicas","value":2}]"#,
        ],
    )
    .await;
    assert_eq!(patched, "deployment.apps/made patched\n");
    let patched =
        succeeds(&config, &["patch", "deployment", "made", "--type=merge", "-p", r#"{"spec":{"replicas":3}}"#]).await;
    assert_eq!(patched, "deployment.apps/made patched\n");
    assert_eq!(deployments.get("made").await.unwrap().spec.unwrap().replicas, Some(3));

    let version: serde_json::Value =
        serde_json::from_str(&succeeds(&config, &["get", "--raw", "/version/"]).await).unwrap();
    assert_eq!((version["major"].as_str(), version["minor"].as_str()), (Some("1"), Some("34")), "{version}");
    let explained = succeeds(&config, &["explain", "job.spec.backoffLimit"]).await;
    assert!(explained.contains("Specifies the number of retries before marking this job failed."), "{explained}");

    let yaml = succeeds(&config, &["get", "job/applied", "-o", "yaml"]).await;
    println!("{yaml}");
    for line in ["kind: Job", "  name: applied", "status:", "  succeeded: 1", "    type: Complete", "  completionTime:"]
    {
        assert!(yaml.lines().any(|l| l.starts_with(line)), "`get -o yaml` lacks {line:?}:\n{yaml}");
    }
    let nodes = succeeds(&config, &["get", "nodes", "-o", "yaml"]).await;
    for field in [
        "bootID",
        "kernelVersion",
        "machineID",
        "systemUUID",
        "osImage",
        "containerRuntimeVersion",
        "kubeletVersion",
        "kubeProxyVersion",
        "operatingSystem",
        "architecture",
    ] {
        assert_eq!(nodes.matches(&format!("      {field}: ")).count(), 3, "{field} on each node:\n{nodes}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typed_client_creates_reads_and_replaces_status() {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::PostParams;

    let cluster = Cluster::start().await;
    let client = cluster.client();
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let created = jobs.create(&PostParams::default(), &job("typed", "echo typed", &[])).await.unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("typed"));
    let done = eventually(30, "the Job complete", || async {
        let job = jobs.get_status("typed").await.unwrap();
        (job.status.as_ref()?.succeeded == Some(1)).then_some(job)
    })
    .await;

    // PUT /status changes the status only, and only from the version it read.
    let mut audited = done.clone();
    let status = audited.status.as_mut().unwrap();
    let mut condition = status.conditions.as_ref().unwrap()[0].clone();
    condition.type_ = "Audited".into();
    condition.last_transition_time = Some(Time(jiff::Timestamp::now()));
    status.conditions.as_mut().unwrap().push(condition);
    audited.spec.as_mut().unwrap().parallelism = Some(5);
    let replaced = jobs.replace_status("typed", &PostParams::default(), &audited).await.unwrap();
    let types: Vec<String> =
        replaced.status.unwrap().conditions.unwrap().into_iter().map(|condition| condition.type_).collect();
    assert!(types.contains(&"Audited".to_owned()) && types.contains(&"Complete".to_owned()), "{types:?}");
    assert_eq!(replaced.spec.unwrap().parallelism, Some(1), "a /status write leaves the spec");
    let stale = jobs.replace_status("typed", &PostParams::default(), &audited).await.unwrap_err();
    assert!(matches!(&stale, kube::Error::Api(status) if status.code == 409), "{stale:?}");
    let read = jobs.get_status("typed").await.unwrap();
    assert!(read.status.unwrap().conditions.unwrap().iter().any(|condition| condition.type_ == "Audited"));

    // A strategic merge patch merges containers and their variables by name.
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    deployments.create(&PostParams::default(), &serde_json::from_value(web("typed")).unwrap()).await.unwrap();
    let strategic = serde_json::json!({ "spec": { "template": { "spec": { "containers": [
        { "name": "main", "env": [{ "name": "ADDED", "value": "1" }] },
    ] } } } });
    let patched = deployments.patch("web", &PatchParams::default(), &Patch::Strategic(strategic)).await.unwrap();
    let container = &patched.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some("python:3.12"), "the container was merged, not replaced");
    assert_eq!(container.env.as_ref().unwrap()[0].name, "ADDED");

    // Nodes decode into k8s_openapi's types, whose nodeInfo fields are all required.
    let nodes: Api<Node> = Api::all(client);
    let listed = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 3);
    for node in listed.items {
        let info = node.status.unwrap().node_info.unwrap();
        assert!(!info.boot_id.is_empty() && !info.machine_id.is_empty() && !info.kernel_version.is_empty());
        assert_eq!(info.operating_system, "linux");
    }
}
