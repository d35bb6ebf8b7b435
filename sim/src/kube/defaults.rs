//! What the apiserver fills in on create: metadata (uid, creation time, generation) and the
//! defaults of namespaces, Jobs, Pods, Deployments, ReplicaSets and Services that clients read
//! back (a Job's selector and its template's labels, `backoffLimit: 6`, a Deployment's
//! `RollingUpdate` strategy at 25%/25%, a Service's `ClusterIP` type and `targetPort`,
//! containers' `imagePullPolicy`, ...). A Service's cluster IP is allocated by
//! [`super::cluster_ips::allocate`] before these defaults, which need no I/O.

use serde_json::{Map, Value, json};

use super::resources::{self, Resource};
use super::time;

/// The label and selector key that ties a Job's Pods to it.
pub(crate) const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// The label that names a Pod's Job.
pub(crate) const JOB_NAME: &str = "batch.kubernetes.io/job-name";

/// Gives a new object its kind, server-set metadata and defaults.
pub(crate) fn on_create(resource: &Resource, namespace: &str, object: &mut Value) {
    object["kind"] = json!(resource.kind);
    object["apiVersion"] = json!(resource.api_version());
    let metadata = child(root(object), "metadata");
    if resource.namespaced {
        metadata.insert("namespace".into(), json!(namespace));
    }
    metadata.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    metadata.insert("creationTimestamp".into(), json!(time::now()));
    metadata.remove("resourceVersion");
    metadata.remove("deletionTimestamp");
    // Kinds without a spec have no generation.
    if ![resources::NAMESPACES.plural, resources::EVENTS.plural, resources::SECRETS.plural].contains(&resource.plural) {
        metadata.insert("generation".into(), json!(1));
    }
    match resource.plural {
        "namespaces" => namespace_defaults(object),
        "jobs" => job(object),
        "pods" => pod(object),
        "deployments" => deployment(object),
        "replicasets" => replica_set(object),
        "services" => service(object),
        _ => {}
    }
}

/// A namespace, as the apiserver shows it.
pub(crate) fn namespace(name: &str) -> Value {
    let mut namespace = json!({ "metadata": { "name": name } });
    on_create(&resources::NAMESPACES, "", &mut namespace);
    namespace
}

fn namespace_defaults(namespace: &mut Value) {
    let name = namespace["metadata"]["name"].clone();
    child(child(root(namespace), "metadata"), "labels").insert("kubernetes.io/metadata.name".into(), name);
    namespace["spec"] = json!({ "finalizers": ["kubernetes"] });
    namespace["status"] = json!({ "phase": "Active" });
}

/// A Job's defaults, selector and template labels (again after every apply: they derive from
/// its uid and name, which do not change).
pub(crate) fn job(job: &mut Value) {
    let uid = job["metadata"]["uid"].clone();
    let name = job["metadata"]["name"].clone();
    let spec = child(root(job), "spec");
    for (field, value) in [
        ("parallelism", json!(1)),
        ("completions", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("podReplacementPolicy", json!("TerminatingOrFailed")),
    ] {
        spec.entry(field).or_insert(value);
    }
    spec.insert("selector".into(), json!({ "matchLabels": { CONTROLLER_UID: uid } }));
    let template = child(spec, "template");
    let labels = child(child(template, "metadata"), "labels");
    for key in [CONTROLLER_UID, "controller-uid"] {
        labels.insert(key.into(), uid.clone());
    }
    for key in [JOB_NAME, "job-name"] {
        labels.insert(key.into(), name.clone());
    }
    pod_spec(child(template, "spec"), None);
    child(root(job), "status");
}

/// A Pod's defaults.
pub(crate) fn pod(pod: &mut Value) {
    pod_spec(child(root(pod), "spec"), Some("Always"));
    if pod["status"].is_null() {
        pod["status"] = json!({ "phase": "Pending", "qosClass": "BestEffort" });
    }
}

fn pod_spec(spec: &mut Map<String, Value>, restart_policy: Option<&str>) {
    if let Some(policy) = restart_policy {
        spec.entry("restartPolicy").or_insert(json!(policy));
    }
    for (field, value) in [
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("terminationGracePeriodSeconds", json!(30)),
    ] {
        spec.entry(field).or_insert(value);
    }
    if let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut) {
        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
            let latest = container.get("image").and_then(Value::as_str).is_some_and(|image| {
                !image.rsplit('/').next().unwrap_or(image).contains(':') || image.ends_with(":latest")
            });
            if let Some(ports) = container.get_mut("ports").and_then(Value::as_array_mut) {
                for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                    port.entry("protocol").or_insert(json!("TCP"));
                }
            }
            for (field, value) in [
                ("imagePullPolicy", json!(if latest { "Always" } else { "IfNotPresent" })),
                ("resources", json!({})),
                ("terminationMessagePath", json!("/dev/termination-log")),
                ("terminationMessagePolicy", json!("File")),
            ] {
                container.entry(field).or_insert(value);
            }
        }
    }
}

/// A Deployment's defaults (again after every apply, so that its template compares equal to
/// its ReplicaSets').
pub(crate) fn deployment(deployment: &mut Value) {
    let spec = child(root(deployment), "spec");
    for (field, value) in
        [("replicas", json!(1)), ("revisionHistoryLimit", json!(10)), ("progressDeadlineSeconds", json!(600))]
    {
        spec.entry(field).or_insert(value);
    }
    let strategy = child(spec, "strategy");
    strategy.entry("type").or_insert(json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        let rolling = child(strategy, "rollingUpdate");
        rolling.entry("maxSurge").or_insert(json!("25%"));
        rolling.entry("maxUnavailable").or_insert(json!("25%"));
    }
    pod_template(child(spec, "template"));
    child(root(deployment), "status");
}

/// A ReplicaSet's defaults.
pub(crate) fn replica_set(replica_set: &mut Value) {
    let spec = child(root(replica_set), "spec");
    spec.entry("replicas").or_insert(json!(1));
    pod_template(child(spec, "template"));
    child(root(replica_set), "status");
}

fn pod_template(template: &mut Map<String, Value>) {
    child(template, "metadata");
    pod_spec(child(template, "spec"), Some("Always"));
}

/// A Service's defaults (its `clusterIP` is given by the caller, see [`super::cluster_ips`]).
pub(crate) fn service(service: &mut Value) {
    let spec = child(root(service), "spec");
    for (field, value) in [
        ("type", json!("ClusterIP")),
        ("sessionAffinity", json!("None")),
        ("ipFamilies", json!(["IPv4"])),
        ("ipFamilyPolicy", json!("SingleStack")),
        ("internalTrafficPolicy", json!("Cluster")),
    ] {
        spec.entry(field).or_insert(value);
    }
    if let Some(ip) = spec.get("clusterIP").cloned() {
        spec.insert("clusterIPs".into(), json!([ip]));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.entry("protocol").or_insert(json!("TCP"));
            if let Some(number) = port.get("port").cloned() {
                port.entry("targetPort").or_insert(number);
            }
        }
    }
    let status = child(root(service), "status");
    status.entry("loadBalancer").or_insert(json!({}));
}

/// The value as an object, made one if it is not.
pub(crate) fn root(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(map) => map,
        _ => unreachable!("just made an object"),
    }
}

/// The object at `key` of `map`, made one if it is not.
pub(crate) fn child<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    root(map.entry(key).or_insert(Value::Null))
}
