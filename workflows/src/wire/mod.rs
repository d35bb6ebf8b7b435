//! The HTTP API's requests and answers, shared by the server (`cli/src/server`) and the CLI's
//! client (`cli/src/client.rs`), so that both sides agree on every field. docs/cli.md ("The HTTP
//! API") lists the routes that carry them.

use std::collections::BTreeMap;

use anycloud_engine::{EventRecord, RunDetail, RunRecord, RunStatus};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

mod views;
pub use views::{ClusterView, CredentialView, DeploymentView, HostedApiView, RevisionView, SecretView, VmView};

use crate::db::spec::EnvVar;
use crate::providers::sim_settings::SimSettings;

/// `POST /v1/credentials`: a credential to save and verify.
#[derive(Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewCredential {
    /// DNS-label name.
    pub name: String,
    /// `aws`, `gcp` or `sim`.
    pub provider: String,
    /// AWS: the access key id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// AWS: the secret access key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key: Option<String>,
    /// GCP: the service-account key file's JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_json: Option<String>,
    /// Region used for the verification call (AWS; default `us-east-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Another endpoint for the provider's API (a local peer such as moto, or a private endpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// sim: how the simulated account behaves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimSettings>,
    /// AWS, GCP: no key; the API acts as the machine it runs on (its instance profile, its
    /// service account).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub machine_identity: bool,
    /// GCP with `machine_identity`: the project to act in (a key file names its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
}

impl std::fmt::Debug for NewCredential {
    /// Secrets are never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewCredential")
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key.as_ref().map(|_| "<secret>"))
            .field("service_account_json", &self.service_account_json.as_ref().map(|_| "<secret>"))
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("sim", &self.sim)
            .field("machine_identity", &self.machine_identity)
            .field("project", &self.project)
            .finish()
    }
}

/// The answer to `POST /v1/credentials`: the credential as saved (`verifying`) and its
/// verification's run.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CredentialSaved {
    /// The credential, without its secret.
    pub credential: CredentialView,
    /// The `credentials.verify` run.
    pub workflow_id: Uuid,
}

/// `GET /v1/credentials`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CredentialList {
    /// Every credential, by name, without secrets.
    pub credentials: Vec<CredentialView>,
}

/// `GET /v1/credentials/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CredentialShown {
    /// The credential, without its secret.
    pub credential: CredentialView,
}

/// `DELETE /v1/credentials/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CredentialDeleted {
    /// The name of the credential deleted.
    pub deleted: String,
}

/// `POST /v1/clusters`: a cluster to create.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewCluster {
    /// DNS-label name, unique among clusters that are not deleted.
    pub name: String,
    /// The credential whose account holds the capacity VMs.
    pub credentials: String,
    /// Provider region.
    pub region: String,
    /// Provider machine type.
    pub vm_type: String,
    /// Fixed capacity: must equal `max_vms` for now.
    pub min_vms: i64,
    /// Fixed capacity.
    pub max_vms: i64,
}

/// The answer to `POST /v1/clusters`: the cluster's durable intent and its create run.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClusterCreated {
    /// The cluster as stored.
    pub cluster: ClusterView,
    /// The `cluster.create` run.
    pub workflow_id: Uuid,
}

/// One cluster of `GET /v1/clusters`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClusterSummary {
    /// The record.
    pub cluster: ClusterView,
    /// On the simulated cloud.
    pub simulated: bool,
    /// Capacity VMs the provider last reported running.
    pub running_vms: usize,
}

/// `GET /v1/clusters`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClusterList {
    /// Every cluster that is not deleted, by name.
    pub clusters: Vec<ClusterSummary>,
}

/// `GET /v1/clusters/{name}`, and the answer to `DELETE` on it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClusterDetail {
    /// The record: spec, phase (with its reason), placement, endpoint.
    pub cluster: ClusterView,
    /// On the simulated cloud.
    pub simulated: bool,
    /// Capacity VMs asked for.
    pub desired_vms: i64,
    /// Capacity VMs the provider last reported running.
    pub running_vms: usize,
    /// Its VMs, control plane first.
    pub vms: Vec<VmView>,
    /// The last workflow started on it.
    pub workflow: Option<WorkflowSummary>,
    /// What went wrong: the cause of a run that turned back, or the last error of one in hand.
    pub last_error: Option<String>,
}

