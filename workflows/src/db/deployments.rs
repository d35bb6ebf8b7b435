//! The `deployments` table: jobs and services with their spec, attempt (jobs) or serving
//! revision (services), status and outcome. A deployment on a cluster holds the cluster until it ends: a cluster's delete and a
//! new deployment on it take the same row lock.

use anycloud_engine::{WriteTx, execute_in, with_pool, with_tx, write_statement};
use serde::{Deserialize, Serialize};

use super::Db;
use super::clusters::{self, Cluster, Phase};
use super::secrets::{SecretUse, decode_uses, encode_uses};
use super::spec::Spec;

/// Where a deployment stands, as stored. (`retrying` and `terminating` are not stored: they are
/// read off the deployment's workflow.) A job moves `queued -> starting -> running -> completed |
/// errored`; a service `deploying -> running`, then `upgrading` (and `rolling-back` when an
/// upgrade fails) back to `running`, until `terminated`; either may end `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Accepted; its Kubernetes objects are not applied yet.
    Queued,
    /// Applied; no Pod runs yet.
    Starting,
    /// A Pod runs.
    Running,
    /// It exited 0.
    Completed,
    /// It exited with another code, or its Pod failed.
    Errored,
    /// A person ended it; its objects were deleted.
    Terminated,
    /// Anycloud could not run it.
    Failed,
    /// The cluster refused its objects.
    Invalid,
    /// A service whose first revision is applied and not yet available.
    Deploying,
    /// A service rolling out a new revision; the previous one still serves.
    Upgrading,
    /// A service whose upgrade failed, going back to the revision that served before.
    RollingBack,
}

impl Status {
    /// Every status, in the order of a deployment's life.
    pub const ALL: [Status; 11] = [
        Self::Queued,
        Self::Deploying,
        Self::Starting,
        Self::Running,
        Self::Upgrading,
        Self::RollingBack,
        Self::Completed,
        Self::Errored,
        Self::Terminated,
        Self::Failed,
        Self::Invalid,
    ];

    /// The stored and shown name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Errored => "errored",
            Self::Terminated => "terminated",
            Self::Failed => "failed",
            Self::Invalid => "invalid",
            Self::Deploying => "deploying",
            Self::Upgrading => "upgrading",
            Self::RollingBack => "rolling-back",
        }
    }

    /// It has ended: nothing runs, and only `resubmit` starts it again.
    pub fn is_ended(self) -> bool {
        matches!(self, Self::Completed | Self::Errored | Self::Terminated | Self::Failed | Self::Invalid)
    }
}

impl TryFrom<String> for Status {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| format!("unknown deployment status `{s}`"))
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The SQL of the statuses that have ended, for `NOT IN (...)`.
const ENDED: &str = "('completed', 'errored', 'terminated', 'failed', 'invalid')";

/// A deployment record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    /// Stable id (a UUID); the value of the `anycloud.dev/deployment-id` label.
    pub id: String,
    /// Its name: what people type, unique.
    pub name: String,
    /// A job or a service.
    pub kind: DeploymentKind,
    /// Its cluster.
    pub cluster_id: String,
    /// Where it stands.
    pub status: Status,
    /// What it runs.
    #[serde(flatten)]
    pub spec: Spec,
    /// Its attempt: 1, then one more per `resubmit`.
    pub attempt: i64,
    /// The Kubernetes namespace of its objects.
    pub namespace: String,
    /// The container's exit code, once it ended.
    pub exit_code: Option<i32>,
    /// Why it ended so, or what it waits for.
    pub reason: Option<String>,
    /// Its latest workflow run.
    pub workflow_id: Option<String>,
    /// When it was submitted (ms since the epoch).
    pub created_at: i64,
    /// When its current attempt's Pod started running.
    pub started_at: Option<i64>,
    /// When its current attempt ended.
    pub ended_at: Option<i64>,
    /// When the record last changed.
    pub updated_at: i64,
    /// A service: the port its app listens on (`PORT`), and its Kubernetes Service's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// A service: how many replicas the serving revision runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// A service: the revision that serves, or served last before it ended (its spec is this
    /// record's); none until its first revision is available, and none for one that never was.
    /// [`Deployment::serving_revision`] says whether it serves now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// A service: the ClusterIP its Kubernetes Service was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
}

/// What a deployment is: a job runs to its end, a service serves until it is terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeploymentKind {
    /// `anycloud job`: a Kubernetes Job, run to its end.
    Job,
    /// `anycloud service`: a Deployment behind a ClusterIP Service, with revisions.
    Service,
}

