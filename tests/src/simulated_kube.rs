//! The simulated cloud's Kubernetes API ([`anycloud_sim::kube`]), served by a test for clusters
//! whose VMs cannot boot here: moto's instances and the fake Compute server's run no cloud-init.
//! Its nodes are the provider's own running instances whose user-data joins the control plane,
//! exactly as for the simulated cloud's VMs; its token is the one the control plane's user-data
//! installs. The API under test reaches it through the seam `ANYCLOUD_TEST_SIMULATED_KUBE`
//! (the `anycloud-seamed` binary), the workflows in-process through `TestSeams::simulated_kube`;
//! the kube client calls are the production ones.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anycloud_sim::kube::{Machine, Machines, Storage};
use anycloud_workflows::cloud::{CLUSTER_TAG, NAME_TAG, ROLE_TAG};
use async_trait::async_trait;
use aws_sdk_ec2::types::{Filter, Instance, InstanceAttributeName};
use base64::Engine as _;
use serde_json::Value;

use crate::fake_gce::FakeGce;

/// The running server.
pub struct SimulatedKube {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    listings: Arc<AtomicUsize>,
    kubelet_dir: std::path::PathBuf,
    /// The thread whose runtime serves it and runs its reconcile loop.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SimulatedKube {
    /// Serves the simulated Kubernetes of `machines` on a free port of 127.0.0.1, in a thread and
    /// runtime of its own (the tests that start it are synchronous).
    pub fn start(machines: impl Machines) -> Self {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("binding the simulated Kubernetes");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("its address");
        let listings = Arc::new(AtomicUsize::new(0));
        let counted: Arc<dyn Machines> = Arc::new(Counted { machines, listings: listings.clone() });
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let (kubelet_dir_tx, kubelet_dir_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("simulated-kube".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("the simulated Kubernetes's runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    let storage = Storage::temporary().await.expect("its storage");
                    let _ = kubelet_dir_tx.send(storage.kubelet_dir().to_owned());
                    let app = anycloud_sim::kube::router(counted, storage, crate::e2e::kube_proxy());
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stop => {}
                    }
                });
                // Every task ends with the runtime, the reconcile loop too: after this, nothing
                // starts a Pod's process again.
                runtime.shutdown_timeout(std::time::Duration::from_secs(2));
            })
            .expect("spawning the simulated Kubernetes");
        let kubelet_dir = kubelet_dir_rx.recv().expect("the simulated Kubernetes's storage");
        Self { addr, shutdown: Some(shutdown), listings, kubelet_dir, thread: Some(thread) }
    }

    /// The base URL to pass as the seam: a cluster's API is this, then `/` and its control plane's
    /// provider id.
    pub fn base_url(&self) -> String {
        format!("http://{}/sim/kube", self.addr)
    }

    /// How many times the server looked for running machines (a node list).
    pub fn listings(&self) -> usize {
        self.listings.load(Ordering::SeqCst)
    }
}

impl Drop for SimulatedKube {
    /// Stops the server and its reconcile loop, then its Pods' processes and kube-proxies, in that
    /// order: killed first, a Pod's process could be started again by a loop still running.
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        anycloud_sim::kube::kill_processes_under(&self.kubelet_dir);
    }
}

/// Counts the listings of another source.
struct Counted<M> {
    machines: M,
    listings: Arc<AtomicUsize>,
}

#[async_trait]
impl<M: Machines> Machines for Counted<M> {
    async fn machine(&self, id: &str) -> Result<Option<Machine>, String> {
        self.machines.machine(id).await
    }

    async fn running(&self) -> Result<Vec<Machine>, String> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        self.machines.running().await
    }
}

/// The instances moto holds, through an EC2 client of the test's own.
pub struct MotoMachines {
    ec2: aws_sdk_ec2::Client,
}

impl MotoMachines {
    /// moto at `endpoint`, in `region`.
    pub fn new(endpoint: &str, region: &str) -> Self {
        Self { ec2: crate::e2e::moto_ec2(endpoint, region) }
    }

    async fn machines(&self, filters: Vec<Filter>) -> Result<Vec<Machine>, String> {
        let output =
            self.ec2.describe_instances().set_filters(Some(filters)).send().await.map_err(|e| e.to_string())?;
        let mut machines = Vec::new();
        for instance in output.reservations().iter().flat_map(|r| r.instances()) {
            machines.push(self.machine_of(instance).await?);
        }
        Ok(machines)
    }

