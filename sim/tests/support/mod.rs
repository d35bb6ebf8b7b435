//! A simulated cluster for the tests: a control plane and two Ready workers whose user-data is
//! the domain's own, the simulated Kubernetes served on a loopback port over a temporary SQLite
//! database and kubelet directory, and clients for it (the domain's kube client, kubectl).

#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anycloud_engine::Store;
use anycloud_sim::kube::{Machine, Machines, ProxyCommand, Storage};
use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::cluster::network::Reach;
use anycloud_workflows::cluster::secrets::ClusterSecrets;
use anycloud_workflows::cluster::user_data;
use anycloud_workflows::db::Db;
use anycloud_workflows::kubernetes;
use async_trait::async_trait;
use serde_json::Value;

/// The control plane's provider id: the cluster's API is at `/sim/kube/sim-cp`.
pub const CONTROL_PLANE: &str = "sim-cp";

/// One control plane and two Ready workers, always running.
pub struct Fixed {
    machines: std::sync::Mutex<Vec<Machine>>,
}

fn machine(id: &str, name: &str, control_plane: bool, user_data: String, ip: &str) -> Machine {
    Machine {
        id: id.into(),
        name: name.into(),
        control_plane,
        state: "running".into(),
        running: true,
        user_data,
        private_ip: Some(ip.into()),
        public_ip: None,
        node_ready: true,
        private_registries: Vec::new(),
    }
}

#[async_trait]
impl Machines for Fixed {
    async fn machine(&self, id: &str) -> Result<Option<Machine>, String> {
        Ok(self.machines.lock().unwrap().iter().find(|m| m.id == id).cloned())
    }

    async fn running(&self) -> Result<Vec<Machine>, String> {
        Ok(self.machines.lock().unwrap().iter().filter(|m| m.running).cloned().collect())
    }
}

/// The simulated cluster, and the API that serves it (which can be stopped and started again
/// on the same database and kubelet directory, as an API restart would).
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub secrets: ClusterSecrets,
    db: Db,
    machines: Arc<Fixed>,
    server: Option<Server>,
}

/// A running API: plain HTTP and HTTPS with a certificate of the cluster's CA, both as the
/// anycloud API serves them (`anycloud_sim::kube::tls`, as k3s serves it): kubectl sends its
/// token over TLS only.
struct Server {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    url: String,
    tls_url: String,
}

impl Drop for Cluster {
    /// The Pods' processes and the kube-proxy outlive the API, as they should, but not the test.
    fn drop(&mut self) {
        anycloud_sim::kube::kill_processes_under(&self.kubelet_dir());
    }
}

