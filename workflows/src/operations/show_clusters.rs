//! Reading clusters: the list, and one cluster with its VMs and where its workflow stands. The
//! record says what happened (its phase and reason are written by the workflows); the run adds
//! what is happening now.

use anycloud_engine::{EngineError, RunStatus};

use crate::cloud::ProviderKind;
use crate::db::clusters::{self, Cluster};
use crate::db::vms::{self, VmRecord};
use crate::names::shown;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{ClusterDetail, ClusterList, ClusterSummary, NamesQuery, WorkflowSummary};

use super::Operations;

impl Operations {
    /// A page of the clusters that are not deleted, by name ([`super::PAGE_LIMIT`], or as many
    /// as asked), with how many capacity VMs run.
    pub async fn list_clusters(&self, query: &NamesQuery) -> Result<ClusterList, OperationError> {
        let limit = super::pages::page_limit(query.limit)?;
        let mut summaries = Vec::new();
        for cluster in clusters::list(&self.deps.db, query.after.as_deref(), limit).await? {
            let running_vms = running(&vms::of_cluster(&self.deps.db, &cluster.id).await?);
            summaries.push(ClusterSummary {
                simulated: cluster.provider == ProviderKind::Sim,
                running_vms,
                cluster: cluster.into(),
            });
        }
        Ok(ClusterList { clusters: summaries })
    }

    /// The live cluster of this name, or else the most recently deleted one.
    pub async fn cluster_status(&self, name: &str) -> Result<ClusterDetail, OperationError> {
        let cluster = clusters::get_by_name(&self.deps.db, name).await?.ok_or_else(|| cluster_not_found(name))?;
        self.cluster_detail(cluster).await
    }

    /// The cluster with its VMs, its workflow, and what went wrong: the cause a run that turned
    /// back recorded, or the last error of the step in hand.
    pub(super) async fn cluster_detail(&self, cluster: Cluster) -> Result<ClusterDetail, OperationError> {
        let vms = vms::of_cluster(&self.deps.db, &cluster.id).await?;
        let run = match cluster.workflow_id.as_deref().and_then(|id| id.parse().ok()) {
            Some(id) => match self.engine.run(id).await {
                Ok(run) => Some(run),
                Err(EngineError::UnknownRun(_)) => None,
                Err(err) => return Err(err.into()),
            },
            None => None,
        };
        let last_error = run.as_ref().and_then(|run| match run.status {
            RunStatus::Failed | RunStatus::Cancelled | RunStatus::Unwinding => run.unwind_reason.clone(),
            _ => run.error.as_ref().map(ToString::to_string),
        });
        Ok(ClusterDetail {
            simulated: cluster.provider == ProviderKind::Sim,
            desired_vms: cluster.min_vms,
            running_vms: running(&vms),
            vms: vms.into_iter().map(Into::into).collect(),
            workflow: run
                .as_ref()
                .map(|run| WorkflowSummary::placed(run, self.engine.step_count(&run.kind, run.version))),
            last_error,
            cluster: cluster.into(),
        })
    }
}

/// Capacity VMs (not the control plane) the provider last reported running.
fn running(vms: &[VmRecord]) -> usize {
    vms.iter().filter(|vm| !vm.is_control_plane() && vm.is_running()).count()
}

/// No cluster has this name.
pub(super) fn cluster_not_found(name: &str) -> Refusal {
    Refusal::new(
        Code::ClusterNotFound,
        format!("cluster `{}` does not exist; `anycloud cluster list` shows the clusters", shown(name)),
    )
}
