//! What the domain's workflows and operations work with: the database, the sealer, the clouds and
//! the test seams; and the few things every cluster workflow does with them (read a cluster's
//! record and secrets, open its cloud account, find its Kubernetes API, sweep its VMs).

use anycloud_engine::StepError;

use crate::cloud::{Cloud, CloudError, Placement, ProviderKind, Vm};
use crate::cluster::secrets::ClusterSecrets;
use crate::db::Db;
use crate::db::clusters::{self, Cluster};
use crate::db::credentials::{self, CredentialStatus, OpenError};
use crate::db::vms;
use crate::kubernetes::KubeEndpoint;
use crate::kubernetes::clients::KubeClients;
use crate::providers::Clouds;
use crate::seams::TestSeams;
use crate::secrets::SecretBox;

/// Why a credential's cloud account could not be opened.
///
/// Like [`CloudError`], it is deliberately not a `std::error::Error`: a step's `?` must keep its
/// class (terminal or retryable), through the `From` impl below.
#[derive(Debug)]
pub enum AccountError {
    /// No credential has the name.
    NoCredential(String),
    /// The provider refused the credential.
    Invalid {
        /// The credential.
        name: String,
        /// The provider's words.
        message: String,
    },
    /// The verification has not concluded.
    Verifying(String),
    /// The credential could not be read or opened.
    Unreadable(String, OpenError),
    /// The provider's client could not be made.
    Cloud(CloudError),
}

impl std::fmt::Display for AccountError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoCredential(name) => {
                write!(f, "credential `{name}` does not exist; `anycloud credentials list` shows the saved ones")
            }
            Self::Invalid { name, message } => {
                write!(f, "credential `{name}` is invalid: {message}; save it again with working keys")
            }
            Self::Verifying(name) => write!(
                f,
                "credential `{name}` is still being verified; try again once `anycloud credentials list` shows it valid"
            ),
            Self::Unreadable(name, err) => write!(f, "credential `{name}`: {}", anycloud_engine::error_chain(err)),
            Self::Cloud(err) => err.fmt(f),
        }
    }
}

impl From<CloudError> for AccountError {
    fn from(err: CloudError) -> Self {
        Self::Cloud(err)
    }
}

impl From<AccountError> for StepError {
    /// For a step: a credential that is missing, refused or cannot be opened will stay so
    /// (terminal); one still being verified, or a database that failed, may not (retryable).
    fn from(err: AccountError) -> Self {
        match err {
            AccountError::Cloud(err) => err.into(),
            AccountError::Verifying(_) | AccountError::Unreadable(_, OpenError::Store(_)) => {
                StepError::retryable_msg(err.to_string())
            }
            _ => StepError::terminal_msg(err.to_string()),
        }
    }
}

/// The dependencies of every workflow and operation. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Deps {
    /// The API's database.
    pub db: Db,
    /// Seals and opens credentials and cluster secrets.
    pub sealer: SecretBox,
    /// Opens the cloud account of a credential.
    pub clouds: Clouds,
    /// Test seams; all off in production.
    pub seams: TestSeams,
    /// The public address of this API when it is hosted on a VM (its `--tls-address`): the one
    /// source besides the cluster's own nodes that its clusters' Kubernetes APIs let in. `None`
    /// for an API on an operator's machine, whose address no cloud can name: its clusters'
    /// APIs are open to every address (docs/hosting.md, "Cluster networks").
    pub api_address: Option<String>,
    /// The Kubernetes clients kept per cluster, so that calls reuse their connections.
    pub kube_clients: KubeClients,
    /// Where binaries uploaded for hosted APIs wait until their deploy ships them to the
    /// API's bucket (`DATA_DIR/binaries`, [`crate::hosting::binary::stage`]).
    pub binaries: std::path::PathBuf,
}

