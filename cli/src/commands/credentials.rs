//! `anycloud credentials new | list | delete`.

use crate::output::say;
use std::time::Duration;

use serde_json::{Value, json};

use super::print_json;
use crate::client::Client;
use crate::exit::{CliError, CliResult, ENDED_OTHERWISE, OK};
use crate::render;

/// What `credentials new` was given.
pub struct NewArgs {
    /// Name.
    pub name: String,
    /// Provider.
    pub provider: String,
    /// AWS access key id (or `AWS_ACCESS_KEY_ID`).
    pub access_key_id: Option<String>,
    /// AWS secret key (or `AWS_SECRET_ACCESS_KEY`).
    pub secret_access_key: Option<String>,
    /// GCP key file.
    pub service_account_file: Option<std::path::PathBuf>,
    /// Region for the check.
    pub region: Option<String>,
    /// Endpoint override.
    pub endpoint: Option<String>,
    /// The simulated account's behaviour.
    pub sim: SimFlags,
    /// Follow the verification.
    pub wait: bool,
}

/// `--sim-*`: how a simulated account behaves (all deterministic under `--sim-seed`).
#[derive(Debug, Default, clap::Args)]
pub struct SimFlags {
    /// sim: the first N calls fail with a transient error.
    #[arg(long)]
    pub sim_fail_first: Option<u32>,
    /// sim: every call is rejected with this message.
    #[arg(long)]
    pub sim_reject: Option<String>,
    /// sim: each call takes this many milliseconds.
    #[arg(long)]
    pub sim_latency_ms: Option<u64>,
    /// sim: this percentage (0-100) of calls fail with a transient error, chosen by --sim-seed.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub sim_error_rate: Option<u8>,
    /// sim: the seed of transient errors, VM ids and addresses.
    #[arg(long)]
    pub sim_seed: Option<u64>,
    /// sim: at most N live VMs in the account; launches beyond fail with a quota error.
    #[arg(long)]
    pub sim_quota_vms: Option<u32>,
    /// sim: how long a VM takes to boot, and its node to become Ready [default: 300].
    #[arg(long)]
    pub sim_boot_ms: Option<u64>,
    /// sim: VMs boot but their Kubernetes nodes never become Ready.
    #[arg(long)]
    pub sim_never_ready: bool,
}

impl SimFlags {
    /// The `sim` settings the API takes; flags not given keep the simulated cloud's defaults.
    fn settings(&self) -> Value {
        let mut settings = serde_json::Map::new();
        let mut set = |key: &str, value: Value| {
            if !value.is_null() {
                settings.insert(key.to_owned(), value);
            }
        };
        set("fail_first", json!(self.sim_fail_first));
        set("reject", json!(self.sim_reject));
        set("latency_ms", json!(self.sim_latency_ms));
        set("error_rate", json!(self.sim_error_rate));
        set("seed", json!(self.sim_seed));
        set("quota_vms", json!(self.sim_quota_vms));
        set("boot_ms", json!(self.sim_boot_ms));
        if self.sim_never_ready {
            set("never_ready", json!(true));
        }
        Value::Object(settings)
    }
}

/// Saves a credential; the API verifies it with the provider.
pub async fn new(args: NewArgs, json: bool) -> CliResult {
    let client = Client::active()?;
    let from_env = |value: Option<String>, var: &str| value.or_else(|| std::env::var(var).ok());
    let mut body = json!({ "name": args.name, "provider": args.provider });
    match args.provider.as_str() {
        "aws" => {
            body["access_key_id"] = json!(from_env(args.access_key_id, "AWS_ACCESS_KEY_ID"));
            body["secret_access_key"] = json!(from_env(args.secret_access_key, "AWS_SECRET_ACCESS_KEY"));
            body["region"] = json!(args.region);
        }
        "gcp" => {
            let path = args
                .service_account_file
                .or_else(|| std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").map(Into::into));
            if let Some(path) = path {
                let text = std::fs::read_to_string(&path).map_err(|err| {
                    CliError::bad_input(format!("reading the service-account key file {}: {err}", path.display()))
                })?;
                body["service_account_json"] = json!(text);
            }
        }
        "sim" => body["sim"] = args.sim.settings(),
        _ => {}
    }
    if args.endpoint.is_some() {
        body["endpoint"] = json!(args.endpoint);
    }
    let saved: Value = client.post("/v1/credentials", &body).await?;
    let run = saved["workflow_id"].as_str().unwrap_or_default().to_owned();
    if json && !args.wait {
        print_json(&saved);
        return Ok(OK);
    }
    if !json {
        say!("credential {} ({}) saved; verifying it with workflow {run}", args.name, args.provider);
    }
    if !args.wait {
        say!("  follow it:  anycloud workflow inspect {run} --follow");
        return Ok(OK);
    }
    let code = super::workflow::follow(&client, &run, Duration::from_secs(15 * 60), json).await?;
    let shown: Value = client.get(&format!("/v1/credentials/{}", args.name)).await?;
    let credential = &shown["credential"];
    if json {
        print_json(&shown);
    } else {
        say!(
            "credential {} is {}: {}",
            args.name,
            credential["status"].as_str().unwrap_or("?"),
            credential["status_message"].as_str().unwrap_or("")
        );
    }
    Ok(if code == OK && credential["status"] == "valid" { OK } else { ENDED_OTHERWISE })
}

/// Lists credentials; secrets are never shown.
pub async fn list(json: bool) -> CliResult {
    let client = Client::active()?;
    let answer: Value = client.get("/v1/credentials").await?;
    if json {
        print_json(&answer["credentials"]);
        return Ok(OK);
    }
    let rows: Vec<Vec<String>> = answer["credentials"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
            let mut identity = text(&c["public"]["identity"]);
            if c["provider"] == "aws" && identity.len() > 8 {
                identity = format!("{}…{}", &identity[..4], &identity[identity.len() - 4..]);
            }
            vec![text(&c["name"]), text(&c["provider"]), identity, text(&c["status"]), text(&c["status_message"])]
        })
        .collect();
    if rows.is_empty() {
        say!("no credentials yet: `anycloud credentials new NAME --provider aws|gcp|sim`");
    } else {
        render::table(&["NAME", "PROVIDER", "IDENTITY", "STATUS", "DETAIL"], &rows);
    }
    Ok(OK)
}

/// Deletes a credential nothing uses.
pub async fn delete(name: &str, json: bool) -> CliResult {
    let client = Client::active()?;
    let answer: Value = client.delete(&format!("/v1/credentials/{name}")).await?;
    if json {
        print_json(&answer);
    } else {
        say!("credential {name} deleted");
    }
    Ok(OK)
}
