//! The resources as the HTTP API shows them: structs of their own, filled from the table rows by
//! the `From` impls below, so that a column can change (or be added) without changing what
//! clients read, and nothing internal reaches them by accident. Their JSON is the stable shape
//! the CLI, `--json` users and the console read.

use serde::{Deserialize, Serialize};

use crate::cloud::ProviderKind;
use crate::db::clusters::{self, ControlPlanePlacement};
use crate::db::credentials::{self, CredentialStatus, PublicPart};
use crate::db::deployments::{self, DeploymentKind, Status};
use crate::db::hosted_apis;
use crate::db::revisions::{self, RevisionResult};
use crate::db::secrets;
use crate::db::spec::Spec;
use crate::db::vms;

/// A cluster: its spec, where it stands, where its control plane runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClusterView {
    /// Stable id; the value of the cluster tag on everything it owns.
    pub id: String,
    /// Name.
    pub name: String,
    /// The credential of the capacity account.
    pub credential: String,
    /// Its provider.
    pub provider: ProviderKind,
    /// Region.
    pub region: String,
    /// Zone, once picked (GCP).
    pub zone: Option<String>,
    /// Machine type.
    pub vm_type: String,
    /// Capacity VMs (min).
    pub min_vms: i64,
    /// Capacity VMs (max).
    pub max_vms: i64,
    /// Where it stands.
    pub phase: clusters::Phase,
    /// Why it failed, when it did.
    pub reason: Option<String>,
    /// The Kubernetes API endpoint, once it answers.
    pub endpoint: Option<String>,
    /// The provider's id of its network rules.
    pub network_id: Option<String>,
    /// The last workflow started on it.
    pub workflow_id: Option<String>,
    /// When a delete was accepted (ms since the epoch).
    pub delete_requested_at: Option<i64>,
    /// Created at (ms since the epoch).
    pub created_at: i64,
    /// Changed at.
    pub updated_at: i64,
    /// The credential the control plane runs on, when not the capacity's (a hosted API's own).
    pub control_plane_credential: Option<String>,
    /// Its provider.
    pub control_plane_provider: Option<String>,
    /// Its region.
    pub control_plane_region: Option<String>,
    /// Its zone, once picked (GCP).
    pub control_plane_zone: Option<String>,
    /// Its machine type.
    pub control_plane_vm_type: Option<String>,
}

impl ClusterView {
    /// Where its control plane runs, when apart from its capacity.
    pub fn control_plane(&self) -> Option<ControlPlanePlacement> {
        ControlPlanePlacement::from_columns([
            &self.control_plane_credential,
            &self.control_plane_provider,
            &self.control_plane_region,
            &self.control_plane_zone,
            &self.control_plane_vm_type,
        ])
    }
}

impl From<clusters::Cluster> for ClusterView {
    fn from(row: clusters::Cluster) -> Self {
        Self {
            id: row.id,
            name: row.name,
            credential: row.credential,
            provider: row.provider,
            region: row.region,
            zone: row.zone,
            vm_type: row.vm_type,
            min_vms: row.min_vms,
            max_vms: row.max_vms,
            phase: row.phase,
            reason: row.reason,
            endpoint: row.endpoint,
            network_id: row.network_id,
            workflow_id: row.workflow_id,
            delete_requested_at: row.delete_requested_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
            control_plane_credential: row.control_plane_credential,
            control_plane_provider: row.control_plane_provider,
            control_plane_region: row.control_plane_region,
            control_plane_zone: row.control_plane_zone,
            control_plane_vm_type: row.control_plane_vm_type,
        }
    }
}

/// One VM of a cluster, as the provider last reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VmView {
    /// The provider's id.
    pub provider_id: String,
    /// Its name within the cluster.
    pub name: String,
    /// `control-plane` or `worker`.
    pub role: String,
    /// Last state seen at the provider (`terminated` once gone).
    pub state: String,
    /// Private address.
    pub private_ip: Option<String>,
    /// Public address.
    pub public_ip: Option<String>,
    /// Last seen at (ms since the epoch).
    pub updated_at: i64,
}

