//! A hosted API's keys: the bearer token its users present, the key that seals every credential
//! and cluster secret in its database, and the CA its TLS certificate is issued from. They live in
//! the hosting provider's secret store (AWS Secrets Manager, GCP Secret Manager) as one secret,
//! readable by the VM's identity, and never in the checkpoint bucket beside the database they
//! unseal:
//!
//! - `api.deploy` puts them there (`store_keys`): new ones, or those the secret already holds (a
//!   redeploy on the same bucket restores a database sealed with them), or, once, those an older
//!   deploy left in the bucket, which the step then deletes from it;
//! - the VM reads them as itself at every start ([`read`]) and writes them to its own disk only;
//! - the deployer keeps the token, sealed, and the CA's certificate (what the CLI pins);
//! - `api.remove` deletes them with the bucket, and keeps them while it keeps the bucket (the
//!   secret is named after the bucket, so a later deploy on it finds them).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rand::RngCore as _;
use serde::{Deserialize, Serialize};

use crate::cloud::ProviderKind;
use crate::hosting::identity::ApiIdentity;
use crate::providers;

/// The keys, open.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeys {
    /// The bearer token.
    pub token: String,
    /// The sealing key: 32 bytes, base64 (what `secret.key` holds).
    pub sealing_key: String,
    /// The CA's certificate (PEM): what clients pin.
    pub ca_cert_pem: String,
    /// The CA's private key (PEM).
    pub ca_key_pem: String,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKeys(<secret>)")
    }
}

impl ApiKeys {
    /// A fresh token, sealing key and CA for the API named `api`.
    pub fn generate(api: &str) -> Result<Self, rcgen::Error> {
        let identity = ApiIdentity::generate(api)?;
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Ok(Self {
            token: identity.token,
            sealing_key: STANDARD.encode(key),
            ca_cert_pem: identity.ca_cert_pem,
            ca_key_pem: identity.ca_key_pem,
        })
    }

    /// The token and CA (what the deployer seals in its record).
    pub fn identity(&self) -> ApiIdentity {
        ApiIdentity {
            token: self.token.clone(),
            ca_cert_pem: self.ca_cert_pem.clone(),
            ca_key_pem: self.ca_key_pem.clone(),
        }
    }

    /// The secret's text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The keys in secret `secret`'s text.
    pub fn from_json(text: &str, secret: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|err| {
            format!("secret {secret} does not hold an API's keys ({err}); delete it only if the API's bucket goes too")
        })
    }
}

/// The secret's name in the hosting provider's store for the API whose state is in `bucket` (its
/// `s3://` or `gs://` URL): named after the bucket, not the deploy, so that a redeploy on the same
/// bucket finds the keys its database was sealed with. AWS Secrets Manager allows `/`
/// (`anycloud/keys-HASH`), GCP Secret Manager letters, digits, `-` and `_` (`anycloud-keys-HASH`),
/// where HASH is the first 16 hex digits of the URL's SHA-256.
pub fn secret_name(hosting: ProviderKind, bucket: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(bucket.as_bytes());
    let hash: String = digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect();
    match hosting {
        ProviderKind::Aws => format!("anycloud/keys-{hash}"),
        _ => format!("anycloud-keys-{hash}"),
    }
}

/// Reads the keys in `secret` (an ARN on AWS, `projects/P/secrets/NAME` on GCP) as this VM, from
/// the store of `hosting`, at `endpoint` when given (the hosting credential's override).
pub async fn read(hosting: ProviderKind, secret: &str, endpoint: Option<&str>) -> Result<ApiKeys, String> {
    ApiKeys::from_json(&providers::read_secret_as_vm(hosting, secret, endpoint).await?, secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_travel_as_json_and_never_show_in_debug() {
        let keys = ApiKeys::generate("team-api").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(STANDARD.decode(&keys.sealing_key).map(|key| key.len()), Ok(32));
        assert_eq!(ApiKeys::from_json(&keys.to_json(), "s"), Ok(keys.clone()));
        let shown = format!("{keys:?}");
        assert!(!shown.contains(&keys.token) && !shown.contains(&keys.sealing_key), "{shown}");
        assert!(ApiKeys::from_json("{}", "anycloud/api-1/keys").unwrap_err().contains("anycloud/api-1/keys"));
        let aws = secret_name(ProviderKind::Aws, "s3://team-api-state/");
        assert!(aws.starts_with("anycloud/keys-") && aws.len() == "anycloud/keys-".len() + 16, "{aws}");
        assert_eq!(secret_name(ProviderKind::Gcp, "s3://team-api-state/"), aws.replace('/', "-"));
        assert_ne!(secret_name(ProviderKind::Aws, "s3://other/"), aws);
    }
}
