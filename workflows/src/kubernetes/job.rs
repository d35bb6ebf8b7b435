//! A job's Kubernetes objects: the `batch/v1` Job Anycloud applies for each attempt of a
//! deployment, what its Pod says about progress and outcome, its logs and exec, and its
//! deletion. The same calls reach k3s on a real cluster and the simulated cloud's API.

use std::collections::BTreeMap;

use std::pin::Pin;
use std::time::Duration;

use futures::{AsyncBufRead, AsyncBufReadExt, Stream};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, AttachParams, AttachedProcess, DeleteParams, ListParams, LogParams, Patch, PatchParams};
use serde_json::json;
use tokio::sync::mpsc;

use crate::db::deployments::Deployment;
use crate::kubernetes;
use crate::kubernetes::client::KubeError;
use crate::kubernetes::log_cursor::{self, LogCursor};
use crate::kubernetes::pod_wait::{self, PodWait, Subject};
use crate::kubernetes::secret::Opened;
use crate::kubernetes::{CONTAINER, DEPLOYMENT, DEPLOYMENT_ID, FIELD_MANAGER};

/// The label of the attempt an object belongs to.
pub const ATTEMPT: &str = "anycloud.dev/attempt";

/// The labels of every object of the deployment's current attempt.
pub fn labels(deployment: &Deployment) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/managed-by".to_owned(), "anycloud".to_owned()),
        (DEPLOYMENT.to_owned(), deployment.name.clone()),
        (DEPLOYMENT_ID.to_owned(), deployment.id.clone()),
        (ATTEMPT.to_owned(), deployment.attempt.to_string()),
    ])
}

/// The selector of the Pods of the deployment's current attempt.
fn attempt_selector(deployment: &Deployment) -> String {
    format!("{DEPLOYMENT_ID}={},{ATTEMPT}={}", deployment.id, deployment.attempt)
}

/// What the Secrets of the deployment's current attempt are named after
/// ([`kubernetes::secret::object_name`]): `{name}.{attempt}`.
fn secrets_prefix(deployment: &Deployment) -> String {
    format!("{}.{}", deployment.name, deployment.attempt)
}

/// The Job of the deployment's current attempt: one Pod, never restarted, no retries (a new
/// attempt is a `resubmit`), requests equal to limits; its secrets by reference
/// ([`kubernetes::secret::references`]).
pub fn job_object(deployment: &Deployment) -> serde_json::Value {
    let spec = &deployment.spec;
    let mut resources = serde_json::Map::new();
    if let Some(cpus) = &spec.cpus {
        resources.insert("cpu".into(), json!(cpus));
    }
    if let Some(memory) = &spec.memory {
        resources.insert("memory".into(), json!(memory));
    }
    let env: Vec<_> = spec.env.iter().map(|var| json!({ "name": var.name, "value": var.value })).collect();
    let (env_from, pull_secrets) = kubernetes::secret::references(&secrets_prefix(deployment), &spec.secrets);
    let labels = labels(deployment);
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": deployment.job_name(), "namespace": deployment.namespace, "labels": labels },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": labels },
                "spec": {
                    "restartPolicy": "Never",
                    "imagePullSecrets": pull_secrets,
                    "containers": [{
                        "name": CONTAINER,
                        "image": spec.image,
                        "command": spec.command,
                        "env": env,
                        "envFrom": env_from,
                        "resources": { "requests": resources, "limits": resources },
                    }],
                },
            },
        },
    })
}

/// Server-side applies the deployment's namespace and its current attempt's Secrets
/// (`secrets`, opened at their pinned versions), not yet owned: [`apply_job`] follows.
pub async fn apply_secrets(
    client: &kube::Client,
    deployment: &Deployment,
    secrets: &[Opened],
) -> Result<(), KubeError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": deployment.namespace, "labels": { "app.kubernetes.io/managed-by": "anycloud" } },
    });
    namespaces.patch(&deployment.namespace, &params, &Patch::Apply(namespace)).await?;
    kubernetes::secret::apply(client, &deployment.namespace, secret_objects(deployment, secrets, None)).await
}

