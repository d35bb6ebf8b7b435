//! One account of the simulated cloud, opened by [`SimCloud::account`] (the domain opens it
//! through `SimulatedCloud`), behind the domain's [`Cloud`] trait: every call pays the account's
//! latency and may meet its injected faults; launches find VMs by tag first and honour client
//! tokens, as EC2's do.

use anycloud_engine::{execute, with_pool};
use anycloud_workflows::cloud::Verdict;
use anycloud_workflows::cloud::{
    Address, CLUSTER_TAG, Cloud, CloudError, LaunchSpec, NAME_TAG, Network, Placement, ROLE_TAG, Vm,
};
use anycloud_workflows::cluster::network::Openings;
use anycloud_workflows::kubernetes::KubeEndpoint;
use anycloud_workflows::now_ms;
use anycloud_workflows::providers::SimulatedCloud;
use anycloud_workflows::providers::sim_settings::{REGIONS, SimSettings, VM_TYPES};
use async_trait::async_trait;

use crate::cloud::{SimCloud, SimError, Unavailable};
use crate::vms::{SELECT_VMS, SHUTDOWN_MS, SimVmRow, seal_user_data};

/// One account of the simulated cloud: what a `sim` credential opens.
#[derive(Clone, Debug)]
pub struct SimAccount {
    pub(crate) cloud: SimCloud,
    pub(crate) account: String,
    pub(crate) settings: SimSettings,
}

impl SimCloud {
    /// One account of the simulated cloud.
    pub fn account(&self, account: &str, settings: SimSettings) -> SimAccount {
        SimAccount { cloud: self.clone(), account: account.to_owned(), settings }
    }
}

/// How the domain opens an account of the simulated cloud (a `sim` credential).
impl SimulatedCloud for SimCloud {
    fn account(&self, identity: &str, settings: SimSettings) -> Result<Box<dyn Cloud>, CloudError> {
        Ok(Box::new(SimCloud::account(self, identity, settings)))
    }

    fn kube_endpoint(&self, control_plane: &Vm) -> KubeEndpoint {
        SimCloud::kube_endpoint(self, &control_plane.provider_id)
    }
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
        let now = now_ms();
        let rows: Vec<SimVmRow> = with_pool!(self.cloud.pool(), |pool| {
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
        with_pool!(self.cloud.pool(), |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM sim_vms WHERE account = $1 AND terminated_at IS NULL")
                .bind(&self.account)
                .fetch_one(pool)
                .await
        })
    }

    /// The owner's reserved addresses not released, oldest first.
    async fn live_addresses(&self, owner: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
        with_pool!(self.cloud.pool(), |pool| {
            sqlx::query_as(
                "SELECT id, ip FROM sim_addresses WHERE account = $1 AND owner = $2 AND released_at IS NULL \
                 ORDER BY created_at, id",
            )
            .bind(&self.account)
            .bind(owner)
            .fetch_all(pool)
            .await
        })
    }

    fn network_id(&self, cluster_id: &str) -> String {
        format!("sg-sim-{:012x}", self.hash(cluster_id) & 0xffff_ffff_ffff)
    }
}

