//! `anycloud cluster create | status | list | delete | kubeconfig` and `anycloud wait cluster/NAME`.

use std::time::Duration;

use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::db::clusters::Phase;
use anycloud_workflows::wire::{ClusterCreated, ClusterDetail, ClusterList, Kubeconfig, NewCluster};

use super::outage::read_patiently;
use super::print_json;
use super::workflow::follow;
use crate::client::{Client, segment};
use crate::exit::{BAD_INPUT, CliError, CliResult, ENDED_OTHERWISE, NOT_OBSERVED, OK};
use crate::output::say;
use crate::render;

/// What `cluster create` was given.
pub struct CreateArgs {
    /// The cluster to create.
    pub cluster: NewCluster,
    /// Follow the workflow.
    pub wait: bool,
    /// How long `--wait` waits.
    pub timeout: Duration,
}

/// Stores the cluster's intent; with `--wait`, follows its creation to the end.
pub async fn create(args: CreateArgs, json: bool) -> CliResult {
    let client = Client::active()?;
    let created: ClusterCreated = client.post("/v1/clusters", &args.cluster).await?;
    let name = &args.cluster.name;
    let run = created.workflow_id.to_string();
    if json && !args.wait {
        print_json(&created);
        return Ok(OK);
    }
    if !json {
        let cluster = &created.cluster;
        let simulated = if cluster.provider == ProviderKind::Sim { ", simulated" } else { "" };
        say!(
            "cluster {name} accepted: {} x {} in {} ({}{simulated}); workflow {run}",
            cluster.min_vms,
            cluster.vm_type,
            cluster.region,
            cluster.provider,
        );
    }
    if !args.wait {
        say!("follow it with `anycloud wait cluster/{name}` or `anycloud cluster status {name}`");
        return Ok(OK);
    }
    finish(&client, name, &run, args.timeout, json).await
}

/// Follows the cluster's workflow, then reports the cluster's phase: 0 when it reached what the
/// workflow was for (ready, or deleted), 1 when it ended another way.
async fn finish(client: &Client, name: &str, run: &str, timeout: Duration, json: bool) -> CliResult {
    let followed = follow(client, run, timeout, json).await?;
    let detail: ClusterDetail = read_patiently(client, &format!("/v1/clusters/{name}"), json).await?;
    let phase = detail.cluster.phase;
    if !json {
        say!("cluster {name} is {phase}");
    }
    match phase {
        Phase::Ready | Phase::Deleted if followed == OK => Ok(OK),
        _ => Ok(ENDED_OTHERWISE),
    }
}

/// `anycloud wait cluster/NAME`: follows the cluster's current workflow to its end.
pub async fn wait(name: &str, timeout: Duration, json: bool) -> CliResult {
    let client = Client::active()?;
    let detail: ClusterDetail = client.get(&format!("/v1/clusters/{name}")).await?;
    let Some(run) = detail.cluster.workflow_id.as_deref() else {
        return Err(CliError::new(NOT_OBSERVED, "NO_WORKFLOW", format!("cluster {name} has no workflow to wait for")));
    };
    if !json {
        say!("cluster {name} is {}; following workflow {run}", detail.cluster.phase);
    }
    finish(&client, name, run, timeout, json).await
}

/// One cluster in detail.
pub async fn status(name: &str, json: bool) -> CliResult {
    let client = Client::active()?;
    let detail: ClusterDetail = client.get(&format!("/v1/clusters/{name}")).await?;
    if json {
        print_json(&detail);
        return Ok(OK);
    }
    let cluster = &detail.cluster;
    say!("cluster      {}{}", cluster.name, if detail.simulated { "  (simulated cloud)" } else { "" });
    say!("phase        {}", cluster.phase);
    if let Some(reason) = &cluster.reason {
        say!("reason       {reason}");
    }
    let zone = cluster.zone.as_deref().map(|zone| format!(" ({zone})")).unwrap_or_default();
    say!("placement    {} / {}{zone} / {}", cluster.provider, cluster.region, cluster.vm_type);
    if let Some(cp) = cluster.control_plane() {
        let zone = cp.zone.as_deref().map(|zone| format!(" ({zone})")).unwrap_or_default();
        say!(
            "             control plane: {} / {}{zone} / {}, on the API's hosting credential {}",
            cp.provider,
            cp.region,
            cp.vm_type,
            cp.credential
        );
    }
    say!("credentials  {}", cluster.credential);
    say!("capacity     {} of {} VMs running", detail.running_vms, detail.desired_vms);
    say!("endpoint     {}", cluster.endpoint.as_deref().unwrap_or("-"));
    if let Some(network) = &cluster.network_id {
        say!("network      {network}");
    }
    if let Some(workflow) = &detail.workflow {
        let step = workflow.current_step.as_deref().map(|step| format!(", step {step}")).unwrap_or_default();
        say!("workflow     {} {} ({}{step})", workflow.kind, workflow.id, workflow.status);
        // A run in hand says why the cluster is where it is: for how long, its deadline, what to do.
        match super::workflow::explain_run(&client, &workflow.id.to_string()).await {
            Some(header) => {
                say!("  status     {}", header.status);
                say!("  deadline   {}", header.deadline);
                say!("  do now     {}", header.act);
            }
            None => {
                if let Some(reason) = &workflow.status_reason {
                    say!("             {reason}");
                }
            }
        }
    }
    if let Some(error) = &detail.last_error {
        say!("last error   {error}");
    }
    if !detail.vms.is_empty() {
        say!();
        let rows: Vec<Vec<String>> = detail
            .vms
            .iter()
            .map(|vm| {
                let address = vm.public_ip.as_deref().or(vm.private_ip.as_deref()).unwrap_or("-");
                vec![vm.name.clone(), vm.role.clone(), vm.provider_id.clone(), vm.state.clone(), address.to_owned()]
            })
            .collect();
        render::table(&["VM", "ROLE", "PROVIDER ID", "STATE", "ADDRESS"], &rows);
    }
    Ok(OK)
}