/// Where a resource's workflow stands, in a resource's detail.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkflowSummary {
    /// The run.
    pub id: Uuid,
    /// Its kind.
    pub kind: String,
    /// Its status.
    pub status: RunStatus,
    /// The step in hand.
    pub current_step: Option<String>,
    /// Failed attempts of that step.
    pub attempt: u32,
    /// Why it waits, parked, or ended.
    pub status_reason: Option<String>,
    /// When it acts next.
    pub next_at: Option<i64>,
    /// The step in hand's number in its plan, from 1, while the run moves forward (what a
    /// follower shows as `step 3/12`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_number: Option<u32>,
    /// How many steps the run's plan has, when this API knows its definition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u32>,
}

impl From<&RunRecord> for WorkflowSummary {
    fn from(run: &RunRecord) -> Self {
        Self {
            id: run.id,
            kind: run.kind.clone(),
            status: run.status,
            current_step: run.current_step.clone(),
            attempt: run.attempt,
            status_reason: run.status_reason.clone(),
            next_at: run.next_at,
            step_number: None,
            steps: None,
        }
    }
}

impl WorkflowSummary {
    /// The summary of `run`, placed in its plan of `steps` steps (`None`: a definition this API
    /// does not know).
    pub fn placed(run: &RunRecord, steps: Option<usize>) -> Self {
        let steps = steps.and_then(|steps| u32::try_from(steps).ok()).filter(|steps| *steps > 0);
        let forward = run.phase == anycloud_engine::Phase::Forward && !run.status.is_final();
        Self {
            step_number: steps.filter(|_| forward).map(|steps| (run.step_index + 1).min(steps)),
            steps,
            ..Self::from(run)
        }
    }
}

/// The query of `GET /v1/workflows`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowQuery {
    /// Only this kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Only this status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only this resource key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// At most this many (1 to 1000; 50 by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Only runs submitted before this sequence number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<i64>,
}

/// `GET /v1/workflows`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkflowList {
    /// Runs, newest first.
    pub workflows: Vec<RunRecord>,
}

/// `GET /v1/workflows/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkflowDetail {
    /// The run, its steps and its definition's plan.
    pub workflow: RunDetail,
    /// The API's clock, for "in 3 s" and "2 min ago".
    pub now: i64,
}

/// The query of `GET /v1/workflows/{id}/events`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Only entries after this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
    /// At most this many (1 to 1000; 1000 by default): a page of the timeline, the next one
    /// after the last entry's `seq`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// The query of the lists of named resources (`GET /v1/credentials`, `/v1/clusters`,
/// `/v1/apis`): a page of them, by name.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamesQuery {
    /// At most this many (1 to 1000; 1000 by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Only the names after this one (the last of the page before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// `GET /v1/workflows/{id}/events`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkflowEvents {
    /// The run's timeline, oldest first.
    pub events: Vec<EventRecord>,
}

/// What an operator asks of a run (`POST /v1/workflows/{id}/{action}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowAction {
    /// Run the current step now.
    Retry,
    /// Continue a parked run with a fresh retry budget.
    Resume,
    /// Turn back and end `cancelled`.
    Cancel,
}

impl WorkflowAction {
    /// The last segment of its route.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Resume => "resume",
            Self::Cancel => "cancel",
        }
    }
}

/// The answer to a [`WorkflowAction`].
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkflowActed {
    /// The run.
    pub id: Uuid,
    /// Its status now.
    pub status: RunStatus,
}

/// `GET /v1/health`: always 200 while the process answers.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Health {
    /// `ok`, or `degraded` when the database or the disk under it does not take work.
    pub status: String,
    /// `reachable` or `unreachable`: whether the database answered within 2 s.
    pub database: String,
    /// On SQLite: `writable`, `disk-full` or `read-only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

/// The answer to `POST /v1/console/codes`: a code that signs a browser into the web console
/// once, within a minute.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConsoleCode {
    /// The code (32 random bytes, URL-safe base64).
    pub code: String,
    /// The path, on this API, that trades it for a session: `/ui/sign-in?code=CODE`.
    pub path: String,
    /// When it expires (milliseconds since the epoch).
    pub expires_at: i64,
}

