//! [`Cloud`] on AWS: EC2 instances in the region's default VPC, one security group per
//! cluster, an Ubuntu LTS image by Canonical. Every resource carries the cluster's tag
//! ([`CLUSTER_TAG`]), and every lookup goes by that tag, so a retried or restarted step finds
//! what an earlier attempt made instead of making it twice.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_ec2::Client;
use aws_sdk_ec2::config::Region;
use aws_sdk_ec2::config::timeout::TimeoutConfig;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::{
    ArchitectureType, Filter, HttpTokensState, IamInstanceProfileSpecification, Image, Instance,
    InstanceMetadataEndpointState, InstanceMetadataOptionsRequest, InstanceType, IpPermission, IpRange, LocationType,
    ResourceType, SecurityGroup, Tag, TagSpecification, UserIdGroupPair,
};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::aws_ec2::{cluster_filter, console_name, ec2_failure, filter, tag};
use super::{aws, aws_addresses, aws_iam, aws_secrets};
use crate::cloud::Openings;
use crate::cloud::Verdict;
use crate::cloud::{
    Address, CLUSTER_TAG, Cloud, CloudError, LaunchSpec, NAME_TAG, Network, OWNER_TAG, Placement, ROLE_TAG, Role, Vm,
};
use crate::credential::PublicPart;

/// Canonical's AWS account: the owner of the official Ubuntu images.
const CANONICAL: &str = "099720109477";

/// The Ubuntu releases a cluster boots, newest first wins: 24.04 (noble) and 22.04 (jammy),
/// amd64 server images on EBS (`hvm-ssd` and `hvm-ssd-gp3`).
const PREFERRED_IMAGES: &[&str] = &[
    "ubuntu/images/hvm-ssd*/ubuntu-noble-24.04-amd64-server-*",
    "ubuntu/images/hvm-ssd*/ubuntu-jammy-22.04-amd64-server-*",
];

/// Any Canonical Ubuntu amd64 server image on EBS: used only when no preferred release is
/// published in the region (a newer LTS in a future region; moto, which has only 14.04 and
/// 16.04). The highest release wins.
const ANY_UBUNTU_IMAGE: &str = "ubuntu/images/hvm-ssd*/ubuntu-*-amd64-server-*";

/// The machine type an error suggests when the one asked for is not offered.
const EXAMPLE_VM_TYPE: &str = "t3.medium";

/// Regions an error names first when the one asked for is unknown, if they are enabled.
const EXAMPLE_REGIONS: &[&str] = &["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-1"];

/// The states of a VM that is, or will again be, the cluster's: `launch` returns it rather
/// than launching another.
const LIVE_STATES: &[&str] = &["pending", "running", "stopping", "stopped"];

/// The states `list_vms` reports: every state but `terminated`.
const LISTED_STATES: &[&str] = &["pending", "running", "shutting-down", "stopping", "stopped"];

/// An AWS account as the cluster workflows use it: EC2 in one region.
#[derive(Debug, Clone)]
pub struct AwsCloud {
    /// In the credential's own region, which is known to answer: asks which regions exist.
    home: Client,
    /// In the cluster's region.
    regional: Client,
    /// The cluster's region.
    region: String,
    /// IAM (global): the role a hosted API's VM acts as.
    iam: aws_sdk_iam::Client,
    /// Secrets Manager in the cluster's region: what a hosted API's VM reads as itself.
    secrets: aws_sdk_secretsmanager::Client,
    /// STS: who the credential is (the deployer a hosted API's secrets stay readable by).
    sts: aws_sdk_sts::Client,
    /// The owner tag ([`OWNER_TAG`]) put on every resource made, when the API has one.
    owner: Option<String>,
}

