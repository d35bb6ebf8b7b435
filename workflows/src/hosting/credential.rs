//! The hosting credential, handed to the API it hosts without its key: `api.deploy` saves on the
//! deployed API (which places its clusters' control planes with it, ../shared/spec/clusters.md
//! "Placement") a machine-identity credential of the same name, provider, region, project and
//! endpoint, through the API's own `POST /v1/credentials`, over HTTPS that trusts only the API's
//! CA, with the API's token. The API then acts as its VM (its instance profile on AWS, its service
//! account on GCP), whose rights `ensure_vm_identity` limits to what placing control planes
//! needs: the deployer's key, which may create roles, never reaches the VM.

use anycloud_engine::{Check, StepError};

use crate::cloud::ProviderKind;
use crate::db::credentials::{self, CredentialStatus};
use crate::db::hosted_apis::{self, HostedApi};
use crate::hosting::identity::{ApiIdentity, trusting_only};
use crate::wire::{CredentialShown, NewCredential};
use crate::workflows::deps::{AccountError, Deps};

/// Saves `api`'s hosting credential on the API at `url` unless it holds it, and says whether the
/// API has verified it: ready once it is valid there; terminal if the API found it invalid (its
/// VM could not use it).
pub async fn hand_over(deps: &Deps, api: &HostedApi, url: &str, ca_pem: &str) -> Result<Check<()>, StepError> {
    let token = api_token(deps, api).await?;
    let client = trusting_only(reqwest::Client::builder(), ca_pem)
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .map_err(StepError::terminal)?;
    let name = &api.credential;
    let shown = client.get(format!("{url}/v1/credentials/{name}")).bearer_auth(&token).send().await;
    let shown = shown.map_err(|err| unreachable(url, &err))?;
    if shown.status() == reqwest::StatusCode::NOT_FOUND {
        let request = new_credential(deps, name).await?;
        let saved = client.post(format!("{url}/v1/credentials")).bearer_auth(&token).json(&request).send().await;
        let saved = saved.map_err(|err| unreachable(url, &err))?;
        // 409: a save whose answer was lost went through; the next check reads it.
        if !saved.status().is_success() && saved.status() != reqwest::StatusCode::CONFLICT {
            return Err(answered(url, "saving", name, saved).await);
        }
        return Ok(Check::NotYet(format!("saved credential `{name}` on the API at {url}; it verifies it")));
    }
    if !shown.status().is_success() {
        return Err(answered(url, "reading", name, shown).await);
    }
    let shown: CredentialShown = shown.json().await.map_err(|err| unreachable(url, &err))?;
    match shown.credential.status {
        CredentialStatus::Valid => Ok(Check::Ready(())),
        CredentialStatus::Verifying => {
            Ok(Check::NotYet(format!("the API at {url} is verifying credential `{name}` from its VM")))
        }
        CredentialStatus::Invalid => Err(StepError::terminal_msg(format!(
            "the API could not use its hosting credential `{name}` from its VM: {}; it places clusters' control \
             planes with it",
            shown.credential.status_message.unwrap_or_default()
        ))),
    }
}

/// The API's token, from its sealed identity.
async fn api_token(deps: &Deps, api: &HostedApi) -> Result<String, StepError> {
    let sealed = hosted_apis::sealed_identity(&deps.db, &api.id)
        .await?
        .ok_or_else(|| StepError::terminal_msg(format!("API `{}` has no identity stored", api.name)))?;
    let opened = deps.sealer.open(hosted_apis::IDENTITY.place(&api.id), &sealed).map_err(StepError::terminal)?;
    let identity: ApiIdentity = serde_json::from_slice(&opened).map_err(StepError::terminal)?;
    Ok(identity.token)
}

/// The request that saves credential `name` on the API: the same account, as the VM itself.
async fn new_credential(deps: &Deps, name: &str) -> Result<NewCredential, StepError> {
    let credential = match credentials::get(&deps.db, name).await {
        Ok(Some(found)) => found,
        Ok(None) => return Err(AccountError::NoCredential(name.to_owned()).into()),
        Err(err) => return Err(StepError::retryable(err)),
    };
    let public = credential.public;
    let mut request = NewCredential {
        name: name.to_owned(),
        provider: credential.provider.as_str().to_owned(),
        endpoint: public.endpoint,
        machine_identity: true,
        ..NewCredential::default()
    };
    match credential.provider {
        ProviderKind::Aws => request.region = public.region,
        ProviderKind::Gcp => request.project = public.project,
        ProviderKind::Sim => {
            return Err(StepError::terminal_msg(format!("credential `{name}` is simulated: it hosts no VM")));
        }
    }
    Ok(request)
}

fn unreachable(url: &str, err: &reqwest::Error) -> StepError {
    StepError::retryable_msg(format!("the API at {url} did not answer: {}", anycloud_engine::error_chain(err)))
}

/// An answer that is not the one asked for: a 4xx stays (the API refuses it), the rest may pass.
async fn answered(url: &str, doing: &str, name: &str, response: reqwest::Response) -> StepError {
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    let message = format!("{doing} credential `{name}` on the API at {url}: it answered {status}: {body}");
    if status.is_client_error() { StepError::terminal_msg(message) } else { StepError::retryable_msg(message) }
}
