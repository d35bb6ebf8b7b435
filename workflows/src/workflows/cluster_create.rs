//! `cluster.create`: brings up a cluster's control plane and its fixed capacity.
//!
//! ```text
//! pin_placement -> pin_control_plane -> ensure_network -> ensure_control_plane_network
//!   -> reserve_control_plane_address -> generate_secrets -> launch_control_plane -> wait_for_api
//!   -> launch_workers -> open_node_paths -> wait_for_nodes -> mark_ready
//! ```
//!
//! A control plane apart from the capacity puts the cluster across networks
//! ([`crate::cluster::network`]): its nodes advertise their public addresses, flannel runs
//! WireGuard, and `open_node_paths` lets exactly the nodes' addresses through each side's rules.
//!
//! The `create_cluster` operation writes the cluster's record and this run in one transaction
//! (durable intent first); `pin_placement` then asks the provider where the VMs go. The control
//! plane runs on the hosted API's own credential when the record says so, else with the capacity
//! (see [`crate::cluster::sides`]); the `*_control_plane*` steps then act on that account. Every cloud
//! call is idempotent (see [`crate::cloud`]). On a terminal failure or a cancel the undos run in
//! reverse: they sweep every VM that carries the cluster's tag (so a half-finished launch is found
//! too), wait until the provider reports them gone, release the control plane's reserved
//! address, delete the network rules and forget the secrets; the cluster stays visible as `failed`, with the cause. A step a cancel stopped in
//! flight is undone too. docs/workflows/cluster-create.md describes each step.
//!
//! The control plane is reached at a reserved address (an Elastic IP, a static external address)
//! that survives its VM's stop, start and replacement: its certificate, the workers' join URL,
//! the endpoint and the kubeconfig name it.

use std::time::Duration;

use anycloud_engine::{Check, Effect, Step, StepCtx, StepError, StepKey, Steps, Workflow};
use serde::{Deserialize, Serialize};

use crate::cloud::{Address, Cloud, LaunchSpec, Network, Placement, Role, Vm};
use crate::cluster;
use crate::cluster::network::{NodeAddresses, Openings, Reach};
use crate::cluster::secrets::ClusterSecrets;
use crate::cluster::sides::{Side, Sides};
use crate::db::clusters::{self, Cluster, Phase};
use crate::db::vms;
use crate::workflows::deps::Deps;
use crate::{cluster::user_data, kubernetes, workflows::retry};

/// The workflow, with what its steps need.
pub struct CreateCluster {
    /// Database, sealer, clouds.
    pub deps: Deps,
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

/// What `open_node_paths` opened on each side (addresses, not secrets: `inspect` shows them).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodePaths {
    /// Whether the nodes share one network.
    pub reach: Reach,
    /// The control plane's side.
    pub control_plane: Openings,
    /// The capacity's side, when apart from the control plane's.
    pub capacity: Option<Openings>,
}

/// What `generate_secrets` checkpoints: proof the secrets exist, never the secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SecretsStored {
    /// The CA's subject.
    pub ca: String,
}

