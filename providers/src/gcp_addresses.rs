//! Static external addresses: the stable public address of a cluster's control plane and of a
//! hosted API's VM on Compute Engine. An instance's ephemeral external address is released when
//! it stops and a replacement gets another; a reserved static external address stays the
//! project's until it is deleted (Compute Engine docs, "Reserve a static external IP address":
//! `addresses.insert` in the VM's region, then the instance's `accessConfigs[].natIP`).
//!
//! - `ensure`: `addresses.get` by name (`ac-<12 hex>-<vm>-ip`), else `addresses.insert` (regional,
//!   `EXTERNAL`, its description naming the owner) under a deterministic `requestId`,
//!   waited for as a region operation and read back (a remembered `requestId` whose address is
//!   gone since is inserted again under a fresh id), as firewall rules are.
//! - the address is the instance's `natIP` at insert (`gcp_cloud`'s `launch`), so it needs no
//!   attaching afterwards;
//! - `release`: `addresses.list` in the region, those named `ac-<12 hex>-...-ip` (an address's
//!   labels can be set only by a separate `setLabels` call, so the name carries the owner, as it
//!   does for firewall rules), `addresses.delete` each and wait; Compute
//!   Engine refuses to delete an address an instance still uses (`resourceInUseByAnotherResource`),
//!   which is retried until the instance is gone.

use std::time::{Duration, Instant};

use google_cloud_compute_v1::client::{Addresses, RegionOperations};
use google_cloud_compute_v1::model::{Address as GceAddress, Operation, address, operation};
use google_cloud_gax::options::RequestOptionsBuilder as _;

use super::gcp_errors::{check_operation, classify, reasons};
use super::gcp_names::{cluster_prefix, request_id};
use crate::cloud::{Address, CloudError, Placement};

/// How long one call waits for a region operation to finish.
const OPERATION_DEADLINE: Duration = Duration::from_secs(600);
/// `operations.wait` is a long poll that the server ends within two minutes.
const WAIT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(150);

/// A project's regional addresses, and the region operations that make and delete them.
pub(super) struct Reserved {
    pub(super) project: String,
    pub(super) addresses: Addresses,
    pub(super) operations: RegionOperations,
}

/// The GCE name of the address of VM `name` of `owner`: `ac-<12 hex>-<name>-ip`.
pub(super) fn address_name(owner: &str, name: &str) -> Result<String, CloudError> {
    Ok(format!("{}-{name}-ip", cluster_prefix(owner)?))
}

impl Reserved {
    async fn get(&self, region: &str, name: &str) -> Result<Option<GceAddress>, CloudError> {
        match self.addresses.get().set_project(&self.project).set_region(region).set_address(name).send().await {
            Ok(found) => Ok(Some(found)),
            Err(err) if err.http_status_code() == Some(404) => Ok(None),
            Err(err) => Err(classify(&format!("reading address {name} in {region}"), &err)),
        }
    }

    /// Waits until a region operation is `DONE`.
    async fn wait(&self, region: &str, mut op: Operation) -> Result<Operation, CloudError> {
        let deadline = Instant::now() + OPERATION_DEADLINE;
        let name = op.name.clone().unwrap_or_default();
        while op.status != Some(operation::Status::Done) {
            if Instant::now() > deadline {
                return Err(CloudError::Retryable(format!(
                    "operation {name} in {region} is not done after 10 minutes"
                )));
            }
            op = self
                .operations
                .wait()
                .with_attempt_timeout(WAIT_ATTEMPT_TIMEOUT)
                .set_project(&self.project)
                .set_region(region)
                .set_operation(&name)
                .send()
                .await
                .map_err(|err| classify(&format!("waiting for operation {name} in {region}"), &err))?;
        }
        Ok(op)
    }

    /// Inserts the address under `request_id` and waits; a name that exists is success.
    async fn insert(&self, region: &str, body: &GceAddress, request_id: &str) -> Result<(), CloudError> {
        let name = body.name.clone().unwrap_or_default();
        let context = format!("reserving address {name} in {region}");
        let result = self
            .addresses
            .insert()
            .set_project(&self.project)
            .set_region(region)
            .set_request_id(request_id)
            .set_body(body.clone())
            .send()
            .await;
        let op = match result {
            Ok(op) => op,
            Err(err) if err.http_status_code() == Some(409) => return Ok(()),
            Err(err) => return Err(classify(&context, &err)),
        };
        let op = self.wait(region, op).await?;
        match check_operation(&context, &op) {
            Err(CloudError::Terminal(message)) if message.contains("ALREADY_EXISTS") => Ok(()),
            other => other,
        }
    }

