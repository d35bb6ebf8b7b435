//! A bucket as the checkpoint needs it: read an object, create one only if its key is free,
//! replace one only if nobody changed it since it was read, delete. The two conditional writes
//! are what fence two APIs on one bucket (see `layout.rs`); both stores have them natively:
//!
//! | operation | S3 (aws-sdk-s3)               | GCS (google-cloud-storage)  |
//! |-----------|-------------------------------|-----------------------------|
//! | create    | `PutObject` `If-None-Match: *` | `ifGenerationMatch=0`       |
//! | replace   | `PutObject` `If-Match: ETAG`   | `ifGenerationMatch=GEN`     |
//! | version   | the object's ETag              | the object's generation     |

use bytes::Bytes;

/// Where a hosted API's state lives: `s3://BUCKET[/PREFIX]` or `gs://BUCKET[/PREFIX]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketUrl {
    /// Which store.
    pub store: StoreKind,
    /// The bucket's name.
    pub bucket: String,
    /// The key prefix under which every object lives: empty, or ending in `/`.
    pub prefix: String,
}

/// The object stores a checkpoint can live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// Amazon S3 (or an S3-compatible endpoint).
    S3,
    /// Google Cloud Storage.
    Gcs,
}

impl BucketUrl {
    /// Parses `s3://bucket/prefix` or `gs://bucket/prefix`; the error says what a good one looks like.
    pub fn parse(url: &str) -> Result<Self, String> {
        let (store, rest) = if let Some(rest) = url.strip_prefix("s3://") {
            (StoreKind::S3, rest)
        } else if let Some(rest) = url.strip_prefix("gs://") {
            (StoreKind::Gcs, rest)
        } else {
            return Err(format!(
                "checkpoint bucket `{url}` names no store: write s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX]"
            ));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_name = (3..=63).contains(&bucket.len())
            && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
            && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !valid_name {
            return Err(format!(
                "checkpoint bucket name `{bucket}` is not a valid bucket name: 3 to 63 lowercase letters, digits, \
                 `-` or `.`, starting and ending with a letter or digit"
            ));
        }
        let prefix = prefix.trim_matches('/');
        let prefix = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
        Ok(Self { store, bucket: bucket.to_owned(), prefix })
    }
}

impl std::fmt::Display for BucketUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = match self.store {
            StoreKind::S3 => "s3",
            StoreKind::Gcs => "gs",
        };
        write!(f, "{scheme}://{}/{}", self.bucket, self.prefix)
    }
}

/// An object's version as its store names it (S3: the ETag; GCS: the generation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version(pub String);

/// Why a bucket call failed.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// A conditional write lost: the key exists (create) or changed since it was read (replace).
    #[error("precondition failed on `{0}`: another writer got there first")]
    Conflict(String),
    /// The bucket does not exist or these credentials may not use it.
    #[error("{0}")]
    Refused(String),
    /// Anything else (network, throttling, 5xx): worth retrying.
    #[error("{0}")]
    Failed(String),
}

/// The calls the checkpoint makes. Keys are full object names (the prefix already applied).
#[async_trait::async_trait]
pub trait Bucket: Send + Sync + 'static {
    /// Reads an object and its version; `None` if there is no such object.
    async fn get(&self, key: &str) -> Result<Option<(Bytes, Version)>, BucketError>;
    /// Writes an object only if no object has this key; [`BucketError::Conflict`] otherwise.
    async fn create(&self, key: &str, body: Bytes) -> Result<Version, BucketError>;
    /// Replaces an object only if it is still at `version`; [`BucketError::Conflict`] otherwise.
    async fn replace(&self, key: &str, body: Bytes, version: &Version) -> Result<Version, BucketError>;
    /// Deletes objects; a key that is already gone is not an error.
    async fn delete(&self, keys: &[String]) -> Result<(), BucketError>;
}

/// An error and its causes, `: `-separated, each cause once (the SDKs nest messages that
/// repeat their source's).
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_urls_name_a_store_a_bucket_and_a_prefix() {
        let url = BucketUrl::parse("s3://team-api-state").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!((url.store, url.bucket.as_str(), url.prefix.as_str()), (StoreKind::S3, "team-api-state", ""));
        let url = BucketUrl::parse("gs://b-1/apis/team/").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!((url.store, url.bucket.as_str(), url.prefix.as_str()), (StoreKind::Gcs, "b-1", "apis/team/"));
        assert_eq!(url.to_string(), "gs://b-1/apis/team/");
        for bad in ["team-api-state", "s3://", "s3://UPPER", "s3://ab", "gs://-x-", "http://x/y"] {
            assert!(BucketUrl::parse(bad).is_err(), "{bad} was accepted");
        }
    }
}
