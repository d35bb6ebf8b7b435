//! The simulated cloud: a local cloud for the quick start and for deterministic tests. It
//! keeps its state beside the API's (tables `sim_api_calls`, `sim_vms`, `sim_networks`), so
//! its VMs and injected faults survive API restarts like a real cloud's would. Everything it
//! returns says it is simulated, and its public addresses are from TEST-NET-3 (203.0.113.0/24).
//!
//! VMs boot by the clock: `pending` for `boot_ms` after launch, then `running`; a running
//! control plane serves a Kubernetes-compatible API ([`super::sim_kube`]) on which capacity VMs
//! whose user-data joins it appear as nodes, Ready `boot_ms` after they run.

use anycloud_engine::store::Pool;
use anycloud_engine::with_pool;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::Verdict;
use crate::cloud::{CLUSTER_TAG, Cloud, CloudError, LaunchSpec, NAME_TAG, Network, Placement, ROLE_TAG, Role, Vm};

/// The simulated regions.
pub const REGIONS: &[&str] = &["sim-east-1", "sim-west-1", "sim-north-1"];
/// The simulated machine types.
pub const VM_TYPES: &[&str] = &["sim.small", "sim.medium", "sim.large"];

/// Behaviour and fault injection of one simulated account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimSettings {
    /// The first this many API calls fail with a transient error (HTTP 503).
    pub fail_first: u32,
    /// Every call is rejected with this message, as a cloud rejects bad keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reject: Option<String>,
    /// Each call takes this long.
    pub latency_ms: u64,
    /// Percentage (0-100) of calls after `fail_first` that fail transiently, chosen by `seed`.
    pub error_rate: u8,
    /// Seed of the transient errors and of VM ids and addresses.
    pub seed: u64,
    /// At most this many live VMs in the account; a launch beyond fails with a quota error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_vms: Option<u32>,
    /// How long a VM takes to boot, and a node to become Ready after that.
    pub boot_ms: u64,
    /// VMs boot but their Kubernetes nodes never become Ready.
    pub never_ready: bool,
}

impl Default for SimSettings {
    fn default() -> Self {
        Self {
            fail_first: 0,
            reject: None,
            latency_ms: 0,
            error_rate: 0,
            seed: 0,
            quota_vms: None,
            boot_ms: 300,
            never_ready: false,
        }
    }
}

/// A transient failure of the simulated cloud.
#[derive(Debug, thiserror::Error)]
#[error("simulated cloud: 503 Service Unavailable (injected fault on call {call})")]
pub struct Unavailable {
    call: u32,
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
    pool: Pool,
    api_url: String,
}

impl SimCloud {
    /// The simulated cloud whose state lives in `pool`, "hosted" by the API at `api_url`
    /// (its control planes' Kubernetes APIs are served under `{api_url}/sim/kube/`).
    pub fn new(pool: Pool, api_url: impl Into<String>) -> Self {
        Self { pool, api_url: api_url.into() }
    }

    /// The database the simulated cloud keeps its state in.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// One account of the simulated cloud.
    pub fn account(&self, account: &str, settings: SimSettings) -> SimAccount {
        SimAccount { cloud: self.clone(), account: account.to_owned(), settings }
    }

    /// The cheapest read call: lists the simulated regions, as DescribeRegions would.
    pub async fn describe_regions(&self, account: &str, settings: &SimSettings) -> Result<Verdict, SimError> {
        let account = self.account(account, settings.clone());
        account.call().await?;
        if let Some(message) = &settings.reject {
            return Ok(Verdict::Rejected { message: format!("simulated cloud: {message}") });
        }
        Ok(Verdict::Accepted { detail: format!("simulated cloud: {} regions ({})", REGIONS.len(), REGIONS.join(", ")) })
    }

