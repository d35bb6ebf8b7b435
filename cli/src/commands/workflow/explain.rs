//! What `inspect` says first about a run, and what `cluster status` and `credentials` show of a
//! run in hand: where it stands, its deadline and what then, and what a person can do now.

use anycloud_engine::{
    EventKind, EventRecord, OnExhausted, Phase, RunDetail, RunRecord, RunStatus, StepLimits, StepShape,
};
use anycloud_workflows::wire::{WorkflowDetail, WorkflowEvents};

use super::follow::{next_steps, timeline};
use crate::client::Client;
use crate::render;

/// The three lines that open `inspect`, enough on their own for a stuck run: where it stands and
/// for how long, its deadline and what happens then, and what a person can do now (each command
/// with the run's id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    /// Where the run stands, for how long, and its latest condition or error.
    pub(crate) status: String,
    /// When it next acts or gives up, and what happens then (or that it has passed).
    pub(crate) deadline: String,
    /// What a person can do now.
    pub(crate) act: String,
}

/// Reads run `id` and explains it (for the commands that show a resource whose run is in hand);
/// `None` if it cannot be read, so that the resource is still shown.
pub(crate) async fn explain_run(client: &Client, id: &str) -> Option<Header> {
    let detail: WorkflowDetail = client.get(&format!("/v1/workflows/{id}")).await.ok()?;
    if detail.workflow.run.status.is_final() {
        return None;
    }
    let timeline: Option<WorkflowEvents> =
        if detail.workflow.run.status == RunStatus::Waiting { timeline(client, id, 0).await.ok() } else { None };
    let latest = timeline.as_ref().and_then(|timeline| latest_wait(&timeline.events));
    Some(explain(&detail.workflow, latest, detail.now))
}

/// The latest `waiting` entry of a timeline: its count of checks and latest condition.
pub(crate) fn latest_wait(events: &[EventRecord]) -> Option<&EventRecord> {
    events.iter().rev().find(|event| event.kind == EventKind::Waiting)
}

/// A check that should have run this long ago and has not: no engine is taking due runs.
const OVERDUE_MS: i64 = 5_000;

/// What every part of an explanation reads: the run, its step in hand and that step's limits,
/// the commands a person may run, and the time.
struct Seen<'a> {
    run: &'a RunRecord,
    step: &'a str,
    limits: Option<&'a StepLimits>,
    /// What a cancel does, as a command.
    cancel: String,
    /// How to follow the run, as a command.
    follow: String,
    /// What the run does when its step gives up.
    then: &'static str,
    /// The run's last error, causes joined.
    error: Option<String>,
    now: i64,
}

impl Seen<'_> {
    /// How long ago `t` was.
    fn ago(&self, t: i64) -> String {
        render::duration(self.now - t)
    }
}

/// Explains `detail` at `now`. `latest_wait` is the run's latest `waiting` entry, if read.
pub(crate) fn explain(detail: &RunDetail, latest_wait: Option<&EventRecord>, now: i64) -> Header {
    let run = &detail.run;
    let id = run.id;
    let limits = detail.limits.as_ref().filter(|limits| Some(limits.step.as_str()) == run.current_step.as_deref());
    let seen = Seen {
        run,
        step: run.current_step.as_deref().unwrap_or("?"),
        limits,
        cancel: format!("`anycloud workflow cancel {id}` gives up and undoes what was done"),
        follow: format!("`anycloud workflow inspect {id} --follow` follows it"),
        then: limits.map_or("turns back or parks, as the step's policy says", |limits| then(limits.on_exhausted)),
        error: run.error.as_ref().map(|error| error.chain.join(": ")),
        now,
    };
    let header = match run.status {
        RunStatus::Waiting if limits.is_some_and(|limits| limits.shape == StepShape::Sleep) => sleeping(&seen),
        RunStatus::Waiting => waiting(&seen, latest_wait),
        RunStatus::Running if run.lease.is_none() => due(&seen),
        RunStatus::Running => running(&seen),
        RunStatus::Retrying => retrying(&seen),
        RunStatus::NeedsAttention => Header {
            status: format!(
                "NEEDS ATTENTION at step `{}`: {}",
                seen.step,
                run.status_reason.clone().unwrap_or_default()
            ),
            deadline: "none: nothing happens until a person acts".to_owned(),
            act: next_steps(&id.to_string(), run.phase),
        },
        RunStatus::Unwinding => unwinding(&seen),
        RunStatus::Pending => pending(&seen),
        RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled => ended(&seen),
    };
    with_cancel_requested(&seen, header)
}