impl From<vms::VmRecord> for VmView {
    fn from(row: vms::VmRecord) -> Self {
        Self {
            provider_id: row.provider_id,
            name: row.name,
            role: row.role,
            state: row.state,
            private_ip: row.private_ip,
            public_ip: row.public_ip,
            updated_at: row.updated_at,
        }
    }
}

/// A credential: its name, provider, public part and verdict; never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CredentialView {
    /// Name.
    pub name: String,
    /// Provider.
    pub provider: ProviderKind,
    /// What is safe to show.
    pub public: PublicPart,
    /// Verification state.
    pub status: CredentialStatus,
    /// The provider's words when it rejected the credential, or why verification waits.
    pub status_message: Option<String>,
    /// The `credentials.verify` run.
    pub verify_run: Option<String>,
    /// Saved at (ms since the epoch).
    pub created_at: i64,
    /// Changed at.
    pub updated_at: i64,
}

impl From<credentials::Credential> for CredentialView {
    fn from(row: credentials::Credential) -> Self {
        Self {
            name: row.name,
            provider: row.provider,
            public: row.public,
            status: row.status,
            status_message: row.status_message,
            verify_run: row.verify_run,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// A job or a service: what it runs, where it stands, its attempt and (a service) what serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeploymentView {
    /// Stable id (a UUID); the value of the `anycloud.dev/deployment-id` label.
    pub id: String,
    /// Its name.
    pub name: String,
    /// A job or a service.
    pub kind: DeploymentKind,
    /// Its cluster's id.
    pub cluster_id: String,
    /// Where it stands.
    pub status: Status,
    /// What it runs.
    #[serde(flatten)]
    pub spec: Spec,
    /// Its attempt: 1, then one more per `resubmit`.
    pub attempt: i64,
    /// The Kubernetes namespace of its objects.
    pub namespace: String,
    /// The container's exit code, once it ended.
    pub exit_code: Option<i32>,
    /// Why it ended so, or what it waits for.
    pub reason: Option<String>,
    /// Its latest workflow run.
    pub workflow_id: Option<String>,
    /// When it was submitted (ms since the epoch).
    pub created_at: i64,
    /// When its current attempt's Pod started running.
    pub started_at: Option<i64>,
    /// When its current attempt ended.
    pub ended_at: Option<i64>,
    /// When the record last changed.
    pub updated_at: i64,
    /// A service: the port its app listens on, and its Kubernetes Service's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// A service: how many replicas the serving revision runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// A service: the revision that serves, or served last before it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// A service: the ClusterIP its Kubernetes Service was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
}

impl DeploymentView {
    /// A service (else a job).
    pub fn is_service(&self) -> bool {
        self.kind == DeploymentKind::Service
    }

    /// The revision that serves now (see [`deployments::Deployment::serving_revision`]).
    pub fn serving_revision(&self) -> Option<i64> {
        deployments::serving_revision(self.kind, self.status, self.revision)
    }

    /// The name of its current attempt's Kubernetes Job.
    pub fn job_name(&self) -> String {
        deployments::job_name(&self.name, self.attempt)
    }
}

impl From<deployments::Deployment> for DeploymentView {
    fn from(row: deployments::Deployment) -> Self {
        Self {
            id: row.id,
            name: row.name,
            kind: row.kind,
            cluster_id: row.cluster_id,
            status: row.status,
            spec: row.spec,
            attempt: row.attempt,
            namespace: row.namespace,
            exit_code: row.exit_code,
            reason: row.reason,
            workflow_id: row.workflow_id,
            created_at: row.created_at,
            started_at: row.started_at,
            ended_at: row.ended_at,
            updated_at: row.updated_at,
            port: row.port,
            replicas: row.replicas,
            revision: row.revision,
            cluster_ip: row.cluster_ip,
        }
    }
}

/// One revision of a service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RevisionView {
    /// 1, 2, ...
    pub number: i64,
    /// What it runs.
    #[serde(flatten)]
    pub spec: Spec,
    /// How many replicas it runs.
    pub replicas: i64,
    /// How long it may take to become available, in seconds.
    pub progress_deadline_s: i64,
    /// How it fared.
    pub result: RevisionResult,
    /// Why (a failure's cause, what it waits for).
    pub reason: Option<String>,
    /// The run that deploys or upgrades to it.
    pub workflow_id: Option<String>,
    /// When it was asked for (ms since the epoch).
    pub created_at: i64,
    /// When it stopped serving, or failed.
    pub ended_at: Option<i64>,
}

impl From<revisions::Revision> for RevisionView {
    fn from(row: revisions::Revision) -> Self {
        Self {
            number: row.number,
            spec: row.spec,
            replicas: row.replicas,
            progress_deadline_s: row.progress_deadline_s,
            result: row.result,
            reason: row.reason,
            workflow_id: row.workflow_id,
            created_at: row.created_at,
            ended_at: row.ended_at,
        }
    }
}

/// A secret: its name, kind, version and key names; never its values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SecretView {
    /// Its name.
    pub name: String,
    /// A registry secret: the registry host it logs in to. `None` for an env secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// Its current version.
    pub version: i64,
    /// The current version's key names.
    pub keys: Vec<String>,
    /// Created at (ms since the epoch).
    pub created_at: i64,
    /// Its current version was set at.
    pub updated_at: i64,
}

