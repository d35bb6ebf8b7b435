//! `anycloud`: the command-line tool and the API server.
//!
//! Exit codes (docs/cli.md): 0 done or reached, 1 ended another way, 2 could not observe,
//! 3 bad input, 4 timeout.

mod client;
mod commands;
mod config;
mod exit;
mod render;
mod server;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::exit::{BAD_INPUT, CliResult, OK};

/// Provision VMs on your own cloud accounts and run container workloads on them.
#[derive(Debug, Parser)]
#[command(name = "anycloud", version, about, after_help = EXIT_CODES)]
struct Cli {
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 done or target reached; 1 the resource ended another way (failed, \
cancelled, invalid); 2 could not observe (no active API, API unreachable, token rejected, unknown id); \
3 bad input (refused arguments or request); 4 timeout.";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run and choose Anycloud APIs.
    #[command(subcommand)]
    Api(ApiCommand),
    /// Save, list and delete cloud credentials on the active API.
    #[command(subcommand)]
    Credentials(CredentialsCommand),
    /// Inspect and steer the durable workflows of the active API.
    #[command(subcommand)]
    Workflow(WorkflowCommand),
}

#[derive(Debug, Subcommand)]
enum ApiCommand {
    /// Run a local API on 127.0.0.1 (SQLite in its data directory unless --database-url is given).
    Serve(ServeArgs),
    /// List the APIs the CLI knows; `*` marks the active one.
    List,
    /// Make a known API the active one.
    Use {
        /// The API's name.
        name: String,
    },
    /// Show the active API and whether it answers.
    Status,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// The API's name (a DNS label); its data lives under it.
    #[arg(long, default_value = "local")]
    id: String,
    /// Port on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 7878)]
    port: u16,
    /// Data directory (token, secret key, SQLite database). Default: $XDG_DATA_HOME/anycloud/apis/ID.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Keep state in PostgreSQL instead of SQLite, e.g. postgres://user@host/db.
    #[arg(long, env = "ANYCLOUD_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Make this API the CLI's active API (stores its URL and token in the CLI config).
    #[arg(long = "use")]
    use_it: bool,
}

#[derive(Debug, Subcommand)]
enum CredentialsCommand {
    /// Save a credential; the API verifies it with the provider (one cheap read call).
    New(NewCredentialArgs),
    /// List credentials (secrets are never shown).
    List,
    /// Delete a credential that nothing uses.
    Delete {
        /// The credential's name.
        name: String,
    },
}

#[derive(Debug, Args)]
struct NewCredentialArgs {
    /// The credential's name (a DNS label).
    name: String,
    /// aws, gcp or sim (the local simulated cloud).
    #[arg(long)]
    provider: String,
    /// AWS access key id [default: $AWS_ACCESS_KEY_ID].
    #[arg(long)]
    access_key_id: Option<String>,
    /// AWS secret access key [default: $AWS_SECRET_ACCESS_KEY]. Prefer the variable: flags show in `ps`.
    #[arg(long)]
    secret_access_key: Option<String>,
    /// GCP service-account key file [default: $GOOGLE_APPLICATION_CREDENTIALS].
    #[arg(long)]
    service_account_file: Option<PathBuf>,
    /// AWS region for the verification call [default: us-east-1].
    #[arg(long)]
    region: Option<String>,
    /// Another endpoint for the provider's API (a private endpoint, or a local test peer).
    #[arg(long)]
    endpoint: Option<String>,
    /// sim: the first N calls fail with a transient error.
    #[arg(long)]
    sim_fail_first: Option<u32>,
    /// sim: every call is rejected with this message.
    #[arg(long)]
    sim_reject: Option<String>,
    /// sim: each call takes this many milliseconds.
    #[arg(long)]
    sim_latency_ms: Option<u64>,
    /// Follow the verification; exit 0 if the credential is valid, 1 if not.
    #[arg(long)]
    wait: bool,
}

#[derive(Debug, Subcommand)]
enum WorkflowCommand {
    /// List workflows, newest first.
    List {
        /// Only this kind, e.g. credentials.verify.
        #[arg(long)]
        kind: Option<String>,
        /// Only this status: pending, running, waiting, retrying, needs-attention, unwinding, succeeded, failed, cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Only this resource key, e.g. credential/team-aws.
        #[arg(long)]
        resource: Option<String>,
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Show where a workflow is and why: status, current step, next attempt, lease, every step.
    Inspect {
        /// The workflow id.
        id: String,
        /// Add the timeline of events.
        #[arg(long)]
        events: bool,
        /// Stream step transitions until the workflow ends (exit 0 succeeded, 1 otherwise).
        #[arg(long)]
        follow: bool,
    },
    /// Run the current (parked or backing-off) step now.
    Retry {
        /// The workflow id.
        id: String,
    },
    /// Continue a parked workflow with a fresh retry budget for its current step.
    Resume {
        /// The workflow id.
        id: String,
    },
    /// Cancel: undo completed steps in reverse order.
    Cancel {
        /// The workflow id.
        id: String,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() { BAD_INPUT } else { OK });
        }
    };
    let serving = matches!(cli.command, Command::Api(ApiCommand::Serve(_)));
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ANYCLOUD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(if serving { "info" } else { "warn" })),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            return ExitCode::from(exit::NOT_OBSERVED);
        }
    };
    let json = cli.json;
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            if json {
                let body = serde_json::json!({ "error": { "code": err.error_code, "message": err.message } });
                eprintln!("{body}");
            } else {
                eprintln!("error: {}", err.message);
            }
            ExitCode::from(err.code)
        }
    }
}

async fn run(cli: Cli) -> CliResult {
    let json = cli.json;
    match cli.command {
        Command::Api(ApiCommand::Serve(args)) => {
            server::serve(server::ServeOptions {
                id: args.id,
                port: args.port,
                data_dir: args.data_dir,
                database_url: args.database_url,
                use_it: args.use_it,
            })
            .await
        }
        Command::Api(ApiCommand::List) => commands::api::list(json),
        Command::Api(ApiCommand::Use { name }) => commands::api::use_api(&name),
        Command::Api(ApiCommand::Status) => commands::api::status(json).await,
        Command::Credentials(CredentialsCommand::New(args)) => {
            let args = commands::credentials::NewArgs {
                name: args.name,
                provider: args.provider,
                access_key_id: args.access_key_id,
                secret_access_key: args.secret_access_key,
                service_account_file: args.service_account_file,
                region: args.region,
                endpoint: args.endpoint,
                sim_fail_first: args.sim_fail_first,
                sim_reject: args.sim_reject,
                sim_latency_ms: args.sim_latency_ms,
                wait: args.wait,
            };
            commands::credentials::new(args, json).await
        }
        Command::Credentials(CredentialsCommand::List) => commands::credentials::list(json).await,
        Command::Credentials(CredentialsCommand::Delete { name }) => commands::credentials::delete(&name, json).await,
        Command::Workflow(WorkflowCommand::List { kind, status, resource, limit }) => {
            commands::workflow::list(commands::workflow::ListArgs { kind, status, resource, limit }, json).await
        }
        Command::Workflow(WorkflowCommand::Inspect { id, events, follow }) => {
            commands::workflow::inspect(&id, events, follow, json).await
        }
        Command::Workflow(WorkflowCommand::Retry { id }) => commands::workflow::act(&id, "retry", json).await,
        Command::Workflow(WorkflowCommand::Resume { id }) => commands::workflow::act(&id, "resume", json).await,
        Command::Workflow(WorkflowCommand::Cancel { id }) => commands::workflow::act(&id, "cancel", json).await,
    }
}