/// Server-side applies the current attempt's Job, then its Secrets again, now owned by the Job
/// (so that deleting the Job deletes them). Run twice, it changes nothing.
pub async fn apply_job(client: &kube::Client, deployment: &Deployment, secrets: &[Opened]) -> Result<(), KubeError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &deployment.namespace);
    let job = jobs.patch(&deployment.job_name(), &params, &Patch::Apply(job_object(deployment))).await?;
    if !secrets.is_empty() {
        let uid = job.metadata.uid.unwrap_or_default();
        let owner = kubernetes::secret::owner("batch/v1", "Job", &deployment.job_name(), &uid);
        kubernetes::secret::apply(client, &deployment.namespace, secret_objects(deployment, secrets, Some(&owner)))
            .await?;
    }
    Ok(())
}

/// The Secrets of the current attempt, owned by `owner` when given.
fn secret_objects(
    deployment: &Deployment,
    secrets: &[Opened],
    owner: Option<&serde_json::Value>,
) -> Vec<serde_json::Value> {
    let (prefix, labels) = (secrets_prefix(deployment), labels(deployment));
    secrets
        .iter()
        .map(|opened| kubernetes::secret::secret_object(&deployment.namespace, &prefix, &labels, opened, owner))
        .collect()
}

/// Whether a Kubernetes error is the cluster refusing the object itself (400, 422): applying it
/// again cannot succeed.
pub fn is_refusal(err: &KubeError) -> Option<String> {
    match err {
        KubeError::Call(kube::Error::Api(status)) if matches!(status.code, 400 | 422) => Some(status.message.clone()),
        _ => None,
    }
}

/// Where an attempt stands, as its Job and Pod say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// No Pod runs yet; why, in Kubernetes' words, and whether it may still start.
    Starting(PodWait),
    /// Its Pod runs, on this node.
    Running {
        /// The Pod.
        pod: String,
        /// Its node.
        node: Option<String>,
    },
    /// It ended.
    Ended(Outcome),
    /// The Job does not exist (deleted behind Anycloud's back).
    Gone,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// The Job completed.
    pub succeeded: bool,
    /// The container's exit code, when it ran.
    pub exit_code: Option<i32>,
    /// Why, in Kubernetes' words (`Completed`, `Error`, a condition's message).
    pub reason: String,
    /// When the container started (ms since the epoch), when it ran.
    #[serde(default)]
    pub started_at: Option<i64>,
}

