//! `anycloud cluster create | status | list | delete` and `anycloud wait cluster/NAME`.

use crate::output::say;
use std::time::Duration;

use serde_json::{Value, json};

use super::workflow::follow;
use super::{items, print_json};
use crate::client::Client;
use crate::exit::{CliError, CliResult, ENDED_OTHERWISE, NOT_OBSERVED, OK};
use crate::render;

/// What `cluster create` was given.
pub struct CreateArgs {
    /// Name.
    pub name: String,
    /// Capacity credential.
    pub credentials: String,
    /// Region.
    pub region: String,
    /// Machine type.
    pub vm_type: String,
    /// Minimum VMs.
    pub min_vms: i64,
    /// Maximum VMs.
    pub max_vms: i64,
    /// Follow the workflow.
    pub wait: bool,
    /// How long `--wait` waits.
    pub timeout: Duration,
}

/// Stores the cluster's intent; with `--wait`, follows its creation to the end.
pub async fn create(args: CreateArgs, json: bool) -> CliResult {
    let client = Client::active()?;
    let body = json!({
        "name": args.name, "credentials": args.credentials, "region": args.region, "vm_type": args.vm_type,
        "min_vms": args.min_vms, "max_vms": args.max_vms,
    });
    let created: Value = client.post("/v1/clusters", &body).await?;
    let run = text(&created["workflow_id"]);
    if json && !args.wait {
        print_json(&created);
        return Ok(OK);
    }
    if !json {
        let cluster = &created["cluster"];
        say!(
            "cluster {} accepted: {} x {} in {} ({}{}); workflow {run}",
            args.name,
            args.min_vms,
            text(&cluster["vm_type"]),
            text(&cluster["region"]),
            text(&cluster["provider"]),
            if cluster["provider"] == "sim" { ", simulated" } else { "" },
        );
    }
    if !args.wait {
        say!("follow it with `anycloud wait cluster/{}` or `anycloud cluster status {}`", args.name, args.name);
        return Ok(OK);
    }
    finish(&client, &args.name, &run, args.timeout, json).await
}

/// Follows the cluster's workflow, then reports the cluster's phase: 0 when it reached what the
/// workflow was for (ready, or deleted), 1 when it ended another way.
async fn finish(client: &Client, name: &str, run: &str, timeout: Duration, json: bool) -> CliResult {
    let followed = follow(client, run, timeout, json).await?;
    let detail: Value = client.get(&format!("/v1/clusters/{name}")).await?;
    let phase = text(&detail["cluster"]["phase"]);
    if !json {
        say!("cluster {name} is {phase}");
    }
    match phase.as_str() {
        "ready" | "deleted" if followed == OK => Ok(OK),
        _ => Ok(ENDED_OTHERWISE),
    }
}

/// `anycloud wait cluster/NAME`: follows the cluster's current workflow to its end.
pub async fn wait(name: &str, timeout: Duration, json: bool) -> CliResult {
    let client = Client::active()?;
    let detail: Value = client.get(&format!("/v1/clusters/{name}")).await?;
    let Some(run) = detail["cluster"]["workflow_id"].as_str() else {
        return Err(CliError::new(NOT_OBSERVED, format!("cluster {name} has no workflow to wait for")));
    };
    if !json {
        say!("cluster {name} is {}; following workflow {run}", text(&detail["cluster"]["phase"]));
    }
    finish(&client, name, run, timeout, json).await
}

