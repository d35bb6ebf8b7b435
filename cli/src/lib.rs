//! `anycloud`: the command-line tool and the API server, as a library that the `anycloud` binary
//! runs with no test seams ([`main`]), and that the test suite's own binary runs with the seams
//! it reads from its environment.
//!
//! Exit codes (docs/cli.md): 0 done or reached, 1 ended another way, 2 could not observe, 3 bad
//! input, 4 timeout, 5 a workflow stopped for a person, 130 a person stopped it at a prompt.

mod args;
mod client;
mod commands;
mod config;
mod dispatch;
mod exit;
mod output;
mod progress;
mod render;
mod seams;
mod server;
mod terminal;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{ApiCommand, Cli, Command};
use crate::exit::{BAD_INPUT, CliError, OK};
pub use crate::seams::Seams;
/// The API's listener, whose limits (timeouts, connections) the tests hold it to.
pub use crate::server::listener;

/// Runs the command line with these test seams (none in the `anycloud` binary) and returns the
/// process's exit code.
pub fn main(seams: Seams) -> ExitCode {
    seams::install(seams);
    let wants_json = std::env::args().any(|arg| arg == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => {
            let _ = err.print();
            return ExitCode::from(OK);
        }
        // clap's own words, with the stable code every other error carries.
        Err(err) => {
            let rendered = err.render().to_string();
            let message = rendered.trim_end().strip_prefix("error: ").unwrap_or(rendered.trim_end());
            report(&CliError::bad_input(message), wants_json);
            return ExitCode::from(BAD_INPUT);
        }
    };
    if let Command::SimKubeProxy { routes } = &cli.command {
        // Its own small runtime and no log setup: it writes to the log file the API gave it.
        return match anycloud_sim::kube::run_proxy(routes) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("simulated kube-proxy: {err}");
                ExitCode::FAILURE
            }
        };
    }
    let serving = matches!(cli.command, Command::Api(ApiCommand::Serve(_)));
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("ANYCLOUD_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(if serving { "info,sqlx::postgres::notice=warn" } else { "warn" })
        }))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            let err = CliError::new(exit::NOT_OBSERVED, "RUNTIME", format!("starting the async runtime: {err}"));
            report(&err, wants_json);
            return ExitCode::from(err.code);
        }
    };
    let json = cli.json;
    match runtime.block_on(dispatch::run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            report(&err, json);
            ExitCode::from(err.code)
        }
    }
}

/// Prints a failure on stderr: `error[CODE]: message`, or the API's JSON error body.
fn report(err: &CliError, json: bool) {
    if json {
        let body = anycloud_workflows::wire::ErrorBody {
            error: anycloud_workflows::wire::ErrorDetail { code: err.error_code.clone(), message: err.message.clone() },
        };
        eprintln!("{}", serde_json::to_string(&body).unwrap_or_default());
    } else {
        eprintln!("error[{}]: {}", err.error_code, err.message);
    }
}
