//! Who a hosted API's EC2 VM acts as: an IAM role `anycloud-<owner>` that EC2 may assume, with
//! one inline policy, in an instance profile of the same name. The policy allows:
//!
//! - objects under the checkpoint bucket's prefix (read, write, delete) and listing the bucket;
//! - reading the secrets named: the API's keys and, for a bucket on another provider, its key;
//! - the EC2 calls that place its clusters' control planes, and nothing else: reads on every
//!   resource (EC2's `Describe*` calls have no resource-level permissions), creation only with
//!   the API's owner tag in the request (`aws:RequestTag/anycloud-owner`), tags only as part of
//!   such a creation (`ec2:CreateAction`), every other change only on resources carrying that tag
//!   (`ec2:ResourceTag/anycloud-owner`). No IAM action at all: in particular no `iam:PassRole`, so
//!   it cannot launch a VM with any role, its own included.
//!
//! The SDK on the VM finds the role's keys through IMDSv2, so no key is ever in the VM's
//! user-data, and the deployer's key never reaches the VM (`hosting::credential` hands the
//! API a machine-identity credential). Every call tolerates "already exists" and "already gone",
//! so a retried step finishes what an earlier attempt began. The condition keys and resource
//! types are those of the Service Authorization Reference for Amazon EC2 (docs/hosting.md,
//! "Least privilege").

use aws_sdk_iam::Client;
use aws_sdk_iam::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_iam::types::Tag;

use crate::cloud::{CLUSTER_TAG, CloudError, OWNER_TAG};

/// The inline policy's name.
const POLICY: &str = "anycloud-checkpoint-bucket";

/// EC2 may assume the role.
const TRUST: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

/// The role's and the instance profile's name.
pub fn profile_name(owner: &str) -> String {
    format!("anycloud-{owner}")
}

/// The EC2 reads a hosted API makes. `Describe*` calls take no resource-level permission.
pub const EC2_READS: &[&str] = &[
    "ec2:DescribeAddresses",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeRegions",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeVpcs",
];

/// The EC2 changes a hosted API makes to resources it made (tagged with its owner id).
pub const EC2_OWNED_CHANGES: &[&str] = &[
    "ec2:AssociateAddress",
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:DeleteSecurityGroup",
    "ec2:DisassociateAddress",
    "ec2:ReleaseAddress",
    "ec2:RevokeSecurityGroupIngress",
    "ec2:TerminateInstances",
];

/// The calls that make resources, each tagged with the owner id in the request.
pub const EC2_CREATES: &[&str] = &["ec2:AllocateAddress", "ec2:CreateSecurityGroup", "ec2:RunInstances"];

/// An ARN pattern of EC2 resource type `kind` in any region and account (images have no account).
fn ec2(kind: &str) -> String {
    if kind == "image" { "arn:aws:ec2:*::image/*".to_owned() } else { format!("arn:aws:ec2:*:*:{kind}/*") }
}