impl DeploymentKind {
    /// The stored and shown name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Job => "job",
            Self::Service => "service",
        }
    }

    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Job, Self::Service].into_iter().find(|kind| kind.as_str() == name)
    }
}

impl std::fmt::Display for DeploymentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Deployment {
    /// Whether it is a service.
    pub fn is_service(&self) -> bool {
        self.kind == DeploymentKind::Service
    }

    /// The resource key of its runs: one run at a time acts on a deployment.
    pub fn resource_key(id: &str) -> String {
        format!("deployment/{id}")
    }

    /// The revision that serves now: a service's recorded revision while it runs, upgrades or
    /// rolls back; none while it deploys or once it has ended (nothing serves then).
    pub fn serving_revision(&self) -> Option<i64> {
        serving_revision(self.kind, self.status, self.revision)
    }

    /// The name of its current attempt's Kubernetes Job.
    pub fn job_name(&self) -> String {
        job_name(&self.name, self.attempt)
    }
}

/// The revision that serves a deployment of `kind` in `status` whose recorded revision is
/// `revision`: a service's while it runs, upgrades or rolls back; none otherwise.
pub fn serving_revision(kind: DeploymentKind, status: Status, revision: Option<i64>) -> Option<i64> {
    let serves = matches!(status, Status::Running | Status::Upgrading | Status::RollingBack);
    revision.filter(|_| kind == DeploymentKind::Service && serves)
}

/// The Kubernetes Job of attempt `attempt` of the deployment `name`: `{name}-{attempt}`.
pub fn job_name(name: &str, attempt: i64) -> String {
    format!("{name}-{attempt}")
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    name: String,
    kind: String,
    cluster_id: Option<String>,
    status: String,
    image: String,
    command: String,
    env: String,
    cpus: Option<String>,
    memory: Option<String>,
    secrets: String,
    attempt: i64,
    namespace: String,
    exit_code: Option<i64>,
    reason: Option<String>,
    workflow_id: Option<String>,
    created_at: i64,
    started_at: Option<i64>,
    ended_at: Option<i64>,
    updated_at: i64,
    port: Option<i64>,
    replicas: Option<i64>,
    revision: Option<i64>,
    cluster_ip: Option<String>,
}

/// Every column of a [`Row`], in its order.
macro_rules! columns {
    () => {
        "id, name, kind, cluster_id, status, image, command, env, cpus, memory, secrets, attempt, namespace, \
         exit_code, reason, workflow_id, created_at, started_at, ended_at, updated_at, port, replicas, revision, \
         cluster_ip"
    };
}
const SELECT: &str = concat!("SELECT ", columns!(), " FROM deployments");

impl TryFrom<Row> for Deployment {
    type Error = sqlx::Error;

    fn try_from(row: Row) -> Result<Self, sqlx::Error> {
        let decode = |column: &str, err: String| sqlx::Error::ColumnDecode { index: column.into(), source: err.into() };
        Ok(Self {
            status: Status::try_from(row.status).map_err(|err| decode("status", err))?,
            spec: Spec {
                image: row.image,
                command: serde_json::from_str(&row.command).map_err(|err| decode("command", err.to_string()))?,
                env: serde_json::from_str(&row.env).map_err(|err| decode("env", err.to_string()))?,
                cpus: row.cpus,
                memory: row.memory,
                secrets: decode_uses(&row.secrets).map_err(|err| decode("secrets", err))?,
            },
            id: row.id,
            name: row.name,
            kind: DeploymentKind::parse(&row.kind)
                .ok_or_else(|| decode("kind", format!("unknown deployment kind `{}`", row.kind)))?,
            cluster_id: row.cluster_id.unwrap_or_default(),
            attempt: row.attempt,
            namespace: row.namespace,
            exit_code: row.exit_code.map(|code| code as i32),
            reason: row.reason,
            workflow_id: row.workflow_id,
            created_at: row.created_at,
            started_at: row.started_at,
            ended_at: row.ended_at,
            updated_at: row.updated_at,
            port: row.port,
            replicas: row.replicas,
            revision: row.revision,
            cluster_ip: row.cluster_ip,
        })
    }
}

fn decode_all(rows: Vec<Row>) -> Result<Vec<Deployment>, sqlx::Error> {
    rows.into_iter().map(Deployment::try_from).collect()
}

