//! A cluster's secrets: the token VMs join with, the token the API talks to Kubernetes with, and
//! the cluster's own certificate authority. They are sealed (XChaCha20-Poly1305) before they are
//! stored, and never appear in a step's output, a log line or `inspect`.

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::secrets::{SecretBox, SecretError};

/// The secrets, open.
#[derive(Clone, Serialize, Deserialize)]
pub struct ClusterSecrets {
    /// k3s `--token`: what an agent presents to join.
    pub join_token: String,
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
            join_token: random_hex(),
            api_token: random_hex(),
            ca_cert_pem: cert.pem(),
            ca_key_pem: key.serialize_pem(),
        })
    }

    /// Seals the secrets for storing.
    pub fn seal(&self, sealer: &SecretBox) -> Result<String, ClusterSecretsError> {
        Ok(sealer.seal(&serde_json::to_vec(self)?))
    }

    /// Opens stored secrets.
    pub fn open(sealer: &SecretBox, sealed: &str) -> Result<Self, ClusterSecretsError> {
        Ok(serde_json::from_slice(&sealer.open(sealed)?)?)
    }
}

pub(crate) fn random_hex() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
