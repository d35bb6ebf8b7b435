//! The `clusters` table: the spec a user asked for, where its create or delete stands, and what
//! the cloud gave it. Workflows change a cluster; operations create, hold and read it.

use anycloud_engine::{WriteTx, execute_in, with_pool, with_tx, write_statement};
use serde::{Deserialize, Serialize};

use super::{Db, SealedColumn};
use crate::cloud::ProviderKind;

/// Where a cluster stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The credential the control plane runs on, when not the capacity's (a hosted API's own).
    pub control_plane_credential: Option<String>,
    /// Its provider.
    pub control_plane_provider: Option<String>,
    /// Its region.
    pub control_plane_region: Option<String>,
    /// Its zone, once picked (GCP).
    pub control_plane_zone: Option<String>,
    /// Its machine type.
    pub control_plane_vm_type: Option<String>,
}

/// Where a cluster's control plane runs when it does not run with the capacity: a hosted API
/// places control planes with its own hosting credential, in its region and machine type
/// (../shared/spec/clusters.md, "Placement").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlPlanePlacement {
    /// The credential.
    pub credential: String,
    /// Its provider.
    pub provider: ProviderKind,
    /// Region.
    pub region: String,
    /// Zone, once picked (GCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Machine type.
    pub vm_type: String,
}

impl ControlPlanePlacement {
    /// The placement its five columns hold (credential, provider, region, zone, machine type),
    /// when the control plane runs apart: every one but the zone is set then.
    pub fn from_columns([credential, provider, region, zone, vm_type]: [&Option<String>; 5]) -> Option<Self> {
        Some(Self {
            credential: credential.clone()?,
            provider: provider.as_deref()?.parse().ok()?,
            region: region.clone()?,
            zone: zone.clone(),
            vm_type: vm_type.clone()?,
        })
    }
}

impl Cluster {
    /// Where the control plane runs, when not with the capacity.
    pub fn control_plane(&self) -> Option<ControlPlanePlacement> {
        ControlPlanePlacement::from_columns([
            &self.control_plane_credential,
            &self.control_plane_provider,
            &self.control_plane_region,
            &self.control_plane_zone,
            &self.control_plane_vm_type,
        ])
    }

    /// The provider of the control plane's VM: its own when apart, else the capacity's.
    pub fn control_plane_provider(&self) -> ProviderKind {
        self.control_plane().map_or(self.provider, |apart| apart.provider)
    }

    /// The resource key every workflow on this cluster runs under, so that they run one at a time.
    pub fn resource_key(name: &str) -> String {
        format!("cluster/{name}")
    }
}

const COLUMNS: &str = "id, name, credential, provider, region, zone, vm_type, min_vms, max_vms, phase, reason, \
                       endpoint, network_id, workflow_id, delete_requested_at, created_at, updated_at, \
                       control_plane_credential, control_plane_provider, control_plane_region, \
                       control_plane_zone, control_plane_vm_type";

/// The live (not deleted) cluster of this name, read inside the caller's transaction. On
/// PostgreSQL the row stays locked until the transaction ends, so that a delete and a new
/// deployment on the same cluster cannot interleave (SQLite has one writer at a time).
pub async fn lock_live_in(tx: &mut WriteTx, name: &str) -> Result<Option<Cluster>, sqlx::Error> {
    lock_live_where_in(tx, "name", name).await
}

/// The live cluster whose name, or else id, is `key`, its row held like [`lock_live_in`] holds it.
pub async fn lock_live_by_name_or_id_in(tx: &mut WriteTx, key: &str) -> Result<Option<Cluster>, sqlx::Error> {
    match lock_live_where_in(tx, "name", key).await? {
        Some(cluster) => Ok(Some(cluster)),
        None => lock_live_where_in(tx, "id", key).await,
    }
}

async fn lock_live_where_in(tx: &mut WriteTx, column: &str, value: &str) -> Result<Option<Cluster>, sqlx::Error> {
    match tx {
        WriteTx::Sqlite(tx) => {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM clusters WHERE {column} = $1 AND phase <> 'deleted'"
            ));
            sqlx::query_as(sql).bind(value).fetch_optional(&mut **tx).await
        }
        WriteTx::Postgres(tx) => {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM clusters WHERE {column} = $1 AND phase <> 'deleted' FOR UPDATE"
            ));
            sqlx::query_as(sql).bind(value).fetch_optional(&mut **tx).await
        }
    }
}

/// Inserts a new cluster inside the caller's transaction. A live cluster of the same name makes it
/// fail with a unique violation (`clusters_live_name`).
pub async fn insert_in(tx: &mut WriteTx, cluster: &Cluster) -> Result<(), sqlx::Error> {
    execute_in!(
        tx,
        "INSERT INTO clusters (id, name, credential, provider, region, zone, vm_type, min_vms, max_vms, phase, \
         workflow_id, created_at, updated_at, control_plane_credential, control_plane_provider, control_plane_region, \
         control_plane_zone, control_plane_vm_type) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13, $14, $15, $16, $17)",
        &cluster.id,
        &cluster.name,
        &cluster.credential,
        cluster.provider.as_str(),
        &cluster.region,
        &cluster.zone,
        &cluster.vm_type,
        cluster.min_vms,
        cluster.max_vms,
        cluster.phase.as_str(),
        &cluster.workflow_id,
        cluster.created_at,
        &cluster.control_plane_credential,
        &cluster.control_plane_provider,
        &cluster.control_plane_region,
        &cluster.control_plane_zone,
        &cluster.control_plane_vm_type
    )?;
    Ok(())
}