/// Reads the Job of the deployment's current attempt and its Pods.
pub async fn progress(client: &kube::Client, deployment: &Deployment) -> Result<Progress, KubeError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &deployment.namespace);
    let Some(job) = jobs.get_opt(&deployment.job_name()).await? else { return Ok(Progress::Gone) };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &deployment.namespace);
    let mut found = pods.list(&ListParams::default().labels(&attempt_selector(deployment))).await?.items;
    found.sort_by_key(|pod| pod.metadata.creation_timestamp.clone());
    let pod = found.pop();
    let terminated = pod.as_ref().and_then(container_state).and_then(|state| state.terminated);
    let conditions = job.status.as_ref().and_then(|status| status.conditions.clone()).unwrap_or_default();
    let ended = conditions
        .iter()
        .find(|condition| condition.status == "True" && matches!(condition.type_.as_str(), "Complete" | "Failed"));
    if let Some(condition) = ended {
        let succeeded = condition.type_ == "Complete";
        let reason = match (&terminated, &condition.message) {
            (Some(terminated), _) => terminated.reason.clone().unwrap_or_else(|| condition.type_.clone()),
            (None, Some(message)) => message.clone(),
            (None, None) => condition.reason.clone().unwrap_or_else(|| condition.type_.clone()),
        };
        let exit_code = terminated.as_ref().map(|terminated| terminated.exit_code);
        let started_at = terminated.as_ref().and_then(started_ms);
        return Ok(Progress::Ended(Outcome { succeeded, exit_code, reason, started_at }));
    }
    let Some(pod) = pod else {
        let why = format!("Job {} has no Pod yet", deployment.job_name());
        return Ok(Progress::Starting(PodWait { why, verdict: pod_wait::Verdict::Waits }));
    };
    let name = pod.metadata.name.clone().unwrap_or_default();
    let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone());
    let state = container_state(&pod);
    if let Some(terminated) = state.as_ref().and_then(|state| state.terminated.clone()) {
        // The Job's condition follows shortly; the Pod already knows.
        return Ok(Progress::Ended(Outcome {
            succeeded: terminated.exit_code == 0,
            exit_code: Some(terminated.exit_code),
            started_at: started_ms(&terminated),
            reason: terminated.reason.unwrap_or_else(|| "Terminated".into()),
        }));
    }
    if state.as_ref().is_some_and(|state| state.running.is_some()) {
        return Ok(Progress::Running { pod: name, node });
    }
    if let Some(wait) = pod_wait::explain_live(client, &pod, &subject(deployment)).await? {
        return Ok(Progress::Starting(wait));
    }
    let waiting = state.and_then(|state| state.waiting).map(|waiting| {
        let reason = waiting.reason.unwrap_or_else(|| "Waiting".into());
        match waiting.message {
            Some(message) => format!("{reason}: {message}"),
            None => reason,
        }
    });
    let phase = pod.status.and_then(|status| status.phase).unwrap_or_else(|| "Pending".into());
    let why = format!("Pod {name} is {phase}{}", waiting.map(|w| format!(" ({w})")).unwrap_or_default());
    Ok(Progress::Starting(PodWait { why, verdict: pod_wait::Verdict::Waits }))
}

/// The job as the words about its Pod name it: what to run once the cause is fixed is a
/// `resubmit`.
fn subject(deployment: &Deployment) -> Subject<'_> {
    Subject {
        name: &deployment.name,
        image: &deployment.spec.image,
        port: None,
        again: format!("`anycloud resubmit {}`", deployment.name),
    }
}

/// When a terminated container started, in ms since the epoch.
fn started_ms(terminated: &k8s_openapi::api::core::v1::ContainerStateTerminated) -> Option<i64> {
    terminated.started_at.as_ref().map(|time| time.0.as_millisecond())
}

fn container_state(pod: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerState> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find(|status| status.name == CONTAINER)?.state.clone()
}

/// Deletes the Jobs of every attempt of the deployment before `before` (all of them when
/// `None`), with their Pods (foreground propagation) and Secrets, and returns how many of them
/// are still listed: 0 once Kubernetes has removed everything.
pub async fn delete(client: &kube::Client, deployment: &Deployment, before: Option<i64>) -> Result<usize, KubeError> {
    let selector = ListParams::default().labels(&format!("{DEPLOYMENT_ID}={}", deployment.id));
    let old = |labels: Option<&BTreeMap<String, String>>| {
        let attempt = labels.and_then(|labels| labels.get(ATTEMPT)).and_then(|attempt| attempt.parse::<i64>().ok());
        match (before, attempt) {
            (None, _) => true,
            (Some(before), Some(attempt)) => attempt < before,
            (Some(_), None) => false,
        }
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), &deployment.namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &deployment.namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &deployment.namespace);
    Ok(delete_listed(&jobs, &selector, &old, &DeleteParams::foreground()).await?
        + delete_listed(&pods, &selector, &old, &DeleteParams::background()).await?
        + delete_listed(&secrets, &selector, &old, &DeleteParams::background()).await?)
}

/// Deletes the objects `selector` lists that `wanted` keeps, and returns how many of them were
/// still there (a 404 means one is gone already).
pub(crate) async fn delete_listed<K>(
    api: &Api<K>,
    selector: &ListParams,
    wanted: &impl Fn(Option<&BTreeMap<String, String>>) -> bool,
    params: &DeleteParams,
) -> Result<usize, KubeError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut left = 0;
    for object in api.list(selector).await?.items.into_iter().filter(|object| wanted(object.meta().labels.as_ref())) {
        left += 1;
        let name = object.meta().name.clone().unwrap_or_default();
        match api.delete(&name, params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => left -= 1,
            Err(err) => return Err(err.into()),
        }
    }
    Ok(left)
}

