//! A hosted API's SQLite state, kept in a bucket: shipped as it commits, restored on a fresh
//! disk, and fenced so that two APIs never both write it. docs/hosting.md tells the design.

pub mod bucket;
pub mod gcs;

pub use bucket::{Bucket, BucketError, BucketUrl, StoreKind, Version};
pub use gcs::GcsBucket;
