//! `anycloud service IMAGE ... -- COMMAND...`, `anycloud service list` and `anycloud deployment
//! upgrade ID`: deploying a service to a cluster and rolling out its next revisions.
//!
//! The CLI only turns flags into a [`NewService`] or an [`UpgradeRequest`], with the refusals
//! that need no API: no `--cluster`, VM placement flags next to it, and what cluster-backed
//! services do not support yet (a public Anycloud URL, a checkpoint bucket). Names, images,
//! commands, quantities, ports, replica counts and the cluster are the API's to check.

use std::path::PathBuf;
use std::time::Duration;

use anycloud_workflows::db::revisions::RevisionResult;
use anycloud_workflows::db::spec::EnvVar;
use anycloud_workflows::wire::{DeploymentDetail, NewService, UpgradeRequest};

use super::deployment;
use super::job::{PlacementFlags, cluster_of, environment};
use super::print_json;
use crate::client::{Client, segment};
use crate::exit::{BAD_INPUT, CliError, CliResult, ENDED_OTHERWISE, OK};
use crate::output::say;

/// What the wider Anycloud CLI offers services on their own VMs and cluster-backed services do
/// not support yet. Parsed, so that a command written for it gets a clear refusal instead of
/// "unknown flag".
#[derive(Debug, Default, clap::Args)]
#[command(next_help_heading = "Not supported yet for cluster-backed services (refused)")]
pub struct UnsupportedFlags {
    /// Give the service a public Anycloud URL.
    #[arg(long)]
    pub public: bool,
    /// Serve the public URL under this domain.
    #[arg(long, value_name = "DOMAIN")]
    pub domain: Option<String>,
    /// Checkpoint the service's state to this bucket.
    #[arg(long, value_name = "BUCKET")]
    pub checkpoint_bucket: Option<String>,
}

impl UnsupportedFlags {
    /// The refusal for the first unsupported flag given, if any.
    fn refusal(&self) -> Option<CliError> {
        let refused = |what: &str| {
            Some(CliError::new(
                BAD_INPUT,
                "NOT_SUPPORTED_FOR_CLUSTER_SERVICES",
                format!(
                    "{what} is not supported yet for cluster-backed services: a service on a cluster is reachable \
                     only at its cluster-internal address (`anycloud status NAME` shows it); drop the flag"
                ),
            ))
        };
        if self.public || self.domain.is_some() {
            return refused("a public Anycloud URL (--public, --domain)");
        }
        if self.checkpoint_bucket.is_some() {
            return refused("a checkpoint bucket (--checkpoint-bucket)");
        }
        None
    }
}

/// What `anycloud service IMAGE` was given.
pub struct DeployArgs {
    /// The container image.
    pub image: String,
    /// The cluster's name or id, if given.
    pub cluster: Option<String>,
    /// The service's name (`-i/--id`).
    pub name: Option<String>,
    /// `-e KEY=VALUE`, in order.
    pub env: Vec<EnvVar>,
    /// `--env-file`.
    pub env_file: Option<PathBuf>,
    /// `--port`.
    pub port: Option<i64>,
    /// `--replicas`.
    pub replicas: Option<i64>,
    /// `--cpus`.
    pub cpus: Option<String>,
    /// `--memory`.
    pub memory: Option<String>,
    /// `--progress-deadline`.
    pub progress_deadline: Option<Duration>,
    /// `--secret`, `--pull-secret`.
    pub secrets: super::secret::SecretFlags,
    /// The command after `--`.
    pub command: Vec<String>,
    /// The placement flags (refused).
    pub placement: PlacementFlags,
    /// The flags of what is not supported yet (refused).
    pub unsupported: UnsupportedFlags,
    /// Follow the service until it runs.
    pub wait: bool,
    /// How long `--wait` waits.
    pub timeout: Duration,
}

/// Deploys the service; with `--wait`, follows it until it runs (exit 0) or ends (exit 1).
pub async fn deploy(args: DeployArgs, json: bool) -> CliResult {
    let (wait, timeout) = (args.wait, args.timeout);
    let service = request(args)?;
    let client = Client::active()?;
    let detail: DeploymentDetail = client.post("/v1/services", &service).await?;
    let name = detail.deployment.name.clone();
    if json && !wait {
        print_json(&detail);
        return Ok(OK);
    }
    if !json {
        let run = detail.deployment.workflow_id.as_deref().unwrap_or("-");
        say!("service {name} accepted on cluster {}: {}, revision 1; workflow {run}", detail.cluster, detail.state);
        deployment::say_secrets(&detail.deployment.spec.secrets);
        if let Some(address) = &detail.address {
            say!("it will answer inside the cluster at {}:{}", address.dns_name, address.port);
        }
        if !wait {
            say!("see it with `anycloud status {name}`; wait for it with `anycloud wait deployment/{name}`");
            return Ok(OK);
        }
    }
    let settled = deployment::follow_until(&client, &name, timeout, json, deployment::has_settled).await?;
    Ok(deployment::outcome(&settled, json))
}

/// The request, or a refusal that needs no API.
fn request(args: DeployArgs) -> Result<NewService, CliError> {
    if let Some(refusal) = args.unsupported.refusal() {
        return Err(refusal);
    }
    let cluster = cluster_of("service", args.cluster, &args.placement)?;
    Ok(NewService {
        cluster,
        name: args.name,
        image: args.image,
        command: args.command,
        env: environment(args.env_file.as_deref(), args.env)?,
        cpus: args.cpus,
        memory: args.memory,
        port: args.port,
        replicas: args.replicas,
        progress_deadline_s: args.progress_deadline.map(|deadline| deadline.as_secs() as i64),
        secrets: args.secrets.secret,
        pull_secrets: args.secrets.pull_secret,
    })
}

