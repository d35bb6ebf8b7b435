//! What the workflows ask of a cluster's Kubernetes API, and the objects they apply there. The
//! same calls reach k3s on a real cluster and the simulated cloud's Kubernetes-compatible API.
//!
//! - [`client`]: a kube client for a cluster's API, and the few questions the cluster workflows
//!   ask of it; [`clients`]: the clients kept per cluster, so that calls reuse connections.
//! - [`job`]: a job's `batch/v1` Job, its logs and exec ([`log_cursor`]: resuming a log stream
//!   that broke); [`service`]: a service's Deployment, Service and rollouts; [`secret`]: the
//!   Secrets a deployment's secrets become.
//! - [`pod_wait`]: why a workload's Pod waits, in Kubernetes' words ([`quantity`]: reading CPU
//!   and memory quantities).

pub mod client;
pub mod clients;
pub mod job;
pub mod log_cursor;
pub mod pod_wait;
pub mod quantity;
pub mod secret;
pub mod service;

/// The field manager of every object Anycloud applies.
pub const FIELD_MANAGER: &str = "anycloud";
/// The name of a workload's one container.
pub const CONTAINER: &str = "main";
/// The label that ties an object to its deployment's id.
pub const DEPLOYMENT_ID: &str = "anycloud.dev/deployment-id";
/// The label that names the object's deployment.
pub const DEPLOYMENT: &str = "anycloud.dev/deployment";

pub use anycloud_providers::cloud::KubeEndpoint;
