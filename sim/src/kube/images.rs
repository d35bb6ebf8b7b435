//! Image pulls, as far as the simulation has them: nothing is downloaded (a container's command
//! runs on the host), but an image on a registry host its cluster's account marks private
//! (`SimSettings::private_registries`) is pulled only with credentials, as a real kubelet's
//! containerd would (<https://kubernetes.io/docs/concepts/containers/images/#specifying-imagepullsecrets-on-a-pod>):
//! one of the Pod's `spec.imagePullSecrets` must name a `kubernetes.io/dockerconfigjson` Secret
//! of its namespace whose `auths` has the image's registry host (see [`secrets::image_registry`]
//! and [`secrets::registry_hosts`]). No image is ever cached on a node: every start pulls.
//!
//! Without one, the pull fails as containerd's does, and the kubelet's image back-off
//! (`flowcontrol.Backoff`: 10 s, doubling to 300 s, kept in memory per Pod and image, so an API
//! restart forgets it as a kubelet restart does) spaces the tries:
//!
//! - the container waits with reason `ErrImagePull` and containerd's message (`failed to pull and
//!   unpack image "ghcr.io/acme/batch:latest": failed to resolve reference
//!   "ghcr.io/acme/batch:latest": pull access denied, repository does not exist or may require
//!   authorization: authorization failed: no basic auth credentials`), with events `Pulling`
//!   (`Pulling image "IMAGE"`), `Failed` (Warning, `Failed to pull image "IMAGE": ...`) and
//!   `Failed` (Warning, `Error: ErrImagePull`);
//! - until the back-off is over, it waits with reason `ImagePullBackOff` and message `Back-off
//!   pulling image "IMAGE": ErrImagePull: ...`, with events `BackOff` (`Back-off pulling image
//!   "IMAGE"`) and `Failed` (Warning, `Error: ImagePullBackOff`);
//! - the next try after a registry Secret appears succeeds.
//!
//! A named pull secret that does not exist adds a Warning `FailedToRetrieveImagePullSecret`
//! (`Unable to retrieve some image pull secrets (NAME); attempting to pull the image may not
//! succeed.`).

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::events::{Note, Severity};
use super::resources::SECRETS;
use super::status::ApiError;
use super::{Kube, secrets, time};

/// The first image back-off, and the longest.
const FIRST_BACK_OFF_SECONDS: i64 = 10;
const MAX_BACK_OFF_SECONDS: i64 = 300;

/// The failed pulls of every Pod's images, by `{pod uid}/{image}`.
#[derive(Default)]
pub(crate) struct Pulls {
    failed: Mutex<HashMap<String, Failure>>,
}

#[derive(Debug, Clone)]
struct Failure {
    /// How many pulls failed in a row.
    count: u32,
    /// When the next try may start (seconds since the epoch).
    next_try: i64,
    /// What the last one said.
    message: String,
}

impl Pulls {
    /// Forgets the pulls of a removed Pod.
    pub(crate) fn forget(&self, pod_uid: &str) {
        if let Ok(mut failed) = self.failed.lock() {
            failed.retain(|key, _| !key.starts_with(&format!("{pod_uid}/")));
        }
    }

    fn get(&self, key: &str) -> Option<Failure> {
        self.failed.lock().ok().and_then(|failed| failed.get(key).cloned())
    }

    fn set(&self, key: String, failure: Option<Failure>) {
        if let Ok(mut failed) = self.failed.lock() {
            match failure {
                Some(failure) => failed.insert(key, failure),
                None => failed.remove(&key),
            };
        }
    }
}

/// Pulls the container's image: `None` when it is there (public, or pulled with a Pod's
/// registry secret), else the container's `waiting` state, with what the kubelet reports in
/// `notes`.
pub(crate) async fn pull(
    kube: &Kube,
    cluster: &str,
    private_registries: &[String],
    pod: &Value,
    container: &Value,
    notes: &mut Vec<Note<'static>>,
) -> Result<Option<Value>, ApiError> {
    let image = container["image"].as_str().unwrap_or_default();
    let registry = secrets::image_registry(image);
    if !private_registries.iter().any(|host| host.eq_ignore_ascii_case(&registry)) {
        return Ok(None);
    }
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let key = format!("{uid}/{image}");
    let now = time::now_seconds();
    let pulls = &kube.kubelet.pulls;
    let failure = pulls.get(&key);
    if let Some(failure) = failure.as_ref().filter(|failure| now < failure.next_try) {
        notes.push(note(Severity::Normal, "BackOff", format!("Back-off pulling image \"{image}\"")));
        notes.push(note(Severity::Warning, "Failed", "Error: ImagePullBackOff".to_owned()));
        let message = format!("Back-off pulling image \"{image}\": ErrImagePull: {}", failure.message);
        return Ok(Some(json!({ "waiting": { "reason": "ImagePullBackOff", "message": message } })));
    }
    notes.push(note(Severity::Normal, "Pulling", format!("Pulling image \"{image}\"")));
    if has_credentials(kube, cluster, pod, &registry, notes).await? {
        pulls.set(key, None);
        return Ok(None);
    }
    let reference = secrets::normalized_image(image);
    let message = format!(
        "failed to pull and unpack image \"{reference}\": failed to resolve reference \"{reference}\": pull access \
         denied, repository does not exist or may require authorization: authorization failed: no basic auth \
         credentials"
    );
    let count = failure.map_or(1, |failure| failure.count + 1);
    let back_off = (FIRST_BACK_OFF_SECONDS << (count - 1).min(5)).min(MAX_BACK_OFF_SECONDS);
    pulls.set(key, Some(Failure { count, next_try: now + back_off, message: message.clone() }));
    notes.push(note(Severity::Warning, "Failed", format!("Failed to pull image \"{image}\": {message}")));
    notes.push(note(Severity::Warning, "Failed", "Error: ErrImagePull".to_owned()));
    Ok(Some(json!({ "waiting": { "reason": "ErrImagePull", "message": message } })))
}

/// Whether one of the Pod's `imagePullSecrets` holds credentials for `registry`; those that do
/// not exist are reported as the kubelet reports them (`FailedToRetrieveImagePullSecret`).
async fn has_credentials(
    kube: &Kube,
    cluster: &str,
    pod: &Value,
    registry: &str,
    notes: &mut Vec<Note<'static>>,
) -> Result<bool, ApiError> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let mut missing = Vec::new();
    let mut found = false;
    for reference in pod["spec"]["imagePullSecrets"].as_array().into_iter().flatten() {
        let Some(name) = reference["name"].as_str() else { continue };
        match kube.store.get(cluster, &SECRETS, namespace, name).await? {
            None => missing.push(name),
            Some(secret) => {
                found |= secrets::registry_hosts(&secret).iter().any(|host| host.eq_ignore_ascii_case(registry));
            }
        }
    }
    if !missing.is_empty() {
        notes.push(note(
            Severity::Warning,
            "FailedToRetrieveImagePullSecret",
            format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                missing.join(", ")
            ),
        ));
    }
    Ok(found)
}

fn note(severity: Severity, reason: &'static str, message: String) -> Note<'static> {
    Note { severity, component: "kubelet", reason, message }
}
