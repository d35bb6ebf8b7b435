//! The `vms` table: the real provider VMs of each cluster, as the provider last reported them
//! (never synthetic records for workloads).

use anycloud_engine::{with_pool, write_statement};
use serde::{Deserialize, Serialize};

use super::Db;
use crate::cloud::{Role, Vm};

/// A VM record: a real provider VM of a cluster.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, sqlx::FromRow)]
pub struct VmRecord {
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
    /// Last seen at.
    pub updated_at: i64,
}

/// Records what the provider reports of a VM.
pub async fn upsert(db: &Db, cluster_id: &str, vm: &Vm) -> Result<(), sqlx::Error> {
    write_statement!(
        db,
        "INSERT INTO vms (cluster_id, provider_id, name, role, state, private_ip, public_ip, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (cluster_id, provider_id) DO UPDATE SET \
         state = excluded.state, private_ip = excluded.private_ip, public_ip = excluded.public_ip, \
         updated_at = excluded.updated_at",
        cluster_id,
        &vm.provider_id,
        &vm.name,
        vm.role.as_str(),
        &vm.state,
        &vm.private_ip,
        &vm.public_ip,
        crate::now_ms()
    )?;
    Ok(())
}

/// Marks every recorded VM of the cluster that the provider no longer lists as terminated.
pub async fn mark_gone(db: &Db, cluster_id: &str, live: &[Vm]) -> Result<(), sqlx::Error> {
    for vm in of_cluster(db, cluster_id).await? {
        if vm.state != "terminated" && !live.iter().any(|l| l.provider_id == vm.provider_id) {
            write_statement!(
                db,
                "UPDATE vms SET state = 'terminated', updated_at = $3 WHERE cluster_id = $1 AND provider_id = $2",
                cluster_id,
                &vm.provider_id,
                crate::now_ms()
            )?;
        }
    }
    Ok(())
}

/// The cluster's VMs, control plane first.
pub async fn of_cluster(db: &Db, cluster_id: &str) -> Result<Vec<VmRecord>, sqlx::Error> {
    with_pool!(db.reader(), |pool| {
        sqlx::query_as(
            "SELECT provider_id, name, role, state, private_ip, public_ip, updated_at FROM vms \
             WHERE cluster_id = $1 ORDER BY (role <> 'control-plane'), name, updated_at",
        )
        .bind(cluster_id)
        .fetch_all(pool)
        .await
    })
}

impl VmRecord {
    /// Whether it is the cluster's control plane.
    pub fn is_control_plane(&self) -> bool {
        Role::parse(&self.role) == Some(Role::ControlPlane)
    }

    /// Whether the provider last reported it running.
    pub fn is_running(&self) -> bool {
        self.state.eq_ignore_ascii_case("running")
    }
}