/// `GET /v1/status`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ApiStatus {
    /// The API's id.
    pub id: String,
    /// `local` or `hosted (simulated)`.
    pub kind: String,
    /// `sqlite` or `postgres`.
    pub store: String,
    /// The name its engine holds leases under.
    pub engine_owner: String,
    /// Its version.
    pub version: String,
    /// The test seams this API runs with: always empty in a production binary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_seams: Vec<String>,
    /// Where its state is checkpointed, for an API on SQLite in a bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointStatus>,
    /// Which endpoint overrides credentials and its bucket may name: `https-only`, or
    /// `allow-insecure` (started with `--allow-insecure-endpoints`).
    #[serde(default)]
    pub endpoints: crate::providers::endpoint::EndpointPolicy,
}

/// The bucket an API's state is shipped to, and how far shipping has got.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckpointStatus {
    /// `s3://BUCKET/PREFIX` or `gs://BUCKET/PREFIX`.
    pub bucket: String,
    /// The current generation (a snapshot and the WAL segments after it).
    pub generation: String,
    /// The generation's snapshot, in bytes.
    pub snapshot_bytes: u64,
    /// WAL segments shipped since the snapshot.
    pub segments: u64,
    /// Their bytes.
    pub wal_bytes: u64,
    /// Why the last ship failed, while it is failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// Every error answer: `{"error": {"code": ..., "message": ...}}`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// A stable code and a sentence that says what to do.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorDetail {
    /// The stable code.
    pub code: String,
    /// What happened, to which resource, and what to do.
    pub message: String,
}

/// `POST /v1/secrets` (a new secret) and `PUT /v1/secrets/{name}` (its next version): either
/// `values` (an env secret) or `registry` (a registry secret), never both.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSecret {
    /// The secret's name (a DNS label); on `PUT` it must be the path's.
    pub name: String,
    /// An env secret's keys and values: the container takes each key as an environment variable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,
    /// A registry secret: the login images on its host are pulled with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistryLogin>,
}

/// A login to a container registry.
#[derive(Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryLogin {
    /// The registry's host (`ghcr.io`, `registry.example.com:5000`), as image references name it.
    pub host: String,
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl std::fmt::Debug for RegistryLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryLogin")
            .field("host", &self.host)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The answer to `POST /v1/secrets` and `PUT /v1/secrets/{name}`: the secret, never its values.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SecretSaved {
    /// The secret as stored, at its new version.
    pub secret: SecretView,
}

/// One secret in a list, with the deployments that take it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SecretSummary {
    /// The secret, without its values.
    #[serde(flatten)]
    pub secret: SecretView,
    /// The deployments that have not ended and take it, by name.
    pub used_by: Vec<String>,
}

/// `GET /v1/secrets`: a page of the secrets by name.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SecretList {
    /// The secrets, by name, without values.
    pub secrets: Vec<SecretSummary>,
}

/// `DELETE /v1/secrets/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SecretDeleted {
    /// The deleted secret's name.
    pub deleted: String,
}

/// `POST /v1/jobs`: a job to run on a cluster.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewJob {
    /// The cluster's name or id; it must be ready.
    pub cluster: String,
    /// The deployment's name (`-i/--id`), a DNS label; made from the image when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The container image reference.
    pub image: String,
    /// The command and its arguments (at least the command).
    pub command: Vec<String>,
    /// The container's environment, in order (a later duplicate wins).
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// CPUs requested and limited (`0.5`, `2`, `1500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// Memory requested and limited (`512Mi`, `2Gi`, `1G`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Env secrets the container takes (`--secret`), each at its current version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Registry secrets to pull the image with (`--pull-secret`), besides those for its host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<String>,
}

/// `POST /v1/services`: a service to deploy on a cluster.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewService {
    /// The cluster's name or id; it must be ready.
    pub cluster: String,
    /// The deployment's name (`-i/--id`), a DNS label; made from the image when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The container image reference.
    pub image: String,
    /// The command and its arguments (at least the command); it must serve on `$PORT`.
    pub command: Vec<String>,
    /// The container's environment, in order (a later duplicate wins; `PORT` is set by Anycloud).
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// CPUs requested and limited (`0.5`, `2`, `1500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// Memory requested and limited (`512Mi`, `2Gi`, `1G`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The port the app listens on (1 to 65535; 8080 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// How many replicas (1 to 100; 1 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// How long a revision may take to become available, in seconds (600 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_s: Option<i64>,
    /// Env secrets the container takes (`--secret`), each at its current version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Registry secrets to pull the image with (`--pull-secret`), besides those for its host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<String>,
}

