//! Google Cloud behind [`Cloud`]: Compute Engine instances and firewall rules through
//! google-cloud-compute-v1, with a service-account key.
//!
//! Names and labels:
//! - every resource of a cluster is named `ac-<12 hex of the cluster id>-...` (GCE names match
//!   `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`): instances `ac-<hex>-cp`, `ac-<hex>-w0`, ..., firewall
//!   rules `ac-<hex>-ssh-api` and `ac-<hex>-internal`;
//! - instances carry the labels [`CLUSTER_TAG`] (the cluster id), [`NAME_TAG`] and [`ROLE_TAG`],
//!   and the network tag `ac-<hex>` that the firewall rules target. Firewall rules cannot carry
//!   labels: they are found by name, and their description names the cluster.
//!
//! Idempotency: every insert carries a `requestId` (GCE returns the original operation for a
//! repeated id, for about an hour), and a name that exists already (HTTP 409) is success. A
//! `requestId` is deterministic (the launch step's token; a UUID v5 of the cluster and rule for a
//! firewall; a UUID v5 of the instance's numeric id for a delete), so a retry after a lost
//! response neither duplicates nor fails. Because GCE may answer a remembered `requestId` with an
//! operation whose resource is gone since, an insert is checked by reading the resource back and
//! repeated once under a fresh id when it is missing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use google_cloud_compute_v1::client::{
    Addresses, Firewalls, GlobalOperations, Instances, MachineTypes, RegionOperations, ZoneOperations, Zones,
};
use google_cloud_compute_v1::model::{
    AccessConfig, AttachedDisk, AttachedDiskInitializeParams, Firewall, Instance, Metadata, NetworkInterface,
    Operation, ServiceAccount, Tags, access_config, firewall, machine_type, metadata, operation,
};
use google_cloud_gax::options::RequestOptionsBuilder as _;

use super::gcp_errors::{check_operation, classify, not_google, reasons};
use super::gcp_names::{cluster_prefix, request_id, valid_label_value, valid_name};
use super::{gcp, gcp_addresses, gcp_iam, gcp_secrets};
use crate::cloud::Verdict;
use crate::cloud::{
    Address, CLUSTER_TAG, Cloud, CloudError, LaunchSpec, NAME_TAG, Network, Placement, ROLE_TAG, Role, Vm,
};
use crate::cloud::{KUBE_API_PORT, Openings, WIREGUARD_PORT};
use crate::credential::PublicPart;

/// The boot image of every VM: the Ubuntu 22.04 LTS family (its newest image at insert time).
pub const IMAGE: &str = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts";

/// The VPC every VM and rule of a cluster joins.
pub const NETWORK: &str = "global/networks/default";

/// A machine type every zone offers, named in the error for an unknown one.
const EXAMPLE_VM_TYPE: &str = "e2-standard-2";

/// How long one call waits for an operation to finish (GCE's `wait` returns after at most about
/// two minutes, not necessarily `DONE`, and is asked again until this deadline).
const OPERATION_DEADLINE: Duration = Duration::from_secs(600);
/// How long one call to Compute Engine may take before the client abandons it (and asks again
/// when the call may be repeated): its answers take seconds, and a call that hangs (a connection
/// lost without a reset, a stalled proxy) would otherwise hold its step until the step's own
/// deadline.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// `operations.wait` is a long poll that the server ends within two minutes.
const WAIT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(150);

/// Instance states in which an instance serves (or is about to): `launch` returns such an instance
/// rather than creating another.
const LIVE_STATES: [&str; 5] = ["PROVISIONING", "STAGING", "RUNNING", "REPAIRING", "PENDING"];

/// A Compute Engine project, as the cluster workflows use it.
pub struct GcpCloud {
    project: String,
    /// The key's credentials and the endpoint override, for the Secret Manager client a hosted
    /// API's deploy makes when it needs one.
    credentials: google_cloud_auth::credentials::Credentials,
    endpoint: Option<String>,
    instances: Instances,
    firewalls: Firewalls,
    zone_operations: ZoneOperations,
    global_operations: GlobalOperations,
    zones: Zones,
    machine_types: MachineTypes,
    /// The stable addresses of control planes and hosted APIs.
    reserved: gcp_addresses::Reserved,
}

impl std::fmt::Debug for GcpCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcpCloud").field("project", &self.project).finish_non_exhaustive()
    }
}