/// The Pod of the deployment's current attempt, once its container has started (running or
/// ended); `None` while it has not.
pub async fn started_pod(client: &kube::Client, deployment: &Deployment) -> Result<Option<String>, KubeError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &deployment.namespace);
    let mut found = pods.list(&ListParams::default().labels(&attempt_selector(deployment))).await?.items;
    found.sort_by_key(|pod| pod.metadata.creation_timestamp.clone());
    Ok(found
        .into_iter()
        .rev()
        .find(|pod| container_state(pod).is_some_and(|state| state.running.is_some() || state.terminated.is_some()))
        .and_then(|pod| pod.metadata.name))
}

/// How long a followed log may stay silent before the follower asks whether its container still
/// runs: a stream whose container has ended but which did not end with it (its connection died
/// unnoticed) is opened again to read the rest.
const SILENCE_CHECK: Duration = Duration::from_secs(30);
/// How long a follower keeps trying to open a broken stream again before it gives up.
const REOPEN_PATIENCE: Duration = Duration::from_secs(120);

/// The container's logs, line by line, each line stamped (`timestamps=true`: RFC 3339 with
/// nanoseconds, a space, then the line as written), from `since` when given. With `follow`, until
/// the container ends: a stream that Kubernetes (or anything on the way) drops while the
/// container runs is opened again from where it was ([`LogCursor`]), and a silent one is checked
/// every [`SILENCE_CHECK`]. `client` makes the short calls, `stream` (no read timeout,
/// [`crate::kubernetes::client::stream_client`]) reads the log.
pub async fn logs(
    client: &kube::Client,
    stream: &kube::Client,
    namespace: &str,
    pod: &str,
    follow: bool,
    since: Option<Timestamp>,
) -> Result<impl Stream<Item = std::io::Result<Vec<u8>>> + Send + use<>, KubeError> {
    let reader = Api::<Pod>::namespaced(stream.clone(), namespace).log_stream(pod, &log_params(follow, since)).await?;
    let (lines, receiver) = mpsc::channel(64);
    let follower = LogFollower {
        pods: Api::namespaced(client.clone(), namespace),
        streams: Api::namespaced(stream.clone(), namespace),
        pod: pod.to_owned(),
        since,
        cursor: LogCursor::new(),
        lines,
    };
    tokio::spawn(follower.run(Box::pin(reader), follow));
    Ok(futures::stream::unfold(
        receiver,
        |mut receiver| async move { receiver.recv().await.map(|line| (line, receiver)) },
    ))
}

fn log_params(follow: bool, since: Option<Timestamp>) -> LogParams {
    LogParams { container: Some(CONTAINER.into()), follow, timestamps: true, since_time: since, ..LogParams::default() }
}

/// How one stream of a log ended.
enum StreamEnd {
    /// The server ended it.
    Ended,
    /// It broke (or its connection died: it was silent and its container has ended).
    Broken(String),
    /// Nobody reads any more.
    Abandoned,
}

/// Reads a container's log through every stream it takes.
struct LogFollower {
    pods: Api<Pod>,
    streams: Api<Pod>,
    pod: String,
    since: Option<Timestamp>,
    cursor: LogCursor,
    lines: mpsc::Sender<std::io::Result<Vec<u8>>>,
}

