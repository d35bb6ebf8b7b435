//! From a parsed command line to the command that runs it: one function per command group,
//! each turning clap's arguments into the command's own.

use anycloud_workflows::db::deployments::DeploymentKind;
use anycloud_workflows::wire::{NewCluster, WorkflowAction};

use crate::args::{
    ApiCommand, Cli, ClusterCommand, Command, CredentialsCommand, DeploymentCommand, JobCommand, JobSubcommand,
    SecretCommand, ServiceCommand, ServiceSubcommand, WorkflowCommand,
};
use crate::commands;
use crate::exit::{CliError, CliResult, OK};

/// Runs the command; `main` reports its error.
pub async fn run(cli: Cli) -> CliResult {
    let json = cli.json;
    match cli.command {
        Command::Api(command) => api(command, json).await,
        Command::Credentials(command) => credentials(command, json).await,
        Command::Secret(command) => secret(command, json).await,
        Command::Cluster(command) => cluster(command, json).await,
        Command::Job(command) => job(command, json).await,
        Command::Service(command) => service(command, json).await,
        Command::Deployment(command) => deployment(command, json).await,
        Command::Status { id: Some(id), verbose, watch, health } => {
            commands::deployment::status(&id, verbose, watch, health, json).await
        }
        Command::Status { id: None, .. } => commands::deployment::list(None, None, 100, json).await,
        Command::List { status, limit } => commands::deployment::list(status, None, limit, json).await,
        Command::Logs { id, follow } => commands::logs::logs(&id, follow).await,
        Command::Exec { id, stdin, command } => commands::exec::exec(&id, command, stdin).await,
        Command::Terminate { id, wait, timeout } => commands::deployment::terminate(&id, wait, timeout, json).await,
        Command::Resubmit { id, wait, timeout } => commands::deployment::resubmit(&id, wait, timeout, json).await,
        Command::Wait { refs, timeout } => wait(refs, timeout, json).await,
        Command::Workflow(command) => workflow(command, json).await,
        Command::Ui { no_open } => commands::ui::ui(no_open, json).await,
        Command::Completions { shell } => commands::shell::completions(shell),
        Command::Man { command } => commands::shell::man(&command),
        // Served in `main`, before the runtime starts.
        Command::SimKubeProxy { .. } => Ok(OK),
    }
}

async fn api(command: ApiCommand, json: bool) -> CliResult {
    match command {
        ApiCommand::Serve(args) => commands::api_serve::serve(*args, json).await,
        ApiCommand::Stop { id, data_dir, delete_bucket } => {
            commands::api::stop(&id, data_dir, delete_bucket, json).await
        }
        ApiCommand::RotateCa { id, timeout } => commands::hosted_api::rotate_ca(id, timeout, json).await,
        ApiCommand::List => commands::api::list(json),
        ApiCommand::Use { name } => commands::api::use_api(&name),
        ApiCommand::Status => commands::api::status(json).await,
    }
}

async fn credentials(command: CredentialsCommand, json: bool) -> CliResult {
    match command {
        CredentialsCommand::New(args) => {
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
        CredentialsCommand::List => commands::credentials::list(json).await,
        CredentialsCommand::Delete { name } => commands::credentials::delete(&name, json).await,
    }
}

async fn secret(command: SecretCommand, json: bool) -> CliResult {
    match command {
        SecretCommand::New(args) => commands::secret::save(args, false, json).await,
        SecretCommand::Set(args) => commands::secret::save(args, true, json).await,
        SecretCommand::List => commands::secret::list(json).await,
        SecretCommand::Delete { name } => commands::secret::delete(&name, json).await,
    }
}

async fn cluster(command: ClusterCommand, json: bool) -> CliResult {
    match command {
        ClusterCommand::Create(args) => {
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
        ClusterCommand::Status { name } => commands::cluster::status(&name, json).await,
        ClusterCommand::List => commands::cluster::list(json).await,
        ClusterCommand::Delete { name, wait, timeout } => commands::cluster::delete(&name, wait, timeout, json).await,
        ClusterCommand::Kubeconfig { name, output } => {
            commands::cluster::kubeconfig(&name, output.as_deref(), json).await
        }
    }
}

async fn job(command: JobCommand, json: bool) -> CliResult {
    if let Some(JobSubcommand::List { status, limit }) = command.list {
        return commands::deployment::list(status, Some(DeploymentKind::Job), limit, json).await;
    }
    let args = command.submit;
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

async fn service(command: ServiceCommand, json: bool) -> CliResult {
    if let Some(ServiceSubcommand::List { status, limit }) = command.list {
        return commands::deployment::list(status, Some(DeploymentKind::Service), limit, json).await;
    }
    let args = command.deploy;
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

async fn deployment(command: DeploymentCommand, json: bool) -> CliResult {
    let DeploymentCommand::Upgrade { id, image, env, replicas, progress_deadline, secrets, wait, timeout } = command;
    let args =
        commands::service::UpgradeArgs { key: id, image, env, replicas, progress_deadline, secrets, wait, timeout };
    commands::service::upgrade(args, json).await
}

/// `anycloud wait REF...`: each in turn; the exit code is the worst of theirs.
async fn wait(refs: Vec<String>, timeout: std::time::Duration, json: bool) -> CliResult {
    let mut worst = OK;
    for reference in refs {
        let code = match reference.split_once('/') {
            Some(("cluster", name)) if !name.is_empty() => commands::cluster::wait(name, timeout, json).await?,
            Some(("deployment", key)) if !key.is_empty() => commands::deployment::wait(key, timeout, json).await?,
            _ => {
                return Err(CliError::bad_input(format!(
                    "`{reference}` is not a reference anycloud can wait for; write cluster/NAME or deployment/NAME"
                )));
            }
        };
        worst = worst.max(code);
    }
    Ok(worst)
}

async fn workflow(command: WorkflowCommand, json: bool) -> CliResult {
    match command {
        WorkflowCommand::List { kind, status, resource, limit } => {
            commands::workflow::list(commands::workflow::ListArgs { kind, status, resource, limit }, json).await
        }
        WorkflowCommand::Inspect { id, events, follow } => commands::workflow::inspect(&id, events, follow, json).await,
        WorkflowCommand::Retry { id } => commands::workflow::act(&id, WorkflowAction::Retry, json).await,
        WorkflowCommand::Resume { id } => commands::workflow::act(&id, WorkflowAction::Resume, json).await,
        WorkflowCommand::Cancel { id } => commands::workflow::act(&id, WorkflowAction::Cancel, json).await,
    }
}
