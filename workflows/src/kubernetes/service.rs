//! A service's Kubernetes objects: the ClusterIP `Service` and the `apps/v1` `Deployment` that
//! Anycloud server-side applies for a revision, what the Deployment, its ReplicaSets and its Pods
//! say about a rollout, and their deletion. The same calls reach k3s on a real cluster and the
//! simulated cloud's API.
//!
//! Every object carries the deployment's labels; the Pod template also carries the revision
//! (`anycloud.dev/revision`), so that each revision is its own ReplicaSet and a rollback to a
//! revision's template finds that revision's ReplicaSet again. The Deployment's selector and the
//! Service's name only the deployment's id: every revision's ready Pods serve.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment as KubeDeployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::db::deployments::Deployment;
use crate::db::revisions::Revision;
use crate::kubernetes;
use crate::kubernetes::client::KubeError;
use crate::kubernetes::job::delete_listed;
use crate::kubernetes::pod_wait::{self, Subject, Verdict};
use crate::kubernetes::secret::Opened;
use crate::kubernetes::{CONTAINER, DEPLOYMENT, DEPLOYMENT_ID, FIELD_MANAGER};

/// The label of the revision a Pod template (and so a ReplicaSet and its Pods) belongs to.
pub const REVISION: &str = "anycloud.dev/revision";
/// The name of the container port (and the Service's target).
const PORT_NAME: &str = "http";
/// How long a replica being stopped keeps serving before its SIGTERM (`preStop` sleep): a Pod
/// leaves the Service's endpoints while its kubelet starts to stop it, and every node's
/// kube-proxy needs a sync (at least 1 s apart in iptables mode) to stop sending it new
/// connections; without the pause a rolling update drops the requests routed meanwhile.
const PRE_STOP_SLEEP_S: i64 = 3;

/// The labels every object of the deployment carries.
fn labels(deployment: &Deployment) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/managed-by".to_owned(), "anycloud".to_owned()),
        (DEPLOYMENT.to_owned(), deployment.name.clone()),
        (DEPLOYMENT_ID.to_owned(), deployment.id.clone()),
    ])
}

/// The selector of every Pod of the deployment, whatever its revision.
fn selector(deployment: &Deployment) -> BTreeMap<String, String> {
    BTreeMap::from([(DEPLOYMENT_ID.to_owned(), deployment.id.clone())])
}

fn list_all(deployment: &Deployment) -> ListParams {
    ListParams::default().labels(&format!("{DEPLOYMENT_ID}={}", deployment.id))
}

fn list_revision(deployment: &Deployment, revision: i64) -> ListParams {
    ListParams::default().labels(&format!("{DEPLOYMENT_ID}={},{REVISION}={revision}", deployment.id))
}

/// The service's port (8080 unless given).
pub fn port(deployment: &Deployment) -> i64 {
    deployment.port.unwrap_or(8080)
}

/// The cluster-internal DNS name of the service's Kubernetes Service.
pub fn dns_name(deployment: &Deployment) -> String {
    format!("{}.{}.svc.cluster.local", deployment.name, deployment.namespace)
}

/// How many Pods a rolling update may add above the desired count: 25 % rounded up, at least 1.
pub fn max_surge(replicas: i64) -> i64 {
    ((replicas + 3) / 4).max(1)
}

/// The ClusterIP Service: port P to the Pods' port P, selecting every Pod of the deployment.
pub fn service_object(deployment: &Deployment) -> serde_json::Value {
    let port = port(deployment);
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": deployment.name, "namespace": deployment.namespace, "labels": labels(deployment) },
        "spec": {
            "type": "ClusterIP",
            "selector": selector(deployment),
            "ports": [{ "name": PORT_NAME, "protocol": "TCP", "port": port, "targetPort": port }],
        },
    })
}