    /// Counts a call to `account` and returns its number (1 for the first).
    async fn count_call(&self, account: &str) -> Result<u32, sqlx::Error> {
        let calls: i64 = with_pool!(&self.pool, |pool| {
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
    /// Kubernetes API and for tests that check what the "provider" holds.
    pub async fn live_vms(&self) -> Result<Vec<SimVm>, sqlx::Error> {
        let now = crate::now_ms();
        let rows: Vec<SimVmRow> = with_pool!(&self.pool, |pool| {
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
        let row: Option<SimVmRow> = with_pool!(&self.pool, |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_VMS} WHERE id = $1")))
                .bind(id)
                .fetch_optional(pool)
                .await
        })?;
        Ok(row.map(|row| row.into_vm(crate::now_ms())))
    }

    /// How many network rules of any account are not deleted (for tests).
    pub async fn live_networks(&self) -> Result<i64, sqlx::Error> {
        with_pool!(&self.pool, |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM sim_networks WHERE deleted_at IS NULL").fetch_one(pool).await
        })
    }
}

/// The columns of a simulated VM, as [`SimVmRow`] reads them.
const SELECT_VMS: &str = "SELECT id, account, tags, user_data, private_ip, public_ip, boot_ms, never_ready, \
                          launched_at, terminated_at FROM sim_vms";

/// How long a terminated VM is listed as `shutting-down`.
const SHUTDOWN_MS: i64 = 300;

/// A simulated VM with its state at the time it was read.
#[derive(Debug, Clone)]
pub struct SimVm {
    /// `sim-...`.
    pub id: String,
    /// Its account.
    pub account: String,
    /// Its tags.
    pub tags: std::collections::BTreeMap<String, String>,
    /// What it was launched with.
    pub user_data: String,
    /// Private address.
    pub private_ip: String,
    /// Public address (TEST-NET-3).
    pub public_ip: String,
    /// `pending`, `running`, `shutting-down` or `terminated`.
    pub state: &'static str,
    /// Milliseconds it has been running (0 unless running).
    pub running_for_ms: i64,
    /// How long it takes to boot.
    pub boot_ms: i64,
    /// Its node never becomes Ready.
    pub never_ready: bool,
}

#[derive(sqlx::FromRow)]
struct SimVmRow {
    id: String,
    account: String,
    tags: String,
    user_data: String,
    private_ip: String,
    public_ip: String,
    boot_ms: i64,
    never_ready: bool,
    launched_at: i64,
    terminated_at: Option<i64>,
}

impl SimVmRow {
    fn into_vm(self, now: i64) -> SimVm {
        let running_since = self.launched_at + self.boot_ms;
        let (state, running_for_ms) = match self.terminated_at {
            Some(at) if now >= at + SHUTDOWN_MS => ("terminated", 0),
            Some(_) => ("shutting-down", 0),
            None if now < running_since => ("pending", 0),
            None => ("running", now - running_since),
        };
        SimVm {
            id: self.id,
            account: self.account,
            tags: serde_json::from_str(&self.tags).unwrap_or_default(),
            user_data: self.user_data,
            private_ip: self.private_ip,
            public_ip: self.public_ip,
            state,
            running_for_ms,
            boot_ms: self.boot_ms,
            never_ready: self.never_ready,
        }
    }
}

impl SimVm {
    fn to_vm(&self) -> Vm {
        Vm {
            provider_id: self.id.clone(),
            name: self.tags.get(NAME_TAG).cloned().unwrap_or_default(),
            role: self.tags.get(ROLE_TAG).and_then(|role| Role::parse(role)).unwrap_or(Role::Worker),
            state: self.state.to_owned(),
            private_ip: Some(self.private_ip.clone()),
            public_ip: Some(self.public_ip.clone()),
        }
    }
}

/// One account of the simulated cloud: what a `sim` credential opens.
#[derive(Clone, Debug)]
pub struct SimAccount {
    cloud: SimCloud,
    account: String,
    settings: SimSettings,
}

impl SimAccount {
    /// Every call: latency, then the injected faults.
    async fn call(&self) -> Result<(), SimError> {
        if self.settings.latency_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(self.settings.latency_ms)).await;
        }
        let call = self.cloud.count_call(&self.account).await?;
        if call <= self.settings.fail_first || self.seeded_error(call) {
            return Err(Unavailable { call }.into());
        }
        Ok(())
    }

    fn seeded_error(&self, call: u32) -> bool {
        self.settings.error_rate > 0 && (self.hash(&call.to_string()) % 100) < u64::from(self.settings.error_rate)
    }

