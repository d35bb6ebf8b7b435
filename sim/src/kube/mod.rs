//! The Kubernetes-compatible API of simulated control planes, at `/sim/kube/{control-plane VM
//! id}/`. The real kube client and `kubectl` talk to it exactly as they talk to k3s: a bearer
//! token (the one the control plane's user-data installs), discovery, and Kubernetes' own
//! object shapes and `Status` errors.
//!
//! What is simulated, file by file:
//!
//! - [`auth`]: which control plane a request is for, and its token, checked before anything
//!   else answers; [`body_limit`]: bodies of at most 3 MiB, as the apiserver's.
//! - [`store`]: objects (namespaces, Jobs, Pods, Deployments, ReplicaSets, Services, Endpoints,
//!   Secrets, Events) kept in SQL (`sim_kube_objects`; where: [`storage`]), with
//!   uids, a monotonic `resourceVersion` per cluster and `generation`s.
//! - [`objects`]: get, list (label and `metadata.name` field selectors), create, replace,
//!   patch, the `/status` subresource, delete with propagation, and watch (by polling the
//!   store).
//! - [`discovery`] and [`tables`]: what `kubectl` needs to find resources and print them
//!   (legacy and aggregated discovery, with or without a trailing slash).
//! - [`openapi`] and [`schemas`]: the OpenAPI v3 and v2 documents of the served kinds,
//!   generated from `k8s_openapi`'s schemas; kubectl validates (server-side, once it finds
//!   `fieldValidation`), explains and computes apply patches with them.
//! - [`negotiation`], [`protobuf`], [`fields`] and [`patches`]: media types in and out (JSON
//!   out, to clients that accept protobuf too; JSON, YAML and the served kinds' protobuf bodies
//!   in; 406/415 for the rest), `fieldValidation`
//!   (`Strict`, `Warn`, `Ignore`), and the four patch types (apply, merge, strategic merge,
//!   JSON patch).
//! - [`nodes`]: a node is what a booted VM would register: the control plane itself, and every
//!   running VM whose user-data joins this control plane's address with its join token, with
//!   every field a kubelet reports (`nodeInfo` complete). Where
//!   the VMs come from is a [`Machines`]: the simulated cloud's own, or (in tests) another
//!   provider's instances that cannot boot here (moto's, the fake Compute server's).
//! - [`secrets`]: Secrets as the apiserver stores and checks them (`stringData` merged into
//!   `data`, config keys, 1 MiB, `kubernetes.io/dockerconfigjson`, an immutable `type`);
//!   [`garbage`]: the garbage collector, which deletes any object whose `ownerReferences`
//!   owners are all gone (ReplicaSets of a deleted Deployment, their Pods, a Job's Secret).
//! - [`jobs`]: the Job controller (one Pod per Job attempt, status and conditions as Kubernetes
//!   1.34 reports them); [`scheduler`]: taints and tolerations, then the Pods' `cpu` and `memory`
//!   requests ([`quantities`]) against each node's allocatable, the least-loaded node that fits;
//!   a Pod that fits nowhere is `Unschedulable` with kube-scheduler's message and a
//!   `FailedScheduling` event, counted rather than repeated as [`events`] counts every
//!   repeated event.
//! - [`deployments`] and [`replicasets`]: the Deployment controller (a ReplicaSet per pod
//!   template, revisions, `RollingUpdate` with `maxSurge`/`maxUnavailable`, `Recreate`,
//!   `progressDeadlineSeconds`, rollback by reusing an old template's ReplicaSet) and the
//!   ReplicaSet controller; both Job and ReplicaSet Pods are made from their owner's template by
//!   [`templates`].
//! - [`kubelet`] and [`process`]: each container's `command` + `args` runs as a local process
//!   in the Pod's scratch directory `{kubelet dir}/{pod uid}/`, detached in its own process
//!   group, so that it survives the API that started it; [`reconcile`] finds it again.
//!   Containers of `restartPolicy: Always` Pods restart with the kubelet's back-off
//!   (`CrashLoopBackOff`); [`probes`] says when a container is ready (a TCP connect to its port,
//!   or its `readinessProbe`), and what a failed check saw (an `Unhealthy` event). Before a
//!   container starts, [`images`] "pulls" its image (a host the simulated account marks private
//!   needs a registry secret among the Pod's `imagePullSecrets`: else `ErrImagePull`,
//!   `ImagePullBackOff`) and [`container_env`] makes its environment (`env`, `envFrom`,
//!   `secretKeyRef`; a missing Secret or key: `CreateContainerConfigError`).
//! - [`network`], [`endpoints`], [`cluster_ips`], [`proxies`] and [`proxy`]: each Pod has a
//!   loopback address (`127.42.0.0/16`) and a free host port per declared container port, given
//!   to it as `PORT`; each ClusterIP Service has a loopback cluster IP (`127.43.0.0/16`) on which
//!   the cluster's kube-proxy, a process of its own that outlives the API, listens and forwards
//!   TCP connections to the ready endpoints, round robin; Pods get the Services'
//!   `{NAME}_SERVICE_HOST`/`_PORT` variables.
//! - [`logs`] and [`exec`]: `pods/log` (with `follow`) and `pods/exec` (WebSocket,
//!   `v5.channel.k8s.io` and `v4.channel.k8s.io`).
//!
//! What is not: no image is pulled (a container's `image` is recorded and shown as
//! `sim://not-pulled/{image}`; only the need for credentials is simulated, and no image is
//! cached on a node), a command runs on the host with the API's user and file system
//! (no isolation, no cgroups: `resources.requests` place Pods, limits are never enforced), no
//! ConfigMaps, volumes or Secret volumes, and there is no network
//! namespace per Pod: every Pod shares the host's, so an app must listen on `$PORT` (its host
//! port) for two replicas to run side by side, and Endpoints list `podIP:hostPort` where a real
//! cluster lists `podIP:containerPort`. Services are ClusterIP only (a `NodePort` or
//! `LoadBalancer` Service is served as ClusterIP; TCP only; no EndpointSlices, no DNS names: Pods
//! find Services by their environment variables); while the API is away a Service forwards to the
//! endpoints it last had (the proxy reads no new ones). Deployments are not paused
//! and scale proportionally only through their newest ReplicaSet; probes run every pass (250 ms)
//! rather than every `periodSeconds`; `logs --previous` is not simulated. Answers are JSON only
//! (clients that accept protobuf accept JSON too); protobuf bodies are read for the fields a
//! client sets on creating the served kinds, CBOR not at all; OpenAPI v2 is served as JSON only (kubectl reads v3),
//! `dryRun` is refused, `deletecollection` is not served, and server-side apply replaces the
//! top-level fields it is sent rather than merging field ownership. There is one fake
//! Kubernetes: the simulated cloud's and the tests' of clusters on moto and on the fake Compute
//! server.

