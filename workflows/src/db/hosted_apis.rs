//! The `hosted_apis` table: APIs this API deployed on a cloud VM, where their deploy or removal
//! stands, and how to reach them. The token and TLS CA are kept sealed (`identity`).

use anycloud_engine::{WriteTx, execute, execute_in, with_pool};
use serde::{Deserialize, Serialize};

use super::{Db, SealedColumn};
use crate::cloud::ProviderKind;

/// Where a hosted API stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// `api.deploy` is running.
    Deploying,
    /// It answers at `url`.
    Ready,
    /// The deploy failed and was unwound; `reason` says why.
    Failed,
    /// `api.remove` is running.
    Removing,
    /// Its VM, network rules and VM identity are gone (its bucket too, if asked).
    Removed,
}

impl Phase {
    /// The stored and shown name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deploying => "deploying",
            Self::Ready => "ready",
            Self::Failed => "failed",
            Self::Removing => "removing",
            Self::Removed => "removed",
        }
    }
}

impl TryFrom<String> for Phase {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        Ok(match s.as_str() {
            "deploying" => Self::Deploying,
            "ready" => Self::Ready,
            "failed" => Self::Failed,
            "removing" => Self::Removing,
            "removed" => Self::Removed,
            other => return Err(format!("unknown hosted API phase `{other}`")),
        })
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A hosted API's record (its sealed identity is read apart, by [`sealed_identity`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, sqlx::FromRow)]
pub struct HostedApi {
    /// Stable id; `api-<id>` tags what it owns at the provider.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The hosting credential.
    pub credential: String,
    /// Its provider.
    #[sqlx(try_from = "String")]
    pub provider: ProviderKind,
    /// The credential of the checkpoint bucket.
    pub storage_credential: String,
    /// The VM's region.
    pub region: String,
    /// The VM's machine type.
    pub vm_type: String,
    /// `s3://...` or `gs://...`.
    pub bucket: String,
    /// The public HTTPS port.
    pub port: i64,
    /// Where the VM gets `anycloud`: the object the deploy shipped to the bucket
    /// (`s3://B/P/binaries/anycloud-SHA256`, fetched through a signed URL), or the operator's
    /// `https://` URL (`{arch}` replaced) ([`crate::hosting::binary::BinarySource`]).
    pub binary_url: String,
    /// The SHA-256 of each architecture's binary, `x86_64=HEX[,aarch64=HEX]` (one for a shipped
    /// binary); the VM checks it before it runs a byte.
    pub binary_sha256: Option<String>,
    /// Where it stands.
    #[sqlx(try_from = "String")]
    pub phase: Phase,
    /// Why it failed, when it did.
    pub reason: Option<String>,
    /// Where it answers, once it does.
    pub url: Option<String>,
    /// The TLS CA's certificate, which clients pin.
    pub ca_pem: Option<String>,
    /// `created` or `adopted`, once the bucket is made.
    pub bucket_made: Option<String>,
    /// The last workflow started on it.
    pub workflow_id: Option<String>,
    /// Created at (ms since the epoch).
    pub created_at: i64,
    /// Changed at.
    pub updated_at: i64,
}

impl HostedApi {
    /// The resource key its workflows run under, one at a time.
    pub fn resource_key(name: &str) -> String {
        format!("api/{name}")
    }

    /// The public HTTPS port, as a port (the column is an integer of the database's width).
    pub fn public_port(&self) -> Result<u16, String> {
        u16::try_from(self.port).map_err(|_| format!("API `{}`: port {} is out of range", self.name, self.port))
    }

    /// The owner id on everything it has at the provider (tags, labels, names).
    pub fn owner(&self) -> String {
        format!("api-{}", self.id)
    }
}

const COLUMNS: &str = "id, name, credential, provider, storage_credential, region, vm_type, bucket, port, binary_url, \
                       binary_sha256, phase, reason, url, ca_pem, bucket_made, workflow_id, created_at, updated_at";

/// The live (not removed) API of this name, read inside the caller's transaction (and on
/// PostgreSQL held until it ends).
pub async fn lock_live_in(tx: &mut WriteTx, name: &str) -> Result<Option<HostedApi>, sqlx::Error> {
    match tx {
        WriteTx::Sqlite(tx) => {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM hosted_apis WHERE name = $1 AND phase <> 'removed'"
            ));
            sqlx::query_as(sql).bind(name).fetch_optional(&mut **tx).await
        }
        WriteTx::Postgres(tx) => {
            let sql = sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM hosted_apis WHERE name = $1 AND phase <> 'removed' FOR UPDATE"
            ));
            sqlx::query_as(sql).bind(name).fetch_optional(&mut **tx).await
        }
    }
}

/// Inserts a new record inside the caller's transaction; a live API of the same name makes it
/// fail with a unique violation.
pub async fn insert_in(tx: &mut WriteTx, api: &HostedApi) -> Result<(), sqlx::Error> {
    execute_in!(
        tx,
        "INSERT INTO hosted_apis (id, name, credential, provider, storage_credential, region, vm_type, bucket, port, \
         binary_url, binary_sha256, phase, workflow_id, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14)",
        &api.id,
        &api.name,
        &api.credential,
        api.provider.as_str(),
        &api.storage_credential,
        &api.region,
        &api.vm_type,
        &api.bucket,
        api.port,
        &api.binary_url,
        &api.binary_sha256,
        api.phase.as_str(),
        &api.workflow_id,
        api.created_at
    )?;
    Ok(())
}

