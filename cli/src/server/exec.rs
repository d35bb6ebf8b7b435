//! `GET /v1/deployments/{id}/exec`: a WebSocket that runs a command in a job's container and
//! relays its stdin, stdout, stderr and exit code, framed as Kubernetes frames exec (one channel
//! byte, then data; see `anycloud_workflows::wire::exec_channel`). The first client message is
//! the `ExecRequest` as JSON text.
//!
//! The session ends when the command does, or when it has passed no input and no output for the
//! exec idle limit (`Operations::exec_idle_limit`, 30 minutes): then the exit message says so in
//! words. A client message is at most [`MAX_MESSAGE`] (the CLI sends stdin in 32 KiB pieces); a
//! larger one ends the session (WebSocket close 1009). The first message must come within
//! [`REQUEST_WITHIN`]. The API holds at most [`super::streams::MAX_STREAMS`] sessions and followed
//! logs at once; beyond, an upgrade is refused with `429 TOO_MANY_STREAMS`. The API pings the client every [`PING_EVERY`], so that a proxy or load balancer on
//! the way does not take a quiet session for a dead one (kube pings the cluster's side itself).

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};

use anycloud_workflows::refusal::OperationError;
use anycloud_workflows::wire::{ErrorDetail, ExecExit, ExecRequest, exec_channel};

use super::AppState;

/// How often the API pings an exec session's client: below the 60 s idle timeout of common
/// proxies and load balancers (nginx's `proxy_read_timeout`, AWS ALB's default).
pub const PING_EVERY: Duration = Duration::from_secs(25);

/// The largest message (and frame) a client may send: far below the WebSocket library's 64 MiB,
/// far above the CLI's 32 KiB pieces of stdin.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// How long the API waits for the exec request, the first message, after the upgrade.
pub const REQUEST_WITHIN: Duration = Duration::from_secs(10);

use super::error::{ApiError, PathParam};

/// Upgrades to a WebSocket and runs the session on it. A request that is not a WebSocket
/// upgrade is refused as any other bad request, as JSON.
pub async fn exec(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    match upgrade {
        Ok(upgrade) => {
            let slot = match state.streams.hold(&format!("an exec in `{}`", anycloud_workflows::names::shown(&id))) {
                Ok(slot) => slot,
                Err(refused) => return refused.into_response(),
            };
            upgrade.max_message_size(MAX_MESSAGE).max_frame_size(MAX_MESSAGE).on_upgrade(move |socket| async move {
                session(state, id, socket).await;
                drop(slot);
            })
        }
        Err(rejection) => ApiError::new(
            rejection.status(),
            "WEBSOCKET_REQUIRED",
            format!(
                "exec is a WebSocket ({}); run `anycloud exec {} -- COMMAND` rather than a plain request",
                rejection.body_text(),
                anycloud_workflows::names::shown(&id)
            ),
        )
        .into_response(),
    }
}

