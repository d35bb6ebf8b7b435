//! The Anycloud domain: what the API keeps (credentials, clusters and their VMs, deployments),
//! what users can do with it, and the workflows that act on the clouds, written on
//! `anycloud-engine`. No HTTP server code lives here. Its folders, from the request down:
//!
//! - [`wire`]: the request and answer types the API and the CLI exchange.
//! - [`operations`]: one function per user-visible operation (save a credential, create a
//!   cluster, ...). Each validates, locks, submits its run and writes its records in one
//!   transaction, and answers with a type of [`wire`] or a [`refusal`].
//! - [`workflows`]: the workflows, one file each, named after their kind, [`workflows::registry`]
//!   that registers them all, what their steps use ([`workflows::deps`]) and their retry
//!   policies ([`workflows::retry`]).
//! - [`cluster`]: what a cluster is made of at its provider: where its VMs go
//!   ([`cluster::sides`]), its network ([`cluster::network`]), its sealed secrets
//!   ([`cluster::secrets`]) and what its VMs run when they boot ([`cluster::user_data`]).
//! - [`kubernetes`]: what the workflows ask of a cluster's Kubernetes API, and the objects they apply.
//! - [`watches`]: the API's watches of every ready cluster, which wake the runs waiting on what
//!   changed.
//! - [`hosting`]: a hosted API: its binary, bucket, identity, keys and boot script.
//! - [`db`]: the domain's tables and every SQL statement on them.
//! - [`providers`]: the clouds behind [`cloud::Cloud`] (AWS, GCP), re-exported from their own crate,
//!   `anycloud-providers`, the only one that names a cloud SDK (the simulated cloud is its own
//!   crate and plugs in through [`providers::SimulatedCloud`]).
//! - Beside them: [`secrets`] (what is sealed at rest), [`workload`] (checking a workload's
//!   spec), [`names`], [`refusal`] and [`seams`] (what tests may reach, never a release binary).

pub mod cluster;
pub mod db;
pub mod hosting;
pub mod kubernetes;
pub mod names;
pub mod operations;
pub mod refusal;
pub mod seams;
pub mod secrets;
pub mod watches;
pub mod wire;
pub mod workflows;
pub mod workload;

#[cfg(test)]
mod test_support;

/// The clouds behind [`cloud::Cloud`], from their own crate (`anycloud-providers`, the only one
/// that names a cloud SDK).
pub use anycloud_providers as providers;
pub use anycloud_providers::cloud;
pub use workflows::registry;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