/// Records that a removal was accepted and which run carries it, inside the caller's transaction.
pub async fn request_removal_in(tx: &mut WriteTx, id: &str, workflow_id: &str) -> Result<(), sqlx::Error> {
    execute_in!(
        tx,
        "UPDATE hosted_apis SET phase = 'removing', reason = NULL, workflow_id = $2, updated_at = $3 WHERE id = $1",
        id,
        workflow_id,
        crate::now_ms()
    )?;
    Ok(())
}

/// Records the run in hand on the API (a CA rotation), inside the caller's transaction.
pub async fn set_workflow_in(tx: &mut WriteTx, id: &str, workflow_id: &str) -> Result<(), sqlx::Error> {
    execute_in!(
        tx,
        "UPDATE hosted_apis SET workflow_id = $2, updated_at = $3 WHERE id = $1",
        id,
        workflow_id,
        crate::now_ms()
    )?;
    Ok(())
}

/// The names of the live APIs that use `credential` to host them or to keep their state, read
/// inside the caller's transaction.
pub async fn live_on_credential_in(tx: &mut WriteTx, credential: &str) -> Result<Vec<String>, sqlx::Error> {
    anycloud_engine::with_tx!(tx, |tx| {
        sqlx::query_scalar(
            "SELECT name FROM hosted_apis WHERE (credential = $1 OR storage_credential = $1) AND phase <> 'removed' \
             ORDER BY name",
        )
        .bind(credential)
        .fetch_all(&mut **tx)
        .await
    })
}

/// One record by id.
pub async fn get(db: &Db, id: &str) -> Result<Option<HostedApi>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM hosted_apis WHERE id = $1"));
    with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(id).fetch_optional(pool).await)
}

/// The live API of this name, or else the most recently removed one.
pub async fn get_by_name(db: &Db, name: &str) -> Result<Option<HostedApi>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM hosted_apis WHERE name = $1 ORDER BY (phase = 'removed'), created_at DESC LIMIT 1"
    ));
    with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(name).fetch_optional(pool).await)
}

/// A page of the APIs that are not removed, by name: the first `limit` after the name `after`.
pub async fn list(db: &Db, after: Option<&str>, limit: u32) -> Result<Vec<HostedApi>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM hosted_apis WHERE phase <> 'removed' AND name > $1 ORDER BY name LIMIT $2"
    ));
    let after = after.unwrap_or("");
    with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(after).bind(i64::from(limit)).fetch_all(pool).await)
}

/// Sets the phase and its reason.
pub async fn set_phase(db: &Db, id: &str, phase: Phase, reason: Option<&str>) -> Result<(), sqlx::Error> {
    execute!(
        db.pool(),
        "UPDATE hosted_apis SET phase = $2, reason = $3, updated_at = $4 WHERE id = $1",
        id,
        phase.as_str(),
        reason,
        crate::now_ms()
    )?;
    Ok(())
}

/// Records how the bucket was made (`created`, `adopted`), or clears it.
pub async fn set_bucket_made(db: &Db, id: &str, made: Option<&str>) -> Result<(), sqlx::Error> {
    execute!(
        db.pool(),
        "UPDATE hosted_apis SET bucket_made = $2, updated_at = $3 WHERE id = $1",
        id,
        made,
        crate::now_ms()
    )?;
    Ok(())
}

/// Where a hosted API's identity is sealed: its `identity`, keyed by its id.
pub const IDENTITY: SealedColumn = SealedColumn { table: "hosted_apis", key: "id", column: "identity" };

/// Stores the sealed identity (sealed for [`IDENTITY`]) and the CA's certificate, or clears both.
pub async fn set_identity(db: &Db, id: &str, sealed: Option<&str>, ca_pem: Option<&str>) -> Result<(), sqlx::Error> {
    execute!(
        db.pool(),
        "UPDATE hosted_apis SET identity = $2, ca_pem = $3, updated_at = $4 WHERE id = $1",
        id,
        sealed,
        ca_pem,
        crate::now_ms()
    )?;
    Ok(())
}

/// The sealed identity, when stored.
pub async fn sealed_identity(db: &Db, id: &str) -> Result<Option<String>, sqlx::Error> {
    with_pool!(db.reader(), |pool| {
        sqlx::query_scalar("SELECT identity FROM hosted_apis WHERE id = $1").bind(id).fetch_optional(pool).await
    })
    .map(Option::flatten)
}

/// Records where it answers and that it is ready.
pub async fn set_ready(db: &Db, id: &str, url: &str) -> Result<(), sqlx::Error> {
    execute!(
        db.pool(),
        "UPDATE hosted_apis SET url = $2, phase = 'ready', reason = NULL, updated_at = $3 WHERE id = $1",
        id,
        url,
        crate::now_ms()
    )?;
    Ok(())
}