impl Cluster {
    /// A cluster whose API is up.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::sqlite(&dir.path().join("api.db")).await.unwrap();
        let db = Db::open(&store).await.unwrap();
        let secrets = ClusterSecrets::generate("jobs").unwrap();
        let script = user_data::control_plane(ProviderKind::Sim, Reach::OneNetwork, "c1", "10.0.0.1", &secrets);
        let cp = machine(CONTROL_PLANE, "cp", true, script, "10.0.0.1");
        let workers = ["w0", "w1"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let join = user_data::Join {
                    cluster_id: "c1",
                    vm_name: name,
                    server_address: "10.0.0.1",
                    reach: Reach::OneNetwork,
                };
                let user_data = user_data::worker(ProviderKind::Sim, &join, &secrets);
                machine(&format!("sim-{name}"), name, false, user_data, &format!("10.0.1.{}", i + 2))
            })
            .collect::<Vec<_>>();
        let machines = Arc::new(Fixed { machines: std::sync::Mutex::new([vec![cp], workers].concat()) });
        let mut cluster = Self { dir, secrets, db, machines, server: None };
        cluster.serve().await;
        cluster
    }

    /// Starts the API (its routes and reconcile loop) on a new port.
    pub async fn serve(&mut self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let url = format!("http://{}/sim/kube/{CONTROL_PLANE}", listener.local_addr().unwrap());
        let router = anycloud_sim::kube::router(
            self.machines.clone(),
            Storage::open(&self.db, self.kubelet_dir()).await.unwrap(),
            ProxyCommand::new(env!("CARGO_BIN_EXE_sim-kube-proxy"), Vec::<String>::new()),
        );
        let tls_listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let tls_url = format!("https://{}/sim/kube/{CONTROL_PLANE}", tls_listener.local_addr().unwrap());
        let tls = tokio::spawn(anycloud_sim::kube::tls::serve(tls_listener, router.clone(), self.machines.clone()));
        let plain = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        self.server = Some(Server { tasks: vec![plain, tls], url, tls_url });
    }

    /// Stops the API as if it died: its routes and reconcile loop go, its Pods' processes stay.
    pub async fn kill_api(&mut self) {
        if let Some(server) = self.server.take() {
            for task in server.tasks {
                task.abort();
                let _ = task.await;
            }
        }
        // The loop notices on its next tick that its routes are gone.
        tokio::time::sleep(Duration::from_millis(600)).await;
    }

    /// Marks image registry hosts private, as the simulated account's `private_registries`
    /// setting does (on the control plane, whose setting stands for the cluster).
    pub fn set_private_registries(&self, hosts: &[&str]) {
        for machine in self.machines.machines.lock().unwrap().iter_mut() {
            machine.private_registries = hosts.iter().map(|host| (*host).to_owned()).collect();
        }
    }

    /// Terminates every VM of the cluster, as `cluster delete` does.
    pub fn terminate_vms(&self) {
        for machine in self.machines.machines.lock().unwrap().iter_mut() {
            machine.state = "terminated".into();
            machine.running = false;
        }
    }

    pub fn kubelet_dir(&self) -> PathBuf {
        self.dir.path().join("sim-kubelet")
    }

    /// The cluster's API URL.
    pub fn url(&self) -> String {
        self.server.as_ref().map(|server| server.url.clone()).unwrap()
    }

    /// The domain's kube client for it.
    pub fn client(&self) -> kube::Client {
        kubernetes::client::client(&kubernetes::KubeEndpoint::url(self.url()), &self.secrets).unwrap()
    }

    /// A kubeconfig for kubectl (HTTPS, trusting the cluster's CA), in the cluster's directory.
    pub fn kubeconfig(&self) -> PathBuf {
        let path = self.dir.path().join("kubeconfig");
        let ca = self.dir.path().join("ca.crt");
        std::fs::write(&ca, &self.secrets.ca_cert_pem).unwrap();
        let server = self.server.as_ref().map(|server| server.tls_url.clone()).unwrap();
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {server}\n    certificate-authority: {}\n    tls-server-name: {}\nusers:\n- name: sim\n  user:\n    token: {}\ncontexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim\n    namespace: default\ncurrent-context: sim\n",
            ca.display(),
            anycloud_sim::kube::tls::server_name(CONTROL_PLANE),
            self.secrets.api_token
        );
        std::fs::write(&path, config).unwrap();
        path
    }
}

/// A Job that runs `script` under `sh -c` once (`restartPolicy: Never`, `backoffLimit: 0`).
pub fn job(name: &str, script: &str, env: &[(&str, &str)]) -> k8s_openapi::api::batch::v1::Job {
    let env: Vec<Value> = env.iter().map(|(name, value)| serde_json::json!({ "name": name, "value": value })).collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": name },
        "spec": {
            "backoffLimit": 0,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script], "env": env }],
            } },
        },
    }))
    .unwrap()
}

/// Waits up to `seconds` for `check` to give a value.
pub async fn eventually<T, F, Fut>(seconds: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a process runs (a zombie does not count).
pub fn process_runs(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).map(str::to_owned))
        .is_some_and(|state| state != "Z" && state != "X")
}

/// Fails the test when kubectl is missing: it is required, never skipped.
pub fn require_kubectl() {
    let found = std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(found, "kubectl is required for this test (scripts/test installs Debian's kubernetes-client)");
}

/// Runs kubectl (off the test's runtime threads) and returns (exit code, stdout, stderr).
pub async fn kubectl(config: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let mut command = std::process::Command::new("kubectl");
    command.arg("--kubeconfig").arg(config).args(args);
    let output = tokio::task::spawn_blocking(move || command.output()).await.unwrap().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// Runs kubectl and returns its output; fails the test if it fails.
pub async fn kubectl_succeeds(config: &std::path::Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = kubectl(config, args).await;
    assert_eq!(code, 0, "kubectl {args:?} failed:\n{stdout}\n{stderr}");
    stdout
}
