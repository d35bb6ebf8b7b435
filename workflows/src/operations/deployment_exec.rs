//! Running a command in a job's container, through the Kubernetes exec API: stdin, stdout and
//! stderr pass through, and the command's exit code comes back.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::AttachedProcess;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::db::deployments::Status as DeploymentStatus;
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

/// How the stream to the cluster ended: the command's status, or `None` when the stream ended
/// without one (broken, reset). Resolves once kube's session task has written all the output it
/// ever will.
type Ended = Shared<BoxFuture<'static, Option<Status>>>;

/// A command running in a container.
pub struct ExecSession {
    process: AttachedProcess,
    ended: Ended,
}

impl ExecSession {
    fn new(mut process: AttachedProcess) -> Self {
        // kube sends the status when the cluster does, and drops the sender when its session task
        // ends otherwise: either way after the last output it writes.
        let status =
            process.take_status().map_or_else(|| futures::future::ready(None).boxed(), futures::FutureExt::boxed);
        Self { process, ended: status.shared() }
    }

    /// The command's stdin, when the request asked for it (taken once).
    pub fn stdin(&mut self) -> Option<impl AsyncWrite + Send + Unpin + use<>> {
        self.process.stdin()
    }

    /// The command's stdout (taken once).
    pub fn stdout(&mut self) -> Option<impl AsyncRead + Send + Unpin + use<>> {
        self.process.stdout().map(|reader| Output { reader, ended: self.ended.clone() })
    }

    /// The command's stderr (taken once).
    pub fn stderr(&mut self) -> Option<impl AsyncRead + Send + Unpin + use<>> {
        self.process.stderr().map(|reader| Output { reader, ended: self.ended.clone() })
    }

    /// How the command ended, once it has.
    pub async fn exit(self) -> ExecExit {
        let status = self.ended.await;
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

/// One of the command's outputs, as kube passes it on, ending once kube's stream to the cluster
/// has ended and all it wrote has been read. kube-client 5 closes its output pipes when the
/// cluster's status arrives, but only drops them when its session ends on an error (a connection
/// reset, a failed ping): a reader of the bare pipe would then wait for ever, and with it the
/// client's session (a 60 s command, reset as kube's 60 s ping met the end, did).
struct Output<R> {
    reader: R,
    ended: Ended,
}

impl<R: AsyncRead + Unpin> AsyncRead for Output<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        // What is buffered comes first: the session wrote it before it ended.
        if let ready @ Poll::Ready(_) = Pin::new(&mut self.reader).poll_read(cx, buf) {
            return ready;
        }
        // Nothing buffered, and the session has ended: nothing more will come.
        self.ended.poll_unpin(cx).map(|_| Ok(()))
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
        if deployment.status.is_ended() || deployment.status == DeploymentStatus::Queued {
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
        Ok(ExecSession::new(process))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// An output whose session ended on an error, its pipe dropped and never closed (as kube's
    /// does), gives all that was written and then ends; while the session runs, it waits.
    #[tokio::test]
    async fn an_output_ends_with_its_session_even_when_its_pipe_is_not_closed() {
        let (reader, mut writer) = tokio::io::simplex(1024);
        let (status, ended) = tokio::sync::oneshot::channel::<Status>();
        let mut output = Output { reader, ended: ended.map(Result::ok).boxed().shared() };
        writer.write_all(b"done\n").await.unwrap();
        let mut buffer = [0u8; 16];
        assert_eq!(output.read(&mut buffer).await.unwrap(), 5);
        assert!(output.read(&mut buffer).now_or_never().is_none(), "an empty output of a live session waits");

        writer.write_all(b"more").await.unwrap();
        drop(writer);
        drop(status);
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), output.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "the output did not end with its session");
        assert_eq!(rest, b"more");
    }
}
