//! The `secrets` and `secret_versions` tables: values a workload takes as environment variables
//! (an env secret) or a login its image is pulled with (a registry secret). Each `secret set`
//! adds a version; a deployment pins the version it was given ([`SecretUse`]). A version's values
//! are sealed for its own row before they are stored, and opened only by the step that writes
//! them into a Kubernetes Secret; names, key names and versions are what lists show.

use std::collections::BTreeMap;

use anycloud_engine::{WriteTx, execute_in, with_pool, with_tx};
use serde::{Deserialize, Serialize};

use super::credentials::Hold;
use super::{Db, SealedColumn};
use crate::secrets::SecretBox;

/// Where a version's values are sealed: its `sealed`, keyed by its `id` (`NAME/VERSION`).
pub const VALUES: SealedColumn = SealedColumn { table: "secret_versions", key: "id", column: "sealed" };

/// A registry secret's two keys.
pub const USERNAME: &str = "username";
/// See [`USERNAME`].
pub const PASSWORD: &str = "password";

/// A version's values, opened: key to value. Its `Debug` shows the keys only, so that no log
/// or error that formats it carries a value.
#[derive(Clone, PartialEq, Eq)]
pub struct Values(pub BTreeMap<String, String>);

impl Values {
    /// The value of `key` (empty when there is none).
    pub fn get(&self, key: &str) -> &str {
        self.0.get(key).map(String::as_str).unwrap_or_default()
    }

    /// Its keys and values, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter()
    }
}

impl std::fmt::Debug for Values {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Values").field(&self.0.keys().collect::<Vec<_>>()).finish()
    }
}

/// A secret, without its values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secret {
    /// Its name (a DNS label).
    pub name: String,
    /// A registry secret: the registry host it logs in to. `None` for an env secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// Its current version: 1, then one more per `secret set`.
    pub version: i64,
    /// The current version's key names (a registry secret's are `username` and `password`).
    pub keys: Vec<String>,
    /// Created at (ms since the epoch).
    pub created_at: i64,
    /// Its current version was set at.
    pub updated_at: i64,
}

/// A secret a deployment takes, pinned to one version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SecretUse {
    /// The secret.
    pub name: String,
    /// The version the deployment (or the service's revision) was given.
    pub version: i64,
    /// A registry secret: the registry host (the workload pulls with it); else an env secret
    /// (the container takes its keys as environment variables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
}

/// The secrets of a spec as stored: JSON `[{name, version, registry}]`.
pub(crate) fn encode_uses(uses: &[SecretUse]) -> String {
    serde_json::to_string(uses).unwrap_or_else(|_| "[]".into())
}

/// See [`encode_uses`].
pub(crate) fn decode_uses(text: &str) -> Result<Vec<SecretUse>, String> {
    serde_json::from_str(text).map_err(|err| err.to_string())
}

