//! The bucket of a hosted API on GCS (see `provision.rs` for S3). Placeholder until written.

use crate::bucket::BucketError;
use crate::gcs::GcsBucket;
use crate::provision::Made;

impl GcsBucket {
    /// Creates the bucket unless these credentials own it, versioned and private.
    pub async fn ensure(&self) -> Result<Made, BucketError> {
        Err(BucketError::Refused("creating a GCS checkpoint bucket is not implemented yet".to_owned()))
    }

    /// Deletes every object generation, then the bucket.
    pub async fn destroy(&self) -> Result<usize, BucketError> {
        Err(BucketError::Refused("deleting a GCS checkpoint bucket is not implemented yet".to_owned()))
    }
}
