//! `anycloud workflow list | inspect | retry | resume | cancel`; the follower every `--wait` uses
//! is `follow.rs`, the first lines of `inspect` are `explain.rs`.
//!
//! `inspect` is written for someone debugging a stuck operation at 3 a.m.: its first lines say
//! what the run is doing, what is wrong and when it will next try, then every step follows.

use std::time::Duration;

use anycloud_engine::{EventRecord, Phase, RunDetail, RunStatus, StepError, StepStatus};
use anycloud_workflows::wire::{
    WorkflowActed, WorkflowAction, WorkflowDetail, WorkflowEvents, WorkflowList, WorkflowQuery,
};

use super::print_json;
use crate::client::Client;
use crate::exit::{CliError, CliResult, OK};
use crate::output::say;
use crate::render;

mod explain;
mod follow;

pub(crate) use explain::{explain, explain_run, latest_wait};
pub use follow::follow;
use follow::timeline;

/// Filters of `workflow list`.
pub struct ListArgs {
    /// Kind.
    pub kind: Option<String>,
    /// Status.
    pub status: Option<String>,
    /// Resource key.
    pub resource: Option<String>,
    /// At most.
    pub limit: u32,
}

/// Lists runs, newest first.
pub async fn list(args: ListArgs, json: bool) -> CliResult {
    let client = Client::active()?;
    let query = WorkflowQuery {
        kind: args.kind,
        status: args.status,
        resource: args.resource,
        limit: Some(args.limit),
        before: None,
    };
    let answer: WorkflowList = client.get_query("/v1/workflows", &query).await?;
    if json {
        print_json(&answer.workflows);
        return Ok(OK);
    }
    let now = anycloud_workflows::now_ms();
    let rows: Vec<Vec<String>> = answer
        .workflows
        .iter()
        .map(|run| {
            vec![
                run.id.to_string(),
                run.kind.clone(),
                run.status.to_string(),
                run.current_step.clone().unwrap_or_default(),
                run.resource_key.clone().unwrap_or_default(),
                render::relative(run.updated_at, now),
            ]
        })
        .collect();
    if rows.is_empty() {
        say!("no workflows match");
    } else {
        render::table(&["ID", "KIND", "STATUS", "STEP", "RESOURCE", "UPDATED"], &rows);
    }
    Ok(OK)
}

/// Shows one run; with `events` its timeline; with `follow` streams transitions until it ends.
pub async fn inspect(id: &str, events: bool, follow: bool, json: bool) -> CliResult {
    check_id(id)?;
    let client = Client::active()?;
    if follow {
        return self::follow(&client, id, Duration::from_secs(24 * 3600), json).await;
    }
    let answer: WorkflowDetail = client.get(&format!("/v1/workflows/{id}")).await?;
    if json {
        let mut out = serde_json::to_value(&answer.workflow).unwrap_or_default();
        if events {
            let timeline = timeline(&client, id, 0).await?;
            out["events"] = serde_json::to_value(&timeline.events).unwrap_or_default();
        }
        print_json(&out);
        return Ok(OK);
    }
    // The header reads the latest `waiting` entry (its count of checks), so the timeline is read
    // for a waiting run too: repeated checks are one entry, so it stays short.
    let timeline: Option<WorkflowEvents> = if events || answer.workflow.run.status == RunStatus::Waiting {
        Some(timeline(&client, id, 0).await?)
    } else {
        None
    };
    let latest_wait = timeline.as_ref().and_then(|timeline| latest_wait(&timeline.events));
    print_detail(&answer.workflow, latest_wait, answer.now);
    if let Some(timeline) = timeline.filter(|_| events) {
        say!("\nevents");
        for event in &timeline.events {
            say!("  {}", event_line(event));
        }
    }
    Ok(OK)
}

/// `retry`, `resume` or `cancel`.
pub async fn act(id: &str, action: WorkflowAction, json: bool) -> CliResult {
    check_id(id)?;
    let client = Client::active()?;
    let path = format!("/v1/workflows/{id}/{}", action.as_str());
    let answer: WorkflowActed = client.post_empty(&path).await?;
    if json {
        print_json(&answer);
    } else {
        let done = match action {
            WorkflowAction::Retry => "will run its current step now",
            WorkflowAction::Resume => "resumed with a fresh retry budget",
            WorkflowAction::Cancel => {
                "cancel requested: the step in hand is stopped, then it and the completed steps are undone"
            }
        };
        say!("workflow {id} {done} (status: {})", answer.status);
    }
    Ok(OK)
}

