//! `GET .../pods/{name}/exec`: runs a command "in" a running container, over the WebSocket
//! protocol of the apiserver (`v5.channel.k8s.io`, preferred, then `v4.channel.k8s.io`): each
//! binary message starts with its channel, 0 stdin, 1 stdout, 2 stderr, 3 the final `Status`, 4
//! terminal resizes (ignored: no terminal is allocated, `tty` runs without one); v5 adds 255, a
//! client's close of a stream (`[255, 0]` ends stdin).
//!
//! The command runs in the Pod's scratch directory with the container's environment, in a
//! process group of its own that ends if the connection does. Its end is reported on channel 3
//! exactly as the kubelet reports it: `{"metadata":{},"status":"Success"}`, or a `Failure` with
//! reason `NonZeroExitCode` and the exit code as the cause `ExitCode`, from which kube's
//! `AttachedProcess::take_status()` and kubectl read it. SPDY (kubectl's fallback when the
//! WebSocket upgrade fails) is not simulated.
//!
//! A client message is at most [`MAX_MESSAGE`] (a larger one ends the session with close code
//! 1009), and a session that passes no input and no output for [`IDLE_LIMIT`] is ended, as the
//! kubelet's `streamingConnectionIdleTimeout` (4 hours by default) ends it: the process is killed
//! and the connection closed.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::resources::PODS;
use super::status::ApiError;
use super::{Kube, Shared, auth, container_env};

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const CLOSE: u8 = 255;

/// The largest message (and frame) a client may send: far below the WebSocket library's 64 MiB,
/// far above what kubectl and kube write at once (32 KiB of stdin).
pub const MAX_MESSAGE: usize = 1024 * 1024;

/// How long a session may pass nothing either way: the kubelet's default.
pub const IDLE_LIMIT: Duration = Duration::from_secs(4 * 3600);

/// How long a session that has sent its status waits for the client to close.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// What to run, and which streams to connect.
struct ExecRequest {
    argv: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    container: Option<String>,
}

impl ExecRequest {
    fn parse(query: &str) -> Self {
        let mut request = Self { argv: Vec::new(), stdin: false, stdout: false, stderr: false, container: None };
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let on = value == "true" || value == "1";
            match key.as_ref() {
                "command" => request.argv.push(value.into_owned()),
                "stdin" => request.stdin = on,
                "stdout" => request.stdout = on,
                "stderr" => request.stderr = on,
                "container" => request.container = Some(value.into_owned()),
                _ => {}
            }
        }
        request
    }
}

/// `GET` (WebSocket) `.../pods/{name}/exec`.
pub(crate) async fn exec(
    State(kube): Shared,
    Path((vm, namespace, name)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let request = ExecRequest::parse(query.as_deref().unwrap_or_default());
    let prepared = prepare(&kube, &vm, &namespace, &name, &request, &headers).await;
    let (pod, env) = match prepared {
        Ok(found) => found,
        Err(err) => return err.into_response(),
    };
    let Ok(upgrade) = upgrade else {
        return ApiError::bad_request(
            "Upgrade request required: the simulated apiserver runs exec over WebSocket (v5.channel.k8s.io, \
             v4.channel.k8s.io), not SPDY",
        )
        .into_response();
    };
    upgrade
        .protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"])
        .max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |socket| session(kube, socket, pod, env, request))
}

