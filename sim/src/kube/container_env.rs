//! The environment a container's processes get (its own, and `exec`'s), in the kubelet's order
//! (`makeEnvironmentVariables`; <https://kubernetes.io/docs/tasks/inject-data-application/distribute-credentials-secure/>):
//!
//! 1. `HOSTNAME` and the Services' variables (see [`network`]);
//! 2. `envFrom`, in order: every key of a `secretRef`'s Secret (in the Pod's namespace), with
//!    the source's `prefix`;
//! 3. `env`, in order, each overriding what came before: a `value`, a `secretKeyRef`'s key of a
//!    Secret, or a `fieldRef` (`metadata.name`, `metadata.namespace`, `metadata.uid`,
//!    `metadata.labels['k']`, `metadata.annotations['k']`, `spec.nodeName`,
//!    `spec.serviceAccountName`, `status.podIP`, `status.hostIP`);
//! 4. `PORT` (the simulation's host port, see [`network`]) and, unless one is set, an image's
//!    usual `PATH`.
//!
//! A Secret that does not exist, or a key it lacks, fails the container's start with the
//! kubelet's words (`secret "NAME" not found`, `couldn't find key KEY in Secret NS/NAME`) unless
//! the reference is `optional`; the kubelet reports it as `CreateContainerConfigError` and tries
//! again on its next pass. ConfigMaps are not served, so a `configMapRef`/`configMapKeyRef` that
//! is not optional fails likewise (`configmap "NAME" not found`). `exec` resolves the Secrets
//! anew, where a real container keeps the values it started with.

use std::collections::HashMap;

use serde_json::Value;

use super::resources::SECRETS;
use super::{Kube, network, process, secrets};

/// The container's environment, or why it cannot be made (the kubelet's message).
pub(crate) async fn environment(
    kube: &Kube,
    cluster: &str,
    pod: &Value,
    container: &Value,
) -> Result<Vec<(String, String)>, String> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let mut found = Secrets { kube, cluster, namespace, read: HashMap::new() };
    let mut env = vec![("HOSTNAME".to_owned(), pod["metadata"]["name"].as_str().unwrap_or_default().to_owned())];
    let network = network::env(pod, container);
    env.extend(network.iter().filter(|(name, _)| name != "PORT").cloned());
    for source in container["envFrom"].as_array().into_iter().flatten() {
        let prefix = source["prefix"].as_str().unwrap_or_default();
        if let Some(reference) = source.get("secretRef") {
            let Some(secret) = found.get(reference).await? else { continue };
            let mut keys: Vec<&String> =
                secret["data"].as_object().map(|data| data.keys().collect()).unwrap_or_default();
            keys.sort();
            for key in keys {
                set(&mut env, format!("{prefix}{key}"), secrets::value(&secret, key).unwrap_or_default());
            }
        } else if let Some(reference) = source.get("configMapRef") {
            config_map(reference)?;
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let Some(name) = var["name"].as_str() else { continue };
        let from = &var["valueFrom"];
        let value = if let Some(reference) = from.get("secretKeyRef") {
            let Some(secret) = found.get(reference).await? else { continue };
            let key = reference["key"].as_str().unwrap_or_default();
            match secrets::value(&secret, key) {
                Some(value) => value,
                None if optional(reference) => continue,
                None => {
                    let secret_name = reference["name"].as_str().unwrap_or_default();
                    return Err(format!("couldn't find key {key} in Secret {namespace}/{secret_name}"));
                }
            }
        } else if let Some(reference) = from.get("configMapKeyRef") {
            config_map(reference)?;
            continue;
        } else if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
            field_value(pod, field)
        } else {
            var["value"].as_str().unwrap_or_default().to_owned()
        };
        set(&mut env, name.to_owned(), value);
    }
    if let Some(port) = network.iter().find(|(name, _)| name == "PORT") {
        set(&mut env, port.0.clone(), port.1.clone());
    }
    if !env.iter().any(|(name, _)| name == "PATH") {
        env.push(("PATH".to_owned(), process::DEFAULT_PATH.to_owned()));
    }
    Ok(env)
}

/// Sets a variable, replacing any earlier one of the same name.
fn set(env: &mut Vec<(String, String)>, name: String, value: String) {
    env.retain(|(existing, _)| *existing != name);
    env.push((name, value));
}

/// The Secrets of the Pod's namespace, each read once.
struct Secrets<'a> {
    kube: &'a Kube,
    cluster: &'a str,
    namespace: &'a str,
    read: HashMap<String, Value>,
}

impl Secrets<'_> {
    /// The Secret a reference names; `None` if it does not exist and the reference is optional.
    async fn get(&mut self, reference: &Value) -> Result<Option<Value>, String> {
        let name = reference["name"].as_str().unwrap_or_default();
        if let Some(secret) = self.read.get(name) {
            return Ok(Some(secret.clone()));
        }
        let secret = self
            .kube
            .store
            .get(self.cluster, &SECRETS, self.namespace, name)
            .await
            .map_err(|err| format!("failed to get secret {}/{name}: {err}", self.namespace))?;
        match secret {
            Some(secret) => {
                self.read.insert(name.to_owned(), secret.clone());
                Ok(Some(secret))
            }
            None if optional(reference) => Ok(None),
            None => Err(format!("secret \"{name}\" not found")),
        }
    }
}

fn optional(reference: &Value) -> bool {
    reference["optional"] == true
}

/// A ConfigMap reference: none exists here, so it fails unless optional.
fn config_map(reference: &Value) -> Result<(), String> {
    if optional(reference) {
        Ok(())
    } else {
        Err(format!("configmap \"{}\" not found", reference["name"].as_str().unwrap_or_default()))
    }
}

/// A `fieldRef`'s value, as the Downward API gives it.
fn field_value(pod: &Value, path: &str) -> String {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let metadata = &pod["metadata"];
    let keyed = |prefix: &str| path.strip_prefix(prefix).and_then(|rest| rest.strip_suffix("']"));
    if let Some(key) = keyed("metadata.labels['") {
        return text(&metadata["labels"][key]);
    }
    if let Some(key) = keyed("metadata.annotations['") {
        return text(&metadata["annotations"][key]);
    }
    match path {
        "metadata.name" => text(&metadata["name"]),
        "metadata.namespace" => text(&metadata["namespace"]),
        "metadata.uid" => text(&metadata["uid"]),
        "spec.nodeName" => text(&pod["spec"]["nodeName"]),
        "spec.serviceAccountName" => text(&pod["spec"]["serviceAccountName"]),
        "status.podIP" => network::pod_ip(metadata["uid"].as_str().unwrap_or_default()),
        "status.hostIP" => text(&pod["status"]["hostIP"]),
        _ => String::new(),
    }
}
