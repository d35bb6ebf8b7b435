//! The Deployment controller, one pass over one Deployment, as Kubernetes 1.34's:
//!
//! 1. A Deployment being deleted in the foreground deletes its ReplicaSets in the foreground
//!    (they take their Pods first) and goes once none is left.
//! 2. Its ReplicaSet for the current pod template is the one whose template, without the
//!    `pod-template-hash` label, equals the Deployment's; if none does, one is created as
//!    `{deployment}-{hash}` (label and selector `pod-template-hash`), with the next revision
//!    (annotation `deployment.kubernetes.io/revision`). Going back to an older template reuses
//!    its ReplicaSet and gives it the next revision: that is how a rollback works.
//! 3. `RollingUpdate` scales the new ReplicaSet up within `replicas + maxSurge` Pods, and the
//!    old ones down only while at least `replicas - maxUnavailable` Pods stay available (ready
//!    for `minReadySeconds`): with `maxUnavailable: 0` no old replica goes before a new one is
//!    available. `maxSurge` and `maxUnavailable` are numbers or percentages (rounded up and
//!    down), 25% by default. Unhealthy old replicas go first. `Recreate` scales the old
//!    ReplicaSets to 0, waits for their Pods to go, then scales the new one up.
//! 4. Old ReplicaSets at 0 beyond `revisionHistoryLimit` (10) are deleted, oldest first.
//! 5. Its status: `observedGeneration`, `replicas`, `updatedReplicas`, `readyReplicas`,
//!    `availableReplicas`, `unavailableReplicas`, and the conditions `Available`
//!    (`MinimumReplicasAvailable`) and `Progressing` (`NewReplicaSetCreated`,
//!    `FoundNewReplicaSet`, `ReplicaSetUpdated`, `NewReplicaSetAvailable`, and
//!    `ProgressDeadlineExceeded` with status False once `progressDeadlineSeconds` pass without
//!    progress).
//!
//! Not simulated: `paused`, proportional scaling of several ReplicaSets when `replicas` changes
//! in the middle of a rollout (the new ReplicaSet takes the change), adoption of orphans.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::events::{self, Note, Severity};
use super::replicasets::{self, Counts};
use super::resources::{DEPLOYMENTS, REPLICASETS};
use super::status::ApiError;
use super::{Kube, defaults, objects, time};

/// The label (and selector key) that tells a ReplicaSet's Pods by template.
pub(crate) const HASH_LABEL: &str = "pod-template-hash";
/// The annotation that holds a ReplicaSet's (and its Deployment's) revision.
pub(crate) const REVISION: &str = "deployment.kubernetes.io/revision";

/// One ReplicaSet as the pass sees it: its object, its wanted replicas and its Pods' counts.
struct Set {
    object: Value,
    replicas: i64,
    counts: Counts,
}

impl Set {
    fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }

    fn revision(&self) -> i64 {
        revision(&self.object)
    }
}

