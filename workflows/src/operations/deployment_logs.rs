//! A job's logs: its current attempt's container output, read from its Pod through the
//! Kubernetes API (also after the job ended, while the cluster keeps the Pod).

use futures::StreamExt as _;
use futures::stream::BoxStream;

use crate::db::clusters::Cluster;
use crate::kubernetes::log_cursor;
use crate::wire::LogsQuery;

use crate::db::deployments::{self, Deployment, DeploymentKind};
use crate::kubernetes;
use crate::refusal::{Code, OperationError, Refusal};

use super::Operations;
use super::show_deployments::deployment_not_found;

/// A container's output, chunk by chunk.
pub type LogStream = BoxStream<'static, std::io::Result<Vec<u8>>>;

/// A job whose container has started.
pub(super) struct StartedJob {
    /// The job.
    pub(super) deployment: Deployment,
    /// Its cluster.
    pub(super) cluster: Cluster,
    /// A client for the cluster's ordinary calls.
    pub(super) client: kube::Client,
    /// The Pod of its current attempt.
    pub(super) pod: String,
}

impl Operations {
    /// The job's output so far; with `follow`, then everything it writes until it ends.
    pub async fn deployment_logs(&self, key: &str, query: &LogsQuery) -> Result<LogStream, OperationError> {
        let started = self.started_job(key, "logs").await?;
        let deployment = &started.deployment;
        let stream = self
            .deps
            .kube_stream_client(&started.cluster)
            .await
            .map_err(|err| unreachable_cluster(deployment, &err))?;
        let lines = kubernetes::job::logs(
            &started.client,
            &stream,
            &deployment.namespace,
            &started.pod,
            query.follow,
            query.since_time,
        )
        .await
        .map_err(|err| unreachable_cluster(deployment, &err))?;
        if query.timestamps {
            return Ok(Box::pin(lines));
        }
        Ok(Box::pin(lines.map(|line| {
            line.map(|line| match log_cursor::split_stamp(&line) {
                Some((_, rest)) => rest.to_vec(),
                None => line,
            })
        })))
    }

    /// The job `key`, its cluster and a client for it, and its Pod whose container has started;
    /// refused for a service and for a job whose container has not started (`what` names the
    /// command).
    pub(super) async fn started_job(&self, key: &str, what: &str) -> Result<StartedJob, OperationError> {
        let deployment = deployments::find(&self.deps.db, key).await?.ok_or_else(|| deployment_not_found(key))?;
        let name = &deployment.name;
        if deployment.kind != DeploymentKind::Job {
            return Err(Refusal::new(
                Code::NotSupportedForServices,
                format!(
                    "`{name}` is a {}: {what} is not supported yet for cluster-backed services; `anycloud status \
                     {name}` shows its state, revisions and cluster-internal address",
                    deployment.kind
                ),
            )
            .into());
        }
        if deployment.status == deployments::Status::Terminated {
            return Err(Refusal::new(
                Code::DeploymentEnded,
                format!("job `{name}` was terminated: its Pod was deleted, and its logs with it"),
            )
            .into());
        }
        let cluster =
            self.deps.cluster(&deployment.cluster_id).await.map_err(|err| unreachable_cluster(&deployment, &err))?;
        let client = self.deps.kube_client(&cluster).await.map_err(|err| unreachable_cluster(&deployment, &err))?;
        let pod = kubernetes::job::started_pod(&client, &deployment)
            .await
            .map_err(|err| unreachable_cluster(&deployment, &err))?;
        let Some(pod) = pod else {
            return Err(Refusal::new(
                Code::DeploymentNotStarted,
                format!(
                    "job `{name}` is {} and its container has not started, so it has no {what} yet; `anycloud wait \
                     deployment/{name}` follows it",
                    deployment.status
                ),
            )
            .into());
        };
        Ok(StartedJob { deployment, cluster, client, pod })
    }
}

/// The cluster's Kubernetes API could not be asked.
pub(super) fn unreachable_cluster(deployment: &Deployment, err: &dyn std::fmt::Display) -> OperationError {
    Refusal::new(
        Code::ClusterUnreachable,
        format!("deployment `{}`: its cluster's Kubernetes API could not be asked ({err}); try again", deployment.name),
    )
    .into()
}