impl From<secrets::Secret> for SecretView {
    fn from(row: secrets::Secret) -> Self {
        Self {
            name: row.name,
            registry: row.registry,
            version: row.version,
            keys: row.keys,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// A hosted API as its deployer shows it (never its token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostedApiView {
    /// Stable id; `api-<id>` tags what it owns at the provider.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The hosting credential.
    pub credential: String,
    /// Its provider.
    pub provider: ProviderKind,
    /// The credential of the checkpoint bucket.
    pub storage_credential: String,
    /// The VM's region.
    pub region: String,
    /// The VM's machine type.
    pub vm_type: String,
    /// `s3://...` or `gs://...`.
    pub bucket: String,
    /// The public HTTPS port.
    pub port: i64,
    /// Where the VM gets `anycloud`.
    pub binary_url: String,
    /// The SHA-256 of each architecture's binary, `x86_64=HEX[,aarch64=HEX]`.
    pub binary_sha256: Option<String>,
    /// Where it stands.
    pub phase: hosted_apis::Phase,
    /// Why it failed, when it did.
    pub reason: Option<String>,
    /// Where it answers, once it does.
    pub url: Option<String>,
    /// The TLS CA's certificate, which clients pin.
    pub ca_pem: Option<String>,
    /// `created` or `adopted`, once the bucket is made.
    pub bucket_made: Option<String>,
    /// The last workflow started on it.
    pub workflow_id: Option<String>,
    /// Created at (ms since the epoch).
    pub created_at: i64,
    /// Changed at.
    pub updated_at: i64,
}

impl From<hosted_apis::HostedApi> for HostedApiView {
    fn from(row: hosted_apis::HostedApi) -> Self {
        Self {
            id: row.id,
            name: row.name,
            credential: row.credential,
            provider: row.provider,
            storage_credential: row.storage_credential,
            region: row.region,
            vm_type: row.vm_type,
            bucket: row.bucket,
            port: row.port,
            binary_url: row.binary_url,
            binary_sha256: row.binary_sha256,
            phase: row.phase,
            reason: row.reason,
            url: row.url,
            ca_pem: row.ca_pem,
            bucket_made: row.bucket_made,
            workflow_id: row.workflow_id,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}