/// `POST /v1/deployments/{id}/upgrade`: a new revision of a service. What is not given is the
/// latest revision's that did not fail.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpgradeRequest {
    /// A new image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Variables to set (added, or replacing those of the same name).
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// A new number of replicas (1 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// How long the new revision may take to become available, in seconds (600 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_s: Option<i64>,
    /// Env secrets to add (`--secret`). Every secret of the new revision, these and those it
    /// keeps, is taken at its current version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Registry secrets to add (`--pull-secret`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<String>,
}

/// Where a service answers inside its cluster.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServiceAddress {
    /// The ClusterIP Service's DNS name (`NAME.anycloud.svc.cluster.local`).
    pub dns_name: String,
    /// Its port.
    pub port: i64,
    /// The ClusterIP it was given, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
}

/// `GET /v1/deployments/{id}` and the answer to every change of a deployment.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeploymentDetail {
    /// The record: spec, status, outcome.
    pub deployment: DeploymentView,
    /// The state a person sees: the record's status, or `retrying` while its workflow retries.
    pub state: String,
    /// While `retrying`: the attempt, the cause and the next attempt's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryState>,
    /// The cluster's name.
    pub cluster: String,
    /// On the simulated cloud (whose kubelet runs commands as local processes and pulls no image).
    pub simulated: bool,
    /// The deployment's latest workflow.
    pub workflow: Option<WorkflowSummary>,
    /// A service: its revisions, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<RevisionView>,
    /// A service: where it answers inside its cluster (live Pod health is not shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<ServiceAddress>,
}

/// A workflow step that failed and will be tried again.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RetryState {
    /// Failed attempts so far.
    pub attempt: u32,
    /// Why the last one failed.
    pub cause: Option<String>,
    /// When the next one starts (ms since the epoch).
    pub next_at: Option<i64>,
}

/// The query of `GET /v1/deployments`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeploymentQuery {
    /// Only this state (`queued`, `running`, `completed`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only this kind (`job` or `service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// At most this many, newest first (1 to 500; default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `GET /v1/deployments`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeploymentList {
    /// Deployments, newest first.
    pub deployments: Vec<DeploymentSummary>,
}

/// One deployment of a list.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeploymentSummary {
    /// The record.
    pub deployment: DeploymentView,
    /// The state a person sees.
    pub state: String,
    /// The cluster's name.
    pub cluster: String,
}

/// The query of `GET /v1/deployments/{id}/logs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Keep streaming until the container ends.
    #[serde(default)]
    pub follow: bool,
    /// Start every line with the time the container runtime read it (RFC 3339 with nanoseconds)
    /// and a space, as Kubernetes' `timestamps=true` does: what a client needs to resume a
    /// stream that broke ([`crate::kubernetes::log_cursor`]).
    #[serde(default)]
    pub timestamps: bool,
    /// Only the lines stamped at or after this time (Kubernetes' `sinceTime`, whole seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub since_time: Option<k8s_openapi::jiff::Timestamp>,
}

/// The first message of `GET /v1/deployments/{id}/exec`, a WebSocket: the command to run in the
/// job's container. Then every message is binary, its first byte a channel ([`exec_channel`]) and
/// the rest the data, as Kubernetes' own `v5.channel.k8s.io` exec protocol frames them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Whether the client sends stdin (otherwise the command's stdin is empty).
    #[serde(default)]
    pub stdin: bool,
}

/// The channels of an exec session's binary messages (the first byte of each).
pub mod exec_channel {
    /// Client to server: the command's stdin.
    pub const STDIN: u8 = 0;
    /// Server to client: the command's stdout.
    pub const STDOUT: u8 = 1;
    /// Server to client: the command's stderr.
    pub const STDERR: u8 = 2;
    /// Server to client, last: an [`super::ExecExit`] as JSON.
    pub const EXIT: u8 = 3;
    /// Client to server: stdin has ended.
    pub const CLOSE_STDIN: u8 = 255;
}

