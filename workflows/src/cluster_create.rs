//! `cluster.create`: brings up a cluster's control plane and its fixed capacity.
//!
//! ```text
//! store_intent -> ensure_network -> generate_secrets -> launch_control_plane -> wait_for_api
//!   -> launch_workers -> wait_for_nodes -> mark_ready
//! ```
//!
//! The API writes the cluster record and this run in one transaction (durable intent first);
//! `store_intent` then pins the provider's placement. Every cloud call is idempotent (see
//! [`crate::cloud`]). On a terminal failure or a cancel the undos run in reverse: they sweep every
//! VM that carries the cluster's tag (so a half-finished launch is found too), wait until the
//! provider reports them gone, delete the network rules and forget the secrets; the cluster
//! stays visible as `failed`. docs/workflows/cluster-create.md describes each step.

use std::time::Duration;

use anycloud_engine::{Check, OnExhausted, RetryPolicy, Step, StepCtx, StepError, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::cloud::{Cloud, LaunchSpec, Network, Placement, Role, Vm};
use crate::cluster_deps::ClusterDeps;
use crate::cluster_secrets::ClusterSecrets;
use crate::clusters::{self, Cluster, Phase};
use crate::{kube_api, user_data};

/// The workflow, with what its steps need.
pub struct CreateCluster {
    /// Database, sealer, simulated cloud.
    pub deps: ClusterDeps,
}

/// Which cluster to create (its spec is in its record).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateInput {
    /// The cluster's id.
    pub cluster_id: String,
    /// Its name (for people reading `inspect`).
    pub name: String,
}

/// What a created cluster has.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CreateOutput {
    /// Its Kubernetes API endpoint.
    pub endpoint: String,
    /// Ready capacity nodes.
    pub ready_nodes: usize,
}

/// What `generate_secrets` checkpoints: proof the secrets exist, never the secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SecretsStored {
    /// The CA's subject.
    pub ca: String,
}

impl Workflow for CreateCluster {
    const KIND: &'static str = "cluster.create";
    const VERSION: u32 = 1;
    type Input = CreateInput;
    type Output = CreateOutput;

    fn steps() -> Steps<Self> {
        let cloud = cloud_retry();
        Steps::new()
            .then(Step::action("store_intent", store_intent).retry(cloud.clone()).undo(mark_failed))
            .then(
                Step::action("ensure_network", ensure_network)
                    .retry(cloud.clone())
                    .undo(sweep_and_delete_network)
                    .undo_retry(sweep_retry()),
            )
            .then(Step::action("generate_secrets", generate_secrets).undo(erase_secrets))
            .then(
                Step::action("launch_control_plane", launch_control_plane)
                    .retry(cloud.clone())
                    .undo(sweep_vms)
                    .undo_retry(sweep_retry()),
            )
            .then(Step::poll("wait_for_api", wait_for_api).every(Duration::from_secs(2)).timeout(ready_timeout()))
            .then(
                Step::action("launch_workers", launch_workers)
                    .retry(cloud.clone())
                    .undo(sweep_vms)
                    .undo_retry(sweep_retry()),
            )
            .then(Step::poll("wait_for_nodes", wait_for_nodes).every(Duration::from_secs(2)).timeout(ready_timeout()))
            .then(Step::action("mark_ready", mark_ready))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<CreateOutput, StepError> {
        Ok(CreateOutput { endpoint: ctx.output("wait_for_api")?, ready_nodes: ctx.output("wait_for_nodes")? })
    }
}

/// Cloud calls: back off from 1 s to 30 s, 8 attempts within 10 min, then park for an operator.
pub fn cloud_retry() -> RetryPolicy {
    RetryPolicy {
        initial_delay: Duration::from_secs(1),
        multiplier: 2.0,
        max_delay: Duration::from_secs(30),
        jitter: 0.2,
        max_attempts: Some(8),
        max_elapsed: Some(Duration::from_secs(10 * 60)),
        on_exhausted: OnExhausted::Park,
    }
}

/// Sweeps wait for VMs to go: every 1-5 s for up to 15 min, then park.
pub fn sweep_retry() -> RetryPolicy {
    RetryPolicy {
        initial_delay: Duration::from_secs(1),
        multiplier: 1.5,
        max_delay: Duration::from_secs(5),
        jitter: 0.1,
        max_attempts: Some(300),
        max_elapsed: Some(Duration::from_secs(15 * 60)),
        on_exhausted: OnExhausted::Park,
    }
}

/// How long the Kubernetes API and the nodes may take: `ANYCLOUD_CLUSTER_READY_TIMEOUT_SECS`,
/// 15 minutes by default.
pub fn ready_timeout() -> Duration {
    let secs = std::env::var("ANYCLOUD_CLUSTER_READY_TIMEOUT_SECS").ok().and_then(|s| s.parse().ok());
    Duration::from_secs(secs.unwrap_or(15 * 60))
}

async fn record(ctx: &StepCtx<CreateCluster>) -> Result<Cluster, StepError> {
    ctx.workflow().deps.cluster(&ctx.input().cluster_id).await
}

/// The pinned placement and the cloud account; the record too, for the steps that read it.
async fn placement_and_cloud(ctx: &StepCtx<CreateCluster>) -> Result<(Placement, Box<dyn Cloud>, Cluster), StepError> {
    let placement: Placement = ctx.output("store_intent")?;
    let cluster = record(ctx).await?;
    let cloud = ctx.workflow().deps.cloud(&cluster.credential, &placement.region).await?;
    Ok((placement, cloud, cluster))
}

async fn store_intent(ctx: StepCtx<CreateCluster>) -> Result<Placement, StepError> {
    let result = pin_placement(&ctx).await;
    if let Err(err) = &result
        && err.is_terminal()
    {
        // The first step has no completed step whose undo would mark the record: do it here.
        mark_failed(ctx.clone(), ()).await?;
    }
    result
}

async fn pin_placement(ctx: &StepCtx<CreateCluster>) -> Result<Placement, StepError> {
    let deps = &ctx.workflow().deps;
    let cluster = record(ctx).await?;
    let cloud = deps.cloud(&cluster.credential, &cluster.region).await?;
    let placement = cloud.placement(&cluster.id, &cluster.region, &cluster.vm_type).await?;
    clusters::set_network(&deps.pool, &cluster.id, placement.zone.as_deref(), None).await?;
    clusters::set_phase(&deps.pool, &cluster.id, Phase::Creating, None).await?;
    Ok(placement)
}

async fn mark_failed<T: Send + 'static>(ctx: StepCtx<CreateCluster>, _placement: T) -> Result<(), StepError> {
    let reason = format!(
        "creation failed and was unwound: nothing is left at the provider; `anycloud workflow inspect {}` shows why",
        ctx.run_id()
    );
    clusters::set_phase(&ctx.workflow().deps.pool, &ctx.input().cluster_id, Phase::Failed, Some(&reason)).await?;
    Ok(())
}