/// The Pod to run in, if the container runs, and the container's environment.
async fn prepare(
    kube: &Kube,
    vm: &str,
    namespace: &str,
    name: &str,
    request: &ExecRequest,
    headers: &HeaderMap,
) -> Result<(Value, Vec<(String, String)>), ApiError> {
    auth::control_plane(kube, vm, headers).await?;
    let pod = kube.store.get(vm, &PODS, namespace, name).await?.ok_or_else(|| ApiError::not_found(&PODS, name))?;
    let containers = pod["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let container = match &request.container {
        Some(asked) => containers
            .iter()
            .find(|c| c["name"] == asked.as_str())
            .cloned()
            .ok_or_else(|| ApiError::bad_request(format!("container {asked} is not valid for pod {name}")))?,
        None => containers.first().cloned().ok_or_else(|| ApiError::bad_request("the pod has no container"))?,
    };
    if request.argv.is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
    if phase == "Succeeded" || phase == "Failed" {
        return Err(ApiError::bad_request(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        )));
    }
    let running = pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|statuses| statuses.iter().find(|s| s["name"] == container["name"]))
        .is_some_and(|s| s["state"].get("running").is_some());
    if !running {
        return Err(ApiError::bad_request(format!(
            "unable to upgrade connection: container not found (\"{}\")",
            container["name"].as_str().unwrap_or_default()
        )));
    }
    // The container started with it, so it resolves; a Secret deleted since fails the exec.
    let env = container_env::environment(kube, vm, &pod, &container)
        .await
        .map_err(|message| ApiError::internal(format!("making the container's environment for exec: {message}")))?;
    Ok((pod, env))
}

/// One exec: the process, its streams, and the final status.
async fn session(kube: Arc<Kube>, mut socket: WebSocket, pod: Value, env: Vec<(String, String)>, request: ExecRequest) {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let piped = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
    let pod_dir = kube.kubelet.pod_dir(uid);
    let spawned = super::process::start_unless_closed(&pod_dir, || {
        tokio::process::Command::new(&request.argv[0])
            .args(&request.argv[1..])
            .current_dir(&pod_dir)
            .env_clear()
            .envs(env)
            .stdin(piped(request.stdin))
            .stdout(piped(request.stdout))
            .stderr(piped(request.stderr))
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            let message = format!(
                "error executing command in container: failed to exec in container: failed to start exec: OCI runtime \
                 exec failed: exec failed: unable to start container process: exec: \"{}\": {err}: unknown",
                request.argv[0]
            );
            let status = json!({
                "metadata": {}, "status": "Failure", "message": format!("Internal error occurred: {message}"),
                "reason": "InternalError", "details": { "causes": [{ "message": message }] }, "code": 500,
            });
            finish(&mut socket, &status).await;
            return;
        }
    };
    let (out, mut outgoing) = mpsc::channel::<Vec<u8>>(16);
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(forward(stdout, STDOUT, out.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(forward(stderr, STDERR, out.clone()));
    }
    drop(out);
    // Stdin is written by a task of its own, so that the loop below passes output on while a
    // write waits: a process that echoes its input fills its output before it reads more.
    let mut stdin = child.stdin.take().map(|input| {
        let (sender, receiver) = mpsc::channel::<Vec<u8>>(4);
        tokio::spawn(write_stdin(input, receiver));
        sender
    });
    let idle = tokio::time::sleep(IDLE_LIMIT);
    tokio::pin!(idle);
    let mut client_open = true;
    let mut output_open = true;
    // Until the output streams end: pass stdin on, and output out.
    while output_open {
        tokio::select! {
            // The process goes with the session (kill_on_drop).
            () = &mut idle => return,
            message = socket.recv(), if client_open => match message {
                Some(Ok(Message::Binary(data))) => match data.first() {
                    Some(&STDIN) => {
                        idle.as_mut().reset(tokio::time::Instant::now() + IDLE_LIMIT);
                        let Some(input) = stdin.clone() else { continue };
                        let mut room = std::pin::pin!(input.reserve_owned());
                        // Waits for room in stdin's queue, passing output on meanwhile.
                        loop {
                            tokio::select! {
                                room = &mut room => {
                                    match room {
                                        Ok(room) => { room.send(data[1..].to_vec()); }
                                        Err(_) => stdin = None,
                                    }
                                    break;
                                }
                                chunk = outgoing.recv(), if output_open => match chunk {
                                    Some(chunk) => {
                                        if socket.send(Message::binary(chunk)).await.is_err() {
                                            return;
                                        }
                                    }
                                    None => output_open = false,
                                },
                            }
                        }
                    }
                    Some(&CLOSE) if data.get(1) == Some(&STDIN) => stdin = None,
                    _ => {}
                },
                // A v4 client closes the connection to end stdin, and waits for the status.
                Some(Ok(Message::Close(_))) => {
                    stdin = None;
                    client_open = false;
                }
                Some(Ok(_)) => {}
                // The client went: the process goes with it (kill_on_drop).
                Some(Err(_)) | None => return,
            },
            chunk = outgoing.recv() => match chunk {
                Some(chunk) => {
                    idle.as_mut().reset(tokio::time::Instant::now() + IDLE_LIMIT);
                    if socket.send(Message::binary(chunk)).await.is_err() {
                        return;
                    }
                }
                None => output_open = false,
            },
        }
    }
    drop(stdin);
    let code = match child.wait().await {
        Ok(status) => status.code().unwrap_or_else(|| {
            use std::os::unix::process::ExitStatusExt;
            128 + status.signal().unwrap_or(0)
        }),
        Err(_) => 1,
    };
    finish(&mut socket, &exit_status(&request.argv, code)).await;
}

/// The kubelet's status of an exec that ended with `code`.
fn exit_status(argv: &[String], code: i32) -> Value {
    if code == 0 {
        return json!({ "metadata": {}, "status": "Success" });
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
            argv.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": { "causes": [{ "reason": "ExitCode", "message": code.to_string() }] },
    })
}