fn print_detail(detail: &RunDetail, latest_wait: Option<&EventRecord>, now: i64) {
    let run = &detail.run;
    let status = run.status;
    let attempt = run.attempt;
    let ended = status.is_final();
    let header = explain(detail, latest_wait, now);
    say!("status    {}", header.status);
    say!("deadline  {}", header.deadline);
    say!("do now    {}", header.act);
    say!(
        "workflow  {}  {} v{}{}",
        run.id,
        run.kind,
        run.version,
        run.resource_key.as_deref().map(|key| format!("  resource {key}")).unwrap_or_default()
    );
    if let Some(reason) = run.status_reason.as_ref().filter(|reason| !header.status.contains(reason.as_str())) {
        say!("why       {reason}");
    }
    if let Some(error) = &run.error {
        for (i, cause) in error.chain.iter().enumerate() {
            let label = if i == 0 { "error" } else { "  caused by" };
            say!("{label:<9} {cause}");
        }
    }
    match &run.lease {
        Some(lease) => say!(
            "lease     held by {} until {} (generation {})",
            lease.owner,
            render::time(lease.expires_at),
            run.lease_generation
        ),
        None if !ended => say!("lease     none: no engine is running a step of it now"),
        None => {}
    }
    say!(
        "created   {}   updated {}{}",
        render::time(run.created_at),
        render::time(run.updated_at),
        run.finished_at.map(|t| format!("   ended {}", render::time(t))).unwrap_or_default()
    );
    if let Some(output) = run.output.as_ref().filter(|o| !o.is_null()) {
        say!("output    {}", summary(output));
    }
    say!("\nsteps");
    let mut rows = Vec::new();
    for record in &detail.steps {
        let name = match record.phase {
            Phase::Undo => format!("undo {}", record.name),
            Phase::Forward => record.name.clone(),
        };
        let error = record.error.as_ref().map(last_error);
        let output = record.output.as_ref().filter(|o| !o.is_null()).map(summary);
        let shown = if record.status == StepStatus::Failed { error.or(output) } else { output.or(error) };
        rows.push(vec![
            name,
            record.status.to_string(),
            record.attempts.to_string(),
            render::duration(record.finished_at - record.started_at),
            shown.unwrap_or_default(),
        ]);
    }
    // The step in hand and the ones not reached yet, from the definition's plan.
    let done = detail.steps.iter().filter(|s| s.phase == Phase::Forward).count();
    if let Some(plan) = &detail.plan
        && run.phase == Phase::Forward
        && !ended
    {
        for (index, name) in plan.iter().enumerate().skip(done) {
            let row = if index == done {
                let error = run.error.as_ref().map(last_error).unwrap_or_default();
                vec![name.clone(), status.to_string(), attempt.to_string(), String::new(), error]
            } else {
                vec![name.clone(), "not started".into(), "0".into(), String::new(), String::new()]
            };
            rows.push(row);
        }
    }
    render::table(&["STEP", "STATUS", "ATTEMPTS", "TOOK", "OUTPUT / LAST ERROR"], &rows);
}

fn last_error(error: &StepError) -> String {
    format!("last error: {}", error.chain.join(": "))
}

pub(crate) fn event_line(event: &EventRecord) -> String {
    let step = event.step.as_deref().map(|s| format!(" [{s}]")).unwrap_or_default();
    // The checks of a waiting poll are one entry: how many, since when, and the latest condition.
    let repeated = match event.first_at {
        Some(first) if event.count > 1 => format!(" ×{} since {}, latest:", event.count, render::time(first)),
        _ => String::new(),
    };
    format!("{}  {:<15}{step}{repeated} {}", render::time(event.at), event.kind, event.message)
}

fn summary(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 { format!("{}…", text.chars().take(79).collect::<String>()) } else { text }
}

fn check_id(id: &str) -> Result<(), CliError> {
    if id.parse::<uuid::Uuid>().is_err() {
        return Err(CliError::bad_input(format!(
            "`{id}` is not a workflow id (a UUID); `anycloud workflow list` shows them"
        )));
    }
    Ok(())
}
