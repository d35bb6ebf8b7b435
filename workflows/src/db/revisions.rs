//! The `deployment_revisions` table: every revision of a service (1 when it was deployed, one
//! more per upgrade) with its whole spec, its replicas and progress deadline, and how it fared.

use anycloud_engine::{WriteTx, execute_in, with_pool, with_tx, write_statement};
use serde::{Deserialize, Serialize};

use super::Db;
use super::spec::Spec;

/// How a revision fared, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RevisionResult {
    /// An upgrade to it waits for an earlier run of the service.
    Queued,
    /// The service's first revision, applied and not yet available.
    Deploying,
    /// Rolling out; the previous revision still serves.
    Upgrading,
    /// It failed; the previous revision is being restored.
    RollingBack,
    /// It serves.
    Running,
    /// It served until a later revision replaced it.
    Superseded,
    /// Its upgrade was cancelled and the previous revision restored.
    RolledBack,
    /// It could not be made to serve (the reason says why); the previous revision serves.
    Failed,
    /// The service was terminated while it served or rolled out.
    Terminated,
}

impl RevisionResult {
    /// Every result.
    pub const ALL: [RevisionResult; 9] = [
        Self::Queued,
        Self::Deploying,
        Self::Upgrading,
        Self::RollingBack,
        Self::Running,
        Self::Superseded,
        Self::RolledBack,
        Self::Failed,
        Self::Terminated,
    ];

    /// The stored and shown name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Deploying => "deploying",
            Self::Upgrading => "upgrading",
            Self::RollingBack => "rolling-back",
            Self::Running => "running",
            Self::Superseded => "superseded",
            Self::RolledBack => "rolled-back",
            Self::Failed => "failed",
            Self::Terminated => "terminated",
        }
    }

    /// Nothing more happens to it.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Superseded | Self::RolledBack | Self::Failed | Self::Terminated)
    }
}

impl std::fmt::Display for RevisionResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One revision of a service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    /// 1, 2, ...
    pub number: i64,
    /// What it runs (whole: an upgrade's flags applied to the revision it started from).
    #[serde(flatten)]
    pub spec: Spec,
    /// How many replicas it runs.
    pub replicas: i64,
    /// How long it may take to become available, in seconds.
    pub progress_deadline_s: i64,
    /// How it fared.
    pub result: RevisionResult,
    /// Why (a failure's cause, what it waits for).
    pub reason: Option<String>,
    /// The run that deploys or upgrades to it.
    pub workflow_id: Option<String>,
    /// When it was asked for (ms since the epoch).
    pub created_at: i64,
    /// When it stopped serving, or failed.
    pub ended_at: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct Row {
    number: i64,
    image: String,
    command: String,
    env: String,
    cpus: Option<String>,
    memory: Option<String>,
    secrets: String,
    replicas: i64,
    progress_deadline_s: i64,
    result: String,
    reason: Option<String>,
    workflow_id: Option<String>,
    created_at: i64,
    ended_at: Option<i64>,
}

const SELECT: &str = "SELECT number, image, command, env, cpus, memory, secrets, replicas, progress_deadline_s, result, reason, \
                      workflow_id, created_at, ended_at FROM deployment_revisions";

impl TryFrom<Row> for Revision {
    type Error = sqlx::Error;

    fn try_from(row: Row) -> Result<Self, sqlx::Error> {
        let decode = |column: &str, err: String| sqlx::Error::ColumnDecode { index: column.into(), source: err.into() };
        let result = RevisionResult::ALL
            .into_iter()
            .find(|result| result.as_str() == row.result)
            .ok_or_else(|| decode("result", format!("unknown revision result `{}`", row.result)))?;
        Ok(Self {
            number: row.number,
            spec: Spec {
                image: row.image,
                command: serde_json::from_str(&row.command).map_err(|err| decode("command", err.to_string()))?,
                env: serde_json::from_str(&row.env).map_err(|err| decode("env", err.to_string()))?,
                cpus: row.cpus,
                memory: row.memory,
                secrets: super::secrets::decode_uses(&row.secrets).map_err(|err| decode("secrets", err))?,
            },
            replicas: row.replicas,
            progress_deadline_s: row.progress_deadline_s,
            result,
            reason: row.reason,
            workflow_id: row.workflow_id,
            created_at: row.created_at,
            ended_at: row.ended_at,
        })
    }
}

