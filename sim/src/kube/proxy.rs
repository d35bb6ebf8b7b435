//! kube-proxy for ClusterIP Services, on the API's host:
//!
//! - Each Service gets its `spec.clusterIP` from `127.43.0.0/16` ([`allocate`]): a loopback
//!   address, so the address a person sees is reachable from the host and from the Pods'
//!   processes. An address is taken if another Service of the cluster has it or if one of the
//!   Service's ports is already bound there (another API on the same host).
//! - For each port of each Service the sim listens on `clusterIP:port` (tokio) and forwards each
//!   TCP connection to one ready endpoint, round robin. A connection that finds no endpoint is
//!   reset, as kube-proxy rejects it. Unlike iptables, a connect that fails (an endpoint that has
//!   just exited) tries the next ready endpoint before giving up.
//! - The listeners are derived from the stored Services on every pass of the loop (see
//!   [`super::endpoints`]): they come back after an API restart and go when the Service, its
//!   namespace or its cluster's VMs go, or when the API stops. A port below the host's
//!   `ip_unprivileged_port_start` (1024) needs the API to run with the capability to bind it;
//!   without it the Service is stored but not served (logged).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use super::Kube;
use super::resources::SERVICES;
use super::status::ApiError;

/// How long a connect to an endpoint may take.
const CONNECT: Duration = Duration::from_secs(1);

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

/// Every Service port the API serves, by cluster and `clusterIP:port`.
#[derive(Default)]
pub(crate) struct Proxy {
    listeners: Mutex<HashMap<(String, SocketAddr), Listener>>,
}

impl Proxy {
    /// Serves exactly `wanted` for the cluster (each `clusterIP:port` with its ready endpoints):
    /// binds new listeners, updates endpoints, closes the others of that cluster.
    pub(crate) fn serve(&self, cluster: &str, wanted: &HashMap<SocketAddr, Vec<SocketAddr>>) {
        let Ok(mut listeners) = self.listeners.lock() else { return };
        listeners.retain(|(owner, address), _| owner != cluster || wanted.contains_key(address));
        for (address, endpoints) in wanted {
            let key = (cluster.to_owned(), *address);
            if !listeners.contains_key(&key) {
                match bind(*address) {
                    Ok(listener) => {
                        let backends = Arc::new(Backends::default());
                        let task = tokio::spawn(accept(listener, backends.clone()));
                        listeners.insert(key.clone(), Listener { backends, task });
                    }
                    Err(err) => {
                        tracing::warn!(%cluster, %address, error = %err, "simulated kube-proxy: cannot listen for a Service; the next pass tries again");
                        continue;
                    }
                }
            }
            if let Some(listener) = listeners.get(&key)
                && let Ok(mut addresses) = listener.backends.addresses.write()
                && *addresses != *endpoints
            {
                addresses.clone_from(endpoints);
            }
        }
    }

    /// Closes the listeners of every cluster not in `clusters`.
    pub(crate) fn retain_clusters(&self, clusters: &[String]) {
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.retain(|(cluster, _), _| clusters.contains(cluster));
        }
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
            Err(err) => {
                tracing::debug!(error = %err, "simulated kube-proxy: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
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

/// A free cluster IP in `127.43.0.0/16` for a new Service of the cluster with these `ports`.
pub(crate) async fn allocate(kube: &Kube, cluster: &str, ports: &[u16]) -> Result<String, ApiError> {
    let taken: Vec<String> = kube
        .store
        .list(cluster, &SERVICES, None)
        .await?
        .iter()
        .filter_map(|service| service["spec"]["clusterIP"].as_str().map(str::to_owned))
        .collect();
    for _ in 0..50 {
        let bytes = *uuid::Uuid::new_v4().as_bytes();
        let ip = Ipv4Addr::new(127, 43, bytes[0], bytes[1].clamp(1, 254));
        if taken.contains(&ip.to_string()) {
            continue;
        }
        let bound_elsewhere = ports.iter().any(|port| {
            std::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(ip), *port))
                .is_err_and(|err| err.kind() == std::io::ErrorKind::AddrInUse)
        });
        if !bound_elsewhere {
            return Ok(ip.to_string());
        }
    }
    Err(ApiError::internal("no free cluster IP in 127.43.0.0/16"))
}

/// Whether a requested cluster IP can be served here: `None` (headless) or a loopback address.
pub(crate) fn valid_cluster_ip(ip: &str) -> bool {
    ip == "None" || ip.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// The ports of a Service, as numbers.
pub(crate) fn ports(service: &Value) -> Vec<u16> {
    service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|port| port["port"].as_u64().and_then(|port| u16::try_from(port).ok()))
        .collect()
}
