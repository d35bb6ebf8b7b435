//! Reading deployed APIs: the list, one by name, and what a CLI needs to use one.

use crate::db::hosted_apis::{self, Phase};
use crate::hosting::identity::ApiIdentity;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{HostedApiAccess, HostedApiList, HostedApiView, NamesQuery};

use super::Operations;

impl Operations {
    /// The live hosted APIs this API deployed.
    pub async fn list_apis(&self, query: &NamesQuery) -> Result<HostedApiList, OperationError> {
        let limit = super::pages::page_limit(query.limit)?;
        let apis = hosted_apis::list(&self.deps.db, query.after.as_deref(), limit).await?;
        Ok(HostedApiList { apis: apis.into_iter().map(Into::into).collect() })
    }

    /// One hosted API by name (the live one, else the last removed).
    pub async fn show_api(&self, name: &str) -> Result<HostedApiView, OperationError> {
        hosted_apis::get_by_name(&self.deps.db, name).await?.map(Into::into).ok_or_else(|| api_not_found(name))
    }

    /// The URL, token and pinned CA of a ready hosted API: what `api serve --use` stores.
    pub async fn api_access(&self, name: &str) -> Result<HostedApiAccess, OperationError> {
        let api = self.show_api(name).await?;
        let url = match (&api.url, api.phase) {
            (Some(url), Phase::Ready) => url.clone(),
            _ => {
                return Err(Refusal::new(
                    Code::HostedApiNotReady,
                    format!(
                        "API `{name}` is {}{}; its address and token are given once it is ready",
                        api.phase,
                        api.reason.as_deref().map(|why| format!(" ({why})")).unwrap_or_default()
                    ),
                )
                .into());
            }
        };
        let sealed = hosted_apis::sealed_identity(&self.deps.db, &api.id)
            .await?
            .ok_or_else(|| Refusal::new(Code::HostedApiNotReady, format!("API `{name}` has no identity stored")))?;
        let opened = self
            .deps
            .sealer
            .open(hosted_apis::IDENTITY.place(&api.id), &sealed)
            .map_err(|err| OperationError::Failed(err.into()))?;
        let identity: ApiIdentity =
            serde_json::from_slice(&opened).map_err(|err| OperationError::Failed(err.into()))?;
        Ok(HostedApiAccess {
            name: api.name,
            url,
            token: identity.token,
            // What the record pins: during a CA rotation, the old CA and the new.
            ca_pem: api.ca_pem.unwrap_or(identity.ca_cert_pem),
            provider: api.provider.to_string(),
        })
    }
}

/// No hosted API has that name.
pub(super) fn api_not_found(name: &str) -> OperationError {
    Refusal::new(
        Code::HostedApiNotFound,
        format!("no hosted API named `{name}` was deployed by this API; `anycloud api list` shows the known ones"),
    )
    .into()
}