/// The Deployment running `revision`: its replicas, `PORT` and a TCP readiness probe on the
/// port, requests equal to limits, and a rolling update that adds a new Pod before it removes an
/// old one (`maxUnavailable: 0`) within the revision's progress deadline.
pub fn deployment_object(deployment: &Deployment, revision: &Revision) -> serde_json::Value {
    let spec = &revision.spec;
    let port = port(deployment);
    let mut resources = serde_json::Map::new();
    if let Some(cpus) = &spec.cpus {
        resources.insert("cpu".into(), json!(cpus));
    }
    if let Some(memory) = &spec.memory {
        resources.insert("memory".into(), json!(memory));
    }
    let mut env: Vec<_> = spec
        .env
        .iter()
        .filter(|var| var.name != "PORT")
        .map(|var| json!({ "name": var.name, "value": var.value }))
        .collect();
    env.push(json!({ "name": "PORT", "value": port.to_string() }));
    let (env_from, pull_secrets) = kubernetes::secret::references(&deployment.name, &spec.secrets);
    let labels = labels(deployment);
    let mut template_labels = labels.clone();
    template_labels.insert(REVISION.to_owned(), revision.number.to_string());
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment.name,
            "namespace": deployment.namespace,
            "labels": labels,
            "annotations": { REVISION: revision.number.to_string() },
        },
        "spec": {
            "replicas": revision.replicas,
            "selector": { "matchLabels": selector(deployment) },
            "progressDeadlineSeconds": revision.progress_deadline_s,
            "revisionHistoryLimit": 10,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": { "maxSurge": max_surge(revision.replicas), "maxUnavailable": 0 },
            },
            "template": {
                "metadata": { "labels": template_labels },
                "spec": {
                    "imagePullSecrets": pull_secrets,
                    "containers": [{
                        "name": CONTAINER,
                        "image": spec.image,
                        "command": spec.command,
                        "env": env,
                        "envFrom": env_from,
                        "ports": [{ "name": PORT_NAME, "containerPort": port, "protocol": "TCP" }],
                        "readinessProbe": {
                            "tcpSocket": { "port": port },
                            "periodSeconds": 1,
                            "timeoutSeconds": 1,
                            "successThreshold": 1,
                            "failureThreshold": 3,
                        },
                        "resources": { "requests": resources, "limits": resources },
                        "lifecycle": { "preStop": { "sleep": { "seconds": PRE_STOP_SLEEP_S } } },
                    }],
                },
            },
        },
    })
}

/// Server-side applies the namespace and the ClusterIP Service; returns the ClusterIP given.
pub async fn apply_service(client: &kube::Client, deployment: &Deployment) -> Result<Option<String>, KubeError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": deployment.namespace, "labels": { "app.kubernetes.io/managed-by": "anycloud" } },
    });
    namespaces.patch(&deployment.namespace, &params, &Patch::Apply(namespace)).await?;
    let services: Api<Service> = Api::namespaced(client.clone(), &deployment.namespace);
    let applied = services.patch(&deployment.name, &params, &Patch::Apply(service_object(deployment))).await?;
    Ok(applied.spec.and_then(|spec| spec.cluster_ip))
}

/// Server-side applies `revision`'s Secrets (`secrets`, opened at the versions it pinned), the
/// Deployment with its template, and the Secrets again now owned by the Deployment, so that
/// deleting the Deployment deletes them. Each call is idempotent.
pub async fn apply_deployment(
    client: &kube::Client,
    deployment: &Deployment,
    revision: &Revision,
    secrets: &[Opened],
) -> Result<(), KubeError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let namespace = &deployment.namespace;
    let mut secret_labels = labels(deployment);
    secret_labels.insert(REVISION.to_owned(), revision.number.to_string());
    let objects = |owner: Option<&serde_json::Value>| {
        let object =
            |opened| kubernetes::secret::secret_object(namespace, &deployment.name, &secret_labels, opened, owner);
        secrets.iter().map(object).collect()
    };
    kubernetes::secret::apply(client, namespace, objects(None)).await?;
    let deployments: Api<KubeDeployment> = Api::namespaced(client.clone(), namespace);
    let object = deployment_object(deployment, revision);
    let applied = deployments.patch(&deployment.name, &params, &Patch::Apply(object)).await?;
    if !secrets.is_empty() {
        let uid = applied.metadata.uid.unwrap_or_default();
        let owner = kubernetes::secret::owner("apps/v1", "Deployment", &deployment.name, &uid);
        kubernetes::secret::apply(client, namespace, objects(Some(&owner))).await?;
    }
    Ok(())
}

/// Where the rollout of a revision stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    /// Not there yet; what it waits for.
    Progressing(String),
    /// Every desired replica runs the revision and is available; no other replica is left.
    Available,
    /// It cannot succeed: the cause (a container that exited or crash-loops, a progress
    /// deadline that passed).
    Failed(String),
    /// The Deployment does not exist (deleted behind Anycloud's back).
    Gone,
}

