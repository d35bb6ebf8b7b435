//! Secrets on a simulated cluster, as a real apiserver and kubelet treat them, through the real
//! kube client and kubectl: stored and refused as the apiserver does (`stringData` merged into
//! `data`, keys, the 1 MiB limit, base64, registry secrets, an immutable type), printed by
//! `kubectl get secret`, taken by the garbage collector when their owners go and by their
//! namespace's deletion; given to containers by `envFrom` and `secretKeyRef` (a missing one
//! holds the container in `CreateContainerConfigError` until it exists); and pull secrets for a
//! private registry (`ErrImagePull`, `ImagePullBackOff`, then the pull once a registry secret
//! exists).

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, Secret};
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Cluster, eventually, job, kubectl, kubectl_succeeds, require_kubectl};

fn secret(name: &str, body: Value) -> Secret {
    let mut object = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": name } });
    object.as_object_mut().unwrap().extend(body.as_object().unwrap().clone());
    serde_json::from_value(object).unwrap()
}

fn api_error<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn data(secret: &Secret) -> BTreeMap<String, String> {
    secret
        .data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| (key, String::from_utf8(value.0).unwrap()))
        .collect()
}

/// A `.dockerconfigjson` with credentials for `host`.
fn docker_config(host: &str) -> String {
    json!({ "auths": { host: { "username": "robot", "password": "s3cret", "auth": STANDARD.encode("robot:s3cret") } } })
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_stored_and_refused_as_the_apiserver_does() {
    require_kubectl();
    let cluster = Cluster::start().await;
    let secrets: Api<Secret> = Api::default_namespaced(cluster.client());
    let created = secrets
        .create(
            &PostParams::default(),
            &secret(
                "db",
                json!({ "data": { "user": STANDARD.encode("admin") }, "stringData": { "password": "hunter2" } }),
            ),
        )
        .await
        .unwrap();
    assert_eq!(created.type_.as_deref(), Some("Opaque"));
    assert!(created.string_data.is_none(), "{created:?}");
    let read = secrets.get("db").await.unwrap();
    assert_eq!(data(&read), BTreeMap::from([("password".into(), "hunter2".into()), ("user".into(), "admin".into())]));
    // The raw object carries `data` only, base64.
    let raw: Api<DynamicObject> = Api::default_namespaced_with(cluster.client(), &ApiResource::erase::<Secret>(&()));
    let raw_db = raw.get("db").await.unwrap();
    assert_eq!(raw_db.data["data"]["password"], STANDARD.encode("hunter2"));
    assert!(raw_db.data.get("stringData").is_none());

    // Server-side apply, as the workflows write them: stringData over the stored data.
    let applied = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "db" },
                          "stringData": { "password": "correct-horse" } });
    secrets.patch("db", &PatchParams::apply("test").force(), &Patch::Apply(applied)).await.unwrap();
    assert_eq!(data(&secrets.get("db").await.unwrap())["password"], "correct-horse");

    // What the apiserver refuses, in its words.
    let bad_key =
        api_error(secrets.create(&PostParams::default(), &secret("k", json!({ "stringData": { "a b": "x" } }))).await);
    assert_eq!((bad_key.code, bad_key.reason.as_str()), (422, "Invalid"));
    assert!(
        bad_key.message.starts_with("Secret \"k\" is invalid: data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters"),
        "{}",
        bad_key.message
    );
    let big = "x".repeat(1024 * 1024 + 1);
    let too_big =
        api_error(secrets.create(&PostParams::default(), &secret("big", json!({ "stringData": { "a": big } }))).await);
    assert_eq!(too_big.code, 422);
    assert_eq!(too_big.message, "Secret \"big\" is invalid: data: Too long: may not be more than 1048576 bytes");
    let exactly = "x".repeat(1024 * 1024);
    secrets.create(&PostParams::default(), &secret("max", json!({ "stringData": { "a": exactly } }))).await.unwrap();
    let no_config = api_error(
        secrets
            .create(
                &PostParams::default(),
                &secret("reg", json!({ "type": "kubernetes.io/dockerconfigjson", "stringData": { "x": "y" } })),
            )
            .await,
    );
    assert_eq!(no_config.message, "Secret \"reg\" is invalid: data[.dockerconfigjson]: Required value");
    let not_json = api_error(
        secrets
            .create(
                &PostParams::default(),
                &secret(
                    "reg",
                    json!({ "type": "kubernetes.io/dockerconfigjson", "stringData": { ".dockerconfigjson": "{" } }),
                ),
            )
            .await,
    );
    assert!(
        not_json.message.starts_with(
            "Secret \"reg\" is invalid: data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\""
        ),
        "{}",
        not_json.message
    );
    let undecodable =
        json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "b64" }, "data": { "a": "not base64!" } });
    let undecodable =
        api_error(raw.create(&PostParams::default(), &serde_json::from_value(undecodable).unwrap()).await);
    assert_eq!((undecodable.code, undecodable.reason.as_str()), (400, "BadRequest"));
    assert!(undecodable.message.contains("illegal base64 data at input byte 3"), "{}", undecodable.message);
    let retyped = json!({ "type": "kubernetes.io/dockerconfigjson", "stringData": { ".dockerconfigjson": docker_config("ghcr.io") } });
    let retyped = api_error(secrets.patch("db", &PatchParams::default(), &Patch::Merge(retyped)).await);
    assert_eq!(
        retyped.message,
        "Secret \"db\" is invalid: type: Invalid value: \"kubernetes.io/dockerconfigjson\": field is immutable"
    );
    for name in ["k", "big", "reg", "b64"] {
        assert!(secrets.get_opt(name).await.unwrap().is_none(), "{name} was stored");
    }
    secrets
        .create(
            &PostParams::default(),
            &secret("ghcr", json!({ "type": "kubernetes.io/dockerconfigjson", "stringData": { ".dockerconfigjson": docker_config("ghcr.io") } })),
        )
        .await
        .unwrap();

    // kubectl: the apiserver's table, and `data` (never `stringData`) in YAML.
    let config = cluster.kubeconfig();
    let table = kubectl_succeeds(&config, &["get", "secret"]).await;
    let lines: Vec<Vec<&str>> = table.lines().map(|line| line.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["NAME", "TYPE", "DATA", "AGE"], "{table}");
    assert_eq!(lines[1][..3], ["db", "Opaque", "2"], "{table}");
    assert_eq!(lines[2][..3], ["ghcr", "kubernetes.io/dockerconfigjson", "1"], "{table}");
    let yaml = kubectl_succeeds(&config, &["get", "secret", "db", "-o", "yaml"]).await;
    assert!(yaml.contains(&format!("password: {}", STANDARD.encode("correct-horse"))), "{yaml}");
    assert!(!yaml.contains("stringData") && !yaml.contains("correct-horse"), "{yaml}");
    let manifest = cluster.dir.path().join("secret.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: from-kubectl\nstringData:\n  token: abc\n",
    )
    .unwrap();
    kubectl_succeeds(&config, &["apply", "--server-side", "-f", manifest.to_str().unwrap()]).await;
    assert_eq!(data(&secrets.get("from-kubectl").await.unwrap())["token"], "abc");
    let (code, _, stderr) = kubectl(&config, &["create", "secret", "generic", "Bad_Name", "--from-literal=a=b"]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("a lowercase RFC 1123 subdomain"), "{stderr}");

    // Deleted, and gone with their namespace.
    secrets.delete("max", &DeleteParams::default()).await.unwrap();
    assert!(secrets.get_opt("max").await.unwrap().is_none());
    let namespaces: Api<Namespace> = Api::all(cluster.client());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({ "metadata": { "name": "team" } })).unwrap())
        .await
        .unwrap();
    let team: Api<Secret> = Api::namespaced(cluster.client(), "team");
    team.create(&PostParams::default(), &secret("token", json!({ "stringData": { "t": "x" } }))).await.unwrap();
    namespaces.delete("team", &DeleteParams::default()).await.unwrap();
    eventually(10, "the namespace and its Secret gone", || async {
        (namespaces.get_opt("team").await.unwrap().is_none() && team.get_opt("token").await.unwrap().is_none())
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_goes_when_all_its_owners_are_gone() {
    let cluster = Cluster::start().await;
    let secrets: Api<Secret> = Api::default_namespaced(cluster.client());
    let jobs: Api<Job> = Api::default_namespaced(cluster.client());
    let mut uids = Vec::new();
    for name in ["one", "two"] {
        let created = jobs.create(&PostParams::default(), &job(name, "sleep 30", &[])).await.unwrap();
        uids.push(created.metadata.uid.unwrap());
    }
    let owner = |name: &str, uid: &str| json!({ "apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid });
    let owned = |name: &str, owners: Vec<Value>| {
        secret(name, json!({ "metadata": { "name": name, "ownerReferences": owners }, "stringData": { "k": "v" } }))
    };
    secrets.create(&PostParams::default(), &owned("of-one", vec![owner("one", &uids[0])])).await.unwrap();
    secrets
        .create(&PostParams::default(), &owned("of-both", vec![owner("one", &uids[0]), owner("two", &uids[1])]))
        .await
        .unwrap();
    secrets.create(&PostParams::default(), &owned("unowned", vec![])).await.unwrap();

    jobs.delete("one", &DeleteParams::background()).await.unwrap();
    eventually(10, "the Secret of the deleted Job collected", || async {
        secrets.get_opt("of-one").await.unwrap().is_none().then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(secrets.get_opt("of-both").await.unwrap().is_some(), "one owner is left: it stays");
    jobs.delete("two", &DeleteParams::background()).await.unwrap();
    eventually(10, "the Secret of both collected", || async {
        secrets.get_opt("of-both").await.unwrap().is_none().then_some(())
    })
    .await;
    // An owner that never existed: collected too (on the collector's periodic look).
    secrets
        .create(
            &PostParams::default(),
            &owned("of-nobody", vec![owner("ghost", "00000000-0000-0000-0000-000000000000")]),
        )
        .await
        .unwrap();
    eventually(15, "the Secret of a missing owner collected", || async {
        secrets.get_opt("of-nobody").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(secrets.get_opt("unowned").await.unwrap().is_some());
}

/// A Job whose container prints the variables it got from Secrets.
fn job_with_secrets(name: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": name },
        "spec": { "backoffLimit": 0, "template": { "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": "busybox:1.36",
                "command": ["sh", "-c", "echo user=$DB_user pass=$PASSWORD opt=${OPTIONAL:-none} plain=$PLAIN"],
                "envFrom": [{ "secretRef": { "name": "db" }, "prefix": "DB_" }, { "secretRef": { "name": "absent", "optional": true } }],
                "env": [
                    { "name": "PASSWORD", "valueFrom": { "secretKeyRef": { "name": "db", "key": "password" } } },
                    { "name": "OPTIONAL", "valueFrom": { "secretKeyRef": { "name": "db", "key": "nope", "optional": true } } },
                    { "name": "PLAIN", "value": "p" },
                ],
            }],
        } } },
    }))
    .unwrap()
}

async fn waiting(pods: &Api<Pod>, job: &str) -> Option<(String, String)> {
    let pod = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.unwrap().items.pop()?;
    let state = pod.status?.container_statuses?.pop()?.state?;
    let waiting = state.waiting?;
    Some((waiting.reason?, waiting.message.unwrap_or_default()))
}

async fn events_of(cluster: &Cluster, pod: &str) -> Vec<Event> {
    let events: Api<Event> = Api::default_namespaced(cluster.client());
    let all = events.list(&ListParams::default()).await.unwrap().items;
    all.into_iter().filter(|event| event.involved_object.name.as_deref() == Some(pod)).collect()
}

async fn pod_of(pods: &Api<Pod>, job: &str) -> String {
    let listed = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.unwrap();
    listed.items[0].metadata.name.clone().unwrap()
}

async fn log_of(pods: &Api<Pod>, job: &str) -> Option<String> {
    let name = pod_of(pods, job).await;
    let log = pods.logs(&name, &LogParams::default()).await.ok()?;
    (!log.is_empty()).then_some(log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_wait_for_their_secrets_then_take_them() {
    let cluster = Cluster::start().await;
    let secrets: Api<Secret> = Api::default_namespaced(cluster.client());
    let jobs: Api<Job> = Api::default_namespaced(cluster.client());
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());

    jobs.create(&PostParams::default(), &job_with_secrets("uses-db")).await.unwrap();
    let (reason, message) = eventually(10, "the container waiting for its Secret", || waiting(&pods, "uses-db")).await;
    assert_eq!((reason.as_str(), message.as_str()), ("CreateContainerConfigError", "secret \"db\" not found"));
    let pod = pod_of(&pods, "uses-db").await;
    let failed = events_of(&cluster, &pod).await;
    assert!(
        failed.iter().any(|e| e.reason.as_deref() == Some("Failed")
            && e.type_.as_deref() == Some("Warning")
            && e.message.as_deref() == Some("Error: secret \"db\" not found")),
        "{failed:#?}"
    );

    // The Secret without the key: the kubelet names the key.
    secrets.create(&PostParams::default(), &secret("db", json!({ "stringData": { "user": "admin" } }))).await.unwrap();
    let (reason, message) = eventually(10, "the container waiting for its key", || async {
        waiting(&pods, "uses-db").await.filter(|(_, message)| message.contains("couldn't find key"))
    })
    .await;
    assert_eq!(
        (reason.as_str(), message.as_str()),
        ("CreateContainerConfigError", "couldn't find key password in Secret default/db")
    );

    // Once it is there, the container starts with it.
    secrets
        .patch("db", &PatchParams::default(), &Patch::Merge(json!({ "stringData": { "password": "hunter2" } })))
        .await
        .unwrap();
    let log = eventually(15, "the Job's log", || log_of(&pods, "uses-db")).await;
    assert_eq!(log.trim(), "user=admin pass=hunter2 opt=none plain=p");
    // The Pod carries the references, never the values.
    let pod = serde_json::to_string(&pods.get(&pod_of(&pods, "uses-db").await).await.unwrap()).unwrap();
    assert!(!pod.contains("hunter2") && pod.contains("secretKeyRef"), "{pod}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_images_are_pulled_with_a_registry_secret_only() {
    let cluster = Cluster::start().await;
    cluster.set_private_registries(&["ghcr.io"]);
    let secrets: Api<Secret> = Api::default_namespaced(cluster.client());
    let jobs: Api<Job> = Api::default_namespaced(cluster.client());
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    let on_image = |name: &str, image: &str, pull_secret: Option<&str>| -> Job {
        let mut job = serde_json::to_value(job(name, "echo pulled", &[])).unwrap();
        job["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        if let Some(pull_secret) = pull_secret {
            job["spec"]["template"]["spec"]["imagePullSecrets"] = json!([{ "name": pull_secret }]);
        }
        serde_json::from_value(job).unwrap()
    };

    // Public images keep running as before.
    jobs.create(&PostParams::default(), &on_image("public", "docker.io/library/busybox:1.36", None)).await.unwrap();
    // A private one, without a pull secret, and with one that does not exist yet.
    jobs.create(&PostParams::default(), &on_image("bare", "ghcr.io/acme/batch:latest", None)).await.unwrap();
    jobs.create(&PostParams::default(), &on_image("later", "ghcr.io/acme/batch", Some("ghcr"))).await.unwrap();
    let denied = "failed to pull and unpack image \"ghcr.io/acme/batch:latest\": failed to resolve reference \
                  \"ghcr.io/acme/batch:latest\": pull access denied, repository does not exist or may require \
                  authorization: authorization failed: no basic auth credentials";
    let (reason, message) = eventually(10, "the private image backing off", || async {
        waiting(&pods, "bare").await.filter(|(reason, _)| reason == "ImagePullBackOff")
    })
    .await;
    assert_eq!(reason, "ImagePullBackOff");
    assert_eq!(message, format!("Back-off pulling image \"ghcr.io/acme/batch:latest\": ErrImagePull: {denied}"));
    eventually(10, "the public image's Job log", || log_of(&pods, "public")).await;

    let bare = pod_of(&pods, "bare").await;
    let events = events_of(&cluster, &bare).await;
    let said = |reason: &str, message: &str| {
        events.iter().any(|e| e.reason.as_deref() == Some(reason) && e.message.as_deref() == Some(message))
    };
    assert!(said("Pulling", "Pulling image \"ghcr.io/acme/batch:latest\""), "{events:#?}");
    assert!(said("Failed", &format!("Failed to pull image \"ghcr.io/acme/batch:latest\": {denied}")), "{events:#?}");
    assert!(said("Failed", "Error: ErrImagePull"), "{events:#?}");
    assert!(said("BackOff", "Back-off pulling image \"ghcr.io/acme/batch:latest\""), "{events:#?}");
    let later = pod_of(&pods, "later").await;
    let missing = events_of(&cluster, &later).await;
    assert!(
        missing.iter().any(|e| e.reason.as_deref() == Some("FailedToRetrieveImagePullSecret")
            && e.message.as_deref()
                == Some(
                    "Unable to retrieve some image pull secrets (ghcr); attempting to pull the image may not succeed."
                )),
        "{missing:#?}"
    );

    // A registry secret for another host does not open ghcr.io; one for it does, on the next try.
    secrets
        .create(
            &PostParams::default(),
            &secret("quay", json!({ "type": "kubernetes.io/dockerconfigjson", "stringData": { ".dockerconfigjson": docker_config("quay.io") } })),
        )
        .await
        .unwrap();
    jobs.create(&PostParams::default(), &on_image("wrong-host", "ghcr.io/acme/batch:latest", Some("quay")))
        .await
        .unwrap();
    secrets
        .create(
            &PostParams::default(),
            &secret("ghcr", json!({ "type": "kubernetes.io/dockerconfigjson", "stringData": { ".dockerconfigjson": docker_config("https://ghcr.io") } })),
        )
        .await
        .unwrap();
    let log = eventually(30, "the image pulled once its secret exists", || log_of(&pods, "later")).await;
    assert_eq!(log.trim(), "pulled");
    let (reason, _) = eventually(10, "the wrong host's secret refused", || waiting(&pods, "wrong-host")).await;
    assert!(reason == "ErrImagePull" || reason == "ImagePullBackOff", "{reason}");
    assert!(waiting(&pods, "bare").await.is_some(), "a Pod without pull secrets still waits");
}