impl GcpCloud {
    /// Clients for the project of `public` (or else of the key), authenticated with the
    /// service-account key, at `public.endpoint` when it is set.
    ///
    /// The key's credentials sign a JWT locally for each request (see [`gcp::credentials`]); no
    /// token is fetched from `oauth2.googleapis.com`, so an overridden endpoint, including the
    /// test suite's fake Compute server on a loopback `http://` URL, is called with the same
    /// credentials as Compute Engine itself. No anonymous fallback exists.
    pub async fn new(public: &PublicPart, service_account_json: &str) -> Result<Self, CloudError> {
        let (project, credentials) = if public.machine {
            // Application Default Credentials: on a GCE VM, its service account's tokens from the
            // metadata server.
            let project =
                public.project.clone().filter(|p| !p.trim().is_empty()).ok_or_else(|| {
                    CloudError::Terminal("a GCP machine-identity credential names no project".to_owned())
                })?;
            let credentials = google_cloud_auth::credentials::Builder::default()
                .build()
                .map_err(|err| CloudError::terminal("the machine's Application Default Credentials", &err))?;
            (project, credentials)
        } else {
            let key = gcp::ServiceAccountKey::parse(service_account_json).map_err(CloudError::Terminal)?;
            let project = public.project.clone().filter(|p| !p.trim().is_empty()).unwrap_or(key.project_id);
            let credentials = gcp::credentials(service_account_json)
                .map_err(|err| CloudError::terminal("the GCP service-account key", &err))?;
            (project, credentials)
        };
        let endpoint = public.endpoint.clone().filter(|e| !e.trim().is_empty());
        macro_rules! client {
            ($client:ty) => {{
                let mut builder =
                    <$client>::builder().with_credentials(credentials.clone()).with_attempt_timeout(ATTEMPT_TIMEOUT);
                if let Some(endpoint) = &endpoint {
                    builder = builder.with_endpoint(endpoint.clone());
                }
                builder.build().await.map_err(|err| CloudError::terminal("building the Compute client", &err))?
            }};
        }
        Ok(Self {
            project: project.clone(),
            credentials: credentials.clone(),
            endpoint: endpoint.clone(),
            instances: client!(Instances),
            firewalls: client!(Firewalls),
            zone_operations: client!(ZoneOperations),
            global_operations: client!(GlobalOperations),
            zones: client!(Zones),
            machine_types: client!(MachineTypes),
            reserved: gcp_addresses::Reserved {
                project: project.clone(),
                addresses: client!(Addresses),
                operations: client!(RegionOperations),
            },
        })
    }

    /// The project every call acts on.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The zone of a placement (set by [`Cloud::placement`]).
    fn zone(placement: &Placement) -> Result<&str, CloudError> {
        placement.zone.as_deref().filter(|z| !z.is_empty()).ok_or_else(|| {
            CloudError::Terminal(format!(
                "cluster {}: the GCP placement has no zone (region {})",
                placement.cluster_id, placement.region
            ))
        })
    }

    /// Reads an instance by name; `None` when there is none.
    async fn get_instance(&self, zone: &str, name: &str) -> Result<Option<Instance>, CloudError> {
        let result = self.instances.get().set_project(&self.project).set_zone(zone).set_instance(name).send().await;
        match result {
            Ok(instance) => Ok(Some(instance)),
            Err(err) if err.http_status_code() == Some(404) => Ok(None),
            Err(err) => Err(classify(&format!("reading instance {name} in {zone}"), &err)),
        }
    }

    /// Inserts the instance under `request_id` and waits for the operation. `Ok(false)` when
    /// the name exists already.
    async fn insert_instance(&self, zone: &str, body: &Instance, request_id: &str) -> Result<bool, CloudError> {
        let name = body.name.clone().unwrap_or_default();
        let result = self
            .instances
            .insert()
            .set_project(&self.project)
            .set_zone(zone)
            .set_request_id(request_id)
            .set_body(body.clone())
            .send()
            .await;
        let op = match result {
            Ok(op) => op,
            Err(err) if err.http_status_code() == Some(409) => return Ok(false),
            Err(err) => {
                let refused = classify(&format!("inserting instance {name} in {zone}"), &err);
                return Err(match refused {
                    CloudError::Terminal(text) if text.contains("service account") => CloudError::Terminal(format!(
                        "{text}; a VM runs as a service account only for a caller with iam.serviceAccounts.actAs \
                         on it (roles/iam.serviceAccountUser); hosting an API on GCP needs {}",
                        gcp_iam::DEPLOYER_PERMISSIONS
                    )),
                    other => other,
                });
            }
        };
        let op = self.wait_zone(zone, op).await?;
        match check_operation(&format!("inserting instance {name} in {zone}"), &op) {
            Err(CloudError::Terminal(message)) if message.contains("ALREADY_EXISTS") => Ok(false),
            other => other.map(|()| true),
        }
    }

