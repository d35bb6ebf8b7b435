//! A run's steps on one time axis, from its submission to its end (or now and its next planned
//! check): one lane per step (forward or undo), and in each lane a bar for every attempt (failed
//! ones marked), every retry back-off, every wait between a poll's checks, and every time the
//! run stood parked for a person. The lanes are read from the step rows and the timeline; the
//! step in hand grows to now, and the check or attempt it waits for is drawn as planned.

use std::fmt::Write as _;

use anycloud_engine::{EventKind, EventRecord, Phase, RunRecord, RunStatus, StepRecord, StepStatus, retry_delay};

use super::html::{escape, relative};

/// What a bar shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bar {
    /// An attempt that did its work (or, in the lane in hand, is doing it).
    Attempt,
    /// An attempt that failed.
    Failed,
    /// The pause before the next attempt.
    Backoff,
    /// A poll's time between its checks.
    Wait,
    /// Stopped for a person.
    Parked,
    /// The next check or attempt, not yet come.
    Planned,
}

#[derive(Debug)]
struct Segment {
    bar: Bar,
    from: i64,
    to: i64,
    said: String,
}

struct Lane {
    label: String,
    undo: bool,
    in_hand: bool,
    summary: String,
    segments: Vec<Segment>,
}

/// One lane: a step's (or its undo's) window, and what it ended as (`None`: in hand).
struct Window<'a> {
    name: &'a str,
    phase: Phase,
    from: i64,
    to: i64,
    attempts: u32,
    ended: Option<StepStatus>,
}

fn seconds(ms: i64) -> String {
    format!("{:.1} s", ms.max(0) as f64 / 1000.0)
}

/// The bars of one lane, from its window and the run's timeline.
fn segments(window: &Window, events: &[EventRecord], run: &RunRecord) -> Vec<Segment> {
    let (from, to) = (window.from, window.to);
    let failure = if window.phase == Phase::Undo { EventKind::UndoFailed } else { EventKind::StepFailed };
    let mine: Vec<&EventRecord> = events
        .iter()
        .filter(|event| event.step.as_deref() == Some(window.name))
        .filter(|event| [failure, EventKind::Waiting, EventKind::Parked].contains(&event.kind))
        .filter(|event| event.at >= from && event.first_at.unwrap_or(event.at) <= to)
        .collect();
    let mut bars = Vec::new();
    let (mut cursor, mut attempt) = (from, 1);
    for (i, event) in mine.iter().enumerate() {
        let next = mine.get(i + 1).map_or(to, |next| next.first_at.unwrap_or(next.at)).min(to);
        match event.kind {
            EventKind::Waiting => {
                let first = event.first_at.unwrap_or(event.at).clamp(cursor, to);
                let said = format!("attempt {attempt}: its first check found it not done");
                bars.push(Segment { bar: Bar::Attempt, from: cursor, to: first, said });
                let checks = if event.count > 1 { format!(", {} checks", event.count) } else { String::new() };
                let said = format!("waited {}{checks}: {}", seconds(next - first), event.message);
                bars.push(Segment { bar: Bar::Wait, from: first, to: next.max(first), said });
                cursor = next.max(first);
            }
            EventKind::Parked => {
                let at = event.at.clamp(cursor, to);
                let back = events.iter().find(|later| {
                    later.seq > event.seq
                        && matches!(
                            later.kind,
                            EventKind::RetryRequested | EventKind::Resumed | EventKind::CancelRequested
                        )
                });
                let until = back.map_or(to, |back| back.at).clamp(at, to);
                let said = format!("parked {} for a person: {}", seconds(until - at), event.message);
                bars.push(Segment { bar: Bar::Parked, from: at, to: until, said });
                cursor = until;
            }
            _ => {
                let at = event.at.clamp(cursor, to);
                let said = format!("attempt {attempt} failed after {}: {}", seconds(at - cursor), event.message);
                bars.push(Segment { bar: Bar::Failed, from: cursor, to: at, said });
                attempt += 1;
                cursor = at;
                if let Some(delay) = retry_delay(&event.message) {
                    let until = (at + delay.as_millis() as i64).min(to);
                    let said = format!("back-off {}", seconds(until - at));
                    bars.push(Segment { bar: Bar::Backoff, from: at, to: until, said });
                    cursor = until;
                }
            }
        }
    }
    let last = bars.last().map(|bar| bar.bar);
    bars.extend(ending(window, run, (cursor, attempt), last));
    bars
}

