//! A simulated cluster's kube-proxy: a process of its own, as kube-proxy runs on every node apart
//! from the control plane, so that a Service keeps answering while the API that manages the
//! cluster is down or restarting.
//!
//! - It serves the cluster's routes file (`{kubelet dir}/.kube-proxy/{cluster}.routes`, written
//!   by the API's [`super::proxies`]): for each `clusterIP:port` the ready endpoints, as JSON
//!   (`{"127.43.1.2:80": ["127.42.3.4:31234"]}`). It reads the file every 100 ms and serves
//!   exactly what it says: new listeners are bound, gone ones closed, endpoints swapped. While
//!   the API is away the file does not change, so connections go on to the last known endpoints,
//!   as kube-proxy's iptables rules stay when the API server is down.
//! - For each port it listens on `clusterIP:port` and forwards each TCP connection to one ready
//!   endpoint, round robin. A connection that finds no endpoint is reset, as kube-proxy rejects
//!   it. Unlike iptables, a connect that fails (an endpoint that has just exited) tries the next
//!   ready endpoint before giving up.
//! - It exits when its routes file is gone (the cluster has no Service left, its VMs are gone, or
//!   its kubelet directory was removed), and at once if another proxy of the cluster runs: each
//!   holds an exclusive lock on `{cluster}.lock` while it lives, which is also how the API tells
//!   that it runs.
//! - A port below the host's `ip_unprivileged_port_start` (1024) needs the process to have the
//!   capability to bind it; without it the port is logged and tried again on the next change.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// How long a connect to an endpoint may take.
const CONNECT: Duration = Duration::from_secs(1);
/// How often the routes file is read.
const READ_EVERY: Duration = Duration::from_millis(100);

/// What a routes file holds: each `clusterIP:port` and its ready endpoints.
pub(crate) type Routes = BTreeMap<SocketAddr, Vec<SocketAddr>>;

/// Serves the routes file `routes` until it is gone (see the module's documentation). Blocks;
/// runs its own runtime. `Ok` also when another proxy already serves the file.
pub fn run(routes: &Path) -> std::io::Result<()> {
    let lock = std::fs::File::options().create(true).truncate(false).write(true).open(routes.with_extension("lock"))?;
    if lock.try_lock().is_err() {
        eprintln!("simulated kube-proxy: another proxy serves {}", routes.display());
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(serve(routes));
    drop(lock);
    Ok(())
}

async fn serve(routes: &Path) {
    let mut listeners: HashMap<SocketAddr, Listener> = HashMap::new();
    let mut last: Option<Vec<u8>> = None;
    loop {
        match std::fs::read(routes) {
            Ok(bytes) if last.as_ref() != Some(&bytes) => {
                match serde_json::from_slice::<Routes>(&bytes) {
                    Ok(wanted) => apply(&mut listeners, &wanted),
                    Err(err) => eprintln!("simulated kube-proxy: {} is not a routes file: {err}", routes.display()),
                }
                last = Some(bytes);
            }
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return,
            Err(err) => eprintln!("simulated kube-proxy: reading {}: {err}", routes.display()),
        }
        tokio::time::sleep(READ_EVERY).await;
    }
}

/// Serves exactly `wanted`: binds new listeners, updates endpoints, closes the others. A port
/// that cannot be bound is forgotten, so that the next change tries it again.
fn apply(listeners: &mut HashMap<SocketAddr, Listener>, wanted: &Routes) {
    listeners.retain(|address, _| wanted.contains_key(address));
    for (address, endpoints) in wanted {
        if !listeners.contains_key(address) {
            match bind(*address) {
                Ok(listener) => {
                    let backends = Arc::new(Backends::default());
                    let task = tokio::spawn(accept(listener, backends.clone()));
                    listeners.insert(*address, Listener { backends, task });
                }
                Err(err) => {
                    eprintln!("simulated kube-proxy: cannot listen on {address} for a Service: {err}");
                    continue;
                }
            }
        }
        if let Some(listener) = listeners.get(address)
            && let Ok(mut addresses) = listener.backends.addresses.write()
        {
            addresses.clone_from(endpoints);
        }
    }
}

/// The ready endpoints of one Service port, shared with its listener.
#[derive(Default)]
struct Backends {
    addresses: RwLock<Vec<SocketAddr>>,
    next: AtomicUsize,
}

/// One listening Service port.
struct Listener {
    backends: Arc<Backends>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(1024)
}

async fn accept(listener: TcpListener, backends: Arc<Backends>) {
    loop {
        match listener.accept().await {
            Ok((inbound, _)) => {
                tokio::spawn(forward(inbound, backends.clone()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Forwards one connection to a ready endpoint, round robin; resets it if none answers.
async fn forward(mut inbound: TcpStream, backends: Arc<Backends>) {
    let endpoints = backends.addresses.read().map(|a| a.clone()).unwrap_or_default();
    let start = backends.next.fetch_add(1, Ordering::Relaxed);
    for i in 0..endpoints.len() {
        let endpoint = endpoints[(start + i) % endpoints.len()];
        if let Ok(Ok(mut outbound)) = tokio::time::timeout(CONNECT, TcpStream::connect(endpoint)).await {
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            return;
        }
    }
    let _ = inbound.set_zero_linger();
}