    /// Waits until a zonal operation is `DONE`.
    async fn wait_zone(&self, zone: &str, mut op: Operation) -> Result<Operation, CloudError> {
        let deadline = Instant::now() + OPERATION_DEADLINE;
        let name = op.name.clone().unwrap_or_default();
        while op.status != Some(operation::Status::Done) {
            if Instant::now() > deadline {
                return Err(CloudError::Retryable(format!("operation {name} in {zone} is not done after 10 minutes")));
            }
            op = self
                .zone_operations
                .wait()
                .with_attempt_timeout(WAIT_ATTEMPT_TIMEOUT)
                .set_project(&self.project)
                .set_zone(zone)
                .set_operation(&name)
                .send()
                .await
                .map_err(|err| classify(&format!("waiting for operation {name} in {zone}"), &err))?;
        }
        Ok(op)
    }

    /// Waits until a global operation is `DONE`.
    async fn wait_global(&self, mut op: Operation) -> Result<Operation, CloudError> {
        let deadline = Instant::now() + OPERATION_DEADLINE;
        let name = op.name.clone().unwrap_or_default();
        while op.status != Some(operation::Status::Done) {
            if Instant::now() > deadline {
                return Err(CloudError::Retryable(format!("global operation {name} is not done after 10 minutes")));
            }
            op = self
                .global_operations
                .wait()
                .with_attempt_timeout(WAIT_ATTEMPT_TIMEOUT)
                .set_project(&self.project)
                .set_operation(&name)
                .send()
                .await
                .map_err(|err| classify(&format!("waiting for global operation {name}"), &err))?;
        }
        Ok(op)
    }

    /// Reads a firewall rule by name; `None` when there is none.
    async fn get_firewall(&self, name: &str) -> Result<Option<Firewall>, CloudError> {
        match self.firewalls.get().set_project(&self.project).set_firewall(name).send().await {
            Ok(rule) => Ok(Some(rule)),
            Err(err) if err.http_status_code() == Some(404) => Ok(None),
            Err(err) => Err(classify(&format!("reading firewall rule {name}"), &err)),
        }
    }

    /// Inserts a firewall rule under `request_id` and waits for it; a name that exists is success.
    async fn insert_firewall(&self, rule: &Firewall, request_id: &str) -> Result<(), CloudError> {
        let name = rule.name.clone().unwrap_or_default();
        let result = self
            .firewalls
            .insert()
            .set_project(&self.project)
            .set_request_id(request_id)
            .set_body(rule.clone())
            .send()
            .await;
        let op = match result {
            Ok(op) => op,
            Err(err) if err.http_status_code() == Some(409) => return Ok(()),
            Err(err) => return Err(classify(&format!("inserting firewall rule {name}"), &err)),
        };
        let op = self.wait_global(op).await?;
        match check_operation(&format!("inserting firewall rule {name}"), &op) {
            Err(CloudError::Terminal(message)) if message.contains("ALREADY_EXISTS") => Ok(()),
            other => other,
        }
    }

    /// Finds or creates one firewall rule.
    async fn ensure_firewall(&self, cluster_id: &str, rule: Firewall) -> Result<(), CloudError> {
        let name = rule.name.clone().unwrap_or_default();
        if self.get_firewall(&name).await?.is_some() {
            return Ok(());
        }
        self.insert_firewall(&rule, &request_id(cluster_id, &format!("firewall/{name}"))).await?;
        if self.get_firewall(&name).await?.is_none() {
            // The request id was remembered from an earlier life of this rule, deleted since.
            self.insert_firewall(&rule, &uuid::Uuid::new_v4().to_string()).await?;
        }
        Ok(())
    }

    /// Deletes one firewall rule and waits; none is success.
    async fn delete_firewall(&self, name: &str) -> Result<(), CloudError> {
        let result = self.firewalls.delete().set_project(&self.project).set_firewall(name).send().await;
        let op = match result {
            Ok(op) => op,
            Err(err) if err.http_status_code() == Some(404) => return Ok(()),
            Err(err) => return Err(classify(&format!("deleting firewall rule {name}"), &err)),
        };
        let op = self.wait_global(op).await?;
        match check_operation(&format!("deleting firewall rule {name}"), &op) {
            Err(CloudError::Terminal(message)) if message.contains("NOT_FOUND") => Ok(()),
            other => other,
        }
    }

