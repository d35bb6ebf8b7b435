//! Elastic IPs: the stable public address of a cluster's control plane and of a hosted API's VM
//! on AWS. An instance's own public IPv4 address changes when it is stopped and started, and a
//! replacement instance gets another; an Elastic IP stays the account's until it is released
//! (EC2 User Guide, "Elastic IP addresses").
//!
//! - `ensure`: DescribeAddresses by the owner's tag and the VM's name, else AllocateAddress
//!   (domain `vpc`) with those tags. AllocateAddress takes no client token: an answer lost and
//!   sent again may allocate twice, so when the tags find more than one, the one associated (else
//!   the lowest allocation id) is kept and the others, associated with nothing, are released.
//! - `attach`: AssociateAddress (with `AllowReassociation`) once the instance is `running`;
//!   done when DescribeAddresses shows it on the instance.
//! - `release`: every address with the owner's tag: DisassociateAddress when it is still
//!   associated (terminating an instance disassociates it; a stopped one keeps it), then
//!   ReleaseAddress. Gone is success.

use aws_sdk_ec2::Client;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{Address as Eip, DomainType, ResourceType, Tag, TagSpecification};

use super::aws_ec2::{cluster_filter, console_name, ec2_failure, filter, tag};
use crate::cloud::{Address, CLUSTER_TAG, CloudError, NAME_TAG, Placement, Vm};

/// The Elastic IPs carrying the owner's tag (and the name tag, when given).
async fn described(client: &Client, owner: &str, name: Option<&str>) -> Result<Vec<Eip>, CloudError> {
    let mut filters = vec![cluster_filter(owner)];
    if let Some(name) = name {
        filters.push(filter(&format!("tag:{NAME_TAG}"), [name]));
    }
    let output = client
        .describe_addresses()
        .set_filters(Some(filters))
        .send()
        .await
        .map_err(|err| ec2_failure("DescribeAddresses", &err))?;
    let mut addresses = output.addresses().to_vec();
    // The filter is EC2's; the tag check is ours.
    addresses.retain(|eip| eip.tags().iter().any(|t| t.key() == Some(CLUSTER_TAG) && t.value() == Some(owner)));
    addresses.sort_by_key(|eip| (eip.association_id().is_none(), eip.allocation_id().map(str::to_owned)));
    Ok(addresses)
}

fn address_of(eip: &Eip) -> Option<Address> {
    Some(Address { id: eip.allocation_id()?.to_owned(), ip: eip.public_ip()?.to_owned() })
}

/// Releases one Elastic IP, disassociating it first; gone is success.
async fn release(client: &Client, eip: &Eip) -> Result<(), CloudError> {
    let Some(allocation) = eip.allocation_id() else { return Ok(()) };
    if let Some(association) = eip.association_id() {
        match client.disassociate_address().association_id(association).send().await {
            Ok(_) => {}
            Err(err) if err.code() == Some("InvalidAssociationID.NotFound") => {}
            Err(err) => return Err(ec2_failure("DisassociateAddress", &err)),
        }
    }
    match client.release_address().allocation_id(allocation).send().await {
        Ok(_) => Ok(()),
        Err(err) if err.code() == Some("InvalidAllocationID.NotFound") => Ok(()),
        Err(err) if err.code() == Some("InvalidIPAddress.InUse") => Err(CloudError::Retryable(format!(
            "Elastic IP {allocation} is still associated (its instance may still be shutting down); it is released \
             once it is free"
        ))),
        Err(err) => Err(ec2_failure("ReleaseAddress", &err)),
    }
}

/// The Elastic IP `name` of `owner`, if any: the one associated, else the lowest allocation id;
/// the others of that name (an allocation sent twice), associated with nothing, are released.
async fn keep_one(client: &Client, owner: &str, name: &str) -> Result<Option<Address>, CloudError> {
    let found = described(client, owner, Some(name)).await?;
    let Some((kept, extra)) = found.split_first() else { return Ok(None) };
    for duplicate in extra.iter().filter(|eip| eip.association_id().is_none()) {
        tracing::warn!(
            owner = %owner, vm = %name, released = ?duplicate.allocation_id(),
            "releasing a duplicate Elastic IP (an allocation was sent twice)"
        );
        release(client, duplicate).await?;
    }
    address_of(kept)
        .map(Some)
        .ok_or_else(|| CloudError::Retryable(format!("Elastic IP of {owner}/{name} is listed without its address")))
}

/// Finds or allocates the Elastic IP `name` of `placement.cluster_id`.
pub(super) async fn ensure(
    client: &Client,
    placement: &Placement,
    name: &str,
    owner_tags: Vec<Tag>,
) -> Result<Address, CloudError> {
    let owner = &placement.cluster_id;
    if let Some(kept) = keep_one(client, owner, name).await? {
        return Ok(kept);
    }
    let tags =
        [vec![tag(CLUSTER_TAG, owner), tag(NAME_TAG, name), tag("Name", &console_name(owner, name))], owner_tags];
    let tags = TagSpecification::builder().resource_type(ResourceType::ElasticIp).set_tags(Some(tags.concat())).build();
    let allocated = match client.allocate_address().domain(DomainType::Vpc).tag_specifications(tags).send().await {
        Ok(allocated) => allocated,
        Err(err) if err.code() == Some("AddressLimitExceeded") => {
            return Err(CloudError::Terminal(format!(
                "EC2 AllocateAddress: AddressLimitExceeded: the account's Elastic IP quota in {} is used up; release \
                 unused Elastic IPs or ask AWS to raise the quota",
                placement.region
            )));
        }
        Err(err) => return Err(ec2_failure("AllocateAddress", &err)),
    };
    let allocated = match (allocated.allocation_id(), allocated.public_ip()) {
        (Some(id), Some(ip)) => Address { id: id.to_owned(), ip: ip.to_owned() },
        _ => return Err(CloudError::Retryable("EC2 AllocateAddress answered without an allocation id".to_owned())),
    };
    // The SDK sends AllocateAddress again when an attempt's answer is lost, and each allocates:
    // keep one.
    Ok(keep_one(client, owner, name).await?.unwrap_or(allocated))
}

/// Associates `address` with `vm` once it runs; `Ok(true)` once EC2 shows it there.
pub(super) async fn attach(
    client: &Client,
    placement: &Placement,
    address: &Address,
    vm: &Vm,
) -> Result<bool, CloudError> {
    let on_vm = |eips: &[Eip]| {
        eips.iter().any(|eip| {
            eip.allocation_id() == Some(address.id.as_str()) && eip.instance_id() == Some(vm.provider_id.as_str())
        })
    };
    if on_vm(&described(client, &placement.cluster_id, None).await?) {
        return Ok(true);
    }
    if vm.state != "running" {
        return Ok(false);
    }
    client
        .associate_address()
        .allocation_id(&address.id)
        .instance_id(&vm.provider_id)
        .allow_reassociation(true)
        .send()
        .await
        .map_err(|err| ec2_failure("AssociateAddress", &err))?;
    Ok(on_vm(&described(client, &placement.cluster_id, None).await?))
}

/// Releases every Elastic IP of `placement.cluster_id`.
pub(super) async fn release_all(client: &Client, placement: &Placement) -> Result<(), CloudError> {
    for eip in described(client, &placement.cluster_id, None).await? {
        release(client, &eip).await?;
    }
    Ok(())
}

/// The Elastic IPs of `placement.cluster_id`.
pub(super) async fn list(client: &Client, placement: &Placement) -> Result<Vec<Address>, CloudError> {
    Ok(described(client, &placement.cluster_id, None).await?.iter().filter_map(address_of).collect())
}