async fn session(state: AppState, id: String, mut socket: WebSocket) {
    let request = match tokio::time::timeout(REQUEST_WITHIN, socket.recv()).await {
        Ok(Some(Ok(Message::Text(text)))) => serde_json::from_str::<ExecRequest>(text.as_str()).map_err(|err| {
            error_exit("INVALID_REQUEST", format!("the first message must be an exec request as JSON: {err}"))
        }),
        Ok(Some(Err(err))) => Err(error_exit("INVALID_REQUEST", format!("the first message was refused: {err}"))),
        Err(_) => Err(error_exit(
            "INVALID_REQUEST",
            format!("no exec request came within {} s of the upgrade", REQUEST_WITHIN.as_secs()),
        )),
        _ => Err(error_exit("INVALID_REQUEST", "the first message must be an exec request as JSON text".into())),
    };
    let exit = match request {
        Ok(request) => match state.ops.deployment_exec(&id, &request).await {
            Ok(session) => relay(session, &mut socket, state.ops.exec_idle_limit(), &id).await,
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

/// Passes frames both ways until the command's output ends, then answers how it ended; or ends
/// the session once nothing has passed either way for `idle_limit`.
///
/// The loop never waits on the command's stdin while output is waiting: kube's session writes
/// stdout and reads stdin in one loop, so a relay that blocked on a stdin write while the
/// command's echo filled its output would hold both sides forever (`cat` of 60 KiB did). Stdin
/// goes to a writer task one message at a time, and the client's next message is read only once
/// the writer has taken the last one: the WebSocket itself is the back-pressure.
async fn relay(
    mut session: anycloud_workflows::operations::ExecSession,
    socket: &mut WebSocket,
    idle_limit: Duration,
    id: &str,
) -> ExecExit {
    let (output, mut outputs) = mpsc::channel::<Vec<u8>>(16);
    if let Some(stdout) = session.stdout() {
        tokio::spawn(pump(stdout, exec_channel::STDOUT, output.clone()));
    }
    if let Some(stderr) = session.stderr() {
        tokio::spawn(pump(stderr, exec_channel::STDERR, output.clone()));
    }
    drop(output);
    let mut stdin = session.stdin().map(|writer| {
        let (sender, receiver) = mpsc::channel(1);
        tokio::spawn(write_stdin(writer, receiver));
        sender
    });
    let mut pending: Option<Stdin> = None;
    let idle = tokio::time::sleep(idle_limit);
    tokio::pin!(idle);
    let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    loop {
        tokio::select! {
            frame = outputs.recv() => match frame {
                Some(frame) => {
                    idle.as_mut().reset(Instant::now() + idle_limit);
                    if socket.send(Message::Binary(frame.into())).await.is_err() {
                        break;
                    }
                }
                // stdout and stderr have both ended: the command has.
                None => break,
            },
            permit = reserve(stdin.clone()), if pending.is_some() => match (permit, pending.take()) {
                (Some(permit), Some(next)) => {
                    permit.send(next);
                }
                // The writer stopped (the command closed its stdin): the rest is dropped.
                _ => stdin = None,
            },
            message = socket.recv(), if pending.is_none() => match from_client(message) {
                FromClient::Stdin(next) => {
                    idle.as_mut().reset(Instant::now() + idle_limit);
                    if stdin.is_some() {
                        pending = Some(next);
                    }
                }
                FromClient::Nothing => {}
                FromClient::End(exit) => return exit,
            },
            _ = ping.tick() => {
                if socket.send(Message::Ping(Vec::new().into())).await.is_err() {
                    break;
                }
            }
            () = &mut idle => {
                // Dropping the session closes its stream to the cluster.
                return error_exit("EXEC_IDLE", idle_message(id, idle_limit));
            }
        }
    }
    drop(stdin);
    session.exit().await
}

/// What a message of the client asks of the session.
enum FromClient {
    /// Something for the command's stdin, or its end.
    Stdin(Stdin),
    /// Nothing to do (a pong, a message of no channel it knows).
    Nothing,
    /// The session ends, so.
    End(ExecExit),
}

fn from_client(message: Option<Result<Message, axum::Error>>) -> FromClient {
    match message {
        Some(Ok(Message::Binary(data))) => match data.split_first() {
            Some((&exec_channel::STDIN, bytes)) => FromClient::Stdin(Stdin::Data(bytes.to_vec())),
            Some((&exec_channel::CLOSE_STDIN, _)) => FromClient::Stdin(Stdin::Close),
            _ => FromClient::Nothing,
        },
        // The client left (the CLI never closes first): nobody waits for the exit code.
        // Dropping the session closes its stream to the cluster.
        Some(Ok(Message::Close(_))) | None => {
            FromClient::End(error_exit("CLIENT_GONE", "the client closed the session".into()))
        }
        Some(Err(err)) => FromClient::End(error_exit(
            "INVALID_REQUEST",
            format!(
                "the session ended: its WebSocket broke, or a message was refused ({err}); a message carries at most \
                 {} KiB",
                MAX_MESSAGE / 1024
            ),
        )),
        Some(Ok(_)) => FromClient::Nothing,
    }
}

/// What the client sent for the command's stdin.
enum Stdin {
    Data(Vec<u8>),
    Close,
}

/// A place in the stdin writer's queue, or `None` once it has stopped.
async fn reserve(stdin: Option<mpsc::Sender<Stdin>>) -> Option<mpsc::OwnedPermit<Stdin>> {
    stdin?.reserve_owned().await.ok()
}

/// Writes what the client sent to the command's stdin, in order, until the client closes it or
/// the command stops reading.
async fn write_stdin(mut writer: impl AsyncWrite + Unpin, mut receiver: mpsc::Receiver<Stdin>) {
    while let Some(next) = receiver.recv().await {
        match next {
            Stdin::Data(bytes) => {
                if writer.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Stdin::Close => {
                let _ = writer.shutdown().await;
                return;
            }
        }
    }
}

/// What a person is told when the idle limit ended their session.
fn idle_message(id: &str, limit: Duration) -> String {
    let limit = match limit.as_secs() {
        seconds if seconds >= 60 && seconds % 60 == 0 => format!("{} minutes", seconds / 60),
        seconds if seconds >= 1 => format!("{seconds} seconds"),
        _ => format!("{} ms", limit.as_millis()),
    };
    format!(
        "the exec session in `{}` passed no input and no output for {limit}, the API's exec idle limit, and was \
         ended; the command's exit code is unknown. A command that works quietly for longer can print now and then, \
         or run as a job of its own",
        anycloud_workflows::names::shown(id)
    )
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
