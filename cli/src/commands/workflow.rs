//! `anycloud workflow list | inspect | retry | resume | cancel`, and the follower every `--wait`
//! uses.
//!
//! `inspect` is written for someone debugging a stuck operation at 3 a.m.: its first lines say
//! what the run is doing, what is wrong and when it will next try, then every step follows.

use std::time::{Duration, Instant};

use anycloud_engine::{EventRecord, Phase, RunDetail, RunStatus, StepError, StepStatus};
use anycloud_workflows::api::{
    EventsQuery, WorkflowActed, WorkflowAction, WorkflowDetail, WorkflowEvents, WorkflowList, WorkflowQuery,
};

use super::print_json;
use crate::client::Client;
use crate::exit::{CliError, CliResult, ENDED_OTHERWISE, NEEDS_ATTENTION, OK, TIMEOUT};
use crate::output::say;
use crate::render;

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
    let timeline: Option<WorkflowEvents> =
        if events { Some(client.get(&format!("/v1/workflows/{id}/events")).await?) } else { None };
    if json {
        let mut out = serde_json::to_value(&answer.workflow).unwrap_or_default();
        if let Some(timeline) = timeline {
            out["events"] = serde_json::to_value(&timeline.events).unwrap_or_default();
        }
        print_json(&out);
        return Ok(OK);
    }
    print_detail(&answer.workflow, answer.now);
    if let Some(timeline) = timeline {
        say!("\nevents");
        for event in &timeline.events {
            say!("  {}", event_line(event));
        }
    }
    Ok(OK)
}

/// Streams a run's events until it ends or stops for a person; survives the API restarting
/// meanwhile. Exit code: 0 succeeded, 1 failed or cancelled, 2 could not observe, 4 timed out;
/// a run that needs attention is an error (exit 5) that names the commands to run next.
pub async fn follow(client: &Client, id: &str, timeout: Duration, json: bool) -> CliResult {
    let deadline = Instant::now() + timeout;
    let mut after = 0_i64;
    let mut unreachable_since: Option<Instant> = None;
    let gap = crate::seams::get().follow_gap;
    loop {
        // The run before its events: a run that had ended (or parked) when it was read has all
        // the events of that committed (its state and its last events are one transaction), so
        // the events read next include them. Read the other way round, a run ending between the
        // two reads would stop the follower short of its last step.
        let polled: Result<(WorkflowEvents, WorkflowDetail), CliError> = async {
            let run: WorkflowDetail = client.get(&format!("/v1/workflows/{id}")).await?;
            if let Some(gap) = gap {
                tokio::time::sleep(gap).await;
            }
            let query = EventsQuery { after: Some(after) };
            let events: WorkflowEvents = client.get_query(&format!("/v1/workflows/{id}/events"), &query).await?;
            Ok((events, run))
        }
        .await;
        match polled {
            Ok((events, detail)) => {
                if unreachable_since.take().is_some() && !json {
                    say!("  (API reachable again)");
                }
                for event in &events.events {
                    after = after.max(event.seq);
                    if json {
                        say!("{}", serde_json::to_string(event).unwrap_or_default());
                    } else {
                        say!("  {}", event_line(event));
                    }
                }
                let run = &detail.workflow.run;
                let reason = run.status_reason.clone().unwrap_or_default();
                match run.status {
                    RunStatus::Succeeded => return Ok(OK),
                    RunStatus::Failed | RunStatus::Cancelled => {
                        if !json {
                            say!("workflow {id} {}: {reason}", run.status);
                        }
                        return Ok(ENDED_OTHERWISE);
                    }
                    RunStatus::NeedsAttention => return Err(needs_attention(id, run.phase, &reason)),
                    _ => {}
                }
            }
            // The API may be restarting: keep trying for a while, saying so once.
            Err(err) if err.error_code == "API_UNREACHABLE" => {
                let since = *unreachable_since.get_or_insert_with(|| {
                    if !json {
                        say!("  (API unreachable; waiting for it to come back)");
                    }
                    Instant::now()
                });
                if since.elapsed() > Duration::from_secs(120) {
                    return Err(err);
                }
            }
            Err(err) => return Err(err),
        }
        if Instant::now() >= deadline {
            return Err(CliError::new(
                TIMEOUT,
                "TIMEOUT",
                format!("workflow {id} did not end within {}", render::duration(timeout.as_millis() as i64)),
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A parked run: nothing moves until a person acts; say what to run, with the run's id.
fn needs_attention(id: &str, phase: Phase, reason: &str) -> CliError {
    let next = match phase {
        Phase::Forward => format!(
            "fix the cause, then `anycloud workflow retry {id}` (one more attempt) or `anycloud workflow resume {id}` \
             (a fresh retry budget); `anycloud workflow cancel {id}` gives up and undoes what was done"
        ),
        Phase::Undo => format!(
            "fix what blocks the undo, then `anycloud workflow retry {id}` or `anycloud workflow resume {id}` to \
             finish unwinding"
        ),
    };
    CliError::new(NEEDS_ATTENTION, "NEEDS_ATTENTION", format!("workflow {id} needs attention: {reason}\n{next}"))
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

fn print_detail(detail: &RunDetail, now: i64) {
    let run = &detail.run;
    let status = run.status;
    let step = run.current_step.clone().unwrap_or_default();
    let attempt = run.attempt;
    let ended = status.is_final();
    say!(
        "workflow {}  {} v{}{}",
        run.id,
        run.kind,
        run.version,
        run.resource_key.as_deref().map(|key| format!("  resource {key}")).unwrap_or_default()
    );
    let headline = match status {
        RunStatus::Retrying => format!("retrying: step `{step}` failed {attempt} time(s)"),
        RunStatus::Waiting => format!("waiting: step `{step}`"),
        RunStatus::NeedsAttention => format!("NEEDS ATTENTION at step `{step}`"),
        RunStatus::Running => format!("running: step `{step}` (attempt {})", attempt + 1),
        RunStatus::Unwinding => format!("unwinding: undoing `{step}`"),
        other => other.to_string(),
    };
    say!("status    {headline}");
    if let Some(reason) = &run.status_reason {
        say!("why       {reason}");
    }
    if let Some(error) = &run.error {
        for (i, cause) in error.chain.iter().enumerate() {
            let label = if i == 0 { "error" } else { "  caused by" };
            say!("{label:<9} {cause}");
        }
    }
    if let Some(next) = run.next_at.filter(|_| !ended) {
        let what = if status == RunStatus::Waiting { "next check" } else { "next try" };
        say!("{what:<9} {} ({})", render::relative(next, now), render::time(next));
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

fn event_line(event: &EventRecord) -> String {
    let step = event.step.as_deref().map(|s| format!(" [{s}]")).unwrap_or_default();
    format!("{}  {:<15}{step} {}", render::time(event.at), event.kind, event.message)
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
