//! Deploying an API on a cloud VM: its record (the durable intent) and its `api.deploy` run, in
//! one transaction that holds the credentials it uses.

use uuid::Uuid;

use crate::api::{HostedApiStarted, NewHostedApi};
use crate::api_deploy::{DeployApi, DeployInput};
use crate::api_user_data::DEFAULT_BINARY_URL;
use crate::db::credentials::{self, Credential, CredentialStatus, Hold};
use crate::db::hosted_apis::{self, HostedApi, Phase};
use crate::db::is_unique_violation;
use crate::names::check_dns_label;
use crate::providers::ProviderKind;
use crate::refusal::{Code, OperationError, Refusal};

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
        // Both ride in the VM's unit as arguments of `api serve` (its clusters' control planes).
        for (flag, value) in [("--vm-type", Some(&request.vm_type)), ("--region", request.region.as_ref())] {
            if let Some(value) = value
                && !value.trim().bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            {
                return Err(bad(format!(
                    "{flag} `{value}` is not a provider's name: use letters, digits, `.`, `_`, `-`"
                )));
            }
        }
        if request.port == Some(0) {
            return Err(bad("--port 0 is not a port a client can be told; pass 1-65535 (default 443)".into()));
        }
        if let Some(sum) = &request.binary_sha256
            && (sum.len() != 64 || !sum.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(bad(format!("--binary-sha256 `{sum}` is not a SHA-256 (64 hex digits)")));
        }
        let binary_url = request.binary_url.clone().unwrap_or_else(|| DEFAULT_BINARY_URL.to_owned());
        if !binary_url.starts_with("https://") && !binary_url.starts_with("http://") {
            return Err(bad(format!("--binary-url `{binary_url}` is not an http(s) URL")));
        }
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
        let region = request.region.clone().or_else(|| hosting.public.region.clone()).unwrap_or_else(|| match hosting
            .provider
        {
            ProviderKind::Gcp => "us-central1".to_owned(),
            _ => "us-east-1".to_owned(),
        });
        if let Some(existing) = hosted_apis::lock_live_in(&mut tx, &name).await? {
            return Err(exists(&name, existing.phase).into());
        }
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
            binary_sha256: request.binary_sha256.map(|sum| sum.to_ascii_lowercase()),
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
        Ok(HostedApiStarted { api, workflow_id: run })
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

    #[test]
    fn a_bare_bucket_name_takes_its_providers_scheme() {
        assert_eq!(bucket_url("team-api-state", ProviderKind::Aws).as_deref(), Ok("s3://team-api-state/"));
        assert_eq!(bucket_url("gs://b-1/apis/", ProviderKind::Gcp).as_deref(), Ok("gs://b-1/apis/"));
        assert!(bucket_url("gs://b-1", ProviderKind::Aws).is_err());
        assert!(bucket_url("UPPER", ProviderKind::Aws).is_err());
    }
}