impl AwsCloud {
    /// EC2 in `region` for these keys; the credential's endpoint override (a private endpoint,
    /// moto in tests) applies to every call.
    pub fn new(public: &PublicPart, secret_access_key: &str, region: &str) -> Self {
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(10))
            .operation_attempt_timeout(Duration::from_secs(60))
            .operation_timeout(Duration::from_secs(180))
            .build();
        let home_config =
            aws::ec2_client(public, secret_access_key).config().to_builder().timeout_config(timeouts.clone());
        let regional = Client::from_conf(home_config.clone().region(Region::new(region.to_owned())).build());
        let iam = aws::iam_client(public, secret_access_key, timeouts);
        let secrets = aws_secrets::client(public, secret_access_key, region);
        let sts = aws::sts_client(public, secret_access_key, region);
        Self {
            sts,
            home: Client::from_conf(home_config.build()),
            regional,
            region: region.to_owned(),
            iam,
            secrets,
            owner: None,
        }
    }

    /// The same, tagging every resource it makes with [`OWNER_TAG`] `owner` (a deployed API's
    /// owner id, on which its VM's role conditions every change).
    #[must_use]
    pub fn owned_by(mut self, owner: Option<String>) -> Self {
        self.owner = owner;
        self
    }

    /// The owner tag, as a list of none or one.
    fn owner_tags(&self) -> Vec<Tag> {
        self.owner.iter().map(|owner| tag(OWNER_TAG, owner)).collect()
    }

    /// The client for `region`: the cluster's, or one made for a placement elsewhere.
    fn client_in(&self, region: &str) -> Client {
        if region == self.region {
            return self.regional.clone();
        }
        Client::from_conf(self.regional.config().to_builder().region(Region::new(region.to_owned())).build())
    }

    /// The cluster's security group in the region's default VPC, made when missing.
    async fn cluster_group(&self, client: &Client, placement: &Placement) -> Result<SecurityGroup, CloudError> {
        let vpc_id = default_vpc(client, &placement.region).await?;
        let description = format!(
            "anycloud cluster {}: all traffic within, the Kubernetes API and WireGuard from the cluster's own addresses",
            placement.cluster_id
        );
        find_or_create_group(client, &placement.cluster_id, &vpc_id, &description, self.owner_tags()).await
    }

    /// Fails unless `region` is enabled for these keys; the error names some that are.
    async fn check_region(&self, region: &str) -> Result<(), CloudError> {
        let output = self.home.describe_regions().send().await.map_err(|err| ec2_failure("DescribeRegions", &err))?;
        let mut enabled: Vec<&str> = output.regions().iter().filter_map(|r| r.region_name()).collect();
        if enabled.contains(&region) {
            return Ok(());
        }
        enabled.sort_unstable();
        let mut examples: Vec<&str> = EXAMPLE_REGIONS.iter().copied().filter(|r| enabled.contains(r)).collect();
        if examples.is_empty() {
            examples = enabled.iter().copied().take(EXAMPLE_REGIONS.len()).collect();
        }
        Err(CloudError::Terminal(format!(
            "unknown AWS region `{region}`: {} regions are enabled for these keys, e.g. {}",
            enabled.len(),
            examples.join(", ")
        )))
    }
}

/// Fails unless `vm_type` is offered in `region` and runs amd64 (the images are amd64).
async fn check_vm_type(client: &Client, region: &str, vm_type: &str) -> Result<(), CloudError> {
    let offerings = client
        .describe_instance_type_offerings()
        .location_type(LocationType::Region)
        .filters(filter("instance-type", [vm_type]))
        .send()
        .await
        .map_err(|err| ec2_failure("DescribeInstanceTypeOfferings", &err))?;
    if offerings.instance_type_offerings().is_empty() {
        return Err(CloudError::Terminal(format!(
            "unknown instance type `{vm_type}` in region {region}: it is not offered there; pick one that is, \
             e.g. {EXAMPLE_VM_TYPE}"
        )));
    }
    let types = client
        .describe_instance_types()
        .instance_types(InstanceType::from(vm_type))
        .send()
        .await
        .map_err(|err| ec2_failure("DescribeInstanceTypes", &err))?;
    let architectures: Vec<&ArchitectureType> = types
        .instance_types()
        .iter()
        .filter_map(|info| info.processor_info())
        .flat_map(|processor| processor.supported_architectures())
        .collect();
    if !architectures.is_empty() && !architectures.contains(&&ArchitectureType::X8664) {
        let names: Vec<&str> = architectures.iter().map(|a| a.as_str()).collect();
        return Err(CloudError::Terminal(format!(
            "instance type `{vm_type}` runs {} only, and clusters boot amd64 Ubuntu: pick an x86_64 type, e.g. \
             {EXAMPLE_VM_TYPE}",
            names.join(", ")
        )));
    }
    Ok(())
}

/// The newest Ubuntu 24.04 or 22.04 amd64 image by Canonical in the client's region, else the
/// highest Ubuntu release Canonical publishes there.
async fn ubuntu_image(client: &Client, region: &str) -> Result<String, CloudError> {
    for patterns in [PREFERRED_IMAGES, &[ANY_UBUNTU_IMAGE]] {
        let output = client
            .describe_images()
            .owners(CANONICAL)
            .filters(filter("name", patterns.iter().copied()))
            .filters(filter("architecture", ["x86_64"]))
            .filters(filter("state", ["available"]))
            .send()
            .await
            .map_err(|err| ec2_failure("DescribeImages", &err))?;
        if let Some(id) =
            output.images().iter().max_by(|a, b| image_rank(a).cmp(&image_rank(b))).and_then(Image::image_id)
        {
            return Ok(id.to_owned());
        }
    }
    Err(CloudError::Terminal(format!(
        "no Ubuntu amd64 server image by Canonical (owner {CANONICAL}) is available in region {region}"
    )))
}