fn revision(object: &Value) -> i64 {
    object["metadata"]["annotations"][REVISION].as_str().and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// Reconciles one Deployment with the ReplicaSets it controls and their Pods (by owner uid).
pub(crate) async fn sync(
    kube: &Kube,
    cluster: &str,
    deployment: Value,
    owned: &[&Value],
    pods: &HashMap<&str, Vec<&Value>>,
) -> Result<(), ApiError> {
    if !deployment["metadata"]["deletionTimestamp"].is_null() {
        if owned.is_empty() {
            kube.store.remove(cluster, &DEPLOYMENTS, &deployment).await?;
        }
        for replica_set in owned.iter().filter(|rs| rs["metadata"]["deletionTimestamp"].is_null()) {
            objects::delete_in_foreground(kube, cluster, &REPLICASETS, (*replica_set).clone()).await?;
        }
        return Ok(());
    }
    let spec = &deployment["spec"];
    let replicas = spec["replicas"].as_i64().unwrap_or(1);
    let min_ready = spec["minReadySeconds"].as_i64().unwrap_or(0);
    let rolling = spec["strategy"]["type"] != "Recreate";
    let (max_surge, max_unavailable) = if rolling { fenceposts(spec, replicas) } else { (0, 0) };
    let mut sets: Vec<Set> = owned
        .iter()
        .map(|object| {
            let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
            let counts = replicasets::count(pods.get(uid).map(Vec::as_slice).unwrap_or_default(), min_ready);
            Set { object: (*object).clone(), replicas: object["spec"]["replicas"].as_i64().unwrap_or(0), counts }
        })
        .collect();
    sets.sort_by_key(Set::revision);
    let max_revision = sets.iter().map(Set::revision).max().unwrap_or(0);
    let mut notes = Vec::new();
    let mut progressing = None;

    let template = spec["template"].clone();
    let new_index = match sets.iter().position(|set| without_hash(&set.object["spec"]["template"]) == template) {
        Some(index) => {
            if sets[index].revision() < max_revision {
                // A rollback: the old template's ReplicaSet becomes the newest revision.
                let mut object = sets[index].object.clone();
                object["metadata"]["annotations"][REVISION] = json!((max_revision + 1).to_string());
                if let Some(written) = kube.store.update(cluster, &REPLICASETS, object).await? {
                    sets[index].object = written;
                }
                let message = format!("Found new replica set \"{}\"", sets[index].name());
                progressing = Some(("True", "FoundNewReplicaSet", message));
            }
            index
        }
        None => {
            let old_pods: i64 = sets.iter().map(|set| set.counts.pods.max(set.replicas)).sum();
            let initial = if rolling {
                scale_up_to(replicas, max_surge, sets.iter().map(|set| set.replicas).sum(), 0)
            } else if old_pods > 0 {
                0
            } else {
                replicas
            };
            let object = create_replica_set(kube, cluster, &deployment, max_revision + 1, initial).await?;
            let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            if initial > 0 {
                notes.push(scaled("up", &name, 0, initial));
            }
            progressing = Some(("True", "NewReplicaSetCreated", format!("Created new replica set \"{name}\"")));
            sets.push(Set { object, replicas: initial, counts: Counts::default() });
            sets.len() - 1
        }
    };

    // Scale, as one sync of the real controller does: up first, else down.
    let mut targets: Vec<i64> = sets.iter().map(|set| set.replicas).collect();
    let old: Vec<usize> = (0..sets.len()).filter(|i| *i != new_index).collect();
    if rolling {
        let total: i64 = targets.iter().sum();
        let new_target = if sets[new_index].replicas > replicas {
            replicas
        } else {
            scale_up_to(replicas, max_surge, total, sets[new_index].replicas)
        };
        if new_target != targets[new_index] {
            targets[new_index] = new_target;
        } else {
            scale_down_old(&sets, &mut targets, &old, new_index, replicas - max_unavailable);
        }
    } else if old.iter().any(|i| targets[*i] > 0) {
        for i in &old {
            targets[*i] = 0;
        }
    } else if old.iter().all(|i| sets[*i].counts.pods == 0) {
        targets[new_index] = replicas;
    }
    for (i, set) in sets.iter_mut().enumerate() {
        if targets[i] == set.replicas {
            continue;
        }
        let mut object = set.object.clone();
        object["spec"]["replicas"] = json!(targets[i]);
        let generation = object["metadata"]["generation"].as_i64().unwrap_or(1);
        object["metadata"]["generation"] = json!(generation + 1);
        if let Some(written) = kube.store.update(cluster, &REPLICASETS, object).await? {
            let direction = if targets[i] > set.replicas { "up" } else { "down" };
            notes.push(scaled(direction, set.name(), set.replicas, targets[i]));
            set.object = written;
            set.replicas = targets[i];
        }
    }
    clean_up_history(kube, cluster, spec, &sets, new_index).await?;

    let new_name = sets[new_index].name().to_owned();
    let new_revision = sets[new_index].revision();
    let status = status(&deployment, &sets, new_index, replicas, max_unavailable, progressing, &new_name);
    let mut next = deployment.clone();
    next["status"] = status;
    defaults::child(defaults::child(defaults::root(&mut next), "metadata"), "annotations")
        .insert(REVISION.into(), json!(new_revision.to_string()));
    if next != deployment
        && let Some(written) = kube.store.update(cluster, &DEPLOYMENTS, next).await?
    {
        for note in notes {
            events::record(kube, cluster, &DEPLOYMENTS, &written, note).await;
        }
    }
    Ok(())
}

/// `maxSurge` and `maxUnavailable` resolved against `replicas` (surge rounded up, unavailable
/// down; both 0 would never progress, so unavailable is then 1, as Kubernetes does).
fn fenceposts(spec: &Value, replicas: i64) -> (i64, i64) {
    let rolling = &spec["strategy"]["rollingUpdate"];
    let resolve = |value: &Value, round_up: bool| match value {
        Value::String(text) => {
            let percent: i64 = text.trim_end_matches('%').parse().unwrap_or(25);
            if round_up { (percent * replicas + 99) / 100 } else { percent * replicas / 100 }
        }
        other => other.as_i64().unwrap_or(if round_up { (replicas * 25 + 99) / 100 } else { replicas * 25 / 100 }),
    };
    let surge = resolve(&rolling["maxSurge"], true);
    let unavailable = resolve(&rolling["maxUnavailable"], false);
    if surge == 0 && unavailable == 0 { (0, 1) } else { (surge, unavailable) }
}

/// The new ReplicaSet's replicas after scaling up within `replicas + max_surge` Pods in all.
fn scale_up_to(replicas: i64, max_surge: i64, total: i64, current: i64) -> i64 {
    let allowed = replicas + max_surge;
    if total >= allowed {
        return current;
    }
    current + (allowed - total).min(replicas - current).max(0)
}

/// Scales old ReplicaSets down while at least `min_available` Pods stay available: their
/// unhealthy replicas first, then available ones, oldest revision first.
fn scale_down_old(sets: &[Set], targets: &mut [i64], old: &[usize], new_index: usize, min_available: i64) {
    let all_pods: i64 = sets.iter().map(|set| set.counts.pods).sum();
    let new = &sets[new_index];
    let new_unavailable = (targets[new_index] - new.counts.available).max(0);
    let max_scaled_down = all_pods - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return;
    }
    let mut cleaned = 0;
    for i in old {
        if cleaned >= max_scaled_down {
            break;
        }
        let unhealthy = targets[*i] - sets[*i].counts.available;
        if targets[*i] == 0 || unhealthy <= 0 {
            continue;
        }
        let down = unhealthy.min(max_scaled_down - cleaned);
        targets[*i] -= down;
        cleaned += down;
    }
    let available: i64 = sets.iter().map(|set| set.counts.available).sum();
    if available <= min_available {
        return;
    }
    let mut to_scale = available - min_available;
    for i in old {
        if to_scale <= 0 {
            break;
        }
        let down = targets[*i].min(to_scale).min(sets[*i].counts.available);
        targets[*i] -= down;
        to_scale -= down;
    }
}

