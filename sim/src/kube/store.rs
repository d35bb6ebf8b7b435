//! The simulated clusters' etcd: objects in SQL, in the database of the API that hosts them.
//! The only place the simulated Kubernetes's SQL lives.
//!
//! - `sim_kube_objects`: one row per object, keyed by cluster (its control plane's VM id),
//!   resource (`jobs`), namespace (`""` when cluster-scoped) and name; the object's JSON, its uid,
//!   its `resourceVersion` and the revisions that created and deleted it. A deleted object stays
//!   a while as a tombstone (`deleted_revision` set), so that a watch that starts from an older
//!   `resourceVersion` still sees it go.
//! - `sim_kube_revisions`: each cluster's last `resourceVersion`, which every write increments.
//! - `sim_kube_processes`: the local process of each started container (pid, and its start time
//!   in clock ticks, which tells it from a later process that reuses the pid).
//!
//! The tables are this crate's, created by `CREATE TABLE IF NOT EXISTS` when the store is first
//! used: they are the simulation's, not the domain's, so they stay out of the domain's
//! migrations. Writes are optimistic: an update names the `resourceVersion` it read, and
//! changes nothing if the object moved on.

use anycloud_engine::{Pool, execute, with_pool};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::resources::Resource;

const SCHEMA: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS sim_kube_objects (
        cluster TEXT NOT NULL,
        resource TEXT NOT NULL,
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        uid TEXT NOT NULL,
        resource_version BIGINT NOT NULL,
        created_revision BIGINT NOT NULL,
        deleted_revision BIGINT,
        deleted_at BIGINT,
        body TEXT NOT NULL,
        PRIMARY KEY (cluster, resource, namespace, name)
    )",
    "CREATE TABLE IF NOT EXISTS sim_kube_revisions (
        cluster TEXT PRIMARY KEY,
        revision BIGINT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS sim_kube_processes (
        pod_uid TEXT NOT NULL,
        container TEXT NOT NULL,
        pid BIGINT NOT NULL,
        start_ticks BIGINT NOT NULL,
        PRIMARY KEY (pod_uid, container)
    )",
];

/// How an object changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    /// It was created.
    Added,
    /// It was changed.
    Modified,
    /// It was deleted.
    Deleted,
}

/// One change to an object, for watches.
#[derive(Debug)]
pub(crate) struct Change {
    /// What happened.
    pub(crate) kind: ChangeKind,
    /// The revision at which it happened.
    pub(crate) revision: i64,
    /// The object after it (before it, for a deletion).
    pub(crate) object: Value,
}

/// A started container's process, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcessRecord {
    /// Its pid (also its process group's id).
    pub(crate) pid: i32,
    /// When it started, in clock ticks after boot (`/proc/{pid}/stat` field 22).
    pub(crate) start_ticks: u64,
}

/// The objects of every simulated cluster of one API.
pub(crate) struct Store {
    pool: Pool,
    schema: OnceCell<()>,
}

/// The `resourceVersion` an object carries.
pub(crate) fn resource_version(object: &Value) -> i64 {
    object["metadata"]["resourceVersion"].as_str().and_then(|rv| rv.parse().ok()).unwrap_or(0)
}

fn namespace_of(resource: &Resource, namespace: &str) -> String {
    if resource.namespaced { namespace.to_owned() } else { String::new() }
}

fn parse(bodies: Vec<String>) -> Result<Vec<Value>, sqlx::Error> {
    bodies.iter().map(|body| serde_json::from_str(body).map_err(|err| sqlx::Error::Decode(Box::new(err)))).collect()
}

impl Store {
    pub(crate) fn new(pool: Pool) -> Self {
        Self { pool, schema: OnceCell::new() }
    }

    async fn ready(&self) -> Result<&Pool, sqlx::Error> {
        self.schema
            .get_or_try_init(|| async {
                for statement in SCHEMA {
                    execute!(&self.pool, statement)?;
                }
                Ok::<(), sqlx::Error>(())
            })
            .await?;
        Ok(&self.pool)
    }

    /// The cluster's last `resourceVersion` (0 before its first write).
    pub(crate) async fn revision(&self, cluster: &str) -> Result<i64, sqlx::Error> {
        let pool = self.ready().await?;
        let revision: Option<i64> = with_pool!(pool, |pool| {
            sqlx::query_scalar("SELECT revision FROM sim_kube_revisions WHERE cluster = $1")
                .bind(cluster)
                .fetch_optional(pool)
                .await
        })?;
        Ok(revision.unwrap_or(0))
    }