/// How recent an Ubuntu image is: its release (`24.04` in `ubuntu-noble-24.04-amd64-server-...`),
/// then when it was made, then its name.
fn image_rank(image: &Image) -> ((u32, u32), &str, &str) {
    let name = image.name().unwrap_or_default();
    let release = name
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .split('-')
        .find_map(|part| {
            let (major, minor) = part.split_once('.')?;
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
        .unwrap_or_default();
    (release, image.creation_date().unwrap_or_default(), name)
}

/// The value of the tag `key`, when present.
fn tag_value<'a>(tags: &'a [Tag], key: &str) -> Option<&'a str> {
    tags.iter().find(|t| t.key() == Some(key)).and_then(Tag::value)
}

/// The metadata service as every instance (cluster VMs and a hosted API's VM) gets it, whatever
/// its image says: on (`HttpEndpoint=enabled`; the boot scripts read the VM's public address
/// there), IMDSv2 only (`HttpTokens=required`: a request without a session token is refused, so a
/// forged GET reads nothing), and a hop limit of 1 (`HttpPutResponseHopLimit=1`: the answer that
/// carries a session token does not survive the extra hop into a container's network namespace,
/// so a Pod cannot open a session; the node's own iptables rule drops its packets before that,
/// `user_data`). EC2 User Guide, "Configure the Instance Metadata Service options"; an image
/// marked `imdsSupport: v2.0`, as recent Ubuntu images are, would otherwise give a hop limit of 2.
pub(crate) fn imds_v2_only() -> InstanceMetadataOptionsRequest {
    InstanceMetadataOptionsRequest::builder()
        .http_endpoint(InstanceMetadataEndpointState::Enabled)
        .http_tokens(HttpTokensState::Required)
        .http_put_response_hop_limit(1)
        .build()
}

/// The name of a cluster's security group.
fn group_name(cluster_id: &str) -> String {
    format!("anycloud-{cluster_id}")
}

/// One ingress rule of a cluster's security group.
#[derive(Debug, Clone, Copy)]
enum Ingress {
    /// A TCP port, from anywhere (a hosted API's own port).
    TcpFromAnywhere(i32),
    /// All traffic between the cluster's own VMs (from the group itself).
    AllFromCluster,
}

impl Ingress {
    /// The rule as EC2 takes it, for the group `group_id`.
    fn permission(self, group_id: &str) -> IpPermission {
        match self {
            Self::TcpFromAnywhere(port) => IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(port)
                .to_port(port)
                .ip_ranges(IpRange::builder().cidr_ip("0.0.0.0/0").description("anycloud").build())
                .build(),
            Self::AllFromCluster => IpPermission::builder()
                .ip_protocol("-1")
                .user_id_group_pairs(UserIdGroupPair::builder().group_id(group_id).build())
                .build(),
        }
    }

    /// Whether the group `group` already allows it.
    fn is_in(self, group: &SecurityGroup) -> bool {
        let group_id = group.group_id().unwrap_or_default();
        group.ip_permissions().iter().any(|existing| match self {
            Self::TcpFromAnywhere(port) => {
                existing.ip_protocol() == Some("tcp")
                    && existing.from_port() == Some(port)
                    && existing.to_port() == Some(port)
                    && existing.ip_ranges().iter().any(|range| range.cidr_ip() == Some("0.0.0.0/0"))
            }
            Self::AllFromCluster => {
                existing.ip_protocol() == Some("-1")
                    && existing.user_id_group_pairs().iter().any(|pair| pair.group_id() == Some(group_id))
            }
        })
    }
}

/// One rule of a cluster's group that lets a CIDR in: protocol, port range, source.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct CidrRule {
    protocol: String,
    from_port: i32,
    to_port: i32,
    source: String,
}

impl CidrRule {
    fn new(protocol: &str, port: u16, source: &str) -> Self {
        let port = i32::from(port);
        Self { protocol: protocol.to_owned(), from_port: port, to_port: port, source: source.to_owned() }
    }

    /// The rule one IPv4 range of `permission` is; `None` for one EC2 gives without ports.
    fn of(permission: &IpPermission, range: &IpRange) -> Option<Self> {
        Some(Self {
            protocol: permission.ip_protocol()?.to_owned(),
            from_port: permission.from_port().unwrap_or(-1),
            to_port: permission.to_port().unwrap_or(-1),
            source: range.cidr_ip()?.to_owned(),
        })
    }