async fn ensure_network(ctx: StepCtx<CreateCluster>) -> Result<Network, StepError> {
    let (placement, cloud, _) = placement_and_cloud(&ctx).await?;
    let network = cloud.ensure_network(&placement).await?;
    clusters::set_network(
        &ctx.workflow().deps.pool,
        &placement.cluster_id,
        placement.zone.as_deref(),
        Some(&network.id),
    )
    .await?;
    Ok(network)
}

async fn sweep_and_delete_network(ctx: StepCtx<CreateCluster>, _network: Network) -> Result<(), StepError> {
    let (placement, cloud, _) = placement_and_cloud(&ctx).await?;
    ctx.workflow().deps.sweep(cloud.as_ref(), &placement).await?;
    cloud.delete_network(&placement).await?;
    if cloud.network_exists(&placement).await? {
        return Err(StepError::retryable_msg("the provider still lists the cluster's network rules"));
    }
    clusters::set_network(&ctx.workflow().deps.pool, &placement.cluster_id, placement.zone.as_deref(), None).await?;
    Ok(())
}

async fn sweep_vms<T: Send + 'static>(ctx: StepCtx<CreateCluster>, _launched: T) -> Result<(), StepError> {
    let (placement, cloud, _) = placement_and_cloud(&ctx).await?;
    ctx.workflow().deps.sweep(cloud.as_ref(), &placement).await
}

async fn generate_secrets(ctx: StepCtx<CreateCluster>) -> Result<SecretsStored, StepError> {
    let deps = &ctx.workflow().deps;
    let input = ctx.input();
    // A rerun keeps the secrets a first attempt stored: VMs may already carry them.
    let fresh = ClusterSecrets::generate(&input.name).map_err(StepError::retryable)?;
    let sealed = fresh.seal(&deps.sealer).map_err(StepError::terminal)?;
    clusters::keep_secrets(&deps.pool, &input.cluster_id, &sealed).await?;
    Ok(SecretsStored { ca: format!("anycloud cluster {} CA", input.name) })
}

async fn erase_secrets(ctx: StepCtx<CreateCluster>, _stored: SecretsStored) -> Result<(), StepError> {
    clusters::erase_secrets(&ctx.workflow().deps.pool, &ctx.input().cluster_id).await?;
    Ok(())
}

async fn launch_control_plane(ctx: StepCtx<CreateCluster>) -> Result<Vm, StepError> {
    let deps = &ctx.workflow().deps;
    let (placement, cloud, _) = placement_and_cloud(&ctx).await?;
    let network: Network = ctx.output("ensure_network")?;
    let secrets = deps.secrets(&placement.cluster_id).await?;
    let spec = LaunchSpec {
        placement: &placement,
        name: "cp".into(),
        role: Role::ControlPlane,
        user_data: user_data::control_plane(&placement.cluster_id, &secrets),
        token: ctx.idempotency_key(),
        network: &network,
    };
    let vm = cloud.launch(&spec).await?;
    deps.after_launch().await;
    clusters::upsert_vm(&deps.pool, &placement.cluster_id, &vm).await?;
    Ok(vm)
}