    /// A stable pseudo-random number for `what` under this account's seed.
    fn hash(&self, what: &str) -> u64 {
        let name = format!("{}/{}/{what}", self.settings.seed, self.account);
        let id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, name.as_bytes());
        u64::from_le_bytes(id.as_bytes()[..8].try_into().unwrap_or_default())
    }

    async fn live_rows(&self, cluster_id: &str) -> Result<Vec<SimVmRow>, sqlx::Error> {
        let now = crate::now_ms();
        let rows: Vec<SimVmRow> = with_pool!(&self.cloud.pool, |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "{SELECT_VMS} WHERE account = $1 AND (terminated_at IS NULL OR terminated_at > $2) \
                 ORDER BY launched_at, id"
            )))
            .bind(&self.account)
            .bind(now - SHUTDOWN_MS)
            .fetch_all(pool)
            .await
        })?;
        Ok(rows
            .into_iter()
            .filter(|row| {
                serde_json::from_str::<std::collections::BTreeMap<String, String>>(&row.tags)
                    .is_ok_and(|tags| tags.get(CLUSTER_TAG).map(String::as_str) == Some(cluster_id))
            })
            .collect())
    }

    async fn live_count(&self) -> Result<i64, sqlx::Error> {
        with_pool!(&self.cloud.pool, |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM sim_vms WHERE account = $1 AND terminated_at IS NULL")
                .bind(&self.account)
                .fetch_one(pool)
                .await
        })
    }

    fn network_id(&self, cluster_id: &str) -> String {
        format!("sg-sim-{:012x}", self.hash(cluster_id) & 0xffff_ffff_ffff)
    }
}

#[async_trait]
impl Cloud for SimAccount {
    async fn placement(&self, cluster_id: &str, region: &str, vm_type: &str) -> Result<Placement, CloudError> {
        self.call().await?;
        if !REGIONS.contains(&region) {
            return Err(CloudError::Terminal(format!(
                "simulated cloud: unknown region `{region}`; the regions are {}",
                REGIONS.join(", ")
            )));
        }
        if !VM_TYPES.contains(&vm_type) {
            return Err(CloudError::Terminal(format!(
                "simulated cloud: unknown VM type `{vm_type}` in {region}; the types are {}",
                VM_TYPES.join(", ")
            )));
        }
        Ok(Placement {
            cluster_id: cluster_id.to_owned(),
            region: region.to_owned(),
            zone: None,
            vm_type: vm_type.to_owned(),
            image: Some("sim-image-k3s-ready".to_owned()),
        })
    }

    async fn ensure_network(&self, placement: &Placement) -> Result<Network, CloudError> {
        self.call().await?;
        let id = self.network_id(&placement.cluster_id);
        with_pool!(&self.cloud.pool, |pool| {
            sqlx::query(
                "INSERT INTO sim_networks (id, account, cluster, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (id) DO UPDATE SET deleted_at = NULL",
            )
            .bind(&id)
            .bind(&self.account)
            .bind(&placement.cluster_id)
            .bind(crate::now_ms())
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })
        .map_err(SimError::from)?;
        Ok(Network { id })
    }

    async fn delete_network(&self, placement: &Placement) -> Result<(), CloudError> {
        self.call().await?;
        let users = self.live_rows(&placement.cluster_id).await.map_err(SimError::from)?;
        if let Some(vm) = users.first() {
            return Err(CloudError::Retryable(format!(
                "simulated cloud: DependencyViolation: network of cluster {} is still used by {} VM(s), e.g. {}",
                placement.cluster_id,
                users.len(),
                vm.id
            )));
        }
        with_pool!(&self.cloud.pool, |pool| {
            sqlx::query(
                "UPDATE sim_networks SET deleted_at = $3 WHERE account = $1 AND cluster = $2 AND deleted_at IS NULL",
            )
            .bind(&self.account)
            .bind(&placement.cluster_id)
            .bind(crate::now_ms())
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })
        .map_err(SimError::from)?;
        Ok(())
    }

