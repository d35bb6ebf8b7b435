//! The deployment commands: `anycloud status | list | job list | service list | terminate |
//! resubmit` (`logs` is its own file) and `anycloud wait deployment/ID`, and the follower of a deployment's state that
//! `--wait` uses (a job until it ends; a service until it runs, or ends).
//!
//! A deployment is named by its name or its id wherever one is asked for; the API resolves it.

use std::time::{Duration, Instant};

use anycloud_engine::RunStatus;
use anycloud_workflows::db::deployments::{DeploymentKind, Status};
use anycloud_workflows::db::revisions::RevisionResult;
use anycloud_workflows::operations::described_secrets;
use anycloud_workflows::wire::{DeploymentDetail, DeploymentList, DeploymentQuery, WorkflowSummary};

use super::outage::Outage;
use super::print_json;
use crate::client::{Client, segment};
use crate::exit::{BAD_INPUT, CliError, CliResult, ENDED_OTHERWISE, NEEDS_ATTENTION, OK, TIMEOUT};
use crate::output::say;
use crate::progress::{Progress, Stand, Tone};
use crate::render;

/// How often a follower asks for the deployment again.
pub(crate) const POLL: Duration = Duration::from_secs(1);

pub(crate) fn path(key: &str) -> String {
    format!("/v1/deployments/{}", segment(key))
}

/// `anycloud status ID`: one deployment; with `watch`, again on every change until it ends (a
/// service: until it runs or ends). `health` (live Pod health) is refused: it is not shown for
/// cluster-backed deployments yet.
pub async fn status(key: &str, verbose: bool, watch: bool, health: bool, json: bool) -> CliResult {
    let client = Client::active()?;
    let mut detail: DeploymentDetail = client.get(&path(key)).await?;
    if health {
        let name = &detail.deployment.name;
        let (code, what) = match detail.deployment.is_service() {
            true => ("NOT_SUPPORTED_FOR_CLUSTER_SERVICES", "cluster-backed services"),
            false => ("INVALID_ARGUMENT", "jobs (`anycloud logs` shows a job's output)"),
        };
        return Err(CliError::new(
            BAD_INPUT,
            code,
            format!(
                "live Pod health is not supported yet for {what}; `anycloud status {name}` shows the persisted \
                 lifecycle state{}",
                if detail.deployment.is_service() { ", the revisions and the cluster-internal address" } else { "" }
            ),
        ));
    }
    let show = |detail: &DeploymentDetail| match json {
        true if watch => say!("{}", serde_json::to_string(detail).unwrap_or_default()),
        true => print_json(detail),
        false => print_detail(detail, verbose),
    };
    show(&detail);
    if !watch {
        return Ok(OK);
    }
    let mut shown = change_key(&detail);
    let progress = Progress::start(key, json);
    while !has_settled(&detail) {
        progress.update(stand(&detail));
        tokio::time::sleep(POLL).await;
        detail = client.get(&path(key)).await?;
        if change_key(&detail) != shown {
            shown = change_key(&detail);
            progress.above(|| {
                if !json {
                    say!("\n--- {}", render::time(anycloud_workflows::now_ms()));
                }
                show(&detail);
            });
        }
    }
    Ok(OK)
}