/// The control plane as the provider reports it now (its address may arrive after launch).
async fn current_control_plane(cloud: &dyn Cloud, placement: &Placement, launched: &Vm) -> Result<Vm, StepError> {
    let live = cloud.list_vms(placement).await?;
    Ok(live.into_iter().find(|vm| vm.provider_id == launched.provider_id).unwrap_or_else(|| launched.clone()))
}

async fn wait_for_api(ctx: StepCtx<CreateCluster>) -> Result<Check<String>, StepError> {
    let deps = &ctx.workflow().deps;
    let (placement, cloud, _) = placement_and_cloud(&ctx).await?;
    let launched: Vm = ctx.output("launch_control_plane")?;
    let cp = current_control_plane(cloud.as_ref(), &placement, &launched).await?;
    clusters::upsert_vm(&deps.pool, &placement.cluster_id, &cp).await?;
    let Some(address) = cp.address() else {
        return Ok(Check::NotYet(format!("control plane VM {} ({}) has no address yet", cp.provider_id, cp.state)));
    };
    let secrets = deps.secrets(&placement.cluster_id).await?;
    let client = kube_api::client(&deps.kube_url(cloud.as_ref(), &cp), &secrets).map_err(StepError::terminal)?;
    match kube_api::version(&client).await {
        Ok(version) => {
            let endpoint = format!("https://{address}:6443");
            clusters::set_endpoint(&deps.pool, &placement.cluster_id, Some(&endpoint)).await?;
            tracing::info!(cluster = %ctx.input().name, %endpoint, %version, "Kubernetes API answers");
            Ok(Check::Ready(endpoint))
        }
        Err(err) => Ok(Check::NotYet(format!(
            "control plane VM {} ({}): Kubernetes API does not answer yet: {}",
            cp.provider_id,
            cp.state,
            anycloud_engine::error_chain(&err)
        ))),
    }
}

async fn launch_workers(ctx: StepCtx<CreateCluster>) -> Result<Vec<Vm>, StepError> {
    let deps = &ctx.workflow().deps;
    let (placement, cloud, cluster) = placement_and_cloud(&ctx).await?;
    let network: Network = ctx.output("ensure_network")?;
    let launched: Vm = ctx.output("launch_control_plane")?;
    let cp = current_control_plane(cloud.as_ref(), &placement, &launched).await?;
    let server = cp.private_ip.clone().or(cp.public_ip.clone()).ok_or_else(|| {
        StepError::retryable_msg(format!("control plane VM {} has no address to join", cp.provider_id))
    })?;
    let secrets = deps.secrets(&placement.cluster_id).await?;
    let mut workers = Vec::new();
    for index in 0..cluster.min_vms {
        let name = format!("w{index}");
        let spec = LaunchSpec {
            placement: &placement,
            user_data: user_data::worker(&placement.cluster_id, &name, &server, &secrets),
            name,
            role: Role::Worker,
            // One token per VM, stable across attempts: the step's key names the VM too.
            token: uuid::Uuid::new_v5(&ctx.idempotency_key(), &index.to_le_bytes()),
            network: &network,
        };
        let vm = cloud.launch(&spec).await?;
        deps.after_launch().await;
        clusters::upsert_vm(&deps.pool, &placement.cluster_id, &vm).await?;
        workers.push(vm);
    }
    Ok(workers)
}

async fn wait_for_nodes(ctx: StepCtx<CreateCluster>) -> Result<Check<usize>, StepError> {
    let deps = &ctx.workflow().deps;
    let (placement, cloud, cluster) = placement_and_cloud(&ctx).await?;
    let launched: Vm = ctx.output("launch_control_plane")?;
    let wanted = cluster.min_vms as usize;
    let live = cloud.list_vms(&placement).await?;
    for vm in &live {
        clusters::upsert_vm(&deps.pool, &placement.cluster_id, vm).await?;
    }
    let cp = live.iter().find(|vm| vm.provider_id == launched.provider_id).cloned().unwrap_or(launched);
    let secrets = deps.secrets(&placement.cluster_id).await?;
    let client = kube_api::client(&deps.kube_url(cloud.as_ref(), &cp), &secrets).map_err(StepError::terminal)?;
    let nodes = match kube_api::nodes(&client).await {
        Ok(nodes) => nodes,
        Err(err) => {
            return Ok(Check::NotYet(format!("listing nodes: {}", anycloud_engine::error_chain(&err))));
        }
    };
    let ready = nodes.iter().filter(|node| node.ready && !node.control_plane).count();
    if ready >= wanted {
        Ok(Check::Ready(ready))
    } else {
        let joined = nodes.iter().filter(|node| !node.control_plane).count();
        Ok(Check::NotYet(format!("{ready} of {wanted} capacity nodes Ready ({joined} joined)")))
    }
}

async fn mark_ready(ctx: StepCtx<CreateCluster>) -> Result<(), StepError> {
    clusters::set_phase(&ctx.workflow().deps.pool, &ctx.input().cluster_id, Phase::Ready, None).await?;
    Ok(())
}