/// Records a revision of the deployment inside the caller's transaction.
pub async fn insert_in(tx: &mut WriteTx, deployment_id: &str, revision: &Revision) -> Result<(), sqlx::Error> {
    let spec = &revision.spec;
    let command = serde_json::to_string(&spec.command).unwrap_or_else(|_| "[]".into());
    let env = serde_json::to_string(&spec.env).unwrap_or_else(|_| "[]".into());
    execute_in!(
        tx,
        "INSERT INTO deployment_revisions (deployment_id, number, image, command, env, cpus, memory, replicas, \
         progress_deadline_s, result, reason, workflow_id, created_at, secrets) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        deployment_id,
        revision.number,
        &spec.image,
        command,
        env,
        spec.cpus.as_deref(),
        spec.memory.as_deref(),
        revision.replicas,
        revision.progress_deadline_s,
        revision.result.as_str(),
        revision.reason.as_deref(),
        revision.workflow_id.as_deref(),
        revision.created_at,
        super::secrets::encode_uses(&spec.secrets)
    )?;
    Ok(())
}

/// Every revision of the deployment, inside the caller's transaction, oldest first.
pub async fn list_in(tx: &mut WriteTx, deployment_id: &str) -> Result<Vec<Revision>, sqlx::Error> {
    let rows: Vec<Row> = with_tx!(tx, |tx| {
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE deployment_id = $1 ORDER BY number")))
            .bind(deployment_id)
            .fetch_all(&mut **tx)
            .await
    })?;
    rows.into_iter().map(Revision::try_from).collect()
}

/// Every revision of the deployment, oldest first.
pub async fn list(db: &Db, deployment_id: &str) -> Result<Vec<Revision>, sqlx::Error> {
    let rows: Vec<Row> = with_pool!(db.reader(), |pool| {
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE deployment_id = $1 ORDER BY number")))
            .bind(deployment_id)
            .fetch_all(pool)
            .await
    })?;
    rows.into_iter().map(Revision::try_from).collect()
}

/// Revision `number` of the deployment.
pub async fn get(db: &Db, deployment_id: &str, number: i64) -> Result<Option<Revision>, sqlx::Error> {
    let row: Option<Row> = with_pool!(db.reader(), |pool| {
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE deployment_id = $1 AND number = $2")))
            .bind(deployment_id)
            .bind(number)
            .fetch_optional(pool)
            .await
    })?;
    row.map(Revision::try_from).transpose()
}

/// Sets how revision `number` fares; a final result also records when it ended.
pub async fn set_result(
    db: &Db,
    deployment_id: &str,
    number: i64,
    result: RevisionResult,
    reason: Option<&str>,
    now: i64,
) -> Result<(), sqlx::Error> {
    let ended = result.is_final().then_some(now);
    write_statement!(
        db,
        "UPDATE deployment_revisions SET result = $1, reason = $2, ended_at = $3 \
         WHERE deployment_id = $4 AND number = $5",
        result.as_str(),
        reason,
        ended,
        deployment_id,
        number
    )?;
    Ok(())
}

/// Marks every revision before `number` that was serving as superseded by it.
pub async fn supersede_before(db: &Db, deployment_id: &str, number: i64, now: i64) -> Result<(), sqlx::Error> {
    write_statement!(
        db,
        "UPDATE deployment_revisions SET result = 'superseded', ended_at = $1 \
         WHERE deployment_id = $2 AND number < $3 AND result = 'running'",
        now,
        deployment_id,
        number
    )?;
    Ok(())
}

/// Marks every revision of the deployment that has not reached a final result as terminated.
pub async fn terminate_all(db: &Db, deployment_id: &str, reason: &str, now: i64) -> Result<(), sqlx::Error> {
    write_statement!(
        db,
        "UPDATE deployment_revisions SET result = 'terminated', reason = COALESCE(reason, $1), ended_at = $2 \
         WHERE deployment_id = $3 AND result NOT IN ('superseded', 'rolled-back', 'failed', 'terminated')",
        reason,
        now,
        deployment_id
    )?;
    Ok(())
}
