//! `anycloud api serve --credentials aws|gcp`: deploys an API on a cloud VM through the active
//! API (where the credentials are saved), follows its `api.deploy` run, and stores the new API's
//! address, token and pinned CA in the CLI config. `anycloud api stop|delete` of such an API
//! runs `api.remove` on the API that deployed it, and says what stays; `anycloud api rotate-ca`
//! runs `api.rotate_ca` there, and pins what the API serves from.

use std::path::PathBuf;
use std::time::Duration;

use anycloud_workflows::db::hosted_apis::Phase;
use anycloud_workflows::hosting;
use anycloud_workflows::hosting::binary::{Arch, StagedBinary};
use anycloud_workflows::wire::{HostedApiAccess, HostedApiStarted, NewHostedApi, VmTypeArchitectures, VmTypeQuery};

use super::outage::read_patiently;
use super::print_json;
use super::workflow::follow;
use crate::client::{Client, segment};
use crate::config::{ApiEntry, Config};
use crate::exit::{CliError, CliResult, ENDED_OTHERWISE, NOT_OBSERVED, OK};
use crate::output::say;

/// The binary the VM runs, as `api serve --credentials` was told.
pub enum Binary {
    /// This CLI's own executable, shipped by the deploy (the default).
    Own,
    /// `--binary FILE`, shipped by the deploy.
    File(PathBuf),
    /// `--binary-url URL --binary-sha256 ARCH=HEX,...`: hosted by the operator.
    Url {
        /// The URL (`{arch}` replaced on the VM).
        url: String,
        /// `ARCH=HEX[,ARCH=HEX]`.
        sums: String,
    },
}

/// What `api serve --credentials` was asked for, beyond the request itself.
pub struct DeployArgs {
    /// The request the deployer receives (its binary fields are filled from `binary`).
    pub request: NewHostedApi,
    /// The binary the VM runs.
    pub binary: Binary,
    /// Make the new API the active one.
    pub use_it: bool,
    /// How long to follow the deploy.
    pub timeout: Duration,
}

/// Deploys the API through the active API and, once it answers, stores how to reach it.
pub async fn deploy(args: DeployArgs, json: bool) -> CliResult {
    let deployer = Client::active()?;
    let name = args.request.name.clone();
    let mut request = args.request;
    choose_binary(&deployer, &mut request, args.binary, json).await?;
    let started: HostedApiStarted = deployer.post("/v1/apis", &request).await?;
    let run = started.workflow_id.to_string();
    if !json {
        let api = &started.api;
        say!(
            "deploying API `{name}` through `{}`: a {} VM on {} in {}, state in {}; workflow {run}",
            deployer.name(),
            api.vm_type,
            api.provider,
            api.region,
            api.bucket
        );
    }
    let followed = follow(&deployer, &run, args.timeout, json).await?;
    let shown: anycloud_workflows::wire::HostedApiView =
        read_patiently(&deployer, &format!("/v1/apis/{}", segment(&name)), json).await?;
    if followed != OK || shown.phase != Phase::Ready {
        if !json {
            say!(
                "API `{name}` is {}{}",
                shown.phase,
                shown.reason.as_deref().map(|why| format!(": {why}")).unwrap_or_default()
            );
        }
        return Ok(if followed == OK { ENDED_OTHERWISE } else { followed });
    }
    let access: HostedApiAccess =
        read_patiently(&deployer, &format!("/v1/apis/{}/access", segment(&name)), json).await?;
    let mut config = Config::load()?;
    let kind = format!("hosted ({})", access.provider);
    config.apis.insert(
        name.clone(),
        ApiEntry {
            url: access.url.clone(),
            token: access.token,
            kind: kind.clone(),
            ca_pem: Some(access.ca_pem),
            deployed_by: Some(deployer.name().to_owned()),
        },
    );
    if args.use_it {
        config.active = Some(name.clone());
    }
    config.save()?;
    if json {
        print_json(&serde_json::json!({
            "id": name, "url": access.url, "kind": kind, "bucket": shown.bucket, "active": args.use_it,
            "deployed_by": deployer.name(),
        }));
    } else {
        say!(
            "API `{name}` ({kind}) answers at {}; its certificate's CA is pinned in the CLI config{}",
            access.url,
            if args.use_it { "; it is the active API" } else { "" }
        );
        say!("stop it with `anycloud api stop {name}` (its bucket {} and the state in it stay)", shown.bucket);
    }
    Ok(OK)
}