/// A step that sleeps until a time.
fn sleeping(seen: &Seen) -> Header {
    let wake = seen.run.next_at.unwrap_or(seen.now);
    Header {
        status: format!(
            "sleeping on step `{}` until {} ({})",
            seen.step,
            render::time(wake),
            render::relative(wake, seen.now)
        ),
        deadline: format!("none: it wakes at {} and goes on with the next step", render::time(wake)),
        act: format!("nothing needed: it goes on by itself; {}", seen.cancel),
    }
}

/// A step that polls a condition: how long, how many checks, its deadline and the next check.
fn waiting(seen: &Seen, latest_wait: Option<&EventRecord>) -> Header {
    let Seen { run, step, then, now, .. } = *seen;
    let id = run.id;
    let began = run.step_started_at.unwrap_or(run.updated_at);
    let wait = latest_wait.filter(|wait| wait.step.as_deref() == run.current_step.as_deref());
    let condition = wait.map(|wait| wait.message.clone()).or_else(|| run.status_reason.clone()).unwrap_or_default();
    let checks = match wait {
        Some(wait) => format!("{} check(s), the latest {} ago", wait.count, seen.ago(wait.at)),
        None => "checked".to_owned(),
    };
    let next = run.next_at.map(|next| next_check(next, now)).unwrap_or_default();
    let deadline = match seen.limits.and_then(|limits| limits.timeout_ms) {
        Some(timeout) => {
            let deadline = began + timeout as i64;
            if now < deadline {
                format!(
                    "{} ({}), {} after it began waiting; not ready by then, the run {then}{next}",
                    render::relative(deadline, now),
                    render::time(deadline),
                    render::duration(timeout as i64)
                )
            } else {
                format!(
                    "PASSED {} ago ({}): its next check is its last; not ready then, the run {then}{next}",
                    seen.ago(deadline),
                    render::time(deadline)
                )
            }
        }
        None => format!("unknown (this binary does not know {} v{}){next}", run.kind, run.version),
    };
    Header {
        status: format!("waiting {} on step `{step}` ({checks}): {condition}", seen.ago(began)),
        deadline,
        act: format!("`anycloud workflow retry {id}` checks now; {}", seen.cancel),
    }
}

/// Due, and no engine holds it.
fn due(seen: &Seen) -> Header {
    let run = seen.run;
    Header {
        status: format!("due: step `{}` (attempt {}) waits for an engine to take it", seen.step, run.attempt + 1),
        deadline: format!("none yet: it is due since {} ago", seen.ago(run.updated_at)),
        act: format!("nothing needed if the API is running; {}", seen.cancel),
    }
}

/// An attempt in flight: for how long, and its deadline.
fn running(seen: &Seen) -> Header {
    let Seen { run, step, limits, then, now, .. } = *seen;
    let began = run.attempt_started_at.unwrap_or(run.updated_at);
    let attempts = limits.and_then(|limits| limits.max_attempts).map(|max| format!(" of {max}")).unwrap_or_default();
    Header {
        status: format!("running step `{step}`: attempt {}{attempts}, for {}", run.attempt + 1, seen.ago(began)),
        deadline: attempt_deadline(run, limits, began, now, then),
        act: format!("nothing needed while it runs ({}); {}", seen.follow, seen.cancel),
    }
}

/// An attempt failed: when the next one runs, and what happens after the last.
fn retrying(seen: &Seen) -> Header {
    let Seen { run, step, limits, then, now, .. } = *seen;
    let id = run.id;
    let next = run.next_at.unwrap_or(now);
    let max = limits.and_then(|limits| limits.max_attempts);
    let after = match max {
        Some(max) if run.attempt + 1 >= max => format!("the last: if it fails too, the run {then}"),
        Some(max) => format!("after attempt {max} the run {then}"),
        None => format!("when retries run out the run {then}"),
    };
    let of = max.map(|max| format!(" of {max}")).unwrap_or_default();
    let when = if next + OVERDUE_MS < now {
        format!("due {} ago and not taken: is the API running?", seen.ago(next))
    } else {
        format!("{} ({})", render::relative(next, now), render::time(next))
    };
    Header {
        status: format!(
            "retrying step `{step}`: attempt {} failed: {}",
            run.attempt,
            seen.error.clone().unwrap_or_default()
        ),
        deadline: format!("attempt {}{of} {when}; {after}", run.attempt + 1),
        act: format!("`anycloud workflow retry {id}` tries now; {}", seen.cancel),
    }
}