#[async_trait]
impl Cloud for SimAccount {
    /// The cheapest read call: lists the simulated regions, as DescribeRegions would; a
    /// `reject` setting refuses the keys.
    async fn verify(&self) -> Result<Verdict, CloudError> {
        self.call().await?;
        if let Some(message) = &self.settings.reject {
            return Ok(Verdict::Rejected { message: format!("simulated cloud: {message}") });
        }
        Ok(Verdict::Accepted { detail: format!("simulated cloud: {} regions ({})", REGIONS.len(), REGIONS.join(", ")) })
    }

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
        execute!(
            self.cloud.pool(),
            "INSERT INTO sim_networks (id, account, cluster, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO UPDATE SET deleted_at = NULL",
            &id,
            &self.account,
            &placement.cluster_id,
            now_ms()
        )
        .map_err(SimError::from)?;
        Ok(Network { id })
    }

    /// The simulated network filters no traffic (its VMs are processes on one host), so there
    /// is nothing to open; like a provider's, the call fails when the network is missing.
    async fn open_network(&self, placement: &Placement, _openings: &Openings) -> Result<(), CloudError> {
        if !self.network_exists(placement).await? {
            return Err(CloudError::Retryable(format!(
                "simulated cloud: InvalidGroup.NotFound: cluster {} has no network to open",
                placement.cluster_id
            )));
        }
        Ok(())
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
        execute!(
            self.cloud.pool(),
            "UPDATE sim_networks SET deleted_at = $3 WHERE account = $1 AND cluster = $2 AND deleted_at IS NULL",
            &self.account,
            &placement.cluster_id,
            now_ms()
        )
        .map_err(SimError::from)?;
        Ok(())
    }

    async fn network_exists(&self, placement: &Placement) -> Result<bool, CloudError> {
        self.call().await?;
        let live: i64 = with_pool!(self.cloud.pool(), |pool| {
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
        let now = now_ms();
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
        let private_ip = format!("10.77.{}.{}", (n >> 8) % 250 + 1, n % 250 + 2);
        // A reserved address is the VM's from launch on (as GCE's natIP); else an ephemeral one.
        let public_ip = match spec.address {
            Some(address) => address.ip.clone(),
            None => format!("203.0.113.{}", (n >> 16) % 250 + 2),
        };
        execute!(
            self.cloud.pool(),
            "INSERT INTO sim_vms (id, account, region, vm_type, tags, user_data, client_token, private_ip, \
             public_ip, boot_ms, never_ready, launched_at, private_registries) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (account, client_token) DO NOTHING",
            &id,
            &self.account,
            &placement.region,
            &placement.vm_type,
            &tags,
            seal_user_data(self.cloud.sealer(), &id, &spec.user_data),
            &token,
            private_ip,
            public_ip,
            self.settings.boot_ms as i64,
            self.settings.never_ready,
            now,
            serde_json::to_string(&self.settings.private_registries).unwrap_or_else(|_| "[]".to_owned())
        )
        .map_err(SimError::from)?;
        let row: SimVmRow = with_pool!(self.cloud.pool(), |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT_VMS} WHERE account = $1 AND client_token = $2")))
                .bind(&self.account)
                .bind(&token)
                .fetch_one(pool)
                .await
        })
        .map_err(SimError::from)?;
        Ok(row.into_vm(now_ms()).to_vm())
    }

    async fn list_vms(&self, placement: &Placement) -> Result<Vec<Vm>, CloudError> {
        self.call().await?;
        let now = now_ms();
        let rows = self.live_rows(&placement.cluster_id).await.map_err(SimError::from)?;
        Ok(rows.into_iter().map(|row| row.into_vm(now).to_vm()).collect())
    }

    async fn terminate(&self, _placement: &Placement, provider_ids: &[String]) -> Result<(), CloudError> {
        if provider_ids.is_empty() {
            return Ok(());
        }
        self.call().await?;
        for id in provider_ids {
            execute!(
                self.cloud.pool(),
                "UPDATE sim_vms SET terminated_at = $3 WHERE id = $1 AND account = $2 AND terminated_at IS NULL",
                id,
                &self.account,
                now_ms()
            )
            .map_err(SimError::from)?;
        }
        Ok(())
    }

    /// A row of `sim_addresses`, found by owner and name first; its address is from the
    /// benchmarking range 198.18.0.0/15 (RFC 2544), which no VM's ephemeral address uses.
    async fn ensure_address(&self, placement: &Placement, name: &str) -> Result<Address, CloudError> {
        self.call().await?;
        let owner = &placement.cluster_id;
        let id = format!("sim-addr-{:012x}", self.hash(&format!("address/{owner}/{name}")) & 0xffff_ffff_ffff);
        let n = self.hash(&format!("address-ip/{owner}/{name}"));
        let ip = format!("198.{}.{}.{}", 18 + (n >> 16) % 2, (n >> 8) % 256, n % 254 + 1);
        execute!(
            self.cloud.pool(),
            "INSERT INTO sim_addresses (id, account, region, owner, name, ip, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET released_at = NULL",
            &id,
            &self.account,
            &placement.region,
            owner,
            name,
            &ip,
            now_ms()
        )
        .map_err(SimError::from)?;
        Ok(Address { id, ip })
    }

    /// Releases the owner's addresses; one a live VM still uses is refused (retryably), as EC2
    /// and Compute Engine refuse.
    async fn release_addresses(&self, placement: &Placement) -> Result<(), CloudError> {
        self.call().await?;
        let owner = &placement.cluster_id;
        let addresses = self.live_addresses(owner).await.map_err(SimError::from)?;
        let users = self.live_rows(owner).await.map_err(SimError::from)?;
        for (id, ip) in addresses {
            if let Some(vm) = users.iter().find(|vm| vm.public_ip == ip) {
                return Err(CloudError::Retryable(format!(
                    "simulated cloud: InUse: address {id} ({ip}) is still used by VM {}",
                    vm.id
                )));
            }
            execute!(
                self.cloud.pool(),
                "UPDATE sim_addresses SET released_at = $2 WHERE id = $1 AND released_at IS NULL",
                &id,
                now_ms()
            )
            .map_err(SimError::from)?;
        }
        Ok(())
    }

    async fn list_addresses(&self, placement: &Placement) -> Result<Vec<Address>, CloudError> {
        self.call().await?;
        let addresses = self.live_addresses(&placement.cluster_id).await.map_err(SimError::from)?;
        Ok(addresses.into_iter().map(|(id, ip)| Address { id, ip }).collect())
    }
}
