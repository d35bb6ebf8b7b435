//! Pods made from a controller's Pod template, as the Job and ReplicaSet controllers make them:
//! named `{owner}-{5 random chars}`, with the template's labels and annotations, owned by the
//! controller (`controller: true`, `blockOwnerDeletion: true`).

use serde_json::{Value, json};

use super::resources::{PODS, Resource};
use super::status::ApiError;
use super::{Kube, defaults, objects};

/// Creates a Pod from the template of `owner`, an object of `resource` (a Job, a ReplicaSet).
pub(crate) async fn create_pod(
    kube: &Kube,
    cluster: &str,
    owner: &Value,
    resource: &Resource,
) -> Result<Value, ApiError> {
    let metadata = &owner["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    let namespace = metadata["namespace"].as_str().unwrap_or("default");
    let template = &owner["spec"]["template"];
    let mut pod = json!({
        "metadata": {
            "generateName": format!("{name}-"),
            "labels": template["metadata"]["labels"],
            "ownerReferences": [{
                "apiVersion": resource.api_version(), "kind": resource.kind, "name": name, "uid": metadata["uid"],
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": template["spec"],
    });
    if template["metadata"]["annotations"].is_object() {
        pod["metadata"]["annotations"] = template["metadata"]["annotations"].clone();
    }
    defaults::on_create(&PODS, namespace, &mut pod);
    // A name taken by chance is tried again with other random characters.
    for _ in 0..5 {
        pod["metadata"]["name"] = json!(format!("{name}-{}", objects::random_suffix()));
        if let Some(created) = kube.store.create(cluster, &PODS, pod.clone()).await? {
            return Ok(created);
        }
    }
    Err(ApiError::internal(format!("no free name for a Pod of {} {namespace}/{name}", resource.kind)))
}