    /// Every instance of the cluster in the zone, in every state. A placement without a zone has
    /// none: no launch goes without one (a create cancelled before `pin_placement` pinned its zone
    /// leaves such a record, and its delete must find nothing rather than fail).
    async fn cluster_instances(&self, placement: &Placement) -> Result<Vec<Instance>, CloudError> {
        let Some(zone) = placement.zone.as_deref().filter(|zone| !zone.is_empty()) else { return Ok(Vec::new()) };
        let filter = format!("labels.{CLUSTER_TAG} = \"{}\"", placement.cluster_id);
        let mut instances = Vec::new();
        let mut page_token: Option<String> = None;
        loop {
            let list = self
                .instances
                .list()
                .set_project(&self.project)
                .set_zone(zone)
                .set_filter(&filter)
                .set_or_clear_page_token(page_token.take())
                .send()
                .await
                .map_err(|err| classify(&format!("listing the instances of cluster {}", placement.cluster_id), &err))?;
            instances.extend(list.items);
            match list.next_page_token.filter(|t| !t.is_empty()) {
                Some(token) => page_token = Some(token),
                None => break,
            }
        }
        // The filter is the cloud's; the label check is ours.
        instances.retain(|i| i.labels.get(CLUSTER_TAG).map(String::as_str) == Some(placement.cluster_id.as_str()));
        Ok(instances)
    }

    /// Asks for one instance's deletion; `None` when it is gone or its deletion is under way.
    async fn delete_instance(&self, zone: &str, instance: &Instance) -> Result<Option<Operation>, CloudError> {
        let name = instance.name.clone().unwrap_or_default();
        let id = instance.id.map(|id| id.to_string()).unwrap_or_else(|| name.clone());
        let result = self
            .instances
            .delete()
            .set_project(&self.project)
            .set_zone(zone)
            .set_instance(&name)
            .set_request_id(request_id(&id, "delete"))
            .send()
            .await;
        match result {
            Ok(op) => Ok(Some(op)),
            Err(err) if err.http_status_code() == Some(404) => Ok(None),
            // Another operation (an earlier delete) is under way on it.
            Err(err) if err.http_status_code() == Some(400) && reasons(&err).contains("resourceNotReady") => Ok(None),
            Err(err) => Err(classify(&format!("deleting instance {name} in {zone}"), &err)),
        }
    }

    /// The instance as a [`Vm`]; name and role from its labels (or else its name).
    fn vm(instance: &Instance) -> Vm {
        let name = instance.labels.get(NAME_TAG).cloned().unwrap_or_else(|| {
            let full = instance.name.clone().unwrap_or_default();
            full.rsplit('-').next().unwrap_or_default().to_owned()
        });
        let role = instance.labels.get(ROLE_TAG).and_then(|r| Role::parse(r)).unwrap_or(if name == "cp" {
            Role::ControlPlane
        } else {
            Role::Worker
        });
        let nic = instance.network_interfaces.first();
        Vm {
            provider_id: instance.id.map(|id| id.to_string()).unwrap_or_default(),
            name,
            role,
            state: status_name(instance),
            private_ip: nic.and_then(|n| n.network_ip.clone()).filter(|ip| !ip.is_empty()),
            public_ip: nic
                .and_then(|n| n.access_configs.first())
                .and_then(|a| a.nat_ip.clone())
                .filter(|ip| !ip.is_empty()),
        }
    }
}

#[async_trait]
impl Cloud for GcpCloud {
    /// The cheapest read call: one page of the project's zones. A refusal (401, 403, 404 on the
    /// project, or an authentication failure) is a verdict; anything else is an error to retry.
    async fn verify(&self) -> Result<Verdict, CloudError> {
        let project = &self.project;
        match self.zones.list().set_project(project).set_max_results(50_u32).send().await {
            Ok(list) => Ok(Verdict::Accepted {
                detail: format!("Compute Engine zones.list: {} zones visible in project {project}", list.items.len()),
            }),
            Err(err) if err.is_authentication() || matches!(err.http_status_code(), Some(401 | 403 | 404)) => {
                let message = match (err.status(), err.http_status_code()) {
                    (Some(status), _) => status.message.clone(),
                    (None, Some(code)) => format!("HTTP {code}, {}", not_google(&err)),
                    (None, None) => err.to_string(),
                };
                Ok(Verdict::Rejected { message: format!("Compute Engine refused the key: {message}") })
            }
            Err(err) => Err(match err.http_status_code() {
                // Whatever the answer, another attempt may do: only its words are kept.
                Some(_) => CloudError::Retryable(classify("calling Compute Engine zones.list", &err).to_string()),
                None => CloudError::retryable("calling Compute Engine zones.list", &err),
            }),
        }
    }