impl LogFollower {
    async fn run(mut self, mut reader: Pin<Box<dyn AsyncBufRead + Send>>, mut follow: bool) {
        loop {
            match self.read(&mut reader, follow).await {
                StreamEnd::Abandoned => return,
                // Without `follow` the server ends the stream once it has sent the whole log.
                StreamEnd::Ended if !follow => return,
                StreamEnd::Ended => {}
                StreamEnd::Broken(why) => tracing::info!(pod = %self.pod, %why, "a log stream broke; opening it again"),
            }
            // What the container does now says what to read next: a running one is followed
            // again, an ended one read once more to its end, a deleted one has no log left.
            let started = tokio::time::Instant::now();
            let reopened = loop {
                // A server that ends every stream at once is not asked in a tight loop.
                tokio::time::sleep(Duration::from_millis(500)).await;
                let next = match self.container_ended().await {
                    Ok(None) => return,
                    Ok(Some(ended)) => {
                        follow = follow && !ended;
                        let since = self.cursor.since_time().or(self.since);
                        self.streams
                            .log_stream(&self.pod, &log_params(follow, since))
                            .await
                            .map_err(|err| err.to_string())
                    }
                    Err(err) => Err(err.to_string()),
                };
                match next {
                    Ok(reader) => break reader,
                    Err(err) if started.elapsed() > REOPEN_PATIENCE => {
                        let message = format!("the log of Pod {} could not be read again: {err}", self.pod);
                        let _ = self.lines.send(Err(std::io::Error::other(message))).await;
                        return;
                    }
                    Err(_) if self.lines.is_closed() => return,
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            };
            self.cursor.reopened();
            reader = Box::pin(reopened);
        }
    }

    /// Passes the stream's new lines on until it ends.
    async fn read(&mut self, reader: &mut Pin<Box<dyn AsyncBufRead + Send>>, follow: bool) -> StreamEnd {
        let mut line = Vec::new();
        loop {
            match tokio::time::timeout(SILENCE_CHECK, reader.read_until(b'\n', &mut line)).await {
                Err(_silent) => {
                    if self.lines.is_closed() {
                        return StreamEnd::Abandoned;
                    }
                    if follow && !matches!(self.container_ended().await, Ok(Some(false))) {
                        return StreamEnd::Broken("silent, and its container has ended".into());
                    }
                }
                Ok(Ok(0)) => {
                    // A last line without its newline is whole only once the log has ended.
                    if !follow && !line.is_empty() && !self.pass(std::mem::take(&mut line)).await {
                        return StreamEnd::Abandoned;
                    }
                    return StreamEnd::Ended;
                }
                Ok(Ok(_)) if line.ends_with(b"\n") => {
                    if !self.pass(std::mem::take(&mut line)).await {
                        return StreamEnd::Abandoned;
                    }
                }
                Ok(Ok(_)) => {}
                Ok(Err(err)) => return StreamEnd::Broken(err.to_string()),
            }
        }
    }

    /// Sends the line on unless an earlier stream sent it; false once nobody reads.
    async fn pass(&mut self, line: Vec<u8>) -> bool {
        let new = match log_cursor::split_stamp(&line) {
            Some((stamp, _)) => self.cursor.pass(stamp),
            None => true,
        };
        !new || self.lines.send(Ok(line)).await.is_ok()
    }

    /// Whether the Pod's container has ended; `None` once the Pod is gone.
    async fn container_ended(&self) -> Result<Option<bool>, KubeError> {
        let Some(pod) = self.pods.get_opt(&self.pod).await? else { return Ok(None) };
        Ok(Some(container_state(&pod).is_some_and(|state| state.terminated.is_some())))
    }
}

/// Runs `command` in the container, with stdin when asked, stdout and stderr.
pub async fn exec(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    command: &[String],
    stdin: bool,
) -> Result<AttachedProcess, KubeError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = AttachParams::default().container(CONTAINER).stdin(stdin).stdout(true).stderr(true);
    Ok(pods.exec(pod, command.to_vec(), &params).await?)
}

/// The exit code an exec's final status reports: 0 on success, the code Kubernetes names in its
/// `ExitCode` cause otherwise; `None` when it names none.
pub fn exec_exit_code(status: &Status) -> Option<i32> {
    if status.status.as_deref() == Some("Success") {
        return Some(0);
    }
    let causes = status.details.as_ref()?.causes.as_ref()?;
    causes
        .iter()
        .find(|cause| cause.reason.as_deref() == Some("ExitCode"))
        .and_then(|cause| cause.message.as_deref()?.parse().ok())
}
