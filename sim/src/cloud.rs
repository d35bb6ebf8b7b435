//! The simulated cloud: its state, kept beside the API's in the same database (tables
//! `sim_api_calls`, `sim_vms`, `sim_networks`), so that its VMs and injected faults survive API
//! restarts like a real cloud's would; its VMs' user-data is sealed there (`crate::vms`). Everything it returns says it is simulated, and its public
//! addresses are from TEST-NET-3 (203.0.113.0/24).

use std::sync::Arc;

use anycloud_engine::{Pool, with_pool};
use anycloud_workflows::cloud::CloudError;
use anycloud_workflows::db::Db;
use anycloud_workflows::kubernetes::KubeEndpoint;
use anycloud_workflows::now_ms;
use anycloud_workflows::secrets::SecretBox;

use crate::kube::{Machine, Machines};
use crate::opened::OpenedUserData;
use crate::vms::{SELECT_VMS, SHUTDOWN_MS, SimVm, SimVmRow};

/// A transient failure of the simulated cloud.
#[derive(Debug, thiserror::Error)]
#[error("simulated cloud: 503 Service Unavailable (injected fault on call {call})")]
pub struct Unavailable {
    pub(crate) call: u32,
}

/// A failure of the simulated cloud's own bookkeeping.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// An injected transient fault.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    /// Its state could not be read or written.
    #[error("simulated cloud state")]
    State(#[from] sqlx::Error),
}

impl From<SimError> for CloudError {
    fn from(err: SimError) -> Self {
        CloudError::retryable("simulated cloud", &err)
    }
}

/// The simulated cloud, on the API's database.
#[derive(Clone, Debug)]
pub struct SimCloud {
    db: Db,
    /// The API's sealer, which seals its VMs' user-data, and the user-data it opened.
    user_data: Arc<OpenedUserData>,
    api_url: String,
    kubelet_dir: std::path::PathBuf,
    /// Where its control planes' APIs answer over TLS, when they do.
    kube_tls: Option<String>,
}

impl SimCloud {
    /// The simulated cloud whose state lives in the API's database, "hosted" by the API at
    /// `api_url` (its control planes' Kubernetes APIs are served under `{api_url}/sim/kube/`).
    /// Its VMs' user-data is sealed with `sealer`, the API's own (the one its database's secrets
    /// are sealed with). Its Pods' files go to the system's temporary directory unless
    /// [`with_kubelet_dir`](Self::with_kubelet_dir) says where.
    pub fn new(db: Db, sealer: SecretBox, api_url: impl Into<String>) -> Self {
        let kubelet_dir = std::env::temp_dir().join("anycloud-sim-kubelet");
        let user_data = Arc::new(OpenedUserData::new(sealer));
        Self { db, user_data, api_url: api_url.into(), kubelet_dir, kube_tls: None }
    }

    pub(crate) fn sealer(&self) -> &SecretBox {
        self.user_data.sealer()
    }

    /// Keeps its Pods' scratch directories and logs under `dir` (the API host passes
    /// `{data dir}/sim-kubelet`).
    pub fn with_kubelet_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.kubelet_dir = dir.into();
        self
    }

    /// Where its clusters' Kubernetes keeps its objects and Pods' files, for
    /// [`crate::kube::router`] (see [`crate::kube::Storage::open`]).
    pub async fn kube_storage(&self) -> Result<crate::kube::Storage, crate::kube::StorageError> {
        crate::kube::Storage::open(&self.db, &self.kubelet_dir).await
    }

    pub(crate) fn pool(&self) -> &Pool {
        self.db.pool()
    }

    /// Serves its control planes' Kubernetes APIs over TLS at `base` (`https://127.0.0.1:PORT`,
    /// where [`crate::kube::tls::serve`] listens), as k3s does, rather than over the hosting API's
    /// plain HTTP.
    pub fn with_kube_tls(mut self, base: impl Into<String>) -> Self {
        self.kube_tls = Some(base.into());
        self
    }

    /// Where the Kubernetes API of the simulated control plane `vm` answers.
    pub(crate) fn kube_endpoint(&self, vm: &str) -> KubeEndpoint {
        match &self.kube_tls {
            Some(base) => KubeEndpoint {
                url: format!("{}/sim/kube/{vm}", base.trim_end_matches('/')),
                tls_server_name: Some(crate::kube::tls::server_name(vm)),
            },
            None => KubeEndpoint::url(format!("{}/sim/kube/{vm}", self.api_url.trim_end_matches('/'))),
        }
    }

    /// Counts a call to `account` and returns its number (1 for the first).
    pub(crate) async fn count_call(&self, account: &str) -> Result<u32, sqlx::Error> {
        let calls: i64 = with_pool!(self.pool(), |pool| {
            sqlx::query_scalar(
                "INSERT INTO sim_api_calls (account, calls) VALUES ($1, 1) \
                 ON CONFLICT (account) DO UPDATE SET calls = sim_api_calls.calls + 1 RETURNING calls",
            )
            .bind(account)
            .fetch_one(pool)
            .await
        })?;
        Ok(calls as u32)
    }

    /// Every simulated VM of every account that is not terminated, for the simulated
    /// Kubernetes API and for tests that check what the "provider" holds. Read from the reader
    /// pool, as its other reads: the simulated API asks on every request and every pass.
    pub async fn live_vms(&self) -> Result<Vec<SimVm>, sqlx::Error> {
        let now = now_ms();
        let rows: Vec<SimVmRow> = with_pool!(self.db.reader(), |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "{SELECT_VMS} WHERE terminated_at IS NULL OR terminated_at > $1 ORDER BY launched_at, id"
            )))
            .bind(now - SHUTDOWN_MS)
            .fetch_all(pool)
            .await
        })?;
        Ok(rows.into_iter().map(|row| row.into_vm(now)).collect())
    }

    /// One simulated VM by id, whatever its state.
    pub async fn vm(&self, id: &str) -> Result<Option<SimVm>, sqlx::Error> {
        let row: Option<SimVmRow> = with_pool!(self.db.reader(), |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_VMS} WHERE id = $1")))
                .bind(id)
                .fetch_optional(pool)
                .await
        })?;
        Ok(row.map(|row| row.into_vm(now_ms())))
    }

    /// How many network rules of any account are not deleted (for tests).
    pub async fn live_networks(&self) -> Result<i64, sqlx::Error> {
        with_pool!(self.pool(), |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM sim_networks WHERE deleted_at IS NULL").fetch_one(pool).await
        })
    }
}

#[async_trait::async_trait]
impl Machines for SimCloud {
    async fn machine(&self, id: &str) -> Result<Option<Machine>, String> {
        let vm = self.vm(id).await.map_err(|err| format!("simulated cloud state: {err}"))?;
        Ok(vm.map(|vm| vm.machine(self.user_data.open(&vm.id, &vm.sealed_user_data))))
    }

    async fn running(&self) -> Result<Vec<Machine>, String> {
        let live = self.live_vms().await.map_err(|err| format!("simulated cloud state: {err}"))?;
        let running = live.iter().filter(|vm| vm.state == "running");
        Ok(running.map(|vm| vm.machine(self.user_data.open(&vm.id, &vm.sealed_user_data))).collect())
    }
}