    /// The rule as EC2 takes it.
    fn permission(&self) -> IpPermission {
        IpPermission::builder()
            .ip_protocol(&self.protocol)
            .from_port(self.from_port)
            .to_port(self.to_port)
            .ip_ranges(IpRange::builder().cidr_ip(&self.source).build())
            .build()
    }
}

/// The region's default VPC, where the cluster's group and VMs live.
async fn default_vpc(client: &Client, region: &str) -> Result<String, CloudError> {
    let output = client
        .describe_vpcs()
        .filters(filter("is-default", ["true"]))
        .send()
        .await
        .map_err(|err| ec2_failure("DescribeVpcs", &err))?;
    output.vpcs().iter().find_map(|vpc| vpc.vpc_id()).map(str::to_owned).ok_or_else(|| {
        CloudError::Terminal(format!(
            "region {region} has no default VPC; create one (`aws ec2 create-default-vpc --region {region}`)"
        ))
    })
}

/// The security groups matching `filters`.
async fn security_groups(client: &Client, filters: Vec<Filter>) -> Result<Vec<SecurityGroup>, CloudError> {
    client
        .describe_security_groups()
        .set_filters(Some(filters))
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|err| ec2_failure("DescribeSecurityGroups", &err))
}

/// The cluster's group in `vpc_id`, made when missing. A group of the cluster's name that
/// exists already (a create whose answer was lost) is adopted and tagged.
async fn find_or_create_group(
    client: &Client,
    cluster_id: &str,
    vpc_id: &str,
    description: &str,
    owner_tags: Vec<Tag>,
) -> Result<SecurityGroup, CloudError> {
    let name = group_name(cluster_id);
    let mut tagged = security_groups(client, vec![cluster_filter(cluster_id), filter("vpc-id", [vpc_id])]).await?;
    tagged.sort_by_key(|group| (group.group_name() != Some(name.as_str()), group.group_id().map(str::to_owned)));
    if let Some(group) = tagged.into_iter().next() {
        return Ok(group);
    }
    let created = client
        .create_security_group()
        .group_name(&name)
        .description(description)
        .vpc_id(vpc_id)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::SecurityGroup)
                .set_tags(Some([vec![tag(CLUSTER_TAG, cluster_id), tag("Name", &name)], owner_tags].concat()))
                .build(),
        )
        .send()
        .await;
    match created {
        Ok(output) => {
            let id = output.group_id().ok_or_else(|| {
                CloudError::Retryable("EC2 CreateSecurityGroup answered without a group id".to_owned())
            })?;
            Ok(SecurityGroup::builder().group_id(id).group_name(name).vpc_id(vpc_id).build())
        }
        Err(err) if err.code() == Some("InvalidGroup.Duplicate") => {
            let named =
                security_groups(client, vec![filter("group-name", [name.as_str()]), filter("vpc-id", [vpc_id])])
                    .await?
                    .into_iter()
                    .next()
                    .ok_or_else(|| {
                        CloudError::Retryable(format!("security group {name} exists but cannot be found yet"))
                    })?;
            let id = named.group_id().unwrap_or_default();
            client
                .create_tags()
                .resources(id)
                .tags(tag(CLUSTER_TAG, cluster_id))
                .send()
                .await
                .map_err(|err| ec2_failure("CreateTags", &err))?;
            Ok(named)
        }
        Err(err) => Err(ec2_failure("CreateSecurityGroup", &err)),
    }
}

/// Adds the rules that `group` lacks; one already there is success.
async fn authorize_missing(client: &Client, group: &SecurityGroup, rules: &[Ingress]) -> Result<(), CloudError> {
    let group_id = group.group_id().unwrap_or_default();
    for rule in rules.iter().copied().filter(|rule| !rule.is_in(group)) {
        let result = client
            .authorize_security_group_ingress()
            .group_id(group_id)
            .ip_permissions(rule.permission(group_id))
            .send()
            .await;
        match result {
            Ok(_) => {}
            Err(err) if err.code() == Some("InvalidPermission.Duplicate") => {}
            Err(err) => return Err(ec2_failure("AuthorizeSecurityGroupIngress", &err)),
        }
    }
    Ok(())
}

/// The instances matching `filters`, oldest first.
async fn instances(client: &Client, filters: Vec<Filter>) -> Result<Vec<Instance>, CloudError> {
    let reservations = client
        .describe_instances()
        .set_filters(Some(filters))
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|err| ec2_failure("DescribeInstances", &err))?;
    let mut instances: Vec<Instance> =
        reservations.into_iter().flat_map(|reservation| reservation.instances.unwrap_or_default()).collect();
    instances.sort_by(|a, b| {
        let key =
            |i: &Instance| (i.launch_time().map(|t| (t.secs(), t.subsec_nanos())), i.instance_id().map(str::to_owned));
        key(a).cmp(&key(b))
    });
    Ok(instances)
}

