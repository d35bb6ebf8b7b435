//! Server-side printing: `kubectl get` asks for a `meta.k8s.io/v1` `Table`
//! (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`) and prints its columns as they come.
//! The columns are the apiserver's own (its `printers.go`): jobs `NAME STATUS COMPLETIONS
//! DURATION AGE`, pods `NAME READY STATUS RESTARTS AGE` (`-o wide`: `IP NODE ...`), nodes
//! `NAME STATUS ROLES AGE VERSION`, namespaces `NAME STATUS AGE`, deployments `NAME READY
//! UP-TO-DATE AVAILABLE AGE`, replicasets `NAME DESIRED CURRENT READY AGE`, services `NAME TYPE
//! CLUSTER-IP EXTERNAL-IP PORT(S) AGE`, endpoints `NAME ENDPOINTS AGE`, secrets `NAME TYPE DATA AGE`, and `NAME AGE` for the
//! rest.

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::resources::Resource;
use super::time;

/// Whether the client asked for a Table.
pub(crate) fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .and_then(|accept| accept.split(',').next())
        .is_some_and(|first| first.contains("as=Table"))
}

/// The Table of these objects; each row carries the object (`includeObject=Object`) or, by
/// default, its metadata.
pub(crate) fn table(resource: &Resource, objects: &[Value], revision: i64, include_object: Option<&str>) -> Value {
    let columns = columns(resource.plural);
    let definitions: Vec<Value> = columns
        .iter()
        .map(|(name, kind, priority)| {
            let format = if *name == "Name" { "name" } else { "" };
            json!({ "name": name, "type": kind, "format": format, "description": "", "priority": priority })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let row_object = match include_object {
                Some("Object") => object.clone(),
                Some("None") => Value::Null,
                _ => json!({
                    "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"],
                }),
            };
            json!({ "cells": cells(resource.plural, object), "object": row_object })
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": { "resourceVersion": revision.to_string() },
        "columnDefinitions": definitions, "rows": rows,
    })
}