/// Undoing what was done: why it turned back, and the undo's next attempt or deadline.
fn unwinding(seen: &Seen) -> Header {
    let Seen { run, step, limits, now, .. } = *seen;
    let id = run.id;
    let why = run.unwind_reason.clone().or_else(|| run.status_reason.clone()).unwrap_or_default();
    let undoing = if run.current_step.is_some() { format!("undoing step `{step}`") } else { "undoing".into() };
    let (deadline, act) = match run.next_at.filter(|next| run.lease.is_none() && run.attempt > 0 && *next > now) {
        Some(next) => (
            format!(
                "undo attempt {} {} ({}); if the undo keeps failing the run parks for a person (last error: {})",
                run.attempt + 1,
                render::relative(next, now),
                render::time(next),
                seen.error.clone().unwrap_or_default()
            ),
            format!("nothing needed: it is undoing what was done; `anycloud workflow retry {id}` runs the undo now"),
        ),
        None => {
            let began = run.attempt_started_at.unwrap_or(run.updated_at);
            (
                attempt_deadline(run, limits, began, now, "parks for a person if it keeps failing"),
                format!("nothing needed: it is undoing what was done ({})", seen.follow),
            )
        }
    };
    Header { status: format!("unwinding: {why}; {undoing}"), deadline, act }
}

/// Not started: what it may wait behind.
fn pending(seen: &Seen) -> Header {
    let run = seen.run;
    let behind = run
        .resource_key
        .as_deref()
        .map(|key| format!(" (runs on `{key}` go one at a time: `anycloud workflow list --resource {key}`)"))
        .unwrap_or_default();
    Header {
        status: format!("pending for {}: no step has started{behind}", seen.ago(run.created_at)),
        deadline: "none: it starts when an engine takes it".to_owned(),
        act: format!("{} (before it starts)", seen.cancel),
    }
}

/// Ended: how, when, and after how long.
fn ended(seen: &Seen) -> Header {
    let run = seen.run;
    let id = run.id;
    let ended = run.finished_at.unwrap_or(run.updated_at);
    let status = match run.status {
        RunStatus::Succeeded => "succeeded: every step succeeded".to_owned(),
        other => format!("{other}: {}", run.status_reason.clone().unwrap_or_default()),
    };
    Header {
        status,
        deadline: format!(
            "none: it ended {} ({} ago), {} after it was submitted",
            render::time(ended),
            seen.ago(ended),
            render::duration(ended - run.created_at)
        ),
        act: format!("nothing: the run has ended (`anycloud workflow inspect {id} --events` shows its timeline)"),
    }
}

/// A cancel shows until it takes effect: the run turns back (undo phase) or ends.
fn with_cancel_requested(seen: &Seen, mut header: Header) -> Header {
    let run = seen.run;
    if run.cancel_requested && run.phase == Phase::Forward && !run.status.is_final() {
        header.status = format!("CANCEL REQUESTED, not in effect yet; {}", header.status);
        let when = match run.status {
            RunStatus::Running if run.lease.is_some() => {
                "the attempt in flight is stopped (at once, or at its engine's next heartbeat, within 10 s)"
            }
            _ => "an engine takes the run (it is due now)",
        };
        header.act =
            format!("nothing needed: the run turns back when {when}, then undoes what was done ({})", seen.follow);
    }
    header
}

/// What a run does when its step gives up.
fn then(on_exhausted: OnExhausted) -> &'static str {
    match on_exhausted {
        OnExhausted::Unwind => "turns back: its completed steps are undone and it ends failed",
        OnExhausted::Park => "parks (needs-attention) for a person to retry, resume or cancel",
    }
}

/// "; next check in 1.8 s", or that it is overdue.
fn next_check(next: i64, now: i64) -> String {
    if next + OVERDUE_MS < now {
        format!(
            "; the next check was due {} ago and no engine has taken it: is the API running?",
            render::duration(now - next)
        )
    } else {
        format!("; next check {}", render::relative(next, now))
    }
}

/// The deadline of the attempt in flight, which began at `began`.
fn attempt_deadline(run: &RunRecord, limits: Option<&StepLimits>, began: i64, now: i64, then: &str) -> String {
    let Some(limits) = limits else {
        return format!("unknown (this binary does not know {} v{})", run.kind, run.version);
    };
    let deadline = began + limits.attempt_timeout_ms as i64;
    let per_attempt = render::duration(limits.attempt_timeout_ms as i64);
    let after = match limits.max_attempts {
        Some(max) if run.attempt + 1 >= max => format!("it is the last attempt: the run {then}"),
        _ => "it is retried".to_owned(),
    };
    if now < deadline {
        format!(
            "this attempt is stopped {} ({}; {per_attempt} per attempt) if it has not finished; then {after}",
            render::relative(deadline, now),
            render::time(deadline)
        )
    } else {
        let lapse = run
            .lease
            .as_ref()
            .map(|lease| format!(" when its lease lapses at {}", render::time(lease.expires_at)))
            .unwrap_or_default();
        format!(
            "PASSED {} ago ({per_attempt} per attempt): the attempt should have been stopped; if the engine \
             running it is gone, another engine takes the run over{lapse}",
            render::duration(now - deadline)
        )
    }
}

