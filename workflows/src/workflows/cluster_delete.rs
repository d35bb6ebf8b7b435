//! `cluster.delete`: removes everything a cluster owns at its provider.
//!
//! ```text
//! mark_deleting -> remove_workloads -> terminate_vms -> delete_network -> wait_gone
//!   -> release_address -> mark_deleted
//! ```
//!
//! The `delete_cluster` operation refuses the delete while a deployment references the cluster,
//! in the transaction that submits this run (deployments lock the same row). The run shares the
//! cluster's resource key with `cluster.create`, so a delete accepted during a create waits for
//! it. Every step is idempotent and moves forward only: no step has an undo, and a step that
//! keeps failing, or a wait that runs out of time, parks the run for an operator (`workflow
//! retry`, `resume`) instead of giving up with VMs left behind. A cancelled delete leaves the
//! cluster `deleting`; deleting it again starts a new run. docs/workflows/cluster-delete.md
//! describes each step.

use std::time::Duration;

use anycloud_engine::{Check, Step, StepCtx, StepError, StepKey, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::cloud::{Placement, Role};
use crate::cluster::sides::{Sides, every_vm_once};
use crate::db::clusters::{self, Cluster, Phase};
use crate::db::vms;
use crate::workflows::deps::Deps;
use crate::{kubernetes, workflows::retry};

/// The workflow, with what its steps need.
pub struct DeleteCluster {
    /// Database, sealer, clouds.
    pub deps: Deps,
}

/// Which cluster to delete.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeleteInput {
    /// The cluster's id.
    pub cluster_id: String,
    /// Its name.
    pub name: String,
}

/// What `remove_workloads` did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkloadsRemoved {
    /// Kubernetes objects deleted.
    pub deleted: usize,
    /// Why nothing was asked of Kubernetes, when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// Where the cluster's VMs are, read from its record.
const MARK_DELETING: StepKey<Placement> = StepKey::new("mark_deleting");

