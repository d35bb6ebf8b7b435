//! `api.rotate_ca`: gives a deployed API a new TLS CA (`anycloud api rotate-ca NAME`, run on the
//! API that deployed it).
//!
//! ```text
//! store_new_ca -> serve_new_ca -> pin_new_ca
//! ```
//!
//! `store_new_ca` makes a new CA ([`crate::hosting::identity::new_ca`]) and puts it in the API's keys
//! secret as a new version (the older versions destroyed, as every `store_vm_secret` does); the
//! token and the sealing key in the secret are kept as they are. The record's pin becomes a
//! bundle of the CA the API may still serve from and the new one, and the sealed identity holds
//! the new CA. `serve_new_ca` asks the hosted API, with its token, over HTTPS trusting that
//! bundle, to read its keys secret again and serve a certificate issued from the CA it holds
//! (`POST /v1/tls/renew`), and waits until it answers `GET /v1/health` trusting only the new CA.
//! `pin_new_ca` then pins the new CA alone. A VM that restarts in between reads the new CA from
//! the secret at start anyway.
//!
//! Each step can run again: `store_new_ca` makes a CA only while the secret still holds the one
//! the rotation started from (the input's), so a second attempt after a cut-short first keeps the
//! CA that attempt stored. There is no undo: a rotation that fails leaves the bundle pinned, which
//! trusts the API whichever CA it serves from; `anycloud api rotate-ca` again finishes it.

use std::time::Duration;

use anycloud_engine::{Check, Step, StepCtx, StepError, StepKey, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::cloud::Cloud;
use crate::db::hosted_apis::{self, HostedApi};
use crate::hosting;
use crate::hosting::identity::{ApiIdentity, trusting_only};
use crate::hosting::keys::ApiKeys;
use crate::wire::TlsRenewed;
use crate::workflows::deps::Deps;
use crate::workflows::retry;

/// The workflow, with what its steps need.
pub struct RotateApiCa {
    /// Database, sealer, clouds.
    pub deps: Deps,
}

/// Which API, and the CA it had when the rotation was asked for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RotateInput {
    /// The record's id.
    pub api_id: String,
    /// Its name (for people reading `inspect`).
    pub name: String,
    /// The CA's certificate (public) the sealed identity held at the start: the one replaced.
    pub from_ca_pem: String,
}

/// The CA the API serves from now.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RotateOutput {
    /// Its certificate: what the CLI pins.
    pub ca_pem: String,
}

/// The new CA's certificate (public; its key is in the secret and sealed in the record only).
const STORE_NEW_CA: StepKey<String> = StepKey::new("store_new_ca");
/// The API serves a certificate from the new CA.
const SERVE_NEW_CA: StepKey<()> = StepKey::new("serve_new_ca");
/// The record pins the new CA alone.
const PIN_NEW_CA: StepKey<()> = StepKey::new("pin_new_ca");

