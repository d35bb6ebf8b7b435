//! Where a simulated Kubernetes keeps its state: its objects in SQL (in the database of the API
//! that hosts it, so that they survive its restarts like etcd's would), and its Pods' files
//! (scratch directories, logs, exit codes) in the kubelet directory.

use std::path::{Path, PathBuf};

use anycloud_engine::{EngineError, Pool, Store};
use anycloud_workflows::db::Db;

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
    /// Its SQLite database could not be opened.
    #[error("opening the simulated Kubernetes's temporary database")]
    Database(#[source] EngineError),
}

impl Storage {
    /// Objects in `db` (tables created when the routes start), Pods' files under `kubelet_dir`
    /// (created when the first Pod starts; the API host passes `{data dir}/sim-kubelet`).
    pub fn new(db: &Db, kubelet_dir: impl Into<PathBuf>) -> Self {
        Self { pool: db.pool().clone(), reader: db.reader().clone(), kubelet_dir: kubelet_dir.into(), _temporary: None }
    }

    /// A SQLite database and a kubelet directory in a new temporary directory, for servers
    /// whose clusters' objects need not outlive them (tests of other providers).
    pub async fn temporary() -> Result<Self, StorageError> {
        let dir = tempfile::tempdir().map_err(StorageError::Directory)?;
        let store = Store::sqlite(&dir.path().join("sim-kube.db")).await.map_err(StorageError::Database)?;
        let kubelet_dir = dir.path().join("sim-kubelet");
        Ok(Self { pool: store.pool().clone(), reader: store.reader().clone(), kubelet_dir, _temporary: Some(dir) })
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

impl Drop for Storage {
    /// A temporary storage's Pods and proxies end with it: nothing could find them again.
    fn drop(&mut self) {
        if self._temporary.is_some() {
            super::process::kill_processes_under(&self.kubelet_dir);
        }
    }
}
