//! The one interface the workflows use to act on a cloud: check a credential, launch tagged VMs
//! with user-data, find them again by tag, terminate them, and keep the cluster's network rules.
//!
//! Every call is idempotent across retries and restarts:
//! - a VM has a deterministic name within its cluster (`cp`, `w0`, `w1`, ...); `launch` first
//!   looks for a live VM with that name and the cluster's tag and returns it when found, and
//!   otherwise passes the step's idempotency token to the cloud (EC2 `ClientToken`, GCE
//!   `requestId`);
//! - `ensure_network` finds the cluster's rules by tag or name before creating them, and
//!   `open_network` adds only what is missing and removes only what is extra;
//! - `ensure_address` finds the owner's reserved address by tag or name before reserving one;
//! - `terminate`, `delete_network` and `release_addresses` succeed when there is nothing left to
//!   remove.
//!
//! Every resource carries the cluster's id as a tag (AWS) or label (GCP), so a sweep finds
//! what a half-finished create left behind.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Which cloud a credential belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Amazon Web Services (EC2).
    Aws,
    /// Google Cloud (Compute Engine).
    Gcp,
    /// The local simulated cloud.
    Sim,
}

impl ProviderKind {
    /// The name users type.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Aws => "aws",
            Self::Gcp => "gcp",
            Self::Sim => "sim",
        }
    }
}

impl std::str::FromStr for ProviderKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "aws" => Ok(Self::Aws),
            "gcp" => Ok(Self::Gcp),
            "sim" => Ok(Self::Sim),
            other => Err(format!("unknown provider `{other}`: use aws, gcp or sim")),
        }
    }
}

impl TryFrom<String> for ProviderKind {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a provider said of a credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "verdict")]
pub enum Verdict {
    /// Accepted; `detail` says what the check saw (e.g. how many regions it may use).
    Accepted {
        /// What the check saw.
        detail: String,
    },
    /// Rejected, in the provider's own words.
    Rejected {
        /// The provider's message.
        message: String,
    },
}

/// The tag (AWS) or label (GCP) key that carries the cluster's id on every resource.
pub const CLUSTER_TAG: &str = "anycloud-cluster";
/// The tag or label that carries a VM's name within its cluster (`cp`, `w0`, ...).
pub const NAME_TAG: &str = "anycloud-vm";
/// The tag or label that carries a VM's role.
pub const ROLE_TAG: &str = "anycloud-role";
/// The tag (AWS) that carries, on everything a deployed API creates, the API's owner id
/// (`api-<id>`): its VM's role may act only on resources carrying it (`providers::aws_iam`).
pub const OWNER_TAG: &str = "anycloud-owner";

/// What a VM is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Runs the Kubernetes server.
    ControlPlane,
    /// Capacity: a Kubernetes node that runs workloads.
    Worker,
    /// Runs a hosted API (`api.deploy`).
    HostedApi,
}

impl Role {
    /// The tag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ControlPlane => "control-plane",
            Self::Worker => "worker",
            Self::HostedApi => "hosted-api",
        }
    }

    /// Parses a tag value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "control-plane" => Some(Self::ControlPlane),
            "worker" => Some(Self::Worker),
            "hosted-api" => Some(Self::HostedApi),
            _ => None,
        }
    }
}

/// Where and what a cluster's VMs are: the cloud's view of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The cluster's id: the value of [`CLUSTER_TAG`] on everything it owns.
    pub cluster_id: String,
    /// Region (AWS, sim) or region whose first zone is used (GCP).
    pub region: String,
    /// Zone within the region, when the provider places VMs in zones (GCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The provider's machine type.
    pub vm_type: String,
    /// The boot image the provider picked (an AMI id, a GCE image URL), when it needs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// One VM to launch.