mod auth;
pub mod body_limit;
mod cluster_ips;
mod container_env;
mod defaults;
mod deployments;
mod discovery;
mod endpoints;
mod events;
mod exec;
mod exits;
mod fields;
mod garbage;
mod images;
mod jobs;
mod kubelet;
mod label_index;
mod logs;
mod negotiation;
mod network;
mod nodes;
mod objects;
mod openapi;
mod patches;
mod probes;
mod process;
mod protobuf;
mod proxies;
mod proxy;
mod quantities;
mod reconcile;
mod replicasets;
mod resources;
mod scheduler;
mod schemas;
mod secrets;
mod selectors;
mod status;
mod storage;
mod store;
mod tables;
mod templates;
mod time;
pub mod tls;
mod validation;
mod watch;

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use axum::routing::{any, get};

pub use process::kill_processes_under;
pub use proxies::ProxyCommand;
pub use proxy::run as run_proxy;
pub use storage::{OBJECTS_FILE, Storage, StorageError};

/// A VM as the simulated Kubernetes sees it: what its kubelet, or the server on it, would know.
#[derive(Debug, Clone)]
pub struct Machine {
    /// The provider's id.
    pub id: String,
    /// Its name within its cluster (`cp`, `w0`, ...).
    pub name: String,
    /// It is the cluster's control plane.
    pub control_plane: bool,
    /// The provider's state, in its words.
    pub state: String,
    /// It runs now.
    pub running: bool,
    /// What it booted with.
    pub user_data: String,
    /// Private address.
    pub private_ip: Option<String>,
    /// Public address.
    pub public_ip: Option<String>,
    /// Its node reports Ready (it has run long enough, and is not told never to).
    pub node_ready: bool,
    /// The image registry hosts its kubelet finds private (the simulated account's
    /// `private_registries`; a control plane's stand for its whole cluster).
    pub private_registries: Vec<String>,
}

/// Where the simulated Kubernetes finds VMs.
#[async_trait]
pub trait Machines: Send + Sync + 'static {
    /// The VM with this provider id, whatever its state.
    async fn machine(&self, id: &str) -> Result<Option<Machine>, String>;
    /// Every VM that runs now.
    async fn running(&self) -> Result<Vec<Machine>, String>;
}