/// An instance as a cluster VM. Its name and role come from its tags; `fallback` stands in
/// for missing ones (the instance id and [`Role::Worker`] when listing, so that a VM of the
/// cluster with a lost tag is still seen and swept).
fn vm_of(instance: &Instance, fallback: (&str, Role)) -> Vm {
    let provider_id = instance.instance_id().unwrap_or_default().to_owned();
    let name = tag_value(instance.tags(), NAME_TAG).unwrap_or(fallback.0).to_owned();
    let role = tag_value(instance.tags(), ROLE_TAG).and_then(Role::parse).unwrap_or(fallback.1);
    let state = instance.state().and_then(|s| s.name()).map_or("unknown", |s| s.as_str()).to_owned();
    Vm {
        provider_id,
        name,
        role,
        state,
        private_ip: instance.private_ip_address().map(str::to_owned),
        public_ip: instance.public_ip_address().map(str::to_owned),
    }
}

/// The oldest live instance of the cluster named `name`, if any; any younger ones of that name are
/// duplicates of a launch sent twice (a VM name is one VM), and are terminated.
async fn keep_one_named(client: &Client, cluster_id: &str, name: &str) -> Result<Option<Instance>, CloudError> {
    let live = instances(
        client,
        vec![
            cluster_filter(cluster_id),
            filter(&format!("tag:{NAME_TAG}"), [name]),
            filter("instance-state-name", LIVE_STATES.iter().copied()),
        ],
    )
    .await?;
    let Some((oldest, younger)) = live.split_first() else { return Ok(None) };
    let duplicates: Vec<String> = younger.iter().filter_map(|i| i.instance_id().map(str::to_owned)).collect();
    if !duplicates.is_empty() {
        tracing::warn!(
            cluster = %cluster_id, vm = %name, kept = ?oldest.instance_id(), ?duplicates,
            "terminating duplicate instances of one VM (a launch was sent twice)"
        );
        client
            .terminate_instances()
            .set_instance_ids(Some(duplicates))
            .send()
            .await
            .map_err(|err| ec2_failure("TerminateInstances", &err))?;
    }
    Ok(Some(oldest.clone()))
}

#[async_trait]
impl Cloud for AwsCloud {
    /// The cheapest read call: DescribeRegions, in the credential's own region. Refused keys are
    /// a verdict; anything else (network, throttling, 5xx) is an error to retry.
    async fn verify(&self) -> Result<Verdict, CloudError> {
        match self.home.describe_regions().send().await {
            Ok(output) => {
                let regions = output.regions().len();
                Ok(Verdict::Accepted {
                    detail: format!("EC2 DescribeRegions: {regions} regions enabled for these keys"),
                })
            }
            Err(SdkError::ServiceError(failure)) if aws::rejects(failure.err().code()) => {
                let err = failure.err();
                let message = format!(
                    "EC2 refused the keys: {}: {}",
                    err.code().unwrap_or("error"),
                    err.message().unwrap_or("no message")
                );
                Ok(Verdict::Rejected { message })
            }
            // The request could not even be built (a bad endpoint, say): retrying cannot help.
            Err(err @ SdkError::ConstructionFailure(_)) => Ok(Verdict::Rejected {
                message: format!("the EC2 request could not be built: {}", anycloud_engine::error_chain(&err)),
            }),
            Err(err) => Err(CloudError::retryable("calling EC2 DescribeRegions", &err)),
        }
    }

    /// Checks the region (DescribeRegions) and the instance type (offered in the region, amd64),
    /// and picks the newest Ubuntu 24.04 or 22.04 amd64 image by Canonical.
    async fn placement(&self, cluster_id: &str, region: &str, vm_type: &str) -> Result<Placement, CloudError> {
        self.check_region(region).await?;
        let client = self.client_in(region);
        check_vm_type(&client, region, vm_type).await?;
        let image = ubuntu_image(&client, region).await?;
        Ok(Placement {
            cluster_id: cluster_id.to_owned(),
            region: region.to_owned(),
            zone: None,
            vm_type: vm_type.to_owned(),
            image: Some(image),
        })
    }