/// Deployments on the cluster that have not ended, read inside the caller's transaction.
pub async fn active_on_cluster_in(tx: &mut WriteTx, cluster_id: &str) -> Result<Vec<String>, sqlx::Error> {
    with_tx!(tx, |tx| {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT name FROM deployments WHERE cluster_id = $1 AND status NOT IN {ENDED} ORDER BY created_at"
        )))
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
    /// A job or a service.
    pub kind: DeploymentKind,
    /// What it runs.
    pub spec: &'a Spec,
    /// Its workflow run.
    pub workflow_id: &'a str,
}

/// The cluster `cluster_name` (a name or an id) with its row held like a delete holds it, when a
/// deployment may be placed on it: a cluster that is not ready, or whose delete was accepted, is
/// refused.
pub async fn hold_cluster_in(tx: &mut WriteTx, cluster_name: &str) -> Result<Cluster, PlacementRefused> {
    let cluster = clusters::lock_live_by_name_or_id_in(tx, cluster_name)
        .await?
        .ok_or_else(|| PlacementRefused::NoCluster(cluster_name.to_owned()))?;
    if cluster.phase != Phase::Ready || cluster.delete_requested_at.is_some() {
        return Err(PlacementRefused::NotReady {
            name: cluster.name,
            phase: cluster.phase,
            deleting: cluster.delete_requested_at.is_some(),
        });
    }
    Ok(cluster)
}

/// Records a deployment on a cluster inside the caller's transaction, holding the cluster's row
/// ([`hold_cluster_in`]); returns the cluster and the deployment as stored.
pub async fn add_in(
    tx: &mut WriteTx,
    cluster_name: &str,
    deployment: NewDeployment<'_>,
    now: i64,
) -> Result<(Cluster, Deployment), PlacementRefused> {
    let cluster = hold_cluster_in(tx, cluster_name).await?;
    let spec = deployment.spec;
    let command = serde_json::to_string(&spec.command).unwrap_or_else(|_| "[]".into());
    let env = serde_json::to_string(&spec.env).unwrap_or_else(|_| "[]".into());
    let sql = concat!(
        "INSERT INTO deployments (id, name, kind, cluster_id, status, image, command, env, cpus, memory, secrets, \
         attempt, workflow_id, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, 'queued', $5, $6, $7, $8, $9, $12, 1, $10, $11, $11) RETURNING ",
        columns!()
    );
    let row: Row = with_tx!(tx, |tx| {
        sqlx::query_as(sql)
            .bind(deployment.id)
            .bind(deployment.name)
            .bind(deployment.kind.as_str())
            .bind(&cluster.id)
            .bind(&spec.image)
            .bind(command)
            .bind(env)
            .bind(spec.cpus.as_deref())
            .bind(spec.memory.as_deref())
            .bind(deployment.workflow_id)
            .bind(now)
            .bind(encode_uses(&spec.secrets))
            .fetch_one(&mut **tx)
            .await
    })?;
    Ok((cluster, Deployment::try_from(row)?))
}

/// Whether a deployment has this name.
pub async fn name_taken_in(tx: &mut WriteTx, name: &str) -> Result<bool, sqlx::Error> {
    let found: Option<String> = with_tx!(tx, |tx| {
        sqlx::query_scalar("SELECT id FROM deployments WHERE name = $1").bind(name).fetch_optional(&mut **tx).await
    })?;
    Ok(found.is_some())
}

/// The deployment whose id or name is `key`.
pub async fn find(db: &Db, key: &str) -> Result<Option<Deployment>, sqlx::Error> {
    let row: Option<Row> = with_pool!(db.reader(), |pool| {
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE name = $1 OR id = $1 ORDER BY name = $1 DESC")))
            .bind(key)
            .fetch_optional(pool)
            .await
    })?;
    row.map(Deployment::try_from).transpose()
}

/// The deployment whose id or name is `key`, its row held for the caller's transaction
/// (PostgreSQL `FOR UPDATE`; SQLite's write transaction excludes every other writer).
pub async fn lock_in(tx: &mut WriteTx, key: &str) -> Result<Option<Deployment>, sqlx::Error> {
    let row: Option<Row> = match tx {
        WriteTx::Sqlite(tx) => {
            let sql = sqlx::AssertSqlSafe(format!("{SELECT} WHERE name = $1 OR id = $1 ORDER BY name = $1 DESC"));
            sqlx::query_as(sql).bind(key).fetch_optional(&mut **tx).await?
        }
        WriteTx::Postgres(tx) => {
            let sql = sqlx::AssertSqlSafe(format!(
                "{SELECT} WHERE name = $1 OR id = $1 ORDER BY name = $1 DESC LIMIT 1 FOR UPDATE"
            ));
            sqlx::query_as(sql).bind(key).fetch_optional(&mut **tx).await?
        }
    };
    row.map(Deployment::try_from).transpose()
}

