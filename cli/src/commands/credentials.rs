//! `anycloud credentials new | list | delete`.

use std::time::Duration;

use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::db::credentials::CredentialStatus;
use anycloud_workflows::providers::sim_settings::{LIMITS, SimSettings};
use anycloud_workflows::wire::{CredentialDeleted, CredentialList, CredentialSaved, CredentialShown, NewCredential};

use super::print_json;
use crate::client::Client;
use crate::exit::{CliError, CliResult, ENDED_OTHERWISE, OK};
use crate::output::say;
use crate::render;

/// What `credentials new` was given.
pub struct NewArgs {
    /// Name.
    pub name: String,
    /// Provider; `None` runs the wizard ([`super::credentials_wizard`]).
    pub provider: Option<String>,
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
    /// No key: act as the machine the API runs on.
    pub machine_identity: bool,
    /// GCP machine identity: the project.
    pub project: Option<String>,
    /// The simulated account's behaviour.
    pub sim: SimFlags,
    /// Follow the verification.
    pub wait: bool,
}

/// `--sim-*`: how a simulated account behaves (all deterministic under `--sim-seed`).
#[derive(Debug, Default, clap::Args)]
pub struct SimFlags {
    /// sim: the first N calls fail with a transient error (0 to 1000000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=i64::from(LIMITS.fail_first)))]
    pub sim_fail_first: Option<u32>,
    /// sim: every call is rejected with this message.
    #[arg(long)]
    pub sim_reject: Option<String>,
    /// sim: each call takes this many milliseconds (0 to 60000).
    #[arg(long, value_parser = super::at_most(LIMITS.latency_ms))]
    pub sim_latency_ms: Option<u64>,
    /// sim: this percentage (0-100) of calls fail with a transient error, chosen by --sim-seed.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=i64::from(LIMITS.error_rate)))]
    pub sim_error_rate: Option<u8>,
    /// sim: the seed of transient errors, VM ids and addresses.
    #[arg(long)]
    pub sim_seed: Option<u64>,
    /// sim: at most N live VMs in the account (0 to 10000); launches beyond fail with a quota error.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub sim_quota_vms: Option<u32>,
    /// sim: how long a VM takes to boot, and its node to become Ready (0 to 3600000) [default: 300].
    #[arg(long, value_parser = super::at_most(LIMITS.boot_ms))]
    pub sim_boot_ms: Option<u64>,
    /// sim: VMs boot but their Kubernetes nodes never become Ready.
    #[arg(long)]
    pub sim_never_ready: bool,
    /// sim: images on this registry host (`ghcr.io`, `registry.local:5000`) are private: a Pod pulls
    /// them only with an imagePullSecrets registry secret for the host (repeatable).
    #[arg(long = "sim-private-registry", value_name = "HOST")]
    pub sim_private_registry: Vec<String>,
}

impl SimFlags {
    /// The settings: the simulated cloud's defaults, with each flag given in their place.
    fn settings(&self) -> SimSettings {
        let defaults = SimSettings::default();
        SimSettings {
            fail_first: self.sim_fail_first.unwrap_or(defaults.fail_first),
            reject: self.sim_reject.clone(),
            latency_ms: self.sim_latency_ms.unwrap_or(defaults.latency_ms),
            error_rate: self.sim_error_rate.unwrap_or(defaults.error_rate),
            seed: self.sim_seed.unwrap_or(defaults.seed),
            quota_vms: self.sim_quota_vms,
            boot_ms: self.sim_boot_ms.unwrap_or(defaults.boot_ms),
            never_ready: self.sim_never_ready,
            private_registries: self.sim_private_registry.clone(),
        }
    }
}

/// The largest service-account key file read (a real one is about 2.3 KiB).
pub(crate) const KEY_FILE_LIMIT: u64 = 64 * 1024;

impl SimFlags {
    /// The `--sim-*` flags given.
    fn given(&self) -> Vec<&'static str> {
        let flags = [
            ("--sim-fail-first", self.sim_fail_first.is_some()),
            ("--sim-reject", self.sim_reject.is_some()),
            ("--sim-latency-ms", self.sim_latency_ms.is_some()),
            ("--sim-error-rate", self.sim_error_rate.is_some()),
            ("--sim-seed", self.sim_seed.is_some()),
            ("--sim-quota-vms", self.sim_quota_vms.is_some()),
            ("--sim-boot-ms", self.sim_boot_ms.is_some()),
            ("--sim-never-ready", self.sim_never_ready),
            ("--sim-private-registry", !self.sim_private_registry.is_empty()),
        ];
        flags.into_iter().filter(|(_, given)| *given).map(|(flag, _)| flag).collect()
    }
}

