//! The key of a hosted API's checkpoint bucket when the bucket is on another provider than the
//! API's VM (`api serve --checkpoint-storage-credentials S` of another provider than
//! `--credentials C`, as the spec's Placement table allows).
//!
//! The VM's own identity (an EC2 instance profile, a GCE service account) reaches only its own
//! provider, so the storage credential's key has to travel to the VM, and not in its user-data,
//! which others in the account may read. `api.deploy` puts it in the hosting provider's secret
//! store (`store_storage_secret`: AWS Secrets Manager, GCP Secret Manager) readable by the VM's
//! identity alone, and names the secret in the VM's unit (`--checkpoint-storage-secret`); the
//! hosted API reads it as itself at start ([`read`]), before it restores anything.
//! `api.remove` and the deploy's unwind delete it.

use anycloud_checkpoint::StoreKind;
use serde::{Deserialize, Serialize};

use crate::cloud::ProviderKind;
use crate::db::hosted_apis::HostedApi;

/// What the secret holds: the storage credential's key, as JSON.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "provider", rename_all = "lowercase")]
pub enum StorageKey {
    /// An S3 bucket's access key.
    Aws {
        /// The access key id.
        access_key_id: String,
        /// The secret access key.
        secret_access_key: String,
    },
    /// A GCS bucket's service-account key file (JSON).
    Gcp {
        /// The key file's text.
        service_account_json: String,
    },
}

impl std::fmt::Debug for StorageKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Aws { access_key_id, .. } => write!(f, "StorageKey::Aws({access_key_id}, <secret>)"),
            Self::Gcp { .. } => f.write_str("StorageKey::Gcp(<service-account key>)"),
        }
    }
}

impl StorageKey {
    /// The key of a credential of `provider` (its public identity and its sealed secret).
    pub fn of(provider: ProviderKind, identity: &str, secret: String) -> Result<Self, String> {
        match provider {
            ProviderKind::Aws => Ok(Self::Aws { access_key_id: identity.to_owned(), secret_access_key: secret }),
            ProviderKind::Gcp => Ok(Self::Gcp { service_account_json: secret }),
            ProviderKind::Sim => Err("the simulated cloud has no buckets".to_owned()),
        }
    }

    /// The secret's text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The secret's name in the hosting provider's store, for the API of owner `api-ID`: AWS
/// Secrets Manager allows `/` (`anycloud/api-ID/checkpoint-storage`), GCP Secret Manager
/// letters, digits, `-` and `_` (`anycloud-api-ID-checkpoint-storage`).
pub fn secret_name(hosting: ProviderKind, owner: &str) -> String {
    match hosting {
        ProviderKind::Aws => format!("anycloud/{owner}/checkpoint-storage"),
        _ => format!("anycloud-{owner}-checkpoint-storage"),
    }
}

/// Whether `api`'s bucket is on another provider's store than its VM, so that its key must travel
/// through a secret.
pub fn travels(api: &HostedApi) -> bool {
    let store = anycloud_checkpoint::BucketUrl::parse(&api.bucket).map(|url| url.store);
    !matches!(
        (api.provider, store),
        (ProviderKind::Aws, Ok(StoreKind::S3)) | (ProviderKind::Gcp, Ok(StoreKind::Gcs)) | (_, Err(_))
    )
}

/// Reads the key in `secret` (an ARN on AWS, `projects/P/secrets/NAME` on GCP) as this VM, from
/// the store of `hosting`, at `endpoint` when given (the hosting credential's override).
pub async fn read(hosting: ProviderKind, secret: &str, endpoint: Option<&str>) -> Result<StorageKey, String> {
    let text = crate::providers::read_secret_as_vm(hosting, secret, endpoint).await?;
    serde_json::from_str(&text)
        .map_err(|err| format!("secret {secret} does not hold a checkpoint-storage key ({err}); deploy the API again"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_travels_as_json_and_never_shows_in_debug() {
        let key =
            StorageKey::of(ProviderKind::Aws, "AKIAEXAMPLE", "very-secret".into()).unwrap_or_else(|e| panic!("{e}"));
        let back: StorageKey = serde_json::from_str(&key.to_json()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, key);
        assert!(!format!("{key:?}").contains("very-secret"));
        let gcp = StorageKey::of(ProviderKind::Gcp, "sa@p.iam", "{\"private_key\":\"K\"}".into())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!format!("{gcp:?}").contains("private_key"));
    }

    #[test]
    fn each_store_gets_a_name_it_accepts() {
        assert_eq!(secret_name(ProviderKind::Aws, "api-0a1b"), "anycloud/api-0a1b/checkpoint-storage");
        assert_eq!(secret_name(ProviderKind::Gcp, "api-0a1b"), "anycloud-api-0a1b-checkpoint-storage");
    }
}