#[cfg(test)]
mod tests {
    use anycloud_engine::{Lease, RunRecord, StepError};
    use serde_json::json;

    use super::*;
    use crate::commands::workflow::event_line;

    const NOW: i64 = 1_796_205_061_000;
    const ID: &str = "0b5a1c7e-8f0e-4f43-9e55-1d2c3b4a5f60";
    const MIN: i64 = 60_000;

    /// A run of `cluster.create` at step `wait_for_nodes`, `status`, that began its step
    /// `began` ms before [`NOW`].
    fn run(status: RunStatus, began: i64) -> RunRecord {
        serde_json::from_value(json!({
            "seq": 7, "id": ID, "kind": "cluster.create", "version": 1, "resource_key": "cluster/demo",
            "input": null, "output": null, "status": status, "phase": "forward", "step_index": 6,
            "current_step": "wait_for_nodes", "attempt": 0, "step_started_at": NOW - began,
            "next_at": NOW + 1_800, "status_reason": "1 of 2 nodes ready", "error": null,
            "cancel_requested": false, "lease": null, "lease_generation": 3,
            "created_at": NOW - 20 * MIN, "updated_at": NOW - 200, "finished_at": null
        }))
        .unwrap()
    }

    fn limits(shape: StepShape, on_exhausted: OnExhausted) -> StepLimits {
        StepLimits {
            step: "wait_for_nodes".into(),
            phase: Phase::Forward,
            shape,
            every_ms: Some(2_000),
            timeout_ms: (shape == StepShape::Poll).then_some(15 * MIN as u64),
            attempt_timeout_ms: 5 * MIN as u64,
            max_attempts: Some(8),
            max_elapsed_ms: None,
            on_exhausted,
            has_undo: false,
        }
    }

    fn detail(run: RunRecord, limits: StepLimits) -> RunDetail {
        RunDetail { run, steps: Vec::new(), plan: None, limits: Some(limits) }
    }

    /// The run's latest `waiting` entry: `count` checks, the latest 1.2 s ago.
    fn waiting(count: u32) -> EventRecord {
        serde_json::from_value(json!({
            "seq": 9, "run_id": ID, "at": NOW - 1_200, "count": count, "first_at": NOW - 3 * MIN,
            "kind": "waiting", "step": "wait_for_nodes", "message": "1 of 2 nodes ready"
        }))
        .unwrap()
    }

    #[test]
    fn a_waiting_poll_says_how_long_its_deadline_what_then_and_what_to_do() {
        let wait = waiting(97);
        let header = explain(
            &detail(run(RunStatus::Waiting, 3 * MIN + 12_000), limits(StepShape::Poll, OnExhausted::Unwind)),
            Some(&wait),
            NOW,
        );
        assert_eq!(
            header.status,
            "waiting 3 min 12 s on step `wait_for_nodes` (97 check(s), the latest 1.2 s ago): 1 of 2 nodes ready"
        );
        assert!(header.deadline.starts_with("in 11 min 48 s (2026-12-02 "), "{header:#?}");
        assert!(header.deadline.contains("15 min 0 s after it began waiting"), "{header:#?}");
        assert!(header.deadline.contains("the run turns back: its completed steps are undone"), "{header:#?}");
        assert!(header.deadline.ends_with("next check in 1.8 s"), "{header:#?}");
        assert_eq!(
            header.act,
            format!(
                "`anycloud workflow retry {ID}` checks now; `anycloud workflow cancel {ID}` gives up and undoes what was \
                 done"
            )
        );

        // A step whose policy parks says so.
        let parks = detail(run(RunStatus::Waiting, MIN), limits(StepShape::Poll, OnExhausted::Park));
        let header = explain(&parks, Some(&wait), NOW);
        assert!(header.deadline.contains("the run parks (needs-attention)"), "{header:#?}");
    }

