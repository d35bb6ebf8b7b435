//! The console's pages, rendered on the server from the same operations the HTTP API answers
//! with: the overview, the workflows (filtered, newest first, paged), and one workflow (what it
//! is doing and what a person can do, as `workflow inspect` opens; its steps on a time axis;
//! its timeline).

use std::fmt::Write as _;

use anycloud_engine::{EventRecord, RunRecord, RunStatus};
use anycloud_workflows::operations::Operations;
use anycloud_workflows::refusal::OperationError;
use anycloud_workflows::wire::{DeploymentQuery, NamesQuery, WorkflowQuery};
use serde::Serialize;

use super::html::{self, escape, link, relative, state, table};
use super::time_axis;
use crate::commands::workflow::{explain, latest_wait};

/// A value's serde name (`needs-attention`, `service`).
fn words<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value).ok().and_then(|value| value.as_str().map(str::to_owned)).unwrap_or_default()
}

fn run_row(run: &RunRecord, now: i64) -> Vec<String> {
    vec![
        link(&format!("/ui/workflows/{}", run.id), &run.id.to_string()[..8]),
        escape(&run.kind),
        state(run.status.as_str()),
        escape(run.current_step.as_deref().unwrap_or("")),
        escape(run.resource_key.as_deref().unwrap_or("")),
        escape(&relative(run.created_at, now)),
    ]
}

const RUN_HEADER: [&str; 6] = ["Run", "Kind", "State", "Step", "Resource", "Submitted"];

/// The overview: what needs a person first, then clusters, deployments and the latest runs.
pub async fn overview(ops: &Operations) -> Result<String, OperationError> {
    let now = anycloud_workflows::now_ms();
    let parked = ops
        .list_workflows(WorkflowQuery { status: Some("needs-attention".into()), limit: Some(50), ..Default::default() })
        .await?;
    let parked: Vec<Vec<String>> = parked.workflows.iter().map(|run| run_row(run, now)).collect();
    let clusters = ops.list_clusters(&NamesQuery { limit: Some(200), after: None }).await?;
    let clusters: Vec<Vec<String>> = clusters
        .clusters
        .iter()
        .map(|summary| {
            let cluster = &summary.cluster;
            vec![
                link(&format!("/ui/clusters/{}", cluster.name), &cluster.name),
                state(cluster.phase.as_str()),
                escape(&format!("{} of {} VMs running", summary.running_vms, cluster.max_vms)),
                escape(&format!("{} {} {}", cluster.provider, cluster.region, cluster.vm_type)),
            ]
        })
        .collect();
    let deployments = ops.list_deployments(&DeploymentQuery { limit: Some(100), ..Default::default() }).await?;
    let deployments: Vec<Vec<String>> = deployments
        .deployments
        .iter()
        .map(|summary| {
            let deployment = &summary.deployment;
            vec![
                link(&format!("/ui/deployments/{}", deployment.id), &deployment.name),
                escape(&words(&deployment.kind)),
                state(&summary.state),
                escape(&summary.cluster),
            ]
        })
        .collect();
    let credentials = ops.list_credentials(&NamesQuery { limit: Some(200), after: None }).await?;
    let credentials: Vec<Vec<String>> = credentials
        .credentials
        .iter()
        .map(|credential| {
            vec![escape(&credential.name), escape(credential.provider.as_str()), state(&words(&credential.status))]
        })
        .collect();
    let latest = ops.list_workflows(WorkflowQuery { limit: Some(10), ..Default::default() }).await?;
    let latest: Vec<Vec<String>> = latest.workflows.iter().map(|run| run_row(run, now)).collect();
    Ok([
        table("Needs a person", &RUN_HEADER, &parked, "No run waits for a person."),
        table("Clusters", &["Name", "Phase", "Capacity", "Where"], &clusters, "No cluster yet."),
        table("Deployments", &["Name", "Kind", "State", "Cluster"], &deployments, "No job or service yet."),
        table("Latest workflows", &RUN_HEADER, &latest, "No workflow has run yet."),
        table("Credentials", &["Name", "Provider", "Verdict"], &credentials, "No credential yet."),
    ]
    .concat())
}

