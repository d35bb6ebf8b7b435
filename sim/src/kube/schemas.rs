//! The schemas of the kinds a simulated cluster serves, generated from `k8s_openapi`'s types
//! (which carry the Kubernetes 1.34 definitions, descriptions and formats of the upstream
//! `swagger.json`) and completed with what the generated types leave out:
//!
//! - `x-kubernetes-group-version-kind` on each kind, as the apiserver publishes it;
//! - the strategic-merge-patch extensions (`x-kubernetes-patch-strategy`,
//!   `x-kubernetes-patch-merge-key`) of the lists of those kinds, from the `patchStrategy` and
//!   `patchMergeKey` tags of their Go types (`k8s.io/api/.../types.go`), which kubectl reads to
//!   compute an apply patch and [`super::strategic`] reads to apply one;
//! - the `...List` kinds, which `k8s_openapi` models as one generic type.
//!
//! `k8s_openapi` marks a kind's `metadata` required (it is not optional in Rust); the apiserver
//! does not, so it is dropped from `required`.
//!
//! The same definitions serve OpenAPI v3 (`#/components/schemas/`) and v2 (`#/definitions/`).

use std::sync::OnceLock;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Endpoints, Event, Namespace, Node, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Patch, Status, WatchEvent};
use k8s_openapi::schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use super::resources::{ALL, Resource};

/// The strategic-merge-patch extensions of the served kinds' lists: (definition, field,
/// strategy, merge key), as the Go types tag them.
const PATCH_EXTENSIONS: &[(&str, &str, &str, Option<&str>)] = &[
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers", "merge", None),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences", "merge", Some("uid")),
    ("io.k8s.api.core.v1.PodSpec", "containers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "initContainers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "volumes", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodSpec", "resourceClaims", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "schedulingGates", "merge", Some("name")),
    ("io.k8s.api.core.v1.Container", "env", "merge", Some("name")),
    ("io.k8s.api.core.v1.Container", "ports", "merge", Some("containerPort")),
    ("io.k8s.api.core.v1.Container", "volumeMounts", "merge", Some("mountPath")),
    ("io.k8s.api.core.v1.Container", "volumeDevices", "merge", Some("devicePath")),
    ("io.k8s.api.core.v1.EphemeralContainer", "env", "merge", Some("name")),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts", "merge", Some("mountPath")),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeDevices", "merge", Some("devicePath")),
    ("io.k8s.api.core.v1.PodStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodStatus", "hostIPs", "merge", Some("ip")),
    ("io.k8s.api.core.v1.ServiceSpec", "ports", "merge", Some("port")),
    ("io.k8s.api.core.v1.NodeSpec", "podCIDRs", "merge", None),
    ("io.k8s.api.core.v1.NodeStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.NodeStatus", "addresses", "merge", Some("type")),
    ("io.k8s.api.core.v1.NamespaceStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.batch.v1.JobStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.apps.v1.DeploymentSpec", "strategy", "retainKeys", None),
    ("io.k8s.api.apps.v1.DeploymentStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.apps.v1.ReplicaSetStatus", "conditions", "merge", Some("type")),
];

/// The definition name of a resource's kind (`io.k8s.api.batch.v1.Job`).
pub(crate) fn definition(resource: &Resource) -> String {
    let group = if resource.group.is_empty() { "core" } else { resource.group };
    format!("io.k8s.api.{group}.{}.{}", resource.version, resource.kind)
}

/// `{"group": ..., "version": ..., "kind": ...}`, as the extension lists it.
pub(crate) fn group_version_kind(resource: &Resource, kind: &str) -> Value {
    json!({ "group": resource.group, "version": resource.version, "kind": kind })
}

/// The definitions for OpenAPI v3 (`#/components/schemas/...` references).
pub(crate) fn v3() -> &'static Map<String, Value> {
    static V3: OnceLock<Map<String, Value>> = OnceLock::new();
    V3.get_or_init(|| generate(SchemaSettings::openapi3()))
}

/// The definitions for OpenAPI v2 (`#/definitions/...` references).
pub(crate) fn v2() -> &'static Map<String, Value> {
    static V2: OnceLock<Map<String, Value>> = OnceLock::new();
    V2.get_or_init(|| generate(SchemaSettings::draft07().with(|settings| settings.meta_schema = None)))
}

