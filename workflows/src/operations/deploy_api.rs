//! Deploying an API on a cloud VM: its record (the durable intent) and its `api.deploy` run, in
//! one transaction that holds the credentials it uses.

use uuid::Uuid;

use crate::cloud::ProviderKind;
use crate::db::credentials::{self, Credential, CredentialStatus, Hold};
use crate::db::hosted_apis::{self, HostedApi, Phase};
use crate::db::is_unique_violation;
use crate::hosting;
use crate::hosting::binary::{Arch, BinarySource, StagedBinary, Sums};
use crate::names::check_dns_label;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{HostedApiStarted, NewHostedApi, VmTypeArchitectures};
use crate::workflows::api_deploy::{DeployApi, DeployInput};

use super::Operations;

/// The port a hosted API serves HTTPS on unless told otherwise.
pub const DEFAULT_API_PORT: u16 = 443;

impl Operations {
    /// Stores the hosted API's intent and starts its deploy. Refused for a spec that cannot be,
    /// for credentials that are missing, not valid or of a provider that cannot host, and for a
    /// name a live hosted API holds.
    pub async fn deploy_api(&self, request: NewHostedApi) -> Result<HostedApiStarted, OperationError> {
        let name = request.name.clone();
        let bad =
            |why: String| OperationError::from(Refusal::new(Code::InvalidHostedApi, format!("API `{name}`: {why}")));
        check_dns_label("API", &name).map_err(|why| Refusal::new(Code::InvalidHostedApi, why))?;
        if request.vm_type.trim().is_empty() {
            return Err(bad(
                "--vm-type is empty; pass the provider's machine type (e.g. t3.medium, e2-standard-2)".into()
            ));
        }
        check_names(&request.vm_type, request.region.as_deref()).map_err(bad)?;
        if request.port == Some(0) {
            return Err(bad("--port 0 is not a port a client can be told; pass 1-65535 (default 443)".into()));
        }
        let binary = binary_source(&request, &self.deps.binaries).map_err(bad)?;
        let storage_name =
            request.checkpoint_storage_credentials.clone().unwrap_or_else(|| request.credentials.clone());

        let mut tx = self.deps.db.begin().await?;
        let hosting = held(&mut tx, &request.credentials, &name).await?;
        let storage =
            if storage_name == hosting.name { hosting.clone() } else { held(&mut tx, &storage_name, &name).await? };
        if hosting.provider == ProviderKind::Sim {
            return Err(bad(format!(
                "credential `{}` is of the simulated cloud, which hosts an API as a local process: run `anycloud api \
                 serve --id {name} --credentials sim` instead",
                hosting.name
            )));
        }
        let bucket = bucket_url(&request.checkpoint_bucket, storage.provider).map_err(bad)?;
        let region = region_of(request.region.as_deref(), &hosting);
        if let Some(existing) = hosted_apis::lock_live_in(&mut tx, &name).await? {
            return Err(exists(&name, existing.phase).into());
        }
        let (binary_url, binary_sums) = match binary {
            BinarySource::Shipped { sha256, arch } => (
                format!("{bucket}{}", hosting::binary::object_key("", &sha256)),
                hosting::binary::format_sums(&Sums::from([(arch, sha256)])),
            ),
            BinarySource::Hosted { url, sums } => (url, hosting::binary::format_sums(&sums)),
        };
        let id = Uuid::new_v4().simple().to_string()[..12].to_owned();
        let input = DeployInput { api_id: id.clone(), name: name.clone() };
        let run = self.engine.submit_in::<DeployApi>(&mut tx, &input, Some(&HostedApi::resource_key(&name))).await?;
        let now = crate::now_ms();
        let api = HostedApi {
            id,
            name: name.clone(),
            credential: hosting.name,
            provider: hosting.provider,
            storage_credential: storage.name,
            region,
            vm_type: request.vm_type.trim().to_owned(),
            bucket,
            port: i64::from(request.port.unwrap_or(DEFAULT_API_PORT)),
            binary_url,
            binary_sha256: Some(binary_sums),
            phase: Phase::Deploying,
            reason: None,
            url: None,
            ca_pem: None,
            bucket_made: None,
            workflow_id: Some(run.to_string()),
            created_at: now,
            updated_at: now,
        };
        match hosted_apis::insert_in(&mut tx, &api).await {
            Err(err) if is_unique_violation(&err) => return Err(exists(&name, Phase::Deploying).into()),
            result => result?,
        }
        tx.commit().await?;
        self.engine.wake_up();
        Ok(HostedApiStarted { api: api.into(), workflow_id: run })
    }
}