    async fn placement(&self, cluster_id: &str, region: &str, vm_type: &str) -> Result<Placement, CloudError> {
        let mut zones = Vec::new();
        let mut page_token: Option<String> = None;
        loop {
            let list = self
                .zones
                .list()
                .set_project(&self.project)
                .set_or_clear_page_token(page_token.take())
                .send()
                .await
                .map_err(|err| classify(&format!("listing the zones of project {}", self.project), &err))?;
            zones.extend(list.items);
            match list.next_page_token.filter(|t| !t.is_empty()) {
                Some(token) => page_token = Some(token),
                None => break,
            }
        }
        let region_of = |zone: &google_cloud_compute_v1::model::Zone| {
            zone.region.as_deref().and_then(|r| r.rsplit('/').next()).unwrap_or_default().to_owned()
        };
        let suffix = format!("/regions/{region}");
        let prefix = format!("{region}-");
        let mut in_region: Vec<String> = zones
            .iter()
            .filter(|z| {
                z.region.as_deref().is_some_and(|r| r.ends_with(&suffix) || r == region)
                    || z.name.as_deref().is_some_and(|n| n.starts_with(&prefix))
            })
            .filter_map(|z| z.name.clone())
            .collect();
        in_region.sort();
        let Some(zone) = in_region.into_iter().next() else {
            let mut regions: Vec<String> = zones.iter().map(region_of).filter(|r| !r.is_empty()).collect();
            regions.sort();
            regions.dedup();
            let some: Vec<&str> = regions.iter().take(10).map(String::as_str).collect();
            return Err(CloudError::Terminal(format!(
                "region {region} has no zone in project {}; available regions include: {}",
                self.project,
                if some.is_empty() { "(none)".to_owned() } else { some.join(", ") }
            )));
        };
        let result =
            self.machine_types.get().set_project(&self.project).set_zone(&zone).set_machine_type(vm_type).send().await;
        let machine_type = match result {
            Ok(machine_type) => machine_type,
            Err(err) if matches!(err.http_status_code(), Some(404 | 400)) => {
                return Err(CloudError::Terminal(format!(
                    "machine type {vm_type} is not offered in zone {zone}; e.g. {EXAMPLE_VM_TYPE}"
                )));
            }
            Err(err) => return Err(classify(&format!("reading machine type {vm_type} in {zone}"), &err)),
        };
        // The boot image is x86_64 (IMAGE); an Arm machine type cannot boot it. A type that names
        // no architecture is x86 (Compute Engine leaves the field unset on older families).
        if let Some(architecture) = machine_type
            .architecture
            .as_ref()
            .filter(|a| !matches!(a, machine_type::Architecture::X8664 | machine_type::Architecture::Unspecified))
        {
            return Err(CloudError::Terminal(format!(
                "machine type {vm_type} runs {} only, and clusters boot x86_64 Ubuntu: pick an x86_64 type, e.g. \
                 {EXAMPLE_VM_TYPE}",
                architecture.name().unwrap_or("another architecture")
            )));
        }
        Ok(Placement {
            cluster_id: cluster_id.to_owned(),
            region: region.to_owned(),
            zone: Some(zone),
            vm_type: vm_type.to_owned(),
            image: Some(IMAGE.to_owned()),
        })
    }

    /// The machine type's `architecture` (`X86_64`, `ARM64`) in the region's first zone, as
    /// [`Cloud::placement`] picks it; a type that names none (older ones) is x86_64.
    async fn vm_architectures(&self, region: &str, vm_type: &str) -> Result<Vec<crate::arch::Arch>, CloudError> {
        let placement = self.placement("architecture", region, vm_type).await?;
        let zone = placement.zone.unwrap_or_default();
        let machine = self
            .machine_types
            .get()
            .set_project(&self.project)
            .set_zone(&zone)
            .set_machine_type(vm_type)
            .send()
            .await
            .map_err(|err| classify(&format!("reading machine type {vm_type} in {zone}"), &err))?;
        let name = machine.architecture.as_ref().and_then(|a| a.name()).map(str::to_owned);
        match name.as_deref().filter(|a| !a.is_empty() && *a != "ARCHITECTURE_UNSPECIFIED") {
            None => Ok(vec![crate::arch::Arch::X86_64]),
            Some(name) => crate::arch::Arch::parse(name).map(|arch| vec![arch]).ok_or_else(|| {
                CloudError::Terminal(format!(
                    "machine type {vm_type} runs {name}, which no anycloud binary is built for"
                ))
            }),
        }
    }

