//! The Kubernetes clients the API keeps, one per cluster. A client keeps its connections to the
//! cluster's API open (hyper's pool), so a job's checks, a rollout's polls and a log read reuse a
//! TLS connection instead of making one each: with a thousand jobs running on the simulated
//! cluster, a new client per check put 9 % of the run's CPU samples in TLS handshakes
//! (docs/benchmarks.md, "Jobs", issue 28's seventh and eighth stops).
//!
//! A kept client serves a cluster only while what it was made from is unchanged: the API's URL
//! and TLS server name, the cluster CA and the API token. A control plane at a new address, or
//! new secrets, make a new client, which replaces the old one. What a client was made from is
//! kept as a SHA-256 digest, so that the token has no copy here beside the client's own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest, Sha256};

use crate::cluster::secrets::ClusterSecrets;
use crate::kubernetes::KubeEndpoint;
use crate::kubernetes::client::{self, KubeError};

/// Clusters whose clients are kept at most; past it, every kept client is dropped and the next
/// calls make new ones (an API serves far fewer clusters: this only bounds what deleted clusters
/// leave behind).
const KEPT_AT_MOST: usize = 256;

/// The clients kept, by cluster id. Cheap to clone: the clones share them.
#[derive(Clone, Default)]
pub struct KubeClients {
    kept: Arc<Mutex<HashMap<String, Kept>>>,
    /// How many clients were made since the API started.
    made: Arc<AtomicU64>,
}

struct Kept {
    made_from: [u8; 32],
    client: kube::Client,
}

impl std::fmt::Debug for KubeClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("KubeClients").field("kept", &kept).field("made", &self.made.load(Ordering::Relaxed)).finish()
    }
}

impl KubeClients {
    /// The client for ordinary calls ([`client::client`]) to cluster `cluster_id`'s API at
    /// `endpoint`: the kept one if it was made from the same endpoint and secrets, else a new one,
    /// kept from now on.
    pub fn client(
        &self,
        cluster_id: &str,
        endpoint: &KubeEndpoint,
        secrets: &ClusterSecrets,
    ) -> Result<kube::Client, KubeError> {
        let made_from = digest(endpoint, secrets);
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = kept.get(cluster_id)
            && found.made_from == made_from
        {
            return Ok(found.client.clone());
        }
        let client = client::client(endpoint, secrets)?;
        self.made.fetch_add(1, Ordering::Relaxed);
        if kept.len() >= KEPT_AT_MOST && !kept.contains_key(cluster_id) {
            kept.clear();
        }
        kept.insert(cluster_id.to_owned(), Kept { made_from, client: client.clone() });
        Ok(client)
    }
}

/// What a client is made from, each part length-prefixed so that no two differ only in where
/// one part ends.
fn digest(endpoint: &KubeEndpoint, secrets: &ClusterSecrets) -> [u8; 32] {
    let mut hash = Sha256::new();
    let server_name = endpoint.tls_server_name.as_deref().unwrap_or("");
    for part in [endpoint.url.as_str(), server_name, &secrets.ca_cert_pem, &secrets.api_token] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> ClusterSecrets {
        ClusterSecrets::generate("kept").unwrap()
    }

    #[tokio::test]
    async fn a_cluster_keeps_its_client_until_what_it_was_made_from_changes() {
        let clients = KubeClients::default();
        let made = || clients.made.load(Ordering::Relaxed);
        let secrets = secrets();
        let endpoint = KubeEndpoint::url("https://203.0.113.7:6443".to_owned());
        clients.client("c1", &endpoint, &secrets).unwrap();
        clients.client("c1", &endpoint, &secrets).unwrap();
        assert_eq!(made(), 1, "the second call takes the kept client");

        let moved = KubeEndpoint::url("https://203.0.113.8:6443".to_owned());
        clients.client("c1", &moved, &secrets).unwrap();
        assert_eq!(made(), 2, "a control plane at a new address gets a new client");
        let mut named = moved.clone();
        named.tls_server_name = Some("kubernetes".to_owned());
        clients.client("c1", &named, &secrets).unwrap();
        assert_eq!(made(), 3, "so does another TLS server name");

        let mut rotated = secrets.clone();
        rotated.api_token = "another".to_owned();
        clients.client("c1", &named, &rotated).unwrap();
        clients.client("c1", &named, &rotated).unwrap();
        assert_eq!(made(), 4, "and another token, kept from then on");
        clients.client("c2", &named, &rotated).unwrap();
        assert_eq!(made(), 5, "each cluster has its own");
        assert_eq!(clients.kept.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn deleted_clusters_leave_at_most_a_bounded_number_of_clients() {
        let clients = KubeClients::default();
        let secrets = secrets();
        let endpoint = KubeEndpoint::url("https://203.0.113.7:6443".to_owned());
        for n in 0..KEPT_AT_MOST + 3 {
            clients.client(&format!("c{n}"), &endpoint, &secrets).unwrap();
        }
        assert!(clients.kept.lock().unwrap().len() <= KEPT_AT_MOST);
        assert!(format!("{clients:?}").starts_with("KubeClients { kept: "));
    }
}
