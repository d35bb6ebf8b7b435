//! Cluster records: the spec a user asked for, where its create or delete stands, and the real
//! provider VMs it owns. Workflows change them; the API reads them.

use anycloud_engine::store::{Pool, WriteTx};
use anycloud_engine::{with_pool, with_tx};
use serde::{Deserialize, Serialize};

use crate::cloud::{Role, Vm};
use crate::providers::ProviderKind;

/// Where a cluster stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// `cluster.create` is running (or queued).
    Creating,
    /// Every capacity VM is a Ready Kubernetes node.
    Ready,
    /// Creation failed and was unwound; `reason` says why.
    Failed,
    /// `cluster.delete` is running.
    Deleting,
    /// Everything it owned at the provider is gone.
    Deleted,
}

impl Phase {
    /// The stored and shown name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "creating",
            Self::Ready => "ready",
            Self::Failed => "failed",
            Self::Deleting => "deleting",
            Self::Deleted => "deleted",
        }
    }
}

impl TryFrom<String> for Phase {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        Ok(match s.as_str() {
            "creating" => Self::Creating,
            "ready" => Self::Ready,
            "failed" => Self::Failed,
            "deleting" => Self::Deleting,
            "deleted" => Self::Deleted,
            other => return Err(format!("unknown cluster phase `{other}`")),
        })
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a user asks for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewCluster {
    /// DNS-label name, unique among clusters that are not deleted.
    pub name: String,
    /// The credential whose account holds the capacity VMs.
    pub credentials: String,
    /// Provider region.
    pub region: String,
    /// Provider machine type.
    pub vm_type: String,
    /// Fixed capacity: must equal `max_vms` for now.
    pub min_vms: i64,
    /// Fixed capacity.
    pub max_vms: i64,
}

/// Largest fixed capacity accepted.
pub const MAX_VMS: i64 = 100;

impl NewCluster {
    /// Checks what can be checked without the database or the provider.
    pub fn validate(&self) -> Result<(), String> {
        crate::names::check_dns_label("cluster", &self.name)?;
        if self.region.trim().is_empty() {
            return Err(format!("cluster `{}`: --region is empty; pass the provider's region", self.name));
        }
        if self.vm_type.trim().is_empty() {
            return Err(format!("cluster `{}`: --vm-type is empty; pass the provider's machine type", self.name));
        }
        if self.min_vms != self.max_vms {
            return Err(format!(
                "cluster `{}`: --min-vms ({}) and --max-vms ({}) differ; clusters currently have fixed capacity, so \
                 the minimum and maximum must be equal (autoscaling is not supported yet)",
                self.name, self.min_vms, self.max_vms
            ));
        }
        if !(1..=MAX_VMS).contains(&self.min_vms) {
            return Err(format!(
                "cluster `{}`: --min-vms {} is out of range; a cluster has 1 to {MAX_VMS} capacity VMs",
                self.name, self.min_vms
            ));
        }
        Ok(())
    }
}

/// A cluster record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, sqlx::FromRow)]
pub struct Cluster {
    /// Stable id; the value of the cluster tag on everything it owns.
    pub id: String,
    /// Name.
    pub name: String,
    /// The credential of the capacity account.
    pub credential: String,
    /// Its provider.
    #[sqlx(try_from = "String")]
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
    #[sqlx(try_from = "String")]
    pub phase: Phase,
    /// Why it failed, when it did.
    pub reason: Option<String>,
    /// The Kubernetes API endpoint, once it answers.
    pub endpoint: Option<String>,
    /// The provider's id of its network rules.
    pub network_id: Option<String>,
    /// The last workflow started on it.
    pub workflow_id: Option<String>,
    /// When a delete was accepted.
    pub delete_requested_at: Option<i64>,
    /// Created at (ms since the epoch).
    pub created_at: i64,
    /// Changed at.
    pub updated_at: i64,
}

impl Cluster {
    /// The resource key every workflow on this cluster runs under, so that they run one at a time.
    pub fn resource_key(name: &str) -> String {
        format!("cluster/{name}")
    }
}

const COLUMNS: &str = "id, name, credential, provider, region, zone, vm_type, min_vms, max_vms, phase, reason, \
                       endpoint, network_id, workflow_id, delete_requested_at, created_at, updated_at";

/// The live (not deleted) cluster of this name, read inside the caller's transaction. On
/// PostgreSQL the row stays locked until the transaction ends, so that a delete and a new
/// deployment on the same cluster cannot interleave (SQLite has one writer at a time).
pub async fn lock_live_in(tx: &mut WriteTx, name: &str) -> Result<Option<Cluster>, sqlx::Error> {
    match tx {
        WriteTx::Sqlite(tx) => {
            let sql =
                sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM clusters WHERE name = $1 AND phase <> 'deleted'"));
            sqlx::query_as(sql).bind(name).fetch_optional(&mut **tx).await
        }
        WriteTx::Postgres(tx) => {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM clusters WHERE name = $1 AND phase <> 'deleted' FOR UPDATE"
            ));
            sqlx::query_as(sql).bind(name).fetch_optional(&mut **tx).await
        }
    }
}