/// Reads the Deployment and the Pods of `revision` and says where its rollout stands: the
/// Deployment's controller must have observed its latest spec, every desired replica must be
/// updated and available, and no replica of another revision may be left (as `kubectl rollout
/// status` waits). A Pod of the revision whose container exited, crash-loops or cannot be
/// created, whose image the kubelet has backed off pulling, or that asks for more than any node
/// has, or the Deployment's `ProgressDeadlineExceeded`, fails it. While it progresses, it says
/// why the first Pod of the revision that is not ready waits, in Kubernetes' words
/// ([`pod_wait`]); `again` is what to run once that is fixed.
pub async fn rollout(
    client: &kube::Client,
    deployment: &Deployment,
    revision: &Revision,
    again: &str,
) -> Result<Rollout, KubeError> {
    let deployments: Api<KubeDeployment> = Api::namespaced(client.clone(), &deployment.namespace);
    let Some(object) = deployments.get_opt(&deployment.name).await? else { return Ok(Rollout::Gone) };
    Ok(match pods_say(client, deployment, revision, again).await? {
        Err(cause) => Rollout::Failed(cause),
        Ok(why) => deployment_says(object, revision.number, &why),
    })
}

/// What the revision's Pods say: `Err` why it cannot serve, or `Ok` why the first one that is
/// not ready waits (`": ..."`, empty when none waits). One look at events (and nodes) per check.
async fn pods_say(
    client: &kube::Client,
    deployment: &Deployment,
    revision: &Revision,
    again: &str,
) -> Result<Result<String, String>, KubeError> {
    let number = revision.number;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &deployment.namespace);
    let mut listed = pods.list(&list_revision(deployment, number)).await?.items;
    listed.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, &a.metadata.name).cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
    });
    let subject = Subject {
        name: &deployment.name,
        image: &revision.spec.image,
        port: Some(port(deployment)),
        again: again.to_owned(),
    };
    for pod in &listed {
        if let Some(cause) = pod_failure(pod, number, &subject) {
            return Ok(Err(cause));
        }
    }
    let mut waiting = None;
    for pod in &listed {
        if let Some(wait) = pod_wait::explain_live(client, pod, &subject).await? {
            waiting = Some(wait);
            break;
        }
    }
    if let Some(wait) = waiting.as_ref().filter(|wait| wait.verdict != Verdict::Waits) {
        return Ok(Err(format!("revision {number} cannot start: {}", wait.why)));
    }
    Ok(Ok(waiting.map(|wait| format!(": {}", wait.why)).unwrap_or_default()))
}

/// Where the Deployment's rollout of revision `number` stands, by its template, status and
/// conditions; `why` says why a Pod waits.
fn deployment_says(object: KubeDeployment, number: i64, why: &str) -> Rollout {
    let generation = object.metadata.generation.unwrap_or(0);
    let desired = object.spec.as_ref().and_then(|spec| spec.replicas).unwrap_or(1);
    let template_revision = object
        .spec
        .as_ref()
        .and_then(|spec| spec.template.metadata.as_ref())
        .and_then(|meta| meta.labels.as_ref())
        .and_then(|labels| labels.get(REVISION))
        .cloned()
        .unwrap_or_default();
    if template_revision != number.to_string() {
        return Rollout::Progressing(format!(
            "the Deployment's template is revision {template_revision}, not {number}"
        ));
    }
    let Some(status) = object.status else {
        return Rollout::Progressing("the Deployment has no status yet".into());
    };
    if status.observed_generation.unwrap_or(0) < generation {
        return Rollout::Progressing(format!(
            "waiting for the Deployment controller to observe generation {generation}"
        ));
    }
    let deadline = status.conditions.unwrap_or_default().into_iter().find(|condition| {
        condition.type_ == "Progressing"
            && condition.status == "False"
            && condition.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });
    if let Some(condition) = deadline {
        let seconds = object.spec.as_ref().and_then(|spec| spec.progress_deadline_seconds).unwrap_or(600);
        return Rollout::Failed(format!(
            "revision {number} did not become available within its progress deadline of {seconds}s \
             (ProgressDeadlineExceeded{}){why}",
            condition.message.map(|message| format!(": {message}")).unwrap_or_default()
        ));
    }
    let updated = i64::from(status.updated_replicas.unwrap_or(0));
    let total = i64::from(status.replicas.unwrap_or(0));
    let available = i64::from(status.available_replicas.unwrap_or(0));
    let desired = i64::from(desired);
    if updated < desired {
        return Rollout::Progressing(format!("{updated} of {desired} replica(s) of revision {number} created{why}"));
    }
    if total > updated {
        return Rollout::Progressing(format!("{} replica(s) of other revisions still to go{why}", total - updated));
    }
    if available < desired {
        return Rollout::Progressing(format!(
            "{available} of {desired} replica(s) of revision {number} available{why}"
        ));
    }
    Rollout::Available
}

