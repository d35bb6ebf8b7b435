//! What a cluster's network lets in from outside itself, and how its nodes reach each other.
//!
//! A cluster whose control plane runs with its capacity (one provider account and region) is in
//! one network: flannel's default VXLAN runs between private addresses, inside the rule that lets
//! the cluster's VMs reach each other. Either way the workers join the control plane's reserved
//! public address (it survives the VM's stop, start and replacement).
//! A cluster whose control plane runs apart (on the hosted API's credential: another provider,
//! account or region) spans networks that do not route to each other, and follows k3s's
//! "Distributed hybrid or multicloud cluster" guide (docs.k3s.io/networking/distributed-multicloud):
//! every node advertises its public address (`--node-external-ip`) and flannel runs
//! `wireguard-native` between those addresses (`--flannel-external-ip` on the server). docs/hosting.md ("Cluster networks") lists the
//! rules each side gets and the k3s documentation each follows.
//!
//! The rules open exactly what that needs, never the world: the Kubernetes API (TCP 6443) from
//! the API that manages the cluster and from every worker (a VM reaching a public address of its
//! own network is seen at its own public address); across networks WireGuard (UDP 51820,
//! k3s's inbound rules for `wireguard-native` over IPv4) between every node's public address. SSH
//! is not open: no key is ever installed.

use serde::{Deserialize, Serialize};

pub use anycloud_providers::cloud::{KUBE_API_PORT, Openings, WIREGUARD_PORT};

/// Every IPv4 address: the Kubernetes API's source when the API that manages the cluster has no
/// address a cloud can name (an API on an operator's own machine).
pub const ANYWHERE: &str = "0.0.0.0/0";

/// Whether a cluster's nodes share one network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reach {
    /// Control plane and capacity in one account and region: private addresses, VXLAN.
    OneNetwork,
    /// Control plane apart from the capacity: public addresses, WireGuard.
    AcrossNetworks,
}

impl Reach {
    /// The reach of a cluster whose control plane runs apart from its capacity, or not.
    pub fn of(control_plane_apart: bool) -> Self {
        if control_plane_apart { Self::AcrossNetworks } else { Self::OneNetwork }
    }
}

/// The public addresses of a cluster's nodes, as far as they are known.
#[derive(Debug, Clone, Default)]
pub struct NodeAddresses<'a> {
    /// The control plane's.
    pub control_plane: Option<&'a str>,
    /// The workers'.
    pub workers: Vec<&'a str>,
}

/// The control plane's side: the Kubernetes API from the managing API (`api`, its public
/// address; `None`: from anywhere) and from every worker, which joins the control plane's public
/// address; WireGuard from every node across networks.
pub fn control_plane_side(reach: Reach, api: Option<&str>, nodes: &NodeAddresses<'_>) -> Openings {
    let kube_api = std::iter::once(api.map_or_else(|| ANYWHERE.to_owned(), host))
        .chain(nodes.workers.iter().copied().map(host))
        .collect();
    let wireguard = match reach {
        Reach::OneNetwork => Vec::new(),
        Reach::AcrossNetworks => every_node(nodes),
    };
    sorted(Openings { kube_api, wireguard })
}

/// The capacity's side when apart from the control plane: WireGuard from every node (flannel's
/// traffic goes to public addresses, even between two workers of one network). In one network
/// the capacity's side is the control plane's.
pub fn capacity_side(nodes: &NodeAddresses<'_>) -> Openings {
    sorted(Openings { kube_api: Vec::new(), wireguard: every_node(nodes) })
}

fn every_node(nodes: &NodeAddresses<'_>) -> Vec<String> {
    nodes.control_plane.into_iter().chain(nodes.workers.iter().copied()).map(host).collect()
}

/// One address as a CIDR of one host.
fn host(address: &str) -> String {
    if address.contains('/') { address.to_owned() } else { format!("{address}/32") }
}

fn sorted(mut openings: Openings) -> Openings {
    for list in [&mut openings.kube_api, &mut openings.wireguard] {
        list.sort();
        list.dedup();
    }
    openings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> NodeAddresses<'static> {
        NodeAddresses { control_plane: Some("203.0.113.10"), workers: vec!["198.51.100.7", "198.51.100.8"] }
    }

    #[test]
    fn one_network_opens_only_the_kube_api_to_the_managing_api_and_the_workers() {
        let openings = control_plane_side(Reach::OneNetwork, Some("192.0.2.5"), &nodes());
        let kube_api = ["192.0.2.5/32", "198.51.100.7/32", "198.51.100.8/32"].map(String::from).to_vec();
        assert_eq!(openings, Openings { kube_api, wireguard: vec![] });
        let local = control_plane_side(Reach::OneNetwork, None, &NodeAddresses::default());
        assert_eq!(local.kube_api, vec![ANYWHERE.to_owned()]);
    }

    #[test]
    fn across_networks_the_workers_reach_the_api_and_every_node_reaches_wireguard() {
        let openings = control_plane_side(Reach::AcrossNetworks, Some("192.0.2.5"), &nodes());
        assert_eq!(openings.kube_api, ["192.0.2.5/32", "198.51.100.7/32", "198.51.100.8/32"]);
        assert_eq!(openings.wireguard, ["198.51.100.7/32", "198.51.100.8/32", "203.0.113.10/32"]);
        let capacity = capacity_side(&nodes());
        assert!(capacity.kube_api.is_empty());
        assert_eq!(capacity.wireguard, openings.wireguard);
        assert!(openings.rules().iter().all(|(_, _, source)| *source != ANYWHERE));
    }

    #[test]
    fn a_source_named_twice_is_opened_once() {
        let nodes = NodeAddresses { control_plane: Some("192.0.2.5"), workers: vec!["192.0.2.5"] };
        let openings = control_plane_side(Reach::AcrossNetworks, Some("192.0.2.5"), &nodes);
        assert_eq!(openings.kube_api, ["192.0.2.5/32"]);
        assert_eq!(openings.wireguard, ["192.0.2.5/32"]);
    }
}