/// Where the VMs go, as the provider checked it.
const PIN_PLACEMENT: StepKey<Placement> = StepKey::new("pin_placement");
/// Where the control plane goes, when apart from the capacity.
const PIN_CONTROL_PLANE: StepKey<Option<Placement>> = StepKey::new("pin_control_plane");
/// The cluster's network rules.
const ENSURE_NETWORK: StepKey<Network> = StepKey::new("ensure_network");
/// The control plane's network rules, when apart from the capacity.
const ENSURE_CONTROL_PLANE_NETWORK: StepKey<Option<Network>> = StepKey::new("ensure_control_plane_network");
/// The control plane's stable public address.
const RESERVE_CONTROL_PLANE_ADDRESS: StepKey<Address> = StepKey::new("reserve_control_plane_address");
/// Proof the secrets are stored.
const GENERATE_SECRETS: StepKey<SecretsStored> = StepKey::new("generate_secrets");
/// The control-plane VM as launched.
const LAUNCH_CONTROL_PLANE: StepKey<Vm> = StepKey::new("launch_control_plane");
/// The Kubernetes API endpoint.
const WAIT_FOR_API: StepKey<String> = StepKey::new("wait_for_api");
/// The capacity VMs as launched.
const LAUNCH_WORKERS: StepKey<Vec<Vm>> = StepKey::new("launch_workers");
/// What each side's rules let in once every node's address is known.
const OPEN_NODE_PATHS: StepKey<NodePaths> = StepKey::new("open_node_paths");
/// How many capacity nodes are Ready.
const WAIT_FOR_NODES: StepKey<usize> = StepKey::new("wait_for_nodes");
/// The cluster is marked ready.
const MARK_READY: StepKey<()> = StepKey::new("mark_ready");

impl Workflow for CreateCluster {
    const KIND: &'static str = "cluster.create";
    /// v2: the first step is `pin_placement` (v1 called it `store_intent`); v3: the control
    /// plane's own placement and network (`pin_control_plane`, `ensure_control_plane_network`);
    /// v4: its reserved address (`reserve_control_plane_address`); rules open only the cluster's
    /// own addresses (`open_node_paths`), and a cluster across networks runs WireGuard; v5: the
    /// same steps, but the server is given an agent token and workers join with it, never with
    /// the server token (a v4 run's control plane, launched without one, would admit no v5
    /// worker). A run of an older version is not registered any more: the engine parks it
    /// (`needs-attention`, naming the version) rather than run another step list under it; cancel
    /// it and create the cluster again.
    const VERSION: u32 = 5;
    type Input = CreateInput;
    type Output = CreateOutput;