/// The names of the live (not deleted) clusters whose capacity or control plane `credential` holds,
/// read inside the caller's transaction.
pub async fn live_on_credential_in(tx: &mut WriteTx, credential: &str) -> Result<Vec<String>, sqlx::Error> {
    with_tx!(tx, |tx| {
        sqlx::query_scalar(
            "SELECT name FROM clusters WHERE (credential = $1 OR control_plane_credential = $1) \
             AND phase <> 'deleted' ORDER BY name",
        )
        .bind(credential)
        .fetch_all(&mut **tx)
        .await
    })
}

/// Records that a delete was accepted and which run carries it, inside the caller's transaction.
pub async fn request_delete_in(tx: &mut WriteTx, id: &str, workflow_id: &str, now: i64) -> Result<(), sqlx::Error> {
    execute_in!(
        tx,
        "UPDATE clusters SET delete_requested_at = $2, workflow_id = $3, updated_at = $2 WHERE id = $1",
        id,
        now,
        workflow_id
    )?;
    Ok(())
}

/// The live cluster of this name, or else the most recently deleted one.
pub async fn get_by_name(db: &Db, name: &str) -> Result<Option<Cluster>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM clusters WHERE name = $1 ORDER BY (phase = 'deleted'), created_at DESC LIMIT 1"
    ));
    with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(name).fetch_optional(pool).await)
}

/// One cluster by id.
pub async fn get(db: &Db, id: &str) -> Result<Option<Cluster>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM clusters WHERE id = $1"));
    with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)
}

/// A page of the clusters that are not deleted, by name: the first `limit` after the name `after`.
pub async fn list(db: &Db, after: Option<&str>, limit: u32) -> Result<Vec<Cluster>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM clusters WHERE phase <> 'deleted' AND name > $1 ORDER BY name, created_at LIMIT $2"
    ));
    let after = after.unwrap_or("");
    with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(after).bind(i64::from(limit)).fetch_all(pool).await)
}

/// Every cluster, deleted ones too (deployments keep naming the cluster they ran on).
pub async fn list_all(db: &Db) -> Result<Vec<Cluster>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM clusters ORDER BY name, created_at"));
    with_pool!(db.reader(), |pool| sqlx::query_as(sql).fetch_all(pool).await)
}

/// Sets the phase and its reason.
pub async fn set_phase(db: &Db, id: &str, phase: Phase, reason: Option<&str>) -> Result<(), sqlx::Error> {
    write_statement!(
        db,
        "UPDATE clusters SET phase = $2, reason = $3, updated_at = $4 WHERE id = $1",
        id,
        phase.as_str(),
        reason,
        crate::now_ms()
    )?;
    Ok(())
}

/// Records what the provider gave the cluster: its zone and network rules.
pub async fn set_network(db: &Db, id: &str, zone: Option<&str>, network_id: Option<&str>) -> Result<(), sqlx::Error> {
    write_statement!(
        db,
        "UPDATE clusters SET zone = $2, network_id = $3, updated_at = $4 WHERE id = $1",
        id,
        zone,
        network_id,
        crate::now_ms()
    )?;
    Ok(())
}

/// Records the zone the provider gave the control plane, when it runs apart from the capacity.
pub async fn set_control_plane_zone(db: &Db, id: &str, zone: Option<&str>) -> Result<(), sqlx::Error> {
    write_statement!(
        db,
        "UPDATE clusters SET control_plane_zone = $2, updated_at = $3 WHERE id = $1",
        id,
        zone,
        crate::now_ms()
    )?;
    Ok(())
}

/// Records the Kubernetes API endpoint (or clears it).
pub async fn set_endpoint(db: &Db, id: &str, endpoint: Option<&str>) -> Result<(), sqlx::Error> {
    write_statement!(
        db,
        "UPDATE clusters SET endpoint = $2, updated_at = $3 WHERE id = $1",
        id,
        endpoint,
        crate::now_ms()
    )?;
    Ok(())
}

/// Where a cluster's secrets are sealed: its `secrets`, keyed by its id.
pub const SECRETS: SealedColumn = SealedColumn { table: "clusters", key: "id", column: "secrets" };

/// Stores the sealed secrets (sealed for [`SECRETS`]) unless some are stored already (a rerun keeps the first ones).
pub async fn keep_secrets(db: &Db, id: &str, sealed: &str) -> Result<(), sqlx::Error> {
    write_statement!(db, "UPDATE clusters SET secrets = $2 WHERE id = $1 AND secrets IS NULL", id, sealed)?;
    Ok(())
}

/// The sealed secrets, when generated.
pub async fn sealed_secrets(db: &Db, id: &str) -> Result<Option<String>, sqlx::Error> {
    let found: Option<Option<String>> = with_pool!(db.reader(), |pool| {
        sqlx::query_scalar("SELECT secrets FROM clusters WHERE id = $1").bind(id).fetch_optional(pool).await
    })?;
    Ok(found.flatten())
}

/// Forgets the secrets (after an unwind or a delete, nothing may use them again).
pub async fn erase_secrets(db: &Db, id: &str) -> Result<(), sqlx::Error> {
    write_statement!(db, "UPDATE clusters SET secrets = NULL WHERE id = $1", id)?;
    Ok(())
}
