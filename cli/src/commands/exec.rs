//! `anycloud exec ID -- COMMAND...`: runs a command in a job's container over the API's exec
//! WebSocket, passing stdin, stdout and stderr through, and exits with the command's exit code.
//!
//! ```text
//!   this process                         API (GET /v1/deployments/ID/exec)
//!   ------------                         ---------------------------------
//!   Text   ExecRequest (JSON)      --->
//!   Binary [STDIN] data ...        --->  (only when stdin is forwarded)
//!   Binary [CLOSE_STDIN]           --->  at the end of stdin
//!                                  <---  Binary [STDOUT] data / [STDERR] data ...
//!                                  <---  Binary [EXIT] ExecExit (JSON), then Close
//! ```
//!
//! Stdin is forwarded unless it is a terminal (a person at a prompt would otherwise have to
//! press Ctrl-D before an `ls` could end); `-i/--stdin` forwards a terminal too. It is read on a
//! plain thread, not tokio's blocking pool: a read of a terminal cannot be cancelled, and a
//! pending one must not keep the process from exiting once the command has ended.

use std::io::{IsTerminal as _, Read as _, Write as _};

use anycloud_workflows::refusal::{Class, Code};
use anycloud_workflows::wire::{ExecExit, ExecRequest, exec_channel};
use futures::{SinkExt as _, StreamExt as _};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{Client, segment};
use crate::exit::{BAD_INPUT, CliError, CliResult, ENDED_OTHERWISE, NOT_OBSERVED};
use crate::output::stdout_failed;

/// One binary message of an exec session: its first byte is the channel.
#[derive(Debug)]
pub enum Frame {
    /// Client to server: some of the command's stdin.
    Stdin(Vec<u8>),
    /// Client to server: stdin has ended.
    CloseStdin,
    /// Server to client: some of the command's stdout.
    Stdout(Vec<u8>),
    /// Server to client: some of the command's stderr.
    Stderr(Vec<u8>),
    /// Server to client, last: how the command ended.
    Exit(ExecExit),
}

impl Frame {
    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let framed = |channel: u8, data: &[u8]| [&[channel], data].concat();
        match self {
            Self::Stdin(data) => framed(exec_channel::STDIN, data),
            Self::CloseStdin => vec![exec_channel::CLOSE_STDIN],
            Self::Stdout(data) => framed(exec_channel::STDOUT, data),
            Self::Stderr(data) => framed(exec_channel::STDERR, data),
            Self::Exit(exit) => framed(exec_channel::EXIT, &serde_json::to_vec(exit).unwrap_or_default()),
        }
    }

    /// Reads a message's bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let Some((&channel, data)) = bytes.split_first() else {
            return Err("an empty message, without a channel".into());
        };
        match channel {
            exec_channel::STDIN => Ok(Self::Stdin(data.to_vec())),
            exec_channel::STDOUT => Ok(Self::Stdout(data.to_vec())),
            exec_channel::STDERR => Ok(Self::Stderr(data.to_vec())),
            exec_channel::EXIT => {
                serde_json::from_slice(data).map(Self::Exit).map_err(|err| format!("an unreadable exit message: {err}"))
            }
            exec_channel::CLOSE_STDIN if data.is_empty() => Ok(Self::CloseStdin),
            other => Err(format!("a message on unknown channel {other}")),
        }
    }
}

/// Runs `command` in job `key`'s container; answers the command's exit code.
pub async fn exec(key: &str, command: Vec<String>, force_stdin: bool) -> CliResult {
    let client = Client::active()?;
    let forward_stdin = force_stdin || !std::io::stdin().is_terminal();
    let mut socket = client.websocket(&format!("/v1/deployments/{}/exec", segment(key))).await?;
    let interrupted = |what: String| {
        CliError::new(
            NOT_OBSERVED,
            "EXEC_INTERRUPTED",
            format!("exec in {key}: {what}; the command's exit code is unknown"),
        )
    };
    let request = ExecRequest { command, stdin: forward_stdin };
    let request = serde_json::to_string(&request).unwrap_or_default();
    socket
        .send(Message::Text(request.into()))
        .await
        .map_err(|err| interrupted(format!("sending the command: {err}")))?;

    let mut stdin = if forward_stdin {
        read_stdin()
    } else {
        // Nothing to read: say at once that stdin is empty.
        let _ = socket.send(binary(Frame::CloseStdin)).await;
        mpsc::channel(1).1
    };
    let mut stdin_open = forward_stdin;
    let mut exit: Option<ExecExit> = None;
    loop {
        tokio::select! {
            chunk = stdin.recv(), if stdin_open => {
                let frame = match chunk {
                    Some(data) => Frame::Stdin(data),
                    None => {
                        stdin_open = false;
                        Frame::CloseStdin
                    }
                };
                // A failed send means the session is over; its end is read below.
                let _ = socket.send(binary(frame)).await;
            }
            message = socket.next() => match message {
                Some(Ok(Message::Binary(bytes))) => match Frame::decode(&bytes) {
                    Ok(Frame::Stdout(data)) => write_out(&mut std::io::stdout(), &data),
                    Ok(Frame::Stderr(data)) => {
                        let mut stderr = std::io::stderr();
                        let _ = stderr.write_all(&data).and_then(|()| stderr.flush());
                    }
                    Ok(Frame::Exit(ended)) => exit = Some(ended),
                    Ok(Frame::Stdin(_) | Frame::CloseStdin) => {}
                    Err(err) => return Err(interrupted(format!("the API sent {err}"))),
                },
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => {}
                // Once the exit code has arrived, a connection that breaks has nothing left to say.
                Some(Err(_)) if exit.is_some() => break,
                Some(Err(err)) => return Err(interrupted(format!("the connection broke: {err}"))),
            },
        }
    }
    match exit {
        Some(ExecExit { exit_code: Some(code), .. }) => {
            Ok(u8::try_from(code.rem_euclid(256)).unwrap_or(ENDED_OTHERWISE))
        }
        Some(ExecExit { error: Some(error), .. }) => {
            Err(CliError::new(exit_code_of(&error.code), &error.code, error.message))
        }
        Some(ExecExit { exit_code: None, error: None }) => Err(interrupted("the API sent no exit code".into())),
        None => Err(interrupted("the API closed the session before the command ended".into())),
    }
}

