//! The command line: every command, flag and range, as clap parses it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::commands;

/// Provision VMs on your own cloud accounts and run container workloads on them.
#[derive(Debug, Parser)]
#[command(name = "anycloud", version, about, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 done or target reached; 1 the resource ended another way (failed, \
cancelled, invalid); 2 could not observe (no active API, API unreachable, token rejected, unknown id); \
3 bad input (refused arguments or request); 4 timeout; 5 the workflow stopped for a person (needs-attention).";

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run and choose Anycloud APIs.
    #[command(subcommand)]
    Api(ApiCommand),
    /// Save, list and delete cloud credentials on the active API.
    #[command(subcommand)]
    Credentials(CredentialsCommand),
    /// Keep environment values and registry logins for workloads (sealed, never shown).
    ///
    /// A secret holds values that jobs and services take as environment variables
    /// (`--secret NAME`), or a registry login their images are pulled with. Values are sealed on
    /// the API and never shown again.
    #[command(subcommand)]
    Secret(SecretCommand),
    /// Create, inspect and delete Kubernetes clusters (needs a hosted API to create).
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Run a container job on a cluster, or list jobs.
    ///
    /// `anycloud job IMAGE --cluster NAME -- COMMAND...` submits a job; `anycloud job list`
    /// lists jobs.
    #[command(
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        after_long_help = "Examples:\n  \
            anycloud job python:3.12 --cluster training -- python -c 'print(42)'\n  \
            anycloud job ghcr.io/acme/batch:latest --cluster training -i nightly -e MODE=full --wait\n  \
            anycloud job list --status running"
    )]
    Job(JobCommand),
    /// Deploy a service on a cluster, or list services.
    ///
    /// `anycloud service IMAGE --cluster NAME -- COMMAND...` deploys a service (the command serves
    /// on $PORT); `anycloud service list` lists services.
    #[command(
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        after_long_help = "Examples:\n  \
            anycloud service ghcr.io/acme/api:latest --cluster training --port 8080 --replicas 2 --wait\n  \
            anycloud service list"
    )]
    Service(ServiceCommand),
    /// Act on a deployment: upgrade a service to a new revision.
    #[command(subcommand)]
    Deployment(DeploymentCommand),
    /// Show one deployment in detail; without ID, list deployments.
    ///
    /// With ID, one job or service in detail (its state, revisions, workflow); without, the
    /// deployments, as `anycloud list` lists them.
    Status {
        /// The deployment's name or id.
        id: Option<String>,
        /// Also the environment variable names (never values), the namespace and the Kubernetes objects.
        #[arg(long)]
        verbose: bool,
        /// Print it again on every change until it ends, or (a service) runs with no upgrade in flight.
        #[arg(long, requires = "id")]
        watch: bool,
        /// Live Pod health: not supported yet for cluster-backed deployments (refused).
        #[arg(long, requires = "id")]
        health: bool,
    },
    /// List deployments (jobs and services), newest first.
    List {
        /// Only this state: queued, starting, running, completed, errored, terminated, failed, invalid,
        /// deploying, upgrading, rolling-back.
        #[arg(long)]
        status: Option<String>,
        /// At most this many, newest first (1 to 500; the API checks the range).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Print a job's output; --follow streams it until it ends.
    ///
    /// The output of the container of the job's current attempt.
    #[command(after_long_help = "Examples:\n  anycloud logs nightly\n  anycloud logs nightly --follow")]
    Logs {
        /// The job's name or id.
        id: String,
        /// Keep streaming until the container ends.
        #[arg(short, long)]
        follow: bool,
    },
    /// Run a command in a job's running container.
    ///
    /// `anycloud exec ID -- COMMAND...`: the command's stdout and stderr pass through and its exit
    /// code is this command's. This process's stdin is forwarded unless it is a terminal (then the
    /// command's stdin is empty; -i forwards it anyway).
    #[command(after_long_help = "Examples:\n  \
        anycloud exec nightly -- ls /data\n  \
        anycloud exec nightly -- sh -c 'wc -l < /dev/stdin' < input.txt\n  \
        anycloud exec nightly -i -- sh")]
    Exec {
        /// The job's name or id.
        id: String,
        /// Forward stdin even when it is a terminal (until end of input, Ctrl-D).
        #[arg(short = 'i', long = "stdin")]
        stdin: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// End a job or a service; its record stays.
    ///
    /// Its Kubernetes objects are deleted and it ends `terminated`; the record stays (asking again
    /// is harmless).
    Terminate {
        /// The deployment's name or id.
        id: String,
        /// Follow it until it has ended; exit 0 once it has.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits (e.g. 90s, 15m).
        #[arg(long, default_value = "30m", value_parser = commands::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Run an ended job again with the same configuration, as its next attempt.
    Resubmit {
        /// The deployment's name or id.
        id: String,
        /// Follow the new attempt until it ends; exit 0 completed, 1 ended another way.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits (e.g. 90s, 15m).
        #[arg(long, default_value = "30m", value_parser = commands::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Wait for clusters and deployments to reach their target state.
    ///
    /// Prints one line per state change. Exit 0 reached (a cluster ready or deleted, a job
    /// completed, a service running), 1 ended another way, 2 not observable, 4 timeout, 5 the
    /// workflow stopped for a person (the message says what to run).
    #[command(after_long_help = "Examples:\n  \
        anycloud wait cluster/training\n  \
        anycloud wait deployment/hello --timeout 15m\n  \
        anycloud wait cluster/training deployment/hello")]
    Wait {
        /// Typed references: `cluster/NAME`, `deployment/NAME-OR-ID`.
        #[arg(required = true)]
        refs: Vec<String>,
        /// Give up after this long (e.g. 90s, 15m, 1h).
        #[arg(long, default_value = "30m", value_parser = commands::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Inspect and steer the durable workflows of the active API.
    #[command(subcommand)]
    Workflow(WorkflowCommand),
    /// Open the web console of the active API in a browser.
    ///
    /// Prints an address that signs one browser in, once, within a minute (a session of 12
    /// hours in an HttpOnly cookie; the API's token never reaches the browser), and opens it
    /// where a desktop runs. docs/console.md says what the console shows.
    #[command(after_long_help = "Examples:\n  \
        anycloud ui\n  \
        anycloud ui --no-open | xargs chromium")]
    Ui {
        /// Print the address only; do not start a browser.
        #[arg(long)]
        no_open: bool,
    },
    /// Print the shell completion script for bash, zsh, fish or powershell.
    ///
    /// The script completes anycloud's commands and flags; it is printed on stdout, for the
    /// shell's completion directory or its startup file (docs/cli.md, "Completions").
    #[command(after_long_help = "Examples:\n  \
        anycloud completions bash > ~/.local/share/bash-completion/completions/anycloud\n  \
        anycloud completions zsh > \"${fpath[1]}/_anycloud\"\n  \
        anycloud completions fish > ~/.config/fish/completions/anycloud.fish")]
    Completions {
        /// The shell: bash, zsh, fish, powershell or elvish.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of anycloud, or of one of its commands.
    ///
    /// Without COMMAND, the page of `anycloud` itself, whose list of commands names each one's
    /// page (`anycloud-cluster(1)`); `anycloud man cluster` prints that one.
    #[command(after_long_help = "Examples:\n  \
        anycloud man > ~/.local/share/man/man1/anycloud.1\n  \
        anycloud man cluster create | man -l -")]
    Man {
        /// The command whose page to print, e.g. `cluster` or `cluster create`.
        #[arg(value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// A simulated cluster's kube-proxy, which the API starts for each simulated cluster with
    /// Services (not for people): serves the routes file until it is removed.
    #[command(name = "sim-kube-proxy", hide = true)]
    SimKubeProxy {
        /// The cluster's routes file.
        routes: std::path::PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Create a cluster: a hosted API brings up its control plane and VMs.
    ///
    /// The cluster's durable intent is stored at once; the hosted API then brings up its control
    /// plane and VMs (follow it with --wait or `anycloud wait cluster/NAME`).
    Create(CreateClusterArgs),
    /// Show a cluster: phase, placement, VMs, endpoint, workflow, last error.
    ///
    /// Its VMs with their provider ids, the workflow running on it and its last error.
    Status {
        /// The cluster's name.
        name: String,
    },
    /// List clusters that are not deleted.
    List,
    /// Print the cluster's kubeconfig, or write it to a file.
    ///
    /// It holds the cluster's API server, CA and an admin token.
    Kubeconfig {
        /// The cluster's name.
        name: String,
        /// Write it to this file (created with mode 0600) instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Delete a cluster (asynchronous); refused while a deployment references it.
    Delete {
        /// The cluster's name.
        name: String,
        /// Follow the deletion; exit 0 once deleted, 5 if it stops for a person.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits (e.g. 90s, 15m).
        #[arg(long, default_value = "30m", value_parser = commands::parse_duration)]
        timeout: std::time::Duration,
    },
}

#[derive(Debug, Args)]
pub(crate) struct CreateClusterArgs {
    /// The cluster's name (a DNS label).
    pub(crate) name: String,
    /// The credential whose account holds the capacity VMs.
    #[arg(long)]
    pub(crate) credentials: String,
    /// The provider's region, e.g. us-east-1, us-central1, sim-east-1.
    #[arg(long)]
    pub(crate) region: String,
    /// The provider's machine type, e.g. t3.medium, e2-standard-2, sim.small.
    #[arg(long)]
    pub(crate) vm_type: String,
    /// Capacity VMs (currently equal to --max-vms).
    #[arg(long)]
    pub(crate) min_vms: i64,
    /// Capacity VMs (currently equal to --min-vms).
    #[arg(long)]
    pub(crate) max_vms: i64,
    /// Follow the creation step by step; exit 0 once ready, 1 if it failed, 5 if it stops for a person.
    #[arg(long)]
    pub(crate) wait: bool,
    /// How long --wait waits (e.g. 90s, 15m).
    #[arg(long, default_value = "30m", value_parser = commands::parse_duration)]
    pub(crate) timeout: std::time::Duration,
}

/// `anycloud job IMAGE ... -- COMMAND...`, or `anycloud job list`.
#[derive(Debug, Args)]
pub(crate) struct JobCommand {
    #[command(subcommand)]
    pub(crate) list: Option<JobSubcommand>,
    #[command(flatten)]
    pub(crate) submit: SubmitJobArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum JobSubcommand {
    /// List jobs, newest first.
    List {
        /// Only this state: queued, starting, running, completed, errored, terminated, failed, invalid.
        #[arg(long)]
        status: Option<String>,
        /// At most this many, newest first (1 to 500; the API checks the range).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

/// What `anycloud job IMAGE` takes.
#[derive(Debug, Args)]
pub(crate) struct SubmitJobArgs {
    /// The container image, e.g. python:3.12 or ghcr.io/acme/batch:latest.
    #[arg(required = true)]
    pub(crate) image: Option<String>,
    /// The cluster (name or id) to run on; required: this build places workloads only on clusters.
    #[arg(long)]
    pub(crate) cluster: Option<String>,
    /// The job's name (a DNS label); made from the image when absent.
    #[arg(short = 'i', long = "id", value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// An environment variable, KEY=VALUE (repeatable; wins over --env-file).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE", value_parser = commands::job::parse_env_flag)]
    pub(crate) env: Vec<anycloud_workflows::db::spec::EnvVar>,
    /// A file of KEY=VALUE lines (`#` comments, blank lines and an `export ` prefix allowed).
    #[arg(long, value_name = "FILE")]
    pub(crate) env_file: Option<PathBuf>,
    /// CPUs requested and limited, e.g. 0.5, 2 or 1500m.
    #[arg(long)]
    pub(crate) cpus: Option<String>,
    /// Memory requested and limited, e.g. 512Mi or 2Gi.
    #[arg(long)]
    pub(crate) memory: Option<String>,
    #[command(flatten)]
    pub(crate) secrets: commands::secret::SecretFlags,
    /// Follow the job until it ends; exit 0 completed, 1 errored, terminated, failed or invalid,
    /// 4 timeout, 5 its workflow stopped for a person.
    #[arg(long)]
    pub(crate) wait: bool,
    /// How long --wait waits (e.g. 90s, 15m).
    #[arg(long, default_value = "30m", value_parser = commands::parse_duration)]
    pub(crate) timeout: std::time::Duration,
    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
    #[command(flatten)]
    pub(crate) placement: commands::job::PlacementFlags,
}

/// `anycloud service IMAGE ... -- COMMAND...`, or `anycloud service list`.
#[derive(Debug, Args)]
pub(crate) struct ServiceCommand {
    #[command(subcommand)]
    pub(crate) list: Option<ServiceSubcommand>,
    #[command(flatten)]
    pub(crate) deploy: DeployServiceArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ServiceSubcommand {
    /// List services, newest first.
    List {
        /// Only this state: deploying, running, upgrading, rolling-back, terminated, failed.
        #[arg(long)]
        status: Option<String>,
        /// At most this many, newest first (1 to 500; the API checks the range).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

/// What `anycloud service IMAGE` takes.
#[derive(Debug, Args)]
pub(crate) struct DeployServiceArgs {
    /// The container image, e.g. ghcr.io/acme/api:latest.
    #[arg(required = true)]
    pub(crate) image: Option<String>,
    /// The cluster (name or id) to run on; required: this build places workloads only on clusters.
    #[arg(long)]
    pub(crate) cluster: Option<String>,
    /// The service's name (a DNS label starting with a letter); made from the image when absent.
    #[arg(short = 'i', long = "id", value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// An environment variable, KEY=VALUE (repeatable; wins over --env-file; PORT is set from --port).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE", value_parser = commands::job::parse_env_flag)]
    pub(crate) env: Vec<anycloud_workflows::db::spec::EnvVar>,
    /// A file of KEY=VALUE lines (`#` comments, blank lines and an `export ` prefix allowed).
    #[arg(long, value_name = "FILE")]
    pub(crate) env_file: Option<PathBuf>,
    /// The port the app listens on, given to it as $PORT (the API checks 1 to 65535) [default: 8080].
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) port: Option<i64>,
    /// How many replicas (the API checks 1 to 100) [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) replicas: Option<i64>,
    /// CPUs requested and limited per replica, e.g. 0.5, 2 or 1500m.
    #[arg(long)]
    pub(crate) cpus: Option<String>,
    /// Memory requested and limited per replica, e.g. 512Mi or 2Gi.
    #[arg(long)]
    pub(crate) memory: Option<String>,
    /// How long a revision may take to become available (e.g. 90s, 10m; at most 24h) [default: 10m].
    #[arg(long, value_parser = commands::parse_duration)]
    pub(crate) progress_deadline: Option<std::time::Duration>,
    #[command(flatten)]
    pub(crate) secrets: commands::secret::SecretFlags,
    /// Follow the service until it runs; exit 0 running, 1 failed, 4 timeout, 5 its workflow
    /// stopped for a person.
    #[arg(long)]
    pub(crate) wait: bool,
    /// How long --wait waits (e.g. 90s, 15m).
    #[arg(long, default_value = "30m", value_parser = commands::parse_duration)]
    pub(crate) timeout: std::time::Duration,
    /// The command and its arguments, after `--`; it must serve on $PORT.
    #[arg(last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
    #[command(flatten)]
    pub(crate) placement: commands::job::PlacementFlags,
    #[command(flatten)]
    pub(crate) unsupported: commands::service::UnsupportedFlags,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DeploymentCommand {
    /// Roll a service out to a new revision.
    ///
    /// What is not given stays as the latest revision that did not fail. It never removes a serving replica before a new one is available; a revision
    /// that crashes or misses its progress deadline is rolled back, and the upgrade ends failed.
    Upgrade {
        /// The service's name or id.
        id: String,
        /// A new image.
        #[arg(long)]
        image: Option<String>,
        /// An environment variable to set, KEY=VALUE (repeatable).
        #[arg(short = 'e', long = "env", value_name = "KEY=VALUE", value_parser = commands::job::parse_env_flag)]
        env: Vec<anycloud_workflows::db::spec::EnvVar>,
        /// A new number of replicas (the API checks 1 to 100).
        #[arg(long, allow_negative_numbers = true)]
        replicas: Option<i64>,
        /// How long the new revision may take to become available (e.g. 90s, 10m; at most 24h).
        #[arg(long, value_parser = commands::parse_duration)]
        progress_deadline: Option<std::time::Duration>,
        /// Secrets the new revision adds; every secret it takes is taken at its current version.
        #[command(flatten)]
        secrets: commands::secret::SecretFlags,
        /// Follow the upgrade; exit 0 once the new revision serves, 1 if it failed and was rolled back.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits (e.g. 90s, 15m).
        #[arg(long, default_value = "30m", value_parser = commands::parse_duration)]
        timeout: std::time::Duration,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ApiCommand {
    /// Run an API: a local one, or with --credentials a hosted one.
    ///
    /// A local API listens on 127.0.0.1 (SQLite in its data directory unless --database-url is
    /// given); with --credentials a hosted one, which may create clusters.
    Serve(Box<ServeArgs>),
    /// List the APIs the CLI knows; `*` marks the active one.
    List,
    /// Make a known API the active one.
    Use {
        /// The API's name.
        name: String,
    },
    /// Show the active API and whether it answers.
    Status,
    /// Give an API deployed on a cloud VM a new TLS CA.
    ///
    /// The API that deployed it does it: the new CA goes to its keys secret, the API serves a certificate from it (no restart), and the CLI
    /// config pins the old and the new CA meanwhile, then the new one alone. Its token and the
    /// key sealing its state are unchanged. Interrupted, run it again: it follows the rotation in
    /// hand, or makes another.
    RotateCa {
        /// The API's name [default: the active API].
        #[arg(value_name = "NAME")]
        id: Option<String>,
        /// How long to follow the rotation.
        #[arg(long, default_value = "10m", value_parser = commands::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Stop a hosted API (one on a cloud VM is removed).
    ///
    /// One on a cloud VM is removed by the API that deployed it (VM, network rules, VM identity; its
    /// bucket stays unless --delete-bucket); one this CLI started gets SIGTERM (it finishes steps
    /// in flight and releases leases).
    #[command(alias = "delete")]
    Stop {
        /// The API's name.
        #[arg(default_value = "local")]
        id: String,
        /// Its data directory, if not the default.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// An API on a cloud VM: delete its checkpoint bucket, and the API's state in it, too.
        #[arg(long)]
        delete_bucket: bool,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The API's name (a DNS label); its data lives under it.
    #[arg(long, default_value = "local")]
    pub(crate) id: String,
    /// Port on 127.0.0.1; 0 picks a free one [default: 7878 for a local API, any free port for one
    /// hosted by the simulated cloud, 443 for one on an AWS or GCP VM, where it is the public port].
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// The address to listen on; anything but loopback needs --tls-cert and --tls-key.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) listen: std::net::IpAddr,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key); `--use` pins its last
    /// certificate (its CA, or itself if self-signed) in the CLI config.
    #[arg(long, requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Serve HTTPS with a certificate for this IP address or DNS name, issued at start by the CA
    /// in the data directory (`tls-ca.crt`, `tls-ca.key`, which a deployed API restores from its
    /// checkpoint bucket). What a VM that `api serve --credentials` launched runs.
    #[arg(long, conflicts_with = "tls_cert")]
    pub(crate) tls_address: Option<String>,
    /// Data directory (token, secret key, SQLite database). Default: $XDG_DATA_HOME/anycloud/apis/ID.
    #[arg(long)]
    pub(crate) data_dir: Option<PathBuf>,
    /// Keep state in PostgreSQL instead of SQLite, e.g. postgres://user@host/db.
    #[arg(long, env = "ANYCLOUD_DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    /// Make this API the CLI's active API (stores its URL and token in the CLI config).
    #[arg(long = "use")]
    pub(crate) use_it: bool,
    /// Host the API with this credential: `sim` starts it as a detached process hosted by the
    /// simulated cloud; an aws or gcp credential saved on the active API deploys it on a VM of
    /// that account (`api.deploy`, run by the active API), its state in --checkpoint-bucket.
    #[arg(long)]
    pub(crate) credentials: Option<String>,
    /// AWS/GCP hosting: the VM's machine type (e.g. t3.medium, e2-standard-2).
    #[arg(long, requires = "credentials")]
    pub(crate) vm_type: Option<String>,
    /// AWS/GCP hosting: the VM's region [default: the credential's, else us-east-1 / us-central1].
    #[arg(long, requires = "credentials")]
    pub(crate) region: Option<String>,
    /// AWS/GCP hosting: the `anycloud` binary the deploy ships to the VM (through the API's
    /// bucket) [default: this CLI's own, when the machine type runs its architecture]. For a
    /// machine type of another architecture: a Linux build for it (its ELF header must say so).
    #[arg(long, requires = "credentials", conflicts_with = "binary_url")]
    pub(crate) binary: Option<PathBuf>,
    /// AWS/GCP hosting: the VM downloads `anycloud` from this https:// URL that you host instead
    /// (`{arch}` becomes x86_64 or aarch64); needs --binary-sha256.
    #[arg(long, requires_all = ["credentials", "binary_sha256"])]
    pub(crate) binary_url: Option<String>,
    /// With --binary-url: the SHA-256 of each architecture's binary, ARCH=HEX (repeat the flag, or
    /// separate by commas: x86_64=HEX,aarch64=HEX); the VM runs nothing else.
    #[arg(long, requires = "binary_url", value_delimiter = ',')]
    pub(crate) binary_sha256: Vec<String>,
    /// AWS/GCP hosting: how long to follow the deploy (e.g. 15m).
    #[arg(long, default_value = "30m", value_parser = commands::parse_duration)]
    pub(crate) timeout: std::time::Duration,
    /// Keep this API's SQLite state in a bucket, `s3://BUCKET[/PREFIX]` or `gs://BUCKET[/PREFIX]`: it
    /// restores from the bucket at start (the local disk is not trusted) and every request it answers
    /// is in the bucket first (docs/hosting.md). With --credentials aws|gcp: the deployed API's bucket
    /// (a bare name takes the storage credential's store), created if missing, versioned, private.
    #[arg(long)]
    pub(crate) checkpoint_bucket: Option<String>,
    /// The checkpoint bucket's endpoint, for an S3-compatible store or a private endpoint
    /// (https:// to a public or private-link host, unless --allow-insecure-endpoints).
    #[arg(long, requires = "checkpoint_bucket")]
    pub(crate) checkpoint_endpoint: Option<String>,
    /// Let this API call plain-http:// endpoints and ones on loopback or inner networks, for
    /// credentials' --endpoint and --checkpoint-endpoint: only for a local test peer such as moto.
    /// An API deployed by this one gets the same setting. `api status` shows it.
    #[arg(long)]
    pub(crate) allow_insecure_endpoints: bool,
    /// The checkpoint bucket's region (S3) [default: the SDK's, else us-east-1].
    #[arg(long, requires = "checkpoint_bucket")]
    pub(crate) checkpoint_region: Option<String>,
    /// AWS/GCP hosting: the credential of the checkpoint bucket [default: the hosting one]; of the
    /// other provider, its key reaches the VM through the hosting provider's secret store.
    #[arg(long, requires = "credentials")]
    pub(crate) checkpoint_storage_credentials: Option<String>,
    /// A hosted API whose checkpoint bucket is on another provider: the secret, in its own
    /// provider's secret store, holding the bucket's key (an ARN, `projects/P/secrets/NAME`),
    /// read at start as the VM's identity. `api.deploy`'s boot script passes it.
    #[arg(long, hide = true, requires_all = ["hosted_by", "checkpoint_bucket"])]
    pub(crate) checkpoint_storage_secret: Option<String>,
    /// A hosted API: the secret, in its own provider's secret store, holding its keys (its token,
    /// sealing key and TLS CA), read at start as the VM's identity and kept on its disk only, never
    /// in the bucket. `api.deploy`'s boot script passes it.
    #[arg(long, hide = true, requires_all = ["hosted_by", "checkpoint_bucket"])]
    pub(crate) keys_secret: Option<String>,
    /// The secret store's endpoint, when not the provider's public one (the hosting credential's
    /// private endpoint).
    #[arg(long, hide = true, requires = "hosted_by")]
    pub(crate) secret_endpoint: Option<String>,
    /// Runs as the hosted API process itself (what `--credentials sim` starts).
    #[arg(long, hide = true, conflicts_with = "credentials")]
    pub(crate) hosted_by: Option<String>,
    /// A hosted API: the public address its requests leave from, which its clusters' rules let
    /// reach their Kubernetes APIs [default: `--tls-address`, the address it is reached at].
    #[arg(long, hide = true, requires = "hosted_by")]
    pub(crate) public_address: Option<String>,
    /// A hosted API: place clusters' control planes with this credential saved on it (the one it
    /// is hosted with; `api.deploy`'s boot script passes it, and saves the credential here).
    #[arg(long, hide = true, requires_all = ["hosted_by", "control_plane_region", "control_plane_vm_type"])]
    pub(crate) control_plane_credentials: Option<String>,
    /// A hosted API: its owner id at its provider (`api-<id>`), tagged on everything it makes
    /// there (`anycloud-owner`); its VM's role may change only resources carrying it.
    #[arg(long, hide = true, requires = "hosted_by")]
    pub(crate) owner: Option<String>,
    /// The control planes' region (the API's own).
    #[arg(long, hide = true, requires = "control_plane_credentials")]
    pub(crate) control_plane_region: Option<String>,
    /// The control planes' machine type (the API's own).
    #[arg(long, hide = true, requires = "control_plane_credentials")]
    pub(crate) control_plane_vm_type: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SecretCommand {
    /// Create a secret of values, or a registry login.
    ///
    /// Values come from --from-literal, --from-env-file or KEY=VALUE lines on standard input
    /// (never echoed); a registry login from --registry HOST --username U --password-stdin.
    New(commands::secret::ValuesArgs),
    /// List secrets: names, kinds, keys, versions and users (never values).
    ///
    /// The users are the deployments that have not ended and take the secret.
    List,
    /// Give a secret its next version, whole.
    ///
    /// Keys not given are gone from it. Deployments keep the version they took until they are
    /// resubmitted or upgraded.
    Set(commands::secret::ValuesArgs),
    /// Delete a secret and every version of it.
    ///
    /// Refused while a deployment that has not ended takes it.
    Delete {
        /// The secret's name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum CredentialsCommand {
    /// Save a credential; the API verifies it with the provider.
    ///
    /// The verification is one cheap read call. Without --provider, on a terminal, it asks for the provider and its keys (secrets typed hidden),
    /// shows what it will save and follows the verification; without a terminal it is refused
    /// (PROVIDER_REQUIRED).
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
pub(crate) struct NewCredentialArgs {
    /// The credential's name (a DNS label).
    pub(crate) name: String,
    /// aws, gcp or sim (the local simulated cloud). Without it, on a terminal, the command asks
    /// for the provider and its keys; scripts must give it.
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// AWS access key id [default: $AWS_ACCESS_KEY_ID].
    #[arg(long)]
    pub(crate) access_key_id: Option<String>,
    /// AWS secret access key [default: $AWS_SECRET_ACCESS_KEY]. Prefer the variable: flags show in `ps`.
    #[arg(long)]
    pub(crate) secret_access_key: Option<String>,
    /// GCP service-account key file [default: $GOOGLE_APPLICATION_CREDENTIALS].
    #[arg(long)]
    pub(crate) service_account_file: Option<PathBuf>,
    /// AWS region for the verification call [default: us-east-1].
    #[arg(long)]
    pub(crate) region: Option<String>,
    /// Another endpoint for the provider's API (a private endpoint, or a local test peer).
    #[arg(long)]
    pub(crate) endpoint: Option<String>,
    /// aws, gcp: save no key; the API acts as the machine it runs on (its instance profile, its
    /// service account). What a deployed API's hosting credential is on the API itself.
    #[arg(long, conflicts_with_all = ["access_key_id", "secret_access_key", "service_account_file"])]
    pub(crate) machine_identity: bool,
    /// gcp with --machine-identity: the project to act in.
    #[arg(long, requires = "machine_identity")]
    pub(crate) project: Option<String>,
    #[command(flatten)]
    pub(crate) sim: commands::credentials::SimFlags,
    /// Follow the verification; exit 0 if the credential is valid, 1 if not, 5 if it stops for a person.
    #[arg(long)]
    pub(crate) wait: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum WorkflowCommand {
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
        /// At most this many (1 to 1000; the API checks the range).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Show where a workflow is and why, and what a person can do.
    ///
    /// Its status, current step, deadline, next attempt, lease and every step.
    Inspect {
        /// The workflow id.
        id: String,
        /// Add the timeline of events.
        #[arg(long)]
        events: bool,
        /// Stream step transitions until the workflow ends (exit 0 succeeded, 1 failed or cancelled,
        /// 5 needs attention).
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// The commands a message tells a user to run (`anycloud cluster delete NAME`, ...), as
    /// written in the sources of the domain and the CLI: every one must be a command this binary
    /// has, so that a refusal never sends anyone to a command that does not exist yet.
    #[test]
    fn every_command_a_message_names_exists() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut checked = 0;
        for dir in ["workflows/src", "cli/src", "engine/src", "sim/src"] {
            for file in sources(&root.join(dir)) {
                let text = joined(&std::fs::read_to_string(&file).unwrap());
                for (at, _) in text.match_indices("`anycloud ") {
                    let command: String = text[at + 1..].chars().take_while(|c| *c != '`').collect();
                    if command.contains(['\n', '"']) {
                        continue; // not a command in a message (this test's own code, say)
                    }
                    let words: Vec<&str> = command.split_whitespace().skip(1).collect();
                    check(&words, &command, &file);
                    checked += 1;
                }
            }
        }
        assert!(checked > 20, "only {checked} commands found in messages: is the scan right?");
    }

    /// The subcommand words, up to the first argument, resolve to a command of the CLI.
    fn check(words: &[&str], command: &str, file: &std::path::Path) {
        let mut at = Cli::command();
        for word in words {
            if word.starts_with('-') || word.chars().any(|c| c.is_ascii_uppercase() || "{}/<>.|".contains(c)) {
                return;
            }
            match at.find_subcommand(word) {
                Some(sub) => at = sub.clone(),
                // An argument of a command that takes one (a name, an id).
                None if at.get_positionals().next().is_some() => return,
                None => panic!("{}: `{command}` names `{word}`, which `anycloud` does not have", file.display()),
            }
        }
    }

    /// The text with Rust's string continuations (a `\` ending a line, then the next line's
    /// indentation) removed, as the compiler reads a literal.
    fn joined(text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut lines = text.split('\n').peekable();
        while let Some(line) = lines.next() {
            match line.strip_suffix('\\') {
                Some(head) => {
                    out.push_str(head);
                    if let Some(next) = lines.peek_mut() {
                        *next = next.trim_start();
                    }
                }
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }

    fn sources(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.extend(sources(&path));
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
        files
    }
}