/// The statements that let the VM place control planes as `owner`, and change nothing else.
fn ec2_statements(owner: &str) -> Vec<serde_json::Value> {
    use serde_json::json;
    let request_tag = json!({ "StringEquals": { format!("aws:RequestTag/{OWNER_TAG}"): owner } });
    let resource_tag = json!({ "StringEquals": { format!("ec2:ResourceTag/{OWNER_TAG}"): owner } });
    vec![
        json!({ "Sid": "Read", "Effect": "Allow", "Action": EC2_READS, "Resource": "*" }),
        // RunInstances authorizes each resource it makes or uses: what it makes carries the tag;
        // its security group must be one of the API's; the image, subnet and network interface
        // are the region's (the default VPC's) and cannot carry a tag at launch.
        json!({ "Sid": "RunTagged", "Effect": "Allow", "Action": ["ec2:RunInstances"],
                "Resource": [ec2("instance"), ec2("volume")], "Condition": request_tag }),
        json!({ "Sid": "CreateTagged", "Effect": "Allow", "Action": ["ec2:CreateSecurityGroup", "ec2:AllocateAddress"],
                "Resource": [ec2("security-group"), ec2("elastic-ip")], "Condition": request_tag }),
        json!({ "Sid": "LaunchWith", "Effect": "Allow", "Action": ["ec2:RunInstances"],
                "Resource": [ec2("image"), ec2("subnet"), ec2("network-interface")] }),
        json!({ "Sid": "LaunchInOwnGroup", "Effect": "Allow", "Action": ["ec2:RunInstances"],
                "Resource": [ec2("security-group")], "Condition": resource_tag }),
        json!({ "Sid": "GroupInVpc", "Effect": "Allow", "Action": ["ec2:CreateSecurityGroup"],
                "Resource": [ec2("vpc")] }),
        json!({ "Sid": "TagOnCreate", "Effect": "Allow", "Action": ["ec2:CreateTags"],
                "Resource": [ec2("instance"), ec2("volume"), ec2("security-group"), ec2("elastic-ip")],
                "Condition": { "StringEquals": { "ec2:CreateAction": EC2_CREATES.iter().map(|a| a.trim_start_matches("ec2:")).collect::<Vec<_>>() } } }),
        json!({ "Sid": "ChangeOwned", "Effect": "Allow", "Action": EC2_OWNED_CHANGES,
                "Resource": [ec2("instance"), ec2("security-group"), ec2("elastic-ip")], "Condition": resource_tag }),
        // Associating an Elastic IP with an instance also authorizes the instance's network
        // interface, which carries no tag of ours.
        json!({ "Sid": "AddressToInterface", "Effect": "Allow", "Action": ["ec2:AssociateAddress", "ec2:DisassociateAddress"],
                "Resource": [ec2("network-interface")] }),
    ]
}

/// The policy that lets the VM use `bucket` (`s3://B[/PREFIX]`; one on another provider's store
/// gets no statement), read `secrets` (ARNs: the API's keys, the key of a bucket on another
/// provider) and place control planes tagged with `owner`, and nothing else.
fn vm_policy(owner: &str, bucket: &str, secrets: &[String]) -> Result<String, CloudError> {
    let url = anycloud_checkpoint::BucketUrl::parse(bucket).map_err(CloudError::Terminal)?;
    let mut statements = Vec::new();
    if url.store == anycloud_checkpoint::StoreKind::S3 {
        let objects = format!("arn:aws:s3:::{}/{}*", url.bucket, url.prefix);
        let listing = format!("arn:aws:s3:::{}", url.bucket);
        statements.push(serde_json::json!(
            { "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], "Resource": objects }
        ));
        statements.push(serde_json::json!({ "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": listing }));
    }
    if !secrets.is_empty() {
        statements.push(
            serde_json::json!({ "Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": secrets }),
        );
    }
    statements.extend(ec2_statements(owner));
    Ok(serde_json::json!({ "Version": "2012-10-17", "Statement": statements }).to_string())
}

fn iam_failure<E: ProvideErrorMetadata + std::error::Error + 'static>(call: &str, err: &SdkError<E>) -> CloudError {
    match err {
        SdkError::ServiceError(failure) => {
            let code = failure.err().code().unwrap_or("UnknownError");
            let message = format!("IAM {call}: {code}: {}", failure.err().message().unwrap_or("no message"));
            let status = failure.raw().status().as_u16();
            if matches!(code, "Throttling" | "ServiceFailure" | "ConcurrentModification") || status >= 500 {
                CloudError::Retryable(message)
            } else if matches!(code, "AccessDenied" | "InvalidClientTokenId" | "SignatureDoesNotMatch") {
                CloudError::Terminal(format!(
                    "{message}; hosting an API on AWS needs IAM rights (iam:CreateRole, iam:PutRolePolicy, \
                     iam:CreateInstanceProfile, iam:AddRoleToInstanceProfile, iam:PassRole)"
                ))
            } else {
                CloudError::Terminal(message)
            }
        }
        SdkError::ConstructionFailure(_) => CloudError::terminal(&format!("IAM {call}: building the request"), err),
        _ => CloudError::retryable(&format!("IAM {call}"), err),
    }
}

fn exists<E: ProvideErrorMetadata>(err: &SdkError<E>) -> bool {
    err.code() == Some("EntityAlreadyExists")
}

fn gone<E: ProvideErrorMetadata>(err: &SdkError<E>) -> bool {
    err.code() == Some("NoSuchEntity")
}

