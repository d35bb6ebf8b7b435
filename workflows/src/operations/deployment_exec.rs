//! Running a command in a job's container, through the Kubernetes exec API: stdin, stdout and
//! stderr pass through, and the command's exit code comes back.

use std::time::Duration;

use kube::api::AttachedProcess;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::db::deployments::Status;
use crate::kubernetes;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{ErrorDetail, ExecExit, ExecRequest};

use super::Operations;
use super::deployment_logs::unreachable_cluster;

/// How long an exec session may pass no input and no output before the API ends it: long
/// enough for a command that works quietly for a while, short enough that a session forgotten in
/// a terminal does not hold its connections for ever. kubelet's own limit on an idle streaming
/// connection (`streamingConnectionIdleTimeout`) is 4 hours by default.
pub const EXEC_IDLE_LIMIT: Duration = Duration::from_secs(30 * 60);

/// A command running in a container.
pub struct ExecSession {
    process: AttachedProcess,
}

impl ExecSession {
    /// The command's stdin, when the request asked for it (taken once).
    pub fn stdin(&mut self) -> Option<impl AsyncWrite + Send + Unpin + use<>> {
        self.process.stdin()
    }

    /// The command's stdout (taken once).
    pub fn stdout(&mut self) -> Option<impl AsyncRead + Send + Unpin + use<>> {
        self.process.stdout()
    }

    /// The command's stderr (taken once).
    pub fn stderr(&mut self) -> Option<impl AsyncRead + Send + Unpin + use<>> {
        self.process.stderr()
    }

    /// How the command ended, once it has.
    pub async fn exit(mut self) -> ExecExit {
        let status = match self.process.take_status() {
            Some(status) => status.await,
            None => None,
        };
        let _ = self.process.join().await;
        match status {
            Some(status) => match kubernetes::job::exec_exit_code(&status) {
                Some(code) => ExecExit { exit_code: Some(code), error: None },
                None => ExecExit {
                    exit_code: None,
                    error: Some(ErrorDetail {
                        code: "EXEC_FAILED".into(),
                        message: status.message.unwrap_or_else(|| "the exec failed".into()),
                    }),
                },
            },
            None => ExecExit {
                exit_code: None,
                error: Some(ErrorDetail {
                    code: "EXEC_FAILED".into(),
                    message: "the cluster ended the exec without saying how the command ended".into(),
                }),
            },
        }
    }
}

impl Operations {
    /// How long an exec session may pass no input and no output ([`EXEC_IDLE_LIMIT`]).
    pub fn exec_idle_limit(&self) -> Duration {
        self.deps.seams.exec_idle_limit.unwrap_or(EXEC_IDLE_LIMIT)
    }

    /// Starts `request.command` in the running container of job `key`. Refused for a service,
    /// an empty command, and a job whose container is not running.
    pub async fn deployment_exec(&self, key: &str, request: &ExecRequest) -> Result<ExecSession, OperationError> {
        if request.command.first().is_none_or(|command| command.is_empty()) {
            return Err(Refusal::new(
                Code::InvalidWorkload,
                format!("no command to run in `{key}`: give it after `--`, as in `anycloud exec {key} -- ls`"),
            )
            .into());
        }
        let super::deployment_logs::StartedJob { deployment, cluster, pod, .. } = self.started_job(key, "exec").await?;
        // An exec session may rightly be silent for long: its client has no read timeout.
        let client =
            self.deps.kube_stream_client(&cluster).await.map_err(|err| unreachable_cluster(&deployment, &err))?;
        if deployment.status.is_ended() || deployment.status == Status::Queued {
            return Err(Refusal::new(
                Code::DeploymentEnded,
                format!(
                    "job `{}` is {}: its container does not run, so there is nothing to exec in; `anycloud logs {}` \
                     shows its output",
                    deployment.name, deployment.status, deployment.name
                ),
            )
            .into());
        }
        let process = kubernetes::job::exec(&client, &deployment.namespace, &pod, &request.command, request.stdin)
            .await
            .map_err(|err| match kubernetes::job::is_refusal(&err) {
                Some(message) => Refusal::new(
                    Code::DeploymentEnded,
                    format!("job `{}`: the cluster refused the exec: {message}", deployment.name),
                )
                .into(),
                None => unreachable_cluster(&deployment, &anycloud_engine::error_chain(&err)),
            })?;
        Ok(ExecSession { process })
    }
}
