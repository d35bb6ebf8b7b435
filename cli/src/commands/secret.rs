//! `anycloud secret new | set | list | delete`, and the `--secret` / `--pull-secret` flags of
//! `job`, `service` and `deployment upgrade`.
//!
//! Values come from `--from-literal KEY=VALUE` (which `ps` shows: prefer the others for real
//! secrets), `--from-env-file FILE`, or KEY=VALUE lines on standard input; a registry login's
//! password only from standard input (`--password-stdin`, as `docker login` takes it). When
//! standard input is a terminal, what is typed is not echoed. No command prints a value.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Read as _};
use std::path::PathBuf;

use anycloud_workflows::wire::{NewSecret, RegistryLogin, SecretDeleted, SecretList, SecretSaved};

use super::print_json;
use crate::client::{Client, segment};
use crate::exit::{CliError, CliResult, INTERRUPTED, OK};
use crate::output::say;
use crate::render;
use crate::terminal::{self, HiddenReadError};

/// `--secret` and `--pull-secret`, on every command that makes a workload's spec.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct SecretFlags {
    /// A secret whose keys the container takes as environment variables (repeatable), at its
    /// current version; `anycloud secret new NAME` makes one.
    #[arg(long = "secret", value_name = "NAME")]
    pub secret: Vec<String>,
    /// A registry secret to pull the image with (repeatable). Registry secrets for the image's
    /// registry host are used without it.
    #[arg(long = "pull-secret", value_name = "NAME")]
    pub pull_secret: Vec<String>,
}

/// What `secret new` and `secret set` take.
#[derive(Debug, clap::Args)]
pub struct ValuesArgs {
    /// The secret's name (a DNS label).
    pub name: String,
    /// A key and its value (repeatable). `ps` shows it: prefer --from-env-file or standard input.
    #[arg(long = "from-literal", value_name = "KEY=VALUE", value_parser = super::job::parse_env_flag)]
    pub from_literal: Vec<anycloud_workflows::db::spec::EnvVar>,
    /// A file of KEY=VALUE lines (`#` comments, blank lines and an `export ` prefix allowed).
    #[arg(long = "from-env-file", value_name = "FILE")]
    pub from_env_file: Option<PathBuf>,
    /// A registry secret: the registry host its login is for (as image references name it,
    /// e.g. ghcr.io); needs --username and --password-stdin.
    #[arg(long, value_name = "HOST", conflicts_with_all = ["from_literal", "from_env_file"])]
    pub registry: Option<String>,
    /// A registry secret: the user name.
    #[arg(long, requires = "registry")]
    pub username: Option<String>,
    /// A registry secret: read the password or token from standard input.
    #[arg(long, requires = "registry")]
    pub password_stdin: bool,
}

/// The largest env file or standard input read: a secret holds at most 1 MiB, and a file a
/// little larger is still read so that the API can say by how much it is over.
const INPUT_LIMIT: u64 = 2 * 1024 * 1024;

/// Creates a secret (`set`: its next version) and prints it without values.
pub async fn save(args: ValuesArgs, set: bool, json: bool) -> CliResult {
    let request = request(args).await?;
    let client = Client::active()?;
    let saved: SecretSaved = if set {
        client.put(&format!("/v1/secrets/{}", segment(&request.name)), &request).await?
    } else {
        client.post("/v1/secrets", &request).await?
    };
    if json {
        print_json(&saved);
        return Ok(OK);
    }
    let secret = &saved.secret;
    let what = match &secret.registry {
        Some(host) => format!("a login to {host}"),
        None => format!("keys {}", secret.keys.join(", ")),
    };
    say!("secret {} is at version {} ({what})", secret.name, secret.version);
    if set {
        say!(
            "deployments keep the version they took: `anycloud resubmit JOB` or `anycloud deployment upgrade SERVICE` \
             takes this one"
        );
    }
    Ok(OK)
}