    /// Takes the next `resourceVersion` of the cluster.
    async fn next_revision(&self, cluster: &str) -> Result<i64, sqlx::Error> {
        let pool = self.ready().await?;
        with_pool!(pool, |pool| {
            sqlx::query_scalar(
                "INSERT INTO sim_kube_revisions (cluster, revision) VALUES ($1, 1) \
                 ON CONFLICT (cluster) DO UPDATE SET revision = sim_kube_revisions.revision + 1 RETURNING revision",
            )
            .bind(cluster)
            .fetch_one(pool)
            .await
        })
    }

    /// One object.
    pub(crate) async fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, sqlx::Error> {
        let pool = self.ready().await?;
        let body: Option<String> = with_pool!(pool, |pool| {
            sqlx::query_scalar(
                "SELECT body FROM sim_kube_objects WHERE cluster = $1 AND resource = $2 AND namespace = $3 AND name = $4 \
                 AND deleted_revision IS NULL",
            )
            .bind(cluster)
            .bind(resource.plural)
            .bind(namespace_of(resource, namespace))
            .bind(name)
            .fetch_optional(pool)
            .await
        })?;
        Ok(parse(body.into_iter().collect())?.pop())
    }

    /// The objects of a resource in one namespace, or in all (`None`), by namespace and name.
    pub(crate) async fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, sqlx::Error> {
        let pool = self.ready().await?;
        let bodies: Vec<String> = with_pool!(pool, |pool| {
            sqlx::query_scalar(
                "SELECT body FROM sim_kube_objects WHERE cluster = $1 AND resource = $2 \
                 AND ($3 = '*' OR namespace = $3) AND deleted_revision IS NULL ORDER BY namespace, name",
            )
            .bind(cluster)
            .bind(resource.plural)
            .bind(namespace.unwrap_or("*"))
            .fetch_all(pool)
            .await
        })?;
        parse(bodies)
    }

    /// Stores a new object, giving it its `resourceVersion`; `None` if the name is taken.
    pub(crate) async fn create(
        &self,
        cluster: &str,
        resource: &Resource,
        mut object: Value,
    ) -> Result<Option<Value>, sqlx::Error> {
        let revision = self.next_revision(cluster).await?;
        object["metadata"]["resourceVersion"] = Value::String(revision.to_string());
        let metadata = &object["metadata"];
        let namespace = namespace_of(resource, metadata["namespace"].as_str().unwrap_or_default());
        let created = execute!(
            self.ready().await?,
            "INSERT INTO sim_kube_objects (cluster, resource, namespace, name, uid, resource_version, created_revision, \
             body) VALUES ($1, $2, $3, $4, $5, $6, $6, $7) ON CONFLICT (cluster, resource, namespace, name) \
             DO UPDATE SET uid = excluded.uid, resource_version = excluded.resource_version, \
             created_revision = excluded.created_revision, deleted_revision = NULL, deleted_at = NULL, \
             body = excluded.body WHERE sim_kube_objects.deleted_revision IS NOT NULL",
            cluster,
            resource.plural,
            namespace,
            metadata["name"].as_str().unwrap_or_default(),
            metadata["uid"].as_str().unwrap_or_default(),
            revision,
            object.to_string()
        )?;
        Ok((created == 1).then_some(object))
    }

    /// Replaces an object that still has the `resourceVersion` it carries; `None` if it moved on
    /// (or is gone).
    pub(crate) async fn update(
        &self,
        cluster: &str,
        resource: &Resource,
        mut object: Value,
    ) -> Result<Option<Value>, sqlx::Error> {
        let read = resource_version(&object);
        let revision = self.next_revision(cluster).await?;
        object["metadata"]["resourceVersion"] = Value::String(revision.to_string());
        let metadata = &object["metadata"];
        let updated = execute!(
            self.ready().await?,
            "UPDATE sim_kube_objects SET resource_version = $1, body = $2 \
             WHERE cluster = $3 AND resource = $4 AND namespace = $5 AND name = $6 AND resource_version = $7 \
             AND deleted_revision IS NULL",
            revision,
            object.to_string(),
            cluster,
            resource.plural,
            namespace_of(resource, metadata["namespace"].as_str().unwrap_or_default()),
            metadata["name"].as_str().unwrap_or_default(),
            read
        )?;
        Ok((updated == 1).then_some(object))
    }

