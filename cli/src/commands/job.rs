//! `anycloud job IMAGE ... -- COMMAND...` and `anycloud job list`: submitting a job to a cluster.
//!
//! The CLI only turns flags into an [`NewJob`]: the environment from `--env-file` and `-e`, and
//! the two refusals that need no API (no `--cluster`, or VM placement flags next to it). Names,
//! images, commands, quantities and the cluster are the API's to check.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anycloud_workflows::db::spec::EnvVar;
use anycloud_workflows::wire::{DeploymentDetail, NewJob};

use super::deployment;
use super::print_json;
use crate::client::Client;
use crate::exit::{BAD_INPUT, CliError, CliResult, OK};
use crate::output::say;

/// VM placement flags. A job on a cluster runs on the cluster's VMs, so they are refused with
/// `--cluster`; and this build runs jobs only on clusters. They are parsed anyway, so that a
/// command written for the wider Anycloud CLI gets a clear refusal instead of "unknown flag".
#[derive(Debug, Default, clap::Args)]
#[command(next_help_heading = "VM placement (not allowed with --cluster, which this build requires)")]
pub struct PlacementFlags {
    /// The credential whose account would hold the job's own VM.
    #[arg(long)]
    pub credentials: Option<String>,
    /// The VM type of the job's own VM.
    #[arg(long)]
    pub vm_type: Option<String>,
    /// The region of the job's own VM.
    #[arg(long)]
    pub region: Option<String>,
    /// The zone of the job's own VM.
    #[arg(long)]
    pub zone: Option<String>,
    /// Run the job's own VM as a spot instance.
    #[arg(long)]
    pub spot: bool,
}

impl PlacementFlags {
    /// The placement flags that were given, as typed.
    pub(crate) fn given(&self) -> Vec<&'static str> {
        let flags = [
            ("--credentials", self.credentials.is_some()),
            ("--vm-type", self.vm_type.is_some()),
            ("--region", self.region.is_some()),
            ("--zone", self.zone.is_some()),
            ("--spot", self.spot),
        ];
        flags.into_iter().filter(|(_, given)| *given).map(|(flag, _)| flag).collect()
    }
}

/// What `anycloud job IMAGE` was given.
pub struct SubmitArgs {
    /// The container image.
    pub image: String,
    /// The cluster's name or id, if given.
    pub cluster: Option<String>,
    /// The job's name (`-i/--id`).
    pub name: Option<String>,
    /// `-e KEY=VALUE`, in order.
    pub env: Vec<EnvVar>,
    /// `--env-file`.
    pub env_file: Option<PathBuf>,
    /// `--cpus`.
    pub cpus: Option<String>,
    /// `--memory`.
    pub memory: Option<String>,
    /// `--secret`, `--pull-secret`.
    pub secrets: super::secret::SecretFlags,
    /// The command after `--`.
    pub command: Vec<String>,
    /// The placement flags (refused).
    pub placement: PlacementFlags,
    /// Follow the job until it ends.
    pub wait: bool,
    /// How long `--wait` waits.
    pub timeout: Duration,
}

/// Submits the job; with `--wait`, follows it until it ends.
pub async fn submit(args: SubmitArgs, json: bool) -> CliResult {
    let (wait, timeout) = (args.wait, args.timeout);
    let job = request(args)?;
    let client = Client::active()?;
    let detail: DeploymentDetail = client.post("/v1/jobs", &job).await?;
    let name = detail.deployment.name.clone();
    if json && !wait {
        print_json(&detail);
        return Ok(OK);
    }
    if !json {
        let run = detail.deployment.workflow_id.as_deref().unwrap_or("-");
        say!(
            "job {name} accepted on cluster {}: {}, attempt {}; workflow {run}",
            detail.cluster,
            detail.state,
            detail.deployment.attempt
        );
        deployment::say_secrets(&detail.deployment.spec.secrets);
        if !wait {
            say!("see it with `anycloud status {name}`, its output with `anycloud logs {name}`");
            return Ok(OK);
        }
    }
    let ended = deployment::follow(&client, &name, timeout, json).await?;
    Ok(deployment::outcome(&ended, json))
}

