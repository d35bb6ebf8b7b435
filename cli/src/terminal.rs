//! The person's terminal: echo turned off while a secret is typed, and put back whatever ends
//! the reading, Ctrl-C included.

use std::io::BufRead as _;

/// The terminal's echo turned off (newlines still shown) until dropped, which puts back the
/// settings it found.
pub struct EchoOff {
    saved: rustix::termios::Termios,
}

impl EchoOff {
    /// Turns standard input's echo off; the error says which terminal call failed.
    pub fn start() -> Result<Self, String> {
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin).map_err(|err| format!("reading the terminal's settings: {err}"))?;
        let mut quiet = saved.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        quiet.local_modes.insert(LocalModes::ECHONL);
        tcsetattr(&stdin, OptionalActions::Now, &quiet)
            .map_err(|err| format!("turning off the terminal's echo: {err}"))?;
        Ok(Self { saved })
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(std::io::stdin(), rustix::termios::OptionalActions::Now, &self.saved);
    }
}

/// Why a hidden read gave no text.
#[derive(Debug)]
pub enum HiddenReadError {
    /// Ctrl-C: the echo is back, nothing was read.
    Interrupted,
    /// The terminal could not be set or read.
    Terminal(String),
}

/// Reads standard input, a terminal, with echo off: its first line, or every line until Ctrl-D.
/// Ctrl-C ends the read with the echo put back (a blocked read cannot be cancelled: it runs on a
/// thread of its own, which the process leaves behind).
pub async fn read_hidden(first_line_only: bool) -> Result<String, HiddenReadError> {
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|err| HiddenReadError::Terminal(format!("catching Ctrl-C: {err}")))?;
    let hidden = EchoOff::start().map_err(HiddenReadError::Terminal)?;
    let (sender, answer) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let read = (|| {
            for line in std::io::stdin().lock().lines() {
                text.push_str(&line?);
                text.push('\n');
                if first_line_only {
                    break;
                }
            }
            Ok::<_, std::io::Error>(text)
        })();
        let _ = sender.send(read);
    });
    let read = tokio::select! {
        read = answer => read,
        _ = interrupts.recv() => {
            drop(hidden);
            return Err(HiddenReadError::Interrupted);
        }
    };
    drop(hidden);
    match read {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(err)) => Err(HiddenReadError::Terminal(format!("reading the terminal: {err}"))),
        Err(_) => Err(HiddenReadError::Terminal("reading the terminal: the reader stopped".into())),
    }
}