/// Sends the status on its channel, closes, and waits (at most [`CLOSE_WITHIN`]) for the
/// client to close or leave. Dropping a connection with unread bytes in it (kube's ping, sent
/// every 60 s, arriving as the command ends) makes the kernel reset it, and a reset can discard
/// the status before the client reads it.
async fn finish(socket: &mut WebSocket, status: &Value) {
    let mut message = vec![STATUS];
    message.extend_from_slice(status.to_string().as_bytes());
    let _ = socket.send(Message::binary(message)).await;
    // client-go reads a close without a code (1005) as an error: say it is a normal one.
    let close = CloseFrame { code: close_code::NORMAL, reason: "".into() };
    let _ = socket.send(Message::Close(Some(close))).await;
    let _ = tokio::time::timeout(CLOSE_WITHIN, async {
        while let Some(Ok(message)) = socket.recv().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}

/// Writes what the client sends to the process's stdin, until the client closes it (the channel
/// ends) or the process does.
async fn write_stdin(mut input: tokio::process::ChildStdin, mut chunks: mpsc::Receiver<Vec<u8>>) {
    while let Some(chunk) = chunks.recv().await {
        if input.write_all(&chunk).await.is_err() {
            return;
        }
    }
}

/// Copies one output stream to its channel.
async fn forward(mut stream: impl AsyncRead + Unpin, channel: u8, out: mpsc::Sender<Vec<u8>>) {
    let mut buffer = vec![0u8; 8192];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                let mut message = Vec::with_capacity(read + 1);
                message.push(channel);
                message.extend_from_slice(&buffer[..read]);
                if out.send(message).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_zero_exit_is_reported_as_the_kubelet_does() {
        let argv = ["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];
        let expected = json!({
            "metadata": {}, "status": "Failure",
            "message": "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3",
            "reason": "NonZeroExitCode", "details": { "causes": [{ "reason": "ExitCode", "message": "3" }] },
        });
        assert_eq!(exit_status(&argv, 3), expected);
        assert_eq!(exit_status(&argv, 0), json!({ "metadata": {}, "status": "Success" }));
    }

    #[test]
    fn repeated_commands_are_one_argv() {
        let request = ExecRequest::parse("&stdout=true&stderr=true&command=sh&command=-c&command=echo%20hi");
        assert_eq!(request.argv, ["sh", "-c", "echo hi"]);
        assert!(request.stdout && request.stderr && !request.stdin);
    }
}