/// Refuses flags that do not apply to the credential's provider: ignoring them would let a
/// person believe they took effect.
pub(crate) fn refuse_foreign_flags(args: &NewArgs, provider: ProviderKind) -> Result<(), CliError> {
    let mut foreign: Vec<(&str, &str)> = Vec::new();
    if provider != ProviderKind::Sim {
        foreign.extend(args.sim.given().into_iter().map(|flag| (flag, "sim")));
    }
    if provider != ProviderKind::Aws {
        let aws = [
            ("--access-key-id", args.access_key_id.is_some()),
            ("--secret-access-key", args.secret_access_key.is_some()),
            ("--region", args.region.is_some()),
        ];
        foreign.extend(aws.into_iter().filter(|(_, given)| *given).map(|(flag, _)| (flag, "aws")));
    }
    if provider != ProviderKind::Gcp && args.service_account_file.is_some() {
        foreign.push(("--service-account-file", "gcp"));
    }
    if provider == ProviderKind::Sim && args.endpoint.is_some() {
        foreign.push(("--endpoint", "aws or gcp"));
    }
    if provider == ProviderKind::Sim && args.machine_identity {
        foreign.push(("--machine-identity", "aws or gcp"));
    }
    if provider != ProviderKind::Gcp && args.project.is_some() {
        foreign.push(("--project", "gcp"));
    }
    if foreign.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = foreign.iter().map(|(flag, owner)| format!("{flag} (--provider {owner})")).collect();
    Err(CliError::bad_input(format!(
        "credential `{}`: {} {} not apply to --provider {}; remove {}",
        args.name,
        named.join(", "),
        if foreign.len() == 1 { "does" } else { "do" },
        provider.as_str(),
        if foreign.len() == 1 { "it" } else { "them" },
    )))
}

/// The key flags given, which only a named provider gives a meaning to (the wizard asks for
/// its keys instead).
pub(crate) fn key_flags_given(args: &NewArgs) -> Vec<&'static str> {
    let mut given: Vec<&'static str> = [
        ("--access-key-id", args.access_key_id.is_some()),
        ("--secret-access-key", args.secret_access_key.is_some()),
        ("--service-account-file", args.service_account_file.is_some()),
        ("--region", args.region.is_some()),
        ("--machine-identity", args.machine_identity),
        ("--project", args.project.is_some()),
    ]
    .into_iter()
    .filter(|(_, given)| *given)
    .map(|(flag, _)| flag)
    .collect();
    given.extend(args.sim.given());
    given
}