/// What `anycloud deployment upgrade ID` was given.
pub struct UpgradeArgs {
    /// The service's name or id.
    pub key: String,
    /// `--image`.
    pub image: Option<String>,
    /// `-e KEY=VALUE`, in order.
    pub env: Vec<EnvVar>,
    /// `--replicas`.
    pub replicas: Option<i64>,
    /// `--progress-deadline`.
    pub progress_deadline: Option<Duration>,
    /// `--secret`, `--pull-secret`: secrets to add.
    pub secrets: super::secret::SecretFlags,
    /// Follow the upgrade until it ends.
    pub wait: bool,
    /// How long `--wait` waits.
    pub timeout: Duration,
}

/// Asks for the service's next revision; with `--wait`, follows it until it serves (exit 0) or
/// has failed and been rolled back (exit 1).
pub async fn upgrade(args: UpgradeArgs, json: bool) -> CliResult {
    let client = Client::active()?;
    let request = UpgradeRequest {
        image: args.image,
        env: args.env,
        replicas: args.replicas,
        progress_deadline_s: args.progress_deadline.map(|deadline| deadline.as_secs() as i64),
        secrets: args.secrets.secret,
        pull_secrets: args.secrets.pull_secret,
    };
    let path = format!("/v1/deployments/{}/upgrade", segment(&args.key));
    let detail: DeploymentDetail = client.post(&path, &request).await?;
    let name = detail.deployment.name.clone();
    let Some(revision) = detail.revisions.last().map(|revision| revision.number) else {
        return Err(CliError::new(2, "NO_REVISION", format!("service {name}: the API answered without its revisions")));
    };
    if json && !args.wait {
        print_json(&detail);
        return Ok(OK);
    }
    if !json {
        let run = detail.deployment.workflow_id.as_deref().unwrap_or("-");
        say!("service {name}: revision {revision} accepted ({}); workflow {run}", detail.state);
        if let Some(next) = detail.revisions.last() {
            deployment::say_secrets(&next.spec.secrets);
        }
        if !args.wait {
            say!("follow it with `anycloud status {name} --watch`");
            return Ok(OK);
        }
    }
    let settled = deployment::follow_until(&client, &name, args.timeout, json, |detail| {
        detail.deployment.status.is_ended()
            || revision_of(detail, revision)
                .is_some_and(|result| result.is_final() || result == RevisionResult::Running)
    })
    .await?;
    let result = revision_of(&settled, revision);
    if !json {
        let reason = settled
            .revisions
            .iter()
            .find(|found| found.number == revision)
            .and_then(|found| found.reason.clone())
            .map(|reason| format!(": {reason}"))
            .unwrap_or_default();
        let serving = deployment::standing(&settled.deployment);
        match result {
            Some(RevisionResult::Running) => say!("service {name}: revision {revision} serves"),
            Some(result) => say!("service {name}: the upgrade to revision {revision} {result}{reason}; {serving}"),
            None => say!("service {name} {}", settled.state),
        }
    }
    Ok(if result == Some(RevisionResult::Running) { OK } else { ENDED_OTHERWISE })
}

/// How revision `number` fares, as the detail says.
fn revision_of(detail: &DeploymentDetail, number: i64) -> Option<RevisionResult> {
    detail.revisions.iter().find(|revision| revision.number == number).map(|revision| revision.result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> DeployArgs {
        DeployArgs {
            image: "python:3.12".into(),
            cluster: Some("demo".into()),
            name: None,
            env: Vec::new(),
            env_file: None,
            port: None,
            replicas: None,
            cpus: None,
            memory: None,
            progress_deadline: None,
            secrets: super::super::secret::SecretFlags::default(),
            command: vec!["python3".into(), "-m".into(), "http.server".into()],
            placement: PlacementFlags::default(),
            unsupported: UnsupportedFlags::default(),
            wait: false,
            timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn public_urls_and_checkpoint_buckets_are_refused() {
        for unsupported in [
            UnsupportedFlags { public: true, ..UnsupportedFlags::default() },
            UnsupportedFlags { domain: Some("api.example.com".into()), ..UnsupportedFlags::default() },
            UnsupportedFlags { checkpoint_bucket: Some("state".into()), ..UnsupportedFlags::default() },
        ] {
            let err = request(DeployArgs { unsupported, ..args() }).unwrap_err();
            assert_eq!((err.code, err.error_code.as_str()), (BAD_INPUT, "NOT_SUPPORTED_FOR_CLUSTER_SERVICES"));
            assert!(err.message.contains("cluster-internal address"), "{}", err.message);
        }
    }

    #[test]
    fn placement_flags_are_refused_with_a_cluster() {
        let placement = PlacementFlags { zone: Some("a".into()), ..PlacementFlags::default() };
        let err = request(DeployArgs { placement, ..args() }).unwrap_err();
        assert_eq!((err.code, err.error_code.as_str()), (BAD_INPUT, "PLACEMENT_WITH_CLUSTER"));
        let err = request(DeployArgs { cluster: None, ..args() }).unwrap_err();
        assert_eq!(err.error_code, "CLUSTER_REQUIRED");
        let request = request(DeployArgs { progress_deadline: Some(Duration::from_secs(90)), ..args() }).unwrap();
        assert_eq!(request.progress_deadline_s, Some(90));
    }
}