    #[test]
    fn the_checks_of_a_waiting_poll_are_one_timeline_line() {
        let line = event_line(&waiting(97));
        assert!(
            line.ends_with(
                "waiting         [wait_for_nodes] ×97 since 2026-12-02 09:48:01.000Z, latest: 1 of 2 nodes ready"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_passed_deadline_says_so_and_what_happens_now() {
        let late = detail(run(RunStatus::Waiting, 16 * MIN), limits(StepShape::Poll, OnExhausted::Unwind));
        let header = explain(&late, Some(&waiting(450)), NOW);
        assert!(header.deadline.starts_with("PASSED 60.0 s ago"), "{header:#?}");
        assert!(
            header.deadline.contains("its next check is its last; not ready then, the run turns back"),
            "{header:#?}"
        );

        // A check long overdue: no engine takes due runs.
        let mut stalled = late.clone();
        stalled.run.next_at = Some(NOW - 30_000);
        let header = explain(&stalled, None, NOW);
        assert!(header.deadline.contains("was due 30.0 s ago and no engine has taken it"), "{header:#?}");
    }

    #[test]
    fn a_running_step_shows_how_long_the_attempt_has_run_and_its_deadline() {
        let mut running = run(RunStatus::Running, 2 * MIN);
        running.current_step = Some("wait_for_nodes".into());
        running.attempt = 1;
        running.attempt_started_at = Some(NOW - 12_300);
        running.lease = Some(Lease { owner: "api-dev".into(), expires_at: NOW + 20_000 });
        let header = explain(&detail(running.clone(), limits(StepShape::Action, OnExhausted::Unwind)), None, NOW);
        assert_eq!(header.status, "running step `wait_for_nodes`: attempt 2 of 8, for 12.3 s");
        assert!(header.deadline.starts_with("this attempt is stopped in 4 min 47 s (2026-12-02 "), "{header:#?}");
        assert!(header.deadline.ends_with("5 min 0 s per attempt) if it has not finished; then it is retried"));
        assert!(header.act.contains(&format!("`anycloud workflow cancel {ID}`")), "{header:#?}");

        running.attempt_started_at = Some(NOW - 6 * MIN);
        let header = explain(&detail(running, limits(StepShape::Action, OnExhausted::Unwind)), None, NOW);
        assert!(header.deadline.starts_with("PASSED 60.0 s ago"), "{header:#?}");
        assert!(header.deadline.contains("another engine takes the run over when its lease lapses"), "{header:#?}");
    }

    #[test]
    fn a_requested_cancel_shows_until_it_takes_effect() {
        let mut asked = run(RunStatus::Waiting, MIN);
        asked.cancel_requested = true;
        asked.next_at = Some(NOW);
        let header = explain(&detail(asked.clone(), limits(StepShape::Poll, OnExhausted::Unwind)), None, NOW);
        assert!(header.status.starts_with("CANCEL REQUESTED, not in effect yet; waiting 60.0 s"), "{header:#?}");
        assert!(header.act.starts_with("nothing needed: the run turns back when an engine takes the run"));

        // Turned back: the cancel is in effect, the header says what the unwind does.
        asked.status = RunStatus::Unwinding;
        asked.phase = Phase::Undo;
        asked.current_step = Some("launch_workers".into());
        asked.unwind_reason = Some("cancelled by an operator".into());
        let header = explain(&RunDetail { run: asked, steps: Vec::new(), plan: None, limits: None }, None, NOW);
        assert!(header.status.starts_with("unwinding: cancelled by an operator; undoing step `launch_workers`"));
        assert!(!header.status.contains("CANCEL REQUESTED"), "{header:#?}");
    }

    #[test]
    fn an_unwind_after_a_timeout_leads_with_why_it_turned_back() {
        let mut unwinding = run(RunStatus::Unwinding, 0);
        unwinding.phase = Phase::Undo;
        unwinding.current_step = Some("launch_workers".into());
        unwinding.attempt = 2;
        unwinding.next_at = Some(NOW + 4_000);
        unwinding.status_reason = Some("step `wait_for_nodes` failed: still not ready after 15 min".into());
        unwinding.unwind_reason = unwinding.status_reason.clone();
        unwinding.error = Some(StepError::retryable_msg("terminating VM w0: request limit exceeded"));
        let header = explain(&RunDetail { run: unwinding, steps: Vec::new(), plan: None, limits: None }, None, NOW);
        assert_eq!(
            header.status,
            "unwinding: step `wait_for_nodes` failed: still not ready after 15 min; undoing step `launch_workers`"
        );
        assert!(header.deadline.starts_with("undo attempt 3 in 4.0 s"), "{header:#?}");
        assert!(header.deadline.contains("last error: terminating VM w0: request limit exceeded"), "{header:#?}");
    }
}
