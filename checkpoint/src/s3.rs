//! The bucket on Amazon S3 (or an S3-compatible endpoint), through aws-sdk-s3.
//!
//! Credentials are the given keys, or else the SDK's default chain: environment, profile, and on
//! an EC2 VM its instance profile (IMDSv2), which is how a hosted API reaches its bucket without
//! a key in its user-data.
//!
//! Every call names the account the credentials belong to (STS `GetCallerIdentity`, asked once)
//! as the bucket's `ExpectedBucketOwner`: S3 refuses (403) a call on a bucket of another account,
//! so a bucket someone else made under the name, and opened to these credentials, is never read
//! or written (bucket sniping). A presigned URL cannot carry the header (its holder sends only
//! the URL); the object it reads was written under the check.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use bytes::Bytes;

use crate::bucket::{Bucket, BucketError, BucketUrl, Version, error_chain};

/// A bucket on S3.
#[derive(Clone, Debug)]
pub struct S3Bucket {
    client: aws_sdk_s3::Client,
    sts: aws_sdk_sts::Client,
    bucket: String,
    /// The account of these credentials, once asked: the bucket's expected owner.
    owner: std::sync::Arc<tokio::sync::OnceCell<String>>,
}

/// How to reach S3.
#[derive(Clone, Debug, Default)]
pub struct S3Access {
    /// Access key id and secret; `None`: the SDK's default chain.
    pub keys: Option<(String, String)>,
    /// The region (default: the chain's, else us-east-1).
    pub region: Option<String>,
    /// Another endpoint than AWS's (path-style addressing is used there).
    pub endpoint: Option<String>,
}

impl S3Bucket {
    /// A client of `url`'s bucket.
    pub async fn new(url: &BucketUrl, access: &S3Access) -> Self {
        use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(region) = &access.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some((id, secret)) = &access.keys {
            loader = loader.credentials_provider(Credentials::new(id, secret, None, None, "anycloud"));
        }
        let shared = loader.load().await;
        let mut config = aws_sdk_s3::config::Builder::from(&shared);
        let mut sts = aws_sdk_sts::config::Builder::from(&shared);
        if shared.region().is_none() {
            config = config.region(Region::new("us-east-1"));
            sts = sts.region(aws_sdk_sts::config::Region::new("us-east-1"));
        }
        if let Some(endpoint) = &access.endpoint {
            config = config.endpoint_url(endpoint).force_path_style(true);
            sts = sts.endpoint_url(endpoint);
        }
        Self {
            client: aws_sdk_s3::Client::from_conf(config.build()),
            sts: aws_sdk_sts::Client::from_conf(sts.build()),
            bucket: url.bucket.clone(),
            owner: std::sync::Arc::default(),
        }
    }

    /// The account the bucket must belong to: the one of these credentials (STS
    /// `GetCallerIdentity`, which needs no permission), asked once.
    pub async fn expected_owner(&self) -> Result<&str, BucketError> {
        let owner = self
            .owner
            .get_or_try_init(|| async {
                let identity = self.sts.get_caller_identity().send().await.map_err(|err| {
                    let why = match (err.code(), err.message()) {
                        (Some(code), Some(message)) => format!("{code}: {message}"),
                        _ => error_chain(&err),
                    };
                    let what = format!(
                        "finding the account of the credentials of S3 bucket `{}` (STS GetCallerIdentity), which \
                         must own it: {why}",
                        self.bucket
                    );
                    match err.code() {
                        Some("InvalidClientTokenId" | "SignatureDoesNotMatch" | "AccessDenied" | "ExpiredToken") => {
                            BucketError::Refused(format!("{what}; check the credentials"))
                        }
                        _ => BucketError::Failed(what),
                    }
                })?;
                identity.account().filter(|account| !account.is_empty()).map(str::to_owned).ok_or_else(|| {
                    BucketError::Failed(format!(
                        "STS GetCallerIdentity named no account for the credentials of S3 bucket `{}`",
                        self.bucket
                    ))
                })
            })
            .await?;
        Ok(owner)
    }

    /// The SDK client, for the calls beyond the checkpoint's (creating the bucket).
    pub fn client(&self) -> &aws_sdk_s3::Client {
        &self.client
    }

