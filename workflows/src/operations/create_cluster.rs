//! Creating a cluster: its record (the durable intent) and its `cluster.create` run, in one
//! transaction that holds the credential, once the provider has said the placement exists.

use std::time::Duration;

use uuid::Uuid;

use crate::cloud::{Cloud, CloudError, Placement};
use crate::cluster::sides::ControlPlaneHost;
use crate::db::clusters::{self, Cluster, ControlPlanePlacement, Phase};
use crate::db::credentials::{self, CredentialStatus, Hold};
use crate::db::is_unique_violation;
use crate::names::check_dns_label;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{ClusterCreated, NewCluster};
use crate::workflows::cluster_create::{CreateCluster, CreateInput};
use crate::workflows::deps::AccountError;

use super::Operations;

/// Largest fixed capacity accepted.
pub const MAX_VMS: i64 = 100;

/// How many times the provider is asked about the region and VM type before a passing fault
/// (throttling, a 5xx, a reset) refuses the create, and the pause before the second ask (doubled
/// for each later one): a throttled provider usually answers within a second, and the caller
/// waits for the answer.
const PLACEMENT_ASKS: u32 = 3;
const PLACEMENT_PAUSE: Duration = Duration::from_millis(250);

impl Operations {
    /// Stores the cluster's intent and starts its creation. Refused on a local API, for a spec
    /// that cannot be, for a credential that is missing or not valid, for a placement the provider
    /// does not have, and for a name a live cluster holds (also when a racing create took it).
    pub async fn create_cluster(&self, request: NewCluster) -> Result<ClusterCreated, OperationError> {
        if !self.hosted {
            return Err(Refusal::new(
                Code::HostedApiRequired,
                format!(
                    "cluster creation requires a hosted API, and `{}` is a local API; start a hosted one with \
                     `anycloud api serve --id NAME --credentials sim --use` (the simulated cloud hosts it) and create \
                     the cluster there",
                    self.api_id
                ),
            )
            .into());
        }
        check(&request).map_err(|why| Refusal::new(Code::InvalidCluster, why))?;
        let name = &request.name;
        // The provider says whether the region and VM type exist before any intent is stored.
        let cluster_id = Uuid::new_v4().to_string();
        let cloud =
            self.deps.cloud(&request.credentials, &request.region).await.map_err(|err| account_refusal(name, err))?;
        check_placement(cloud.as_ref(), &cluster_id, &request)
            .await
            .map_err(|err| account_refusal(name, err.into()))?;

        let mut tx = self.deps.db.begin().await?;
        // Held until the commit: a credential delete racing this create waits, then sees the cluster.
        let credential = match credentials::hold_in(&mut tx, &request.credentials, Hold::Shared).await? {
            Some(credential) if credential.status == CredentialStatus::Valid => credential,
            // Deleted since the provider was asked, or deleted and saved again.
            Some(credential) if credential.status == CredentialStatus::Invalid => {
                let message = credential.status_message.unwrap_or_default();
                return Err(account_refusal(name, AccountError::Invalid { name: credential.name, message }));
            }
            Some(credential) => return Err(account_refusal(name, AccountError::Verifying(credential.name))),
            None => return Err(account_refusal(name, AccountError::NoCredential(request.credentials.clone()))),
        };
        let control_plane = match self.control_plane_host(&request) {
            Some(host) => Some(self.hold_control_plane_host(&mut tx, name, host).await?),
            None => None,
        };
        if let Some(existing) = clusters::lock_live_in(&mut tx, name).await? {
            return Err(exists(name, existing.phase).into());
        }
        let input = CreateInput { cluster_id: cluster_id.clone(), name: name.clone() };
        let run = self.engine.submit_in::<CreateCluster>(&mut tx, &input, Some(&Cluster::resource_key(name))).await?;
        let now = crate::now_ms();
        let cluster = Cluster {
            id: cluster_id,
            name: name.clone(),
            credential: credential.name,
            provider: credential.provider,
            region: request.region.clone(),
            zone: None,
            vm_type: request.vm_type.clone(),
            min_vms: request.min_vms,
            max_vms: request.max_vms,
            phase: Phase::Creating,
            reason: None,
            endpoint: None,
            network_id: None,
            workflow_id: Some(run.to_string()),
            delete_requested_at: None,
            created_at: now,
            updated_at: now,
            control_plane_credential: control_plane.as_ref().map(|cp| cp.credential.clone()),
            control_plane_provider: control_plane.as_ref().map(|cp| cp.provider.as_str().to_owned()),
            control_plane_region: control_plane.as_ref().map(|cp| cp.region.clone()),
            control_plane_zone: None,
            control_plane_vm_type: control_plane.map(|cp| cp.vm_type),
        };
        match clusters::insert_in(&mut tx, &cluster).await {
            // A create of the same name committed between the check and the insert.
            Err(err) if is_unique_violation(&err) => return Err(exists(name, Phase::Creating).into()),
            result => result?,
        }
        tx.commit().await?;
        self.engine.wake_up();
        Ok(ClusterCreated { cluster: cluster.into(), workflow_id: run })
    }
}