/// The request, or a refusal that needs no API: no `--cluster`, placement flags with it, an
/// unreadable or malformed `--env-file`.
fn request(args: SubmitArgs) -> Result<NewJob, CliError> {
    let cluster = cluster_of("job", args.cluster, &args.placement)?;
    Ok(NewJob {
        cluster,
        name: args.name,
        image: args.image,
        command: args.command,
        env: environment(args.env_file.as_deref(), args.env)?,
        cpus: args.cpus,
        memory: args.memory,
        secrets: args.secrets.secret,
        pull_secrets: args.secrets.pull_secret,
    })
}

/// The value parser of `-e KEY=VALUE` (the value may be empty, and may hold `=`).
pub fn parse_env_flag(text: &str) -> Result<EnvVar, String> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok(EnvVar { name: name.trim().to_owned(), value: value.to_owned() })
        }
        _ => Err(format!("`{text}` is not KEY=VALUE; write it like -e {}=value", text.trim_end_matches('='))),
    }
}

/// The cluster a workload of `kind` (`job`, `service`) runs on: `--cluster` is required, and
/// the placement flags are refused with it.
pub(crate) fn cluster_of(kind: &str, cluster: Option<String>, placement: &PlacementFlags) -> Result<String, CliError> {
    let Some(cluster) = cluster else {
        return Err(CliError::new(
            BAD_INPUT,
            "CLUSTER_REQUIRED",
            format!(
                "this build runs {kind}s only on clusters: pass `--cluster NAME`. Create a cluster first with \
                 `anycloud cluster create NAME --credentials C --region R --vm-type T --min-vms N --max-vms N` (on a \
                 hosted API); `anycloud cluster list` shows the clusters there are"
            ),
        ));
    };
    let given = placement.given();
    if !given.is_empty() {
        return Err(CliError::new(
            BAD_INPUT,
            "PLACEMENT_WITH_CLUSTER",
            format!(
                "{} cannot be given with --cluster: a {kind} on cluster `{cluster}` runs on the cluster's VMs; drop {}",
                given.join(", "),
                if given.len() == 1 { "it" } else { "them" }
            ),
        ));
    }
    Ok(cluster)
}

/// The largest env file read: the API refuses bodies over 64 KiB anyway.
const ENV_FILE_LIMIT: u64 = 64 * 1024;

/// A container's environment: the `--env-file` first, then the `-e` flags (the API keeps the
/// last of duplicate names, so `-e` wins).
pub(crate) fn environment(env_file: Option<&Path>, flags: Vec<EnvVar>) -> Result<Vec<EnvVar>, CliError> {
    let mut env = match env_file {
        Some(path) => {
            let bytes = super::read_small_file(path, ENV_FILE_LIMIT, "--env-file").map_err(CliError::bad_input)?;
            let text = String::from_utf8(bytes)
                .map_err(|_| CliError::bad_input(format!("--env-file {}: it is not UTF-8 text", path.display())))?;
            parse_env_file(path, &text)?
        }
        None => Vec::new(),
    };
    env.extend(flags);
    Ok(env)
}

/// Parses an env file: one `KEY=VALUE` a line; blank lines and lines starting with `#` are
/// skipped, an `export ` prefix is allowed, and one pair of matching quotes around the value is
/// removed (nothing else is interpreted: no escapes, no `$VAR` expansion).
pub fn parse_env_file(path: &Path, text: &str) -> Result<Vec<EnvVar>, CliError> {
    let mut env = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let assignment = trimmed.strip_prefix("export ").unwrap_or(trimmed);
        let parsed = assignment.split_once('=').and_then(|(name, value)| {
            let name = name.trim();
            let valid = !name.is_empty() && !name.contains(char::is_whitespace);
            valid.then(|| EnvVar { name: name.to_owned(), value: unquote(value.trim_start()).to_owned() })
        });
        match parsed {
            Some(var) => env.push(var),
            None => {
                return Err(CliError::bad_input(format!(
                    "--env-file {} line {}: `{trimmed}` is not KEY=VALUE",
                    path.display(),
                    index + 1
                )));
            }
        }
    }
    Ok(env)
}