    /// The rule `<prefix>-internal`: everything between the VMs tagged `<prefix>`.
    async fn ensure_network(&self, placement: &Placement) -> Result<Network, CloudError> {
        let prefix = cluster_prefix(&placement.cluster_id)?;
        let internal = Firewall::new()
            .set_name(format!("{prefix}-internal"))
            .set_description(format!("anycloud cluster {}: everything between the cluster's VMs", placement.cluster_id))
            .set_network(NETWORK)
            .set_direction(firewall::Direction::Ingress)
            .set_allowed([firewall::Allowed::new().set_ip_protocol("all")])
            .set_source_tags([prefix.clone()])
            .set_target_tags([prefix.clone()]);
        self.ensure_firewall(&placement.cluster_id, internal).await?;
        Ok(Network { id: prefix })
    }

    /// The rules `<prefix>-kube-api` (TCP 6443) and `<prefix>-wireguard` (UDP 51820), from
    /// exactly the openings' sources to the VMs tagged `<prefix>`; a rule with other sources is
    /// replaced, one with none deleted, and the SSH rule of older versions (`<prefix>-ssh-api`)
    /// goes.
    async fn open_network(&self, placement: &Placement, openings: &Openings) -> Result<(), CloudError> {
        let prefix = cluster_prefix(&placement.cluster_id)?;
        self.delete_firewall(&format!("{prefix}-ssh-api")).await?;
        let rules = [
            ("kube-api", "tcp", KUBE_API_PORT, &openings.kube_api, "the Kubernetes API"),
            ("wireguard", "udp", WIREGUARD_PORT, &openings.wireguard, "flannel's WireGuard"),
        ];
        for (suffix, protocol, port, sources, what) in rules {
            let name = format!("{prefix}-{suffix}");
            let mut wanted = sources.clone();
            wanted.sort();
            let existing = self.get_firewall(&name).await?;
            if let Some(rule) = &existing {
                let mut present = rule.source_ranges.clone();
                present.sort();
                if present == wanted {
                    continue;
                }
                self.delete_firewall(&name).await?;
            }
            if wanted.is_empty() {
                continue;
            }
            let rule = Firewall::new()
                .set_name(&name)
                .set_description(format!(
                    "anycloud cluster {}: {what} from the cluster's own addresses",
                    placement.cluster_id
                ))
                .set_network(NETWORK)
                .set_direction(firewall::Direction::Ingress)
                .set_allowed([firewall::Allowed::new().set_ip_protocol(protocol).set_ports([port.to_string()])])
                .set_source_ranges(wanted.clone())
                .set_target_tags([prefix.clone()]);
            // A request id per content: a rule replaced with other sources is a new request.
            let key = format!("firewall/{name}/{}", wanted.join(","));
            self.insert_firewall(&rule, &request_id(&placement.cluster_id, &key)).await?;
        }
        Ok(())
    }

    /// The rule `<prefix>-https`: the API's port from anywhere to the VMs tagged `<prefix>`.
    async fn ensure_api_network(&self, placement: &Placement, port: u16) -> Result<Network, CloudError> {
        let prefix = cluster_prefix(&placement.cluster_id)?;
        let rule = Firewall::new()
            .set_name(format!("{prefix}-https"))
            .set_description(format!("anycloud {}: the API's HTTPS port from anywhere", placement.cluster_id))
            .set_network(NETWORK)
            .set_direction(firewall::Direction::Ingress)
            .set_allowed([firewall::Allowed::new().set_ip_protocol("tcp").set_ports([port.to_string()])])
            .set_source_ranges(["0.0.0.0/0"])
            .set_target_tags([prefix.clone()]);
        self.ensure_firewall(&placement.cluster_id, rule).await?;
        Ok(Network { id: prefix })
    }

    /// The API's own service account ([`gcp_iam`]), made unless it exists, granted its Compute
    /// Engine roles on the project, and bound to read each of `secrets` (as
    /// [`Cloud::store_vm_secret`] answered them); its bucket's binding is the deploy's, made with
    /// the storage credential that owns the bucket. The VM acts as it through its metadata server.
    async fn ensure_vm_identity(&self, owner: &str, _bucket: &str, secrets: &[String]) -> Result<String, CloudError> {
        let identities = self.identities().await?;
        let email = identities.ensure_account(owner).await?;
        identities.grant_project_roles(&email).await?;
        let client = self.secret_manager().await?;
        for secret in secrets {
            gcp_secrets::let_read(&client, secret, &email).await?;
        }
        Ok(email)
    }

    fn bucket_member(&self, owner: &str) -> Option<String> {
        Some(gcp_iam::member(&gcp_iam::email(owner, &self.project)))
    }

