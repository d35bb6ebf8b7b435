//! The simulated clusters' etcd: objects in SQL, in the database of the API that hosts them.
//! The only place the simulated Kubernetes's SQL lives.
//!
//! - `sim_kube_objects`: one row per object, keyed by cluster (its control plane's VM id),
//!   resource (`jobs`), namespace (`""` when cluster-scoped) and name; the object's JSON, its uid,
//!   its `resourceVersion` and the revisions that created and deleted it. A deleted object stays
//!   a while as a tombstone (`deleted_revision` set), so that a watch that starts from an older
//!   `resourceVersion` still sees it go. Four columns are derived from the body at each write, so
//!   that reads need not parse every object: `labels` (see [`label_text`]), `owner` (the uid of
//!   its controller), `owners` (the uids of all its owners, for the garbage collector) and `settled` (1 when the control loop has nothing left to do with it, see
//!   [`settled`]). With a thousand finished Jobs and their Pods, a pass of the loop and a list by
//!   label read only what they need: indexes test the labels in a namespace, the subject of an
//!   Event and the revisions a watch asks after, each in the index rather than in the object's row
//!   (a Pod's row is a page of JSON).
//! - `sim_kube_revisions`: each cluster's last `resourceVersion`, which every write increments.
//! - `sim_kube_processes`: the local process of each started container (pid, and its start time
//!   in clock ticks, which tells it from a later process that reuses the pid).
//!
//! The tables are this crate's, created by `CREATE TABLE IF NOT EXISTS` when the store is first
//! used: they are the simulation's, not the domain's, so they stay out of the domain's
//! migrations. Writes are optimistic: an update names the `resourceVersion` it read, and
//! changes nothing if the object moved on.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use anycloud_engine::{Pool, execute, with_pool};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::label_index;
use super::resources::Resource;

const SCHEMA: [&str; 10] = [
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
        labels TEXT NOT NULL DEFAULT '',
        owner TEXT NOT NULL DEFAULT '',
        settled BIGINT NOT NULL DEFAULT 0,
        owners TEXT NOT NULL DEFAULT '',
        subject TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (cluster, resource, namespace, name)
    )",
    "CREATE INDEX IF NOT EXISTS sim_kube_objects_settled ON sim_kube_objects (cluster, resource, settled)",
    "CREATE INDEX IF NOT EXISTS sim_kube_objects_owner ON sim_kube_objects (cluster, resource, owner)",
    // A list by label tests each object's labels in this index, not in its row (a Pod's row is a
    // page of JSON): a job's check lists one Pod among a thousand.
    "CREATE INDEX IF NOT EXISTS sim_kube_objects_labels ON sim_kube_objects (cluster, resource, namespace, labels) \
     WHERE deleted_revision IS NULL",
    // The Events of one object (`fieldSelector=involvedObject.name=...`).
    "CREATE INDEX IF NOT EXISTS sim_kube_objects_subject ON sim_kube_objects (cluster, resource, subject, namespace)",
    // A watch's changes since a revision: objects written after it, and objects deleted after it.
    "CREATE INDEX IF NOT EXISTS sim_kube_objects_written ON sim_kube_objects (cluster, resource, resource_version)",
    // Tombstones only: a read of the live objects (`deleted_revision IS NULL`) cannot take it.
    "CREATE INDEX IF NOT EXISTS sim_kube_objects_deleted ON sim_kube_objects (cluster, resource, deleted_revision) \
     WHERE deleted_revision IS NOT NULL",
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
    // Deployments and Services stored before the loop drove them were written settled.
    "UPDATE sim_kube_objects SET settled = 0 WHERE resource IN ('deployments', 'services') AND settled = 1",
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

/// Columns that an earlier version of the table lacked, added (and filled) on first use:
/// (column, its definition).
const DERIVED: [(&str, &str); 5] = [
    ("labels", "TEXT NOT NULL DEFAULT ''"),
    ("owner", "TEXT NOT NULL DEFAULT ''"),
    ("settled", "BIGINT NOT NULL DEFAULT 0"),
    ("owners", "TEXT NOT NULL DEFAULT ''"),
    ("subject", "TEXT NOT NULL DEFAULT ''"),
];

