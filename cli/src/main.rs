//! `anycloud`: the command-line tool and the API server.
//!
//! Exit codes (docs/cli.md): 0 done or reached, 1 ended another way, 2 could not observe,
//! 3 bad input, 4 timeout.

mod client;
mod commands;
mod config;
mod exit;
mod output;
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
    /// Create, inspect and delete Kubernetes clusters (needs a hosted API to create).
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Wait for resources, e.g. `anycloud wait cluster/training`: one line per state change.
    /// Exit 0 reached (ready, or deleted), 1 ended another way, 2 not observable, 4 timeout.
    Wait {
        /// Typed references: `cluster/NAME`.
        #[arg(required = true)]
        refs: Vec<String>,
        /// Give up after this long (e.g. 90s, 15m, 1h).
        #[arg(long, default_value = "30m", value_parser = commands::cluster::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Inspect and steer the durable workflows of the active API.
    #[command(subcommand)]
    Workflow(WorkflowCommand),
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Store a cluster's durable intent; the hosted API then brings up its control plane and VMs.
    Create(CreateClusterArgs),
    /// Phase, placement, VMs with their provider ids, endpoint, running workflow, last error.
    Status {
        /// The cluster's name.
        name: String,
    },
    /// List clusters that are not deleted.
    List,
    /// Delete a cluster (asynchronous); refused while a deployment references it.
    Delete {
        /// The cluster's name.
        name: String,
        /// Follow the deletion; exit 0 once deleted.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits (e.g. 90s, 15m).
        #[arg(long, default_value = "30m", value_parser = commands::cluster::parse_duration)]
        timeout: std::time::Duration,
    },
}

#[derive(Debug, Args)]
struct CreateClusterArgs {
    /// The cluster's name (a DNS label).
    name: String,
    /// The credential whose account holds the capacity VMs.
    #[arg(long)]
    credentials: String,
    /// The provider's region, e.g. us-east-1, us-central1, sim-east-1.
    #[arg(long)]
    region: String,
    /// The provider's machine type, e.g. t3.medium, e2-standard-2, sim.small.
    #[arg(long)]
    vm_type: String,
    /// Capacity VMs (currently equal to --max-vms).
    #[arg(long)]
    min_vms: i64,
    /// Capacity VMs (currently equal to --min-vms).
    #[arg(long)]
    max_vms: i64,
    /// Follow the creation step by step; exit 0 once ready, 1 if it failed.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits (e.g. 90s, 15m).
    #[arg(long, default_value = "30m", value_parser = commands::cluster::parse_duration)]
    timeout: std::time::Duration,
}