/// (name, type, priority): priority 1 is shown by `-o wide` only.
fn columns(plural: &str) -> Vec<(&'static str, &'static str, u8)> {
    match plural {
        "jobs" => vec![
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Completions", "string", 0),
            ("Duration", "string", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ],
        "pods" => vec![
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ],
        "nodes" => vec![
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
        ],
        "namespaces" => vec![("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)],
        "deployments" => vec![
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Up-to-date", "integer", 0),
            ("Available", "integer", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ],
        "replicasets" => vec![
            ("Name", "string", 0),
            ("Desired", "integer", 0),
            ("Current", "integer", 0),
            ("Ready", "integer", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ],
        "services" => vec![
            ("Name", "string", 0),
            ("Type", "string", 0),
            ("Cluster-IP", "string", 0),
            ("External-IP", "string", 0),
            ("Port(s)", "string", 0),
            ("Age", "string", 0),
            ("Selector", "string", 1),
        ],
        "endpoints" => vec![("Name", "string", 0), ("Endpoints", "string", 0), ("Age", "string", 0)],
        "secrets" => vec![("Name", "string", 0), ("Type", "string", 0), ("Data", "string", 0), ("Age", "string", 0)],
        _ => vec![("Name", "string", 0), ("Age", "string", 0)],
    }
}

fn cells(plural: &str, object: &Value) -> Vec<Value> {
    let metadata = &object["metadata"];
    let name = json!(metadata["name"]);
    let age = json!(time::age(&metadata["creationTimestamp"]));
    match plural {
        "jobs" => {
            let status = &object["status"];
            let spec = &object["spec"];
            let containers = spec["template"]["spec"]["containers"].as_array().cloned().unwrap_or_default();
            let joined =
                |field: &str| containers.iter().filter_map(|c| c[field].as_str()).collect::<Vec<_>>().join(",");
            let selector = spec["selector"]["matchLabels"]
                .as_object()
                .map(|labels| {
                    labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .join(",");
            let duration = match time::seconds(&status["startTime"]) {
                Some(start) => {
                    let end = time::seconds(&status["completionTime"]).unwrap_or_else(time::now_seconds);
                    time::human(end - start)
                }
                None => String::new(),
            };
            let completions =
                format!("{}/{}", status["succeeded"].as_i64().unwrap_or(0), spec["completions"].as_i64().unwrap_or(1));
            vec![
                name,
                json!(job_status(object)),
                json!(completions),
                json!(duration),
                age,
                json!(joined("name")),
                json!(joined("image")),
                json!(selector),
            ]
        }
        "pods" => {
            let status = &object["status"];
            let statuses = status["containerStatuses"].as_array().cloned().unwrap_or_default();
            let total = object["spec"]["containers"].as_array().map(Vec::len).unwrap_or(0);
            let ready = statuses.iter().filter(|s| s["ready"] == json!(true)).count();
            let none = || json!("<none>");
            let restarts: i64 = statuses.iter().map(|s| s["restartCount"].as_i64().unwrap_or(0)).sum();
            let last = statuses.iter().filter_map(|s| time::seconds(&s["lastState"]["terminated"]["finishedAt"])).max();
            let restarts = match last {
                Some(last) if restarts > 0 => format!("{restarts} ({} ago)", time::human(time::now_seconds() - last)),
                _ => restarts.to_string(),
            };
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(object)),
                json!(restarts),
                age,
                status.get("podIP").cloned().unwrap_or_else(none),
                object["spec"].get("nodeName").cloned().unwrap_or_else(none),
                none(),
                none(),
            ]
        }
        "nodes" => {
            let ready = object["status"]["conditions"]
                .as_array()
                .and_then(|conditions| conditions.iter().find(|c| c["type"] == "Ready"))
                .is_some_and(|c| c["status"] == "True");
            let roles = if metadata["labels"].get("node-role.kubernetes.io/control-plane").is_some() {
                "control-plane"
            } else {
                "<none>"
            };
            let address = |kind: &str| {
                object["status"]["addresses"]
                    .as_array()
                    .and_then(|addresses| addresses.iter().find(|a| a["type"] == kind))
                    .and_then(|a| a["address"].as_str())
                    .unwrap_or("<none>")
                    .to_owned()
            };
            vec![
                name,
                json!(if ready { "Ready" } else { "NotReady" }),
                json!(roles),
                age,
                object["status"]["nodeInfo"]["kubeletVersion"].clone(),
                json!(address("InternalIP")),
                json!(address("ExternalIP")),
            ]
        }
        "namespaces" => vec![name, object["status"]["phase"].clone(), age],
        "deployments" | "replicasets" => {
            let spec = &object["spec"];
            let status = &object["status"];
            let containers = spec["template"]["spec"]["containers"].as_array().cloned().unwrap_or_default();
            let joined =
                |field: &str| containers.iter().filter_map(|c| c[field].as_str()).collect::<Vec<_>>().join(",");
            let count = |field: &str| status[field].as_i64().unwrap_or(0);
            let wanted = spec["replicas"].as_i64().unwrap_or(1);
            let mut row = if plural == "deployments" {
                vec![
                    name,
                    json!(format!("{}/{wanted}", count("readyReplicas"))),
                    json!(count("updatedReplicas")),
                    json!(count("availableReplicas")),
                    age,
                ]
            } else {
                vec![name, json!(wanted), json!(count("replicas")), json!(count("readyReplicas")), age]
            };
            row.extend([
                json!(joined("name")),
                json!(joined("image")),
                json!(labels(&spec["selector"]["matchLabels"])),
            ]);
            row
        }
        "services" => {
            let spec = &object["spec"];
            let ports: Vec<String> = spec["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                .collect();
            let ports = if ports.is_empty() { "<none>".to_owned() } else { ports.join(",") };
            let selector = labels(&spec["selector"]);
            vec![
                name,
                spec["type"].clone(),
                json!(spec["clusterIP"].as_str().unwrap_or("<none>")),
                json!("<none>"),
                json!(ports),
                age,
                json!(if selector.is_empty() { "<none>".to_owned() } else { selector }),
            ]
        }
        "endpoints" => {
            let mut addresses = Vec::new();
            for subset in object["subsets"].as_array().into_iter().flatten() {
                for address in subset["addresses"].as_array().into_iter().flatten() {
                    for port in subset["ports"].as_array().into_iter().flatten() {
                        addresses.push(format!("{}:{}", address["ip"].as_str().unwrap_or_default(), port["port"]));
                    }
                }
            }
            let shown = match addresses.len() {
                0 => "<none>".to_owned(),
                1..=3 => addresses.join(","),
                n => format!("{} + {} more...", addresses[..3].join(","), n - 3),
            };
            vec![name, json!(shown), age]
        }
        "secrets" => {
            let keys = object["data"].as_object().map_or(0, serde_json::Map::len);
            vec![name, object["type"].clone(), json!(keys), age]
        }
        _ => vec![name, age],
    }
}

/// A label map as `a=b,c=d`.
fn labels(map: &Value) -> String {
    map.as_object()
        .map(|labels| labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>())
        .unwrap_or_default()
        .join(",")
}

/// The STATUS column of a Job, as `kubectl get jobs` prints it.
pub(crate) fn job_status(job: &Value) -> &'static str {
    let has = |kind: &str| {
        job["status"]["conditions"]
            .as_array()
            .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == kind && c["status"] == "True"))
    };
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if !job["metadata"]["deletionTimestamp"].is_null() {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    }
}

/// The STATUS column of a Pod: its containers' waiting or terminated reason, else its phase.
pub(crate) fn pod_status(pod: &Value) -> String {
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return "Terminating".to_owned();
    }
    let mut reason =
        pod["status"]["reason"].as_str().or(pod["status"]["phase"].as_str()).unwrap_or("Pending").to_owned();
    for status in pod["status"]["containerStatuses"].as_array().into_iter().flatten().rev() {
        let state = &status["state"];
        if let Some(waiting) = state["waiting"]["reason"].as_str() {
            reason = waiting.to_owned();
        } else if let Some(terminated) = state["terminated"]["reason"].as_str() {
            reason = terminated.to_owned();
        }
    }
    reason
}