/// Saves a credential; the API verifies it with the provider. Without `--provider`, the
/// wizard asks for it and its keys on the terminal.
pub async fn new(args: NewArgs, json: bool) -> CliResult {
    let Some(provider) = args.provider.clone() else {
        return super::credentials_wizard::run(args, json).await;
    };
    if let Ok(kind) = provider.parse::<ProviderKind>() {
        refuse_foreign_flags(&args, kind)?;
    }
    let client = Client::active()?;
    let from_env = |value: Option<String>, var: &str| value.or_else(|| std::env::var(var).ok());
    let mut request = NewCredential {
        name: args.name.clone(),
        provider: provider.clone(),
        endpoint: args.endpoint,
        machine_identity: args.machine_identity,
        project: args.project,
        ..NewCredential::default()
    };
    match provider.parse::<ProviderKind>() {
        // No key, not even one in the environment: the API acts as its machine.
        Ok(ProviderKind::Aws) if args.machine_identity => request.region = args.region,
        Ok(ProviderKind::Gcp) if args.machine_identity => {}
        Ok(ProviderKind::Aws) => {
            request.access_key_id = from_env(args.access_key_id, "AWS_ACCESS_KEY_ID");
            request.secret_access_key = from_env(args.secret_access_key, "AWS_SECRET_ACCESS_KEY");
            request.region = args.region;
        }
        Ok(ProviderKind::Gcp) => {
            let path = args
                .service_account_file
                .or_else(|| std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").map(Into::into));
            if let Some(path) = path {
                let bytes = read_key_file(&path).map_err(CliError::bad_input)?;
                request.service_account_json = Some(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
        Ok(ProviderKind::Sim) => request.sim = Some(args.sim.settings()),
        // The API names the providers it knows.
        Err(_) => {}
    }
    let saved = save(&client, &request).await?;
    follow_verification(&client, &saved, &provider, args.wait, json).await
}

/// Reads a service-account key file a person named (at most [`KEY_FILE_LIMIT`] bytes).
pub(crate) fn read_key_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    super::read_small_file(path, KEY_FILE_LIMIT, "service-account key file")
}

/// `POST /v1/credentials`: what the flags and the wizard both send.
pub(crate) async fn save(client: &Client, request: &NewCredential) -> Result<CredentialSaved, CliError> {
    client.post("/v1/credentials", request).await
}

/// Says the credential was saved and, with `wait`, follows its verification to its end: exit 0
/// if it is valid, 1 if not.
pub(crate) async fn follow_verification(
    client: &Client,
    saved: &CredentialSaved,
    provider: &str,
    wait: bool,
    json: bool,
) -> CliResult {
    let name = &saved.credential.name;
    let run = saved.workflow_id.to_string();
    if json && !wait {
        print_json(saved);
        return Ok(OK);
    }
    if !json {
        say!("credential {name} ({provider}) saved; verifying it with workflow {run}");
    }
    if !wait {
        say!("  follow it:  anycloud workflow inspect {run} --follow");
        return Ok(OK);
    }
    let code = super::workflow::follow(client, &run, Duration::from_secs(15 * 60), json).await?;
    let shown: CredentialShown =
        super::outage::read_patiently(client, &format!("/v1/credentials/{name}"), json).await?;
    let credential = &shown.credential;
    if json {
        print_json(&shown);
    } else {
        say!(
            "credential {name} is {}: {}",
            credential.status.as_str(),
            credential.status_message.as_deref().unwrap_or("")
        );
    }
    Ok(if code == OK && credential.status == CredentialStatus::Valid { OK } else { ENDED_OTHERWISE })
}

/// An AWS access key id as `credentials list` shows it: its first and last four characters
/// (`AKIA…WXYZ`), enough to tell keys apart without writing the whole id down.
pub(crate) fn shorten_key_id(key_id: &str) -> String {
    let chars: Vec<char> = key_id.chars().collect();
    if chars.len() <= 8 {
        return key_id.to_owned();
    }
    let head: String = chars[..4].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

/// Lists credentials; secrets are never shown.
pub async fn list(json: bool) -> CliResult {
    let client = Client::active()?;
    let credentials = super::every_page(
        &client,
        "/v1/credentials",
        |page: CredentialList| page.credentials,
        |credential| credential.name.as_str(),
    )
    .await?;
    let answer = CredentialList { credentials };
    if json {
        print_json(&answer.credentials);
        return Ok(OK);
    }
    // A credential still verifying says why from its run: it may be retrying, or waiting.
    let mut why = std::collections::HashMap::new();
    for credential in &answer.credentials {
        if credential.status == CredentialStatus::Verifying
            && let Some(run) = &credential.verify_run
            && let Some(header) = super::workflow::explain_run(&client, run).await
        {
            why.insert(
                credential.name.clone(),
                format!("{}; deadline {}; {}", header.status, header.deadline, header.act),
            );
        }
    }
    let rows: Vec<Vec<String>> = answer
        .credentials
        .iter()
        .map(|credential| {
            let identity = if credential.provider == ProviderKind::Aws {
                shorten_key_id(&credential.public.identity)
            } else {
                credential.public.identity.clone()
            };
            vec![
                credential.name.clone(),
                credential.provider.to_string(),
                identity,
                credential.status.as_str().to_owned(),
                why.remove(&credential.name).or_else(|| credential.status_message.clone()).unwrap_or_default(),
            ]
        })
        .collect();
    if rows.is_empty() {
        say!("no credentials yet: `anycloud credentials new NAME --provider aws|gcp|sim`");
    } else {
        render::table(&["NAME", "PROVIDER", "IDENTITY", "STATUS", "WHY / DETAIL"], &rows);
    }
    Ok(OK)
}

/// Deletes a credential nothing uses.
pub async fn delete(name: &str, json: bool) -> CliResult {
    let client = Client::active()?;
    let answer: CredentialDeleted = client.delete(&format!("/v1/credentials/{name}")).await?;
    if json {
        print_json(&answer);
    } else {
        say!("credential {name} deleted");
    }
    Ok(OK)
}
