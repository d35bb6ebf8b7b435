//! Rotating a deployed API's TLS CA: its `api.rotate_ca` run, recorded on the API, in one
//! transaction.

use anycloud_engine::{RunStatus, Workflow as _};

use crate::db::hosted_apis::{self, HostedApi, Phase};
use crate::hosting::identity::ApiIdentity;
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::HostedApiStarted;
use crate::workflows::api_rotate_ca::{RotateApiCa, RotateInput};

use super::Operations;
use super::show_apis::api_not_found;

impl Operations {
    /// Starts `api.rotate_ca` on a ready API. Asked again while a rotation runs, it answers with
    /// that rotation; any other run in hand (a removal) is waited for first.
    pub async fn rotate_api_ca(&self, name: &str) -> Result<HostedApiStarted, OperationError> {
        // Read before the transaction, which holds SQLite's one writer connection: the CA the
        // rotation starts from (a rotation that ends meanwhile makes this one re-pin only).
        let read = hosted_apis::get_by_name(&self.deps.db, name).await?.ok_or_else(|| api_not_found(name))?;
        let sealed = hosted_apis::sealed_identity(&self.deps.db, &read.id)
            .await?
            .ok_or_else(|| Refusal::new(Code::HostedApiNotReady, format!("API `{name}` has no identity stored")))?;
        let opened = self
            .deps
            .sealer
            .open(hosted_apis::IDENTITY.place(&read.id), &sealed)
            .map_err(|err| OperationError::Failed(err.into()))?;
        let identity: ApiIdentity =
            serde_json::from_slice(&opened).map_err(|err| OperationError::Failed(err.into()))?;
        let mut tx = self.deps.db.begin().await?;
        let api = hosted_apis::lock_live_in(&mut tx, name).await?.ok_or_else(|| api_not_found(name))?;
        if api.phase != Phase::Ready || api.id != read.id {
            return Err(Refusal::new(
                Code::HostedApiNotReady,
                format!(
                    "API `{name}` is {}: only a ready API's CA is rotated; `anycloud api list` shows where it stands",
                    api.phase
                ),
            )
            .into());
        }
        if let Some(id) = api.workflow_id.as_deref().and_then(|id| id.parse().ok()) {
            let run = self.engine.run(id).await?;
            if run.kind == RotateApiCa::KIND
                && !matches!(run.status, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled)
            {
                drop(tx);
                return Ok(HostedApiStarted { api: api.into(), workflow_id: id });
            }
        }
        let input = RotateInput { api_id: api.id.clone(), name: name.to_owned(), from_ca_pem: identity.ca_cert_pem };
        let run = self.engine.submit_in::<RotateApiCa>(&mut tx, &input, Some(&HostedApi::resource_key(name))).await?;
        hosted_apis::set_workflow_in(&mut tx, &api.id, &run.to_string()).await?;
        tx.commit().await?;
        self.engine.wake_up();
        let api = hosted_apis::get(&self.deps.db, &api.id).await?.ok_or_else(|| api_not_found(name))?;
        Ok(HostedApiStarted { api: api.into(), workflow_id: run })
    }
}
