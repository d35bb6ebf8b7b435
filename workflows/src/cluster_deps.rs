//! What the cluster workflows' steps share: the database, the sealer, the simulated cloud, and
//! the few operations both `cluster.create` and `cluster.delete` perform.

use anycloud_engine::StepError;
use anycloud_engine::store::Pool;

use crate::cloud::{Cloud, CloudError, Placement, Vm};
use crate::cluster_secrets::ClusterSecrets;
use crate::clusters::{self, Cluster};
use crate::providers::account;
use crate::providers::sim::SimCloud;
use crate::secrets::SecretBox;

/// Dependencies of the cluster workflows.
#[derive(Clone)]
pub struct ClusterDeps {
    /// The API's database.
    pub pool: Pool,
    /// Seals and opens credentials and cluster secrets.
    pub sealer: SecretBox,
    /// The simulated cloud.
    pub sim: SimCloud,
    /// Test seams; all off in production.
    pub seams: TestSeams,
}

/// What tests may change in how the cluster workflows reach the world. The API reads them from
/// the environment at start (docs/operations.md lists the variables); every one is off by default.
#[derive(Clone, Debug, Default)]
pub struct TestSeams {
    /// `ANYCLOUD_KUBE_URL_OVERRIDE`: the URL of a stand-in Kubernetes API for every cluster, for
    /// clouds whose VMs cannot boot here (moto, the fake Compute server). The Kubernetes calls
    /// themselves are the production ones.
    pub kube_url: Option<String>,
    /// `ANYCLOUD_TEST_PAUSE_AFTER_LAUNCH_MS`: a pause between a launch call's answer and the
    /// end of its step, so that a crash test can kill the API between the two.
    pub pause_after_launch: Option<std::time::Duration>,
}

impl TestSeams {
    /// The seams the environment asks for.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        Self {
            kube_url: var("ANYCLOUD_KUBE_URL_OVERRIDE"),
            pause_after_launch: var("ANYCLOUD_TEST_PAUSE_AFTER_LAUNCH_MS")
                .and_then(|ms| ms.parse().ok())
                .map(std::time::Duration::from_millis),
        }
    }
}

impl ClusterDeps {
    /// The cluster record; its absence is terminal (the record is written with the run).
    pub async fn cluster(&self, id: &str) -> Result<Cluster, StepError> {
        clusters::get(&self.pool, id)
            .await?
            .ok_or_else(|| StepError::terminal_msg(format!("cluster {id} has no record; it cannot be acted on")))
    }

    /// The cloud account of `credential`.
    pub async fn cloud(&self, credential: &str, region: &str) -> Result<Box<dyn Cloud>, CloudError> {
        account::open(&self.pool, &self.sealer, &self.sim, credential, region).await
    }

    /// Where the Kubernetes API of the cluster whose control plane is `cp` answers.
    pub fn kube_url(&self, cloud: &dyn Cloud, cp: &Vm) -> String {
        self.seams.kube_url.clone().unwrap_or_else(|| cloud.kube_url(cp))
    }

    /// After a launch call answered (the crash-test seam; nothing in production).
    pub async fn after_launch(&self) {
        if let Some(pause) = self.seams.pause_after_launch {
            tracing::warn!(?pause, "test seam: pausing between a launch and its checkpoint");
            tokio::time::sleep(pause).await;
        }
    }

    /// The cluster's secrets, opened.
    pub async fn secrets(&self, cluster_id: &str) -> Result<ClusterSecrets, StepError> {
        let sealed = clusters::sealed_secrets(&self.pool, cluster_id)
            .await?
            .ok_or_else(|| StepError::terminal_msg(format!("cluster {cluster_id} has no secrets")))?;
        ClusterSecrets::open(&self.sealer, &sealed).map_err(StepError::terminal)
    }

    /// Terminates every VM that carries the cluster's tag and succeeds once the provider lists
    /// none; until then it fails (retryably) with how many are left. Records what it sees.
    pub async fn sweep(&self, cloud: &dyn Cloud, placement: &Placement) -> Result<(), StepError> {
        let live = cloud.list_vms(placement).await?;
        for vm in &live {
            clusters::upsert_vm(&self.pool, &placement.cluster_id, vm).await?;
        }
        clusters::mark_gone_vms(&self.pool, &placement.cluster_id, &live).await?;
        if live.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = live.iter().map(|vm| vm.provider_id.clone()).collect();
        cloud.terminate(placement, &ids).await?;
        let left = cloud.list_vms(placement).await?;
        clusters::mark_gone_vms(&self.pool, &placement.cluster_id, &left).await?;
        if left.is_empty() {
            return Ok(());
        }
        Err(StepError::retryable_msg(format!(
            "asked the provider to terminate {} VM(s) ({}); waiting until it lists none",
            ids.len(),
            ids.join(", ")
        )))
    }
}
