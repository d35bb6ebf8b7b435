//! Where a cluster's VMs are (../shared/spec/clusters.md, "Placement"): its capacity on the
//! cluster's own credential (`cluster create --credentials`), its control plane on the hosted
//! API's credential (`api serve --credentials`), in the API's region and machine type. A cluster
//! whose record names no control-plane credential (an API without a hosting credential, or one
//! whose hosting credential and region are the capacity's) keeps its control plane with its
//! capacity. Each is a *side*: a placement in one provider account, and the cloud to call there.
//!
//! Steps that act on the control plane act on its side; sweeps, network deletes and the waits of
//! a delete act on every side. On one account and region both sides list the same VMs and rules;
//! every call here is idempotent, so acting twice on them changes nothing.

use anycloud_engine::StepError;

use crate::cloud::{Cloud, CloudError, Placement, Vm};
use crate::db::clusters::{Cluster, ControlPlanePlacement};
use crate::db::vms;
use crate::workflows::deps::Deps;

/// Where a hosted API places its clusters' control planes: its own hosting credential, region
/// and machine type (`api serve --control-plane-credentials`, written by `api.deploy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlaneHost {
    /// The credential the API is hosted with, saved on the API itself.
    pub credential: String,
    /// The API's region.
    pub region: String,
    /// The API's machine type.
    pub vm_type: String,
}

/// A placement in one account, and the cloud to call there.
pub struct Side {
    /// Where.
    pub placement: Placement,
    /// The account's cloud, acting in the placement's region.
    pub cloud: Box<dyn Cloud>,
}

impl Side {
    /// The side of `credential` at `placement`.
    pub async fn open(deps: &Deps, credential: &str, placement: Placement) -> Result<Self, StepError> {
        let cloud = deps.cloud(credential, &placement.region).await?;
        Ok(Self { placement, cloud })
    }
}

/// A cluster's sides, from its record: for listing, terminating and deleting (a record's
/// placement has no image; launches use the placements their steps pinned).
pub struct Sides {
    /// The capacity's.
    pub capacity: Side,
    /// The control plane's, when apart from the capacity.
    pub control_plane: Option<Side>,
}

impl Sides {
    /// The sides of `cluster`.
    pub async fn of(deps: &Deps, cluster: &Cluster) -> Result<Self, StepError> {
        let capacity = Placement {
            cluster_id: cluster.id.clone(),
            region: cluster.region.clone(),
            zone: cluster.zone.clone(),
            vm_type: cluster.vm_type.clone(),
            image: None,
        };
        let capacity = Side::open(deps, &cluster.credential, capacity).await?;
        let control_plane = match cluster.control_plane() {
            Some(cp) => Some(Side::open(deps, &cp.credential, control_plane_placement(&cluster.id, &cp)).await?),
            None => None,
        };
        Ok(Self { capacity, control_plane })
    }

    /// Whether the cluster's nodes share one network: not when the control plane runs apart
    /// (another provider, account or region: [`crate::cluster::network`]).
    pub fn reach(&self) -> crate::cluster::network::Reach {
        crate::cluster::network::Reach::of(self.control_plane.is_some())
    }

    /// The side the control plane runs on.
    pub fn control_plane(&self) -> &Side {
        self.control_plane.as_ref().unwrap_or(&self.capacity)
    }

    /// Every side, the control plane's last.
    pub fn all(&self) -> impl Iterator<Item = &Side> {
        std::iter::once(&self.capacity).chain(self.control_plane.as_ref())
    }

    /// The VMs with the cluster's tag, as each side lists them.
    pub async fn vms_by_side(&self) -> Result<Vec<(&Side, Vec<Vm>)>, CloudError> {
        let mut listed = Vec::new();
        for side in self.all() {
            listed.push((side, side.cloud.list_vms(&side.placement).await?));
        }
        Ok(listed)
    }

    /// Every VM with the cluster's tag, on every side (a VM two sides both list, once).
    pub async fn list_vms(&self) -> Result<Vec<Vm>, CloudError> {
        Ok(every_vm_once(&self.vms_by_side().await?))
    }

    /// Terminates every VM with the cluster's tag on every side and succeeds once none is
    /// listed; until then it fails (retryably) with how many are left. Records what it sees.
    pub async fn sweep(&self, deps: &Deps) -> Result<(), StepError> {
        let cluster_id = &self.capacity.placement.cluster_id;
        let listed = self.vms_by_side().await?;
        let live = every_vm_once(&listed);
        for vm in &live {
            vms::upsert(&deps.db, cluster_id, vm).await?;
        }
        vms::mark_gone(&deps.db, cluster_id, &live).await?;
        if live.is_empty() {
            return Ok(());
        }
        for (side, on_side) in &listed {
            if !on_side.is_empty() {
                let ids: Vec<String> = on_side.iter().map(|vm| vm.provider_id.clone()).collect();
                side.cloud.terminate(&side.placement, &ids).await?;
            }
        }
        let left = self.list_vms().await?;
        vms::mark_gone(&deps.db, cluster_id, &left).await?;
        if left.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = left.iter().map(|vm| vm.provider_id.as_str()).collect();
        Err(StepError::retryable_msg(format!(
            "asked the provider to terminate {} VM(s) ({}); waiting until it lists none",
            ids.len(),
            ids.join(", ")
        )))
    }
}

/// Every VM of a listing by side, once (on one account and region both sides list the same).
pub fn every_vm_once(listed: &[(&Side, Vec<Vm>)]) -> Vec<Vm> {
    let mut all: Vec<Vm> = Vec::new();
    for vm in listed.iter().flat_map(|(_, on_side)| on_side) {
        if !all.iter().any(|seen| seen.provider_id == vm.provider_id) {
            all.push(vm.clone());
        }
    }
    all
}

/// The control plane's placement, from what the record says of it.
pub fn control_plane_placement(cluster_id: &str, cp: &ControlPlanePlacement) -> Placement {
    Placement {
        cluster_id: cluster_id.to_owned(),
        region: cp.region.clone(),
        zone: cp.zone.clone(),
        vm_type: cp.vm_type.clone(),
        image: None,
    }
}