impl Deps {
    /// The cluster record; its absence is terminal (the record is written with the run).
    pub async fn cluster(&self, id: &str) -> Result<Cluster, StepError> {
        clusters::get(&self.db, id)
            .await?
            .ok_or_else(|| StepError::terminal_msg(format!("cluster {id} has no record; it cannot be acted on")))
    }

    /// The cloud account of credential `name`, acting in `region`: the one place that checks a
    /// credential before a cloud is asked anything on it.
    pub async fn cloud(&self, name: &str, region: &str) -> Result<Box<dyn Cloud>, AccountError> {
        let (credential, secret) = match credentials::open(&self.db, &self.sealer, name).await {
            Ok(Some(found)) => found,
            Ok(None) => return Err(AccountError::NoCredential(name.to_owned())),
            Err(err) => return Err(AccountError::Unreadable(name.to_owned(), err)),
        };
        match credential.status {
            CredentialStatus::Valid => Ok(self.clouds.open(credential.cloud_ref(), &secret, region).await?),
            CredentialStatus::Invalid => Err(AccountError::Invalid {
                name: name.to_owned(),
                message: credential.status_message.unwrap_or_default(),
            }),
            CredentialStatus::Verifying => Err(AccountError::Verifying(name.to_owned())),
        }
    }

    /// Where the Kubernetes API of a cluster whose control plane `cp` runs on `provider`
    /// answers: the VM's, so no cloud account is opened ([`Clouds::kube_endpoint`]).
    pub fn kube_endpoint(&self, provider: ProviderKind, cp: &Vm) -> Result<KubeEndpoint, StepError> {
        match &self.seams.simulated_kube {
            Some(base) => Ok(KubeEndpoint::url(format!("{}/{}", base.trim_end_matches('/'), cp.provider_id))),
            None => Ok(self.clouds.kube_endpoint(provider, cp)?),
        }
    }

    /// A client for the Kubernetes API of a cluster: its control plane as last recorded, its CA
    /// and API token; the one kept for the cluster while those are unchanged ([`KubeClients`]),
    /// so a check reads two rows and opens no secret. A cluster without a control plane, or
    /// without secrets, has no API (terminal).
    pub async fn kube_client(&self, cluster: &Cluster) -> Result<kube::Client, StepError> {
        let endpoint = self.kube_endpoint_of(cluster).await?;
        let sealed = self.sealed_secrets(&cluster.id).await?;
        self.kube_clients.client(&cluster.id, &endpoint, &sealed, || {
            ClusterSecrets::open(&self.sealer, &cluster.id, &sealed).map_err(StepError::terminal)
        })
    }

    /// A client for the Kubernetes API of a cluster for its long streams (followed logs, exec),
    /// without the read timeout of ordinary calls ([`crate::kubernetes::client::stream_client`]).
    pub async fn kube_stream_client(&self, cluster: &Cluster) -> Result<kube::Client, StepError> {
        let endpoint = self.kube_endpoint_of(cluster).await?;
        let secrets = self.secrets(&cluster.id).await?;
        crate::kubernetes::client::stream_client(&endpoint, &secrets).map_err(StepError::terminal)
    }

    /// Where the Kubernetes API of a cluster answers, from its control plane as last recorded.
    pub async fn kube_endpoint_of(&self, cluster: &Cluster) -> Result<KubeEndpoint, StepError> {
        let recorded = vms::of_cluster(&self.db, &cluster.id).await?;
        let cp = recorded.into_iter().find(|vm| vm.is_control_plane() && vm.is_running()).ok_or_else(|| {
            StepError::terminal_msg(format!("cluster `{}` has no running control plane", cluster.name))
        })?;
        let cp = Vm {
            provider_id: cp.provider_id,
            name: cp.name,
            role: crate::cloud::Role::ControlPlane,
            state: cp.state,
            private_ip: cp.private_ip,
            public_ip: cp.public_ip,
        };
        self.kube_endpoint(cluster.control_plane_provider(), &cp)
    }

