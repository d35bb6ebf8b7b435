//! The API's side of the simulated kube-proxies ([`super::proxy`]), one process per cluster with
//! Services. On every reconcile pass, for each such cluster:
//!
//! - the routes the Endpoints controller found are written to the cluster's routes file when they
//!   change (a temporary file renamed over it, so that the proxy never reads half a file);
//! - the cluster's proxy is started when none holds the cluster's lock: the `ProxyCommand` the
//!   API was given, with the routes file as its last argument, detached in a process group of its
//!   own and working in `{kubelet dir}/.kube-proxy/` (its log is `{cluster}.log` there), so that
//!   it outlives the API as the containers do.
//!
//! A cluster whose Services are all gone, or whose VMs are, loses its routes file, and its proxy
//! exits on its next read.

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;

use super::proxy::Routes;

/// How the API starts a cluster's kube-proxy: `program ARGS... ROUTES_FILE` must run
/// [`super::run_proxy`] on the routes file (the `anycloud` binary does, as its hidden command
/// `anycloud sim-kube-proxy ROUTES_FILE`).
#[derive(Debug, Clone)]
pub struct ProxyCommand {
    program: PathBuf,
    args: Vec<OsString>,
}

impl ProxyCommand {
    /// `program`, with `args` before the routes file.
    pub fn new<A: Into<OsString>>(program: impl Into<PathBuf>, args: impl IntoIterator<Item = A>) -> Self {
        Self { program: program.into(), args: args.into_iter().map(Into::into).collect() }
    }
}

/// The routes files and proxies of the clusters one API serves.
pub(crate) struct Proxies {
    dir: PathBuf,
    command: ProxyCommand,
    /// What this API last wrote to each cluster's routes file.
    written: Mutex<HashMap<String, Vec<u8>>>,
}

impl Proxies {
    pub(crate) fn new(kubelet_dir: &Path, command: ProxyCommand) -> Self {
        Self { dir: kubelet_dir.join(".kube-proxy"), command, written: Mutex::new(HashMap::new()) }
    }

    /// Has the cluster's proxy serve exactly `wanted` (each `clusterIP:port` with its ready
    /// endpoints); nothing at all stops it.
    pub(crate) fn serve(&self, cluster: &str, wanted: &HashMap<SocketAddr, Vec<SocketAddr>>) {
        if super::process::closed(&self.dir) {
            // Its owner ended and killed its processes: nothing starts or is written here again.
            return;
        }
        if wanted.is_empty() {
            self.stop(cluster);
            return;
        }
        let routes: Routes = wanted.iter().map(|(address, endpoints)| (*address, endpoints.clone())).collect();
        let result = serde_json::to_vec(&routes)
            .map_err(std::io::Error::other)
            .and_then(|bytes| self.write(cluster, bytes))
            .and_then(|()| self.keep_running(cluster));
        if let Err(err) = result {
            tracing::warn!(%cluster, error = %err, "simulated kube-proxy: cannot hand the routes to the cluster's proxy; the next pass tries again");
        }
    }

    /// Stops the proxies of every cluster not in `clusters`.
    pub(crate) fn retain_clusters(&self, clusters: &[String]) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|extension| extension == "routes")
                && let Some(cluster) = path.file_stem().and_then(|stem| stem.to_str())
                && !clusters.iter().any(|kept| kept == cluster)
            {
                self.stop(cluster);
            }
        }
    }

    fn routes_file(&self, cluster: &str) -> PathBuf {
        self.dir.join(format!("{cluster}.routes"))
    }

    fn write(&self, cluster: &str, bytes: Vec<u8>) -> std::io::Result<()> {
        let path = self.routes_file(cluster);
        let mut written = self.written.lock().map_err(|_| std::io::Error::other("poisoned"))?;
        if written.get(cluster) == Some(&bytes) && path.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)?;
        let temporary = path.with_extension("routes.tmp");
        std::fs::write(&temporary, &bytes)?;
        std::fs::rename(&temporary, &path)?;
        written.insert(cluster.to_owned(), bytes);
        Ok(())
    }

    /// Starts the cluster's proxy unless one holds its lock.
    fn keep_running(&self, cluster: &str) -> std::io::Result<()> {
        let routes = self.routes_file(cluster);
        let lock =
            std::fs::File::options().create(true).truncate(false).write(true).open(routes.with_extension("lock"))?;
        if lock.try_lock().is_err() {
            return Ok(());
        }
        drop(lock);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(routes.with_extension("log"))?;
        let mut child = super::process::start_unless_closed(&self.dir, || {
            tokio::process::Command::new(&self.command.program)
                .args(&self.command.args)
                .arg(&routes)
                .current_dir(&self.dir)
                .env_clear()
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .process_group(0)
                .spawn()
        })?;
        // Reap it when it exits, so that it leaves no zombie while this API lives.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        tracing::info!(%cluster, "simulated kube-proxy started");
        Ok(())
    }

    fn stop(&self, cluster: &str) {
        if let Ok(mut written) = self.written.lock() {
            written.remove(cluster);
        }
        match std::fs::remove_file(self.routes_file(cluster)) {
            Ok(()) => tracing::info!(%cluster, "simulated kube-proxy: the cluster serves no Service; its proxy stops"),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => tracing::warn!(%cluster, error = %err, "simulated kube-proxy: cannot remove the routes file"),
        }
    }
}