/// Every cluster that is not deleted.
pub async fn list(json: bool) -> CliResult {
    let client = Client::active()?;
    let clusters = super::every_page(
        &client,
        "/v1/clusters",
        |page: ClusterList| page.clusters,
        |summary| summary.cluster.name.as_str(),
    )
    .await?;
    let answer = ClusterList { clusters };
    if json {
        print_json(&answer);
        return Ok(OK);
    }
    if answer.clusters.is_empty() {
        say!(
            "no clusters yet: `anycloud cluster create NAME --credentials C --region R --vm-type T --min-vms N --max-vms N`"
        );
        return Ok(OK);
    }
    let now = anycloud_workflows::now_ms();
    let rows: Vec<Vec<String>> = answer
        .clusters
        .iter()
        .map(|entry| {
            let cluster = &entry.cluster;
            let provider = cluster.provider.to_string();
            vec![
                cluster.name.clone(),
                cluster.phase.to_string(),
                if entry.simulated { format!("{provider} (simulated)") } else { provider },
                cluster.region.clone(),
                cluster.vm_type.clone(),
                format!("{}/{}", entry.running_vms, cluster.min_vms),
                render::relative(cluster.created_at, now),
            ]
        })
        .collect();
    render::table(&["NAME", "PHASE", "PROVIDER", "REGION", "VM TYPE", "VMS", "CREATED"], &rows);
    Ok(OK)
}

/// Starts the deletion; with `--wait`, follows it.
pub async fn delete(name: &str, wait: bool, timeout: Duration, json: bool) -> CliResult {
    let client = Client::active()?;
    let answer: ClusterDetail = client.delete(&format!("/v1/clusters/{name}")).await?;
    let run = answer.cluster.workflow_id.clone().unwrap_or_default();
    if json && !wait {
        print_json(&answer);
        return Ok(OK);
    }
    if !json {
        say!("cluster {name} deletion accepted; workflow {run}");
    }
    if !wait {
        say!("follow it with `anycloud wait cluster/{name}`");
        return Ok(OK);
    }
    finish(&client, name, &run, timeout, json).await
}

/// `anycloud cluster kubeconfig NAME`: prints the cluster's kubeconfig, or writes it to `output`
/// with mode 0600 (it holds an admin token).
pub async fn kubeconfig(name: &str, output: Option<&std::path::Path>, json: bool) -> CliResult {
    let client = Client::active()?;
    let answer: Kubeconfig = client.get(&format!("/v1/clusters/{}/kubeconfig", segment(name))).await?;
    let Some(path) = output else {
        if json {
            print_json(&answer);
        } else {
            say!("{}", answer.kubeconfig.trim_end());
        }
        return Ok(OK);
    };
    write_private(path, answer.kubeconfig.as_bytes()).map_err(|err| {
        CliError::new(
            BAD_INPUT,
            "CANNOT_WRITE_FILE",
            format!("could not write the kubeconfig of cluster {name} to {}: {err}", path.display()),
        )
    })?;
    let shown = path.display();
    if json {
        print_json(&serde_json::json!({ "cluster": answer.cluster, "path": path }));
    } else {
        say!("wrote the kubeconfig of cluster {name} to {shown} (mode 0600: it holds an admin token)");
        say!("try it: kubectl --kubeconfig {shown} get nodes");
    }
    Ok(OK)
}

/// Writes a file only its owner may read, also when it existed with wider permissions.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};

    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()
}
