//! The follower every `--wait` uses, and `workflow inspect --follow`: a run's events as they
//! come, until it ends or stops for a person.

use std::time::{Duration, Instant};

use anycloud_engine::{EventKind, EventRecord, Phase, RunDetail, RunStatus};
use anycloud_workflows::operations::PAGE_LIMIT;
use anycloud_workflows::wire::{EventsQuery, WorkflowDetail, WorkflowEvents};

use super::event_line;
use crate::client::Client;
use crate::commands::outage::Outage;
use crate::exit::{CliError, CliResult, ENDED_OTHERWISE, NEEDS_ATTENTION, OK, TIMEOUT};
use crate::output::say;
use crate::progress::{Progress, Stand, Tone};
use crate::render;

/// Streams a run's events until it ends or stops for a person; survives the API restarting
/// meanwhile. Exit code: 0 succeeded, 1 failed or cancelled, 2 could not observe, 4 timed out;
/// a run that needs attention is an error (exit 5) that names the commands to run next.
pub async fn follow(client: &Client, id: &str, timeout: Duration, json: bool) -> CliResult {
    let deadline = Instant::now() + timeout;
    let mut after = 0_i64;
    let mut outage = Outage::default();
    let gap = crate::seams::get().follow_gap;
    let progress = Progress::start(format!("workflow {id}"), json);
    let mut first = true;
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
            let events = timeline(client, id, after).await?;
            Ok((events, run))
        }
        .await;
        match polled {
            Ok((events, detail)) => {
                progress.above(|| outage.answered(json));
                for event in &events.events {
                    after = after.max(event.seq);
                    if json {
                        say!("{}", serde_json::to_string(event).unwrap_or_default());
                    } else {
                        progress.line(event_tone(event.kind), &format!("  {}", event_line(event)));
                    }
                }
                if std::mem::take(&mut first) {
                    progress.started_ago(detail.now - detail.workflow.run.created_at);
                }
                progress.update(stand(&detail.workflow));
                let run = &detail.workflow.run;
                let reason = run.status_reason.clone().unwrap_or_default();
                match run.status {
                    RunStatus::Succeeded => return Ok(OK),
                    RunStatus::Failed | RunStatus::Cancelled => {
                        match json {
                            true => drop(progress),
                            false => progress.finish(Tone::Bad, &format!("workflow {id} {}: {reason}", run.status)),
                        }
                        return Ok(ENDED_OTHERWISE);
                    }
                    RunStatus::NeedsAttention => return Err(needs_attention(id, run.phase, &reason)),
                    _ => {}
                }
            }
            // The API may be restarting: keep trying for a while, saying so once.
            Err(err) => progress.above(|| outage.failed(err, json))?,
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

/// How a timeline entry reads at a glance.
fn event_tone(kind: EventKind) -> Tone {
    match kind {
        EventKind::StepSucceeded | EventKind::UndoSucceeded | EventKind::Succeeded => Tone::Good,
        EventKind::StepFailed
        | EventKind::UndoFailed
        | EventKind::Failed
        | EventKind::Cancelled
        | EventKind::OutputFailed
        | EventKind::Parked
        | EventKind::LateCommitRefused => Tone::Bad,
        EventKind::Waiting | EventKind::Unwinding | EventKind::CancelRequested | EventKind::RetryRequested => {
            Tone::Waiting
        }
        _ => Tone::Plain,
    }
}

/// Where the run stands, for the status line: its step of the plan, attempt and state.
fn stand(detail: &RunDetail) -> Stand {
    let run = &detail.run;
    let subject = match &run.resource_key {
        Some(key) => format!("{} {key}", run.kind),
        None => run.kind.clone(),
    };
    let plan = detail.plan.as_deref().unwrap_or_default();
    let index = run.step_index as usize;
    let name = run.current_step.clone().or_else(|| plan.get(index).cloned());
    let step = match (run.phase, name) {
        (Phase::Forward, Some(name)) if !plan.is_empty() && !run.status.is_final() => {
            Some(((index + 1).min(plan.len()) as u32, plan.len() as u32, name))
        }
        _ => None,
    };
    let reason = run.status_reason.as_deref().map(|reason| format!(": {reason}")).unwrap_or_default();
    let (state, tone) = match run.status {
        RunStatus::Waiting | RunStatus::Retrying => (format!("{}{reason}", run.status), Tone::Waiting),
        RunStatus::Unwinding => {
            let undo = run.current_step.as_deref().map(|step| format!(": undo {step}")).unwrap_or_default();
            (format!("unwinding{undo}, {} to undo", run.step_index), Tone::Waiting)
        }
        RunStatus::Pending => (format!("pending{reason}"), Tone::Plain),
        RunStatus::Succeeded => ("succeeded".into(), Tone::Good),
        RunStatus::Failed | RunStatus::Cancelled | RunStatus::NeedsAttention => (run.status.to_string(), Tone::Bad),
        RunStatus::Running => ("running".into(), Tone::Plain),
    };
    Stand { subject, step, attempt: run.attempt + 1, state, tone }
}

/// The run's timeline after entry `after`, read a page at a time (the API answers at most
/// [`PAGE_LIMIT`] entries a page) until a page comes short.
pub(super) async fn timeline(client: &Client, id: &str, after: i64) -> Result<WorkflowEvents, CliError> {
    let mut events: Vec<EventRecord> = Vec::new();
    loop {
        let after = events.last().map_or(after, |last| last.seq);
        let query = EventsQuery { after: Some(after), limit: Some(PAGE_LIMIT) };
        let page: WorkflowEvents = client.get_query(&format!("/v1/workflows/{id}/events"), &query).await?;
        let full = page.events.len() >= PAGE_LIMIT as usize;
        events.extend(page.events);
        if !full {
            return Ok(WorkflowEvents { events });
        }
    }
}

/// A parked run: nothing moves until a person acts; say what to run, with the run's id.
fn needs_attention(id: &str, phase: Phase, reason: &str) -> CliError {
    let next = next_steps(id, phase);
    CliError::new(NEEDS_ATTENTION, "NEEDS_ATTENTION", format!("workflow {id} needs attention: {reason}\n{next}"))
}

/// What a person does with a parked run.
pub(super) fn next_steps(id: &str, phase: Phase) -> String {
    match phase {
        Phase::Forward => format!(
            "fix the cause, then `anycloud workflow retry {id}` (one more attempt) or `anycloud workflow resume {id}` \
             (a fresh retry budget); `anycloud workflow cancel {id}` gives up and undoes what was done"
        ),
        Phase::Undo => format!(
            "fix what blocks the undo, then `anycloud workflow retry {id}` or `anycloud workflow resume {id}` to \
             finish unwinding"
        ),
    }
}