/// The deployment with this id.
pub async fn get(db: &Db, id: &str) -> Result<Option<Deployment>, sqlx::Error> {
    let row: Option<Row> = with_pool!(db.reader(), |pool| {
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE id = $1"))).bind(id).fetch_optional(pool).await
    })?;
    row.map(Deployment::try_from).transpose()
}

/// Deployments, newest first, of one status and one kind when given, at most `limit`.
pub async fn list(
    db: &Db,
    status: Option<Status>,
    kind: Option<DeploymentKind>,
    limit: i64,
) -> Result<Vec<Deployment>, sqlx::Error> {
    // Only the filters asked for, so that each list walks its own index (`deployments_created`,
    // `deployments_status`, `deployments_kind`, `deployments_kind_status`) in order and stops at
    // `limit`: `($1 IS NULL OR status = $1)` would make SQLite walk every row for a status no
    // deployment has.
    let filters = [status.map(|_| "status = "), kind.map(|_| "kind = ")];
    let mut conditions = Vec::new();
    for (n, filter) in filters.into_iter().flatten().enumerate() {
        conditions.push(format!("{filter}${}", n + 1));
    }
    let filter = if conditions.is_empty() { String::new() } else { format!("WHERE {}", conditions.join(" AND ")) };
    let sql = format!("{SELECT} {filter} ORDER BY created_at DESC, id LIMIT ${}", conditions.len() + 1);
    let rows: Vec<Row> = with_pool!(db.reader(), |pool| {
        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()));
        if let Some(status) = status {
            query = query.bind(status.as_str());
        }
        if let Some(kind) = kind {
            query = query.bind(kind.as_str());
        }
        query.bind(limit).fetch_all(pool).await
    })?;
    decode_all(rows)
}

/// Moves a deployment of attempt `attempt` to `status`, unless it has ended or moved on to
/// another attempt (a late step of an old run changes nothing). Returns whether it changed.
pub async fn set_status(
    db: &Db,
    id: &str,
    attempt: i64,
    status: Status,
    reason: Option<&str>,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let started = (status == Status::Running).then_some(now);
    let changed = write_statement!(
        db,
        format!(
            "UPDATE deployments SET status = $1, reason = $2, started_at = COALESCE(started_at, $3), updated_at = $4 \
             WHERE id = $5 AND attempt = $6 AND status NOT IN {ENDED}"
        ),
        status.as_str(),
        reason,
        started,
        now,
        id,
        attempt
    )?;
    Ok(changed > 0)
}

/// Records when attempt `attempt` started running, unless that is known already.
pub async fn set_started(db: &Db, id: &str, attempt: i64, started_at: i64) -> Result<(), sqlx::Error> {
    write_statement!(
        db,
        "UPDATE deployments SET started_at = COALESCE(started_at, $1) WHERE id = $2 AND attempt = $3",
        started_at,
        id,
        attempt
    )?;
    Ok(())
}

/// Ends attempt `attempt` of a deployment with `status`, its exit code and reason, unless it has
/// already ended or moved on to another attempt. A service that ends while it deploys never
/// served: it keeps no serving revision. Returns whether it changed.
pub async fn end(
    db: &Db,
    id: &str,
    attempt: i64,
    status: Status,
    exit_code: Option<i32>,
    reason: Option<&str>,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let changed = write_statement!(
        db,
        format!(
            "UPDATE deployments SET status = $1, exit_code = $2, reason = $3, ended_at = $4, updated_at = $4, \
             revision = CASE WHEN status = 'deploying' THEN NULL ELSE revision END \
             WHERE id = $5 AND attempt = $6 AND status NOT IN {ENDED}"
        ),
        status.as_str(),
        exit_code.map(i64::from),
        reason,
        now,
        id,
        attempt
    )?;
    Ok(changed > 0)
}

/// Starts the next attempt of an ended deployment inside the caller's transaction: `queued`
/// again, the outcome cleared, `workflow_id` its new run, its secrets pinned anew.
pub async fn resubmit_in(
    tx: &mut WriteTx,
    id: &str,
    workflow_id: &str,
    secrets: &[SecretUse],
    now: i64,
) -> Result<(), sqlx::Error> {
    execute_in!(
        tx,
        "UPDATE deployments SET attempt = attempt + 1, status = 'queued', exit_code = NULL, reason = NULL, \
         started_at = NULL, ended_at = NULL, workflow_id = $1, updated_at = $2, secrets = $4 WHERE id = $3",
        workflow_id,
        now,
        id,
        encode_uses(secrets)
    )?;
    Ok(())
}