    /// Finds or reserves the address of VM `name` of `placement.cluster_id`.
    pub(super) async fn ensure(&self, placement: &Placement, name: &str) -> Result<Address, CloudError> {
        let region = &placement.region;
        let full = address_name(&placement.cluster_id, name)?;
        if self.get(region, &full).await?.is_none() {
            let body = GceAddress::new()
                .set_name(&full)
                .set_description(format!("anycloud {}: the stable address of VM {name}", placement.cluster_id))
                .set_address_type(address::AddressType::External);
            self.insert(region, &body, &request_id(&placement.cluster_id, &format!("address/{full}"))).await?;
            if self.get(region, &full).await?.is_none() {
                // The request id was remembered from an earlier life of this address, deleted since.
                self.insert(region, &body, &uuid::Uuid::new_v4().to_string()).await?;
            }
        }
        let found = self
            .get(region, &full)
            .await?
            .ok_or_else(|| CloudError::Retryable(format!("address {full} in {region} is missing after its insert")))?;
        match found.address.filter(|ip| !ip.is_empty()) {
            Some(ip) => Ok(Address { id: full, ip }),
            None => Err(CloudError::Retryable(format!("address {full} in {region} has no IP yet"))),
        }
    }

    /// Every address in the placement's region named for its owner (`ac-<12 hex>-...-ip`).
    async fn owned(&self, placement: &Placement) -> Result<Vec<GceAddress>, CloudError> {
        let region = &placement.region;
        let prefix = format!("{}-", cluster_prefix(&placement.cluster_id)?);
        let mut owned = Vec::new();
        let mut page_token: Option<String> = None;
        loop {
            let list = self
                .addresses
                .list()
                .set_project(&self.project)
                .set_region(region)
                .set_or_clear_page_token(page_token.take())
                .send()
                .await
                .map_err(|err| classify(&format!("listing the addresses of {}", placement.cluster_id), &err))?;
            owned.extend(list.items);
            match list.next_page_token.filter(|t| !t.is_empty()) {
                Some(token) => page_token = Some(token),
                None => break,
            }
        }
        owned.retain(|a| a.name.as_deref().is_some_and(|name| name.starts_with(&prefix) && name.ends_with("-ip")));
        Ok(owned)
    }

    /// Deletes every address of `placement.cluster_id` and waits; none is success.
    pub(super) async fn release_all(&self, placement: &Placement) -> Result<(), CloudError> {
        let region = &placement.region;
        for found in self.owned(placement).await? {
            let name = found.name.unwrap_or_default();
            let context = format!("releasing address {name} in {region}");
            let result = self
                .addresses
                .delete()
                .set_project(&self.project)
                .set_region(region)
                .set_address(&name)
                .set_request_id(request_id(&format!("{}/{}", name, found.id.unwrap_or_default()), "delete"))
                .send()
                .await;
            let op = match result {
                Ok(op) => op,
                Err(err) if err.http_status_code() == Some(404) => continue,
                Err(err)
                    if err.http_status_code() == Some(400)
                        && reasons(&err).contains("resourceInUseByAnotherResource") =>
                {
                    return Err(CloudError::Retryable(format!(
                        "{context}: an instance still uses it (it may still be stopping); it is released once the \
                         instance is gone"
                    )));
                }
                Err(err) => return Err(classify(&context, &err)),
            };
            let op = self.wait(region, op).await?;
            match check_operation(&context, &op) {
                Err(CloudError::Terminal(message)) if message.contains("NOT_FOUND") => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// The addresses of `placement.cluster_id`.
    pub(super) async fn list(&self, placement: &Placement) -> Result<Vec<Address>, CloudError> {
        Ok(self
            .owned(placement)
            .await?
            .into_iter()
            .map(|a| Address { id: a.name.unwrap_or_default(), ip: a.address.unwrap_or_default() })
            .collect())
    }
}