#[derive(Debug, Clone)]
pub struct LaunchSpec<'a> {
    /// The cluster and machine type.
    pub placement: &'a Placement,
    /// The VM's name within its cluster (`cp`, `w0`, ...).
    pub name: String,
    /// What it is for.
    pub role: Role,
    /// cloud-init user-data (a shell script).
    pub user_data: String,
    /// Stable across retries of the launching step: the cloud's idempotency token.
    pub token: uuid::Uuid,
    /// The network the VM joins, as [`Cloud::ensure_network`] returned it.
    pub network: &'a Network,
    /// Who the VM acts as at its provider (an AWS instance profile's name, a GCP service
    /// account's e-mail), as [`Cloud::ensure_vm_identity`] returned it; `None`: nobody.
    pub vm_identity: Option<String>,
    /// Whether the VM reads a secret of its own provider's secret store (a hosted API's keys, the
    /// key of a checkpoint bucket on another provider): a GCE VM then needs the `cloud-platform`
    /// scope.
    pub reads_secret: bool,
    /// The stable public address the VM is reached at, as [`Cloud::ensure_address`] reserved it:
    /// GCE and the simulated cloud give it to the VM at launch (GCE's `natIP`); on EC2
    /// [`Cloud::attach_address`] associates it once the instance runs. `None`: an ephemeral one.
    pub address: Option<&'a Address>,
}

/// A public address that survives its VM's stop, start and replacement: an EC2 Elastic IP, a
/// Compute Engine static external address, a reserved address of the simulated cloud. It carries
/// its owner's id ([`CLUSTER_TAG`]) and a name within it (the VM's: `cp`, `api`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    /// The provider's id for it (`eipalloc-...`, the GCE address's name, `sim-addr-...`).
    pub id: String,
    /// The IPv4 address.
    pub ip: String,
}

/// A VM as the cloud reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vm {
    /// The cloud's id (`i-...`, GCE instance id, `sim-...`).
    pub provider_id: String,
    /// The VM's name within its cluster.
    pub name: String,
    /// What it is for.
    pub role: Role,
    /// The cloud's state, in its own words (`pending`, `running`, `RUNNING`, ...).
    pub state: String,
    /// Private address, once assigned.
    #[serde(default)]
    pub private_ip: Option<String>,
    /// Public address, once assigned.
    #[serde(default)]
    pub public_ip: Option<String>,
}

impl Vm {
    /// The address other machines reach it at: public when it has one, else private.
    pub fn address(&self) -> Option<&str> {
        self.public_ip.as_deref().or(self.private_ip.as_deref())
    }
}

/// The cluster's network rules (an EC2 security group, a set of GCE firewall rules).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Network {
    /// The cloud's id for them (`sg-...`, a firewall name, ...).
    pub id: String,
}

/// Why a cloud call failed. `Retryable` may succeed later (throttling, 5xx, a network error);
/// `Terminal` never will as asked (quota, an unknown machine type, refused keys).
///
/// It is deliberately not a `std::error::Error`: the engine turns any error into a retryable
/// step error, and this one must keep its class, through the `From` impl below.
#[derive(Debug)]
pub enum CloudError {
    /// Worth another attempt.
    Retryable(String),
    /// Will not succeed as asked.
    Terminal(String),
}

impl std::fmt::Display for CloudError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Retryable(message) | Self::Terminal(message) => f.write_str(message),
        }
    }
}