    /// Removes an object that still has the `resourceVersion` it carries, leaving its tombstone;
    /// false if it moved on.
    pub(crate) async fn remove(&self, cluster: &str, resource: &Resource, object: &Value) -> Result<bool, sqlx::Error> {
        let revision = self.next_revision(cluster).await?;
        let metadata = &object["metadata"];
        let removed = execute!(
            self.ready().await?,
            "UPDATE sim_kube_objects SET deleted_revision = $1, deleted_at = $2 \
             WHERE cluster = $3 AND resource = $4 AND namespace = $5 AND name = $6 AND resource_version = $7 \
             AND deleted_revision IS NULL",
            revision,
            anycloud_workflows::now_ms(),
            cluster,
            resource.plural,
            namespace_of(resource, metadata["namespace"].as_str().unwrap_or_default()),
            metadata["name"].as_str().unwrap_or_default(),
            resource_version(object)
        )?;
        Ok(removed == 1)
    }

    /// What changed after revision `since`, in the order it happened: objects created, changed
    /// or deleted (with their last state) since then.
    pub(crate) async fn changes(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        since: i64,
    ) -> Result<Vec<Change>, sqlx::Error> {
        let pool = self.ready().await?;
        let rows: Vec<(String, i64, i64, Option<i64>)> = with_pool!(pool, |pool| {
            sqlx::query_as(
                "SELECT body, resource_version, created_revision, deleted_revision FROM sim_kube_objects \
                 WHERE cluster = $1 AND resource = $2 AND ($3 = '*' OR namespace = $3) \
                 AND (resource_version > $4 OR deleted_revision > $4) \
                 ORDER BY COALESCE(deleted_revision, resource_version)",
            )
            .bind(cluster)
            .bind(resource.plural)
            .bind(namespace.unwrap_or("*"))
            .bind(since)
            .fetch_all(pool)
            .await
        })?;
        let mut changes = Vec::new();
        for (body, revision, created, deleted) in rows {
            let object = serde_json::from_str(&body).map_err(|err| sqlx::Error::Decode(Box::new(err)))?;
            changes.push(match deleted {
                Some(deleted) => Change { kind: ChangeKind::Deleted, revision: deleted, object },
                None if created > since => Change { kind: ChangeKind::Added, revision, object },
                None => Change { kind: ChangeKind::Modified, revision, object },
            });
        }
        Ok(changes)
    }

    /// Forgets tombstones older than `before` (milliseconds since the epoch).
    pub(crate) async fn purge_tombstones(&self, before: i64) -> Result<(), sqlx::Error> {
        execute!(self.ready().await?, "DELETE FROM sim_kube_objects WHERE deleted_at < $1", before)?;
        Ok(())
    }

    /// The clusters that have Jobs, Pods or namespaces being deleted, for the reconcile loop.
    pub(crate) async fn busy_clusters(&self) -> Result<Vec<String>, sqlx::Error> {
        let pool = self.ready().await?;
        with_pool!(pool, |pool| {
            sqlx::query_scalar(
                "SELECT DISTINCT cluster FROM sim_kube_objects WHERE resource IN ('jobs', 'pods', 'namespaces') \
                 AND deleted_revision IS NULL AND (resource <> 'namespaces' OR body LIKE '%deletionTimestamp%') \
                 ORDER BY cluster",
            )
            .fetch_all(pool)
            .await
        })
    }

    /// The recorded process of a container, if it was started.
    pub(crate) async fn process(&self, pod_uid: &str, container: &str) -> Result<Option<ProcessRecord>, sqlx::Error> {
        let pool = self.ready().await?;
        let row: Option<(i64, i64)> = with_pool!(pool, |pool| {
            sqlx::query_as("SELECT pid, start_ticks FROM sim_kube_processes WHERE pod_uid = $1 AND container = $2")
                .bind(pod_uid)
                .bind(container)
                .fetch_optional(pool)
                .await
        })?;
        Ok(row.map(|(pid, start_ticks)| ProcessRecord { pid: pid as i32, start_ticks: start_ticks as u64 }))
    }

    /// Records a container's process.
    pub(crate) async fn record_process(
        &self,
        pod_uid: &str,
        container: &str,
        process: ProcessRecord,
    ) -> Result<(), sqlx::Error> {
        execute!(
            self.ready().await?,
            "INSERT INTO sim_kube_processes (pod_uid, container, pid, start_ticks) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (pod_uid, container) DO UPDATE SET pid = $3, start_ticks = $4",
            pod_uid,
            container,
            i64::from(process.pid),
            process.start_ticks as i64
        )?;
        Ok(())
    }

    /// Forgets the processes of a removed Pod.
    pub(crate) async fn forget_processes(&self, pod_uid: &str) -> Result<(), sqlx::Error> {
        execute!(self.ready().await?, "DELETE FROM sim_kube_processes WHERE pod_uid = $1", pod_uid)?;
        Ok(())
    }
}
