//! The `deployments` table: jobs and services. A deployment on a cluster holds the cluster until
//! it ends: a cluster's delete and a new deployment on it take the same row lock.

use anycloud_engine::{WriteTx, execute_in, with_tx};

use super::clusters::{self, Cluster, Phase};

/// Deployments on the cluster that have not ended, read inside the caller's transaction.
pub async fn active_on_cluster_in(tx: &mut WriteTx, cluster_id: &str) -> Result<Vec<String>, sqlx::Error> {
    with_tx!(tx, |tx| {
        sqlx::query_scalar(
            "SELECT name FROM deployments WHERE cluster_id = $1 \
             AND status NOT IN ('completed', 'errored', 'terminated', 'failed', 'invalid') ORDER BY created_at",
        )
        .bind(cluster_id)
        .fetch_all(&mut **tx)
        .await
    })
}

/// Why a deployment cannot be placed on a cluster.
#[derive(Debug, thiserror::Error)]
pub enum PlacementRefused {
    /// No live cluster of that name.
    #[error("cluster `{0}` does not exist; `anycloud cluster list` shows the clusters")]
    NoCluster(String),
    /// The cluster is not ready (creating, failed) or is being deleted.
    #[error("cluster `{name}` is {phase}{}; deployments need a ready cluster", if *.deleting { " and being deleted" } else { "" })]
    NotReady {
        /// The cluster.
        name: String,
        /// Its phase.
        phase: Phase,
        /// Whether a delete was accepted.
        deleting: bool,
    },
    /// The database failed.
    #[error("storing the deployment")]
    Store(#[from] sqlx::Error),
}

/// A deployment to record on a cluster.
#[derive(Debug, Clone, Copy)]
pub struct NewDeployment<'a> {
    /// Its id.
    pub id: &'a str,
    /// Its name.
    pub name: &'a str,
    /// `job` or `service`.
    pub kind: &'a str,
}

/// Records a deployment on a cluster inside the caller's transaction, holding the cluster's row
/// like a delete does: a cluster that is not ready, or whose delete was accepted, is refused.
pub async fn add_in(
    tx: &mut WriteTx,
    cluster_name: &str,
    deployment: NewDeployment<'_>,
    now: i64,
) -> Result<Cluster, PlacementRefused> {
    let cluster = clusters::lock_live_in(tx, cluster_name)
        .await?
        .ok_or_else(|| PlacementRefused::NoCluster(cluster_name.to_owned()))?;
    if cluster.phase != Phase::Ready || cluster.delete_requested_at.is_some() {
        return Err(PlacementRefused::NotReady {
            name: cluster.name,
            phase: cluster.phase,
            deleting: cluster.delete_requested_at.is_some(),
        });
    }
    execute_in!(
        tx,
        "INSERT INTO deployments (id, name, kind, cluster_id, status, created_at) VALUES ($1, $2, $3, $4, 'queued', $5)",
        deployment.id,
        deployment.name,
        deployment.kind,
        &cluster.id,
        now
    )?;
    Ok(cluster)
}
