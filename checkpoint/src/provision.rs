//! The bucket a hosted API keeps its state in, as `api.deploy` makes it and `api delete
//! --delete-bucket` removes it: what making it found, and how long old versions are kept. The
//! GCS calls are in `provision_gcs.rs`.

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