/// Deletes old ReplicaSets at 0 (with no Pod left) beyond `revisionHistoryLimit`, oldest first.
async fn clean_up_history(
    kube: &Kube,
    cluster: &str,
    spec: &Value,
    sets: &[Set],
    new_index: usize,
) -> Result<(), ApiError> {
    let limit = spec["revisionHistoryLimit"].as_i64().unwrap_or(10).max(0) as usize;
    let idle: Vec<&Set> = sets
        .iter()
        .enumerate()
        .filter(|(i, set)| *i != new_index && set.replicas == 0 && set.counts.pods == 0)
        .map(|(_, set)| set)
        .collect();
    for set in idle.iter().take(idle.len().saturating_sub(limit)) {
        kube.store.remove(cluster, &REPLICASETS, &set.object).await?;
    }
    Ok(())
}

/// The template with its `pod-template-hash` label taken out (and labels dropped if empty).
fn without_hash(template: &Value) -> Value {
    let mut template = template.clone();
    if let Some(labels) = template["metadata"]["labels"].as_object_mut() {
        labels.remove(HASH_LABEL);
    }
    template
}

/// The hash of a pod template, as Kubernetes writes it: FNV-1a (32 bits) of the template, its
/// decimal digits mapped to the apiserver's name alphabet.
fn template_hash(template: &Value, collisions: u32) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in template.to_string().bytes().chain(collisions.to_le_bytes()) {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    hash.to_string().bytes().map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char).collect()
}