    /// The instance type's `ProcessorInfo.SupportedArchitectures` (DescribeInstanceTypes);
    /// `x86_64_mac`, `i386` and the like are left out (no Linux VM of ours runs them).
    async fn vm_architectures(&self, region: &str, vm_type: &str) -> Result<Vec<crate::arch::Arch>, CloudError> {
        self.check_region(region).await?;
        let types = self
            .client_in(region)
            .describe_instance_types()
            .instance_types(InstanceType::from(vm_type))
            .send()
            .await
            .map_err(|err| ec2_failure("DescribeInstanceTypes", &err))?;
        let mut arches: Vec<crate::arch::Arch> = types
            .instance_types()
            .iter()
            .filter_map(|info| info.processor_info())
            .flat_map(|processor| processor.supported_architectures())
            .filter_map(|arch| crate::arch::Arch::parse(arch.as_str()))
            .collect();
        arches.sort();
        arches.dedup();
        if arches.is_empty() {
            return Err(CloudError::Terminal(format!(
                "instance type `{vm_type}` in region {region}: EC2 names no x86_64 or arm64 processor for it; pick \
                 another, e.g. {EXAMPLE_VM_TYPE}"
            )));
        }
        Ok(arches)
    }

    /// Finds the security group tagged with the cluster in the default VPC, or creates
    /// `anycloud-<cluster id>`, and makes sure it allows all traffic from itself (a rule a crash
    /// left unmade is added on the next call). It lets nothing else in.
    async fn ensure_network(&self, placement: &Placement) -> Result<Network, CloudError> {
        let client = self.client_in(&placement.region);
        let group = self.cluster_group(&client, placement).await?;
        authorize_missing(&client, &group, &[Ingress::AllFromCluster]).await?;
        let id = group.group_id().unwrap_or_default().to_owned();
        Ok(Network { id })
    }

    /// Makes the group's rules for sources outside it exactly `openings` (one rule per source
    /// CIDR, protocol and port): what is missing is authorized, anything else revoked.
    async fn open_network(&self, placement: &Placement, openings: &Openings) -> Result<(), CloudError> {
        let client = self.client_in(&placement.region);
        let group = self.cluster_group(&client, placement).await?;
        let group_id = group.group_id().unwrap_or_default();
        let wanted: BTreeSet<CidrRule> = openings
            .rules()
            .into_iter()
            .map(|(protocol, port, source)| CidrRule::new(protocol, port, source))
            .collect();
        let present: BTreeSet<CidrRule> = group
            .ip_permissions()
            .iter()
            .flat_map(|permission| permission.ip_ranges().iter().map(move |range| (permission, range)))
            .filter_map(|(permission, range)| CidrRule::of(permission, range))
            .collect();
        for rule in wanted.difference(&present) {
            let result = client
                .authorize_security_group_ingress()
                .group_id(group_id)
                .ip_permissions(rule.permission())
                .send()
                .await;
            match result {
                Ok(_) => {}
                Err(err) if err.code() == Some("InvalidPermission.Duplicate") => {}
                Err(err) => return Err(ec2_failure("AuthorizeSecurityGroupIngress", &err)),
            }
        }
        for rule in present.difference(&wanted) {
            let result = client
                .revoke_security_group_ingress()
                .group_id(group_id)
                .ip_permissions(rule.permission())
                .send()
                .await;
            match result {
                Ok(_) => {}
                Err(err) if err.code() == Some("InvalidPermission.NotFound") => {}
                Err(err) => return Err(ec2_failure("RevokeSecurityGroupIngress", &err)),
            }
        }
        Ok(())
    }

    /// The group of a hosted API (`anycloud-<owner>`): its port from anywhere, nothing else.
    async fn ensure_api_network(&self, placement: &Placement, port: u16) -> Result<Network, CloudError> {
        let client = self.client_in(&placement.region);
        let vpc_id = default_vpc(&client, &placement.region).await?;
        let description = format!("anycloud {}: the API's HTTPS port {port} from anywhere", placement.cluster_id);
        let group =
            find_or_create_group(&client, &placement.cluster_id, &vpc_id, &description, self.owner_tags()).await?;
        authorize_missing(&client, &group, &[Ingress::TcpFromAnywhere(i32::from(port))]).await?;
        let id = group.group_id().unwrap_or_default().to_owned();
        Ok(Network { id })
    }

    /// An Elastic IP (`aws_addresses`).
    async fn ensure_address(&self, placement: &Placement, name: &str) -> Result<Address, CloudError> {
        aws_addresses::ensure(&self.client_in(&placement.region), placement, name, self.owner_tags()).await
    }

    async fn attach_address(&self, placement: &Placement, address: &Address, vm: &Vm) -> Result<bool, CloudError> {
        aws_addresses::attach(&self.client_in(&placement.region), placement, address, vm).await
    }