/// Why a Pod of `revision` shows that the revision cannot serve: its container exited (a server
/// must not), crash-loops, or cannot be created. `None` while it runs or is starting (an image
/// pull that fails is [`pod_wait`]'s to judge: the kubelet tries once more before it backs off).
fn pod_failure(pod: &Pod, revision: i64, subject: &Subject<'_>) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?.container_statuses.as_ref()?.iter().find(|status| status.name == CONTAINER)?;
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let state = status.state.as_ref();
    let last = status.last_state.as_ref().and_then(|last| last.terminated.as_ref());
    let exited = state.and_then(|state| state.terminated.as_ref()).or(last);
    let waiting = state.and_then(|state| state.waiting.as_ref());
    let reason = waiting.and_then(|waiting| waiting.reason.as_deref());
    if reason == Some("CrashLoopBackOff") {
        let why = pod_wait::explain(pod, &[], subject).map(|wait| wait.why).unwrap_or_default();
        return Some(format!("revision {revision}'s container is crash-looping in Pod {name}: {why}"));
    }
    if let Some(reason) =
        reason.filter(|reason| matches!(*reason, "CreateContainerConfigError" | "CreateContainerError"))
    {
        let message = waiting.and_then(|waiting| waiting.message.as_deref()).unwrap_or("no message");
        return Some(format!(
            "revision {revision}'s container cannot start in Pod {name} ({reason}: {message}){}",
            pod_wait::config_advice(message)
        ));
    }
    if let Some(exited) = exited.filter(|_| status.restart_count > 0 || state.is_some_and(|s| s.terminated.is_some())) {
        let why = exited.reason.clone().unwrap_or_else(|| "Terminated".into());
        return Some(format!(
            "revision {revision}'s container exited with code {} in Pod {name} ({why}); a server must keep running",
            exited.exit_code
        ));
    }
    None
}

/// How many Pods of `revision` Kubernetes still lists (terminating ones included).
pub async fn revision_pods(client: &kube::Client, deployment: &Deployment, revision: i64) -> Result<usize, KubeError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &deployment.namespace);
    Ok(pods.list(&list_revision(deployment, revision)).await?.items.len())
}

/// Deletes the service's Deployment (foreground: its ReplicaSets and Pods go first), Service,
/// and any ReplicaSet, Pod or Secret of it left, and returns how many of them are still listed: 0 once
/// Kubernetes has removed everything.
pub async fn delete(client: &kube::Client, deployment: &Deployment) -> Result<usize, KubeError> {
    let selector = list_all(deployment);
    let any = |_: Option<&BTreeMap<String, String>>| true;
    let namespace = &deployment.namespace;
    let deployments: Api<KubeDeployment> = Api::namespaced(client.clone(), namespace);
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(delete_listed(&deployments, &selector, &any, &DeleteParams::foreground()).await?
        + delete_listed(&services, &selector, &any, &DeleteParams::background()).await?
        + delete_listed(&replica_sets, &selector, &any, &DeleteParams::background()).await?
        + delete_listed(&pods, &selector, &any, &DeleteParams::background()).await?
        + delete_listed(&secrets, &selector, &any, &DeleteParams::background()).await?)
}

/// Whether a Kubernetes error says the object is not there.
pub fn is_not_found(err: &KubeError) -> bool {
    matches!(err, KubeError::Call(kube::Error::Api(status)) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rolling_update_surges_a_quarter_rounded_up_and_at_least_one() {
        assert_eq!(max_surge(1), 1);
        assert_eq!(max_surge(4), 1);
        assert_eq!(max_surge(5), 2);
        assert_eq!(max_surge(10), 3);
    }
}