/// The exit code of a refusal that ended an exec before the command ran: bad input or a
/// conflict (not started, ended, a service) 3; an unknown job, an unreachable cluster or a session
/// ended by the API's idle limit 2; an exec the cluster could not run 1.
fn exit_code_of(code: &str) -> u8 {
    if code == "EXEC_IDLE" {
        // The session ended before the command did: its outcome was not observed.
        return NOT_OBSERVED;
    }
    match Code::ALL.iter().find(|known| known.as_str() == code).map(|known| known.class()) {
        Some(Class::BadInput | Class::Conflict) => BAD_INPUT,
        Some(Class::NotFound | Class::Unavailable) => NOT_OBSERVED,
        None => ENDED_OTHERWISE,
    }
}

fn binary(frame: Frame) -> Message {
    Message::Binary(frame.encode().into())
}

fn write_out(out: &mut std::io::Stdout, data: &[u8]) {
    if let Err(err) = out.write_all(data).and_then(|()| out.flush()) {
        stdout_failed(&err);
    }
}

/// This process's stdin, chunk by chunk, until its end (or a read error, taken as its end).
fn read_stdin() -> mpsc::Receiver<Vec<u8>> {
    let (sender, receiver) = mpsc::channel(4);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buffer = vec![0; 32 * 1024];
        loop {
            match stdin.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(read) => {
                    if sender.blocking_send(buffer[..read].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    receiver
}

#[cfg(test)]
mod tests {
    use anycloud_workflows::wire::ErrorDetail;

    use super::*;

    #[test]
    fn frames_are_a_channel_byte_then_the_data() {
        assert_eq!(Frame::Stdin(b"hi".to_vec()).encode(), b"\x00hi");
        assert_eq!(Frame::CloseStdin.encode(), [255]);
        assert_eq!(Frame::Stdout(b"out".to_vec()).encode(), b"\x01out");
        assert_eq!(Frame::Stderr(Vec::new()).encode(), [2]);
        let exit = Frame::Exit(ExecExit { exit_code: Some(7), error: None }).encode();
        assert_eq!(exit, b"\x03{\"exit_code\":7}");
    }

    #[test]
    fn frames_decode_to_what_was_encoded() {
        for frame in [Frame::Stdin(b"a".to_vec()), Frame::Stdout(b"b\n".to_vec()), Frame::Stderr(b"c".to_vec())] {
            assert_eq!(format!("{:?}", Frame::decode(&frame.encode()).unwrap()), format!("{frame:?}"));
        }
        assert!(matches!(Frame::decode(&[255]), Ok(Frame::CloseStdin)));
        let refused = ExecExit {
            exit_code: None,
            error: Some(ErrorDetail { code: "DEPLOYMENT_ENDED".into(), message: "job `a` is completed".into() }),
        };
        match Frame::decode(&Frame::Exit(refused).encode()) {
            Ok(Frame::Exit(ExecExit { exit_code: None, error: Some(error) })) => {
                assert_eq!(error.code, "DEPLOYMENT_ENDED");
            }
            other => panic!("not the refusal: {other:?}"),
        }
    }

    #[test]
    fn malformed_frames_are_errors() {
        assert!(Frame::decode(&[]).is_err());
        assert!(Frame::decode(&[9, 1]).is_err());
        assert!(Frame::decode(b"\x03not json").is_err());
        assert!(Frame::decode(&[255, 0]).is_err());
    }

    #[test]
    fn refusals_exit_by_their_class() {
        assert_eq!(exit_code_of("DEPLOYMENT_NOT_STARTED"), BAD_INPUT);
        assert_eq!(exit_code_of("WRONG_DEPLOYMENT_KIND"), BAD_INPUT);
        assert_eq!(exit_code_of("DEPLOYMENT_NOT_FOUND"), NOT_OBSERVED);
        assert_eq!(exit_code_of("CLUSTER_UNREACHABLE"), NOT_OBSERVED);
        assert_eq!(exit_code_of("EXEC_IDLE"), NOT_OBSERVED);
        assert_eq!(exit_code_of("EXEC_FAILED"), ENDED_OTHERWISE);
    }
}