    /// Removes the account's project bindings, then the account.
    async fn delete_vm_identity(&self, owner: &str) -> Result<(), CloudError> {
        let identities = self.identities().await?;
        identities.revoke_project_roles(&gcp_iam::email(owner, &self.project)).await?;
        identities.delete_account(owner).await
    }

    /// The secret, readable by the API's own service account alone (made here first if it is
    /// not yet: Secret Manager refuses a binding to an account that does not exist).
    async fn store_vm_secret(&self, owner: &str, name: &str, value: &str) -> Result<String, CloudError> {
        let reader = self.identities().await?.ensure_account(owner).await?;
        let client = self.secret_manager().await?;
        gcp_secrets::store(&client, &self.project, owner, name, value, &reader).await
    }

    async fn read_vm_secret(&self, name: &str) -> Result<Option<String>, CloudError> {
        gcp_secrets::read(&self.secret_manager().await?, &self.project, name).await
    }

    async fn delete_vm_secret(&self, name: &str) -> Result<(), CloudError> {
        gcp_secrets::delete(&self.secret_manager().await?, &self.project, name).await
    }

    /// A static external address (`gcp_addresses`), the instance's `natIP` at launch.
    async fn ensure_address(&self, placement: &Placement, name: &str) -> Result<Address, CloudError> {
        self.reserved.ensure(placement, name).await
    }

    async fn release_addresses(&self, placement: &Placement) -> Result<(), CloudError> {
        self.reserved.release_all(placement).await
    }

    async fn list_addresses(&self, placement: &Placement) -> Result<Vec<Address>, CloudError> {
        self.reserved.list(placement).await
    }

    async fn delete_network(&self, placement: &Placement) -> Result<(), CloudError> {
        let prefix = cluster_prefix(&placement.cluster_id)?;
        for rule in firewall_names(&prefix) {
            self.delete_firewall(&rule).await?;
        }
        Ok(())
    }