/// The machine type and region as a provider names them: both ride in the VM's unit as
/// arguments of `api serve` (its clusters' control planes), and in the provider's URLs.
fn check_names(vm_type: &str, region: Option<&str>) -> Result<(), String> {
    for (flag, value) in [("--vm-type", Some(vm_type)), ("--region", region)] {
        if let Some(value) = value
            && !value.trim().bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(format!("{flag} `{value}` is not a provider's name: use letters, digits, `.`, `_`, `-`"));
        }
    }
    Ok(())
}

/// The VM's region: the one asked, else the credential's, else the provider's usual default.
fn region_of(asked: Option<&str>, hosting: &Credential) -> String {
    asked.map(str::to_owned).or_else(|| hosting.public.region.clone()).unwrap_or_else(|| match hosting.provider {
        ProviderKind::Gcp => "us-central1".to_owned(),
        _ => "us-east-1".to_owned(),
    })
}

/// The binary the VM runs, as asked: one staged on this API (`binary`), or the operator's
/// `https://` URL with a SHA-256 per architecture. The error says what to pass instead.
fn binary_source(request: &NewHostedApi, staging: &std::path::Path) -> Result<BinarySource, String> {
    match (&request.binary, &request.binary_url, &request.binary_sha256) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            Err("give either the binary the deploy ships (--binary, or none: this CLI's own) or --binary-url with \
             --binary-sha256, not both"
                .to_owned())
        }
        (Some(sha256), None, None) => {
            let sha256 = sha256.to_ascii_lowercase();
            if !hosting::binary::is_sha256(&sha256) {
                return Err(format!("binary `{sha256}` is not a SHA-256 (64 hex digits)"));
            }
            match hosting::binary::staged(staging, &sha256)? {
                Some(staged) => Ok(BinarySource::Shipped { sha256, arch: staged.arch }),
                None => Err(format!(
                    "no binary with SHA-256 {sha256} was uploaded to this API; upload it first (PUT \
                     /v1/binaries/{sha256}), as `anycloud api serve --credentials` does"
                )),
            }
        }
        (None, Some(url), Some(sums)) => {
            let sums = hosting::binary::parse_sums(sums).map_err(|why| format!("--binary-sha256: {why}"))?;
            check_binary_url(url)?;
            Ok(BinarySource::Hosted { url: url.clone(), sums })
        }
        (None, Some(url), None) => Err(format!(
            "--binary-url {url} needs --binary-sha256 ARCH=SHA256 for each architecture it serves (e.g. \
             x86_64=<64 hex digits>): the VM runs nothing it cannot check"
        )),
        (None, None, Some(_)) => Err("--binary-sha256 goes with --binary-url".to_owned()),
        (None, None, None) => {
            Err("no binary for the VM: ship one (--binary FILE, or none: the CLI's own), or give --binary-url with \
             --binary-sha256"
                .to_owned())
        }
    }
}