impl Operations {
    /// Where this API places the cluster's control plane apart from its capacity: on its own
    /// hosting credential, unless that is the cluster's credential in the same region (then the
    /// control plane joins the capacity's network, as on an API without a hosting credential).
    fn control_plane_host(&self, request: &NewCluster) -> Option<&ControlPlaneHost> {
        self.control_planes
            .as_ref()
            .filter(|host| host.credential != request.credentials || host.region != request.region)
    }

    /// Holds the hosting credential like the capacity's (a delete racing the create waits, then
    /// sees the cluster); refuses a missing or unusable one, naming it.
    async fn hold_control_plane_host(
        &self,
        tx: &mut anycloud_engine::WriteTx,
        name: &str,
        host: &ControlPlaneHost,
    ) -> Result<ControlPlanePlacement, OperationError> {
        let unusable = |why: String| {
            OperationError::from(Refusal::new(
                Code::CredentialInvalid,
                format!(
                    "cluster `{name}`: this API places control planes with its hosting credential `{}`, which {why};                      `anycloud credentials list` shows it; `api serve --credentials` saves it here when it deploys                      the API",
                    host.credential
                ),
            ))
        };
        match credentials::hold_in(tx, &host.credential, Hold::Shared).await? {
            Some(credential) if credential.status == CredentialStatus::Valid => Ok(ControlPlanePlacement {
                credential: credential.name,
                provider: credential.provider,
                region: host.region.clone(),
                zone: None,
                vm_type: host.vm_type.clone(),
            }),
            Some(credential) if credential.status == CredentialStatus::Invalid => {
                Err(unusable(format!("is invalid ({})", credential.status_message.unwrap_or_default())))
            }
            Some(_) => Err(unusable("is still being verified; try again in a moment".to_owned())),
            None => Err(unusable("this API does not hold".to_owned())),
        }
    }
}

/// Asks the provider whether the request's region and VM type exist, asking again after a
/// passing fault (up to [`PLACEMENT_ASKS`] times in all).
async fn check_placement(cloud: &dyn Cloud, cluster_id: &str, request: &NewCluster) -> Result<Placement, CloudError> {
    let mut pause = PLACEMENT_PAUSE;
    for _ in 1..PLACEMENT_ASKS {
        match cloud.placement(cluster_id, &request.region, &request.vm_type).await {
            Err(CloudError::Retryable(why)) => {
                tracing::debug!(cluster = %request.name, %why, "the placement check met a passing fault; asking again");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            answer => return answer,
        }
    }
    cloud.placement(cluster_id, &request.region, &request.vm_type).await
}

/// What can be checked without the database or the provider.
fn check(request: &NewCluster) -> Result<(), String> {
    let name = &request.name;
    check_dns_label("cluster", name)?;
    if request.region.trim().is_empty() {
        return Err(format!("cluster `{name}`: --region is empty; pass the provider's region"));
    }
    if request.vm_type.trim().is_empty() {
        return Err(format!("cluster `{name}`: --vm-type is empty; pass the provider's machine type"));
    }
    if request.min_vms != request.max_vms {
        return Err(format!(
            "cluster `{name}`: --min-vms ({}) and --max-vms ({}) differ; clusters currently have fixed capacity, so \
             the minimum and maximum must be equal (autoscaling is not supported yet)",
            request.min_vms, request.max_vms
        ));
    }
    if !(1..=MAX_VMS).contains(&request.min_vms) {
        return Err(format!(
            "cluster `{name}`: --min-vms {} is out of range; a cluster has 1 to {MAX_VMS} capacity VMs",
            request.min_vms
        ));
    }
    Ok(())
}

fn exists(name: &str, phase: Phase) -> Refusal {
    Refusal::new(
        Code::ClusterExists,
        format!(
            "cluster `{name}` already exists ({phase}); pick another name, or delete it first with `anycloud cluster \
             delete {name}`"
        ),
    )
}

/// Why the cluster cannot be placed with this credential, as the user should hear it.
fn account_refusal(cluster: &str, err: AccountError) -> OperationError {
    let code = match &err {
        AccountError::NoCredential(_) => Code::CredentialNotFound,
        AccountError::Invalid { .. } | AccountError::Unreadable(..) => Code::CredentialInvalid,
        AccountError::Verifying(_) => Code::CredentialNotVerified,
        AccountError::Cloud(CloudError::Terminal(_)) => Code::InvalidPlacement,
        AccountError::Cloud(CloudError::Retryable(why)) => {
            let message =
                format!("cluster `{cluster}`: the provider could not check the region and VM type ({why}); try again");
            return Refusal::new(Code::ProviderUnavailable, message).into();
        }
    };
    Refusal::new(code, format!("cluster `{cluster}`: {err}")).into()
}