    async fn machine_of(&self, instance: &Instance) -> Result<Machine, String> {
        let id = instance.instance_id().unwrap_or_default().to_owned();
        let attribute = self
            .ec2
            .describe_instance_attribute()
            .instance_id(&id)
            .attribute(InstanceAttributeName::UserData)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let encoded = attribute.user_data().and_then(|v| v.value()).unwrap_or_default();
        let user_data = base64::engine::general_purpose::STANDARD.decode(encoded).map_err(|e| e.to_string())?;
        let tag = |key: &str| instance.tags().iter().find(|t| t.key() == Some(key)).and_then(|t| t.value());
        let state = instance.state().and_then(|s| s.name()).map(|s| s.as_str().to_owned()).unwrap_or_default();
        Ok(Machine {
            name: tag(NAME_TAG).unwrap_or(&id).to_owned(),
            control_plane: tag(ROLE_TAG) == Some("control-plane"),
            running: state == "running",
            state,
            user_data: String::from_utf8_lossy(&user_data).into_owned(),
            private_ip: instance.private_ip_address().map(str::to_owned),
            public_ip: instance.public_ip_address().map(str::to_owned),
            // moto's instances run at once; their nodes would be Ready as soon as they join.
            node_ready: true,
            private_registries: Vec::new(),
            id,
        })
    }
}

fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

#[async_trait]
impl Machines for MotoMachines {
    async fn machine(&self, id: &str) -> Result<Option<Machine>, String> {
        Ok(self.machines(vec![filter("instance-id", id)]).await?.into_iter().next())
    }

    async fn running(&self) -> Result<Vec<Machine>, String> {
        let tagged = Filter::builder().name("tag-key").values(CLUSTER_TAG).build();
        self.machines(vec![tagged, filter("instance-state-name", "running")]).await
    }
}

/// The instances of one project of the fake Compute server.
pub struct GceMachines {
    fake: Arc<FakeGce>,
    project: String,
}

impl GceMachines {
    /// The instances of `project` at `fake`.
    pub fn new(fake: Arc<FakeGce>, project: &str) -> Self {
        Self { fake, project: project.to_owned() }
    }

    fn all(&self) -> Vec<Machine> {
        self.fake
            .instances(&self.project)
            .iter()
            .filter(|i| i["labels"][CLUSTER_TAG].is_string())
            .map(machine)
            .collect()
    }
}

/// An instance as `instances.get` renders it, as the simulated Kubernetes sees it.
fn machine(instance: &Value) -> Machine {
    let text = |value: &Value| value.as_str().map(str::to_owned);
    let user_data = instance["metadata"]["items"]
        .as_array()
        .and_then(|items| items.iter().find(|item| item["key"] == "startup-script"))
        .and_then(|item| text(&item["value"]))
        .unwrap_or_default();
    let nic = &instance["networkInterfaces"][0];
    let state = text(&instance["status"]).unwrap_or_default();
    Machine {
        id: text(&instance["id"]).unwrap_or_else(|| instance["id"].to_string()),
        name: text(&instance["labels"][NAME_TAG]).or_else(|| text(&instance["name"])).unwrap_or_default(),
        control_plane: instance["labels"][ROLE_TAG] == "control-plane",
        running: state == "RUNNING",
        state,
        user_data,
        private_ip: text(&nic["networkIP"]),
        public_ip: text(&nic["accessConfigs"][0]["natIP"]),
        node_ready: true,
        private_registries: Vec::new(),
    }
}

#[async_trait]
impl Machines for GceMachines {
    async fn machine(&self, id: &str) -> Result<Option<Machine>, String> {
        Ok(self.all().into_iter().find(|machine| machine.id == id))
    }

    async fn running(&self) -> Result<Vec<Machine>, String> {
        Ok(self.all().into_iter().filter(|machine| machine.running).collect())
    }
}

/// The machines of two providers as one: a cluster whose control plane runs on the hosted API's
/// provider and whose capacity runs on another is one simulated Kubernetes.
pub struct BothMachines<A, B>(pub A, pub B);

#[async_trait]
impl<A: Machines, B: Machines> Machines for BothMachines<A, B> {
    async fn machine(&self, id: &str) -> Result<Option<Machine>, String> {
        match self.0.machine(id).await? {
            Some(machine) => Ok(Some(machine)),
            None => self.1.machine(id).await,
        }
    }

    async fn running(&self) -> Result<Vec<Machine>, String> {
        let mut running = self.0.running().await?;
        running.extend(self.1.running().await?);
        Ok(running)
    }
}
