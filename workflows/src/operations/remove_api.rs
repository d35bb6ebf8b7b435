//! Removing a deployed API: its `api.remove` run and the record's phase, in one transaction.

use anycloud_engine::RunStatus;

use crate::db::hosted_apis::{self, HostedApi, Phase};
use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{HostedApiStarted, RemoveHostedApi};
use crate::workflows::api_remove::{RemoveApi, RemoveInput};

use super::Operations;
use super::show_apis::api_not_found;

impl Operations {
    /// Starts `api.remove`. Asked again while a removal runs, it answers with that removal. A
    /// deploy still running is refused: cancel it first (its unwind removes what it made).
    pub async fn remove_api(&self, name: &str, request: RemoveHostedApi) -> Result<HostedApiStarted, OperationError> {
        let mut tx = self.deps.db.begin().await?;
        let api = hosted_apis::lock_live_in(&mut tx, name).await?.ok_or_else(|| api_not_found(name))?;
        let running = match api.workflow_id.as_deref().and_then(|id| id.parse().ok()) {
            Some(id) => {
                let run = self.engine.run(id).await?;
                Some((id, run.status, run.kind))
            }
            None => None,
        };
        if let Some((run, status, kind)) = running
            && !matches!(status, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled)
        {
            if api.phase == Phase::Removing {
                drop(tx);
                return Ok(HostedApiStarted { api: api.into(), workflow_id: run });
            }
            if kind == <crate::workflows::api_rotate_ca::RotateApiCa as anycloud_engine::Workflow>::KIND {
                return Err(Refusal::new(
                    Code::HostedApiNotReady,
                    format!(
                        "API `{name}`'s CA is being rotated (run {run}); wait for it (`anycloud workflow inspect                          {run}`), or cancel it with `anycloud workflow cancel {run}`, then remove it"
                    ),
                )
                .into());
            }
            return Err(Refusal::new(
                Code::HostedApiNotReady,
                format!(
                    "API `{name}` is still deploying (run {run}); cancel it with `anycloud workflow cancel {run}` (its \
                     unwind removes what it made), or wait for it, then remove it"
                ),
            )
            .into());
        }
        let input = RemoveInput {
            api_id: api.id.clone(),
            name: name.to_owned(),
            bucket: api.bucket.clone(),
            delete_bucket: request.delete_bucket,
        };
        let run = self.engine.submit_in::<RemoveApi>(&mut tx, &input, Some(&HostedApi::resource_key(name))).await?;
        hosted_apis::request_removal_in(&mut tx, &api.id, &run.to_string()).await?;
        tx.commit().await?;
        self.engine.wake_up();
        let api = hosted_apis::get(&self.deps.db, &api.id).await?.ok_or_else(|| api_not_found(name))?;
        Ok(HostedApiStarted { api: api.into(), workflow_id: run })
    }
}