/// The shape of a service beyond its spec: its port, replicas and first progress deadline.
#[derive(Debug, Clone, Copy)]
pub struct ServiceShape {
    /// The port its app listens on.
    pub port: i64,
    /// How many replicas it runs.
    pub replicas: i64,
    /// How long a revision may take to become available, in seconds.
    pub progress_deadline_s: i64,
}

/// Records a service on a cluster inside the caller's transaction, holding the cluster's row
/// ([`hold_cluster_in`]): the deployment, `deploying` (no revision serves yet), and its revision 1.
pub async fn add_service_in(
    tx: &mut WriteTx,
    cluster_name: &str,
    deployment: NewDeployment<'_>,
    shape: ServiceShape,
    now: i64,
) -> Result<Cluster, PlacementRefused> {
    let cluster = hold_cluster_in(tx, cluster_name).await?;
    let spec = deployment.spec;
    let command = serde_json::to_string(&spec.command).unwrap_or_else(|_| "[]".into());
    let env = serde_json::to_string(&spec.env).unwrap_or_else(|_| "[]".into());
    execute_in!(
        tx,
        "INSERT INTO deployments (id, name, kind, cluster_id, status, image, command, env, cpus, memory, secrets, \
         attempt, workflow_id, created_at, updated_at, port, replicas) \
         VALUES ($1, $2, $3, $4, 'deploying', $5, $6, $7, $8, $9, $14, 1, $10, $11, $11, $12, $13)",
        deployment.id,
        deployment.name,
        DeploymentKind::Service.as_str(),
        &cluster.id,
        &spec.image,
        command,
        env,
        spec.cpus.as_deref(),
        spec.memory.as_deref(),
        deployment.workflow_id,
        now,
        shape.port,
        shape.replicas,
        encode_uses(&spec.secrets)
    )?;
    let first = super::revisions::Revision {
        number: 1,
        spec: spec.clone(),
        replicas: shape.replicas,
        progress_deadline_s: shape.progress_deadline_s,
        result: super::revisions::RevisionResult::Deploying,
        reason: None,
        workflow_id: Some(deployment.workflow_id.to_owned()),
        created_at: now,
        ended_at: None,
    };
    super::revisions::insert_in(tx, deployment.id, &first).await?;
    Ok(cluster)
}

/// Records the ClusterIP a service's Kubernetes Service was given.
pub async fn set_cluster_ip(db: &Db, id: &str, cluster_ip: &str) -> Result<(), sqlx::Error> {
    write_statement!(db, "UPDATE deployments SET cluster_ip = $1 WHERE id = $2", cluster_ip, id)?;
    Ok(())
}

/// Makes `revision` the one that serves: the record takes its spec and replicas, and is
/// `running` with `reason`, unless it has ended. Returns whether it changed.
pub async fn serve_revision(
    db: &Db,
    id: &str,
    revision: &super::revisions::Revision,
    reason: &str,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let spec = &revision.spec;
    let command = serde_json::to_string(&spec.command).unwrap_or_else(|_| "[]".into());
    let env = serde_json::to_string(&spec.env).unwrap_or_else(|_| "[]".into());
    let changed = write_statement!(
        db,
        format!(
            "UPDATE deployments SET status = 'running', reason = $1, image = $2, command = $3, env = $4, cpus = $5, \
             memory = $6, replicas = $7, revision = $8, started_at = COALESCE(started_at, $9), updated_at = $9, \
             secrets = $11 WHERE id = $10 AND status NOT IN {ENDED}"
        ),
        reason,
        &spec.image,
        command,
        env,
        spec.cpus.as_deref(),
        spec.memory.as_deref(),
        revision.replicas,
        revision.number,
        now,
        id,
        encode_uses(&spec.secrets)
    )?;
    Ok(changed > 0)
}

/// Sets the workflow a deployment's record follows (its latest run), inside the caller's
/// transaction.
pub async fn set_workflow_in(tx: &mut WriteTx, id: &str, workflow_id: &str, now: i64) -> Result<(), sqlx::Error> {
    execute_in!(tx, "UPDATE deployments SET workflow_id = $1, updated_at = $2 WHERE id = $3", workflow_id, now, id)?;
    Ok(())
}