/// Makes (or finds) the role, its policy and the instance profile holding it; answers the
/// profile's name.
pub async fn ensure_instance_profile(
    iam: &Client,
    owner: &str,
    bucket: &str,
    secrets: &[String],
) -> Result<String, CloudError> {
    let name = profile_name(owner);
    let tag = Tag::builder()
        .key(CLUSTER_TAG)
        .value(owner)
        .build()
        .map_err(|err| CloudError::Terminal(format!("IAM tag: {err}")))?;
    match iam
        .create_role()
        .role_name(&name)
        .assume_role_policy_document(TRUST)
        .description(format!("anycloud {owner}: the hosted API's VM reaches its checkpoint bucket"))
        .tags(tag)
        .send()
        .await
    {
        Ok(_) => {}
        Err(err) if exists(&err) => {}
        Err(err) => return Err(iam_failure("CreateRole", &err)),
    }
    iam.put_role_policy()
        .role_name(&name)
        .policy_name(POLICY)
        .policy_document(vm_policy(owner, bucket, secrets)?)
        .send()
        .await
        .map_err(|err| iam_failure("PutRolePolicy", &err))?;
    match iam.create_instance_profile().instance_profile_name(&name).send().await {
        Ok(_) => {}
        Err(err) if exists(&err) => {}
        Err(err) => return Err(iam_failure("CreateInstanceProfile", &err)),
    }
    let profile = iam
        .get_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
        .map_err(|err| iam_failure("GetInstanceProfile", &err))?;
    let holds_role = profile.instance_profile().is_some_and(|p| p.roles().iter().any(|r| r.role_name() == name));
    if !holds_role {
        match iam.add_role_to_instance_profile().instance_profile_name(&name).role_name(&name).send().await {
            Ok(_) => {}
            Err(err) if err.code() == Some("LimitExceeded") => {}
            Err(err) => return Err(iam_failure("AddRoleToInstanceProfile", &err)),
        }
    }
    Ok(name)
}

