//! Deleting a cluster: its `cluster.delete` run and the record's delete mark, in one transaction
//! that holds the cluster's row against new deployments.

use anycloud_engine::RunStatus;

use crate::db::clusters::{self, Cluster};
use crate::db::deployments;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::ClusterDetail;
use crate::workflows::cluster_delete::{DeleteCluster, DeleteInput};

use super::Operations;
use super::show_clusters::cluster_not_found;

impl Operations {
    /// Starts `cluster.delete`, unless a deployment still references the cluster. Asked again
    /// while a delete runs, it answers with that delete; asked again after a delete was cancelled
    /// or gave up, it starts a new one.
    pub async fn delete_cluster(&self, name: &str) -> Result<ClusterDetail, OperationError> {
        let mut tx = self.deps.db.begin().await?;
        let cluster = clusters::lock_live_in(&mut tx, name).await?.ok_or_else(|| cluster_not_found(name))?;
        if cluster.delete_requested_at.is_some() && self.delete_runs(&cluster).await? {
            drop(tx);
            return self.cluster_detail(cluster).await;
        }
        let users = deployments::active_on_cluster_in(&mut tx, &cluster.id).await?;
        if !users.is_empty() {
            return Err(Refusal::new(
                Code::ClusterInUse,
                format!(
                    "cluster `{name}` is still referenced by {} deployment(s) that have not ended: {}; end them with \
                     `anycloud terminate {}` (or wait for them: `anycloud wait deployment/{}`), then delete the cluster",
                    users.len(),
                    users.join(", "),
                    users[0],
                    users[0]
                ),
            )
            .into());
        }
        let input = DeleteInput { cluster_id: cluster.id.clone(), name: name.to_owned() };
        let run = self.engine.submit_in::<DeleteCluster>(&mut tx, &input, Some(&Cluster::resource_key(name))).await?;
        clusters::request_delete_in(&mut tx, &cluster.id, &run.to_string(), crate::now_ms()).await?;
        tx.commit().await?;
        self.engine.wake_up();
        let cluster = clusters::get(&self.deps.db, &cluster.id).await?.ok_or_else(|| cluster_not_found(name))?;
        self.cluster_detail(cluster).await
    }

    /// Whether the cluster's delete run is still going (it has not ended some other way).
    async fn delete_runs(&self, cluster: &Cluster) -> Result<bool, OperationError> {
        let Some(id) = cluster.workflow_id.as_deref().and_then(|id| id.parse().ok()) else { return Ok(false) };
        let run = self.engine.run(id).await?;
        Ok(!matches!(run.status, RunStatus::Failed | RunStatus::Cancelled))
    }
}