#[derive(Debug, Subcommand)]
enum ApiCommand {
    /// Run an API: a local one on 127.0.0.1 (SQLite in its data directory unless --database-url is
    /// given), or with --credentials a hosted one, which may create clusters.
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
    /// Stop a hosted API this CLI started (SIGTERM: it finishes steps in flight and releases leases).
    Stop {
        /// The API's name.
        #[arg(default_value = "local")]
        id: String,
        /// Its data directory, if not the default.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// The API's name (a DNS label); its data lives under it.
    #[arg(long, default_value = "local")]
    id: String,
    /// Port on 127.0.0.1; 0 picks a free one [default: 7878 for a local API, any free port for a hosted one].
    #[arg(long)]
    port: Option<u16>,
    /// Data directory (token, secret key, SQLite database). Default: $XDG_DATA_HOME/anycloud/apis/ID.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Keep state in PostgreSQL instead of SQLite, e.g. postgres://user@host/db.
    #[arg(long, env = "ANYCLOUD_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Make this API the CLI's active API (stores its URL and token in the CLI config).
    #[arg(long = "use")]
    use_it: bool,
    /// Host the API (and clusters' control planes) with this credential: `sim` starts it as a
    /// detached process hosted by the simulated cloud. AWS and GCP hosting are not implemented yet.
    #[arg(long)]
    credentials: Option<String>,
    /// Hosted API: the VM type of its host (AWS/GCP hosting; not implemented yet).
    #[arg(long, requires = "credentials")]
    vm_type: Option<String>,
    /// Hosted API: the bucket its state is checkpointed to (AWS/GCP hosting; not implemented yet).
    #[arg(long, requires = "credentials")]
    checkpoint_bucket: Option<String>,
    /// Hosted API: the credential of the checkpoint bucket (AWS/GCP hosting; not implemented yet).
    #[arg(long, requires = "credentials")]
    checkpoint_storage_credentials: Option<String>,
    /// Runs as the hosted API process itself (what `--credentials sim` starts).
    #[arg(long, hide = true, conflicts_with = "credentials")]
    hosted_by: Option<String>,
}

#[derive(Debug, Subcommand)]
enum CredentialsCommand {
    /// Save a credential; the API verifies it with the provider (one cheap read call).
    New(Box<NewCredentialArgs>),
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
    #[command(flatten)]
    sim: commands::credentials::SimFlags,
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
        Command::Api(ApiCommand::Serve(args)) => match args.credentials {
            Some(credentials) => {
                let cloud_hosting_flags = args.vm_type.is_some()
                    || args.checkpoint_bucket.is_some()
                    || args.checkpoint_storage_credentials.is_some();
                if cloud_hosting_flags && credentials.eq_ignore_ascii_case("sim") {
                    return Err(exit::CliError::bad_input(
                        "--vm-type, --checkpoint-bucket and --checkpoint-storage-credentials apply to hosting on AWS or \
                         GCP; the simulated cloud's host takes none of them",
                    ));
                }
                let args = commands::api::HostArgs {
                    id: args.id,
                    credentials,
                    port: args.port.unwrap_or(0),
                    data_dir: args.data_dir,
                    database_url: args.database_url,
                    use_it: args.use_it,
                };
                commands::api::host(args, json).await
            }
            None => {
                if let Some(host) = &args.hosted_by
                    && !host.eq_ignore_ascii_case("sim")
                {
                    return Err(exit::CliError::bad_input(format!("--hosted-by {host}: only `sim` is supported")));
                }
                server::serve(server::ServeOptions {
                    id: args.id,
                    port: args.port.unwrap_or(if args.hosted_by.is_some() { 0 } else { 7878 }),
                    data_dir: args.data_dir,
                    database_url: args.database_url,
                    use_it: args.use_it,
                    hosted_by: args.hosted_by,
                })
                .await
            }
        },
        Command::Api(ApiCommand::Stop { id, data_dir }) => commands::api::stop(&id, data_dir, json).await,
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
                sim: args.sim,
                wait: args.wait,
            };
            commands::credentials::new(args, json).await
        }
        Command::Credentials(CredentialsCommand::List) => commands::credentials::list(json).await,
        Command::Credentials(CredentialsCommand::Delete { name }) => commands::credentials::delete(&name, json).await,
        Command::Cluster(ClusterCommand::Create(args)) => {
            let args = commands::cluster::CreateArgs {
                name: args.name,
                credentials: args.credentials,
                region: args.region,
                vm_type: args.vm_type,
                min_vms: args.min_vms,
                max_vms: args.max_vms,
                wait: args.wait,
                timeout: args.timeout,
            };
            commands::cluster::create(args, json).await
        }
        Command::Cluster(ClusterCommand::Status { name }) => commands::cluster::status(&name, json).await,
        Command::Cluster(ClusterCommand::List) => commands::cluster::list(json).await,
        Command::Cluster(ClusterCommand::Delete { name, wait, timeout }) => {
            commands::cluster::delete(&name, wait, timeout, json).await
        }
        Command::Wait { refs, timeout } => {
            let mut worst = exit::OK;
            for reference in refs {
                let code = match reference.split_once('/') {
                    Some(("cluster", name)) if !name.is_empty() => commands::cluster::wait(name, timeout, json).await?,
                    _ => {
                        return Err(exit::CliError::bad_input(format!(
                            "`{reference}` is not a reference anycloud can wait for; write cluster/NAME"
                        )));
                    }
                };
                worst = worst.max(code);
            }
            Ok(worst)
        }
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
