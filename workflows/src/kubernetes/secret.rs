//! A deployment's secrets as Kubernetes Secrets: each secret it takes, at its pinned version,
//! becomes one Secret in the deployment's namespace, server-side applied before the Job or
//! Deployment that refers to it and then owned by that object (so that Kubernetes' garbage
//! collector deletes it with its owner). An env secret is an `Opaque` Secret the container takes
//! whole with `envFrom`; a registry secret is a `kubernetes.io/dockerconfigjson` Secret the Pod
//! names in `imagePullSecrets`. The Job's and the Deployment's specs carry these references,
//! never a value (docs/security.md, "Where each secret's value lives").
//!
//! A Secret's name says whose it is and which version it holds: `{job}.{attempt}.{secret}.v{n}`
//! for a job's attempt, `{service}.{secret}.v{n}` for a service, whose revisions keep their own
//! versions side by side, so that a rollback finds its revision's values where it left them.
//! Deployment and secret names are DNS labels, so the dots keep two deployments' Secrets apart.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::db::secrets::{PASSWORD, SecretUse, USERNAME, Values};
use crate::kubernetes::FIELD_MANAGER;
use crate::kubernetes::client::KubeError;

/// A secret a deployment takes, with its pinned version's values, opened.
#[derive(Debug)]
pub struct Opened {
    /// Which secret, at which version.
    pub using: SecretUse,
    /// Its values.
    pub values: Values,
}

/// The Kubernetes Secret of `using` for the objects named `prefix` (a job's `{name}.{attempt}`,
/// a service's name).
pub fn object_name(prefix: &str, using: &SecretUse) -> String {
    format!("{prefix}.{}.v{}", using.name, using.version)
}

/// The Secret holding `opened`, labelled `labels`, owned by `owner` (an `ownerReferences` entry)
/// once that object exists.
pub fn secret_object(
    namespace: &str,
    prefix: &str,
    labels: &BTreeMap<String, String>,
    opened: &Opened,
    owner: Option<&Value>,
) -> Value {
    let encode = |text: &str| STANDARD.encode(text.as_bytes());
    let (kind, data) = match &opened.using.registry {
        Some(host) => {
            let username = opened.values.get(USERNAME);
            let password = opened.values.get(PASSWORD);
            let auth = encode(&format!("{username}:{password}"));
            let config = json!({ "auths": { host: { "username": username, "password": password, "auth": auth } } });
            ("kubernetes.io/dockerconfigjson", json!({ ".dockerconfigjson": encode(&config.to_string()) }))
        }
        None => {
            let data: serde_json::Map<String, Value> =
                opened.values.iter().map(|(key, value)| (key.clone(), json!(encode(value)))).collect();
            ("Opaque", Value::Object(data))
        }
    };
    let mut metadata = json!({ "name": object_name(prefix, &opened.using), "namespace": namespace, "labels": labels });
    if let Some(owner) = owner {
        metadata["ownerReferences"] = json!([owner]);
    }
    json!({ "apiVersion": "v1", "kind": "Secret", "type": kind, "metadata": metadata, "data": data })
}

/// An `ownerReferences` entry for the object `kind`/`name` of `api_version` with `uid`.
pub fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({ "apiVersion": api_version, "kind": kind, "name": name, "uid": uid })
}

/// What the container and the Pod take of `uses`: the container's `envFrom` (its env secrets)
/// and the Pod's `imagePullSecrets` (its registry secrets), by the Secrets' names.
pub fn references(prefix: &str, uses: &[SecretUse]) -> (Vec<Value>, Vec<Value>) {
    let env_from = uses
        .iter()
        .filter(|using| using.registry.is_none())
        .map(|using| json!({ "secretRef": { "name": object_name(prefix, using) } }))
        .collect();
    let pull = uses
        .iter()
        .filter(|using| using.registry.is_some())
        .map(|using| json!({ "name": object_name(prefix, using) }))
        .collect();
    (env_from, pull)
}

/// Server-side applies each Secret of `objects` in `namespace`.
pub async fn apply(client: &kube::Client, namespace: &str, objects: Vec<Value>) -> Result<(), KubeError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for object in objects {
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        secrets.patch(&name, &params, &Patch::Apply(object)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(name: &str, registry: Option<&str>, pairs: &[(&str, &str)]) -> Opened {
        let values = pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect();
        Opened {
            using: SecretUse { name: name.into(), version: 3, registry: registry.map(Into::into) },
            values: Values(values),
        }
    }

    fn decoded(text: &Value) -> String {
        String::from_utf8(STANDARD.decode(text.as_str().unwrap()).unwrap()).unwrap()
    }

    #[test]
    fn an_env_secret_is_opaque_data_and_the_container_takes_it_by_name() {
        let db = opened("db", None, &[("PASSWORD", "hunter2")]);
        let owner = owner("batch/v1", "Job", "batch-1", "uid-1");
        let object = secret_object("anycloud", "batch.1", &BTreeMap::new(), &db, Some(&owner));
        assert_eq!(object["type"], "Opaque");
        assert_eq!(object["metadata"]["name"], "batch.1.db.v3");
        assert_eq!(decoded(&object["data"]["PASSWORD"]), "hunter2");
        assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        let (env_from, pull) = references("batch.1", std::slice::from_ref(&db.using));
        assert_eq!(env_from, vec![json!({ "secretRef": { "name": "batch.1.db.v3" } })]);
        assert!(pull.is_empty());
        assert!(!format!("{env_from:?}{db:?}").contains("hunter2"));
    }

    #[test]
    fn a_registry_secret_is_a_docker_config_for_its_host() {
        let ghcr = opened("ghcr", Some("ghcr.io"), &[(USERNAME, "acme"), (PASSWORD, "token")]);
        let object = secret_object("anycloud", "api", &BTreeMap::new(), &ghcr, None);
        assert_eq!(object["type"], "kubernetes.io/dockerconfigjson");
        let config: Value = serde_json::from_str(&decoded(&object["data"][".dockerconfigjson"])).unwrap();
        let login = &config["auths"]["ghcr.io"];
        assert_eq!((login["username"].as_str(), login["password"].as_str()), (Some("acme"), Some("token")));
        assert_eq!(decoded(&login["auth"]), "acme:token");
        assert!(object["metadata"].get("ownerReferences").is_none());
        let (env_from, pull) = references("api", &[ghcr.using]);
        assert!(env_from.is_empty());
        assert_eq!(pull, vec![json!({ "name": "api.ghcr.v3" })]);
    }
}