/// An object that has owners, as the garbage collector first reads it.
#[derive(Debug, Clone)]
pub(crate) struct Dependent {
    /// Its cluster.
    pub(crate) cluster: String,
    /// Its resource (`secrets`).
    pub(crate) resource: String,
    /// Its namespace (`""` when cluster-scoped).
    pub(crate) namespace: String,
    /// Its name.
    pub(crate) name: String,
    /// The uids of its owners.
    pub(crate) owners: Vec<String>,
}

/// The objects of every simulated cluster of one API.
pub(crate) struct Store {
    pool: Pool,
    /// Reads outside a write go here (the readers of [`super::Storage`]): on SQLite they do not
    /// queue behind the objects' one writer.
    reader: Pool,
    schema: OnceCell<()>,
    /// Recorded processes, by `{pod uid}/{container}`: a record never changes once written, and
    /// the kubelet asks for every running container's on every pass.
    processes: Mutex<HashMap<String, ProcessRecord>>,
    /// How many objects this store has removed: the garbage collector looks for orphans when it
    /// moves.
    removals: AtomicU64,
}

/// The labels of an object as the `labels` column holds them: each `key=value` between two
/// newlines, in key order, so that `LIKE` finds a set of equalities in one pattern (a prefilter:
/// the selector itself decides).
pub(crate) fn label_text(object: &Value) -> String {
    let mut labels: Vec<(&String, &Value)> =
        object["metadata"]["labels"].as_object().map(|labels| labels.iter().collect()).unwrap_or_default();
    labels.sort_by(|a, b| a.0.cmp(b.0));
    labels.iter().map(|(key, value)| format!("\n{key}={}\n", value.as_str().unwrap_or_default())).collect()
}

/// The `LIKE` pattern that every object whose labels include `equalities` matches.
fn label_pattern(equalities: &[(&str, &str)]) -> String {
    let mut sorted = equalities.to_vec();
    sorted.sort();
    let mut pattern = String::from("%");
    for (key, value) in sorted {
        pattern.push_str(&format!("\n{key}={value}\n%"));
    }
    pattern
}

/// A list by label ([`Store::list_labelled`]): only the filters given, and no `ORDER BY`, so that
/// SQLite walks the index that tests them rather than the key's, which orders the rows but tests
/// nothing (the caller sorts them). Given a label to look up (`by_label`), the objects are found
/// by it in the label index ([`label_index`], which SQLite reads first: `CROSS JOIN`); otherwise
/// the Events of one subject walk `sim_kube_objects_subject`, and a namespace's objects
/// `sim_kube_objects_labels`.
/// Parameters: cluster, resource, label pattern, then the subject, the namespace and the label
/// to look up, each if given.
fn labelled_sql(subject: bool, namespace: bool, by_label: bool) -> String {
    let mut sql = String::from("SELECT o.namespace, o.name, o.body FROM ");
    if by_label {
        sql.push_str(
            "sim_kube_labels l CROSS JOIN sim_kube_objects o WHERE l.cluster = $1 AND l.resource = $2 \
             AND o.cluster = l.cluster AND o.resource = l.resource AND o.namespace = l.namespace AND o.name = l.name AND",
        );
    } else {
        sql.push_str("sim_kube_objects o WHERE");
    }
    sql.push_str(" o.cluster = $1 AND o.resource = $2 AND o.labels LIKE $3 AND o.deleted_revision IS NULL");
    let mut next = 4;
    for (given, test) in [(subject, "o.subject"), (namespace, "o.namespace"), (by_label, "l.label")] {
        if given {
            sql.push_str(&format!(" AND {test} = ${next}"));
            next += 1;
        }
    }
    sql
}