/// What every handler and the reconcile loop share.
pub(crate) struct Kube {
    pub(crate) machines: Arc<dyn Machines>,
    pub(crate) store: store::Store,
    pub(crate) kubelet: kubelet::Kubelet,
    pub(crate) proxies: proxies::Proxies,
    pub(crate) seeded: auth::Seeded,
    pub(crate) events: events::Reported,
    /// Keeps a temporary [`Storage`]'s directory for as long as the API lives.
    _storage: Storage,
}

impl Kube {
    fn new(machines: Arc<dyn Machines>, storage: Storage, proxy: ProxyCommand) -> Self {
        Self {
            machines,
            store: store::Store::new(storage.pool().clone(), storage.reader().clone()),
            kubelet: kubelet::Kubelet::new(storage.kubelet_dir().to_owned()),
            proxies: proxies::Proxies::new(storage.kubelet_dir(), proxy),
            seeded: auth::Seeded::new(),
            events: events::Reported::default(),
            _storage: storage,
        }
    }
}

/// The shared state of the routes.
pub(crate) type Shared = axum::extract::State<Arc<Kube>>;

/// The routes, to merge into the router of the API that hosts them (they do their own
/// authentication, with each cluster's own token, before anything else answers). Building them starts the reconcile loop
/// (Job controller and kubelet) on the current tokio runtime; it stops when the routes are
/// dropped. Each cluster's Services are served by a kube-proxy process that `proxy` starts. Must
/// be called within a tokio runtime.
pub fn router(machines: Arc<dyn Machines>, storage: Storage, proxy: ProxyCommand) -> Router {
    let kube = Arc::new(Kube::new(machines, storage, proxy));
    reconcile::start(&kube);
    let at = |path: &str| format!("/sim/kube/{{vm}}{path}");
    let one = || get(objects::get).put(objects::replace).patch(objects::patch).delete(objects::delete);
    let status = || get(objects::get_status).put(objects::replace_status).patch(objects::patch_status);
    Router::new()
        .route(&at("/version"), get(discovery::version))
        .route(&at("/version/"), get(discovery::version))
        .route(&at("/api"), get(discovery::api))
        .route(&at("/api/"), get(discovery::api))
        .route(&at("/api/v1"), get(discovery::core_v1))
        .route(&at("/api/v1/"), get(discovery::core_v1))
        .route(&at("/apis"), get(discovery::groups))
        .route(&at("/apis/"), get(discovery::groups))
        .route(&at("/apis/{group}/{version}"), get(discovery::group_version))
        .route(&at("/apis/{group}/{version}/"), get(discovery::group_version))
        .route(&at("/openapi/v2"), get(openapi::v2))
        .route(&at("/openapi/v3"), get(openapi::v3_index))
        .route(&at("/openapi/v3/"), get(openapi::v3_index))
        .route(&at("/openapi/v3/{*group_version}"), get(openapi::v3_group_version))
        .route(&at("/api/v1/nodes"), get(nodes::list))
        .route(&at("/api/v1/nodes/{name}"), get(nodes::get))
        .route(&at("/api/v1/{resource}"), get(objects::list).post(objects::create))
        .route(&at("/api/v1/{resource}/{name}"), one())
        .route(&at("/api/v1/{resource}/{name}/status"), status())
        .route(&at("/api/v1/namespaces/{namespace}/{resource}"), get(objects::list).post(objects::create))
        .route(&at("/api/v1/namespaces/{namespace}/{resource}/{name}"), one())
        .route(&at("/api/v1/namespaces/{namespace}/{resource}/{name}/status"), status())
        .route(&at("/api/v1/namespaces/{namespace}/pods/{name}/log"), get(logs::log))
        .route(&at("/api/v1/namespaces/{namespace}/pods/{name}/exec"), get(exec::exec).post(exec::exec))
        .route(&at("/apis/{group}/{version}/{resource}"), get(objects::list))
        .route(
            &at("/apis/{group}/{version}/namespaces/{namespace}/{resource}"),
            get(objects::list).post(objects::create),
        )
        .route(&at("/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}"), one())
        .route(&at("/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}/status"), status())
        .route(&at(""), any(discovery::not_found))
        .route(&at("/"), any(discovery::not_found))
        .route(&at("/{*rest}"), any(discovery::not_found))
        .method_not_allowed_fallback(discovery::method_not_allowed)
        .layer(axum::middleware::from_fn(negotiation::refuse_unacceptable))
        .layer(axum::middleware::from_fn(body_limit::bounded))
        .layer(axum::extract::DefaultBodyLimit::max(body_limit::MAX_BODY_BYTES))
        // Outermost: the token before anything else (404, 405, 406, 413, a bad path) answers.
        .layer(axum::middleware::from_fn_with_state(kube.clone(), auth::token_first))
        .with_state(kube)
}