fn subschema(generator: &mut SchemaGenerator, resource: &Resource) {
    match resource.kind {
        "Namespace" => drop(generator.subschema_for::<Namespace>()),
        "Node" => drop(generator.subschema_for::<Node>()),
        "Pod" => drop(generator.subschema_for::<Pod>()),
        "Service" => drop(generator.subschema_for::<Service>()),
        "Endpoints" => drop(generator.subschema_for::<Endpoints>()),
        "Secret" => drop(generator.subschema_for::<Secret>()),
        "Event" => drop(generator.subschema_for::<Event>()),
        "Job" => drop(generator.subschema_for::<Job>()),
        "Deployment" => drop(generator.subschema_for::<Deployment>()),
        "ReplicaSet" => drop(generator.subschema_for::<ReplicaSet>()),
        _ => {}
    }
}

fn generate(settings: SchemaSettings) -> Map<String, Value> {
    let prefix = format!("#{}/", settings.definitions_path);
    let mut generator = settings.into_generator();
    for resource in ALL {
        subschema(&mut generator, resource);
    }
    drop(generator.subschema_for::<Status>());
    drop(generator.subschema_for::<DeleteOptions>());
    drop(generator.subschema_for::<WatchEvent<Job>>());
    drop(generator.subschema_for::<Patch>());
    drop(generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta>());
    let mut definitions = generator.take_definitions(true);
    for resource in ALL {
        let name = definition(resource);
        if let Some(schema) = definitions.get_mut(&name).and_then(Value::as_object_mut) {
            if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
                required.retain(|field| field != "metadata");
                if required.is_empty() {
                    schema.remove("required");
                }
            }
            schema
                .insert("x-kubernetes-group-version-kind".into(), json!([group_version_kind(resource, resource.kind)]));
        }
        let list_kind = format!("{}List", resource.kind);
        let list = json!({
            "description": format!("{list_kind} is a list of {}.", resource.kind),
            "type": "object",
            "properties": {
                "apiVersion": { "description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string" },
                "items": { "description": format!("List of {}.", resource.plural), "type": "array", "items": { "$ref": format!("{prefix}{name}") } },
                "kind": { "description": "Kind is a string value representing the REST resource this object represents.", "type": "string" },
                "metadata": { "allOf": [{ "$ref": format!("{prefix}io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta") }], "description": "Standard list metadata." },
            },
            "required": ["items"],
            "x-kubernetes-group-version-kind": [group_version_kind(resource, &list_kind)],
        });
        definitions.insert(format!("{name}List"), list);
    }
    for (definition, field, strategy, key) in PATCH_EXTENSIONS {
        let Some(property) = definitions
            .get_mut(*definition)
            .and_then(|schema| schema.get_mut("properties"))
            .and_then(|properties| properties.get_mut(*field))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        property.insert("x-kubernetes-patch-strategy".into(), json!(strategy));
        if let Some(key) = key {
            property.insert("x-kubernetes-patch-merge-key".into(), json!(key));
        }
    }
    definitions
}

/// The schema a property of `schema` refers to: its own, the definition it references, or
/// (for an array or a map) its items'.
pub(crate) fn resolve<'a>(definitions: &'a Map<String, Value>, schema: &'a Value) -> &'a Value {
    let reference = schema
        .get("$ref")
        .or_else(|| schema.get("allOf").and_then(|all| all.get(0)).and_then(|first| first.get("$ref")))
        .and_then(Value::as_str);
    match reference.and_then(|reference| reference.rsplit('/').next()) {
        Some(name) => definitions.get(name).unwrap_or(schema),
        None => schema,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    #[test]
    fn a_job_is_described_as_the_apiserver_describes_it() {
        let definitions = v3();
        let job = &definitions["io.k8s.api.batch.v1.Job"];
        assert_eq!(
            job["x-kubernetes-group-version-kind"],
            json!([{ "group": "batch", "version": "v1", "kind": "Job" }])
        );
        assert!(job.get("required").is_none(), "{job}");
        let spec = resolve(definitions, &job["properties"]["spec"]);
        assert_eq!(spec["required"], json!(["template"]));
        let containers = &definitions["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(definitions["io.k8s.api.core.v1.NodeSystemInfo"]["required"].as_array().map(Vec::len), Some(10));
        assert!(v2().contains_key(&definition(&resources::DEPLOYMENTS)));
        let reference = v2()["io.k8s.api.apps.v1.DeploymentList"]["properties"]["items"]["items"]["$ref"].clone();
        assert_eq!(reference, "#/definitions/io.k8s.api.apps.v1.Deployment");
    }

    #[test]
    fn every_patch_extension_names_a_field_that_exists() {
        for (definition, field, _, _) in PATCH_EXTENSIONS {
            assert!(v3()[*definition]["properties"].get(*field).is_some(), "{definition}.{field}");
        }
    }
}