/// Puts the binary the VM runs into the request: a URL with its checksums (checked against the
/// machine type's architectures), or this CLI's own or `--binary FILE`, shipped to the deployer.
async fn choose_binary(
    deployer: &Client,
    request: &mut NewHostedApi,
    binary: Binary,
    json: bool,
) -> Result<(), CliError> {
    let name = request.name.clone();
    match binary {
        Binary::Url { url, sums } => {
            let given = hosting::binary::parse_sums(&sums)
                .map_err(|why| CliError::bad_input(format!("API `{name}`: --binary-sha256: {why}")))?;
            if !url.starts_with("https://") {
                return Err(CliError::bad_input(format!(
                    "API `{name}`: --binary-url `{url}` is not an https:// URL: the VM downloads over HTTPS only"
                )));
            }
            let runs = architectures(deployer, request).await?;
            if !runs.architectures.iter().any(|arch| given.contains_key(arch)) {
                return Err(CliError::bad_input(format!(
                    "API `{name}`: machine type {} in {} runs {}, and --binary-sha256 names a binary for {} only: add \
                     ARCH=SHA256 of the binary your --binary-url serves for it; nothing was made",
                    runs.vm_type,
                    runs.region,
                    names(&runs.architectures),
                    names(&given.keys().copied().collect::<Vec<_>>())
                )));
            }
            request.binary_url = Some(url);
            request.binary_sha256 = Some(sums);
        }
        Binary::Own => request.binary = Some(ship(deployer, request, None, json).await?),
        Binary::File(file) => request.binary = Some(ship(deployer, request, Some(file), json).await?),
    }
    Ok(())
}

/// Checks that the binary the deploy ships (`file`, else this CLI's own) runs on the machine
/// type (asked of the provider through the deployer, before anything is made), and uploads it
/// to the deployer, which keeps it until the deploy puts it in the API's bucket. Answers its
/// SHA-256.
async fn ship(
    deployer: &Client,
    request: &NewHostedApi,
    file: Option<PathBuf>,
    json: bool,
) -> Result<String, CliError> {
    let own = file.is_none();
    let path = match file {
        Some(file) => file,
        None => std::env::current_exe().map_err(|err| {
            CliError::bad_input(format!("cannot find this CLI's own binary to ship ({err}): pass --binary FILE"))
        })?,
    };
    let what = if own { "this anycloud".to_owned() } else { format!("--binary {}", path.display()) };
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|err| CliError::bad_input(format!("reading {what} ({}): {err}", path.display())))?;
    let arch = Arch::of_elf(&bytes[..bytes.len().min(64)]).map_err(|why| {
        CliError::bad_input(format!(
            "{what} cannot run on a cloud VM: {why}; pass --binary FILE, an anycloud built for Linux (x86_64 or \
             aarch64), or --binary-url with --binary-sha256"
        ))
    })?;
    let runs = architectures(deployer, request).await?;
    if !runs.architectures.contains(&arch) {
        let theirs = names(&runs.architectures);
        return Err(CliError::bad_input(format!(
            "API `{}`: machine type {} in {} runs {theirs}, and {what} is built for {arch}: pass --binary FILE, an \
             anycloud built for Linux {theirs}, or pick a machine type that runs {arch}; nothing was made",
            request.name, runs.vm_type, runs.region
        )));
    }
    let sha256 = hosting::binary::sha256_hex(&bytes);
    if !json {
        say!("shipping {what} ({arch}, {} MiB, sha256 {sha256}) to `{}`", bytes.len() / (1024 * 1024), deployer.name());
    }
    let staged: StagedBinary = deployer.put_octets(&format!("/v1/binaries/{sha256}"), bytes).await?;
    Ok(staged.sha256)
}

/// What the machine type of `request` runs on, asked of its provider through the deployer.
async fn architectures(deployer: &Client, request: &NewHostedApi) -> Result<VmTypeArchitectures, CliError> {
    let path = format!("/v1/credentials/{}/vm-types/{}", segment(&request.credentials), segment(&request.vm_type));
    deployer.get_query(&path, &VmTypeQuery { region: request.region.clone() }).await
}

fn names(arches: &[Arch]) -> String {
    arches.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ")
}

/// Removes a deployed API through `deployer`, follows the removal, forgets the API in the CLI
/// config, and says what stays.
pub async fn remove(deployer: Client, name: &str, delete_bucket: bool, json: bool) -> CliResult {
    let path = format!("/v1/apis/{}?delete_bucket={delete_bucket}", segment(name));
    let started: HostedApiStarted = deployer.delete(&path).await?;
    let run = started.workflow_id.to_string();
    if !json {
        say!("removing API `{name}` through `{}`; workflow {run}", deployer.name());
    }
    let followed = follow(&deployer, &run, Duration::from_secs(30 * 60), json).await?;
    let shown: anycloud_workflows::wire::HostedApiView =
        read_patiently(&deployer, &format!("/v1/apis/{}", segment(name)), json).await?;
    if followed != OK || shown.phase != Phase::Removed {
        return Err(CliError::new(
            followed.max(ENDED_OTHERWISE),
            "REMOVE_UNFINISHED",
            format!(
                "API `{name}` is {}: its removal did not finish; `anycloud workflow inspect {run}` shows where it stands",
                shown.phase
            ),
        ));
    }
    let mut config = Config::load()?;
    config.apis.remove(name);
    let was_active = config.active.as_deref() == Some(name);
    if was_active {
        // The API that deployed it is where its credentials are: the natural next target.
        config.active = Some(deployer.name().to_owned());
    }
    config.save()?;
    let stays = if delete_bucket {
        "nothing stays: the bucket and the API's state in it were deleted".to_owned()
    } else {
        // A bucket on another provider's store is reached with its own credential again.
        let storage = if shown.storage_credential == shown.credential {
            String::new()
        } else {
            format!(" --checkpoint-storage-credentials {}", shown.storage_credential)
        };
        format!(
            "its bucket {} stays, with the API's state: `anycloud api serve --id {name} --credentials {}{storage} \
             --checkpoint-bucket {}` brings the same API back; `anycloud api delete {name} --delete-bucket` deletes it",
            shown.bucket, shown.credential, shown.bucket
        )
    };
    if json {
        print_json(&serde_json::json!({ "removed": name, "bucket": shown.bucket, "bucket_deleted": delete_bucket }));
    } else {
        say!("removed API `{name}`: its VM, network rules, VM identity and any storage secret are gone; {stays}");
        if was_active {
            say!("active API: {} (which deployed it)", deployer.name());
        }
    }
    Ok(OK)
}