    /// A presigned URL that lets its holder `GET` object `key` (and nothing else) until `ttl`
    /// has passed, signed (SigV4, query string) with this client's keys
    /// (<https://docs.aws.amazon.com/AmazonS3/latest/userguide/ShareObjectPreSignedURL.html>).
    pub async fn presigned_get_url(&self, key: &str, ttl: std::time::Duration) -> Result<String, BucketError> {
        let config = aws_sdk_s3::presigning::PresigningConfig::expires_in(ttl)
            .map_err(|err| BucketError::Refused(format!("presigning `s3://{}/{key}`: {err}", self.bucket)))?;
        let request =
            self.client.get_object().bucket(&self.bucket).key(key).presigned(config).await.map_err(|err| {
                BucketError::Failed(format!("presigning `s3://{}/{key}`: {}", self.bucket, error_chain(&err)))
            })?;
        Ok(request.uri().to_owned())
    }

    /// The bucket's name.
    pub fn name(&self) -> &str {
        &self.bucket
    }

    fn failed<E, R>(&self, key: &str, err: SdkError<E, R>) -> BucketError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        let code = err.code().map(str::to_owned);
        let detail = match (&code, err.message()) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code.clone(),
            _ => error_chain(&err),
        };
        match code.as_deref() {
            Some("PreconditionFailed" | "ConditionalRequestConflict") => BucketError::Conflict(key.to_owned()),
            Some("NoSuchBucket") => BucketError::Refused(format!(
                "S3 bucket `{}` does not exist (or is in another region); create it or name another",
                self.bucket
            )),
            Some("AccessDenied" | "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "AllAccessDisabled") => {
                BucketError::Refused(format!(
                    "S3 refused access to `{}/{key}` ({detail}); check the credentials' permissions on the bucket, \
                     and that it is this account's (every call names it as the bucket's expected owner)",
                    self.bucket
                ))
            }
            _ => BucketError::Failed(format!("S3 `{}/{key}`: {detail}", self.bucket)),
        }
    }
}

#[async_trait::async_trait]
impl Bucket for S3Bucket {
    async fn get(&self, key: &str) -> Result<Option<(Bytes, Version)>, BucketError> {
        let owner = self.expected_owner().await?;
        let read = self.client.get_object().bucket(&self.bucket).expected_bucket_owner(owner).key(key);
        let answer = match read.send().await {
            Ok(answer) => answer,
            Err(err) if err.as_service_error().is_some_and(|e| e.is_no_such_key()) => return Ok(None),
            Err(err) => return Err(self.failed(key, err)),
        };
        let version = Version(answer.e_tag().unwrap_or_default().to_owned());
        let body = answer
            .body
            .collect()
            .await
            .map_err(|err| BucketError::Failed(format!("S3 `{}/{key}`: reading the body: {err}", self.bucket)))?;
        Ok(Some((body.into_bytes(), version)))
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, BucketError> {
        let owner = self.expected_owner().await?;
        let put =
            self.client.put_object().bucket(&self.bucket).expected_bucket_owner(owner).key(key).if_none_match("*");
        let answer = put.body(ByteStream::from(body)).send().await.map_err(|err| self.failed(key, err))?;
        Ok(Version(answer.e_tag().unwrap_or_default().to_owned()))
    }

    async fn replace(&self, key: &str, body: Bytes, version: &Version) -> Result<Version, BucketError> {
        let owner = self.expected_owner().await?;
        let put =
            self.client.put_object().bucket(&self.bucket).expected_bucket_owner(owner).key(key).if_match(&version.0);
        let answer = put.body(ByteStream::from(body)).send().await.map_err(|err| self.failed(key, err))?;
        Ok(Version(answer.e_tag().unwrap_or_default().to_owned()))
    }

    async fn delete(&self, keys: &[String]) -> Result<(), BucketError> {
        if keys.is_empty() {
            return Ok(());
        }
        let owner = self.expected_owner().await?;
        for chunk in keys.chunks(1000) {
            let objects = chunk
                .iter()
                .map(|key| ObjectIdentifier::builder().key(key).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| BucketError::Failed(format!("S3 delete: {err}")))?;
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|err| BucketError::Failed(format!("S3 delete: {err}")))?;
            let first = chunk.first().map(String::as_str).unwrap_or_default();
            let answer = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .expected_bucket_owner(owner)
                .delete(delete)
                .send()
                .await
                .map_err(|err| self.failed(first, err))?;
            if let Some(failure) = answer.errors().first() {
                return Err(BucketError::Failed(format!(
                    "S3 delete of `{}/{}`: {}",
                    self.bucket,
                    failure.key().unwrap_or_default(),
                    failure.message().unwrap_or_default()
                )));
            }
        }
        Ok(())
    }
}
