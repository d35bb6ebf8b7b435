//! The domain's workflows, one file each, named after their kind: [`credentials_verify`],
//! [`cluster_create`], [`cluster_delete`], [`job_run`], [`service_deploy`], [`service_upgrade`],
//! [`service_terminate`], [`api_deploy`], [`api_remove`], [`api_rotate_ca`]. [`registry`]
//! registers them all; what their steps use is in [`deps`], their shared retry policies in
//! [`retry`].

pub mod api_deploy;
pub mod api_remove;
pub mod api_rotate_ca;
pub mod cluster_create;
pub mod cluster_delete;
pub mod credentials_verify;
pub mod deps;
pub mod job_run;
pub mod retry;
pub mod service_deploy;
pub mod service_terminate;
pub mod service_upgrade;

#[cfg(test)]
mod step_docs;

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