/// Inserts a new cluster inside the caller's transaction.
pub async fn insert_in(tx: &mut WriteTx, cluster: &Cluster) -> Result<(), sqlx::Error> {
    with_tx!(tx, |tx| {
        sqlx::query(
            "INSERT INTO clusters (id, name, credential, provider, region, zone, vm_type, min_vms, max_vms, phase, \
             workflow_id, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)",
        )
        .bind(&cluster.id)
        .bind(&cluster.name)
        .bind(&cluster.credential)
        .bind(cluster.provider.as_str())
        .bind(&cluster.region)
        .bind(&cluster.zone)
        .bind(&cluster.vm_type)
        .bind(cluster.min_vms)
        .bind(cluster.max_vms)
        .bind(cluster.phase.as_str())
        .bind(&cluster.workflow_id)
        .bind(cluster.created_at)
        .execute(&mut **tx)
        .await
        .map(|done| done.rows_affected())
    })?;
    Ok(())
}

/// Records that a delete was accepted and which run carries it, inside the caller's transaction.
pub async fn request_delete_in(tx: &mut WriteTx, id: &str, workflow_id: &str, now: i64) -> Result<(), sqlx::Error> {
    with_tx!(tx, |tx| {
        sqlx::query("UPDATE clusters SET delete_requested_at = $2, workflow_id = $3, updated_at = $2 WHERE id = $1")
            .bind(id)
            .bind(now)
            .bind(workflow_id)
            .execute(&mut **tx)
            .await
            .map(|done| done.rows_affected())
    })?;
    Ok(())
}

/// Deployments on the cluster that have not ended, read inside the caller's transaction.
pub async fn active_deployments_in(tx: &mut WriteTx, cluster_id: &str) -> Result<Vec<String>, sqlx::Error> {
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
pub async fn add_deployment_in(
    tx: &mut WriteTx,
    cluster_name: &str,
    deployment: NewDeployment<'_>,
    now: i64,
) -> Result<Cluster, PlacementRefused> {
    let cluster =
        lock_live_in(tx, cluster_name).await?.ok_or_else(|| PlacementRefused::NoCluster(cluster_name.to_owned()))?;
    if cluster.phase != Phase::Ready || cluster.delete_requested_at.is_some() {
        return Err(PlacementRefused::NotReady {
            name: cluster.name,
            phase: cluster.phase,
            deleting: cluster.delete_requested_at.is_some(),
        });
    }
    with_tx!(tx, |tx| {
        sqlx::query(
            "INSERT INTO deployments (id, name, kind, cluster_id, status, created_at) VALUES ($1, $2, $3, $4, 'queued', $5)",
        )
        .bind(deployment.id)
        .bind(deployment.name)
        .bind(deployment.kind)
        .bind(&cluster.id)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map(|done| done.rows_affected())
    })?;
    Ok(cluster)
}

/// The live cluster of this name, or else the most recently deleted one.
pub async fn get_by_name(pool: &Pool, name: &str) -> Result<Option<Cluster>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM clusters WHERE name = $1 ORDER BY (phase = 'deleted'), created_at DESC LIMIT 1"
    ));
    with_pool!(pool, |pool| sqlx::query_as(sql).bind(name).fetch_optional(pool).await)
}

/// One cluster by id.
pub async fn get(pool: &Pool, id: &str) -> Result<Option<Cluster>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM clusters WHERE id = $1"));
    with_pool!(pool, |pool| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)
}

/// Every cluster that is not deleted, by name.
pub async fn list(pool: &Pool) -> Result<Vec<Cluster>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM clusters WHERE phase <> 'deleted' ORDER BY name, created_at"
    ));
    with_pool!(pool, |pool| sqlx::query_as(sql).fetch_all(pool).await)
}