/// The lane's last bars, from `cursor` on (`attempt` the attempt in hand): its last attempt if
/// it ended, or the attempt running now and the check or attempt planned after now.
fn ending(window: &Window, run: &RunRecord, (cursor, attempt): (i64, u32), last: Option<Bar>) -> Vec<Segment> {
    let to = window.to;
    let mut bars = Vec::new();
    match window.ended {
        Some(StepStatus::Failed) if last == Some(Bar::Failed) => {}
        Some(ended) => {
            let (bar, words) =
                if ended == StepStatus::Failed { (Bar::Failed, "failed") } else { (Bar::Attempt, "did its work") };
            let said = format!("attempt {attempt} {words} in {}", seconds(to - cursor));
            bars.push(Segment { bar, from: cursor, to, said });
        }
        None => {
            if matches!(run.status, RunStatus::Running | RunStatus::Unwinding) && cursor < to {
                let said = format!("attempt {attempt} running for {}", seconds(to - cursor));
                bars.push(Segment { bar: Bar::Attempt, from: cursor, to, said });
            }
            if let Some(next) =
                run.next_at.filter(|next| *next > to && matches!(run.status, RunStatus::Waiting | RunStatus::Retrying))
            {
                let what = if run.status == RunStatus::Waiting { "next check" } else { "next attempt" };
                bars.push(Segment {
                    bar: Bar::Planned,
                    from: to,
                    to: next,
                    said: format!("{what} in {}", seconds(next - to)),
                });
            }
        }
    }
    bars
}

/// The lanes: every finished step and undo, then the one in hand.
fn lanes(steps: &[StepRecord], events: &[EventRecord], run: &RunRecord, now: i64) -> Vec<Lane> {
    let mut windows: Vec<Window> = steps
        .iter()
        .map(|step| Window {
            name: &step.name,
            phase: step.phase,
            from: step.started_at,
            to: step.finished_at,
            attempts: step.attempts,
            ended: Some(step.status),
        })
        .collect();
    if let (Some(step), Some(began), None) = (&run.current_step, run.step_started_at, run.finished_at) {
        let attempts = run.attempt + 1;
        windows.push(Window { name: step, phase: run.phase, from: began, to: now.max(began), attempts, ended: None });
    }
    windows
        .iter()
        .map(|window| {
            let segments = segments(window, events, run);
            let state = match window.ended {
                Some(ended) => ended.as_str().to_owned(),
                None => format!("{} now", run.status.as_str()),
            };
            let attempts = window.attempts;
            let label = match window.phase {
                Phase::Undo => format!("undo {}", window.name),
                Phase::Forward => window.name.to_owned(),
            };
            let said: Vec<&str> = segments.iter().map(|segment| segment.said.as_str()).collect();
            let summary = format!(
                "{label}: {state}, {attempts} attempt(s), {} · {}",
                seconds(window.to - window.from),
                said.join("; ")
            );
            Lane { label, undo: window.phase == Phase::Undo, in_hand: window.ended.is_none(), summary, segments }
        })
        .collect()
}