/// How an exec session ended: the command's exit code, or why it could not run.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecExit {
    /// The command's exit code, when it ran.
    pub exit_code: Option<i32>,
    /// Why there is no exit code (a stable code and a sentence), when it did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// `GET /v1/clusters/{name}/kubeconfig`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Kubeconfig {
    /// The cluster's name.
    pub cluster: String,
    /// A kubeconfig (YAML) with the cluster's server, CA and an admin token.
    pub kubeconfig: String,
}

/// `POST /v1/apis`: deploy an API on a cloud VM (`anycloud api serve --credentials`).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewHostedApi {
    /// Its name (a DNS label).
    pub name: String,
    /// The hosting credential (aws or gcp).
    pub credentials: String,
    /// The VM's machine type.
    pub vm_type: String,
    /// The VM's region [default: the credential's, else us-east-1 (AWS) or us-central1 (GCP)].
    #[serde(default)]
    pub region: Option<String>,
    /// The checkpoint bucket: a name, or `s3://B[/P]`, `gs://B[/P]`.
    pub checkpoint_bucket: String,
    /// The bucket's credential [default: the hosting one].
    #[serde(default)]
    pub checkpoint_storage_credentials: Option<String>,
    /// The public HTTPS port [default: 443].
    #[serde(default)]
    pub port: Option<u16>,
    /// The SHA-256 of the binary the deploy ships to the VM, staged on this API first
    /// (`PUT /v1/binaries/{sha256}`); its architecture must be the machine type's. Exactly one
    /// of `binary` and `binary_url`.
    #[serde(default)]
    pub binary: Option<String>,
    /// An operator's own `https://` URL of the binary (`{arch}`: x86_64 or aarch64), with
    /// `binary_sha256`.
    #[serde(default)]
    pub binary_url: Option<String>,
    /// With `binary_url`: the SHA-256 of each architecture's binary, `x86_64=HEX[,aarch64=HEX]`;
    /// the VM checks it before it runs a byte.
    #[serde(default)]
    pub binary_sha256: Option<String>,
}

/// `GET /v1/credentials/{name}/vm-types/{vm_type}?region=R`: what a machine type runs on, which
/// the binary a hosted API's VM runs must match.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VmTypeArchitectures {
    /// The credential asked.
    pub credential: String,
    /// The region (the credential's or the provider's default when none was given).
    pub region: String,
    /// The machine type.
    pub vm_type: String,
    /// Its architectures, as the provider names them.
    pub architectures: Vec<crate::hosting::binary::Arch>,
}

/// The query of [`VmTypeArchitectures`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VmTypeQuery {
    /// The region [default: as `api serve --credentials` picks it].
    #[serde(default)]
    pub region: Option<String>,
}

/// The answer to `POST /v1/apis` and `DELETE /v1/apis/{name}`: the record and the run.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostedApiStarted {
    /// The record.
    pub api: HostedApiView,
    /// The `api.deploy` or `api.remove` run.
    pub workflow_id: Uuid,
}

/// `GET /v1/apis`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostedApiList {
    /// The live hosted APIs, by name.
    pub apis: Vec<HostedApiView>,
}

/// `GET /v1/apis/{name}/access`: what a CLI needs to use a ready hosted API.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostedApiAccess {
    /// Its name.
    pub name: String,
    /// Where it answers.
    pub url: String,
    /// Its bearer token.
    pub token: String,
    /// The CA its certificate chains to: what the CLI pins.
    pub ca_pem: String,
    /// Its provider.
    pub provider: String,
}

/// `DELETE /v1/apis/{name}?delete_bucket=true`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveHostedApi {
    /// Delete the checkpoint bucket and the API's state in it too.
    #[serde(default)]
    pub delete_bucket: bool,
}

/// The answer to `POST /v1/tls/renew`: the certificate an API serves from now on.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TlsRenewed {
    /// The CA it was issued from (PEM): what clients pin.
    pub ca_pem: String,
    /// The address it names.
    pub address: String,
    /// When it stops being valid (seconds since the epoch).
    pub not_after: i64,
}
