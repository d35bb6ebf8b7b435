//! The identity files a deployer puts in the bucket before the API's first start (its token, the
//! CA its TLS certificate is issued from), so that the API restores them like the rest of its
//! state and the deployer already knows them.

use bytes::Bytes;

use crate::CheckpointError;
use crate::bucket::{Bucket, BucketError};
use crate::layout::Layout;
use crate::object::{self, Kind};

/// Writes identity file `name` unless the bucket has it, and answers what the bucket holds: a
/// rerun (or a redeploy on a bucket that already has an API) keeps the first value, which a
/// running API may already use.
pub async fn seed(bucket: &dyn Bucket, layout: &Layout, name: &str, value: &[u8]) -> Result<Bytes, CheckpointError> {
    let key = layout.identity(name);
    match bucket.create(&key, object::seal(Kind::Identity, value)).await {
        Ok(_) => return Ok(Bytes::copy_from_slice(value)),
        Err(BucketError::Conflict(_)) => {}
        Err(err) => return Err(err.into()),
    }
    let (found, _) = bucket
        .get(&key)
        .await?
        .ok_or_else(|| BucketError::Failed(format!("`{key}` was reported present, then missing; try again")))?;
    object::open_as(Kind::Identity, &found).map_err(|damage| CheckpointError::Damaged { key, why: damage.to_string() })
}
