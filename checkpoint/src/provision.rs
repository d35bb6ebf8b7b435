//! The bucket a hosted API keeps its state in, as `api.deploy` makes it and `api delete
//! --delete-bucket` removes it: created if missing (adopted when these credentials already own
//! it), versioned (a damaged object can be put back from an earlier version), closed to the
//! public, with old versions expiring after [`NONCURRENT_DAYS`]. Removal deletes every version
//! first: a versioned bucket cannot be deleted otherwise.

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, BucketLocationConstraint, BucketVersioningStatus,
    CreateBucketConfiguration, Delete, ExpirationStatus, LifecycleRule, LifecycleRuleFilter,
    NoncurrentVersionExpiration, ObjectIdentifier, PublicAccessBlockConfiguration, VersioningConfiguration,
};

use crate::bucket::{BucketError, error_chain};
use crate::s3::S3Bucket;

/// How long a replaced or deleted object's old version is kept.
pub const NONCURRENT_DAYS: i32 = 30;

/// What `ensure` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Made {
    /// The bucket did not exist and was created: removing the API may delete it.
    Created,
    /// It existed and these credentials own it: it is kept when the API is removed.
    Adopted,
}

fn failed<E: ProvideErrorMetadata + std::error::Error + 'static>(bucket: &str, call: &str, err: &E) -> BucketError {
    let detail = match (err.code(), err.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => error_chain(err),
    };
    match err.code() {
        Some("AccessDenied" | "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "AllAccessDisabled") => {
            BucketError::Refused(format!(
                "S3 refused {call} on bucket `{bucket}` ({detail}); check the credential's permissions, and that the \
                 bucket is this account's (every call names it as the expected owner)"
            ))
        }
        Some("InvalidBucketName" | "InvalidLocationConstraint" | "IllegalLocationConstraintException") => {
            BucketError::Refused(format!("S3 refused {call} on bucket `{bucket}`: {detail}"))
        }
        _ => BucketError::Failed(format!("S3 {call} on bucket `{bucket}`: {detail}")),
    }
}

impl S3Bucket {
    /// Creates the bucket in `region` unless these credentials own it already, then makes it
    /// versioned, private and expiring old versions (each call is idempotent, so a retry after a
    /// crash finishes what the first attempt began).
    ///
    /// Every call names the credentials' account as the expected owner: a bucket of that name
    /// in another account, even one open to these credentials, is refused, never adopted.
    pub async fn ensure(&self, region: &str) -> Result<Made, BucketError> {
        let client = self.client();
        let bucket = self.name();
        let owner = self.expected_owner().await?;
        let made = match client.head_bucket().bucket(bucket).expected_bucket_owner(owner).send().await {
            Ok(_) => Made::Adopted,
            Err(err) if err.raw_response().is_some_and(|r| r.status().as_u16() == 403) => {
                return Err(BucketError::Refused(format!(
                    "S3 bucket `{bucket}` exists and is not this account's ({owner}), or these credentials may not use \
                     it (bucket names are global: another account may own it); name another bucket"
                )));
            }
            Err(err) if err.raw_response().is_some_and(|r| r.status().as_u16() == 404) => {
                let mut create = client.create_bucket().bucket(bucket);
                if region != "us-east-1" {
                    create = create.create_bucket_configuration(
                        CreateBucketConfiguration::builder()
                            .location_constraint(BucketLocationConstraint::from(region))
                            .build(),
                    );
                }
                match create.send().await {
                    Ok(_) => Made::Created,
                    Err(err) if err.code() == Some("BucketAlreadyOwnedByYou") => Made::Adopted,
                    Err(err) if err.code() == Some("BucketAlreadyExists") => {
                        return Err(BucketError::Refused(format!(
                            "S3 bucket `{bucket}` belongs to another account (bucket names are global); name another \
                             bucket"
                        )));
                    }
                    Err(err) => return Err(failed(bucket, "CreateBucket", &err)),
                }
            }
            Err(err) => return Err(failed(bucket, "HeadBucket", &err)),
        };
        let block = PublicAccessBlockConfiguration::builder()
            .block_public_acls(true)
            .ignore_public_acls(true)
            .block_public_policy(true)
            .restrict_public_buckets(true)
            .build();
        client
            .put_public_access_block()
            .bucket(bucket)
            .expected_bucket_owner(owner)
            .public_access_block_configuration(block)
            .send()
            .await
            .map_err(|err| failed(bucket, "PutPublicAccessBlock", &err))?;
        let versioning = VersioningConfiguration::builder().status(BucketVersioningStatus::Enabled).build();
        client
            .put_bucket_versioning()
            .bucket(bucket)
            .expected_bucket_owner(owner)
            .versioning_configuration(versioning)
            .send()
            .await
            .map_err(|err| failed(bucket, "PutBucketVersioning", &err))?;
        let rule = LifecycleRule::builder()
            .id("anycloud-old-versions")
            .status(ExpirationStatus::Enabled)
            .filter(LifecycleRuleFilter::builder().prefix("").build())
            .noncurrent_version_expiration(
                NoncurrentVersionExpiration::builder().noncurrent_days(NONCURRENT_DAYS).build(),
            )
            .abort_incomplete_multipart_upload(
                AbortIncompleteMultipartUpload::builder().days_after_initiation(1).build(),
            )
            .build()
            .map_err(|err| BucketError::Failed(format!("S3 lifecycle rule: {err}")))?;
        let lifecycle = BucketLifecycleConfiguration::builder()
            .rules(rule)
            .build()
            .map_err(|err| BucketError::Failed(format!("S3 lifecycle: {err}")))?;
        client
            .put_bucket_lifecycle_configuration()
            .bucket(bucket)
            .expected_bucket_owner(owner)
            .lifecycle_configuration(lifecycle)
            .send()
            .await
            .map_err(|err| failed(bucket, "PutBucketLifecycleConfiguration", &err))?;
        Ok(made)
    }

    /// Deletes every version of every object, then the bucket. A bucket already gone is
    /// success. Answers how many object versions were deleted.
    pub async fn destroy(&self) -> Result<usize, BucketError> {
        let client = self.client();
        let bucket = self.name();
        let owner = self.expected_owner().await?;
        let mut deleted = 0;
        loop {
            let list = client.list_object_versions().bucket(bucket).expected_bucket_owner(owner).max_keys(1000);
            let page = match list.send().await {
                Ok(page) => page,
                Err(err) if err.code() == Some("NoSuchBucket") => return Ok(deleted),
                Err(err) => return Err(failed(bucket, "ListObjectVersions", &err)),
            };
            let versions = page.versions().iter().map(|v| (v.key(), v.version_id()));
            let markers = page.delete_markers().iter().map(|m| (m.key(), m.version_id()));
            let objects = versions
                .chain(markers)
                .filter_map(|(key, version)| {
                    ObjectIdentifier::builder().key(key?).set_version_id(version.map(str::to_owned)).build().ok()
                })
                .collect::<Vec<_>>();
            if objects.is_empty() {
                break;
            }
            deleted += objects.len();
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|err| BucketError::Failed(format!("S3 delete: {err}")))?;
            client
                .delete_objects()
                .bucket(bucket)
                .expected_bucket_owner(owner)
                .delete(delete)
                .send()
                .await
                .map_err(|err| failed(bucket, "DeleteObjects", &err))?;
        }
        match client.delete_bucket().bucket(bucket).expected_bucket_owner(owner).send().await {
            Ok(_) => Ok(deleted),
            Err(err) if err.code() == Some("NoSuchBucket") => Ok(deleted),
            Err(err) => Err(failed(bucket, "DeleteBucket", &err)),
        }
    }
}
