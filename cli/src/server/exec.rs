//! `GET /v1/deployments/{id}/exec`: a WebSocket that runs a command in a job's container and
//! relays its stdin, stdout, stderr and exit code, framed as Kubernetes frames exec (one channel
//! byte, then data; see `anycloud_workflows::api::exec_channel`). The first client message is
//! the `ExecRequest` as JSON text.

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use anycloud_workflows::api::{ErrorDetail, ExecExit, ExecRequest, exec_channel};
use anycloud_workflows::refusal::OperationError;

use super::AppState;
use super::error::{ApiError, PathParam};

/// Upgrades to a WebSocket and runs the session on it. A request that is not a WebSocket
/// upgrade is refused as any other bad request, as JSON.
pub async fn exec(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    match upgrade {
        Ok(upgrade) => upgrade.on_upgrade(move |socket| session(state, id, socket)),
        Err(rejection) => ApiError::new(
            rejection.status(),
            "WEBSOCKET_REQUIRED",
            format!(
                "exec is a WebSocket ({}); run `anycloud job exec {}` rather than a plain request",
                rejection.body_text(),
                anycloud_workflows::names::shown(&id)
            ),
        )
        .into_response(),
    }
}

async fn session(state: AppState, id: String, mut socket: WebSocket) {
    let request = match socket.recv().await {
        Some(Ok(Message::Text(text))) => serde_json::from_str::<ExecRequest>(text.as_str()).map_err(|err| {
            error_exit("INVALID_REQUEST", format!("the first message must be an exec request as JSON: {err}"))
        }),
        _ => Err(error_exit("INVALID_REQUEST", "the first message must be an exec request as JSON text".into())),
    };
    let exit = match request {
        Ok(request) => match state.ops.deployment_exec(&id, &request).await {
            Ok(session) => relay(session, &mut socket).await,
            Err(err) => refused(err),
        },
        Err(exit) => exit,
    };
    let mut frame = vec![exec_channel::EXIT];
    frame.extend(serde_json::to_vec(&exit).unwrap_or_default());
    let _ = socket.send(Message::Binary(frame.into())).await;
    let _ = socket.send(Message::Close(None)).await;
    // Waits for the client's own close: dropping the connection while its last frames are still
    // arriving would reset it, and a reset can discard the exit frame before the client reads it.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(Ok(message)) = socket.recv().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}

fn error_exit(code: &str, message: String) -> ExecExit {
    ExecExit { exit_code: None, error: Some(ErrorDetail { code: code.to_owned(), message }) }
}

fn refused(err: OperationError) -> ExecExit {
    let err = ApiError::from(err);
    error_exit(err.code, err.message)
}

/// Passes frames both ways until the command's output ends, then answers how it ended.
async fn relay(mut session: anycloud_workflows::operations::ExecSession, socket: &mut WebSocket) -> ExecExit {
    let (output, mut outputs) = mpsc::channel::<Vec<u8>>(16);
    if let Some(stdout) = session.stdout() {
        tokio::spawn(pump(stdout, exec_channel::STDOUT, output.clone()));
    }
    if let Some(stderr) = session.stderr() {
        tokio::spawn(pump(stderr, exec_channel::STDERR, output.clone()));
    }
    drop(output);
    let mut stdin = session.stdin();
    loop {
        tokio::select! {
            frame = outputs.recv() => match frame {
                Some(frame) => {
                    if socket.send(Message::Binary(frame.into())).await.is_err() {
                        break;
                    }
                }
                // stdout and stderr have both ended: the command has.
                None => break,
            },
            message = socket.recv() => match message {
                Some(Ok(Message::Binary(data))) => match data.split_first() {
                    Some((&exec_channel::STDIN, bytes)) => {
                        if let Some(writer) = stdin.as_mut()
                            && writer.write_all(bytes).await.is_err()
                        {
                            stdin = None;
                        }
                    }
                    Some((&exec_channel::CLOSE_STDIN, _)) => {
                        if let Some(mut writer) = stdin.take() {
                            let _ = writer.shutdown().await;
                        }
                    }
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    stdin = None;
                    break;
                }
                Some(Ok(_)) => {}
            },
        }
    }
    drop(stdin);
    session.exit().await
}

/// Reads one of the command's outputs and sends it as frames of its channel.
async fn pump(mut reader: impl AsyncRead + Unpin, channel: u8, frames: mpsc::Sender<Vec<u8>>) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                let mut frame = Vec::with_capacity(read + 1);
                frame.push(channel);
                frame.extend_from_slice(&buffer[..read]);
                if frames.send(frame).await.is_err() {
                    return;
                }
            }
        }
    }
}
