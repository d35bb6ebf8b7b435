//! `anycloud workflow list | inspect | retry | resume | cancel`.
//!
//! `inspect` is written for someone debugging a stuck operation at 3 a.m.: its first lines say
//! what the run is doing, what is wrong and when it will next try, then every step follows.

use crate::output::say;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{items, print_json};
use crate::client::Client;
use crate::exit::{CliError, CliResult, ENDED_OTHERWISE, OK, TIMEOUT};
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
    let mut query = vec![format!("limit={}", args.limit)];
    for (key, value) in [("kind", &args.kind), ("status", &args.status), ("resource", &args.resource)] {
        if let Some(value) = value {
            query.push(format!("{key}={}", encode(value)));
        }
    }
    let answer: Value = client.get(&format!("/v1/workflows?{}", query.join("&"))).await?;
    if json {
        print_json(&answer["workflows"]);
        return Ok(OK);
    }
    let now = anycloud_workflows::now_ms();
    let rows: Vec<Vec<String>> = items(&answer["workflows"])
        .iter()
        .map(|run| {
            vec![
                text(&run["id"]),
                text(&run["kind"]),
                text(&run["status"]),
                text(&run["current_step"]),
                text(&run["resource_key"]),
                run["updated_at"].as_i64().map(|t| render::relative(t, now)).unwrap_or_default(),
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
    let answer: Value = client.get(&format!("/v1/workflows/{id}")).await?;
    let timeline: Option<Value> =
        if events { Some(client.get(&format!("/v1/workflows/{id}/events")).await?) } else { None };
    if json {
        let mut out = answer["workflow"].clone();
        if let Some(timeline) = timeline {
            out["events"] = timeline["events"].clone();
        }
        print_json(&out);
        return Ok(OK);
    }
    print_detail(&answer["workflow"], answer["now"].as_i64().unwrap_or_else(anycloud_workflows::now_ms));
    if let Some(timeline) = timeline {
        say!("\nevents");
        for event in items(&timeline["events"]) {
            say!("  {}", event_line(event));
        }
    }
    Ok(OK)
}

/// `ANYCLOUD_TEST_FOLLOW_GAP_MS`: a test seam, a pause between the follower's two reads, so that
/// a test can make a run end between them.
fn test_gap() -> Option<Duration> {
    let millis = std::env::var("ANYCLOUD_TEST_FOLLOW_GAP_MS").ok()?.parse().ok()?;
    Some(Duration::from_millis(millis))
}

/// Streams a run's events until it ends; survives the API restarting meanwhile. Exit code: 0
/// succeeded, 1 failed or cancelled, 2 could not observe, 4 timed out.
pub async fn follow(client: &Client, id: &str, timeout: Duration, json: bool) -> CliResult {
    let deadline = Instant::now() + timeout;
    let mut after = 0_i64;
    let mut unreachable_since: Option<Instant> = None;
    let gap = test_gap();
    loop {
        // The run before its events: a run that had ended when it was read has all its events
        // committed (its end and its last step are one transaction), so the events read next
        // include them. Read the other way round, a run ending between the two reads would stop
        // the follower short of its last step.
        let polled: Result<(Value, Value), CliError> = async {
            let run: Value = client.get(&format!("/v1/workflows/{id}")).await?;
            if let Some(gap) = gap {
                tokio::time::sleep(gap).await;
            }
            let events: Value = client.get(&format!("/v1/workflows/{id}/events?after={after}")).await?;
            Ok((events, run))
        }
        .await;
        match polled {
            Ok((events, run)) => {
                if unreachable_since.take().is_some() && !json {
                    say!("  (API reachable again)");
                }
                for event in items(&events["events"]) {
                    after = after.max(event["seq"].as_i64().unwrap_or(after));
                    if json {
                        say!("{}", serde_json::to_string(event).unwrap_or_default());
                    } else {
                        say!("  {}", event_line(event));
                    }
                }
                let status = text(&run["workflow"]["run"]["status"]);
                match status.as_str() {
                    "succeeded" => return Ok(OK),
                    "failed" | "cancelled" => {
                        if !json {
                            let reason = text(&run["workflow"]["run"]["status_reason"]);
                            say!("workflow {id} {status}: {reason}");
                        }
                        return Ok(ENDED_OTHERWISE);
                    }
                    _ => {}
                }
            }
            // The API may be restarting: keep trying for a while, saying so once.
            Err(err) if err.error_code.as_deref() == Some("API_UNREACHABLE") => {
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
                format!("workflow {id} did not end within {}", render::duration(timeout.as_millis() as i64)),
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `retry`, `resume` or `cancel`.
pub async fn act(id: &str, action: &str, json: bool) -> CliResult {
    check_id(id)?;
    let client = Client::active()?;
    let answer: Value = client.post(&format!("/v1/workflows/{id}/{action}"), &serde_json::json!({})).await?;
    if json {
        print_json(&answer);
    } else {
        let done = match action {
            "retry" => "will run its current step now",
            "resume" => "resumed with a fresh retry budget",
            _ => "cancel requested: completed steps will be undone",
        };
        say!("workflow {id} {done} (status: {})", text(&answer["status"]));
    }
    Ok(OK)
}

fn print_detail(detail: &Value, now: i64) {
    let run = &detail["run"];
    let status = text(&run["status"]);
    let step = text(&run["current_step"]);
    let attempt = run["attempt"].as_u64().unwrap_or(0);
    say!(
        "workflow {}  {} v{}{}",
        text(&run["id"]),
        text(&run["kind"]),
        run["version"],
        run["resource_key"].as_str().map(|k| format!("  resource {k}")).unwrap_or_default()
    );
    let headline = match status.as_str() {
        "retrying" => format!("retrying: step `{step}` failed {attempt} time(s)"),
        "waiting" => format!("waiting: step `{step}`"),
        "needs-attention" => format!("NEEDS ATTENTION at step `{step}`"),
        "running" => format!("running: step `{step}` (attempt {})", attempt + 1),
        "unwinding" => format!("unwinding: undoing `{step}`"),
        other => other.to_owned(),
    };
    say!("status    {headline}");
    if let Some(reason) = run["status_reason"].as_str() {
        say!("why       {reason}");
    }
    if let Some(chain) = run["error"]["chain"].as_array() {
        for (i, cause) in chain.iter().enumerate() {
            let label = if i == 0 { "error" } else { "  caused by" };
            say!("{label:<9} {}", cause.as_str().unwrap_or(""));
        }
    }
    if let Some(next) =
        run["next_at"].as_i64().filter(|_| !matches!(status.as_str(), "succeeded" | "failed" | "cancelled"))
    {
        let what = if status == "waiting" { "next check" } else { "next try" };
        say!("{what:<9} {} ({})", render::relative(next, now), render::time(next));
    }
    match run["lease"].as_object() {
        Some(lease) => say!(
            "lease     held by {} until {} (generation {})",
            lease["owner"].as_str().unwrap_or("?"),
            lease["expires_at"].as_i64().map(render::time).unwrap_or_default(),
            run["lease_generation"]
        ),
        None if !matches!(status.as_str(), "succeeded" | "failed" | "cancelled") => {
            say!("lease     none: no engine is running a step of it now")
        }
        None => {}
    }
    say!(
        "created   {}   updated {}{}",
        run["created_at"].as_i64().map(render::time).unwrap_or_default(),
        run["updated_at"].as_i64().map(render::time).unwrap_or_default(),
        run["finished_at"].as_i64().map(|t| format!("   ended {}", render::time(t))).unwrap_or_default()
    );
    if let Some(output) = run.get("output").filter(|o| !o.is_null()) {
        say!("output    {}", summary(output));
    }
    say!("\nsteps");
    let mut rows = Vec::new();
    for record in items(&detail["steps"]) {
        let undo = record["phase"] == "undo";
        let name = if undo { format!("undo {}", text(&record["name"])) } else { text(&record["name"]) };
        let took = record["finished_at"]
            .as_i64()
            .zip(record["started_at"].as_i64())
            .map(|(end, start)| render::duration(end - start));
        let error = record["error"]["chain"].as_array().map(|chain| {
            let parts: Vec<&str> = chain.iter().filter_map(Value::as_str).collect();
            format!("last error: {}", parts.join(": "))
        });
        let output = record.get("output").filter(|o| !o.is_null()).map(summary);
        rows.push(vec![
            name,
            text(&record["status"]),
            record["attempts"].to_string(),
            took.unwrap_or_default(),
            if record["status"] == "failed" { error.or(output) } else { output.or(error) }.unwrap_or_default(),
        ]);
    }
    // The step in hand and the ones not reached yet, from the definition's plan.
    let done = items(&detail["steps"]).iter().filter(|s| s["phase"] == "forward").count();
    if let Some(plan) = detail["plan"].as_array()
        && run["phase"] == "forward"
        && !matches!(status.as_str(), "succeeded" | "failed" | "cancelled")
    {
        for (index, name) in plan.iter().enumerate().skip(done) {
            let name = name.as_str().unwrap_or("").to_owned();
            let row = if index == done {
                let error = run["error"]["chain"]
                    .as_array()
                    .map(|c| c.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(": "));
                vec![
                    name,
                    status.clone(),
                    attempt.to_string(),
                    String::new(),
                    error.map(|e| format!("last error: {e}")).unwrap_or_default(),
                ]
            } else {
                vec![name, "not started".into(), "0".into(), String::new(), String::new()]
            };
            rows.push(row);
        }
    }
    render::table(&["STEP", "STATUS", "ATTEMPTS", "TOOK", "OUTPUT / LAST ERROR"], &rows);
}

fn event_line(event: &Value) -> String {
    let step = event["step"].as_str().map(|s| format!(" [{s}]")).unwrap_or_default();
    format!(
        "{}  {:<15}{step} {}",
        event["at"].as_i64().map(render::time).unwrap_or_default(),
        text(&event["kind"]),
        text(&event["message"])
    )
}

fn summary(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 { format!("{}…", text.chars().take(79).collect::<String>()) } else { text }
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or("").to_owned()
}

fn check_id(id: &str) -> Result<(), CliError> {
    if id.parse::<uuid::Uuid>().is_err() {
        return Err(CliError::bad_input(format!(
            "`{id}` is not a workflow id (a UUID); `anycloud workflow list` shows them"
        )));
    }
    Ok(())
}

fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