/// A watch's changes after a revision ([`Store::changes`]); each side of the `OR` walks its own
/// index (`sim_kube_objects_written`, `sim_kube_objects_deleted`), so that a watch's poll reads
/// what changed, not every object of the resource.
const CHANGES: &str = "SELECT body, resource_version, created_revision, deleted_revision FROM sim_kube_objects \
     WHERE cluster = $1 AND resource = $2 AND (resource_version > $4 OR deleted_revision > $4) \
     AND ($3 = '*' OR namespace = $3) \
     ORDER BY COALESCE(deleted_revision, resource_version)";

/// What an Event is about (its `involvedObject.name`), as the `subject` column holds it: a
/// `fieldSelector` on it (what `kubectl describe` and a Pod's wait ask) then reads the Events of
/// one object, not every Event of the namespace. `""` for every other object.
fn subject_of(object: &Value) -> &str {
    object["involvedObject"]["name"].as_str().unwrap_or_default()
}

/// The object's controller: its `ownerReferences` entry with `controller: true`.
pub(crate) fn controller(object: &Value) -> Option<&Value> {
    object["metadata"]["ownerReferences"].as_array()?.iter().find(|owner| owner["controller"] == true)
}

/// The uid of the object's controller (`""` without one), as the `owner` column holds it.
fn owner_of(object: &Value) -> String {
    controller(object).and_then(|owner| owner["uid"].as_str()).unwrap_or_default().to_owned()
}

/// The uids of every owner of the object, each between two newlines, as the `owners` column
/// holds them (`""` without one).
fn owners_text(object: &Value) -> String {
    owner_uids(object).iter().map(|uid| format!("\n{uid}\n")).collect()
}

/// The uids of every owner of the object (its `ownerReferences`).
pub(crate) fn owner_uids(object: &Value) -> Vec<String> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|owner| owner["uid"].as_str().map(str::to_owned))
        .collect()
}

