//! Reading deployments: one, with where its workflow stands, and the list. The record says what
//! happened (the workflow writes its status); the run adds what is happening now (`retrying`,
//! `terminating`).

use std::collections::HashMap;

use anycloud_engine::{EngineError, RunRecord, RunStatus, Workflow};

use crate::cloud::ProviderKind;
use crate::db::clusters::{self, Cluster};
use crate::db::deployments::{self, Deployment, DeploymentKind, Status};
use crate::db::revisions::{self, Revision};
use crate::kubernetes;
use crate::names::shown;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{
    DeploymentDetail, DeploymentList, DeploymentQuery, DeploymentSummary, RetryState, ServiceAddress, WorkflowSummary,
};
use crate::workflows::service_terminate::TerminateService;

use super::Operations;

/// Most deployments one list answers with.
pub const LIST_LIMIT: u32 = 500;

/// How many a list answers with when not asked.
pub const LIST_DEFAULT: u32 = 100;

impl Operations {
    /// The deployment whose id or name is `key`.
    pub async fn deployment_status(&self, key: &str) -> Result<DeploymentDetail, OperationError> {
        let deployment = deployments::find(&self.deps.db, key).await?.ok_or_else(|| deployment_not_found(key))?;
        self.deployment_detail(deployment).await
    }

    /// Deployments, newest first ([`LIST_DEFAULT`], or as many as asked up to [`LIST_LIMIT`]), of
    /// one status and kind when asked.
    pub async fn list_deployments(&self, query: &DeploymentQuery) -> Result<DeploymentList, OperationError> {
        let limit = query.limit.unwrap_or(LIST_DEFAULT);
        if !(1..=LIST_LIMIT).contains(&limit) {
            let message = format!("limit {limit} is out of range: use 1 to {LIST_LIMIT}");
            return Err(Refusal::new(Code::InvalidLimit, message).into());
        }
        let status = query.status.as_deref().map(parse_status).transpose()?;
        let kind = match query.kind.as_deref() {
            None => None,
            Some(name) => match DeploymentKind::parse(name) {
                Some(kind) => Some(kind),
                None => {
                    let message = format!("kind `{name}` is not `job` or `service`");
                    return Err(Refusal::new(Code::InvalidStatus, message).into());
                }
            },
        };
        let names: HashMap<String, String> =
            clusters::list_all(&self.deps.db).await?.into_iter().map(|cluster| (cluster.id, cluster.name)).collect();
        let found = deployments::list(&self.deps.db, status, kind, i64::from(limit)).await?;
        let deployments = found
            .into_iter()
            .map(|deployment| DeploymentSummary {
                state: deployment.status.as_str().to_owned(),
                cluster: names.get(&deployment.cluster_id).cloned().unwrap_or_default(),
                deployment: deployment.into(),
            })
            .collect();
        Ok(DeploymentList { deployments })
    }

    /// The deployment with its cluster's name, its run, and the state a person sees.
    pub(super) async fn deployment_detail(&self, deployment: Deployment) -> Result<DeploymentDetail, OperationError> {
        let cluster = clusters::get(&self.deps.db, &deployment.cluster_id).await?;
        let run = match deployment.workflow_id.as_deref().and_then(|id| id.parse().ok()) {
            Some(id) => match self.engine.run(id).await {
                Ok(run) => Some(run),
                Err(EngineError::UnknownRun(_)) => None,
                Err(err) => return Err(err.into()),
            },
            None => None,
        };
        let revisions = match deployment.is_service() {
            true => revisions::list(&self.deps.db, &deployment.id).await?,
            false => Vec::new(),
        };
        Ok(self.detail_of(deployment, cluster.as_ref(), run.as_ref(), revisions))
    }

    /// What [`Operations::deployment_detail`] answers, from the records in hand: the
    /// deployment, its cluster, its run and (a service's) revisions.
    pub(super) fn detail_of(
        &self,
        deployment: Deployment,
        cluster: Option<&Cluster>,
        run: Option<&RunRecord>,
        revisions: Vec<Revision>,
    ) -> DeploymentDetail {
        let (state, retry) = state_of(&deployment, run);
        let address = deployment.is_service().then(|| ServiceAddress {
            dns_name: kubernetes::service::dns_name(&deployment),
            port: kubernetes::service::port(&deployment),
            cluster_ip: deployment.cluster_ip.clone(),
        });
        DeploymentDetail {
            revisions: revisions.into_iter().map(Into::into).collect(),
            address,
            state,
            retry,
            cluster: cluster.map(|cluster| cluster.name.clone()).unwrap_or_default(),
            simulated: cluster.is_some_and(|cluster| cluster.provider == ProviderKind::Sim),
            workflow: run.map(|run| WorkflowSummary::placed(run, self.engine.step_count(&run.kind, run.version))),
            deployment: deployment.into(),
        }
    }
}

/// The state a person sees: the record's status, unless the deployment has not ended and its
/// run is being terminated (`terminating`: a job's cancelled run, a service's `service.terminate`)
/// or waits to try a failed step again (`retrying`; not while a service rolls back, whose undo
/// retries until the previous revision is available again).
fn state_of(deployment: &Deployment, run: Option<&RunRecord>) -> (String, Option<RetryState>) {
    let recorded = (deployment.status.as_str().to_owned(), None);
    let Some(run) = run else { return recorded };
    if deployment.status.is_ended() {
        return recorded;
    }
    let terminating_service = run.kind == <TerminateService as Workflow>::KIND && !run.status.is_final();
    if (run.cancel_requested && !deployment.is_service()) || terminating_service {
        return ("terminating".to_owned(), None);
    }
    if run.status == RunStatus::Retrying && deployment.status != Status::RollingBack {
        let cause = run.error.as_ref().map(ToString::to_string).or_else(|| run.status_reason.clone());
        return ("retrying".to_owned(), Some(RetryState { attempt: run.attempt, cause, next_at: run.next_at }));
    }
    recorded
}

fn parse_status(text: &str) -> Result<Status, OperationError> {
    Status::try_from(text.to_owned()).map_err(|_| {
        let known: Vec<&str> = Status::ALL.iter().map(|status| status.as_str()).collect();
        Refusal::new(Code::InvalidStatus, format!("status `{text}` is not one of {}", known.join(", "))).into()
    })
}

/// No deployment has that id or name.
pub(super) fn deployment_not_found(key: &str) -> OperationError {
    Refusal::new(
        Code::DeploymentNotFound,
        format!("deployment `{}` does not exist; `anycloud list` shows the deployments", shown(key)),
    )
    .into()
}