    /// A hosted API's record; its absence is terminal (the record is written with the run).
    pub async fn hosted_api(&self, id: &str) -> Result<crate::db::hosted_apis::HostedApi, StepError> {
        crate::db::hosted_apis::get(&self.db, id)
            .await?
            .ok_or_else(|| StepError::terminal_msg(format!("hosted API {id} has no record; it cannot be acted on")))
    }

    /// The address a hosted API's VM is reached at: the stable one its deploy reserved (the
    /// tests' VM runner serves it on another, a seam).
    pub fn hosted_api_address(&self, reserved: &str) -> String {
        match &self.seams.hosted_api_address {
            Some(address) => address.clone(),
            None => reserved.to_owned(),
        }
    }

    /// Deletes the network rules of `placement` and succeeds once the provider lists none;
    /// until then it fails (retryably), naming `owner` ("the cluster's", "the API's").
    pub async fn remove_network(&self, cloud: &dyn Cloud, placement: &Placement, owner: &str) -> Result<(), StepError> {
        cloud.delete_network(placement).await?;
        if cloud.network_exists(placement).await? {
            return Err(StepError::retryable_msg(format!("the provider still lists {owner} network rules")));
        }
        Ok(())
    }

    /// Releases every reserved address of `placement`'s owner (call it once its VMs are gone)
    /// and succeeds once the provider lists none; until then it fails (retryably).
    pub async fn release_addresses(&self, cloud: &dyn Cloud, placement: &Placement) -> Result<(), StepError> {
        cloud.release_addresses(placement).await?;
        let left = cloud.list_addresses(placement).await?;
        if left.is_empty() {
            return Ok(());
        }
        let ips: Vec<&str> = left.iter().map(|address| address.ip.as_str()).collect();
        Err(StepError::retryable_msg(format!(
            "asked the provider to release {} reserved address(es) ({}); waiting until it lists none",
            ips.len(),
            ips.join(", ")
        )))
    }

    /// After a launch call answered (the crash-test seam; nothing in production).
    pub async fn after_launch(&self) {
        if let Some(pause) = self.seams.pause_after_launch {
            tracing::warn!(?pause, "test seam: pausing between a launch and its checkpoint");
            tokio::time::sleep(pause).await;
        }
    }

    /// Between a job's Secrets and its Job (the crash-test seam; nothing in production).
    pub async fn in_secret_apply(&self) {
        if let Some(pause) = self.seams.pause_in_secret_apply {
            tracing::warn!(?pause, "test seam: pausing between a job's Secrets and its Job");
            tokio::time::sleep(pause).await;
        }
    }

    /// The values of the secrets a deployment takes, each at its pinned version. A version that
    /// is gone (its secret was deleted after the deployment ended, before a resubmit) is a
    /// terminal error that says what to do; a database error is retried.
    pub async fn open_secrets(
        &self,
        deployment: &str,
        uses: &[crate::db::secrets::SecretUse],
    ) -> Result<Vec<crate::kubernetes::secret::Opened>, StepError> {
        let mut opened = Vec::with_capacity(uses.len());
        for using in uses {
            let values = match crate::db::secrets::open(&self.db, &self.sealer, &using.name, using.version).await {
                Ok(Some(values)) => values,
                Ok(None) => {
                    return Err(StepError::terminal_msg(format!(
                        "secret `{}` version {} that deployment `{deployment}` takes no longer exists; create it                          again (`anycloud secret new {}`) and resubmit or upgrade `{deployment}`",
                        using.name, using.version, using.name
                    )));
                }
                Err(crate::db::credentials::OpenError::Store(err)) => return Err(err.into()),
                Err(err) => return Err(StepError::terminal(err)),
            };
            opened.push(crate::kubernetes::secret::Opened { using: using.clone(), values });
        }
        Ok(opened)
    }