/// `anycloud list` (every kind), `anycloud job list` and `anycloud service list`.
pub async fn list(status: Option<String>, kind: Option<DeploymentKind>, limit: u32, json: bool) -> CliResult {
    let client = Client::active()?;
    let filtered = status.is_some();
    let query = DeploymentQuery { status, kind: kind.map(|kind| kind.as_str().to_owned()), limit: Some(limit) };
    let answer: DeploymentList = client.get_query("/v1/deployments", &query).await?;
    if json {
        print_json(&answer);
        return Ok(OK);
    }
    if answer.deployments.is_empty() {
        match filtered {
            true => say!("no deployments match"),
            false => say!(
                "no deployments yet: run a job with `anycloud job IMAGE --cluster NAME -- COMMAND...` or a service \
                 with `anycloud service IMAGE --cluster NAME -- COMMAND...`"
            ),
        }
        return Ok(OK);
    }
    let now = anycloud_workflows::now_ms();
    let rows: Vec<Vec<String>> = answer
        .deployments
        .iter()
        .map(|entry| {
            let deployment = &entry.deployment;
            let when = match deployment.ended_at {
                Some(ended) => format!("ended {}", render::relative(ended, now)),
                None => render::duration(now - deployment.created_at),
            };
            vec![
                deployment.name.clone(),
                deployment.kind.to_string(),
                entry.state.clone(),
                entry.cluster.clone(),
                deployment.spec.image.clone(),
                match (deployment.is_service(), deployment.revision) {
                    (true, Some(revision)) => format!("rev {revision}"),
                    (true, None) => "-".to_owned(),
                    (false, _) => deployment.attempt.to_string(),
                },
                when,
            ]
        })
        .collect();
    render::table(&["NAME", "KIND", "STATE", "CLUSTER", "IMAGE", "ATTEMPT / REV", "AGE / ENDED"], &rows);
    Ok(OK)
}

/// `anycloud terminate ID`: asks the API to end the job; with `wait`, follows it until it has
/// ended (exit 0 once it has, whatever it ended as).
pub async fn terminate(key: &str, wait: bool, timeout: Duration, json: bool) -> CliResult {
    let client = Client::active()?;
    let detail: DeploymentDetail = client.post_empty(&format!("{}/terminate", path(key))).await?;
    if json && !wait {
        print_json(&detail);
        return Ok(OK);
    }
    let name = detail.deployment.name.clone();
    if !json {
        say!("{} {name} is {}", detail.deployment.kind, detail.state);
        if !wait && !has_ended(&detail) {
            say!("follow it with `anycloud wait deployment/{name}` or `anycloud status {name}`");
        }
    }
    if wait {
        let ended = follow(&client, &name, timeout, json).await?;
        if !json {
            say!("{} {name} has ended: {}", ended.deployment.kind, ended.state);
        }
    }
    Ok(OK)
}

/// `anycloud resubmit ID`: runs an ended job again as its next attempt; with `wait`, follows
/// that attempt to its end.
pub async fn resubmit(key: &str, wait: bool, timeout: Duration, json: bool) -> CliResult {
    let client = Client::active()?;
    let detail: DeploymentDetail = client.post_empty(&format!("{}/resubmit", path(key))).await?;
    if json && !wait {
        print_json(&detail);
        return Ok(OK);
    }
    let name = detail.deployment.name.clone();
    if !json {
        let run = detail.deployment.workflow_id.as_deref().unwrap_or("-");
        say!(
            "{} {name} resubmitted as attempt {}: {}; workflow {run}",
            detail.deployment.kind,
            detail.deployment.attempt,
            detail.state
        );
        say_secrets(&detail.deployment.spec.secrets);
        if !wait {
            say!("see it with `anycloud status {name}`, its output with `anycloud logs {name}`");
            return Ok(OK);
        }
    }
    let ended = follow(&client, &name, timeout, json).await?;
    Ok(outcome(&ended, json))
}

/// `anycloud wait deployment/ID`: follows a job to its end (exit 0 completed, 1 ended
/// otherwise), a service until it runs (exit 0) or ends (exit 1: failed, terminated).
pub async fn wait(key: &str, timeout: Duration, json: bool) -> CliResult {
    let client = Client::active()?;
    let settled = follow_until(&client, key, timeout, json, has_settled).await?;
    Ok(outcome(&settled, json))
}

/// Follows the deployment until it has ended ([`follow_until`]).
pub async fn follow(client: &Client, key: &str, timeout: Duration, json: bool) -> Result<DeploymentDetail, CliError> {
    follow_until(client, key, timeout, json, has_ended).await
}