/// One cluster in detail.
pub async fn status(name: &str, json: bool) -> CliResult {
    let client = Client::active()?;
    let detail: Value = client.get(&format!("/v1/clusters/{name}")).await?;
    if json {
        print_json(&detail);
        return Ok(OK);
    }
    let cluster = &detail["cluster"];
    let simulated = detail["simulated"].as_bool() == Some(true);
    say!("cluster      {}{}", text(&cluster["name"]), if simulated { "  (simulated cloud)" } else { "" });
    say!("phase        {}", text(&cluster["phase"]));
    if let Some(reason) = cluster["reason"].as_str() {
        say!("reason       {reason}");
    }
    let zone = cluster["zone"].as_str().map(|zone| format!(" ({zone})")).unwrap_or_default();
    say!(
        "placement    {} / {}{zone} / {}",
        text(&cluster["provider"]),
        text(&cluster["region"]),
        text(&cluster["vm_type"])
    );
    say!("credentials  {}", text(&cluster["credential"]));
    say!("capacity     {} of {} VMs running", detail["running_vms"], detail["desired_vms"]);
    say!("endpoint     {}", cluster["endpoint"].as_str().unwrap_or("-"));
    if let Some(network) = cluster["network_id"].as_str() {
        say!("network      {network}");
    }
    let workflow = &detail["workflow"];
    if workflow.is_object() {
        let step = workflow["current_step"].as_str().map(|step| format!(", step {step}")).unwrap_or_default();
        say!(
            "workflow     {} {} ({}{step})",
            text(&workflow["kind"]),
            text(&workflow["id"]),
            text(&workflow["status"])
        );
        if let Some(reason) = workflow["status_reason"].as_str() {
            say!("             {reason}");
        }
    }
    if let Some(error) = detail["last_error"].as_str() {
        say!("last error   {error}");
    }
    let vms = items(&detail["vms"]);
    if !vms.is_empty() {
        say!();
        let rows: Vec<Vec<String>> = vms
            .iter()
            .map(|vm| {
                vec![
                    text(&vm["name"]),
                    text(&vm["role"]),
                    text(&vm["provider_id"]),
                    text(&vm["state"]),
                    vm["public_ip"].as_str().or(vm["private_ip"].as_str()).unwrap_or("-").to_owned(),
                ]
            })
            .collect();
        render::table(&["VM", "ROLE", "PROVIDER ID", "STATE", "ADDRESS"], &rows);
    }
    Ok(OK)
}

/// Every cluster that is not deleted.
pub async fn list(json: bool) -> CliResult {
    let client = Client::active()?;
    let answer: Value = client.get("/v1/clusters").await?;
    if json {
        print_json(&answer);
        return Ok(OK);
    }
    let all = items(&answer["clusters"]);
    if all.is_empty() {
        say!(
            "no clusters yet: `anycloud cluster create NAME --credentials C --region R --vm-type T --min-vms N --max-vms N`"
        );
        return Ok(OK);
    }
    let now = anycloud_workflows::now_ms();
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|entry| {
            let cluster = &entry["cluster"];
            let provider = text(&cluster["provider"]);
            vec![
                text(&cluster["name"]),
                text(&cluster["phase"]),
                if entry["simulated"].as_bool() == Some(true) { format!("{provider} (simulated)") } else { provider },
                text(&cluster["region"]),
                text(&cluster["vm_type"]),
                format!("{}/{}", entry["running_vms"], cluster["min_vms"]),
                render::relative(cluster["created_at"].as_i64().unwrap_or(now), now),
            ]
        })
        .collect();
    render::table(&["NAME", "PHASE", "PROVIDER", "REGION", "VM TYPE", "VMS", "CREATED"], &rows);
    Ok(OK)
}

/// Starts the deletion; with `--wait`, follows it.
pub async fn delete(name: &str, wait: bool, timeout: Duration, json: bool) -> CliResult {
    let client = Client::active()?;
    let answer: Value = client.delete(&format!("/v1/clusters/{name}")).await?;
    let run = text(&answer["cluster"]["workflow_id"]);
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

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// Parses `30s`, `5m`, `2h` or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let value: u64 = number.parse().map_err(|_| format!("`{text}` is not a duration; write it like 90s, 15m or 1h"))?;
    let seconds = match unit {
        "" | "s" => value,
        "m" => value * 60,
        "h" => value * 3600,
        _ => return Err(format!("`{text}` has an unknown unit; use s, m or h (e.g. 15m)")),
    };
    Ok(Duration::from_secs(seconds))
}