    async fn network_exists(&self, placement: &Placement) -> Result<bool, CloudError> {
        self.call().await?;
        let live: i64 = with_pool!(&self.cloud.pool, |pool| {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM sim_networks WHERE account = $1 AND cluster = $2 AND deleted_at IS NULL",
            )
            .bind(&self.account)
            .bind(&placement.cluster_id)
            .fetch_one(pool)
            .await
        })
        .map_err(SimError::from)?;
        Ok(live > 0)
    }

    async fn launch(&self, spec: &LaunchSpec<'_>) -> Result<Vm, CloudError> {
        self.call().await?;
        let placement = spec.placement;
        let now = crate::now_ms();
        // Find-by-tag first, as on every provider.
        let rows = self.live_rows(&placement.cluster_id).await.map_err(SimError::from)?;
        if let Some(found) = rows.into_iter().map(|row| row.into_vm(now)).find(|vm| {
            vm.state != "shutting-down" && vm.tags.get(NAME_TAG).map(String::as_str) == Some(spec.name.as_str())
        }) {
            return Ok(found.to_vm());
        }
        if let Some(quota) = self.settings.quota_vms {
            let live = self.live_count().await.map_err(SimError::from)?;
            if live >= i64::from(quota) {
                return Err(CloudError::Terminal(format!(
                    "simulated cloud: VcpuLimitExceeded: the account's quota of {quota} VMs in {} is used up \
                     ({live} running); terminate VMs or raise the quota",
                    placement.region
                )));
            }
        }
        let token = spec.token.to_string();
        let id = format!("sim-{:016x}", self.hash(&token));
        let n = self.hash(&format!("ip/{token}"));
        let tags: std::collections::BTreeMap<&str, &str> = [
            (CLUSTER_TAG, placement.cluster_id.as_str()),
            (NAME_TAG, spec.name.as_str()),
            (ROLE_TAG, spec.role.as_str()),
        ]
        .into();
        let tags = serde_json::to_string(&tags).map_err(|err| CloudError::terminal("encoding tags", &err))?;
        // The client token makes a repeated launch return the first one, as EC2's ClientToken does.
        with_pool!(&self.cloud.pool, |pool| {
            sqlx::query(
                "INSERT INTO sim_vms (id, account, region, vm_type, tags, user_data, client_token, private_ip, \
                 public_ip, boot_ms, never_ready, launched_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (account, client_token) DO NOTHING",
            )
            .bind(&id)
            .bind(&self.account)
            .bind(&placement.region)
            .bind(&placement.vm_type)
            .bind(&tags)
            .bind(&spec.user_data)
            .bind(&token)
            .bind(format!("10.77.{}.{}", (n >> 8) % 250 + 1, n % 250 + 2))
            .bind(format!("203.0.113.{}", (n >> 16) % 250 + 2))
            .bind(self.settings.boot_ms as i64)
            .bind(self.settings.never_ready)
            .bind(now)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })
        .map_err(SimError::from)?;
        let row: SimVmRow = with_pool!(&self.cloud.pool, |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_VMS} WHERE account = $1 AND client_token = $2")))
                .bind(&self.account)
                .bind(&token)
                .fetch_one(pool)
                .await
        })
        .map_err(SimError::from)?;
        Ok(row.into_vm(crate::now_ms()).to_vm())
    }

    async fn list_vms(&self, placement: &Placement) -> Result<Vec<Vm>, CloudError> {
        self.call().await?;
        let now = crate::now_ms();
        let rows = self.live_rows(&placement.cluster_id).await.map_err(SimError::from)?;
        Ok(rows.into_iter().map(|row| row.into_vm(now).to_vm()).collect())
    }

    async fn terminate(&self, _placement: &Placement, provider_ids: &[String]) -> Result<(), CloudError> {
        if provider_ids.is_empty() {
            return Ok(());
        }
        self.call().await?;
        for id in provider_ids {
            with_pool!(&self.cloud.pool, |pool| {
                sqlx::query(
                    "UPDATE sim_vms SET terminated_at = $3 WHERE id = $1 AND account = $2 AND terminated_at IS NULL",
                )
                .bind(id)
                .bind(&self.account)
                .bind(crate::now_ms())
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
            })
            .map_err(SimError::from)?;
        }
        Ok(())
    }

    fn kube_url(&self, control_plane: &Vm) -> String {
        format!("{}/sim/kube/{}", self.cloud.api_url.trim_end_matches('/'), control_plane.provider_id)
    }
}