/// Rotates the CA of the deployed API `name` (the active API when `None`) through the API that
/// deployed it: pins the old and the new CA as soon as the deployer has stored the new one, and
/// the new one alone once the API serves from it.
pub async fn rotate_ca(name: Option<String>, timeout: Duration, json: bool) -> CliResult {
    let name = match name {
        Some(name) => name,
        None => Config::load()?.active()?.0,
    };
    let Some(deployer) = deployer_of(&name)? else {
        return Err(CliError::bad_input(format!(
            "API `{name}` was not deployed on a cloud VM from this CLI config (`anycloud api list` shows the APIs              it knows): rotate its CA where it was deployed from, with `anycloud api rotate-ca {name}` there"
        )));
    };
    let started: HostedApiStarted = deployer.post_empty(&format!("/v1/apis/{}/rotate-ca", segment(&name))).await?;
    let run = started.workflow_id.to_string();
    let before = started.api.ca_pem.clone().unwrap_or_default();
    if !json {
        say!("rotating the CA of API `{name}` through `{}`; workflow {run}", deployer.name());
    }
    // Both CAs pinned before the API serves from the new one (the deployer pins the bundle first).
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let shown: anycloud_workflows::wire::HostedApiView =
            deployer.get(&format!("/v1/apis/{}", segment(&name))).await?;
        let pinned = shown.ca_pem.unwrap_or_default();
        let both = anycloud_workflows::hosting::identity::pem_blocks(&pinned).len() > 1;
        if pinned != before || both || std::time::Instant::now() > deadline {
            pin(&name, &pinned)?;
            break;
        }
        let detail: anycloud_workflows::wire::WorkflowDetail = deployer.get(&format!("/v1/workflows/{run}")).await?;
        if detail.workflow.run.status.is_final() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let followed = follow(&deployer, &run, deadline.saturating_duration_since(std::time::Instant::now()), json).await?;
    let access: HostedApiAccess =
        read_patiently(&deployer, &format!("/v1/apis/{}/access", segment(&name)), json).await?;
    pin(&name, &access.ca_pem)?;
    let cas = anycloud_workflows::hosting::identity::pem_blocks(&access.ca_pem).len();
    if followed != OK || cas != 1 {
        return Err(CliError::new(
            followed.max(ENDED_OTHERWISE),
            "ROTATION_UNFINISHED",
            format!(
                "the CA rotation of API `{name}` did not finish; the CLI config pins {cas} CAs (the old and the new),                  which trust the API whichever it serves from; `anycloud workflow inspect {run}` shows where it                  stands, and `anycloud api rotate-ca {name}` finishes it"
            ),
        ));
    }
    if json {
        print_json(&serde_json::json!({ "rotated": name, "workflow_id": run, "ca_pem": access.ca_pem }));
    } else {
        say!(
            "API `{name}` serves a certificate from its new CA, which the CLI config pins alone; its token is unchanged"
        );
    }
    Ok(OK)
}

/// Pins `ca_pem` for API `name` in the CLI config.
fn pin(name: &str, ca_pem: &str) -> Result<(), CliError> {
    if ca_pem.is_empty() {
        return Ok(());
    }
    let mut config = Config::load()?;
    if let Some(entry) = config.apis.get_mut(name) {
        entry.ca_pem = Some(ca_pem.to_owned());
    }
    config.save()
}

/// The client of the API that deployed `name`, from the CLI config.
pub fn deployer_of(name: &str) -> Result<Option<Client>, CliError> {
    let config = Config::load()?;
    let Some(deployer) = config.apis.get(name).and_then(|entry| entry.deployed_by.clone()) else { return Ok(None) };
    let entry = config.apis.get(&deployer).cloned().ok_or_else(|| {
        CliError::new(
            NOT_OBSERVED,
            "UNKNOWN_API",
            format!("API `{name}` was deployed by API `{deployer}`, which the CLI config no longer knows"),
        )
    })?;
    Client::new(deployer, entry).map(Some)
}