    /// The cluster's secrets, opened.
    pub async fn secrets(&self, cluster_id: &str) -> Result<ClusterSecrets, StepError> {
        let sealed = self.sealed_secrets(cluster_id).await?;
        ClusterSecrets::open(&self.sealer, cluster_id, &sealed).map_err(StepError::terminal)
    }

    /// A cluster's secrets as stored, sealed; none is terminal.
    async fn sealed_secrets(&self, cluster_id: &str) -> Result<String, StepError> {
        clusters::sealed_secrets(&self.db, cluster_id)
            .await?
            .ok_or_else(|| StepError::terminal_msg(format!("cluster {cluster_id} has no secrets")))
    }

    /// Terminates every VM with a hosted API's tag (it has no record in `vms`, a cluster's table)
    /// and succeeds once the provider lists none; until then it fails (retryably) with how many
    /// are left. A cluster's VMs are swept by [`crate::cluster::sides::Sides::sweep`].
    pub async fn sweep_unrecorded(&self, cloud: &dyn Cloud, placement: &Placement) -> Result<(), StepError> {
        let live = cloud.list_vms(placement).await?;
        if live.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = live.iter().map(|vm| vm.provider_id.clone()).collect();
        cloud.terminate(placement, &ids).await?;
        if cloud.list_vms(placement).await?.is_empty() {
            return Ok(());
        }
        Err(StepError::retryable_msg(format!(
            "asked the provider to terminate {} VM(s) ({}); waiting until it lists none",
            ids.len(),
            ids.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::Role;
    use crate::db::clusters::Phase;
    use crate::test_support::{FakeAnswer, TestWorld};

    /// A cluster of `provider` on credential `deleted`, which is not stored, with a running
    /// control plane at 203.0.113.9.
    async fn cluster_without_its_credential(world: &TestWorld, provider: ProviderKind) -> Cluster {
        let cluster = Cluster {
            id: format!("c-{}", provider.as_str()),
            name: format!("on-{}", provider.as_str()),
            credential: "deleted".into(),
            provider,
            region: "r1".into(),
            zone: None,
            vm_type: "small".into(),
            min_vms: 1,
            max_vms: 1,
            phase: Phase::Ready,
            reason: None,
            endpoint: None,
            network_id: None,
            workflow_id: None,
            delete_requested_at: None,
            created_at: 1,
            updated_at: 1,
            control_plane_credential: None,
            control_plane_provider: None,
            control_plane_region: None,
            control_plane_zone: None,
            control_plane_vm_type: None,
        };
        let mut tx = world.deps.db.begin().await.unwrap();
        clusters::insert_in(&mut tx, &cluster).await.unwrap();
        tx.commit().await.unwrap();
        let cp = Vm {
            provider_id: "vm-cp".into(),
            name: "cp".into(),
            role: Role::ControlPlane,
            state: "running".into(),
            private_ip: Some("10.0.0.2".into()),
            public_ip: Some("203.0.113.9".into()),
        };
        vms::upsert(&world.deps.db, &cluster.id, &cp).await.unwrap();
        cluster
    }

    /// Reaching a cluster's Kubernetes API opens no cloud account: its address is its control
    /// plane VM's, so a check works (and costs no credential read or decryption) whatever the
    /// credential's state, even once it is gone.
    #[tokio::test]
    async fn a_clusters_kubernetes_api_is_found_without_its_credential() {
        let world = TestWorld::new(FakeAnswer::Accept).await;
        for provider in [ProviderKind::Aws, ProviderKind::Gcp, ProviderKind::Sim] {
            let cluster = cluster_without_its_credential(&world, provider).await;
            assert!(world.deps.cloud(&cluster.credential, "r1").await.is_err(), "the credential is not stored");
            let endpoint = world.deps.kube_endpoint_of(&cluster).await.unwrap();
            assert_eq!(endpoint, KubeEndpoint::url("https://203.0.113.9:6443"), "{provider:?}");
        }
    }
}