/// Sets the phase and its reason.
pub async fn set_phase(pool: &Pool, id: &str, phase: Phase, reason: Option<&str>) -> Result<(), sqlx::Error> {
    with_pool!(pool, |pool| {
        sqlx::query("UPDATE clusters SET phase = $2, reason = $3, updated_at = $4 WHERE id = $1")
            .bind(id)
            .bind(phase.as_str())
            .bind(reason)
            .bind(crate::now_ms())
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    Ok(())
}

/// Records what the provider gave the cluster: its zone and network rules.
pub async fn set_network(
    pool: &Pool,
    id: &str,
    zone: Option<&str>,
    network_id: Option<&str>,
) -> Result<(), sqlx::Error> {
    with_pool!(pool, |pool| {
        sqlx::query("UPDATE clusters SET zone = $2, network_id = $3, updated_at = $4 WHERE id = $1")
            .bind(id)
            .bind(zone)
            .bind(network_id)
            .bind(crate::now_ms())
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    Ok(())
}

/// Records the Kubernetes API endpoint (or clears it).
pub async fn set_endpoint(pool: &Pool, id: &str, endpoint: Option<&str>) -> Result<(), sqlx::Error> {
    with_pool!(pool, |pool| {
        sqlx::query("UPDATE clusters SET endpoint = $2, updated_at = $3 WHERE id = $1")
            .bind(id)
            .bind(endpoint)
            .bind(crate::now_ms())
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    Ok(())
}

/// Stores the sealed secrets unless some are stored already (a rerun keeps the first ones).
pub async fn keep_secrets(pool: &Pool, id: &str, sealed: &str) -> Result<(), sqlx::Error> {
    with_pool!(pool, |pool| {
        sqlx::query("UPDATE clusters SET secrets = $2 WHERE id = $1 AND secrets IS NULL")
            .bind(id)
            .bind(sealed)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    Ok(())
}

/// The sealed secrets, when generated.
pub async fn sealed_secrets(pool: &Pool, id: &str) -> Result<Option<String>, sqlx::Error> {
    let found: Option<Option<String>> = with_pool!(pool, |pool| {
        sqlx::query_scalar("SELECT secrets FROM clusters WHERE id = $1").bind(id).fetch_optional(pool).await
    })?;
    Ok(found.flatten())
}

/// Forgets the secrets (after an unwind or a delete, nothing may use them again).
pub async fn erase_secrets(pool: &Pool, id: &str) -> Result<(), sqlx::Error> {
    with_pool!(pool, |pool| {
        sqlx::query("UPDATE clusters SET secrets = NULL WHERE id = $1")
            .bind(id)
            .execute(pool)
            .await
            .map(|d| d.rows_affected())
    })?;
    Ok(())
}

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
pub async fn upsert_vm(pool: &Pool, cluster_id: &str, vm: &Vm) -> Result<(), sqlx::Error> {
    with_pool!(pool, |pool| {
        sqlx::query(
            "INSERT INTO vms (cluster_id, provider_id, name, role, state, private_ip, public_ip, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (cluster_id, provider_id) DO UPDATE SET \
             state = excluded.state, private_ip = excluded.private_ip, public_ip = excluded.public_ip, \
             updated_at = excluded.updated_at",
        )
        .bind(cluster_id)
        .bind(&vm.provider_id)
        .bind(&vm.name)
        .bind(vm.role.as_str())
        .bind(&vm.state)
        .bind(&vm.private_ip)
        .bind(&vm.public_ip)
        .bind(crate::now_ms())
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
    })?;
    Ok(())
}

/// Marks every recorded VM of the cluster that the provider no longer lists as terminated.
pub async fn mark_gone_vms(pool: &Pool, cluster_id: &str, live: &[Vm]) -> Result<(), sqlx::Error> {
    for vm in vms(pool, cluster_id).await? {
        if vm.state != "terminated" && !live.iter().any(|l| l.provider_id == vm.provider_id) {
            with_pool!(pool, |pool| {
                sqlx::query(
                    "UPDATE vms SET state = 'terminated', updated_at = $3 WHERE cluster_id = $1 AND provider_id = $2",
                )
                .bind(cluster_id)
                .bind(&vm.provider_id)
                .bind(crate::now_ms())
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
            })?;
        }
    }
    Ok(())
}

/// The cluster's VMs, control plane first.
pub async fn vms(pool: &Pool, cluster_id: &str) -> Result<Vec<VmRecord>, sqlx::Error> {
    with_pool!(pool, |pool| {
        sqlx::query_as(
            "SELECT provider_id, name, role, state, private_ip, public_ip, updated_at FROM vms \
             WHERE cluster_id = $1 ORDER BY (role <> 'control-plane'), name, updated_at",
        )
        .bind(cluster_id)
        .fetch_all(pool)
        .await
    })
}

/// Whether a VM's role is the control plane's.
pub fn is_control_plane(vm: &VmRecord) -> bool {
    Role::parse(&vm.role) == Some(Role::ControlPlane)
}