#[derive(sqlx::FromRow)]
struct Row {
    name: String,
    registry: Option<String>,
    version: i64,
    keys: String,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<Row> for Secret {
    type Error = sqlx::Error;

    fn try_from(row: Row) -> Result<Self, sqlx::Error> {
        Ok(Self {
            keys: serde_json::from_str(&row.keys)
                .map_err(|err| sqlx::Error::ColumnDecode { index: "keys".into(), source: err.into() })?,
            name: row.name,
            registry: row.registry,
            version: row.version,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

const SELECT: &str = "SELECT s.name, s.registry, s.version, v.keys, s.created_at, s.updated_at FROM secrets s \
                      JOIN secret_versions v ON v.name = s.name AND v.version = s.version";

/// The row of version `version` of `name`.
fn version_id(name: &str, version: i64) -> String {
    format!("{name}/{version}")
}

/// The secret of this name, held as `hold` says until the caller's transaction ends: a
/// deployment that pins it holds it shared, a delete exclusive, so that they cannot interleave.
pub async fn hold_in(tx: &mut WriteTx, name: &str, hold: Hold) -> Result<Option<Secret>, sqlx::Error> {
    let lock = match (tx.is_postgres(), hold) {
        (false, _) => "",
        (true, Hold::Shared) => " FOR SHARE OF s",
        (true, Hold::Exclusive) => " FOR UPDATE OF s",
    };
    let sql = sqlx::AssertSqlSafe(format!("{SELECT} WHERE s.name = $1{lock}"));
    let row: Option<Row> = with_tx!(tx, |tx| sqlx::query_as(sql).bind(name).fetch_optional(&mut **tx).await)?;
    row.map(Secret::try_from).transpose()
}

/// The registry secrets for `host`, by name, held shared until the caller's transaction ends
/// (as [`hold_in`] with [`Hold::Shared`]).
pub async fn for_registry_in(tx: &mut WriteTx, host: &str) -> Result<Vec<Secret>, sqlx::Error> {
    let lock = if tx.is_postgres() { " FOR SHARE OF s" } else { "" };
    let sql = sqlx::AssertSqlSafe(format!("{SELECT} WHERE s.registry = $1 ORDER BY s.name{lock}"));
    let rows: Vec<Row> = with_tx!(tx, |tx| sqlx::query_as(sql).bind(host).fetch_all(&mut **tx).await)?;
    rows.into_iter().map(Secret::try_from).collect()
}

/// Stores version `version` of `name` (its values sealed for that version's row) and makes it
/// the current one, inside the caller's transaction: version 1 inserts the secret (a name already
/// taken fails with a unique violation), a later one follows a [`hold_in`] with
/// [`Hold::Exclusive`].
pub async fn put_version_in(
    tx: &mut WriteTx,
    sealer: &SecretBox,
    name: &str,
    registry: Option<&str>,
    version: i64,
    values: &BTreeMap<String, String>,
    now: i64,
) -> Result<(), sqlx::Error> {
    if version == 1 {
        execute_in!(
            tx,
            "INSERT INTO secrets (name, registry, version, created_at, updated_at) VALUES ($1, $2, 1, $3, $3)",
            name,
            registry,
            now
        )?;
    } else {
        execute_in!(tx, "UPDATE secrets SET version = $1, updated_at = $2 WHERE name = $3", version, now, name)?;
    }
    let id = version_id(name, version);
    let plain = serde_json::to_vec(values).map_err(|err| sqlx::Error::Encode(err.into()))?;
    let sealed = sealer.seal(VALUES.place(&id), &plain);
    let keys =
        serde_json::to_string(&values.keys().collect::<Vec<_>>()).map_err(|err| sqlx::Error::Encode(err.into()))?;
    execute_in!(
        tx,
        "INSERT INTO secret_versions (id, name, version, keys, sealed, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        &id,
        name,
        version,
        &keys,
        &sealed,
        now
    )?;
    Ok(())
}

/// One secret, without its values.
pub async fn get(db: &Db, name: &str) -> Result<Option<Secret>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!("{SELECT} WHERE s.name = $1"));
    let row: Option<Row> = with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(name).fetch_optional(pool).await)?;
    row.map(Secret::try_from).transpose()
}

/// A page of the secrets by name: the first `limit` after the name `after`.
pub async fn list(db: &Db, after: Option<&str>, limit: u32) -> Result<Vec<Secret>, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(format!("{SELECT} WHERE s.name > $1 ORDER BY s.name LIMIT $2"));
    let after = after.unwrap_or("");
    let rows: Vec<Row> =
        with_pool!(db.reader(), |pool| sqlx::query_as(sql).bind(after).bind(i64::from(limit)).fetch_all(pool).await)?;
    rows.into_iter().map(Secret::try_from).collect()
}

/// The values of version `version` of `name`, opened: `None` when that version is not stored
/// (the secret was deleted).
pub async fn open(
    db: &Db,
    sealer: &SecretBox,
    name: &str,
    version: i64,
) -> Result<Option<Values>, super::credentials::OpenError> {
    let id = version_id(name, version);
    let sealed: Option<String> = with_pool!(db.reader(), |pool| {
        sqlx::query_scalar("SELECT sealed FROM secret_versions WHERE id = $1").bind(&id).fetch_optional(pool).await
    })?;
    let Some(sealed) = sealed else { return Ok(None) };
    let place = VALUES.place(&id);
    let broken = || crate::secrets::SecretError::Open { place: place.to_string() };
    let plain = sealer.open(place, &sealed)?;
    let values = serde_json::from_slice(&plain).map_err(|_| broken())?;
    Ok(Some(Values(values)))
}

/// The deployments that have not ended and take the secret `name`, by name: those whose spec
/// (the serving revision's, for a service) names it, and services with a revision that names it
/// and is still rolling out or queued.
pub async fn users_in(tx: &mut WriteTx, name: &str) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String, String)> =
        with_tx!(tx, |tx| { sqlx::query_as(sqlx::AssertSqlSafe(USERS.to_owned())).fetch_all(&mut **tx).await })?;
    Ok(users_of(rows, name))
}

/// Every secret's users, as [`users_in`] finds them.
pub async fn users(db: &Db) -> Result<Vec<(String, String)>, sqlx::Error> {
    with_pool!(db.reader(), |pool| sqlx::query_as(sqlx::AssertSqlSafe(USERS.to_owned())).fetch_all(pool).await)
}