/// The request, from the flags and standard input; nothing is sent when they are wrong.
async fn request(args: ValuesArgs) -> Result<NewSecret, CliError> {
    let ValuesArgs { name, from_literal, from_env_file, registry, username, password_stdin } = args;
    if let Some(host) = registry {
        let Some(username) = username else {
            return Err(CliError::bad_input(format!("secret `{name}`: a registry secret needs --username")));
        };
        if !password_stdin {
            return Err(CliError::bad_input(format!(
                "secret `{name}`: give the registry's password or token on standard input with --password-stdin \
                 (a flag would show it in `ps`), e.g. `echo \"$TOKEN\" | anycloud secret new {name} --registry {host} \
                 --username {username} --password-stdin`"
            )));
        }
        let text = read_stdin("the password").await?;
        let password = text.trim_end_matches(['\n', '\r']).to_owned();
        return Ok(NewSecret {
            name,
            values: BTreeMap::new(),
            registry: Some(RegistryLogin { host, username, password }),
        });
    }
    let mut pairs = Vec::new();
    if let Some(path) = &from_env_file {
        let bytes = super::read_small_file(path, INPUT_LIMIT, "--from-env-file").map_err(CliError::bad_input)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| CliError::bad_input(format!("--from-env-file {}: it is not UTF-8 text", path.display())))?;
        pairs.extend(super::job::parse_env_file(path, &text)?);
    }
    if from_literal.is_empty() && from_env_file.is_none() {
        let text = read_stdin("KEY=VALUE lines (end with Ctrl-D)").await?;
        pairs.extend(super::job::parse_env_file(std::path::Path::new("(standard input)"), &text)?);
    }
    pairs.extend(from_literal);
    let values = pairs.into_iter().map(|var| (var.name, var.value)).collect();
    Ok(NewSecret { name, values, registry: None })
}

/// Standard input, whole; on a terminal, read with echo off (and said so on stderr first), the
/// password's first line only, and the echo put back on Ctrl-C (exit 130, nothing sent).
async fn read_stdin(what: &str) -> Result<String, CliError> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        let unreadable =
            |err: std::io::Error| CliError::bad_input(format!("reading {what} from standard input: {err}"));
        let mut bytes = Vec::new();
        stdin.lock().take(INPUT_LIMIT + 1).read_to_end(&mut bytes).map_err(unreadable)?;
        if bytes.len() as u64 > INPUT_LIMIT {
            return Err(CliError::bad_input(format!(
                "standard input is over {INPUT_LIMIT} bytes; a secret holds 1 MiB"
            )));
        }
        return String::from_utf8(bytes).map_err(|_| CliError::bad_input("standard input is not UTF-8 text"));
    }
    eprintln!("type {what}; it is not echoed:");
    terminal::read_hidden(what.starts_with("the password")).await.map_err(|err| match err {
        HiddenReadError::Interrupted => {
            CliError::new(INTERRUPTED, "INTERRUPTED", "interrupted: the secret was not saved".to_owned())
        }
        HiddenReadError::Terminal(why) => {
            CliError::bad_input(format!("{why}; give the values with --from-env-file FILE instead"))
        }
    })
}

/// Lists secrets: name, kind, keys, version, and the deployments that take it.
pub async fn list(json: bool) -> CliResult {
    let client = Client::active()?;
    let secrets =
        super::every_page(&client, "/v1/secrets", |page: SecretList| page.secrets, |one| one.secret.name.as_str())
            .await?;
    if json {
        print_json(&secrets);
        return Ok(OK);
    }
    if secrets.is_empty() {
        say!("no secrets yet: `anycloud secret new NAME --from-literal KEY=VALUE`");
        return Ok(OK);
    }
    let rows: Vec<Vec<String>> = secrets
        .iter()
        .map(|one| {
            let secret = &one.secret;
            let kind = secret.registry.as_ref().map(|host| format!("registry {host}")).unwrap_or_else(|| "env".into());
            let used = if one.used_by.is_empty() { "-".to_owned() } else { one.used_by.join(", ") };
            vec![secret.name.clone(), kind, secret.keys.join(","), secret.version.to_string(), used]
        })
        .collect();
    render::table(&["NAME", "KIND", "KEYS", "VERSION", "USED BY"], &rows);
    Ok(OK)
}

/// Deletes a secret no deployment takes.
pub async fn delete(name: &str, json: bool) -> CliResult {
    let client = Client::active()?;
    let answer: SecretDeleted = client.delete(&format!("/v1/secrets/{}", segment(name))).await?;
    if json {
        print_json(&answer);
    } else {
        say!("secret {name} deleted, with every version of it");
    }
    Ok(OK)
}
