//! A hosted API's SQLite state, kept in a bucket: shipped as it commits, restored on a fresh
//! disk, and fenced so that two APIs never both write it. docs/hosting.md tells the design.
//!
//! ```text
//!  restore()            HEAD ─> generations/G/snapshot + wal/0..n ─> DB + DB-wal on disk;
//!                       seal wal/n+1 (the old writer's next ship fails)
//!  Checkpointer::start  truncate the WAL into DB, upload it as generations/G+1/snapshot,
//!                       move HEAD (if-unchanged: one taker wins)
//!  Checkpointer::flush  every commit so far is in generations/G+1/wal/k
//! ```

pub mod bucket;
mod checkpointer;
pub mod gcs;
mod gcs_iam;
mod gcs_owner;
pub mod identity;
pub mod layout;
pub mod object;
pub mod provision;
mod provision_gcs;
mod restore;
pub mod s3;
pub mod wal;

pub use bucket::{Bucket, BucketError, BucketUrl, StoreKind, Version};
pub use checkpointer::{COMPACT_AFTER, Checkpointer, SHIP_EVERY, Stats};
pub use gcs::GcsBucket;
pub use layout::Layout;
pub use restore::{LocalFiles, Restored, restore};
pub use s3::{S3Access, S3Bucket};

/// Why a checkpoint could not be restored, begun or shipped.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// An object in the bucket is not what was written.
    #[error(
        "checkpoint object `{key}`: {why}. The API does not start from a damaged checkpoint: restore the object \
         from the bucket's earlier versions (the bucket is versioned), or name another bucket"
    )]
    Damaged {
        /// The object.
        key: String,
        /// What is wrong with it.
        why: String,
    },
    /// Another API holds the bucket.
    #[error("{0}")]
    Fenced(String),
    /// The bucket refused or failed a call.
    #[error(transparent)]
    Bucket(#[from] BucketError),
    /// The local disk failed.
    #[error("{0}")]
    Local(String),
}