/// Whether the control loop has nothing left to do with the object: not being deleted, and a
/// Pod that has ended, a Job that is finished, or any object of a kind the loop does not drive.
/// Deployments, ReplicaSets and Services are never settled while they exist (the loop keeps
/// checking their replicas' health and their endpoints), nor are the Pods of a ReplicaSet (their
/// containers restart).
pub(crate) fn settled(resource: &Resource, object: &Value) -> bool {
    if !object["metadata"]["deletionTimestamp"].is_null() {
        return false;
    }
    match resource.plural {
        "deployments" | "replicasets" | "services" => false,
        "pods" if controller(object).is_some_and(|owner| owner["kind"] == "ReplicaSet") => false,
        "pods" => matches!(object["status"]["phase"].as_str(), Some("Succeeded" | "Failed")),
        "jobs" => object["status"]["conditions"].as_array().is_some_and(|conditions| {
            conditions.iter().any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
        }),
        _ => true,
    }
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
    pub(crate) fn new(pool: Pool, reader: Pool) -> Self {
        Self {
            pool,
            reader,
            schema: OnceCell::new(),
            processes: Mutex::new(HashMap::new()),
            removals: AtomicU64::new(0),
        }
    }

    /// The pool to read from, once the tables are there.
    async fn reading(&self) -> Result<&Pool, sqlx::Error> {
        self.ready().await?;
        Ok(&self.reader)
    }

    async fn ready(&self) -> Result<&Pool, sqlx::Error> {
        self.schema
            .get_or_try_init(|| async {
                execute!(&self.pool, SCHEMA[0])?;
                self.add_derived_columns().await?;
                for statement in &SCHEMA[1..] {
                    execute!(&self.pool, *statement)?;
                }
                label_index::create(&self.pool).await?;
                Ok::<(), sqlx::Error>(())
            })
            .await?;
        Ok(&self.pool)
    }

    /// A table made by an earlier version lacks some derived columns: adds them, and fills every
    /// derived column of every row.
    async fn add_derived_columns(&self) -> Result<(), sqlx::Error> {
        let pool = &self.pool;
        let mut added = false;
        for (column, definition) in DERIVED {
            let probe: Result<Option<String>, sqlx::Error> = with_pool!(pool, |pool| {
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT CAST({column} AS TEXT) FROM sim_kube_objects WHERE 1 = 0"
                )))
                .fetch_optional(pool)
                .await
            });
            if probe.is_err() {
                execute!(
                    pool,
                    sqlx::AssertSqlSafe(format!("ALTER TABLE sim_kube_objects ADD COLUMN {column} {definition}"))
                )?;
                added = true;
            }
        }
        if !added {
            return Ok(());
        }
        let rows: Vec<(String, String, String, String, String)> = with_pool!(pool, |pool| {
            sqlx::query_as("SELECT cluster, resource, namespace, name, body FROM sim_kube_objects")
                .fetch_all(pool)
                .await
        })?;
        for (cluster, plural, namespace, name, body) in rows {
            let object: Value = serde_json::from_str(&body).map_err(|err| sqlx::Error::Decode(Box::new(err)))?;
            let settled = super::resources::ALL
                .into_iter()
                .find(|resource| resource.plural == plural)
                .is_some_and(|resource| settled(resource, &object));
            execute!(
                pool,
                "UPDATE sim_kube_objects SET labels = $1, owner = $2, settled = $3, owners = $8, subject = $9 \
                 WHERE cluster = $4 AND resource = $5 AND namespace = $6 AND name = $7",
                label_text(&object),
                owner_of(&object),
                i64::from(settled),
                cluster,
                plural,
                namespace,
                name,
                owners_text(&object),
                subject_of(&object)
            )?;
        }
        Ok(())
    }

    /// The cluster's last `resourceVersion` (0 before its first write).
    pub(crate) async fn revision(&self, cluster: &str) -> Result<i64, sqlx::Error> {
        let pool = self.reading().await?;
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
        let pool = self.reading().await?;
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
        self.list_labelled(cluster, resource, namespace, &[], None).await
    }

    /// Like [`Store::list`], without most of the objects whose labels lack `equalities`, and,
    /// given a `subject`, without the Events about another object (the caller's selector decides
    /// on the rest).
    pub(crate) async fn list_labelled(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        equalities: &[(&str, &str)],
        subject: Option<&str>,
    ) -> Result<Vec<Value>, sqlx::Error> {
        let pool = self.reading().await?;
        let lookup = label_index::lookup(equalities);
        let sql = labelled_sql(subject.is_some(), namespace.is_some(), lookup.is_some());
        let mut rows: Vec<(String, String, String)> = with_pool!(pool, |pool| {
            let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                .bind(cluster)
                .bind(resource.plural)
                .bind(label_pattern(equalities));
            if let Some(subject) = subject {
                query = query.bind(subject);
            }
            if let Some(namespace) = namespace {
                query = query.bind(namespace);
            }
            if let Some(label) = &lookup {
                query = query.bind(label);
            }
            query.fetch_all(pool).await
        })?;
        rows.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        parse(rows.into_iter().map(|(_, _, body)| body).collect())
    }

    /// The objects of a resource that the control loop still drives (not [`settled`]).
    pub(crate) async fn unsettled(&self, cluster: &str, resource: &Resource) -> Result<Vec<Value>, sqlx::Error> {
        let pool = self.reading().await?;
        let bodies: Vec<String> = with_pool!(pool, |pool| {
            sqlx::query_scalar(
                "SELECT body FROM sim_kube_objects WHERE cluster = $1 AND resource = $2 AND settled = 0 \
                 AND deleted_revision IS NULL ORDER BY namespace, name",
            )
            .bind(cluster)
            .bind(resource.plural)
            .fetch_all(pool)
            .await
        })?;
        parse(bodies)
    }

    /// The objects of `resource` whose controller has the uid `owner`.
    pub(crate) async fn owned(
        &self,
        cluster: &str,
        resource: &Resource,
        owner: &str,
    ) -> Result<Vec<Value>, sqlx::Error> {
        let pool = self.reading().await?;
        let bodies: Vec<String> = with_pool!(pool, |pool| {
            sqlx::query_scalar(
                "SELECT body FROM sim_kube_objects WHERE cluster = $1 AND resource = $2 AND owner = $3 \
                 AND deleted_revision IS NULL ORDER BY namespace, name",
            )
            .bind(cluster)
            .bind(resource.plural)
            .bind(owner)
            .fetch_all(pool)
            .await
        })?;
        parse(bodies)
    }

    /// The objects of `resource` whose controller is an unsettled object of `owners` (a Pod of a
    /// running Job, ended or not).
    pub(crate) async fn owned_by_unsettled(
        &self,
        cluster: &str,
        resource: &Resource,
        owners: &Resource,
    ) -> Result<Vec<Value>, sqlx::Error> {
        let pool = self.reading().await?;
        let bodies: Vec<String> = with_pool!(pool, |pool| {
            sqlx::query_scalar(
                "SELECT body FROM sim_kube_objects WHERE cluster = $1 AND resource = $2 AND deleted_revision IS NULL \
                 AND owner IN (SELECT uid FROM sim_kube_objects WHERE cluster = $1 AND resource = $3 \
                 AND settled = 0 AND deleted_revision IS NULL) ORDER BY namespace, name",
            )
            .bind(cluster)
            .bind(resource.plural)
            .bind(owners.plural)
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
        let name = metadata["name"].as_str().unwrap_or_default();
        let key = label_index::Key { cluster, resource: resource.plural, namespace: &namespace, name };
        let pool = self.ready().await?;
        label_index::record(pool, &key, &object).await?;
        let created = execute!(
            pool,
            "INSERT INTO sim_kube_objects (cluster, resource, namespace, name, uid, resource_version, created_revision, \
             body, labels, owner, settled, owners, subject) VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (cluster, resource, namespace, name) \
             DO UPDATE SET uid = excluded.uid, resource_version = excluded.resource_version, \
             created_revision = excluded.created_revision, deleted_revision = NULL, deleted_at = NULL, \
             body = excluded.body, labels = excluded.labels, owner = excluded.owner, settled = excluded.settled, \
             owners = excluded.owners, subject = excluded.subject \
             WHERE sim_kube_objects.deleted_revision IS NOT NULL",
            cluster,
            resource.plural,
            &namespace,
            name,
            metadata["uid"].as_str().unwrap_or_default(),
            revision,
            object.to_string(),
            label_text(&object),
            owner_of(&object),
            i64::from(settled(resource, &object)),
            owners_text(&object),
            subject_of(&object)
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
        let namespace = namespace_of(resource, metadata["namespace"].as_str().unwrap_or_default());
        let name = metadata["name"].as_str().unwrap_or_default();
        let key = label_index::Key { cluster, resource: resource.plural, namespace: &namespace, name };
        let pool = self.ready().await?;
        label_index::record(pool, &key, &object).await?;
        let updated = execute!(
            pool,
            "UPDATE sim_kube_objects SET resource_version = $1, body = $2, labels = $8, owner = $9, settled = $10, \
             owners = $11, subject = $12 \
             WHERE cluster = $3 AND resource = $4 AND namespace = $5 AND name = $6 AND resource_version = $7 \
             AND deleted_revision IS NULL",
            revision,
            object.to_string(),
            cluster,
            resource.plural,
            &namespace,
            name,
            read,
            label_text(&object),
            owner_of(&object),
            i64::from(settled(resource, &object)),
            owners_text(&object),
            subject_of(&object)
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
        if removed == 1 {
            self.removals.fetch_add(1, Ordering::Relaxed);
        }
        Ok(removed == 1)
    }

    /// How many objects this store has removed since it was made.
    pub(crate) fn removals(&self) -> u64 {
        self.removals.load(Ordering::Relaxed)
    }

    /// Every object, of every cluster, that has owners.
    pub(crate) async fn dependents(&self) -> Result<Vec<Dependent>, sqlx::Error> {
        let pool = self.reading().await?;
        let rows: Vec<(String, String, String, String, String)> = with_pool!(pool, |pool| {
            sqlx::query_as(
                "SELECT cluster, resource, namespace, name, owners FROM sim_kube_objects \
                 WHERE owners <> '' AND deleted_revision IS NULL ORDER BY cluster",
            )
            .fetch_all(pool)
            .await
        })?;
        Ok(rows
            .into_iter()
            .map(|(cluster, resource, namespace, name, owners)| Dependent {
                cluster,
                resource,
                namespace,
                name,
                owners: owners.split('\n').filter(|uid| !uid.is_empty()).map(str::to_owned).collect(),
            })
            .collect())
    }

    /// The uids of every object of the cluster.
    pub(crate) async fn live_uids(&self, cluster: &str) -> Result<HashSet<String>, sqlx::Error> {
        let pool = self.reading().await?;
        let uids: Vec<String> = with_pool!(pool, |pool| {
            sqlx::query_scalar("SELECT uid FROM sim_kube_objects WHERE cluster = $1 AND deleted_revision IS NULL")
                .bind(cluster)
                .fetch_all(pool)
                .await
        })?;
        Ok(uids.into_iter().collect())
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
        let pool = self.reading().await?;
        let rows: Vec<(String, i64, i64, Option<i64>)> = with_pool!(pool, |pool| {
            sqlx::query_as(CHANGES)
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
        let pool = self.ready().await?;
        execute!(pool, "DELETE FROM sim_kube_objects WHERE deleted_at < $1", before)?;
        label_index::forget_removed(pool, before).await
    }

    /// The clusters that have objects the control loop still drives (see [`settled`]).
    pub(crate) async fn busy_clusters(&self) -> Result<Vec<String>, sqlx::Error> {
        let pool = self.reading().await?;
        with_pool!(pool, |pool| {
            sqlx::query_scalar(
                "SELECT DISTINCT cluster FROM sim_kube_objects WHERE settled = 0 AND deleted_revision IS NULL \
                 ORDER BY cluster",
            )
            .fetch_all(pool)
            .await
        })
    }

    /// The recorded process of a container, if it was started.
    pub(crate) async fn process(&self, pod_uid: &str, container: &str) -> Result<Option<ProcessRecord>, sqlx::Error> {
        let key = format!("{pod_uid}/{container}");
        if let Some(record) = self.processes.lock().ok().and_then(|known| known.get(&key).copied()) {
            return Ok(Some(record));
        }
        let pool = self.reading().await?;
        let row: Option<(i64, i64)> = with_pool!(pool, |pool| {
            sqlx::query_as("SELECT pid, start_ticks FROM sim_kube_processes WHERE pod_uid = $1 AND container = $2")
                .bind(pod_uid)
                .bind(container)
                .fetch_optional(pool)
                .await
        })?;
        let record = row.map(|(pid, start_ticks)| ProcessRecord { pid: pid as i32, start_ticks: start_ticks as u64 });
        if let (Some(record), Ok(mut known)) = (record, self.processes.lock()) {
            known.insert(key, record);
        }
        Ok(record)
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
        if let Ok(mut known) = self.processes.lock() {
            known.insert(format!("{pod_uid}/{container}"), process);
        }
        Ok(())
    }

    /// Forgets the processes of a removed Pod.
    pub(crate) async fn forget_processes(&self, pod_uid: &str) -> Result<(), sqlx::Error> {
        execute!(self.ready().await?, "DELETE FROM sim_kube_processes WHERE pod_uid = $1", pod_uid)?;
        if let Ok(mut known) = self.processes.lock() {
            known.retain(|key, _| !key.starts_with(&format!("{pod_uid}/")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::kube::resources::{EVENTS, JOBS, PODS};

    async fn store() -> (tempfile::TempDir, Pool) {
        let dir = tempfile::tempdir().unwrap();
        let store = anycloud_engine::Store::sqlite(&dir.path().join("kube.db")).await.unwrap();
        (dir, store.pool().clone())
    }

    fn pod(name: &str, labels: Value, phase: &str) -> Value {
        json!({ "metadata": { "name": name, "namespace": "ns", "uid": name, "labels": labels },
                "status": { "phase": phase } })
    }

    #[tokio::test]
    async fn lists_by_label_and_the_loop_sees_only_what_may_change() {
        let (_dir, pool) = store().await;
        let store = Store::new(pool.clone(), pool);
        store.create("c", &PODS, pod("a", json!({ "app": "web", "tier": "x" }), "Running")).await.unwrap();
        store.create("c", &PODS, pod("b", json!({ "app": "web" }), "Succeeded")).await.unwrap();
        store.create("c", &PODS, pod("c", json!({ "app": "WEB" }), "Running")).await.unwrap();
        let names = |objects: Vec<Value>| -> Vec<String> {
            objects.iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_owned()).collect()
        };
        // The prefilter may let `WEB` through (LIKE ignores case on SQLite); it never drops a match.
        let web = names(store.list_labelled("c", &PODS, Some("ns"), &[("app", "web")], None).await.unwrap());
        assert!(web.contains(&"a".to_owned()) && web.contains(&"b".to_owned()), "{web:?}");
        let both = names(store.list_labelled("c", &PODS, None, &[("tier", "x"), ("app", "web")], None).await.unwrap());
        assert_eq!(both, ["a"]);
        assert_eq!(names(store.unsettled("c", &PODS).await.unwrap()), ["a", "c"]);
        assert!(store.unsettled("c", &JOBS).await.unwrap().is_empty());
        // Events are listed by what they are about.
        for (name, about) in [("a.1", "a"), ("a.2", "a"), ("b.1", "b")] {
            let event = json!({ "metadata": { "name": name, "namespace": "ns", "uid": name },
                                "involvedObject": { "kind": "Pod", "name": about } });
            store.create("c", &EVENTS, event).await.unwrap();
        }
        assert_eq!(names(store.list_labelled("c", &EVENTS, Some("ns"), &[], Some("a")).await.unwrap()), ["a.1", "a.2"]);
        assert_eq!(store.list_labelled("c", &EVENTS, Some("ns"), &[], None).await.unwrap().len(), 3);
    }

    /// A list by label finds an object by the labels it has now: a label an update adds, not one
    /// it took away, nor an object removed or made again without it; the label rows of removed
    /// objects go with their tombstones.
    #[tokio::test]
    async fn a_list_by_label_follows_the_labels_as_they_change() {
        let (_dir, pool) = store().await;
        let store = Store::new(pool.clone(), pool.clone());
        let names = |objects: Vec<Value>| -> Vec<String> {
            objects.iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_owned()).collect()
        };
        let a = store.create("c", &PODS, pod("a", json!({ "app": "web" }), "Running")).await.unwrap().unwrap();
        let mut changed = a.clone();
        changed["metadata"]["labels"] = json!({ "app": "api", "tier": "x" });
        let changed = store.update("c", &PODS, changed).await.unwrap().unwrap();
        let by = |key: &'static str, value: &'static str| {
            let store = &store;
            async move { names(store.list_labelled("c", &PODS, Some("ns"), &[(key, value)], None).await.unwrap()) }
        };
        assert_eq!(by("app", "api").await, ["a"]);
        assert_eq!(by("tier", "x").await, ["a"]);
        assert!(by("app", "web").await.is_empty(), "a label the update took away");
        assert!(store.remove("c", &PODS, &changed).await.unwrap());
        assert!(by("app", "api").await.is_empty(), "a removed object");
        store.create("c", &PODS, pod("a", json!({ "app": "web" }), "Running")).await.unwrap().unwrap();
        assert!(by("tier", "x").await.is_empty(), "made again without the label");
        assert_eq!(by("app", "web").await, ["a"]);
        let rows = || async {
            let rows: i64 = with_pool!(&pool, |pool| {
                sqlx::query_scalar("SELECT count(*) FROM sim_kube_labels").fetch_one(pool).await
            })
            .unwrap();
            rows
        };
        assert_eq!(rows().await, 3, "app=web, app=api, tier=x");
        store.remove("c", &PODS, &by_name(&store, "a").await).await.unwrap();
        // Rows written after the horizon stay (a write may be in flight); older ones go.
        store.purge_tombstones(0).await.unwrap();
        assert_eq!(rows().await, 3);
        store.purge_tombstones(i64::MAX).await.unwrap();
        assert_eq!(rows().await, 0);
    }

    async fn by_name(store: &Store, name: &str) -> Value {
        store.get("c", &PODS, "ns", name).await.unwrap().unwrap()
    }

    /// On SQLite, a list by label in a namespace (a job's check), the Events of one object and a
    /// watch's changes each walk the index made for them, not every row of the resource (the
    /// planner has no statistics here). A list across namespaces reads every row, as before.
    #[tokio::test]
    async fn reads_walk_the_indexes_made_for_them() {
        let (_dir, pool) = store().await;
        let store = Store::new(pool.clone(), pool.clone());
        store.create("c", &PODS, pod("a", json!({ "app": "web" }), "Running")).await.unwrap();
        let plan = |sql: String| {
            let pool = pool.clone();
            async move {
                let rows: Vec<(i64, i64, i64, String)> = with_pool!(&pool, |pool| {
                    sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}"))).fetch_all(pool).await
                })
                .unwrap();
                rows.into_iter().map(|(_, _, _, detail)| detail).collect::<Vec<_>>().join("; ")
            }
        };
        for (sql, index) in [
            (labelled_sql(false, true, false), "sim_kube_objects_labels"),
            (labelled_sql(true, true, false), "sim_kube_objects_subject"),
            (labelled_sql(true, false, false), "sim_kube_objects_subject"),
            (labelled_sql(false, true, true), "sqlite_autoindex_sim_kube_labels_1"),
            (labelled_sql(false, false, true), "sqlite_autoindex_sim_kube_labels_1"),
            (CHANGES.to_owned(), "sim_kube_objects_written"),
            (CHANGES.to_owned(), "sim_kube_objects_deleted"),
        ] {
            let plan = plan(sql.clone()).await;
            assert!(plan.contains(&format!(" INDEX {index}")), "{sql}\n walks: {plan}");
        }
    }

    #[tokio::test]
    async fn a_table_of_an_earlier_version_gets_its_derived_columns() {
        let (_dir, pool) = store().await;
        execute!(
            &pool,
            "CREATE TABLE sim_kube_objects (cluster TEXT NOT NULL, resource TEXT NOT NULL, namespace TEXT NOT NULL, \
             name TEXT NOT NULL, uid TEXT NOT NULL, resource_version BIGINT NOT NULL, created_revision BIGINT NOT NULL, \
             deleted_revision BIGINT, deleted_at BIGINT, body TEXT NOT NULL, \
             PRIMARY KEY (cluster, resource, namespace, name))"
        )
        .unwrap();
        let old = pod("a", json!({ "app": "web" }), "Succeeded");
        execute!(
            &pool,
            "INSERT INTO sim_kube_objects VALUES ('c', 'pods', 'ns', 'a', 'a', 1, 1, NULL, NULL, $1)",
            old.to_string()
        )
        .unwrap();
        let store = Store::new(pool.clone(), pool);
        assert_eq!(store.list_labelled("c", &PODS, None, &[("app", "web")], None).await.unwrap().len(), 1);
        assert!(store.unsettled("c", &PODS).await.unwrap().is_empty(), "an ended Pod is settled");
    }
}