    fn steps() -> Steps<Self> {
        let cloud = retry::cloud_calls;
        Steps::new()
            .then(
                Step::action(PIN_PLACEMENT, pin_placement)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(pin_placement_undo),
            )
            .then(
                Step::action(PIN_CONTROL_PLANE, pin_control_plane).retry(cloud()).attempt_timeout(retry::CLOUD_ATTEMPT),
            )
            .then(
                Step::action(ENSURE_NETWORK, ensure_network)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(ensure_network_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::action(ENSURE_CONTROL_PLANE_NETWORK, ensure_control_plane_network)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(ensure_control_plane_network_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::action(RESERVE_CONTROL_PLANE_ADDRESS, reserve_control_plane_address)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(reserve_control_plane_address_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(Step::action(GENERATE_SECRETS, generate_secrets).undo(generate_secrets_undo))
            .then(
                Step::action(LAUNCH_CONTROL_PLANE, launch_control_plane)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(launch_control_plane_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(
                Step::poll(WAIT_FOR_API, wait_for_api)
                    .every(Duration::from_secs(2))
                    .timeout(retry::ready_timeout())
                    .attempt_timeout(retry::QUICK_ATTEMPT),
            )
            .then(
                Step::action(LAUNCH_WORKERS, launch_workers)
                    .retry(cloud())
                    .attempt_timeout(retry::CLOUD_ATTEMPT)
                    .undo(launch_workers_undo)
                    .undo_retry(retry::sweeps()),
            )
            .then(Step::action(OPEN_NODE_PATHS, open_node_paths).retry(cloud()).attempt_timeout(retry::CLOUD_ATTEMPT))
            .then(
                Step::poll(WAIT_FOR_NODES, wait_for_nodes)
                    .every(Duration::from_secs(2))
                    .timeout(retry::ready_timeout())
                    .attempt_timeout(retry::QUICK_ATTEMPT),
            )
            .then(Step::action(MARK_READY, mark_ready))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<CreateOutput, StepError> {
        Ok(CreateOutput { endpoint: ctx.output(WAIT_FOR_API)?, ready_nodes: ctx.output(WAIT_FOR_NODES)? })
    }
}

/// The cluster's sides as its steps pinned them (images included, for launches); the record
/// too, for the steps that read it.
async fn sides(ctx: &StepCtx<CreateCluster>) -> Result<(Sides, Cluster), StepError> {
    let cluster = ctx.workflow().deps.cluster(&ctx.input().cluster_id).await?;
    let capacity = Side::open(&ctx.workflow().deps, &cluster.credential, ctx.output(PIN_PLACEMENT)?).await?;
    let control_plane = match (ctx.output(PIN_CONTROL_PLANE)?, cluster.control_plane()) {
        (Some(placement), Some(cp)) => Some(Side::open(&ctx.workflow().deps, &cp.credential, placement).await?),
        _ => None,
    };
    Ok((Sides { capacity, control_plane }, cluster))
}

/// Asks the provider whether the region and machine type exist and where the VMs go (a zone, an
/// image), and marks the cluster `creating`. A placement the provider refuses marks it `failed`
/// at once: this step's own failure has no undo to do it.
async fn pin_placement(ctx: StepCtx<CreateCluster>) -> Result<Placement, StepError> {
    let result: Result<Placement, StepError> = async {
        let cluster = ctx.workflow().deps.cluster(&ctx.input().cluster_id).await?;
        let cloud = ctx.workflow().deps.cloud(&cluster.credential, &cluster.region).await?;
        let placement = cloud.placement(&cluster.id, &cluster.region, &cluster.vm_type).await?;
        clusters::set_network(&ctx.workflow().deps.db, &cluster.id, placement.zone.as_deref(), None).await?;
        clusters::set_phase(&ctx.workflow().deps.db, &cluster.id, Phase::Creating, None).await?;
        Ok(placement)
    }
    .await;
    if let Err(err) = &result
        && err.is_terminal()
    {
        let reason = format!("creation failed: step `pin_placement` failed: {err}; nothing was made at the provider");
        clusters::set_phase(&ctx.workflow().deps.db, &ctx.input().cluster_id, Phase::Failed, Some(&reason)).await?;
    }
    result
}

/// Marks the cluster `failed`, with the cause; it runs last in every unwind.
async fn pin_placement_undo(ctx: StepCtx<CreateCluster>, _placement: Effect<Placement>) -> Result<(), StepError> {
    let reason = failed_reason(ctx.cancelled(), ctx.unwind_reason(), ctx.run_id());
    clusters::set_phase(&ctx.workflow().deps.db, &ctx.input().cluster_id, Phase::Failed, Some(&reason)).await?;
    Ok(())
}

/// The reason a failed cluster shows: what happened and where to look.
fn failed_reason(cancelled: bool, cause: Option<&str>, run: uuid::Uuid) -> String {
    let what = match (cancelled, cause) {
        (true, _) => "creation was cancelled".to_owned(),
        (false, Some(cause)) => format!("creation failed ({cause})"),
        (false, None) => "creation failed".to_owned(),
    };
    format!(
        "{what} and was unwound: nothing is left at the provider; `anycloud workflow inspect {run}` shows every step"
    )
}

/// Asks the hosting account where the control plane goes, when the record puts it there; a
/// refusal fails the create (`pin_placement`'s undo marks the cluster `failed`).
async fn pin_control_plane(ctx: StepCtx<CreateCluster>) -> Result<Option<Placement>, StepError> {
    let cluster = ctx.workflow().deps.cluster(&ctx.input().cluster_id).await?;
    let Some(cp) = cluster.control_plane() else { return Ok(None) };
    let cloud = ctx.workflow().deps.cloud(&cp.credential, &cp.region).await?;
    let placement = cloud.placement(&cluster.id, &cp.region, &cp.vm_type).await?;
    clusters::set_control_plane_zone(&ctx.workflow().deps.db, &cluster.id, placement.zone.as_deref()).await?;
    Ok(Some(placement))
}

/// The capacity's rules: everything between its VMs; in one network, the Kubernetes API from
/// the managing API too (the control plane is on this side). Across networks nothing is let in
/// from outside until `open_node_paths` knows the nodes' addresses.
async fn ensure_network(ctx: StepCtx<CreateCluster>) -> Result<Network, StepError> {
    let (sides, _) = sides(&ctx).await?;
    let Side { placement, cloud } = &sides.capacity;
    let network = cloud.ensure_network(placement).await?;
    let openings = match sides.reach() {
        Reach::OneNetwork => control_plane_openings(&ctx, Reach::OneNetwork, &NodeAddresses::default()),
        Reach::AcrossNetworks => cluster::network::capacity_side(&NodeAddresses::default()),
    };
    cloud.open_network(placement, &openings).await?;
    let db = &ctx.workflow().deps.db;
    clusters::set_network(db, &placement.cluster_id, placement.zone.as_deref(), Some(&network.id)).await?;
    Ok(network)
}

/// Sweeps the VMs (none may use the rules any more), then deletes the rules; found by the
/// cluster's tag, so rules a cut-short attempt made go too.
async fn ensure_network_undo(ctx: StepCtx<CreateCluster>, _network: Effect<Network>) -> Result<(), StepError> {
    let (sides, _) = sides(&ctx).await?;
    sides.sweep(&ctx.workflow().deps).await?;
    let Side { placement, cloud } = &sides.capacity;
    ctx.workflow().deps.remove_network(cloud.as_ref(), placement, "the cluster's").await?;
    clusters::set_network(&ctx.workflow().deps.db, &placement.cluster_id, placement.zone.as_deref(), None).await?;
    Ok(())
}

/// The control plane's own rules when it runs apart from the capacity: everything between the
/// cluster's VMs on its side, and the Kubernetes API from the managing API (`wait_for_api` asks
/// it before any worker exists; `open_node_paths` adds the workers).
async fn ensure_control_plane_network(ctx: StepCtx<CreateCluster>) -> Result<Option<Network>, StepError> {
    let (sides, _) = sides(&ctx).await?;
    let Some(Side { placement, cloud }) = &sides.control_plane else { return Ok(None) };
    let network = cloud.ensure_network(placement).await?;
    let openings = control_plane_openings(&ctx, Reach::AcrossNetworks, &NodeAddresses::default());
    cloud.open_network(placement, &openings).await?;
    Ok(Some(network))
}

/// The control plane's side's openings for this API (its public address when hosted).
fn control_plane_openings(ctx: &StepCtx<CreateCluster>, reach: Reach, nodes: &NodeAddresses<'_>) -> Openings {
    cluster::network::control_plane_side(reach, ctx.workflow().deps.api_address.as_deref(), nodes)
}

async fn ensure_control_plane_network_undo(
    ctx: StepCtx<CreateCluster>,
    _network: Effect<Option<Network>>,
) -> Result<(), StepError> {
    let (sides, _) = sides(&ctx).await?;
    let Some(Side { placement, cloud }) = &sides.control_plane else { return Ok(()) };
    sides.sweep(&ctx.workflow().deps).await?;
    ctx.workflow().deps.remove_network(cloud.as_ref(), placement, "the control plane's").await
}

/// Finds or reserves the control plane's stable public address on its side (tagged or labelled
/// with the cluster and `cp`).
async fn reserve_control_plane_address(ctx: StepCtx<CreateCluster>) -> Result<Address, StepError> {
    let (sides, _) = sides(&ctx).await?;
    let Side { placement, cloud } = sides.control_plane();
    Ok(cloud.ensure_address(placement, "cp").await?)
}

/// Sweeps the VMs (an address in use cannot be released), then releases every address of the
/// cluster on the control plane's side and succeeds once the provider lists none; found by tag,
/// so an address a cut-short attempt reserved goes too.
async fn reserve_control_plane_address_undo(
    ctx: StepCtx<CreateCluster>,
    _address: Effect<Address>,
) -> Result<(), StepError> {
    let (sides, _) = sides(&ctx).await?;
    sides.sweep(&ctx.workflow().deps).await?;
    let Side { placement, cloud } = sides.control_plane();
    ctx.workflow().deps.release_addresses(cloud.as_ref(), placement).await
}

/// Makes the server and agent tokens, the API token and the CA, and stores them sealed. A rerun keeps the
/// secrets a first attempt stored: VMs may already carry them.
async fn generate_secrets(ctx: StepCtx<CreateCluster>) -> Result<SecretsStored, StepError> {
    let input = ctx.input();
    let fresh = ClusterSecrets::generate(&input.name).map_err(StepError::retryable)?;
    let sealed = fresh.seal(&ctx.workflow().deps.sealer, &input.cluster_id).map_err(StepError::terminal)?;
    clusters::keep_secrets(&ctx.workflow().deps.db, &input.cluster_id, &sealed).await?;
    Ok(SecretsStored { ca: format!("anycloud cluster {} CA", input.name) })
}

async fn generate_secrets_undo(ctx: StepCtx<CreateCluster>, _stored: Effect<SecretsStored>) -> Result<(), StepError> {
    clusters::erase_secrets(&ctx.workflow().deps.db, &ctx.input().cluster_id).await?;
    Ok(())
}

async fn launch_control_plane(ctx: StepCtx<CreateCluster>) -> Result<Vm, StepError> {
    let (sides, cluster) = sides(&ctx).await?;
    let Side { placement, cloud } = sides.control_plane();
    let network = match ctx.output(ENSURE_CONTROL_PLANE_NETWORK)? {
        Some(own) => own,
        None => ctx.output(ENSURE_NETWORK)?,
    };
    // The script reads the VM's metadata from the provider it runs on; its certificate names
    // the reserved address.
    let provider = cluster.control_plane().map_or(cluster.provider, |cp| cp.provider);
    let address = ctx.output(RESERVE_CONTROL_PLANE_ADDRESS)?;
    let secrets = ctx.workflow().deps.secrets(&placement.cluster_id).await?;
    let spec = LaunchSpec {
        placement,
        name: "cp".into(),
        role: Role::ControlPlane,
        user_data: user_data::control_plane(provider, sides.reach(), &placement.cluster_id, &address.ip, &secrets),
        token: ctx.idempotency_key(),
        network: &network,
        vm_identity: None,
        reads_secret: false,
        address: Some(&address),
    };
    let vm = cloud.launch(&spec).await?;
    ctx.workflow().deps.after_launch().await;
    vms::upsert(&ctx.workflow().deps.db, &placement.cluster_id, &vm).await?;
    Ok(vm)
}

/// Sweeps every VM with the cluster's tag, the control plane and anything launched after it.
async fn launch_control_plane_undo(ctx: StepCtx<CreateCluster>, _launched: Effect<Vm>) -> Result<(), StepError> {
    sweep_vms(&ctx).await
}

async fn sweep_vms(ctx: &StepCtx<CreateCluster>) -> Result<(), StepError> {
    let (sides, _) = sides(ctx).await?;
    sides.sweep(&ctx.workflow().deps).await
}

/// The control plane as the provider reports it now (its address may arrive after launch).
async fn current_control_plane(cloud: &dyn Cloud, placement: &Placement, launched: Vm) -> Result<Vm, StepError> {
    let live = cloud.list_vms(placement).await?;
    Ok(live.into_iter().find(|vm| vm.provider_id == launched.provider_id).unwrap_or(launched))
}

async fn wait_for_api(ctx: StepCtx<CreateCluster>) -> Result<Check<String>, StepError> {
    let (sides, cluster) = sides(&ctx).await?;
    let Side { placement, cloud } = sides.control_plane();
    let mut cp = current_control_plane(cloud.as_ref(), placement, ctx.output(LAUNCH_CONTROL_PLANE)?).await?;
    let reserved = ctx.output(RESERVE_CONTROL_PLANE_ADDRESS)?;
    if !cloud.attach_address(placement, &reserved, &cp).await? {
        vms::upsert(&ctx.workflow().deps.db, &placement.cluster_id, &cp).await?;
        return Ok(Check::NotYet(format!(
            "control plane VM {} ({}) does not have its reserved address {} yet",
            cp.provider_id, cp.state, reserved.ip
        )));
    }
    // The provider reports the address on the VM (its instance listing may lag behind).
    cp.public_ip = Some(reserved.ip.clone());
    vms::upsert(&ctx.workflow().deps.db, &placement.cluster_id, &cp).await?;
    let address = reserved.ip.as_str();
    let secrets = ctx.workflow().deps.secrets(&placement.cluster_id).await?;
    let endpoint = ctx.workflow().deps.kube_endpoint(cluster.control_plane_provider(), &cp)?;
    let client = kubernetes::client::client(&endpoint, &secrets).map_err(StepError::terminal)?;
    match kubernetes::client::version(&client).await {
        Ok(version) => {
            let endpoint = format!("https://{address}:6443");
            clusters::set_endpoint(&ctx.workflow().deps.db, &placement.cluster_id, Some(&endpoint)).await?;
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
    let (sides, cluster) = sides(&ctx).await?;
    let network = ctx.output(ENSURE_NETWORK)?;
    // The workers join over the control plane's reserved address, which survives its VM's stop,
    // start and replacement (a private address does not survive a replacement) and which its
    // certificate names; a worker checks the cluster's CA.
    let server = ctx.output(RESERVE_CONTROL_PLANE_ADDRESS)?.ip;
    let Side { placement, cloud } = &sides.capacity;
    let secrets = ctx.workflow().deps.secrets(&placement.cluster_id).await?;
    if secrets.agent_token.is_empty() {
        // Secrets made before agent tokens: the control plane was never given one, and a worker
        // is never given the server token.
        return Err(StepError::terminal_msg(format!(
            "cluster {}'s secrets have no agent token (they were made by an older anycloud): delete the cluster \
             and create it again",
            cluster.name
        )));
    }
    let mut workers = Vec::new();
    for index in 0..cluster.min_vms {
        let name = format!("w{index}");
        let join = user_data::Join {
            cluster_id: &placement.cluster_id,
            vm_name: &name,
            server_address: &server,
            reach: sides.reach(),
        };
        let spec = LaunchSpec {
            placement,
            user_data: user_data::worker(cluster.provider, &join, &secrets),
            name,
            role: Role::Worker,
            // One token per VM, stable across attempts: the step's key names the VM too.
            token: uuid::Uuid::new_v5(&ctx.idempotency_key(), &index.to_le_bytes()),
            network: &network,
            vm_identity: None,
            reads_secret: false,
            address: None,
        };
        let vm = cloud.launch(&spec).await?;
        ctx.workflow().deps.after_launch().await;
        vms::upsert(&ctx.workflow().deps.db, &placement.cluster_id, &vm).await?;
        workers.push(vm);
    }
    Ok(workers)
}

/// Sweeps every VM with the cluster's tag (the sweep of the control plane's undo, which comes
/// next, then finds none).
async fn launch_workers_undo(ctx: StepCtx<CreateCluster>, _launched: Effect<Vec<Vm>>) -> Result<(), StepError> {
    sweep_vms(&ctx).await
}

/// Lets exactly the nodes' public addresses through each side's rules: the Kubernetes API from
/// every worker (they join the control plane's reserved address) and, across networks, WireGuard
/// between every node. The control plane's address is its reserved one (an instance listing may
/// still show its first, ephemeral one); a worker without its public address yet is retried.
async fn open_node_paths(ctx: StepCtx<CreateCluster>) -> Result<NodePaths, StepError> {
    let (sides, _) = sides(&ctx).await?;
    let reach = sides.reach();
    let reserved = ctx.output(RESERVE_CONTROL_PLANE_ADDRESS)?;
    let live = sides.list_vms().await?;
    let mut nodes = NodeAddresses { control_plane: Some(&reserved.ip), workers: Vec::new() };
    for vm in live.iter().filter(|vm| vm.role == Role::Worker) {
        let address = vm.public_ip.as_deref().ok_or_else(|| {
            StepError::retryable_msg(format!("VM {} ({}) has no public address yet", vm.name, vm.provider_id))
        })?;
        nodes.workers.push(address);
    }
    let control_plane = control_plane_openings(&ctx, reach, &nodes);
    let cp_side = sides.control_plane();
    cp_side.cloud.open_network(&cp_side.placement, &control_plane).await?;
    let capacity = match &sides.control_plane {
        Some(_) => {
            let openings = cluster::network::capacity_side(&nodes);
            sides.capacity.cloud.open_network(&sides.capacity.placement, &openings).await?;
            Some(openings)
        }
        None => None,
    };
    Ok(NodePaths { reach, control_plane, capacity })
}

async fn wait_for_nodes(ctx: StepCtx<CreateCluster>) -> Result<Check<usize>, StepError> {
    let (sides, cluster) = sides(&ctx).await?;
    let wanted = cluster.min_vms as usize;
    let live = sides.list_vms().await?;
    for vm in &live {
        vms::upsert(&ctx.workflow().deps.db, &cluster.id, vm).await?;
    }
    let launched = ctx.output(LAUNCH_CONTROL_PLANE)?;
    let cp = live.iter().find(|vm| vm.provider_id == launched.provider_id).cloned().unwrap_or(launched);
    let secrets = ctx.workflow().deps.secrets(&cluster.id).await?;
    let endpoint = ctx.workflow().deps.kube_endpoint(cluster.control_plane_provider(), &cp)?;
    let client = kubernetes::client::client(&endpoint, &secrets).map_err(StepError::terminal)?;
    let nodes = match kubernetes::client::nodes(&client).await {
        Ok(nodes) => nodes,
        Err(err) => return Ok(Check::NotYet(format!("listing nodes: {}", anycloud_engine::error_chain(&err)))),
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
    clusters::set_phase(&ctx.workflow().deps.db, &ctx.input().cluster_id, Phase::Ready, None).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_cluster_says_why_and_where_to_look() {
        let run = uuid::Uuid::nil();
        let failed = failed_reason(false, Some("step `launch_workers` failed: quota of 2 VMs"), run);
        assert_eq!(
            failed,
            "creation failed (step `launch_workers` failed: quota of 2 VMs) and was unwound: nothing is left at the \
             provider; `anycloud workflow inspect 00000000-0000-0000-0000-000000000000` shows every step"
        );
        assert!(failed_reason(true, Some("cancelled by an operator"), run).starts_with("creation was cancelled and"));
    }

    #[test]
    fn every_step_name_is_its_key() {
        let keys = [
            PIN_PLACEMENT.name(),
            PIN_CONTROL_PLANE.name(),
            ENSURE_NETWORK.name(),
            ENSURE_CONTROL_PLANE_NETWORK.name(),
            RESERVE_CONTROL_PLANE_ADDRESS.name(),
            GENERATE_SECRETS.name(),
            LAUNCH_CONTROL_PLANE.name(),
            WAIT_FOR_API.name(),
            LAUNCH_WORKERS.name(),
            OPEN_NODE_PATHS.name(),
            WAIT_FOR_NODES.name(),
            MARK_READY.name(),
        ];
        let documented = include_str!("../../../docs/workflows/cluster-create.md");
        for key in keys {
            assert!(
                documented.contains(&format!("`{key}`")),
                "docs/workflows/cluster-create.md does not describe `{key}`"
            );
        }
    }
}