/// The section: the lanes drawn in SVG (each bar titled in words), a legend, and the same
/// lanes as a list of sentences.
pub fn section(steps: &[StepRecord], events: &[EventRecord], run: &RunRecord, now: i64) -> String {
    let lanes = lanes(steps, events, run, now);
    if lanes.is_empty() {
        return r#"<section><h2>Steps</h2><p class="empty">No step has started.</p></section>"#.to_owned();
    }
    let start = run.created_at;
    let planned = lanes.iter().flat_map(|lane| &lane.segments).map(|segment| segment.to).max().unwrap_or(now);
    let end = run.finished_at.unwrap_or(now).max(planned).max(start + 1);
    let x = |at: i64| 200.0 + ((at - start) as f64 / (end - start) as f64 * 580.0).clamp(0.0, 580.0);
    let height = lanes.len() * 22 + 34;
    let mut svg = format!(
        r#"<section><h2>Steps</h2><svg class="axis" viewBox="0 0 820 {height}" role="img" aria-label="The run's steps on a time axis"><title>Steps from submission ({}) to {}</title>"#,
        escape(&relative(start, now)),
        if run.finished_at.is_some() { "the end" } else { "now and what is planned" }
    );
    for (i, lane) in lanes.iter().enumerate() {
        let y = i * 22 + 4;
        let class = if lane.in_hand { "lane in-hand" } else { "lane" };
        let _ = write!(
            svg,
            r#"<text class="{class}" x="0" y="{}">{}</text>"#,
            y + 12,
            escape(&lane.label.chars().take(26).collect::<String>())
        );
        for segment in &lane.segments {
            let class = match segment.bar {
                Bar::Attempt if lane.in_hand && segment.to == now => "current",
                Bar::Attempt if lane.undo => "undo",
                Bar::Attempt => "attempt",
                Bar::Failed => "failed",
                Bar::Backoff => "backoff",
                Bar::Wait => "wait",
                Bar::Parked => "parked",
                Bar::Planned => "planned",
            };
            let (left, right) = (x(segment.from), x(segment.to));
            let _ = write!(
                svg,
                r#"<rect class="{class}" x="{left:.1}" y="{y}" width="{:.1}" height="16"><title>{}</title></rect>"#,
                (right - left).max(2.0),
                escape(&format!("{}: {}", lane.label, segment.said)),
            );
            if segment.bar == Bar::Failed {
                let _ = write!(
                    svg,
                    r#"<text class="mark" x="{:.1}" y="{}" aria-hidden="true">✕</text>"#,
                    left.max(right - 2.0) + 3.0,
                    y + 12
                );
            }
        }
    }
    let bottom = lanes.len() * 22 + 22;
    let _ = write!(
        svg,
        r#"<text class="tick" x="200" y="{bottom}">0 s</text><text class="tick" x="780" y="{bottom}" text-anchor="end">{}</text></svg>"#,
        seconds(end - start)
    );
    svg.push_str(LEGEND);
    svg.push_str(r#"<ol class="muted">"#);
    for lane in &lanes {
        let _ = write!(svg, "<li>{}</li>", escape(&lane.summary));
    }
    svg.push_str("</ol></section>");
    svg
}

/// What each bar's colour means, in words.
const LEGEND: &str = r#"<p class="legend muted"><span class="key attempt"></span>attempt <span class="key failed"></span>failed attempt ✕ <span class="key backoff"></span>back-off before a retry <span class="key wait"></span>waiting between checks <span class="key parked"></span>parked for a person <span class="key undo"></span>undo <span class="key current"></span>in hand <span class="key planned"></span>planned</p>"#;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(extra: serde_json::Value) -> RunRecord {
        let mut run = json!({
            "seq": 1, "id": "00000000-0000-0000-0000-000000000001", "kind": "cluster.create", "version": 1,
            "input": {}, "status": "succeeded", "phase": "forward", "step_index": 0, "attempt": 0,
            "cancel_requested": false, "lease_generation": 0, "created_at": 0, "updated_at": 0,
        });
        for (key, value) in extra.as_object().unwrap() {
            run[key] = value.clone();
        }
        serde_json::from_value(run).unwrap()
    }

    fn step(name: &str, phase: &str, status: &str, from: i64, to: i64) -> StepRecord {
        serde_json::from_value(json!({
            "phase": phase, "index": 0, "name": name, "status": status, "attempts": 1,
            "started_at": from, "finished_at": to,
        }))
        .unwrap()
    }

    fn event(seq: i64, kind: &str, step: Option<&str>, at: i64, first_at: Option<i64>, message: &str) -> EventRecord {
        serde_json::from_value(json!({
            "seq": seq, "run_id": "00000000-0000-0000-0000-000000000001", "at": at, "count": 3,
            "first_at": first_at, "kind": kind, "step": step, "message": message,
        }))
        .unwrap()
    }

    fn bars(lane: &Lane) -> Vec<(Bar, i64, i64)> {
        lane.segments.iter().map(|segment| (segment.bar, segment.from, segment.to)).collect()
    }

    /// A retried step, a poll's wait, a terminal failure and its unwinding: each attempt,
    /// back-off, wait and undo is a bar of its own, at its own times.
    #[test]
    fn each_attempt_backoff_wait_and_undo_is_a_bar() {
        let steps = [
            step("network", "forward", "succeeded", 0, 3_000),
            step("nodes", "forward", "succeeded", 3_000, 9_000),
            step("install", "forward", "failed", 9_000, 9_500),
            step("nodes", "undo", "undone", 9_600, 10_000),
        ];
        let events = [
            event(3, "step-failed", Some("network"), 1_000, None, "attempt 1 failed (retrying in 1.0 s): throttled"),
            event(4, "waiting", Some("nodes"), 8_000, Some(3_500), "2 of 3 nodes ready"),
            event(5, "step-failed", Some("install"), 9_500, None, "failed for good: bad image"),
            event(6, "undo-failed", Some("nodes"), 9_700, None, "undo attempt 1 failed (retrying in 100 ms): busy"),
        ];
        let lanes = lanes(&steps, &events, &run(json!({ "status": "failed", "finished_at": 10_000 })), 20_000);
        use Bar::*;
        assert_eq!(bars(&lanes[0]), [(Failed, 0, 1_000), (Backoff, 1_000, 2_000), (Attempt, 2_000, 3_000)]);
        assert_eq!(bars(&lanes[1]), [(Attempt, 3_000, 3_500), (Wait, 3_500, 9_000), (Attempt, 9_000, 9_000)]);
        assert_eq!(bars(&lanes[2]), [(Failed, 9_000, 9_500)]);
        assert_eq!(bars(&lanes[3]), [(Failed, 9_600, 9_700), (Backoff, 9_700, 9_800), (Attempt, 9_800, 10_000)]);
        assert!(lanes[1].summary.starts_with("nodes: succeeded, 1 attempt(s), 6.0 s · "), "{}", lanes[1].summary);
        assert!(lanes[1].summary.contains("waited 5.5 s, 3 checks: 2 of 3 nodes ready"), "{}", lanes[1].summary);
        assert!(lanes[3].undo && lanes[3].label == "undo nodes");
        let html = section(&steps, &events, &run(json!({ "status": "failed", "finished_at": 10_000 })), 20_000);
        assert_eq!(html.matches(r#"class="failed""#).count(), 3);
        assert_eq!(html.matches("✕</text>").count(), 3, "every failed attempt is marked");
    }

    /// The step in hand: parked since a failure and still parked grows to now; a waiting poll's
    /// next check is drawn after now.
    #[test]
    fn the_step_in_hand_grows_and_its_next_check_is_planned() {
        let parked = run(json!({ "status": "needs-attention", "current_step": "install", "step_started_at": 1_000 }));
        let events = [
            event(2, "step-failed", Some("install"), 2_000, None, "gave up: quota"),
            event(3, "parked", Some("install"), 2_000, None, "fix the quota, then retry"),
        ];
        let lane = &lanes(&[], &events, &parked, 5_000)[0];
        assert_eq!(bars(lane), [(Bar::Failed, 1_000, 2_000), (Bar::Parked, 2_000, 5_000)]);
        assert!(lane.in_hand && lane.summary.starts_with("install: needs-attention now"), "{}", lane.summary);
        let waiting =
            run(json!({ "status": "waiting", "current_step": "nodes", "step_started_at": 0, "next_at": 7_000 }));
        let events = [event(2, "waiting", Some("nodes"), 4_000, Some(1_000), "1 of 2 nodes ready")];
        let lane = &lanes(&[], &events, &waiting, 5_000)[0];
        assert_eq!(bars(lane), [(Bar::Attempt, 0, 1_000), (Bar::Wait, 1_000, 5_000), (Bar::Planned, 5_000, 7_000)]);
        let running = run(json!({ "status": "running", "current_step": "nodes", "step_started_at": 0 }));
        assert_eq!(bars(&lanes(&[], &[], &running, 5_000)[0]), [(Bar::Attempt, 0, 5_000)]);
    }
}