/// The value without one pair of matching surrounding quotes.
fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(quote).and_then(|rest| rest.strip_suffix(quote)) {
            return inner;
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar { name: name.into(), value: value.into() }
    }

    fn args() -> SubmitArgs {
        SubmitArgs {
            image: "python:3.12".into(),
            cluster: Some("demo".into()),
            name: None,
            env: Vec::new(),
            env_file: None,
            cpus: None,
            memory: None,
            secrets: super::super::secret::SecretFlags::default(),
            command: vec!["true".into()],
            placement: PlacementFlags::default(),
            wait: false,
            timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn env_flags_need_a_name_and_an_equals_sign() {
        assert_eq!(parse_env_flag("A=1"), Ok(var("A", "1")));
        assert_eq!(parse_env_flag("A="), Ok(var("A", "")));
        assert_eq!(parse_env_flag("URL=a=b"), Ok(var("URL", "a=b")));
        assert_eq!(parse_env_flag("A").unwrap_err(), "`A` is not KEY=VALUE; write it like -e A=value");
        assert!(parse_env_flag("=1").is_err());
    }

    #[test]
    fn env_files_skip_comments_and_blank_lines_and_allow_export() {
        let text = "# settings\n\nA=1\nexport B = two words\r\nC=\"quoted # not a comment\"\nD='x'\nE=\n  # indented\n";
        let env = parse_env_file(Path::new(".env"), text).unwrap();
        assert_eq!(
            env,
            [var("A", "1"), var("B", "two words"), var("C", "quoted # not a comment"), var("D", "x"), var("E", "")]
        );
    }

    #[test]
    fn a_bad_env_file_line_is_named_by_file_and_number() {
        let err = parse_env_file(Path::new("prod.env"), "A=1\n\nNOT AN ASSIGNMENT\n").unwrap_err();
        assert_eq!(err.code, BAD_INPUT);
        assert_eq!(err.error_code, "INVALID_ARGUMENT");
        assert_eq!(err.message, "--env-file prod.env line 3: `NOT AN ASSIGNMENT` is not KEY=VALUE");
        assert!(parse_env_file(Path::new("e"), "MY KEY=1").is_err());
    }

    #[test]
    fn flags_come_after_the_file_so_that_they_win() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("job.env");
        std::fs::write(&file, "A=file\nB=file\n").unwrap();
        let job = request(SubmitArgs { env: vec![var("A", "flag")], env_file: Some(file), ..args() }).unwrap();
        assert_eq!(job.env, [var("A", "file"), var("B", "file"), var("A", "flag")]);
    }

    #[test]
    fn placement_flags_are_refused_with_a_cluster() {
        let placement = PlacementFlags { vm_type: Some("t3.small".into()), spot: true, ..PlacementFlags::default() };
        let err = request(SubmitArgs { placement, ..args() }).unwrap_err();
        assert_eq!((err.code, err.error_code.as_str()), (BAD_INPUT, "PLACEMENT_WITH_CLUSTER"));
        assert!(err.message.starts_with("--vm-type, --spot cannot be given with --cluster"), "{}", err.message);
    }

    #[test]
    fn a_job_needs_a_cluster() {
        let placement = PlacementFlags { region: Some("us-east-1".into()), ..PlacementFlags::default() };
        let err = request(SubmitArgs { cluster: None, placement, ..args() }).unwrap_err();
        assert_eq!((err.code, err.error_code.as_str()), (BAD_INPUT, "CLUSTER_REQUIRED"));
        assert!(err.message.contains("`anycloud cluster create NAME"));
    }
}
