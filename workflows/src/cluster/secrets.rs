//! A cluster's secrets: k3s's server token, the agent token workers join with, the token the API
//! talks to Kubernetes with, and the cluster's own certificate authority. They are sealed
//! (XChaCha20-Poly1305) before they are stored, and never appear in a step's output, a log line
//! or `inspect`. Only the control plane's user-data carries the server token, the API token and
//! the CA key; a worker's carries the agent token and the CA's hash (`user_data`).

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::db::clusters;
use crate::secrets::{SecretBox, SecretError};

/// The secrets, open.
#[derive(Clone, Serialize, Deserialize)]
pub struct ClusterSecrets {
    /// k3s's server token (`--token`, `K3S_TOKEN` on the server): what a *server* joins with. Its
    /// holder can fetch the cluster's bootstrap data, CA keys included, so it never leaves the
    /// control plane. Stored as `join_token`, its name before agent tokens.
    #[serde(rename = "join_token")]
    pub server_token: String,
    /// k3s's agent token (`--agent-token` on the server): what a worker joins with. It lets its
    /// holder join as an agent and nothing more. Empty in the secrets of clusters made before
    /// workers had one (`cluster.create` v4 and older), which launch no new worker.
    #[serde(default)]
    pub agent_token: String,
    /// A bearer token with cluster-admin rights, for the API's own Kubernetes calls.
    pub api_token: String,
    /// The cluster CA's certificate (PEM); the Kubernetes server's certificate chains to it.
    pub ca_cert_pem: String,
    /// The cluster CA's private key (PEM).
    pub ca_key_pem: String,
}

impl std::fmt::Debug for ClusterSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecrets(<sealed>)")
    }
}

/// Why secrets could not be made or opened.
#[derive(Debug, thiserror::Error)]
pub enum ClusterSecretsError {
    /// The CA could not be generated.
    #[error("generating the cluster CA")]
    Ca(#[from] rcgen::Error),
    /// The sealed secrets did not open (another secret key?).
    #[error("opening the cluster's secrets")]
    Open(#[from] SecretError),
    /// The opened secrets are not what was sealed.
    #[error("decoding the cluster's secrets")]
    Decode(#[from] serde_json::Error),
}

impl ClusterSecrets {
    /// Fresh random tokens and a new CA named after the cluster.
    pub fn generate(cluster_name: &str) -> Result<Self, ClusterSecretsError> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, format!("anycloud cluster {cluster_name} CA"));
        let cert = params.self_signed(&key)?;
        Ok(Self {
            server_token: random_hex(),
            agent_token: random_hex(),
            api_token: random_hex(),
            ca_cert_pem: cert.pem(),
            ca_key_pem: key.serialize_pem(),
        })
    }

    /// Seals the secrets for storing in cluster `cluster_id`'s row.
    pub fn seal(&self, sealer: &SecretBox, cluster_id: &str) -> Result<String, ClusterSecretsError> {
        Ok(sealer.seal(clusters::SECRETS.place(cluster_id), &serde_json::to_vec(self)?))
    }

    /// Opens the secrets stored in cluster `cluster_id`'s row.
    pub fn open(sealer: &SecretBox, cluster_id: &str, sealed: &str) -> Result<Self, ClusterSecretsError> {
        Ok(serde_json::from_slice(&sealer.open(clusters::SECRETS.place(cluster_id), sealed)?)?)
    }
}

pub(crate) fn random_hex() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn sealer() -> SecretBox {
        SecretBox::load_or_create(tempfile::tempdir().unwrap().path()).unwrap()
    }

    #[test]
    fn fresh_secrets_have_distinct_server_agent_and_api_tokens() {
        let secrets = ClusterSecrets::generate("c1").unwrap();
        let tokens = [&secrets.server_token, &secrets.agent_token, &secrets.api_token];
        assert!(tokens.iter().all(|token| token.len() == 48), "{:?}", tokens.map(|t| t.len()));
        assert!(tokens[0] != tokens[1] && tokens[1] != tokens[2] && tokens[0] != tokens[2]);
        let sealer = sealer();
        let opened = ClusterSecrets::open(&sealer, "c1", &secrets.seal(&sealer, "c1").unwrap()).unwrap();
        assert_eq!((opened.server_token, opened.agent_token), (secrets.server_token, secrets.agent_token));
    }

    /// Secrets sealed before agent tokens (the server token stored as `join_token`) still open, for
    /// the clusters made then: their API token and CA work, and they have no agent token.
    #[test]
    fn secrets_sealed_before_agent_tokens_still_open() {
        let sealer = sealer();
        let old = serde_json::json!({
            "join_token": "j", "api_token": "a", "ca_cert_pem": "c", "ca_key_pem": "k",
        });
        let sealed = sealer.seal(clusters::SECRETS.place("c1"), old.to_string().as_bytes());
        let opened = ClusterSecrets::open(&sealer, "c1", &sealed).unwrap();
        assert_eq!((opened.server_token.as_str(), opened.agent_token.as_str()), ("j", ""));
        assert_eq!((opened.api_token.as_str(), opened.ca_cert_pem.as_str()), ("a", "c"));
    }
}
