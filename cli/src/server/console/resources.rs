//! The console's pages of one cluster and of one deployment: where each stands, what it is made
//! of, the run that made it, and the buttons that end it; a job's logs follow live.

use std::fmt::Write as _;

use anycloud_workflows::operations::Operations;
use anycloud_workflows::refusal::OperationError;
use anycloud_workflows::wire::{DeploymentDetail, WorkflowSummary};

use super::html::{escape, link, relative, state, table};

/// A definition list of (term, HTML) pairs.
fn facts(pairs: &[(&str, String)]) -> String {
    let mut html = String::from("<dl class=\"facts\">");
    for (term, value) in pairs {
        let _ = write!(html, "<dt>{}</dt><dd>{value}</dd>", escape(term));
    }
    html.push_str("</dl>");
    html
}

fn run_link(run: Option<&WorkflowSummary>) -> String {
    match run {
        Some(run) => format!(
            "{} {} {}",
            link(&format!("/ui/workflows/{}", run.id), &run.kind),
            state(run.status.as_str()),
            escape(run.status_reason.as_deref().unwrap_or(""))
        ),
        None => "none".to_owned(),
    }
}

/// A form that posts `action` with the session's token, after a confirmation.
fn button(action: &str, label: &str, question: &str, csrf: &str) -> String {
    format!(
        r#"<div class="actions"><form method="post" action="{}" data-confirm="{}"><input type="hidden" name="csrf" value="{}"><button type="submit" class="danger">{}</button></form></div>"#,
        escape(action),
        escape(question),
        escape(csrf),
        escape(label)
    )
}

/// One cluster: phase, capacity, placement, its VMs with their provider ids and addresses, the
/// run that made it (or changes it), and Delete.
pub async fn cluster(ops: &Operations, name: &str, csrf: &str) -> Result<String, OperationError> {
    let detail = ops.cluster_status(name).await?;
    let cluster = &detail.cluster;
    let now = anycloud_workflows::now_ms();
    let mut html = facts(&[
        ("Phase", format!("{} {}", state(cluster.phase.as_str()), escape(cluster.reason.as_deref().unwrap_or("")))),
        ("Capacity", escape(&format!("{} of {} VMs running", detail.running_vms, detail.desired_vms))),
        (
            "Where",
            escape(&format!(
                "{} {} {} (credential {})",
                cluster.provider, cluster.region, cluster.vm_type, cluster.credential
            )),
        ),
        ("Workflow", run_link(detail.workflow.as_ref())),
        ("Last error", escape(detail.last_error.as_deref().unwrap_or("none"))),
    ]);
    if cluster.phase.as_str() != "deleted" && cluster.phase.as_str() != "deleting" {
        let question = format!("Delete cluster {}? Its VMs and network are removed.", cluster.name);
        html.push_str(&button(&format!("/ui/clusters/{}/delete", cluster.name), "Delete cluster", &question, csrf));
    }
    let vms: Vec<Vec<String>> = detail
        .vms
        .iter()
        .map(|vm| {
            vec![
                escape(&vm.name),
                escape(&vm.role),
                state(&vm.state),
                format!("<code>{}</code>", escape(&vm.provider_id)),
                escape(vm.private_ip.as_deref().unwrap_or("")),
                escape(vm.public_ip.as_deref().unwrap_or("")),
                escape(&relative(vm.updated_at, now)),
            ]
        })
        .collect();
    html.push_str(&table(
        "VMs",
        &["Name", "Role", "State", "Provider id", "Private address", "Public address", "Seen"],
        &vms,
        "No VM yet.",
    ));
    Ok(html)
}

/// One deployment: state, what it runs (environment names only), its cluster, its run, a
/// service's revisions, a job's logs (following live), and Terminate.
pub async fn deployment(ops: &Operations, id: &str, csrf: &str) -> Result<(String, String), OperationError> {
    let detail = ops.deployment_status(id).await?;
    let deployment = &detail.deployment;
    let kind = if deployment.kind.as_str() == "service" { "Service" } else { "Job" };
    let env: Vec<&str> = deployment.spec.env.iter().map(|var| var.name.as_str()).collect();
    let secrets: Vec<&str> = deployment.spec.secrets.iter().map(|secret| secret.name.as_str()).collect();
    let mut html = facts(&[
        ("State", format!("{} {}", state(&detail.state), escape(deployment.reason.as_deref().unwrap_or("")))),
        ("Cluster", link(&format!("/ui/clusters/{}", detail.cluster), &detail.cluster)),
        ("Image", format!("<code>{}</code>", escape(&deployment.spec.image))),
        ("Command", format!("<code>{}</code>", escape(&deployment.spec.command.join(" ")))),
        ("Environment", escape(&if env.is_empty() { "none".to_owned() } else { env.join(", ") })),
        ("Secrets", escape(&if secrets.is_empty() { "none".to_owned() } else { secrets.join(", ") })),
        ("Workflow", run_link(detail.workflow.as_ref())),
    ]);
    if !matches!(detail.state.as_str(), "terminated" | "completed" | "failed") {
        let question = format!("Terminate {}? Its Kubernetes objects are deleted.", deployment.name);
        html.push_str(&button(&format!("/ui/deployments/{}/terminate", deployment.id), "Terminate", &question, csrf));
    }
    html.push_str(&revisions(&detail));
    if kind == "Job" {
        let _ = write!(
            html,
            r#"<section><h2>Logs</h2><pre id="logs" class="logs" data-keep data-follow="/ui/deployments/{}/logs" aria-live="polite" tabindex="0"></pre></section>"#,
            escape(&deployment.id)
        );
    }
    Ok((format!("{kind} {}", deployment.name), html))
}

fn revisions(detail: &DeploymentDetail) -> String {
    if detail.revisions.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = detail
        .revisions
        .iter()
        .rev()
        .map(|revision| {
            vec![
                escape(&revision.number.to_string()),
                state(revision.result.as_str()),
                format!("<code>{}</code>", escape(&revision.spec.image)),
                escape(&revision.replicas.to_string()),
                escape(revision.reason.as_deref().unwrap_or("")),
            ]
        })
        .collect();
    table("Revisions, newest first", &["Revision", "Result", "Image", "Replicas", "Why"], &rows, "")
}