/// An operator's binary URL: `https://` with a host, `{arch}` allowed, nothing a shell would read.
fn check_binary_url(url: &str) -> Result<(), String> {
    let refuse = |why: &str| Err(format!("--binary-url `{url}` {why}"));
    if !url.starts_with("https://") {
        return refuse("is not an https:// URL: the VM downloads over HTTPS only");
    }
    if url.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b"'\"`$\\".contains(&b)) {
        return refuse("has a space, quote, `$` or backslash in it");
    }
    match reqwest::Url::parse(&url.replace("{arch}", Arch::X86_64.as_str())) {
        Ok(parsed) if parsed.host_str().is_some_and(|h| !h.is_empty()) => Ok(()),
        Ok(_) => refuse("has no host"),
        Err(err) => refuse(&format!("is not a URL: {err}")),
    }
}

impl Operations {
    /// The architectures machine type `vm_type` runs (in `region`, else the region a deploy
    /// with `credential` would pick), asked of the provider: what `api serve --credentials`
    /// checks its binary against before it uploads anything.
    pub async fn vm_type_architectures(
        &self,
        credential: &str,
        region: Option<&str>,
        vm_type: &str,
    ) -> Result<VmTypeArchitectures, OperationError> {
        let refuse = |code, why: String| OperationError::from(Refusal::new(code, why));
        check_names(vm_type, region).map_err(|why| refuse(Code::InvalidHostedApi, why))?;
        let Some(found) = credentials::get(&self.deps.db, credential).await? else {
            return Err(refuse(
                Code::CredentialNotFound,
                format!("credential `{credential}` does not exist on this API (`anycloud credentials list`)"),
            ));
        };
        if found.provider == ProviderKind::Sim {
            return Err(refuse(
                Code::InvalidHostedApi,
                format!(
                    "credential `{credential}` is of the simulated cloud, which hosts an API as a local process: run \
                     `anycloud api serve --id NAME --credentials sim` instead"
                ),
            ));
        }
        let region = region_of(region, &found);
        let cloud = self
            .deps
            .cloud(credential, &region)
            .await
            .map_err(|err| refuse(Code::CredentialInvalid, err.to_string()))?;
        let architectures = cloud.vm_architectures(&region, vm_type).await.map_err(|err| {
            let code = match err {
                crate::cloud::CloudError::Retryable(_) => Code::ProviderUnavailable,
                crate::cloud::CloudError::Terminal(_) => Code::InvalidPlacement,
            };
            refuse(code, format!("machine type {vm_type} in {region} with credential `{credential}`: {err}"))
        })?;
        Ok(VmTypeArchitectures {
            credential: credential.to_owned(),
            region,
            vm_type: vm_type.to_owned(),
            architectures,
        })
    }

    /// Receives a binary a deploy will ship (`PUT /v1/binaries/{sha256}`), as it streams in.
    pub async fn stage_binary<S, E>(&self, sha256: &str, body: S) -> Result<StagedBinary, OperationError>
    where
        S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        hosting::binary::stage(&self.deps.binaries, sha256, body)
            .await
            .map_err(|why| Refusal::new(Code::InvalidHostedApi, format!("binary {sha256}: {why}")).into())
    }
}

/// The credential `name`, held until the transaction ends, when it is valid.
async fn held(tx: &mut anycloud_engine::WriteTx, name: &str, api: &str) -> Result<Credential, OperationError> {
    let refuse = |code, why: String| OperationError::from(Refusal::new(code, format!("API `{api}`: {why}")));
    match credentials::hold_in(tx, name, Hold::Shared).await? {
        Some(credential) if credential.status == CredentialStatus::Valid => Ok(credential),
        Some(credential) if credential.status == CredentialStatus::Invalid => Err(refuse(
            Code::CredentialInvalid,
            format!(
                "credential `{name}` is invalid: {}; save it again with working keys",
                credential.status_message.unwrap_or_default()
            ),
        )),
        Some(_) => Err(refuse(
            Code::CredentialNotVerified,
            format!(
                "credential `{name}` is still being verified; try again once `anycloud credentials list` shows it valid"
            ),
        )),
        None => Err(refuse(
            Code::CredentialNotFound,
            format!(
                "credential `{name}` does not exist on this API; save it first with `anycloud credentials new {name} \
                 --provider aws|gcp` (`anycloud credentials list` shows the saved ones)"
            ),
        )),
    }
}

