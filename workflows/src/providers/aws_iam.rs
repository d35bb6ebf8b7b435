//! Who a hosted API's EC2 VM acts as: an IAM role `anycloud-<owner>` that EC2 may assume, with
//! one inline policy (read, write and delete objects under the checkpoint bucket's prefix, list
//! the bucket; or, for a bucket on another provider, read the one secret holding its key), in an
//! instance profile of the same name. The SDK on the VM finds it through
//! IMDSv2, so no key is ever in the VM's user-data. Every call tolerates "already exists" and
//! "already gone", so a retried step finishes what an earlier attempt began.

use aws_sdk_iam::Client;
use aws_sdk_iam::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_iam::types::Tag;

use crate::cloud::{CLUSTER_TAG, CloudError};

/// The inline policy's name.
const POLICY: &str = "anycloud-checkpoint-bucket";

/// EC2 may assume the role.
const TRUST: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

/// The role's and the instance profile's name.
pub fn profile_name(owner: &str) -> String {
    format!("anycloud-{owner}")
}

/// The policy that lets the VM use `bucket` (`s3://B[/PREFIX]`; one on another provider's store
/// gets no statement) and read `secret` (an ARN: the key of a bucket on another provider), and
/// nothing else.
fn vm_policy(bucket: &str, secret: Option<&str>) -> Result<String, CloudError> {
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
    if let Some(arn) = secret {
        statements.push(
            serde_json::json!({ "Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": arn }),
        );
    }
    if statements.is_empty() {
        return Err(CloudError::Terminal(format!(
            "checkpoint bucket {bucket} is not on S3 and no secret holds its key: the VM would be given nothing"
        )));
    }
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
    secret: Option<&str>,
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
        .policy_document(vm_policy(bucket, secret)?)
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

    #[test]
    fn the_policy_names_only_the_bucket_and_its_prefix() {
        let policy = vm_policy("s3://team-api-state/apis/team/", None).unwrap_or_else(|err| panic!("{err}"));
        assert!(policy.contains("arn:aws:s3:::team-api-state/apis/team/*"), "{policy}");
        assert!(policy.contains("\"arn:aws:s3:::team-api-state\""), "{policy}");
        assert!(!policy.contains("s3:*") && !policy.contains("secretsmanager"), "{policy}");
    }

    #[test]
    fn a_bucket_on_gcs_gives_the_vm_its_one_secret_and_no_s3() {
        let arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:anycloud/api-1/checkpoint-storage-AbCdEf";
        let policy = vm_policy("gs://team-api-state/", Some(arn)).unwrap_or_else(|err| panic!("{err}"));
        assert!(policy.contains(&format!("\"Resource\":\"{arn}\"")), "{policy}");
        assert!(policy.contains("secretsmanager:GetSecretValue") && !policy.contains("s3:"), "{policy}");
        assert!(vm_policy("gs://team-api-state/", None).is_err());
    }
}
