//! The simulated cloud: a local cloud for the quick start and for deterministic tests.
//!
//! - [`SimCloud`]: VMs and network rules kept in SQL beside the API's own state (a VM's user-data
//!   sealed under the API's key, as the `clusters` table's secrets are), with fault
//!   injection (latency, transient errors, quotas, slow or never-ready nodes), deterministic
//!   under a seed. The domain reaches its accounts ([`SimAccount`]) only through the `Cloud`
//!   trait, as the `sim` provider ([`anycloud_workflows::providers::SimulatedCloud`]).
//! - [`kube`]: the Kubernetes-compatible API of its control planes, which the real kube client
//!   and kubectl talk to, and which runs Jobs and Deployments for real: objects in SQL, Job,
//!   Deployment and ReplicaSet controllers, a scheduler and a kubelet that runs each container's
//!   command as a local process (detached, so it survives API restarts; restarted when it exits
//!   under `restartPolicy: Always`), with logs and exec; ClusterIP Services on loopback addresses
//!   that forward to the ready replicas. It answers kubectl and kube's typed clients as the
//!   apiserver does: aggregated and legacy discovery, OpenAPI v3 and v2 documents generated
//!   from `k8s_openapi`'s schemas, server-side field validation, apply, merge, strategic merge
//!   and JSON patches, `/status` subresources and complete nodes; it answers in JSON (to clients
//!   that accept protobuf too, as client-go's do) and reads JSON, YAML and protobuf bodies.
//!   Simulated, not isolated: no image is
//!   pulled, commands run on the API's host as its user, `resources` are recorded, not
//!   enforced. Tests also serve it for clusters on moto and the fake Compute server, whose VMs
//!   cannot boot here, so the project has one fake Kubernetes. Mount it with
//!   `kube::router(Arc::new(sim.clone()), sim.kube_storage().await?, proxy)`, where `proxy` says how to
//!   start a cluster's kube-proxy process (the `anycloud` binary's `sim-kube-proxy` command).
//!
//! Its cloud tables (`sim_api_calls`, `sim_vms`, `sim_networks`) were created by the domain's
//! first migrations, which cannot move (sqlx checksums applied migrations); later changes to them
//! belong in this crate. Its Kubernetes tables (`sim_kube_objects`, `sim_kube_revisions`,
//! `sim_kube_processes`) are this crate's own, created with `CREATE TABLE IF NOT EXISTS` when its
//! routes first use them, in a file of their own beside an API on SQLite
//! ([`kube::Storage::open`]).

mod account;
mod cloud;
pub mod kube;
mod opened;
mod vms;

pub use account::SimAccount;
pub use cloud::{SimCloud, SimError, Unavailable};
pub use vms::{SimVm, UserDataError, open_user_data};