    async fn release_addresses(&self, placement: &Placement) -> Result<(), CloudError> {
        aws_addresses::release_all(&self.client_in(&placement.region), placement).await
    }

    async fn list_addresses(&self, placement: &Placement) -> Result<Vec<Address>, CloudError> {
        aws_addresses::list(&self.client_in(&placement.region), placement).await
    }

    /// The role and instance profile; then each secret the VM reads is closed to every principal
    /// but that role and the deployer (a resource policy), whatever IAM policies elsewhere in the
    /// account allow.
    async fn ensure_vm_identity(&self, owner: &str, bucket: &str, secrets: &[String]) -> Result<String, CloudError> {
        let profile = aws_iam::ensure_instance_profile(&self.iam, owner, bucket, secrets).await?;
        let caller = self.sts.get_caller_identity().send().await.map_err(|err| {
            CloudError::retryable("STS GetCallerIdentity (who deploys: the API's secrets stay readable by it)", &err)
        })?;
        let (Some(account), Some(arn)) = (caller.account(), caller.arn()) else {
            return Err(CloudError::Retryable("STS GetCallerIdentity answered without an account or ARN".to_owned()));
        };
        let readers = [format!("arn:aws:iam::{account}:role/{profile}"), aws_secrets::principal_arn(arn)];
        for secret in secrets {
            aws_secrets::restrict(&self.secrets, secret, &readers).await?;
        }
        Ok(profile)
    }

    async fn delete_vm_identity(&self, owner: &str) -> Result<(), CloudError> {
        aws_iam::delete_instance_profile(&self.iam, owner).await
    }

    async fn store_vm_secret(&self, owner: &str, name: &str, value: &str) -> Result<String, CloudError> {
        aws_secrets::store(&self.secrets, owner, name, value).await
    }

    async fn read_vm_secret(&self, name: &str) -> Result<Option<String>, CloudError> {
        aws_secrets::read(&self.secrets, name).await
    }

    async fn delete_vm_secret(&self, name: &str) -> Result<(), CloudError> {
        aws_secrets::delete(&self.secrets, name).await
    }

    /// Deletes every security group tagged with the cluster, in any VPC. One still used by
    /// instances (they may be shutting down) is a retryable failure.
    async fn delete_network(&self, placement: &Placement) -> Result<(), CloudError> {
        let client = self.client_in(&placement.region);
        for group in security_groups(&client, vec![cluster_filter(&placement.cluster_id)]).await? {
            let Some(id) = group.group_id() else { continue };
            match client.delete_security_group().group_id(id).send().await {
                Ok(_) => {}
                Err(err) if err.code() == Some("InvalidGroup.NotFound") => {}
                Err(err) if err.code() == Some("DependencyViolation") => {
                    return Err(CloudError::Retryable(format!(
                        "security group {id} of cluster {} is still used by instances (they may still be shutting \
                         down); it is deleted once they are gone",
                        placement.cluster_id
                    )));
                }
                Err(err) => return Err(ec2_failure("DeleteSecurityGroup", &err)),
            }
        }
        Ok(())
    }

    /// Whether any security group carries the cluster's tag.
    async fn network_exists(&self, placement: &Placement) -> Result<bool, CloudError> {
        let client = self.client_in(&placement.region);
        Ok(!security_groups(&client, vec![cluster_filter(&placement.cluster_id)]).await?.is_empty())
    }