/// Prints one line per change of the deployment's state (with `json`, the detail as one JSON
/// line) until `done` says so, and answers its last detail. Rides out an API restart (up to two
/// minutes unreachable); fails with exit 4 at `timeout`, and with exit 5 as soon as its workflow
/// stops for a person.
pub async fn follow_until(
    client: &Client,
    key: &str,
    timeout: Duration,
    json: bool,
    done: impl Fn(&DeploymentDetail) -> bool,
) -> Result<DeploymentDetail, CliError> {
    let deadline = Instant::now() + timeout;
    let mut shown = String::new();
    let mut state = String::from("unknown");
    let mut outage = Outage::default();
    let progress = Progress::start(format!("deployment {key}"), json);
    loop {
        match client.get::<DeploymentDetail>(&path(key)).await {
            Ok(detail) => {
                progress.above(|| outage.answered(json));
                state.clone_from(&detail.state);
                if change_key(&detail) != shown {
                    shown = change_key(&detail);
                    match json {
                        true => say!("{}", serde_json::to_string(&detail).unwrap_or_default()),
                        false => progress.line(
                            state_tone(&detail.state),
                            &format!("  {}  {}", render::time(anycloud_workflows::now_ms()), state_line(&detail)),
                        ),
                    }
                }
                progress.update(stand(&detail));
                if done(&detail) {
                    return Ok(detail);
                }
                if let Some(run) = detail.workflow.as_ref().filter(|run| run.status == RunStatus::NeedsAttention) {
                    return Err(needs_attention(&detail, run));
                }
            }
            // The API may be restarting: keep trying for a while, saying so once.
            Err(err) => progress.above(|| outage.failed(err, json))?,
        }
        if Instant::now() >= deadline {
            return Err(CliError::new(
                TIMEOUT,
                "TIMEOUT",
                format!(
                    "deployment {key} did not get there within {}; it is still {state}",
                    render::duration(timeout.as_millis() as i64),
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A deployment whose workflow stopped for a person: what to look at and what to run.
fn needs_attention(detail: &DeploymentDetail, run: &WorkflowSummary) -> CliError {
    let name = &detail.deployment.name;
    let id = run.id;
    CliError::new(
        NEEDS_ATTENTION,
        "NEEDS_ATTENTION",
        format!(
            "{} {name}: its workflow {id} needs attention: {}\n`anycloud workflow inspect {id}` shows why; fix the \
             cause, then `anycloud workflow retry {id}` or `anycloud workflow resume {id}`; `anycloud terminate \
             {name}` ends the {}",
            detail.deployment.kind,
            run.status_reason.as_deref().unwrap_or("no reason given"),
            detail.deployment.kind,
        ),
    )
}

/// Where the deployment stands, for a follower's status line.
fn stand(detail: &DeploymentDetail) -> Stand {
    let deployment = &detail.deployment;
    let mut state = detail.state.clone();
    match (&detail.retry, &deployment.reason) {
        (Some(retry), _) => state.push_str(&retry_text(retry)),
        (None, Some(reason)) => state.push_str(&format!(": {reason}")),
        (None, None) => {}
    }
    let run = detail.workflow.as_ref().filter(|_| !has_ended(detail));
    let placed = run.and_then(|run| Some((run.step_number?, run.steps?, run.current_step.clone()?)));
    if let (None, Some(step)) = (&placed, run.and_then(|run| run.current_step.as_deref())) {
        state.push_str(&format!("; step {step}"));
    }
    let attempt = if deployment.is_service() { 0 } else { u32::try_from(deployment.attempt).unwrap_or(0) };
    let subject = format!("{} {}", deployment.kind, deployment.name);
    Stand { subject, step: placed, attempt, state, tone: state_tone(&detail.state) }
}

/// How a deployment's state reads at a glance.
fn state_tone(state: &str) -> Tone {
    match state {
        "completed" | "running" => Tone::Good,
        "failed" | "errored" | "terminated" | "invalid" => Tone::Bad,
        "retrying" | "terminating" => Tone::Waiting,
        _ => Tone::Plain,
    }
}

/// The exit code of a deployment followed to its end (a job: 0 completed; a service: 0 running;
/// 1 any other end), after saying how it stands.
pub fn outcome(detail: &DeploymentDetail, json: bool) -> u8 {
    let deployment = &detail.deployment;
    if !json {
        // The reason names the exit code when there is one; without a reason, say the code.
        let why = match (&deployment.reason, deployment.exit_code) {
            (Some(reason), _) => format!(": {reason}"),
            (None, Some(code)) => format!(" (exit code {code})"),
            (None, None) => String::new(),
        };
        say!("{} {} {}{why}", deployment.kind, deployment.name, detail.state);
    }
    let reached = if deployment.is_service() { Status::Running } else { Status::Completed };
    if deployment.status == reached { OK } else { ENDED_OTHERWISE }
}

/// Nothing runs any more and nothing will without a resubmit.
fn has_ended(detail: &DeploymentDetail) -> bool {
    detail.deployment.status.is_ended() && detail.state != "terminating"
}

/// A job has ended; a service has ended, or runs with no revision in flight (nothing deploying,
/// queued, upgrading or rolling back) and no termination under way.
pub fn has_settled(detail: &DeploymentDetail) -> bool {
    if !detail.deployment.is_service() || has_ended(detail) {
        return has_ended(detail);
    }
    let in_flight = detail
        .revisions
        .iter()
        .any(|revision| !revision.result.is_final() && revision.result != RevisionResult::Running);
    detail.state == "running" && !in_flight
}

/// What a person following the deployment would call a change: its state, attempt, outcome and
/// workflow step, but not the times that move on every poll.
fn change_key(detail: &DeploymentDetail) -> String {
    let deployment = &detail.deployment;
    let retry = detail.retry.as_ref().map(|retry| (retry.attempt, retry.cause.clone()));
    let run = detail.workflow.as_ref().map(|run| (run.status, run.current_step.clone()));
    let revisions: Vec<_> = detail.revisions.iter().map(|revision| (revision.number, revision.result)).collect();
    format!(
        "{} {} {:?} {:?} {:?} {:?} {:?} {revisions:?}",
        detail.state, deployment.attempt, deployment.exit_code, deployment.reason, retry, run, deployment.ended_at
    )
}

/// One line of a follower: the state, and what it waits for or why it retries.
fn state_line(detail: &DeploymentDetail) -> String {
    let deployment = &detail.deployment;
    let mut line = format!("{} {} ({})", deployment.name, detail.state, standing(deployment));
    if let Some(retry) = &detail.retry {
        line.push_str(&retry_text(retry));
    } else if let Some(reason) = &deployment.reason {
        line.push_str(&format!(": {reason}"));
    }
    line
}

/// What runs: a job's attempt, or the revision of a service that serves, and never a revision
/// that does not (a service that deploys, or has ended, serves nothing).
pub(crate) fn standing(deployment: &anycloud_workflows::wire::DeploymentView) -> String {
    if !deployment.is_service() {
        return format!("attempt {}", deployment.attempt);
    }
    match deployment.serving_revision() {
        Some(revision) => format!("revision {revision} serves"),
        None if deployment.status.is_ended() => "nothing serves".to_owned(),
        None => "nothing serves yet".to_owned(),
    }
}

fn retry_text(retry: &anycloud_workflows::wire::RetryState) -> String {
    let cause = retry.cause.as_deref().unwrap_or("no cause given");
    let next = retry.next_at.map(|at| format!("; next try at {}", render::time(at))).unwrap_or_default();
    format!(": {} failed attempt(s), last because {cause}{next}", retry.attempt)
}

fn print_detail(detail: &DeploymentDetail, verbose: bool) {
    let deployment = &detail.deployment;
    let spec = &deployment.spec;
    let now = anycloud_workflows::now_ms();
    say!("{:<10} {}  (id {})", deployment.kind, deployment.name, deployment.id);
    say!("state      {}, {}", detail.state, standing(deployment));
    if let Some(retry) = &detail.retry {
        let next = retry.next_at.map(|at| format!(", next {}", render::relative(at, now))).unwrap_or_default();
        say!("retrying   {} failed attempt(s){next}", retry.attempt);
        say!("           because {}", retry.cause.as_deref().unwrap_or("no cause given"));
    }
    if deployment.status.is_ended()
        && let Some(code) = deployment.exit_code
    {
        say!("exit code  {code}");
    }
    if let Some(reason) = &deployment.reason {
        say!("reason     {reason}");
    }
    say!("cluster    {}", detail.cluster);
    let simulated =
        if detail.simulated { "  (simulated: not pulled; the command runs as a local process)" } else { "" };
    say!("image      {}{simulated}", spec.image);
    say!("command    {}", shell_words(&spec.command));
    let cpus = spec.cpus.as_deref().unwrap_or("cluster default");
    let memory = spec.memory.as_deref().unwrap_or("cluster default");
    say!("resources  cpus {cpus}, memory {memory}");
    if let Some(address) = &detail.address {
        let ip =
            address.cluster_ip.as_deref().map(|ip| format!("  (ClusterIP {ip}:{})", address.port)).unwrap_or_default();
        say!("replicas   {}", deployment.replicas.unwrap_or(1));
        say!("address    {}:{}{ip}", address.dns_name, address.port);
        say!("           cluster-internal only; live Pod health is not shown for cluster-backed services");
    }
    say!("created    {}", render::time(deployment.created_at));
    if let Some(started) = deployment.started_at {
        say!("started    {}", render::time(started));
    }
    if let Some(ended) = deployment.ended_at {
        say!("ended      {}", render::time(ended));
    }
    if verbose {
        let names: Vec<&str> = spec.env.iter().map(|var| var.name.as_str()).collect();
        say!("env        {}", if names.is_empty() { "-".to_owned() } else { names.join(", ") });
        let secrets = described_secrets(&spec.secrets);
        say!("secrets    {}", if secrets.is_empty() { "-".to_owned() } else { secrets });
        say!("namespace  {}", deployment.namespace);
        match deployment.is_service() {
            true => say!("k8s        Deployment and Service {}", deployment.name),
            false => say!("k8s job    {}", deployment.job_name()),
        }
    }
    print_revisions(&detail.revisions);
    if let Some(run) = &detail.workflow {
        let step = run.current_step.as_deref().map(|step| format!(", step {step}")).unwrap_or_default();
        say!("workflow   {} {} ({}{step})", run.kind, run.id, run.status);
        if let Some(reason) = &run.status_reason {
            say!("           {reason}");
        }
        say!("           details: `anycloud workflow inspect {}`", run.id);
    }
}

/// A service's revisions, as a table.
fn print_revisions(revisions: &[anycloud_workflows::wire::RevisionView]) {
    if revisions.is_empty() {
        return;
    }
    say!("revisions");
    let rows: Vec<Vec<String>> = revisions
        .iter()
        .map(|revision| {
            let result = match &revision.reason {
                Some(reason) if revision.result == RevisionResult::Failed => format!("failed: {reason}"),
                _ => revision.result.to_string(),
            };
            vec![
                revision.number.to_string(),
                revision.spec.image.clone(),
                revision.replicas.to_string(),
                render::time(revision.created_at),
                result,
            ]
        })
        .collect();
    // Indented under its heading, header and rows alike.
    for line in render::table_lines(&["REV", "IMAGE", "REPLICAS", "CREATED", "RESULT"], &rows) {
        say!("  {line}");
    }
}

/// Says which secrets, at which versions, a workload just accepted takes (nothing when none).
pub(crate) fn say_secrets(uses: &[anycloud_workflows::db::secrets::SecretUse]) {
    if !uses.is_empty() {
        say!("it takes secret(s) {}", described_secrets(uses));
    }
}

/// The command as a shell would read it back: words quoted only when they need it.
fn shell_words(words: &[String]) -> String {
    let quoted: Vec<String> = words
        .iter()
        .map(|word| {
            let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
            if plain { word.clone() } else { format!("'{}'", word.replace('\'', r"'\''")) }
        })
        .collect();
    quoted.join(" ")
}

#[cfg(test)]
mod tests {
    use super::shell_words;

    #[test]
    fn commands_are_shown_as_a_shell_reads_them() {
        let words = ["sh", "-c", "echo 'hi' there", ""].map(String::from);
        assert_eq!(shell_words(&words), r"sh -c 'echo '\''hi'\'' there' ''");
    }
}
