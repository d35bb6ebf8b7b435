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
mod exit;
mod output;
mod render;
mod seams;
mod server;
mod terminal;

use std::process::ExitCode;

use anycloud_workflows::api::{NewCluster, WorkflowAction};
use anycloud_workflows::providers::endpoint::{self, EndpointPolicy};
use clap::Parser;

use crate::args::{
    ApiCommand, Cli, ClusterCommand, Command, CredentialsCommand, DeploymentCommand, JobCommand, JobSubcommand,
    SecretCommand, ServiceCommand, ServiceSubcommand, WorkflowCommand,
};
use crate::exit::{BAD_INPUT, CliError, CliResult, OK};
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
    match runtime.block_on(run(cli)) {
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
        let body = anycloud_workflows::api::ErrorBody {
            error: anycloud_workflows::api::ErrorDetail { code: err.error_code.clone(), message: err.message.clone() },
        };
        eprintln!("{}", serde_json::to_string(&body).unwrap_or_default());
    } else {
        eprintln!("error[{}]: {}", err.error_code, err.message);
    }
}

async fn run(cli: Cli) -> CliResult {
    let json = cli.json;
    match cli.command {
        Command::Api(ApiCommand::Serve(args)) => match args.credentials {
            Some(credentials) if !credentials.eq_ignore_ascii_case("sim") => {
                if args.allow_insecure_endpoints {
                    return Err(CliError::bad_input(format!(
                        "--allow-insecure-endpoints applies to the API this command runs; API `{}` is deployed by the \
                         active API and takes its setting (start that one with --allow-insecure-endpoints)",
                        args.id
                    )));
                }
                let Some(vm_type) = args.vm_type else {
                    return Err(CliError::bad_input(format!(
                        "hosting API `{}` with credential `{credentials}` needs --vm-type (e.g. t3.medium, e2-standard-2)",
                        args.id
                    )));
                };
                let Some(bucket) = args.checkpoint_bucket else {
                    return Err(CliError::bad_input(format!(
                        "hosting API `{}` with credential `{credentials}` needs --checkpoint-bucket: the VM keeps the \
                         API's state there (created if missing)",
                        args.id
                    )));
                };
                let request = anycloud_workflows::api::NewHostedApi {
                    name: args.id,
                    credentials,
                    vm_type,
                    region: args.region,
                    checkpoint_bucket: bucket,
                    checkpoint_storage_credentials: args.checkpoint_storage_credentials,
                    port: args.port,
                    binary: None,
                    binary_url: None,
                    binary_sha256: None,
                };
                let binary = match (args.binary, args.binary_url) {
                    (_, Some(url)) => commands::hosted_api::Binary::Url { url, sums: args.binary_sha256.join(",") },
                    (Some(file), None) => commands::hosted_api::Binary::File(file),
                    (None, None) => commands::hosted_api::Binary::Own,
                };
                let args =
                    commands::hosted_api::DeployArgs { request, binary, use_it: args.use_it, timeout: args.timeout };
                commands::hosted_api::deploy(args, json).await
            }
            Some(_sim) => {
                let cloud_hosting_flags = args.vm_type.is_some()
                    || args.region.is_some()
                    || args.binary.is_some()
                    || args.binary_url.is_some()
                    || !args.binary_sha256.is_empty()
                    || args.checkpoint_bucket.is_some()
                    || args.checkpoint_storage_credentials.is_some();
                if cloud_hosting_flags {
                    return Err(CliError::bad_input(
                        "--vm-type, --region, --binary, --binary-url, --binary-sha256, --checkpoint-bucket and \
                         --checkpoint-storage-credentials apply to hosting on AWS or GCP; the simulated cloud's host \
                         takes none of them",
                    ));
                }
                let args = commands::api::HostArgs {
                    id: args.id,
                    port: args.port.unwrap_or(0),
                    data_dir: args.data_dir,
                    database_url: args.database_url,
                    use_it: args.use_it,
                    allow_insecure_endpoints: args.allow_insecure_endpoints,
                };
                commands::api::host(args, json).await
            }
            None => {
                if let Some(host) = &args.hosted_by
                    && !["sim", "aws", "gcp"].contains(&host.as_str())
                {
                    return Err(CliError::bad_input(format!("--hosted-by {host}: use sim, aws or gcp")));
                }
                let endpoints = if args.allow_insecure_endpoints {
                    EndpointPolicy::AllowInsecure
                } else {
                    EndpointPolicy::HttpsOnly
                };
                for (flag, endpoint) in
                    [("--checkpoint-endpoint", &args.checkpoint_endpoint), ("--secret-endpoint", &args.secret_endpoint)]
                {
                    if let Some(endpoint) = endpoint {
                        endpoint::check(&format!("API `{}`: {flag}", args.id), endpoint, endpoints)
                            .map_err(CliError::bad_input)?;
                    }
                }
                let vm_secret = |secret: Option<String>| -> Result<Option<server::VmSecret>, CliError> {
                    match (secret, &args.hosted_by) {
                        (Some(secret), Some(host)) => Ok(Some(server::VmSecret {
                            store: host.parse().map_err(CliError::bad_input)?,
                            secret,
                            endpoint: args.secret_endpoint.clone(),
                        })),
                        _ => Ok(None),
                    }
                };
                let storage_secret = vm_secret(args.checkpoint_storage_secret)?;
                let keys_secret = vm_secret(args.keys_secret)?;
                let checkpoint = match &args.checkpoint_bucket {
                    Some(url) => Some(server::CheckpointOptions {
                        url: anycloud_checkpoint::BucketUrl::parse(url).map_err(CliError::bad_input)?,
                        endpoint: args.checkpoint_endpoint,
                        region: args.checkpoint_region,
                        storage_secret,
                        keys_secret,
                    }),
                    None => None,
                };
                let tls = match (args.tls_cert, args.tls_key, args.tls_address) {
                    (Some(cert), Some(key), _) => {
                        Some(server::tls::TlsSource::Files(server::tls::TlsFiles { cert, key }))
                    }
                    (_, _, Some(address)) => Some(server::tls::TlsSource::Issued { address }),
                    _ => None,
                };
                // A hosted API's requests leave from the address it is reached at, unless told.
                let public_address = match (&args.hosted_by, &tls) {
                    (Some(_), Some(server::tls::TlsSource::Issued { address })) => {
                        args.public_address.or_else(|| Some(address.clone()))
                    }
                    _ => args.public_address,
                };
                let options = server::ServeOptions {
                    checkpoint,
                    listen: args.listen,
                    tls,
                    id: args.id,
                    port: args.port.unwrap_or(if args.hosted_by.is_some() { 0 } else { 7878 }),
                    data_dir: args.data_dir,
                    database_url: args.database_url,
                    use_it: args.use_it,
                    public_address,
                    endpoints,
                    hosted_by: args.hosted_by,
                    owner: args.owner,
                    control_planes: match (
                        args.control_plane_credentials,
                        args.control_plane_region,
                        args.control_plane_vm_type,
                    ) {
                        (Some(credential), Some(region), Some(vm_type)) => {
                            Some(anycloud_workflows::cluster_sides::ControlPlaneHost { credential, region, vm_type })
                        }
                        _ => None,
                    },
                };
                server::serve(options, seams::get()).await
            }
        },
        Command::Api(ApiCommand::Stop { id, data_dir, delete_bucket }) => {
            commands::api::stop(&id, data_dir, delete_bucket, json).await
        }
        Command::Api(ApiCommand::RotateCa { id, timeout }) => commands::hosted_api::rotate_ca(id, timeout, json).await,
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
                machine_identity: args.machine_identity,
                project: args.project,
                sim: args.sim,
                wait: args.wait,
            };
            commands::credentials::new(args, json).await
        }
        Command::Credentials(CredentialsCommand::List) => commands::credentials::list(json).await,
        Command::Secret(SecretCommand::New(args)) => commands::secret::save(args, false, json).await,
        Command::Secret(SecretCommand::Set(args)) => commands::secret::save(args, true, json).await,
        Command::Secret(SecretCommand::List) => commands::secret::list(json).await,
        Command::Secret(SecretCommand::Delete { name }) => commands::secret::delete(&name, json).await,
        Command::Credentials(CredentialsCommand::Delete { name }) => commands::credentials::delete(&name, json).await,
        Command::Cluster(ClusterCommand::Create(args)) => {
            let args = commands::cluster::CreateArgs {
                cluster: NewCluster {
                    name: args.name,
                    credentials: args.credentials,
                    region: args.region,
                    vm_type: args.vm_type,
                    min_vms: args.min_vms,
                    max_vms: args.max_vms,
                },
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
        Command::Cluster(ClusterCommand::Kubeconfig { name, output }) => {
            commands::cluster::kubeconfig(&name, output.as_deref(), json).await
        }
        Command::Job(JobCommand { list: Some(JobSubcommand::List { status, limit }), .. }) => {
            commands::deployment::list(status, Some("job"), limit, json).await
        }
        Command::Job(JobCommand { list: None, submit: args }) => {
            let args = commands::job::SubmitArgs {
                image: args.image.unwrap_or_default(),
                cluster: args.cluster,
                name: args.name,
                env: args.env,
                env_file: args.env_file,
                cpus: args.cpus,
                memory: args.memory,
                secrets: args.secrets,
                command: args.command,
                placement: args.placement,
                wait: args.wait,
                timeout: args.timeout,
            };
            commands::job::submit(args, json).await
        }
        Command::Service(ServiceCommand { list: Some(ServiceSubcommand::List { status, limit }), .. }) => {
            commands::deployment::list(status, Some("service"), limit, json).await
        }
        Command::Service(ServiceCommand { list: None, deploy: args }) => {
            let args = commands::service::DeployArgs {
                image: args.image.unwrap_or_default(),
                cluster: args.cluster,
                name: args.name,
                env: args.env,
                env_file: args.env_file,
                port: args.port,
                replicas: args.replicas,
                cpus: args.cpus,
                memory: args.memory,
                progress_deadline: args.progress_deadline,
                secrets: args.secrets,
                command: args.command,
                placement: args.placement,
                unsupported: args.unsupported,
                wait: args.wait,
                timeout: args.timeout,
            };
            commands::service::deploy(args, json).await
        }
        Command::Deployment(DeploymentCommand::Upgrade {
            id,
            image,
            env,
            replicas,
            progress_deadline,
            secrets,
            wait,
            timeout,
        }) => {
            let args = commands::service::UpgradeArgs {
                key: id,
                image,
                env,
                replicas,
                progress_deadline,
                secrets,
                wait,
                timeout,
            };
            commands::service::upgrade(args, json).await
        }
        Command::Status { id: Some(id), verbose, watch, health } => {
            commands::deployment::status(&id, verbose, watch, health, json).await
        }
        Command::Status { id: None, .. } => commands::deployment::list(None, None, 100, json).await,
        Command::List { status, limit } => commands::deployment::list(status, None, limit, json).await,
        Command::Logs { id, follow } => commands::logs::logs(&id, follow).await,
        Command::Exec { id, stdin, command } => commands::exec::exec(&id, command, stdin).await,
        Command::Terminate { id, wait, timeout } => commands::deployment::terminate(&id, wait, timeout, json).await,
        Command::Resubmit { id, wait, timeout } => commands::deployment::resubmit(&id, wait, timeout, json).await,
        Command::Wait { refs, timeout } => {
            let mut worst = OK;
            for reference in refs {
                let code = match reference.split_once('/') {
                    Some(("cluster", name)) if !name.is_empty() => commands::cluster::wait(name, timeout, json).await?,
                    Some(("deployment", key)) if !key.is_empty() => {
                        commands::deployment::wait(key, timeout, json).await?
                    }
                    _ => {
                        return Err(CliError::bad_input(format!(
                            "`{reference}` is not a reference anycloud can wait for; write cluster/NAME or \
                             deployment/NAME"
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
        Command::Workflow(WorkflowCommand::Retry { id }) => {
            commands::workflow::act(&id, WorkflowAction::Retry, json).await
        }
        Command::Workflow(WorkflowCommand::Resume { id }) => {
            commands::workflow::act(&id, WorkflowAction::Resume, json).await
        }
        Command::Workflow(WorkflowCommand::Cancel { id }) => {
            commands::workflow::act(&id, WorkflowAction::Cancel, json).await
        }
        // Served in `main`, before the runtime starts.
        Command::SimKubeProxy { .. } => Ok(OK),
    }
}