/// Removes the instance profile, the role's policy and the role. Nothing left is success.
pub async fn delete_instance_profile(iam: &Client, owner: &str) -> Result<(), CloudError> {
    let name = profile_name(owner);
    match iam.remove_role_from_instance_profile().instance_profile_name(&name).role_name(&name).send().await {
        Ok(_) => {}
        Err(err) if gone(&err) => {}
        Err(err) => return Err(iam_failure("RemoveRoleFromInstanceProfile", &err)),
    }
    match iam.delete_instance_profile().instance_profile_name(&name).send().await {
        Ok(_) => {}
        Err(err) if gone(&err) => {}
        Err(err) => return Err(iam_failure("DeleteInstanceProfile", &err)),
    }
    match iam.delete_role_policy().role_name(&name).policy_name(POLICY).send().await {
        Ok(_) => {}
        Err(err) if gone(&err) => {}
        Err(err) => return Err(iam_failure("DeleteRolePolicy", &err)),
    }
    match iam.delete_role().role_name(&name).send().await {
        Ok(_) => Ok(()),
        Err(err) if gone(&err) => Ok(()),
        Err(err) => Err(iam_failure("DeleteRole", &err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statements(policy: &str) -> Vec<serde_json::Value> {
        let policy: serde_json::Value = serde_json::from_str(policy).unwrap_or_else(|err| panic!("{err}: {policy}"));
        policy["Statement"].as_array().cloned().unwrap_or_default()
    }

    fn actions(statement: &serde_json::Value) -> Vec<String> {
        match &statement["Action"] {
            serde_json::Value::String(one) => vec![one.clone()],
            many => many.as_array().into_iter().flatten().filter_map(|a| a.as_str().map(str::to_owned)).collect(),
        }
    }

    #[test]
    fn the_policy_names_only_the_bucket_and_its_prefix() {
        let policy = vm_policy("api-1", "s3://team-api-state/apis/team/", &[]).unwrap_or_else(|err| panic!("{err}"));
        assert!(policy.contains("arn:aws:s3:::team-api-state/apis/team/*"), "{policy}");
        assert!(policy.contains("\"arn:aws:s3:::team-api-state\""), "{policy}");
        assert!(!policy.contains("s3:*") && !policy.contains("secretsmanager"), "{policy}");
    }

    #[test]
    fn a_bucket_on_gcs_gives_the_vm_its_secrets_and_no_s3() {
        let keys = "arn:aws:secretsmanager:us-east-1:123456789012:secret:anycloud/api-1/keys-AbCdEf".to_owned();
        let storage =
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:anycloud/api-1/checkpoint-storage-Ab".to_owned();
        let policy = vm_policy("api-1", "gs://team-api-state/", &[keys.clone(), storage.clone()])
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(policy.contains(&format!("\"Resource\":[\"{keys}\",\"{storage}\"]")), "{policy}");
        assert!(policy.contains("secretsmanager:GetSecretValue") && !policy.contains("s3:"), "{policy}");
    }

    /// No IAM action, no wildcard action; every EC2 action but the reads is conditioned on the
    /// owner's tag, except those on resources that cannot carry it (named one by one).
    #[test]
    fn the_vm_changes_only_what_carries_its_owner_tag_and_has_no_iam_action() {
        let policy = vm_policy("api-7", "s3://team-api-state/", &[]).unwrap_or_else(|err| panic!("{err}"));
        for statement in statements(&policy) {
            let actions = actions(&statement);
            assert!(actions.iter().all(|a| !a.starts_with("iam:") && !a.contains('*')), "{statement}");
            assert_eq!(statement["Effect"], "Allow", "{statement}");
            if !actions.iter().all(|a| a.starts_with("ec2:")) {
                continue;
            }
            let condition = statement["Condition"].to_string();
            let resources = statement["Resource"].to_string();
            match statement["Sid"].as_str() {
                Some("Read") => assert!(actions.iter().all(|a| a.starts_with("ec2:Describe")), "{statement}"),
                Some("CreateTagged" | "RunTagged") => {
                    assert!(condition.contains("aws:RequestTag/anycloud-owner\":\"api-7"), "{statement}");
                }
                Some("TagOnCreate") => assert!(condition.contains("ec2:CreateAction"), "{statement}"),
                Some("ChangeOwned" | "LaunchInOwnGroup") => {
                    assert!(condition.contains("ec2:ResourceTag/anycloud-owner\":\"api-7"), "{statement}");
                }
                Some("LaunchWith") => assert!(
                    resources.contains("image/") && resources.contains("subnet/") && !resources.contains("instance/"),
                    "{statement}"
                ),
                Some("GroupInVpc") => {
                    assert!(resources.contains(":vpc/") && !resources.contains("security-group"), "{statement}")
                }
                Some("AddressToInterface") => {
                    assert!(resources.contains("network-interface/") && !resources.contains("instance/"), "{statement}")
                }
                other => panic!("unexpected EC2 statement {other:?}: {statement}"),
            }
        }
    }

    /// Every EC2 call the provider code makes is in the policy, and the policy allows no call
    /// the code does not make: read from the source, so a new call cannot go unnoticed.
    #[test]
    fn the_policy_allows_exactly_the_ec2_calls_the_code_makes() {
        let source = [include_str!("aws_cloud.rs"), include_str!("aws_addresses.rs")].concat();
        let mut made = std::collections::BTreeSet::new();
        for (at, _) in source.match_indices("()") {
            let before = &source[..at];
            let start = before.rfind(|c: char| !(c.is_ascii_lowercase() || c == '_')).map_or(0, |i| i + 1);
            let name = &before[start..];
            let is_call = before[..start].trim_end().ends_with('.');
            let verbs = [
                "describe_",
                "create_",
                "run_",
                "terminate_",
                "allocate_",
                "associate_",
                "disassociate_",
                "release_",
                "delete_",
                "authorize_",
                "revoke_",
                "modify_",
                "stop_",
                "start_",
            ];
            if is_call && verbs.iter().any(|verb| name.starts_with(verb)) {
                let pascal: String = name.split('_').map(|w| w[..1].to_uppercase() + &w[1..]).collect();
                made.insert(format!("ec2:{pascal}"));
            }
        }
        // Made by the deployer only: a hosted API never calls them on its VM's role.
        let policy = vm_policy("api-7", "s3://team-api-state/", &[]).unwrap_or_else(|err| panic!("{err}"));
        let allowed: std::collections::BTreeSet<String> = statements(&policy)
            .iter()
            .flat_map(actions)
            .filter(|a| a.starts_with("ec2:") && a != "ec2:CreateTags")
            .collect();
        made.remove("ec2:CreateTags");
        assert_eq!(made, allowed, "EC2 calls in the code vs. actions the VM's role allows");
    }
}