/// The bucket as a URL of the storage provider's store: a bare name gets its scheme; a URL must
/// be of that store.
fn bucket_url(given: &str, provider: ProviderKind) -> Result<String, String> {
    let scheme = match provider {
        ProviderKind::Aws => "s3",
        ProviderKind::Gcp => "gs",
        ProviderKind::Sim => return Err("the simulated cloud has no buckets".to_owned()),
    };
    let url = if given.contains("://") { given.to_owned() } else { format!("{scheme}://{given}") };
    let parsed = anycloud_checkpoint::BucketUrl::parse(&url).map_err(|why| format!("--checkpoint-bucket: {why}"))?;
    if !url.starts_with(&format!("{scheme}://")) {
        return Err(format!(
            "--checkpoint-bucket {given} is not on {provider}'s store ({scheme}://), where its credential is"
        ));
    }
    Ok(parsed.to_string())
}

fn exists(name: &str, phase: Phase) -> Refusal {
    Refusal::new(
        Code::HostedApiExists,
        format!(
            "API `{name}` already exists ({phase}); pick another name, or remove it first with `anycloud api delete \
             {name}`"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> NewHostedApi {
        NewHostedApi {
            name: "team-api".into(),
            credentials: "aws-host".into(),
            vm_type: "t3.medium".into(),
            region: None,
            checkpoint_bucket: "b-1".into(),
            checkpoint_storage_credentials: None,
            port: None,
            binary: None,
            binary_url: Some("https://downloads.example.com/anycloud-{arch}".into()),
            binary_sha256: Some(format!("x86_64={}", "a".repeat(64))),
        }
    }

    #[test]
    fn the_vms_binary_is_checked_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let hosted = binary_source(&request(), dir.path()).unwrap();
        assert_eq!(hosted.arches(), vec![Arch::X86_64]);
        let http = NewHostedApi { binary_url: Some("http://downloads.example.com/a".into()), ..request() };
        assert!(binary_source(&http, dir.path()).unwrap_err().contains("https://"));
        let quoted = NewHostedApi { binary_url: Some("https://h/a'$(id)".into()), ..request() };
        assert!(binary_source(&quoted, dir.path()).unwrap_err().contains("quote"));
        let unsummed = NewHostedApi { binary_sha256: None, ..request() };
        assert!(binary_source(&unsummed, dir.path()).unwrap_err().contains("--binary-sha256 ARCH=SHA256"));
        let bare_sum = NewHostedApi { binary_sha256: Some("a".repeat(64)), ..request() };
        assert!(binary_source(&bare_sum, dir.path()).unwrap_err().contains("ARCH=SHA256"));
        let unstaged =
            NewHostedApi { binary: Some("b".repeat(64)), binary_url: None, binary_sha256: None, ..request() };
        assert!(binary_source(&unstaged, dir.path()).unwrap_err().contains("upload it first"));
        let both = NewHostedApi { binary: Some("b".repeat(64)), ..request() };
        assert!(binary_source(&both, dir.path()).unwrap_err().contains("not both"));
        let neither = NewHostedApi { binary_url: None, binary_sha256: None, ..request() };
        assert!(binary_source(&neither, dir.path()).unwrap_err().contains("--binary"));
    }

    #[test]
    fn a_bare_bucket_name_takes_its_providers_scheme() {
        assert_eq!(bucket_url("team-api-state", ProviderKind::Aws).as_deref(), Ok("s3://team-api-state/"));
        assert_eq!(bucket_url("gs://b-1/apis/", ProviderKind::Gcp).as_deref(), Ok("gs://b-1/apis/"));
        assert!(bucket_url("gs://b-1", ProviderKind::Aws).is_err());
        assert!(bucket_url("UPPER", ProviderKind::Aws).is_err());
    }
}
