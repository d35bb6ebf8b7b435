//! A hosted API's checkpoint bucket as its deployer reaches it: through the storage credential
//! (`--checkpoint-storage-credentials`, by default the hosting one), to make it, seed the API's
//! identity in it, and delete it when asked.

use anycloud_checkpoint::provision::Made;
use anycloud_checkpoint::{Bucket, BucketError, BucketUrl, GcsBucket, S3Access, S3Bucket, StoreKind};
use anycloud_engine::StepError;

use crate::cloud::ProviderKind;
use crate::db::credentials;
use crate::db::hosted_apis::HostedApi;
use crate::workflows::deps::{AccountError, Deps};

/// The bucket, with the client of its store.
pub enum ApiBucket {
    /// On S3.
    S3(S3Bucket),
    /// On GCS.
    Gcs(Box<GcsBucket>),
}

/// Where the storage credential says the bucket's store is: its endpoint override (a private
/// endpoint; moto or the fake GCS in tests) and, for S3, the bucket's region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreAccess {
    /// The store's endpoint, when not the public one.
    pub endpoint: Option<String>,
    /// The bucket's region (S3).
    pub region: Option<String>,
}

/// What a bucket failure means to a step: a refusal stays (terminal), the rest may pass.
pub fn step_error(err: BucketError) -> StepError {
    match err {
        BucketError::Refused(message) => StepError::terminal_msg(message),
        BucketError::Conflict(_) | BucketError::Failed(_) => StepError::retryable_msg(err.to_string()),
    }
}

impl ApiBucket {
    /// Opens the bucket of `api` with its storage credential.
    pub async fn open(deps: &Deps, api: &HostedApi) -> Result<(Self, StoreAccess), StepError> {
        let name = &api.storage_credential;
        let (credential, secret) = match credentials::open(&deps.db, &deps.sealer, name).await {
            Ok(Some(found)) => found,
            Ok(None) => return Err(AccountError::NoCredential(name.clone()).into()),
            Err(err) => return Err(AccountError::Unreadable(name.clone(), err).into()),
        };
        let url = BucketUrl::parse(&api.bucket).map_err(StepError::terminal_msg)?;
        deps.clouds.check_endpoint(credential.cloud_ref())?;
        let endpoint = credential.public.endpoint.clone();
        match (credential.provider, url.store) {
            (ProviderKind::Aws, StoreKind::S3) => {
                // The bucket lives where the VM does when AWS hosts it too.
                let region = if api.provider == ProviderKind::Aws {
                    api.region.clone()
                } else {
                    credential.public.region.clone().unwrap_or_else(|| "us-east-1".to_owned())
                };
                let access = S3Access {
                    keys: Some((credential.public.identity.clone(), secret)),
                    region: Some(region.clone()),
                    endpoint: endpoint.clone(),
                };
                Ok((Self::S3(S3Bucket::new(&url, &access).await), StoreAccess { endpoint, region: Some(region) }))
            }
            (ProviderKind::Gcp, StoreKind::Gcs) => {
                let bucket = GcsBucket::new(&url, Some(&secret), endpoint.as_deref()).await.map_err(step_error)?;
                Ok((Self::Gcs(Box::new(bucket)), StoreAccess { endpoint, region: None }))
            }
            (provider, _) => Err(StepError::terminal_msg(format!(
                "checkpoint bucket {url} cannot be reached with credential `{name}` of provider {provider}"
            ))),
        }
    }

    /// The object calls the checkpoint makes.
    pub fn objects(&self) -> &dyn Bucket {
        match self {
            Self::S3(bucket) => bucket,
            Self::Gcs(bucket) => bucket.as_ref(),
        }
    }

    /// Creates the bucket unless it is there, versioned and private.
    pub async fn ensure(&self, region: Option<&str>) -> Result<Made, BucketError> {
        match self {
            Self::S3(bucket) => bucket.ensure(region.unwrap_or("us-east-1")).await,
            Self::Gcs(bucket) => bucket.ensure().await,
        }
    }

    /// A URL that lets its holder GET object `key` and nothing else, until `ttl` has passed (S3:
    /// presigned with the storage credential's keys; GCS: a V4 signed URL, signed with its
    /// service account's key).
    pub async fn signed_get(&self, key: &str, ttl: std::time::Duration) -> Result<String, BucketError> {
        match self {
            Self::S3(bucket) => bucket.presigned_get_url(key, ttl).await,
            Self::Gcs(bucket) => bucket.signed_get_url(key, ttl).await,
        }
    }

    /// Lets `member` (the hosted API's VM identity, as [`crate::cloud::Cloud::bucket_member`]
    /// names it) read, write, delete and list the bucket's objects and read its metadata, by a
    /// binding on the bucket itself; on S3 the identity's own policy names the bucket instead.
    pub async fn let_vm_use(&self, member: &str) -> Result<(), BucketError> {
        match self {
            Self::S3(_) => Ok(()),
            Self::Gcs(bucket) => bucket.let_member_use(member, &crate::providers::gcp_iam::BUCKET_ROLES).await,
        }
    }

    /// Removes what [`ApiBucket::let_vm_use`] bound; a bucket that is gone is success.
    pub async fn forget_vm(&self, member: &str) -> Result<(), BucketError> {
        match self {
            Self::S3(_) => Ok(()),
            Self::Gcs(bucket) => bucket.forget_member(member).await,
        }
    }

    /// Deletes every object version and the bucket.
    pub async fn destroy(&self) -> Result<usize, BucketError> {
        match self {
            Self::S3(bucket) => bucket.destroy().await,
            Self::Gcs(bucket) => bucket.destroy().await,
        }
    }
}