/// Creates the ReplicaSet of the Deployment's current template.
async fn create_replica_set(
    kube: &Kube,
    cluster: &str,
    deployment: &Value,
    revision: i64,
    replicas: i64,
) -> Result<Value, ApiError> {
    let metadata = &deployment["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    let namespace = metadata["namespace"].as_str().unwrap_or("default");
    let spec = &deployment["spec"];
    for collisions in 0..5 {
        let hash = template_hash(&spec["template"], collisions);
        let mut template = spec["template"].clone();
        defaults::child(defaults::child(defaults::root(&mut template), "metadata"), "labels")
            .insert(HASH_LABEL.into(), json!(hash));
        let mut selector = spec["selector"].clone();
        defaults::child(defaults::root(&mut selector), "matchLabels").insert(HASH_LABEL.into(), json!(hash));
        let mut labels = template["metadata"]["labels"].clone();
        labels[HASH_LABEL] = json!(hash);
        let mut replica_set = json!({
            "metadata": {
                "name": format!("{name}-{hash}"),
                "labels": labels,
                "annotations": {
                    REVISION: revision.to_string(),
                    "deployment.kubernetes.io/desired-replicas": spec["replicas"].as_i64().unwrap_or(1).to_string(),
                },
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": metadata["uid"],
                    "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": {
                "replicas": replicas, "minReadySeconds": spec["minReadySeconds"].as_i64().unwrap_or(0),
                "selector": selector, "template": template,
            },
        });
        defaults::on_create(&REPLICASETS, namespace, &mut replica_set);
        if let Some(created) = kube.store.create(cluster, &REPLICASETS, replica_set).await? {
            return Ok(created);
        }
    }
    Err(ApiError::internal(format!("no free name for a ReplicaSet of Deployment {namespace}/{name}")))
}

fn scaled(direction: &str, name: &str, from: i64, to: i64) -> Note<'static> {
    Note {
        severity: Severity::Normal,
        component: "deployment-controller",
        reason: "ScalingReplicaSet",
        message: format!("Scaled {direction} replica set {name} from {from} to {to}"),
    }
}

/// The Deployment's status after this pass, with its conditions as the real controller
/// writes them.
fn status(
    deployment: &Value,
    sets: &[Set],
    new_index: usize,
    replicas: i64,
    max_unavailable: i64,
    progressing: Option<(&str, &str, String)>,
    new_name: &str,
) -> Value {
    let before = &deployment["status"];
    let sum = |field: fn(&Counts) -> i64| sets.iter().map(|set| field(&set.counts)).sum::<i64>();
    let actual = sum(|c| c.pods);
    let updated = sets[new_index].counts.pods;
    let ready = sum(|c| c.ready);
    let available = sum(|c| c.available);
    let wanted_total: i64 = sets.iter().map(|set| set.replicas).sum();
    let unavailable = (wanted_total - available).max(0);
    let mut status = Map::new();
    status.insert("observedGeneration".into(), deployment["metadata"]["generation"].clone());
    for (field, value) in [
        ("replicas", actual),
        ("updatedReplicas", updated),
        ("readyReplicas", ready),
        ("availableReplicas", available),
        ("unavailableReplicas", unavailable),
    ] {
        if value > 0 {
            status.insert(field.into(), json!(value));
        }
    }
    let conditions = before["conditions"].as_array().cloned().unwrap_or_default();
    let current = |kind: &str| conditions.iter().find(|c| c["type"] == kind).cloned();
    let now = time::now();
    let condition = |kind: &str, value: &str, reason: &str, message: String, keep_update: bool| {
        let old = current(kind);
        let same = old.as_ref().is_some_and(|c| c["status"] == value);
        let transition = old.as_ref().filter(|_| same).map(|c| c["lastTransitionTime"].clone()).unwrap_or(json!(now));
        let unchanged = old.as_ref().is_some_and(|c| c["reason"] == reason && c["message"] == message.as_str());
        let update = match old.as_ref() {
            Some(c) if same && unchanged && keep_update => c["lastUpdateTime"].clone(),
            _ => json!(now),
        };
        json!({
            "type": kind, "status": value, "lastUpdateTime": update, "lastTransitionTime": transition,
            "reason": reason, "message": message,
        })
    };
    let available_condition = if available >= replicas - max_unavailable {
        condition("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.".into(), true)
    } else {
        condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            true,
        )
    };
    let old_progressing = current("Progressing");
    let reason_was = |reason: &str| old_progressing.as_ref().is_some_and(|c| c["reason"] == reason);
    let complete = updated == replicas && actual == replicas && available == replicas;
    let old_replicas = |replicas: i64, updated: i64| replicas - updated;
    let moved = updated > before["updatedReplicas"].as_i64().unwrap_or(0)
        || old_replicas(actual, updated)
            < old_replicas(before["replicas"].as_i64().unwrap_or(0), before["updatedReplicas"].as_i64().unwrap_or(0))
        || ready > before["readyReplicas"].as_i64().unwrap_or(0)
        || available > before["availableReplicas"].as_i64().unwrap_or(0);
    let deadline = deployment["spec"]["progressDeadlineSeconds"].as_i64().unwrap_or(600);
    let progressing_condition = if let Some((value, reason, message)) = progressing {
        Some(condition("Progressing", value, reason, message, false))
    } else if actual == updated && reason_was("NewReplicaSetAvailable") {
        old_progressing.clone()
    } else if complete {
        let message = format!("ReplicaSet \"{new_name}\" has successfully progressed.");
        Some(condition("Progressing", "True", "NewReplicaSetAvailable", message, false))
    } else if moved {
        let message = format!("ReplicaSet \"{new_name}\" is progressing.");
        Some(condition("Progressing", "True", "ReplicaSetUpdated", message, false))
    } else if reason_was("ProgressDeadlineExceeded")
        || old_progressing
            .as_ref()
            .and_then(|c| time::seconds(&c["lastUpdateTime"]))
            .is_some_and(|since| time::now_seconds() > since + deadline)
    {
        let message = format!("ReplicaSet \"{new_name}\" has timed out progressing.");
        Some(condition("Progressing", "False", "ProgressDeadlineExceeded", message, true))
    } else {
        old_progressing.clone()
    };
    let mut conditions = vec![available_condition];
    conditions.extend(progressing_condition);
    status.insert("conditions".into(), json!(conditions));
    Value::Object(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        let spec = |surge: Value, unavailable: Value| json!({ "strategy": { "rollingUpdate": { "maxSurge": surge, "maxUnavailable": unavailable } } });
        assert_eq!(fenceposts(&spec(json!("25%"), json!("25%")), 2), (1, 0));
        assert_eq!(fenceposts(&spec(json!(1), json!(0)), 2), (1, 0));
        assert_eq!(fenceposts(&spec(json!(0), json!(0)), 2), (0, 1));
        assert_eq!(fenceposts(&spec(json!("50%"), json!("50%")), 3), (2, 1));
    }

    #[test]
    fn the_new_replica_set_grows_within_the_surge() {
        assert_eq!(scale_up_to(2, 1, 2, 0), 1);
        assert_eq!(scale_up_to(2, 1, 3, 1), 1);
        assert_eq!(scale_up_to(2, 1, 2, 1), 2);
        assert_eq!(scale_up_to(3, 0, 0, 0), 3);
    }

    #[test]
    fn a_template_hash_is_stable_and_uses_the_name_alphabet() {
        let template = json!({ "metadata": { "labels": { "app": "web" } } });
        assert_eq!(template_hash(&template, 0), template_hash(&template, 0));
        assert_ne!(template_hash(&template, 0), template_hash(&template, 1));
        assert!(template_hash(&template, 0).bytes().all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)));
    }
}
