//! Where a simulated Kubernetes keeps its state: its objects in SQL, and its Pods' files
//! (scratch directories, logs, exit codes) in the kubelet directory. Both outlive the API's
//! restarts, as a cluster's etcd and its nodes' disks would.
//!
//! The objects' database depends on the API's: beside an API on SQLite, a file of their own
//! (`sim-kube.db`, next to the kubelet directory), so that the simulated cluster's writes never
//! queue behind the API's one writer, nor the API's behind them, as a real cluster's etcd is not
//! the API's database; beside an API on PostgreSQL, that database, which its replicas share (each
//! serves the same simulated clusters).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anycloud_engine::Pool;
use anycloud_workflows::db::Db;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

/// The database and kubelet directory of the simulated clusters served by one API.
#[derive(Debug)]
pub struct Storage {
    pool: Pool,
    reader: Pool,
    kubelet_dir: PathBuf,
    /// A temporary storage's directory, removed when the storage is dropped (after its
    /// processes are killed).
    _temporary: Option<tempfile::TempDir>,
}

/// Why a temporary storage could not be made.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The temporary directory could not be created.
    #[error("creating a temporary directory for the simulated Kubernetes")]
    Directory(#[source] std::io::Error),
    /// The file of its objects could not be opened.
    #[error("opening the simulated Kubernetes's objects at {0}")]
    Objects(PathBuf, #[source] sqlx::Error),
}

impl Storage {
    /// Pods' files under `kubelet_dir` (created when the first Pod starts; the API host passes
    /// `{data dir}/sim-kubelet`), objects beside it in `sim-kube.db` when `db` is SQLite, else in
    /// `db` (tables created when the routes start).
    pub async fn open(db: &Db, kubelet_dir: impl Into<PathBuf>) -> Result<Self, StorageError> {
        let kubelet_dir = kubelet_dir.into();
        let (pool, reader) = match db.pool() {
            Pool::Postgres(_) => (db.pool().clone(), db.reader().clone()),
            Pool::Sqlite(_) => open_sqlite(kubelet_dir.with_file_name(OBJECTS_FILE)).await?,
        };
        Ok(Self { pool, reader, kubelet_dir, _temporary: None })
    }

    /// A SQLite database and a kubelet directory in a new temporary directory, for servers
    /// whose clusters' objects need not outlive them (tests of other providers).
    pub async fn temporary() -> Result<Self, StorageError> {
        let dir = tempfile::tempdir().map_err(StorageError::Directory)?;
        let (pool, reader) = open_sqlite(dir.path().join(OBJECTS_FILE)).await?;
        let kubelet_dir = dir.path().join("sim-kubelet");
        Ok(Self { pool, reader, kubelet_dir, _temporary: Some(dir) })
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The pool for reads outside a write.
    pub(crate) fn reader(&self) -> &Pool {
        &self.reader
    }

    /// Where its Pods' files (and its clusters' kube-proxies) live.
    pub fn kubelet_dir(&self) -> &Path {
        &self.kubelet_dir
    }
}

/// The file of a simulated cluster's objects beside an API on SQLite.
pub const OBJECTS_FILE: &str = "sim-kube.db";

/// One writer connection and a few readers on the objects' file. `synchronous = NORMAL`: in WAL
/// mode a commit survives the process being killed; only a power loss may take the last ones,
/// which a simulated cluster may lose (the API's own state keeps its stricter setting).
async fn open_sqlite(path: PathBuf) -> Result<(Pool, Pool), StorageError> {
    let pools = async {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(30));
        let writer = SqlitePoolOptions::new().max_connections(1).connect_with(options.clone()).await?;
        let reader = SqlitePoolOptions::new().max_connections(4).connect_with(options).await?;
        Ok((Pool::Sqlite(writer), Pool::Sqlite(reader)))
    };
    pools.await.map_err(|err| StorageError::Objects(path, err))
}

impl Drop for Storage {
    /// A temporary storage's Pods and proxies end with it: nothing could find them again.
    fn drop(&mut self) {
        if self._temporary.is_some() {
            super::process::kill_processes_under(&self.kubelet_dir);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::kube::resources::PODS;
    use crate::kube::store;

    /// Beside an API on SQLite, the objects go to their own file, and the API's database holds
    /// none of them.
    #[tokio::test]
    async fn beside_sqlite_the_objects_have_a_file_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let api = anycloud_engine::Store::sqlite(&dir.path().join("anycloud.db")).await.unwrap();
        let db = Db::open(&api).await.unwrap();
        let storage = Storage::open(&db, dir.path().join("sim-kubelet")).await.unwrap();
        let objects = store::Store::new(storage.pool().clone(), storage.reader().clone());
        let pod = json!({ "metadata": { "name": "p", "namespace": "ns", "uid": "p" } });
        objects.create("c", &PODS, pod).await.unwrap();
        assert_eq!(objects.list("c", &PODS, None).await.unwrap().len(), 1);
        assert!(dir.path().join(OBJECTS_FILE).is_file());
        let in_api: Result<i64, sqlx::Error> = anycloud_engine::with_pool!(db.pool(), |pool| {
            sqlx::query_scalar("SELECT count(*) FROM sim_kube_objects").fetch_one(pool).await
        });
        assert!(in_api.is_err(), "the API's database has no table of simulated objects: {in_api:?}");
    }
}