/// The deployments that have not ended and that name any secret, with the secrets named: their
/// own spec's, and their revisions' that may still serve.
const USERS: &str = "SELECT d.name, d.secrets FROM deployments d \
     WHERE d.secrets <> '[]' AND d.status NOT IN ('completed', 'errored', 'terminated', 'failed', 'invalid') \
     UNION ALL SELECT d.name, r.secrets FROM deployment_revisions r JOIN deployments d ON d.id = r.deployment_id \
     WHERE r.secrets <> '[]' AND r.result IN ('queued', 'deploying', 'upgrading', 'rolling-back', 'running') \
     AND d.status NOT IN ('completed', 'errored', 'terminated', 'failed', 'invalid')";

/// The names of the deployments among `rows` (name, secrets JSON) that take `secret`, sorted,
/// each once.
pub fn users_of(rows: Vec<(String, String)>, secret: &str) -> Vec<String> {
    let mut names: Vec<String> = rows
        .into_iter()
        .filter(|(_, uses)| decode_uses(uses).unwrap_or_default().iter().any(|one| one.name == secret))
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Deletes a secret and every version of it, inside the caller's transaction.
pub async fn delete_in(tx: &mut WriteTx, name: &str) -> Result<(), sqlx::Error> {
    execute_in!(tx, "DELETE FROM secret_versions WHERE name = $1", name)?;
    execute_in!(tx, "DELETE FROM secrets WHERE name = $1", name)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use anycloud_engine::execute;

    use super::*;
    use crate::test_support::{FakeAnswer, TestWorld};

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()
    }

    #[tokio::test]
    async fn each_version_is_sealed_for_its_own_row_and_opens_only_there() {
        let world = TestWorld::new(FakeAnswer::Accept).await;
        let (db, sealer) = (&world.deps.db, &world.deps.sealer);
        let mut tx = db.begin().await.unwrap();
        put_version_in(&mut tx, sealer, "db", None, 1, &values(&[("PASSWORD", "one-hunter2")]), 10).await.unwrap();
        tx.commit().await.unwrap();
        let mut tx = db.begin().await.unwrap();
        assert_eq!(hold_in(&mut tx, "db", Hold::Exclusive).await.unwrap().unwrap().version, 1);
        put_version_in(&mut tx, sealer, "db", None, 2, &values(&[("PASSWORD", "two-hunter2"), ("USER", "u")]), 20)
            .await
            .unwrap();
        tx.commit().await.unwrap();

        let secret = get(db, "db").await.unwrap().unwrap();
        assert_eq!(
            (secret.version, secret.keys.clone(), secret.created_at, secret.updated_at),
            (2, vec!["PASSWORD".to_owned(), "USER".to_owned()], 10, 20)
        );
        assert_eq!(open(db, sealer, "db", 1).await.unwrap().unwrap().get("PASSWORD"), "one-hunter2");
        assert_eq!(open(db, sealer, "db", 2).await.unwrap().unwrap().get("PASSWORD"), "two-hunter2");
        assert!(open(db, sealer, "db", 3).await.unwrap().is_none());
        let shown = format!("{:?}", open(db, sealer, "db", 2).await.unwrap().unwrap());
        assert!(shown.contains("PASSWORD") && !shown.contains("hunter2"), "{shown}");

        // Version 1's sealed values copied onto version 2's row do not open there.
        execute!(
            db.pool(),
            "UPDATE secret_versions SET sealed = (SELECT sealed FROM secret_versions WHERE id = 'db/1') WHERE id = 'db/2'"
        )
        .unwrap();
        assert!(open(db, sealer, "db", 2).await.is_err());

        let mut tx = db.begin().await.unwrap();
        delete_in(&mut tx, "db").await.unwrap();
        tx.commit().await.unwrap();
        assert!(get(db, "db").await.unwrap().is_none());
        assert!(open(db, sealer, "db", 1).await.unwrap().is_none());
    }

    #[test]
    fn a_deployment_uses_a_secret_when_its_spec_names_it() {
        let uses = |names: &[&str]| {
            let uses: Vec<SecretUse> =
                names.iter().map(|name| SecretUse { name: (*name).into(), version: 1, registry: None }).collect();
            encode_uses(&uses)
        };
        let rows = vec![
            ("web".to_owned(), uses(&["db", "api-key"])),
            ("batch".to_owned(), uses(&["db"])),
            ("web".to_owned(), uses(&["db"])),
            ("other".to_owned(), uses(&["dbx"])),
        ];
        assert_eq!(users_of(rows.clone(), "db"), ["batch", "web"]);
        assert_eq!(users_of(rows, "api-key"), ["web"]);
        assert_eq!(decode_uses("[]").unwrap(), Vec::new());
    }
}