impl Workflow for RotateApiCa {
    const KIND: &'static str = "api.rotate_ca";
    const VERSION: u32 = 1;
    type Input = RotateInput;
    type Output = RotateOutput;

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(
                Step::action(STORE_NEW_CA, store_new_ca)
                    .retry(retry::cloud_calls())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(
                Step::poll(SERVE_NEW_CA, serve_new_ca)
                    .every(Duration::from_secs(2))
                    .timeout(retry::ready_timeout())
                    .retry(retry::cloud_calls())
                    .attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(Step::action(PIN_NEW_CA, pin_new_ca))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<RotateOutput, StepError> {
        Ok(RotateOutput { ca_pem: ctx.output(STORE_NEW_CA)? })
    }
}

/// The record and its hosting account.
async fn hosting(ctx: &StepCtx<RotateApiCa>) -> Result<(HostedApi, Box<dyn Cloud>), StepError> {
    let api = ctx.workflow().deps.hosted_api(&ctx.input().api_id).await?;
    let cloud = ctx.workflow().deps.cloud(&api.credential, &api.region).await?;
    Ok((api, cloud))
}

/// Puts a new CA in the keys secret (unless an earlier attempt did), keeping the token and the
/// sealing key; seals it in the record and pins the bundle of what was pinned and the new CA.
async fn store_new_ca(ctx: StepCtx<RotateApiCa>) -> Result<String, StepError> {
    let (api, cloud) = hosting(&ctx).await?;
    let name = hosting::keys::secret_name(api.provider, &api.bucket);
    let Some(text) = cloud.read_vm_secret(&name).await? else {
        return Err(StepError::terminal_msg(format!(
            "API `{}` has no keys secret {name} any more: nothing to rotate; deploy it again",
            api.name
        )));
    };
    let mut keys = ApiKeys::from_json(&text, &name).map_err(StepError::terminal_msg)?;
    let started_from = hosting::identity::pem_blocks(&ctx.input().from_ca_pem);
    if hosting::identity::pem_blocks(&keys.ca_cert_pem) == started_from {
        let (cert, key) = hosting::identity::new_ca(&api.name).map_err(StepError::retryable)?;
        keys = ApiKeys { ca_cert_pem: cert, ca_key_pem: key, ..keys };
        cloud.store_vm_secret(&api.owner(), &name, &keys.to_json()).await?;
    }
    let identity = keys.identity();
    let opened = serde_json::to_vec(&identity).map_err(StepError::terminal)?;
    let sealed = ctx.workflow().deps.sealer.seal(hosted_apis::IDENTITY.place(&api.id), &opened);
    let pinned = api.ca_pem.as_deref().unwrap_or(&ctx.input().from_ca_pem);
    let during = hosting::identity::bundle(pinned, &keys.ca_cert_pem);
    hosted_apis::set_identity(&ctx.workflow().deps.db, &api.id, Some(&sealed), Some(&during)).await?;
    Ok(keys.ca_cert_pem)
}

/// Asks the API to read its keys again and serve a certificate from the new CA, until it
/// answers trusting that CA alone.
async fn serve_new_ca(ctx: StepCtx<RotateApiCa>) -> Result<Check<()>, StepError> {
    let api = ctx.workflow().deps.hosted_api(&ctx.input().api_id).await?;
    let new_ca = ctx.output(STORE_NEW_CA)?;
    let Some(url) = api.url.clone() else {
        return Err(StepError::terminal_msg(format!("API `{}` has no URL: it is {}", api.name, api.phase)));
    };
    if hosting::identity::health(&url, &new_ca).await.is_ok() {
        return Ok(Check::Ready(()));
    }
    let token = identity(&ctx.workflow().deps, &api).await?.token;
    let trusted = api.ca_pem.clone().unwrap_or_else(|| new_ca.clone());
    let client = trusting_only(reqwest::Client::builder(), &trusted)
        .timeout(Duration::from_secs(20))
        .build()
        .map_err(StepError::terminal)?;
    let answer = client.post(format!("{url}/v1/tls/renew")).bearer_auth(&token).send().await.map_err(|err| {
        StepError::retryable_msg(format!("the API at {url} did not answer: {}", anycloud_engine::error_chain(&err)))
    })?;
    let status = answer.status();
    if !status.is_success() {
        let body = answer.text().await.unwrap_or_default();
        let message = format!("asking the API at {url} to serve from its new CA: it answered {status}: {body}");
        return Err(if status.is_client_error() {
            StepError::terminal_msg(message)
        } else {
            StepError::retryable_msg(message)
        });
    }
    let renewed: TlsRenewed = answer.json().await.map_err(|err| StepError::retryable_msg(err.to_string()))?;
    if hosting::identity::pem_blocks(&renewed.ca_pem) != hosting::identity::pem_blocks(&new_ca) {
        return Ok(Check::NotYet(format!(
            "the API at {url} read its keys secret and still serves from another CA (a secret version not yet \
             visible?)"
        )));
    }
    Ok(Check::NotYet(format!(
        "the API at {url} serves a certificate from the new CA; checking it trusting that CA alone"
    )))
}

/// Pins the new CA alone.
async fn pin_new_ca(ctx: StepCtx<RotateApiCa>) -> Result<(), StepError> {
    let api = ctx.workflow().deps.hosted_api(&ctx.input().api_id).await?;
    let sealed = hosted_apis::sealed_identity(&ctx.workflow().deps.db, &api.id)
        .await?
        .ok_or_else(|| StepError::terminal_msg(format!("API `{}` has no identity stored", api.name)))?;
    hosted_apis::set_identity(&ctx.workflow().deps.db, &api.id, Some(&sealed), Some(&ctx.output(STORE_NEW_CA)?))
        .await?;
    Ok(())
}

/// The API's sealed identity, opened.
async fn identity(deps: &Deps, api: &HostedApi) -> Result<ApiIdentity, StepError> {
    let sealed = hosted_apis::sealed_identity(&deps.db, &api.id)
        .await?
        .ok_or_else(|| StepError::terminal_msg(format!("API `{}` has no identity stored", api.name)))?;
    let opened = deps.sealer.open(hosted_apis::IDENTITY.place(&api.id), &sealed).map_err(StepError::terminal)?;
    serde_json::from_slice(&opened).map_err(StepError::terminal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_is_documented() {
        let documented = include_str!("../../../docs/workflows/api-deploy.md");
        for key in [STORE_NEW_CA.name(), SERVE_NEW_CA.name(), PIN_NEW_CA.name()] {
            assert!(
                documented.contains(&format!("| `{key}` |")),
                "docs/workflows/api-deploy.md does not describe `{key}`"
            );
        }
        assert!(documented.contains("api.rotate_ca (v1): store_new_ca -> serve_new_ca -> pin_new_ca"));
    }
}