impl CloudError {
    /// A retryable error with the cause chain of `err` in its message.
    pub fn retryable(context: &str, err: &(dyn std::error::Error + 'static)) -> Self {
        Self::Retryable(format!("{context}: {}", anycloud_engine::error_chain(err)))
    }

    /// A terminal error with the cause chain of `err` in its message.
    pub fn terminal(context: &str, err: &(dyn std::error::Error + 'static)) -> Self {
        Self::Terminal(format!("{context}: {}", anycloud_engine::error_chain(err)))
    }
}

impl From<CloudError> for anycloud_engine::StepError {
    /// The message is kept as a provider's answer is (`providers::endpoint::answer_text`):
    /// bounded, without control characters.
    fn from(err: CloudError) -> Self {
        use crate::endpoint::answer_text;
        match err {
            CloudError::Retryable(message) => anycloud_engine::StepError::retryable_msg(answer_text(&message)),
            CloudError::Terminal(message) => anycloud_engine::StepError::terminal_msg(answer_text(&message)),
        }
    }
}

/// A cloud account, as the workflows use it.
#[async_trait]
pub trait Cloud: Send + Sync {
    /// Asks the provider, with its cheapest read call, whether it accepts this account's keys.
    /// A refusal is a verdict; a provider that cannot be reached is an error.
    async fn verify(&self) -> Result<Verdict, CloudError>;

    /// Checks that the region and machine type exist for this account, and picks the zone
    /// where the provider needs one. The error says what is unknown and what is available.
    async fn placement(&self, cluster_id: &str, region: &str, vm_type: &str) -> Result<Placement, CloudError>;

    /// Finds or creates the cluster's network rules: everything between the cluster's own VMs on
    /// this side, and nothing from outside it ([`Cloud::open_network`] opens that).
    async fn ensure_network(&self, placement: &Placement) -> Result<Network, CloudError>;

    /// Makes the rules [`Cloud::ensure_network`] made let in exactly `openings` from outside the
    /// cluster's VMs on this side: a missing source is added, any other (SSH, a source no longer
    /// named) removed. Calling it again with the same openings changes nothing.
    async fn open_network(&self, placement: &Placement, openings: &Openings) -> Result<(), CloudError>;

    /// Deletes every network rule carrying the cluster's tag. Nothing to delete is success.
    async fn delete_network(&self, placement: &Placement) -> Result<(), CloudError>;

    /// Whether any network rule of the cluster still exists.
    async fn network_exists(&self, placement: &Placement) -> Result<bool, CloudError>;

    /// Returns the live VM named `spec.name` in the cluster, or launches it.
    async fn launch(&self, spec: &LaunchSpec<'_>) -> Result<Vm, CloudError>;

    /// Every VM carrying the cluster's tag that is not terminated (including those shutting down).
    async fn list_vms(&self, placement: &Placement) -> Result<Vec<Vm>, CloudError>;

    /// Asks the cloud to terminate these VMs. Already gone is success.
    async fn terminate(&self, placement: &Placement, provider_ids: &[String]) -> Result<(), CloudError>;

    /// Finds, or reserves, the stable public address `name` of `placement.cluster_id` in the
    /// placement's region (tagged or labelled with both), for the VM of that name.
    async fn ensure_address(&self, placement: &Placement, name: &str) -> Result<Address, CloudError>;

    /// Makes `address` the public address of `vm`, when it is not yet; `Ok(true)` once the
    /// provider reports it so. EC2 associates an Elastic IP with a running instance only, so until
    /// `vm` runs this answers `Ok(false)`; GCE and the simulated cloud gave it at launch.
    async fn attach_address(&self, placement: &Placement, address: &Address, vm: &Vm) -> Result<bool, CloudError> {
        let _ = placement;
        Ok(vm.public_ip.as_deref() == Some(address.ip.as_str()))
    }

    /// Releases every reserved address of `placement.cluster_id` in the placement's region (one
    /// still associated with a VM is disassociated first: call it after the VMs are gone).
    /// Nothing to release is success.
    async fn release_addresses(&self, placement: &Placement) -> Result<(), CloudError>;

    /// The IPs of the reserved addresses of `placement.cluster_id` the provider still holds.
    async fn list_addresses(&self, placement: &Placement) -> Result<Vec<Address>, CloudError>;

    /// The architectures machine type `vm_type` runs in `region` (AWS: the instance type's
    /// `ProcessorInfo.SupportedArchitectures`; GCP: the machine type's `architecture`), which
    /// the binary a hosted API's VM runs must match. The simulated cloud's machines are x86_64.
    async fn vm_architectures(&self, region: &str, vm_type: &str) -> Result<Vec<crate::arch::Arch>, CloudError> {
        let _ = (region, vm_type);
        Ok(vec![crate::arch::Arch::X86_64])
    }

    /// Finds or creates the network rules of a hosted API (`placement.cluster_id` is its owner
    /// id): TCP `port` from anywhere. [`Cloud::delete_network`] removes them.
    async fn ensure_api_network(&self, placement: &Placement, port: u16) -> Result<Network, CloudError> {
        let _ = (placement, port);
        Err(CloudError::Terminal("this provider cannot host an API; host it on aws or gcp".to_owned()))
    }

    /// Finds or makes who a hosted API's VM acts as, allowed to read and write `bucket` (an
    /// `s3://` or `gs://` URL) when it is on this provider's store, to read `secrets` (as
    /// [`Cloud::store_vm_secret`] answered them), and nothing else it does not already have;
    /// `owner` names it.
    async fn ensure_vm_identity(&self, owner: &str, bucket: &str, secrets: &[String]) -> Result<String, CloudError> {
        let _ = (owner, bucket, secrets);
        Err(CloudError::Terminal("this provider cannot host an API; host it on aws or gcp".to_owned()))
    }

    /// The member a checkpoint bucket on this provider's store names the VM identity of `owner`
    /// by in its own IAM policy (GCS: `serviceAccount:EMAIL`), when the deploy binds the bucket
    /// to it there; `None` when the identity's own policy names the bucket (AWS) or there is none.
    fn bucket_member(&self, owner: &str) -> Option<String> {
        let _ = owner;
        None
    }

    /// Removes what [`Cloud::ensure_vm_identity`] made. Nothing to remove is success.
    async fn delete_vm_identity(&self, owner: &str) -> Result<(), CloudError> {
        let _ = owner;
        Ok(())
    }

    /// Puts `value` in this account's secret store as secret `name` of the hosted API `owner`
    /// (created, or given a new current version when it holds something else, the older versions
    /// retired), for its VM to read as itself: on AWS once
    /// [`Cloud::ensure_vm_identity`] names it in the VM's policy, on GCP through the secret's
    /// own IAM binding, set here. Answers the secret's reference (an ARN, a resource name).
    async fn store_vm_secret(&self, owner: &str, name: &str, value: &str) -> Result<String, CloudError> {
        let _ = (owner, name, value);
        Err(CloudError::Terminal("this provider has no secret store; host the API on aws or gcp".to_owned()))
    }

    /// What secret `name` holds now, read with this account's keys; `None` when there is none.
    async fn read_vm_secret(&self, name: &str) -> Result<Option<String>, CloudError> {
        let _ = name;
        Err(CloudError::Terminal("this provider has no secret store; host the API on aws or gcp".to_owned()))
    }

    /// Deletes secret `name`, every version of it. Nothing to delete is success.
    async fn delete_vm_secret(&self, name: &str) -> Result<(), CloudError> {
        let _ = name;
        Ok(())
    }
}

/// The port of the Kubernetes API (k3s's supervisor and API server).
pub const KUBE_API_PORT: u16 = 6443;
/// The port flannel's `wireguard-native` backend uses for IPv4 (k3s's inbound rules).
pub const WIREGUARD_PORT: u16 = 51820;

/// What one side's rules let in from outside the side's own VMs: source CIDRs per port. The
/// lists are sorted and hold each source once; an empty list opens nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Openings {
    /// Sources of TCP [`KUBE_API_PORT`].
    pub kube_api: Vec<String>,
    /// Sources of UDP [`WIREGUARD_PORT`].
    pub wireguard: Vec<String>,
}

impl Openings {
    /// Every (protocol, port, source) the openings allow, in a stable order.
    pub fn rules(&self) -> Vec<(&'static str, u16, &str)> {
        let tcp = self.kube_api.iter().map(|source| ("tcp", KUBE_API_PORT, source.as_str()));
        let udp = self.wireguard.iter().map(|source| ("udp", WIREGUARD_PORT, source.as_str()));
        tcp.chain(udp).collect()
    }
}

/// Where a cluster's Kubernetes API answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeEndpoint {
    /// Its URL.
    pub url: String,
    /// The name its certificate is checked against, when it is not the URL's host (SNI, and
    /// kubeconfig's `tls-server-name`).
    pub tls_server_name: Option<String>,
}

impl KubeEndpoint {
    /// The endpoint at `url`, whose certificate names the URL's host.
    pub fn url(url: impl Into<String>) -> Self {
        Self { url: url.into(), tls_server_name: None }
    }

    /// Where a control-plane VM on AWS or GCP serves the Kubernetes API: k3s on
    /// [`KUBE_API_PORT`] of its address. A function of the VM alone: reaching it needs no cloud
    /// account ([`crate::Clouds::kube_endpoint`]).
    pub fn k3s(control_plane: &Vm) -> Self {
        Self::url(format!("https://{}:{KUBE_API_PORT}", control_plane.address().unwrap_or("0.0.0.0")))
    }
}
