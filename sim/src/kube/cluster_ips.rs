//! Cluster IPs: each ClusterIP Service gets a loopback address in `127.43.0.0/16`, reachable
//! from the host and from every Pod's process, on which the cluster's kube-proxy
//! ([`super::proxy`]) listens. An address is taken if another Service of the cluster has it or
//! if one of the Service's ports is already bound there (another API, or another cluster's
//! proxy, on the same host).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde_json::Value;

use super::Kube;
use super::resources::SERVICES;
use super::status::ApiError;

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
