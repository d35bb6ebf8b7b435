//! One function per user-visible operation, each in its own file. An operation validates the
//! request, takes the locks it needs, submits its workflow run and writes its records in one
//! transaction, and returns a typed answer ([`crate::wire`]) or a typed refusal
//! ([`crate::refusal`]). The HTTP handlers only decode, call one of these, and encode.
//!
//! | operation | file | run it submits |
//! | --- | --- | --- |
//! | save a credential | `save_credential.rs` | `credentials.verify` |
//! | delete a credential | `delete_credential.rs` | none |
//! | list and show credentials | `show_credentials.rs` | none |
//! | create a cluster | `create_cluster.rs` | `cluster.create` |
//! | delete a cluster | `delete_cluster.rs` | `cluster.delete` |
//! | list and show clusters | `show_clusters.rs` | none |
//! | list, inspect, retry, resume, cancel workflows | `workflows.rs` | none |
//! | submit a job | `submit_job.rs` | `job.run` |
//! | deploy a service | `deploy_service.rs` | `service.deploy` |
//! | upgrade a service | `upgrade_service.rs` | `service.upgrade` |
//! | show and list deployments | `show_deployments.rs` | none |
//! | terminate a deployment | `terminate_deployment.rs` | none for a job (cancels its run); `service.terminate` for a service |
//! | resubmit a job | `resubmit_deployment.rs` | `job.run` (the next attempt) |
//! | a job's logs | `deployment_logs.rs` | none |
//! | exec in a job's container | `deployment_exec.rs` | none |
//! | a cluster's kubeconfig | `cluster_kubeconfig.rs` | none |
//! | deploy an API on a VM | `deploy_api.rs` | `api.deploy` |
//! | remove a deployed API | `remove_api.rs` | `api.remove` |
//! | rotate a deployed API's CA | `rotate_api_ca.rs` | `api.rotate_ca` |
//! | list and show deployed APIs, their access | `show_apis.rs` | none |
//! | create a secret, set its next version | `save_secret.rs` | none |
//! | delete a secret that no deployment takes | `delete_secret.rs` | none |
//! | list and show secrets (never their values) | `show_secrets.rs` | none |
//!
//! `pin_secrets.rs` resolves the secrets a job, a service or an upgrade takes, each at its
//! current version, inside the transaction that stores it.

mod cluster_kubeconfig;
pub mod console_sessions;
mod create_cluster;
mod delete_cluster;
mod delete_credential;
mod delete_secret;
mod deploy_api;
mod deploy_service;
mod deployment_exec;
mod deployment_logs;
mod pages;
mod pin_secrets;
mod remove_api;
mod resubmit_deployment;
mod rotate_api_ca;
mod save_credential;
mod save_secret;
mod show_apis;
mod show_clusters;
mod show_credentials;
mod show_deployments;
mod show_secrets;
mod submit_job;
mod terminate_deployment;
mod upgrade_service;
mod workflows;

use std::sync::Arc;

pub use deploy_api::DEFAULT_API_PORT;
pub use deploy_service::{DEFAULT_PORT, DEFAULT_PROGRESS_DEADLINE_S, MAX_REPLICAS};
pub use deployment_exec::{EXEC_IDLE_LIMIT, ExecSession};
pub use deployment_logs::LogStream;
pub use pages::PAGE_LIMIT;
pub use pin_secrets::described as described_secrets;
pub use save_secret::MAX_SECRET_BYTES;
pub use show_deployments::LIST_LIMIT;
pub use submit_job::MAX_NAME;

use anycloud_engine::Engine;

use crate::workflows::deps::Deps;

/// The API's operations, on its engine and its dependencies. Cheap to clone.
#[derive(Clone)]
pub struct Operations {
    engine: Arc<Engine>,
    deps: Deps,
    /// The API may create clusters (a hosted API); a local one may not.
    hosted: bool,
    /// The API's id, for the messages that name it.
    api_id: Arc<str>,
    /// Where a hosted API places its clusters' control planes (its own hosting credential).
    control_planes: Option<crate::cluster::sides::ControlPlaneHost>,
}

impl Operations {
    /// The operations of the API `api_id` (hosted or local), on `engine`.
    pub fn new(engine: Arc<Engine>, deps: Deps, api_id: &str, hosted: bool) -> Self {
        Self { engine, deps, hosted, api_id: api_id.into(), control_planes: None }
    }

    /// These operations, placing clusters' control planes with `host` (a hosted API's own
    /// credential, region and machine type) instead of with their capacity.
    #[must_use]
    pub fn with_control_planes(mut self, host: Option<crate::cluster::sides::ControlPlaneHost>) -> Self {
        self.control_planes = host;
        self
    }

    /// The engine the operations submit to.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}