/// The workflows, newest first, filtered by kind, status and resource, 50 a page.
pub async fn workflows(ops: &Operations, query: WorkflowQuery) -> Result<String, OperationError> {
    let now = anycloud_workflows::now_ms();
    let limit = 50;
    let filters = query.clone();
    let page = ops.list_workflows(WorkflowQuery { limit: Some(limit), ..query }).await?;
    let rows: Vec<Vec<String>> = page.workflows.iter().map(|run| run_row(run, now)).collect();
    let mut html = String::from(r#"<form class="filters" method="get" action="/ui/workflows">"#);
    for (name, label, value) in
        [("kind", "Kind", filters.kind.as_deref()), ("resource", "Resource", filters.resource.as_deref())]
    {
        let _ = write!(
            html,
            r#"<label for="filter-{name}">{label}<input id="filter-{name}" name="{name}" value="{}"></label>"#,
            escape(value.unwrap_or(""))
        );
    }
    html.push_str(
        r#"<label for="filter-status">Status<select id="filter-status" name="status"><option value="">any</option>"#,
    );
    for status in RunStatus::ALL {
        let selected = if filters.status.as_deref() == Some(status.as_str()) { " selected" } else { "" };
        let _ = write!(html, r#"<option{selected}>{}</option>"#, status.as_str());
    }
    html.push_str(r#"</select></label><button type="submit">Filter</button></form>"#);
    html.push_str(&table("Runs, newest first", &RUN_HEADER, &rows, "No run matches."));
    if let Some(last) = page.workflows.last().filter(|_| page.workflows.len() == limit as usize) {
        let older = WorkflowQuery { before: Some(last.seq), limit: None, ..filters };
        let older = format!("/ui/workflows?{}", serde_urlencoded::to_string(&older).unwrap_or_default());
        let _ = write!(html, "<p>{}</p>", link(&older, "Older runs"));
    }
    Ok(html)
}

/// One workflow: its first lines, the actions a person can take, its steps on a time axis, its
/// timeline.
pub async fn workflow(ops: &Operations, id: &str, csrf: &str) -> Result<(String, String), OperationError> {
    let detail = ops.inspect_workflow(id).await?;
    let events = ops.workflow_events(id, 0, Some(1000)).await?.events;
    let run = &detail.workflow.run;
    let header = explain(&detail.workflow, latest_wait(&events), detail.now);
    let mut html = format!(
        r#"<div class="lines" role="status"><p>{} {}</p><p>{}</p><p>{}</p><p>{}</p></div>"#,
        state(run.status.as_str()),
        escape(
            header.status.strip_prefix(run.status.as_str()).unwrap_or(&header.status).trim_start_matches([':', ' '])
        ),
        escape(&header.deadline),
        escape(&header.act),
        escape(&format!("{} · {}", run.kind, run.resource_key.as_deref().unwrap_or("no resource"))),
    );
    html.push_str(&actions(run, csrf));
    html.push_str(&time_axis::section(&detail.workflow.steps, &events, run, detail.now));
    html.push_str(&timeline(&events, detail.now));
    Ok((format!("Workflow {}", run.kind), html))
}

/// The buttons of what a person can do with the run now, each asking for confirmation.
fn actions(run: &RunRecord, csrf: &str) -> String {
    let mut offered = Vec::new();
    if matches!(run.status, RunStatus::NeedsAttention | RunStatus::Retrying | RunStatus::Waiting) {
        offered.push(("retry", "Retry now", "Run the step in hand now?", ""));
    }
    if run.status == RunStatus::NeedsAttention {
        offered.push(("resume", "Resume", "Resume with a fresh retry budget?", ""));
    }
    if !run.status.is_final() && run.status != RunStatus::Unwinding && !run.cancel_requested {
        offered.push(("cancel", "Cancel", "Cancel this run? Its completed steps are undone.", " danger"));
    }
    let mut html = String::from(r#"<div class="actions">"#);
    for (action, label, question, class) in offered {
        let _ = write!(
            html,
            r#"<form method="post" action="/ui/workflows/{id}/{action}" data-confirm="{question}"><input type="hidden" name="csrf" value="{csrf}"><button type="submit" class="{class}">{label}</button></form>"#,
            id = run.id,
            question = escape(question),
            csrf = escape(csrf),
            class = class.trim(),
        );
    }
    html.push_str("</div>");
    html
}

/// The run's timeline, newest last.
fn timeline(events: &[EventRecord], now: i64) -> String {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|event| {
            let count = if event.count > 1 { format!(" (×{})", event.count) } else { String::new() };
            vec![
                escape(&relative(event.at, now)),
                escape(&format!("{}{count}", words(&event.kind))),
                escape(event.step.as_deref().unwrap_or("")),
                escape(&event.message),
            ]
        })
        .collect();
    table("Timeline", &["When", "What", "Step", "Details"], &rows, "Nothing has happened yet.")
}

/// A page that says the request was refused, in words.
pub fn refused(title: &str, message: &str) -> String {
    html::page(title, None, false, &format!("<p>{}</p>", escape(message)))
}