    /// Returns the oldest live instance tagged with the cluster and `spec.name` (terminating any
    /// younger duplicates of it), or runs one:
    /// the placement's image and type, the user-data, the cluster's group, the step's token as
    /// `ClientToken`, and the cluster's, name and role tags on the instance and its volume.
    async fn launch(&self, spec: &LaunchSpec<'_>) -> Result<Vm, CloudError> {
        let placement = spec.placement;
        let client = self.client_in(&placement.region);
        if let Some(instance) = keep_one_named(&client, &placement.cluster_id, &spec.name).await? {
            return Ok(vm_of(&instance, (&spec.name, spec.role)));
        }
        let image = placement.image.as_deref().ok_or_else(|| {
            CloudError::Terminal(format!("cluster {} has no boot image: its placement picks one", placement.cluster_id))
        })?;
        let mut tags = vec![
            tag(CLUSTER_TAG, &placement.cluster_id),
            tag(NAME_TAG, &spec.name),
            tag(ROLE_TAG, spec.role.as_str()),
            tag("Name", &console_name(&placement.cluster_id, &spec.name)),
        ];
        tags.extend(self.owner_tags());
        let tagged = |resource: ResourceType| {
            TagSpecification::builder().resource_type(resource).set_tags(Some(tags.clone())).build()
        };
        let output = client
            .run_instances()
            .image_id(image)
            .instance_type(InstanceType::from(placement.vm_type.as_str()))
            .min_count(1)
            .max_count(1)
            .user_data(STANDARD.encode(&spec.user_data))
            .security_group_ids(&spec.network.id)
            .client_token(spec.token.simple().to_string())
            .set_iam_instance_profile(
                spec.vm_identity.as_ref().map(|name| IamInstanceProfileSpecification::builder().name(name).build()),
            )
            .tag_specifications(tagged(ResourceType::Instance))
            .tag_specifications(tagged(ResourceType::Volume))
            .metadata_options(imds_v2_only())
            .send()
            .await
            .map_err(|err| ec2_failure("RunInstances", &err))?;
        let instance = output
            .instances()
            .first()
            .ok_or_else(|| CloudError::Retryable("EC2 RunInstances answered without an instance".to_owned()))?;
        // The SDK sends RunInstances again when an attempt's answer is lost (a reset, a timeout).
        // EC2 answers a repeated ClientToken with the first instance, but an endpoint that ignores
        // the token (moto; found by tests/tests/provider_faults.rs) runs another: keep one.
        match keep_one_named(&client, &placement.cluster_id, &spec.name).await? {
            Some(kept) => Ok(vm_of(&kept, (&spec.name, spec.role))),
            None => Ok(vm_of(instance, (&spec.name, spec.role))),
        }
    }

    /// Every instance tagged with the cluster that is not terminated, by name.
    async fn list_vms(&self, placement: &Placement) -> Result<Vec<Vm>, CloudError> {
        let client = self.client_in(&placement.region);
        let filters =
            vec![cluster_filter(&placement.cluster_id), filter("instance-state-name", LISTED_STATES.iter().copied())];
        let mut vms: Vec<Vm> = instances(&client, filters)
            .await?
            .iter()
            .map(|instance| vm_of(instance, (instance.instance_id().unwrap_or_default(), Role::Worker)))
            .collect();
        vms.sort_by(|a, b| (&a.name, &a.provider_id).cmp(&(&b.name, &b.provider_id)));
        Ok(vms)
    }

    /// Terminates those of `provider_ids` that are the cluster's (tagged with it) and not yet
    /// terminated; ids of other clusters are left alone, and ids already gone are success.
    async fn terminate(&self, placement: &Placement, provider_ids: &[String]) -> Result<(), CloudError> {
        if provider_ids.is_empty() {
            return Ok(());
        }
        let client = self.client_in(&placement.region);
        let filters =
            vec![filter("instance-id", provider_ids.iter().map(String::as_str)), cluster_filter(&placement.cluster_id)];
        let found = instances(&client, filters).await?;
        let known: HashSet<&str> = found.iter().filter_map(Instance::instance_id).collect();
        for id in provider_ids.iter().filter(|id| !known.contains(id.as_str())) {
            tracing::debug!(instance = %id, cluster = %placement.cluster_id, "not terminating: gone or not the cluster's");
        }
        let live: Vec<String> = found
            .iter()
            .filter(|i| i.state().and_then(|s| s.name()).map(|s| s.as_str()) != Some("terminated"))
            .filter_map(|i| i.instance_id().map(str::to_owned))
            .collect();
        if live.is_empty() {
            return Ok(());
        }
        match client.terminate_instances().set_instance_ids(Some(live.clone())).send().await {
            Ok(_) => Ok(()),
            // One of them went meanwhile, and EC2 refuses the whole request: one at a time.
            Err(err) if err.code() == Some("InvalidInstanceID.NotFound") => {
                for id in live {
                    match client.terminate_instances().instance_ids(&id).send().await {
                        Ok(_) => {}
                        Err(err) if err.code() == Some("InvalidInstanceID.NotFound") => {}
                        Err(err) => return Err(ec2_failure("TerminateInstances", &err)),
                    }
                }
                Ok(())
            }
            Err(err) => Err(ec2_failure("TerminateInstances", &err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every RunInstances sends; `tests/tests/provider_aws.rs` reads it back from moto (whose
    /// defaults are a hop limit of 1 and tokens optional, so only this shows the hop limit is ours).
    #[test]
    fn every_instance_requires_imdsv2_with_a_hop_limit_of_one() {
        let options = imds_v2_only();
        assert_eq!(options.http_tokens(), Some(&HttpTokensState::Required));
        assert_eq!(options.http_put_response_hop_limit(), Some(1));
        assert_eq!(options.http_endpoint(), Some(&InstanceMetadataEndpointState::Enabled));
    }
}
