//! The Kubernetes clients the API keeps, one per cluster. A client keeps its connections to the
//! cluster's API open (hyper's pool), so a job's checks, a rollout's polls and a log read reuse a
//! TLS connection instead of making one each: with a thousand jobs running on the simulated
//! cluster, a new client per check put 9 % of the run's CPU samples in TLS handshakes
//! (docs/benchmarks.md, "Jobs", issue 28's seventh and eighth stops).
//!
//! A kept client serves a cluster only while what it was made from is unchanged: the API's URL
//! and TLS server name, and the cluster's secrets (its CA and API token) as stored, sealed. A
//! control plane at a new address, or new secrets, make a new client, which replaces the old
//! one. The secrets are opened only to make a client: a check on a kept client decrypts nothing.
//! What a client was made from is kept as a SHA-256 digest of the sealed text, so that the
//! token has no copy here beside the client's own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest, Sha256};

use anycloud_engine::StepError;

use crate::cluster::secrets::ClusterSecrets;
use crate::kubernetes::KubeEndpoint;
use crate::kubernetes::client;

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
    /// `endpoint`, with its secrets `sealed` as stored: the kept one if it was made from the same
    /// endpoint and sealed secrets, else a new one from the secrets `open` opens, kept from now on.
    pub fn client(
        &self,
        cluster_id: &str,
        endpoint: &KubeEndpoint,
        sealed: &str,
        open: impl FnOnce() -> Result<ClusterSecrets, StepError>,
    ) -> Result<kube::Client, StepError> {
        let made_from = digest(endpoint, sealed);
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = kept.get(cluster_id)
            && found.made_from == made_from
        {
            return Ok(found.client.clone());
        }
        let client = client::client(endpoint, &open()?).map_err(StepError::terminal)?;
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
fn digest(endpoint: &KubeEndpoint, sealed: &str) -> [u8; 32] {
    let mut hash = Sha256::new();
    let server_name = endpoint.tls_server_name.as_deref().unwrap_or("");
    for part in [endpoint.url.as_str(), server_name, sealed] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// Calls `clients.client` for cluster `id` with secrets sealed as `sealed`, counting in
    /// `opened` the times the secrets were opened.
    fn client(clients: &KubeClients, id: &str, endpoint: &KubeEndpoint, sealed: &str, opened: &Cell<u32>) {
        let open = || {
            opened.set(opened.get() + 1);
            Ok(ClusterSecrets::generate("kept").unwrap())
        };
        clients.client(id, endpoint, sealed, open).unwrap();
    }

    #[tokio::test]
    async fn a_cluster_keeps_its_client_until_what_it_was_made_from_changes() {
        let clients = KubeClients::default();
        let opened = Cell::new(0);
        let made = || clients.made.load(Ordering::Relaxed);
        let endpoint = KubeEndpoint::url("https://203.0.113.7:6443".to_owned());
        client(&clients, "c1", &endpoint, "v2:sealed-1", &opened);
        client(&clients, "c1", &endpoint, "v2:sealed-1", &opened);
        assert_eq!((made(), opened.get()), (1, 1), "the second call takes the kept client, opening nothing");

        let moved = KubeEndpoint::url("https://203.0.113.8:6443".to_owned());
        client(&clients, "c1", &moved, "v2:sealed-1", &opened);
        assert_eq!(made(), 2, "a control plane at a new address gets a new client");
        let mut named = moved.clone();
        named.tls_server_name = Some("kubernetes".to_owned());
        client(&clients, "c1", &named, "v2:sealed-1", &opened);
        assert_eq!(made(), 3, "so does another TLS server name");

        client(&clients, "c1", &named, "v2:sealed-2", &opened);
        client(&clients, "c1", &named, "v2:sealed-2", &opened);
        assert_eq!((made(), opened.get()), (4, 4), "and new secrets, opened once and kept from then on");
        client(&clients, "c2", &named, "v2:sealed-2", &opened);
        assert_eq!(made(), 5, "each cluster has its own");
        assert_eq!(clients.kept.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn secrets_that_do_not_open_make_no_client_and_keep_none() {
        let clients = KubeClients::default();
        let endpoint = KubeEndpoint::url("https://203.0.113.7:6443".to_owned());
        let refused = clients.client("c1", &endpoint, "v2:garbled", || Err(StepError::terminal_msg("does not open")));
        assert!(refused.is_err());
        assert_eq!((clients.made.load(Ordering::Relaxed), clients.kept.lock().unwrap().len()), (0, 0));
    }

    #[tokio::test]
    async fn deleted_clusters_leave_at_most_a_bounded_number_of_clients() {
        let clients = KubeClients::default();
        let opened = Cell::new(0);
        let endpoint = KubeEndpoint::url("https://203.0.113.7:6443".to_owned());
        for n in 0..KEPT_AT_MOST + 3 {
            client(&clients, &format!("c{n}"), &endpoint, "v2:sealed", &opened);
        }
        assert!(clients.kept.lock().unwrap().len() <= KEPT_AT_MOST);
        assert!(format!("{clients:?}").starts_with("KubeClients { kept: "));
    }
}
