//! The simulated clusters' label index: one row per object and `key=value` label
//! (`sim_kube_labels`), so that a list by label finds its objects by key, where a `LIKE` on every
//! object's labels read every Pod of the namespace for each of a thousand jobs' checks (8 % of the
//! API's CPU in the jobs benchmark: docs/benchmarks.md, "Jobs", twelfth stop). A real apiserver
//! filters its watch cache in memory; this store is SQL, so it keeps an index.
//!
//! The index may hold more than the objects' labels, never less: an object's labels are recorded
//! (or their rows' `written_at` renewed) just before the object is written with them, so a
//! process killed between the two leaves rows too many, never too few; and a row goes only when
//! nothing live is left under its name and it was last written before the tombstones' horizon
//! ([`forget_removed`], with the tombstones), so that a write in flight keeps its fresh rows. A
//! list by label looks its objects up by one label and still tests all of them on the object's
//! own `labels` (and the caller's selector decides), so a row left behind lets an object through
//! to that test and no further.

use anycloud_engine::{Pool, execute, with_pool};
use serde_json::Value;

/// The table, created with the other tables of the store.
pub(crate) const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS sim_kube_labels (
        cluster TEXT NOT NULL,
        resource TEXT NOT NULL,
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        label TEXT NOT NULL,
        written_at BIGINT NOT NULL,
        PRIMARY KEY (cluster, resource, label, namespace, name)
    )";

/// Where an object is, as its label rows name it.
pub(crate) struct Key<'a> {
    pub(crate) cluster: &'a str,
    pub(crate) resource: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
}

/// Each label of `object` as `key=value`.
fn labels(object: &Value) -> Vec<String> {
    let Some(labels) = object["metadata"]["labels"].as_object() else { return Vec::new() };
    labels.iter().map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or_default())).collect()
}

/// Indexes the labels of `object`, about to be written at `key` (one statement; a label already
/// there is marked written now).
pub(crate) async fn record(pool: &Pool, key: &Key<'_>, object: &Value) -> Result<(), sqlx::Error> {
    let labels = labels(object);
    if labels.is_empty() {
        return Ok(());
    }
    let rows: Vec<String> = (0..labels.len()).map(|i| format!("($1, $2, $3, $4, $5, ${})", i + 6)).collect();
    let sql = format!(
        "INSERT INTO sim_kube_labels (cluster, resource, namespace, name, written_at, label) VALUES {} \
         ON CONFLICT (cluster, resource, label, namespace, name) DO UPDATE SET written_at = excluded.written_at",
        rows.join(", ")
    );
    with_pool!(pool, |pool| {
        let mut query =
            sqlx::query(sqlx::AssertSqlSafe(sql.clone())).bind(key.cluster).bind(key.resource).bind(key.namespace);
        query = query.bind(key.name).bind(anycloud_workflows::now_ms());
        for label in &labels {
            query = query.bind(label);
        }
        query.execute(pool).await.map(|_| ())
    })
}

/// Forgets the label rows last written before `before` (milliseconds since the epoch) under
/// which no live object is left.
pub(crate) async fn forget_removed(pool: &Pool, before: i64) -> Result<(), sqlx::Error> {
    execute!(
        pool,
        "DELETE FROM sim_kube_labels WHERE written_at < $1 AND NOT EXISTS (SELECT 1 FROM sim_kube_objects o \
         WHERE o.cluster = sim_kube_labels.cluster AND o.resource = sim_kube_labels.resource \
         AND o.namespace = sim_kube_labels.namespace AND o.name = sim_kube_labels.name AND o.deleted_revision IS NULL)",
        before
    )?;
    Ok(())
}

/// Creates the table; if it was not there, fills it from the live objects in the same
/// transaction (a store written by an earlier version), so that it is never there half filled.
pub(crate) async fn create(pool: &Pool) -> Result<(), sqlx::Error> {
    let probe = execute!(pool, "SELECT 1 FROM sim_kube_labels WHERE 1 = 0");
    if probe.is_ok() {
        return Ok(());
    }
    with_pool!(pool, |pool| {
        let mut tx = pool.begin().await?;
        sqlx::query(SCHEMA).execute(&mut *tx).await?;
        let objects: Vec<(String, String, String, String, String)> = sqlx::query_as(
            "SELECT cluster, resource, namespace, name, body FROM sim_kube_objects WHERE deleted_revision IS NULL",
        )
        .fetch_all(&mut *tx)
        .await?;
        let now = anycloud_workflows::now_ms();
        for (cluster, resource, namespace, name, body) in objects {
            let object: Value = serde_json::from_str(&body).map_err(|err| sqlx::Error::Decode(Box::new(err)))?;
            for label in labels(&object) {
                sqlx::query(
                    "INSERT INTO sim_kube_labels (cluster, resource, namespace, name, label, written_at) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                )
                .bind(&cluster)
                .bind(&resource)
                .bind(&namespace)
                .bind(&name)
                .bind(label)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await
    })
}

/// The label a list by `equalities` looks its objects up by: the longest `key=value`, the one
/// most likely to name few objects (an id or a uid rather than an attempt number). None without
/// equalities.
pub(crate) fn lookup(equalities: &[(&str, &str)]) -> Option<String> {
    equalities.iter().map(|(key, value)| format!("{key}={value}")).max_by_key(String::len)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_list_looks_up_by_its_longest_label() {
        assert_eq!(lookup(&[]), None);
        let equalities = [("anycloud.dev/attempt", "1"), ("anycloud.dev/deployment-id", "0f3c")];
        assert_eq!(lookup(&equalities).as_deref(), Some("anycloud.dev/deployment-id=0f3c"));
        let pod = json!({ "metadata": { "labels": { "app": "web", "tier": "" } } });
        assert_eq!(labels(&pod), ["app=web", "tier="]);
        assert!(labels(&json!({ "metadata": {} })).is_empty());
    }
}
