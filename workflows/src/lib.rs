//! The Anycloud domain: what the API keeps (credentials, clusters and their VMs, deployments),
//! what users can do with it, and the workflows that act on the clouds, written on
//! `anycloud-engine`. No HTTP server code lives here.
//!
//! - [`operations`]: one function per user-visible operation (save a credential, create a
//!   cluster, ...). Each validates, locks, submits its run and writes its records in one
//!   transaction, and answers with a type of [`api`] or a [`refusal`].
//! - The workflows, one file each, named after their kind: [`credentials_verify`],
//!   [`cluster_create`], [`cluster_delete`], [`job_run`], [`service_deploy`], [`service_upgrade`],
//!   [`service_terminate`], [`api_deploy`], [`api_remove`], [`api_rotate_ca`]. [`registry`] registers them all; their shared retry
//!   policies are in [`retry`], what their steps use in [`deps`].
//! - [`db`]: the domain's tables and every SQL statement on them.
//! - [`providers`]: the clouds behind [`cloud::Cloud`] (AWS, GCP; the simulated cloud is its own
//!   crate and plugs in through [`providers::SimulatedCloud`]); [`kube_api`]: what the workflows
//!   ask of a cluster's Kubernetes API.
//! - [`kube_job`]: a job's Kubernetes objects, logs and exec ([`log_cursor`]: resuming a log
//!   stream that broke); [`kube_service`]: a service's
//!   Deployment, Service and rollouts; [`kube_secret`]: the Secrets a deployment's secrets
//!   become; [`pod_wait`]: why a workload's Pod waits, in Kubernetes' words ([`kube_quantity`]:
//!   reading CPU and memory quantities); [`workload`]: checking a workload's spec.
//! - [`secrets`] and [`cluster_secrets`]: what is sealed at rest; [`user_data`]: what a VM runs
//!   when it boots.

pub mod api;
pub mod api_binary;
pub mod api_bucket;
pub mod api_deploy;
pub mod api_hosting_credential;
pub mod api_identity;
pub mod api_keys;
pub mod api_remove;
pub mod api_rotate_ca;
pub mod api_storage_key;
pub mod api_user_data;
pub mod cloud;
pub mod cluster_create;
pub mod cluster_delete;
pub mod cluster_network;
pub mod cluster_secrets;
pub mod cluster_sides;
pub mod credentials_verify;
pub mod db;
pub mod deps;
pub mod job_run;
pub mod kube_api;
pub mod kube_job;
pub mod kube_quantity;
pub mod kube_secret;
pub mod kube_service;
pub mod log_cursor;
pub mod names;
pub mod operations;
pub mod pod_wait;
pub mod providers;
pub mod refusal;
pub mod retry;
pub mod seams;
pub mod secrets;
pub mod service_deploy;
pub mod service_terminate;
pub mod service_upgrade;
pub mod user_data;
pub mod workload;

#[cfg(test)]
mod step_docs;
#[cfg(test)]
mod test_support;

use std::sync::Arc;

use anycloud_engine::Registry;

use api_deploy::DeployApi;
use api_remove::RemoveApi;
use api_rotate_ca::RotateApiCa;

use cluster_create::CreateCluster;
use cluster_delete::DeleteCluster;
use credentials_verify::VerifyCredential;
use deps::Deps;
use job_run::RunJob;
use service_deploy::DeployService;
use service_terminate::TerminateService;
use service_upgrade::UpgradeService;

/// Every workflow of the domain, registered with what its steps need. A new workflow is one
/// more line here.
pub fn registry(deps: &Deps) -> Registry {
    Registry::new()
        .with(Arc::new(VerifyCredential { deps: deps.clone() }))
        .with(Arc::new(CreateCluster { deps: deps.clone() }))
        .with(Arc::new(DeleteCluster { deps: deps.clone() }))
        .with(Arc::new(RunJob { deps: deps.clone() }))
        .with(Arc::new(DeployService { deps: deps.clone() }))
        .with(Arc::new(UpgradeService { deps: deps.clone() }))
        .with(Arc::new(TerminateService { deps: deps.clone() }))
        .with(Arc::new(DeployApi { deps: deps.clone() }))
        .with(Arc::new(RemoveApi { deps: deps.clone() }))
        .with(Arc::new(RotateApiCa { deps: deps.clone() }))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