impl Workflow for DeleteCluster {
    const KIND: &'static str = "cluster.delete";
    /// v2: every step parks when it keeps failing (v1 gave up on some); v3: `release_address`.
    /// A run of an older version is not registered any more: the engine parks it
    /// (`needs-attention`, naming the version); cancel it and delete the cluster again.
    const VERSION: u32 = 3;
    type Input = DeleteInput;
    type Output = ();

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(Step::action(MARK_DELETING, mark_deleting).retry(retry::cloud_calls()))
            .then(
                Step::action("remove_workloads", remove_workloads)
                    .retry(retry::cloud_calls())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(
                Step::action("terminate_vms", terminate_vms)
                    .retry(retry::cloud_calls())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(
                Step::action("delete_network", delete_network)
                    .retry(retry::sweeps())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(
                Step::poll("wait_gone", wait_gone)
                    .every(Duration::from_secs(2))
                    .timeout(Duration::from_secs(15 * 60))
                    .retry(retry::sweeps())
                    .attempt_timeout(retry::QUICK_ATTEMPT),
            )
            .then(
                Step::action("release_address", release_address)
                    .retry(retry::sweeps())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(Step::action("mark_deleted", mark_deleted).retry(retry::cloud_calls()))
    }

    fn output(_ctx: &StepCtx<Self>) -> Result<(), StepError> {
        Ok(())
    }
}

/// The cluster's sides (its capacity's and, apart when it runs on the hosted API's credential,
/// its control plane's), from its record.
async fn sides(ctx: &StepCtx<DeleteCluster>) -> Result<Sides, StepError> {
    Ok(sides_and_cluster(ctx).await?.0)
}

async fn sides_and_cluster(ctx: &StepCtx<DeleteCluster>) -> Result<(Sides, Cluster), StepError> {
    let cluster = ctx.workflow().deps.cluster(&ctx.input().cluster_id).await?;
    Ok((Sides::of(&ctx.workflow().deps, &cluster).await?, cluster))
}

async fn mark_deleting(ctx: StepCtx<DeleteCluster>) -> Result<Placement, StepError> {
    let cluster = ctx.workflow().deps.cluster(&ctx.input().cluster_id).await?;
    clusters::set_phase(&ctx.workflow().deps.db, &cluster.id, Phase::Deleting, None).await?;
    Ok(Placement {
        cluster_id: cluster.id,
        region: cluster.region,
        zone: cluster.zone,
        vm_type: cluster.vm_type,
        image: None,
    })
}

async fn remove_workloads(ctx: StepCtx<DeleteCluster>) -> Result<WorkloadsRemoved, StepError> {
    let deps = &ctx.workflow().deps;
    let (sides, cluster) = sides_and_cluster(&ctx).await?;
    let live = sides.control_plane().cloud.list_vms(&sides.control_plane().placement).await?;
    let Some(cp) = live.iter().find(|vm| vm.role == Role::ControlPlane && vm.state.eq_ignore_ascii_case("running"))
    else {
        return Ok(WorkloadsRemoved { deleted: 0, skipped: Some("no running control plane".into()) });
    };
    let cluster_id = &ctx.input().cluster_id;
    let secrets = match clusters::sealed_secrets(&deps.db, cluster_id).await? {
        Some(_) => deps.secrets(cluster_id).await?,
        None => return Ok(WorkloadsRemoved { deleted: 0, skipped: Some("the cluster has no secrets".into()) }),
    };
    let endpoint = deps.kube_endpoint(cluster.control_plane_provider(), cp)?;
    let client = kubernetes::client::client(&endpoint, &secrets).map_err(StepError::terminal)?;
    // Best effort: the VMs go next, and every workload with them; a control plane that does
    // not answer must not keep the cluster alive.
    match kubernetes::client::delete_workloads(&client).await {
        Ok(deleted) => Ok(WorkloadsRemoved { deleted, skipped: None }),
        Err(err) => Ok(WorkloadsRemoved {
            deleted: 0,
            skipped: Some(format!("Kubernetes API did not answer: {}", anycloud_engine::error_chain(&err))),
        }),
    }
}

async fn terminate_vms(ctx: StepCtx<DeleteCluster>) -> Result<Vec<String>, StepError> {
    let sides = sides(&ctx).await?;
    // A sweep by tag, not the recorded ids: a half-finished create's VMs are found too.
    let listed = sides.vms_by_side().await?;
    let live = every_vm_once(&listed);
    for vm in &live {
        vms::upsert(&ctx.workflow().deps.db, &ctx.input().cluster_id, vm).await?;
    }
    for (side, on_side) in &listed {
        let ids: Vec<String> = on_side.iter().map(|vm| vm.provider_id.clone()).collect();
        side.cloud.terminate(&side.placement, &ids).await?;
    }
    Ok(live.into_iter().map(|vm| vm.provider_id).collect())
}

async fn delete_network(ctx: StepCtx<DeleteCluster>) -> Result<(), StepError> {
    for side in sides(&ctx).await?.all() {
        side.cloud.delete_network(&side.placement).await?;
    }
    Ok(())
}

async fn wait_gone(ctx: StepCtx<DeleteCluster>) -> Result<Check<()>, StepError> {
    let sides = sides(&ctx).await?;
    let listed = sides.vms_by_side().await?;
    let live = every_vm_once(&listed);
    vms::mark_gone(&ctx.workflow().deps.db, &ctx.input().cluster_id, &live).await?;
    let mut network = false;
    for (side, on_side) in &listed {
        let rules = side.cloud.network_exists(&side.placement).await?;
        network |= rules;
        if !on_side.is_empty() {
            // A VM launched after the sweep (a create's retry racing an old delete) is swept too.
            let ids: Vec<String> = on_side.iter().map(|vm| vm.provider_id.clone()).collect();
            side.cloud.terminate(&side.placement, &ids).await?;
        } else if rules && live.is_empty() {
            side.cloud.delete_network(&side.placement).await?;
        }
    }
    if live.is_empty() && !network {
        return Ok(Check::Ready(()));
    }
    Ok(Check::NotYet(format!(
        "the provider still lists {} VM(s){}",
        live.len(),
        if network { " and the network rules" } else { "" }
    )))
}

/// Releases the control plane's reserved address (every address with the cluster's tag, on every
/// side), now that no VM uses it; succeeds once the providers list none.
async fn release_address(ctx: StepCtx<DeleteCluster>) -> Result<(), StepError> {
    for side in sides(&ctx).await?.all() {
        ctx.workflow().deps.release_addresses(side.cloud.as_ref(), &side.placement).await?;
    }
    Ok(())
}

async fn mark_deleted(ctx: StepCtx<DeleteCluster>) -> Result<(), StepError> {
    let db = &ctx.workflow().deps.db;
    let id = &ctx.input().cluster_id;
    vms::mark_gone(db, id, &[]).await?;
    clusters::erase_secrets(db, id).await?;
    clusters::set_endpoint(db, id, None).await?;
    clusters::set_network(db, id, None, None).await?;
    clusters::set_phase(db, id, Phase::Deleted, None).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_step_is_documented_with_its_retry() {
        let documented = include_str!("../../../docs/workflows/cluster-delete.md");
        for step in [
            "mark_deleting",
            "remove_workloads",
            "terminate_vms",
            "delete_network",
            "wait_gone",
            "release_address",
            "mark_deleted",
        ] {
            assert!(documented.contains(&format!("| `{step}` |")), "docs/workflows/cluster-delete.md lacks `{step}`");
        }
        assert!(documented.contains("a timeout parks"), "the doc must say that `wait_gone` parks when it times out");
    }
}
