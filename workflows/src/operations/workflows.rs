//! The operator's view of workflows: list them, inspect one, read its timeline, and act on it
//! (retry, resume, cancel). These are the engine's own calls, with its errors as refusals.

use uuid::Uuid;

use anycloud_engine::{RunFilter, RunStatus};

use crate::refusal::{Code, OperationError, Refusal};
use crate::wire::{WorkflowActed, WorkflowAction, WorkflowDetail, WorkflowEvents, WorkflowList, WorkflowQuery};

use super::Operations;

/// Most runs one list returns.
pub const MAX_LIST: u32 = 1000;

impl Operations {
    /// Runs matching the query, newest first.
    pub async fn list_workflows(&self, query: WorkflowQuery) -> Result<WorkflowList, OperationError> {
        let status = query
            .status
            .as_deref()
            .map(str::parse::<RunStatus>)
            .transpose()
            .map_err(|why| Refusal::new(Code::InvalidStatus, why))?;
        let limit = query.limit.unwrap_or(50);
        if !(1..=MAX_LIST).contains(&limit) {
            let message = format!("limit {limit} is out of range: use 1 to {MAX_LIST}");
            return Err(Refusal::new(Code::InvalidLimit, message).into());
        }
        let filter = RunFilter {
            kind: query.kind,
            status,
            resource_key: query.resource,
            before_seq: query.before,
            limit: Some(limit),
        };
        Ok(WorkflowList { workflows: self.engine.list(&filter).await? })
    }

    /// One run with its steps and its definition's plan.
    pub async fn inspect_workflow(&self, id: &str) -> Result<WorkflowDetail, OperationError> {
        let workflow = self.engine.inspect(workflow_id(id)?).await?;
        Ok(WorkflowDetail { workflow, now: crate::now_ms() })
    }

    /// A page of the run's timeline after entry `after` ([`super::PAGE_LIMIT`] entries, or as
    /// many as asked).
    pub async fn workflow_events(
        &self,
        id: &str,
        after: i64,
        limit: Option<u32>,
    ) -> Result<WorkflowEvents, OperationError> {
        let limit = super::pages::page_limit(limit)?;
        Ok(WorkflowEvents { events: self.engine.events_page(workflow_id(id)?, after, limit).await? })
    }

    /// An operator's action on a run.
    pub async fn act_on_workflow(&self, id: &str, action: WorkflowAction) -> Result<WorkflowActed, OperationError> {
        let id = workflow_id(id)?;
        let status = match action {
            WorkflowAction::Retry => self.engine.retry(id).await?,
            WorkflowAction::Resume => self.engine.resume(id).await?,
            WorkflowAction::Cancel => self.engine.cancel(id).await?,
        };
        Ok(WorkflowActed { id, status })
    }
}

fn workflow_id(id: &str) -> Result<Uuid, Refusal> {
    id.parse().map_err(|_| {
        Refusal::new(
            Code::InvalidWorkflowId,
            format!("`{id}` is not a workflow id (a UUID such as 0b9c…); `anycloud workflow list` shows them"),
        )
    })
}