    async fn network_exists(&self, placement: &Placement) -> Result<bool, CloudError> {
        let prefix = cluster_prefix(&placement.cluster_id)?;
        for rule in firewall_names(&prefix) {
            if self.get_firewall(&rule).await?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn launch(&self, spec: &LaunchSpec<'_>) -> Result<Vm, CloudError> {
        let placement = spec.placement;
        let zone = Self::zone(placement)?;
        let prefix = cluster_prefix(&placement.cluster_id)?;
        let name = format!("{prefix}-{}", spec.name);
        if !valid_name(&name) {
            return Err(CloudError::Terminal(format!(
                "VM name {} gives the GCE name {name}, which is not [a-z]([-a-z0-9]{{0,61}}[a-z0-9])?",
                spec.name
            )));
        }
        if !valid_label_value(&placement.cluster_id) || !valid_label_value(&spec.name) {
            return Err(CloudError::Terminal(format!(
                "cluster id {} or VM name {} cannot be a GCE label value ([a-z0-9_-]{{0,63}})",
                placement.cluster_id, spec.name
            )));
        }
        if let Some(existing) = self.get_instance(zone, &name).await? {
            return self.existing(zone, &name, &existing).await;
        }
        let image = placement.image.clone().unwrap_or_else(|| IMAGE.to_owned());
        let labels = HashMap::from([
            (CLUSTER_TAG.to_owned(), placement.cluster_id.clone()),
            (NAME_TAG.to_owned(), spec.name.clone()),
            (ROLE_TAG.to_owned(), spec.role.as_str().to_owned()),
        ]);
        let body = Instance::new()
            .set_name(&name)
            .set_description(format!("anycloud cluster {} VM {}", placement.cluster_id, spec.name))
            .set_machine_type(format!("zones/{zone}/machineTypes/{}", placement.vm_type))
            .set_labels(labels.clone())
            .set_tags(Tags::new().set_items([spec.network.id.clone()]))
            .set_service_accounts(spec.vm_identity.iter().map(|email| {
                // Secret Manager has no narrower scope; the secret's own IAM binding limits it.
                let scope = if spec.reads_secret { CLOUD_PLATFORM_SCOPE } else { STORAGE_SCOPE };
                ServiceAccount::new().set_email(email).set_scopes([scope])
            }))
            .set_disks([AttachedDisk::new().set_boot(true).set_auto_delete(true).set_initialize_params(
                // The boot disk carries the cluster's labels too (it is deleted with the VM).
                AttachedDiskInitializeParams::new().set_source_image(image).set_labels(labels),
            )])
            .set_network_interfaces([NetworkInterface::new().set_network(NETWORK).set_access_configs([
                // The reserved address, when the VM has one; else an ephemeral one.
                AccessConfig::new()
                    .set_name("External NAT")
                    .set_type(access_config::Type::OneToOneNat)
                    .set_or_clear_nat_ip(spec.address.map(|address| address.ip.clone())),
            ])])
            // Once, as `startup-script`: GCE's guest agent runs it at every boot (the script stops
            // at its own run-once marker). Sent as `user-data` too, Ubuntu's cloud-init would run
            // it a second time, at the same first boot.
            .set_metadata(
                Metadata::new()
                    .set_items([metadata::Items::new().set_key("startup-script").set_value(&spec.user_data)]),
            );
        let created = self.insert_instance(zone, &body, &spec.token.to_string()).await?;
        let instance = match self.get_instance(zone, &name).await? {
            Some(instance) => instance,
            None if created => {
                // GCE answered the request id with an earlier operation whose instance is gone.
                self.insert_instance(zone, &body, &uuid::Uuid::new_v4().to_string()).await?;
                self.get_instance(zone, &name).await?.ok_or_else(|| {
                    CloudError::Retryable(format!("instance {name} in {zone} is missing after its insert"))
                })?
            }
            None => return Err(CloudError::Retryable(format!("instance {name} in {zone} exists and is gone again"))),
        };
        self.existing(zone, &name, &instance).await
    }

    async fn list_vms(&self, placement: &Placement) -> Result<Vec<Vm>, CloudError> {
        let mut vms: Vec<Vm> = self
            .cluster_instances(placement)
            .await?
            .iter()
            .filter(|i| status_name(i) != "TERMINATED")
            .map(Self::vm)
            .collect();
        vms.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(vms)
    }

    async fn terminate(&self, placement: &Placement, provider_ids: &[String]) -> Result<(), CloudError> {
        if provider_ids.is_empty() {
            return Ok(());
        }
        let zone = Self::zone(placement)?;
        let instances = self.cluster_instances(placement).await?;
        let mut operations = Vec::new();
        for instance in &instances {
            let id = instance.id.map(|id| id.to_string()).unwrap_or_default();
            if provider_ids.contains(&id)
                && let Some(op) = self.delete_instance(zone, instance).await?
            {
                operations.push(op);
            }
        }
        for op in operations {
            let op = self.wait_zone(zone, op).await?;
            match check_operation("deleting an instance", &op) {
                Err(CloudError::Terminal(message)) if message.contains("NOT_FOUND") => {}
                other => other?,
            }
        }
        Ok(())
    }
}

impl GcpCloud {
    /// The IAM Admin and Resource Manager clients of this credential.
    async fn identities(&self) -> Result<gcp_iam::VmIdentities, CloudError> {
        gcp_iam::VmIdentities::new(&self.project, self.credentials.clone(), self.endpoint.as_deref()).await
    }

    /// The Secret Manager client of this credential.
    async fn secret_manager(&self) -> Result<google_cloud_secretmanager_v1::client::SecretManagerService, CloudError> {
        gcp_secrets::client(Some(self.credentials.clone()), self.endpoint.as_deref())
            .await
            .map_err(CloudError::Terminal)
    }

    /// What `launch` does with an instance of the VM's name that exists: returns it when it is
    /// live, and otherwise (stopped, suspended, being deleted) asks for its deletion, so that a
    /// retry of the launch creates it anew.
    async fn existing(&self, zone: &str, name: &str, instance: &Instance) -> Result<Vm, CloudError> {
        let status = status_name(instance);
        if LIVE_STATES.contains(&status.as_str()) {
            return Ok(Self::vm(instance));
        }
        if let Some(op) = self.delete_instance(zone, instance).await? {
            let op = self.wait_zone(zone, op).await?;
            check_operation(&format!("deleting instance {name}"), &op)?;
        }
        Err(CloudError::Retryable(format!("instance {name} in {zone} is {status}: deleted, to be launched again")))
    }
}

/// The names of every firewall rule a cluster or a hosted API may have (`-https` is a hosted
/// API's; `-ssh-api` was a cluster's before it opened only its own addresses).
fn firewall_names(prefix: &str) -> [String; 5] {
    ["ssh-api", "internal", "https", "kube-api", "wireguard"].map(|suffix| format!("{prefix}-{suffix}"))
}

/// What a hosted API's VM may do as its service account: read and write Cloud Storage.
const STORAGE_SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";
/// What a hosted API's VM that reads a Secret Manager secret is given instead (it has no own
/// scope); its service account's IAM, and the secret's binding, decide what it may do.
const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The instance's status in GCE's words (`RUNNING`, ...).
fn status_name(instance: &Instance) -> String {
    instance.status.as_ref().and_then(|s| s.name()).unwrap_or("UNKNOWN").to_owned()
}
