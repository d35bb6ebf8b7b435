//! A secret a hosted API's EC2 VM reads as itself, in AWS Secrets Manager: the deployer puts it
//! there with the hosting credential's keys, the VM reads it with its instance profile (whose
//! policy names each such secret, `aws_iam`). Used for the API's keys (`anycloud_workflows::hosting::keys`) and
//! for the checkpoint bucket's key when the bucket is on another provider (docs/hosting.md,
//! "Placement"). Every call tolerates "already exists"
//! and "already gone", so a retried step finishes what an earlier attempt began.

use std::time::Duration;

use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::config::timeout::TimeoutConfig;
use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_secretsmanager::types::Tag;

use crate::cloud::{CLUSTER_TAG, CloudError};
use crate::credential::PublicPart;

/// Secrets Manager in `region` for this credential, with the same endpoint override as EC2
/// (moto serves both).
pub fn client(public: &PublicPart, secret_access_key: &str, region: &str) -> Client {
    use aws_sdk_secretsmanager::config::{BehaviorVersion, Region};
    let credentials = crate::aws::credentials(public, secret_access_key);
    let mut config = aws_sdk_secretsmanager::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_owned()))
        .credentials_provider(credentials)
        .timeout_config(timeouts());
    if let Some(endpoint) = &public.endpoint {
        config = config.endpoint_url(endpoint);
    }
    Client::from_conf(config.build())
}

fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(10))
        .operation_attempt_timeout(Duration::from_secs(30))
        .operation_timeout(Duration::from_secs(90))
        .build()
}

fn failure<E: ProvideErrorMetadata + std::error::Error + 'static>(call: &str, err: &SdkError<E>) -> CloudError {
    match err {
        SdkError::ServiceError(failure) => {
            let code = failure.err().code().unwrap_or("UnknownError");
            let message =
                format!("Secrets Manager {call}: {code}: {}", failure.err().message().unwrap_or("no message"));
            if code.contains("Throttling") || code == "InternalServiceError" || failure.raw().status().as_u16() >= 500 {
                CloudError::Retryable(message)
            } else if matches!(code, "AccessDeniedException" | "UnrecognizedClientException") {
                CloudError::Terminal(format!(
                    "{message}; hosting an API needs secretsmanager:CreateSecret, GetSecretValue, PutSecretValue, \
                     ListSecretVersionIds, UpdateSecretVersionStage and DeleteSecret on anycloud/*"
                ))
            } else {
                CloudError::Terminal(message)
            }
        }
        SdkError::ConstructionFailure(_) => CloudError::terminal(&format!("Secrets Manager {call}: building it"), err),
        _ => CloudError::retryable(&format!("Secrets Manager {call}"), err),
    }
}

/// Creates secret `name` holding `value`, or, when it holds something else, adds `value` as its
/// current version and takes the previous one's label away (a version without a label is
/// deprecated, and Secrets Manager deletes it; none can be deleted at once). Answers its ARN
/// (which the VM's policy names).
pub async fn store(client: &Client, owner: &str, name: &str, value: &str) -> Result<String, CloudError> {
    let tag = Tag::builder().key(CLUSTER_TAG).value(owner).build();
    let created = client
        .create_secret()
        .name(name)
        .description(format!("anycloud {owner}: a secret of the hosted API, read by its VM alone"))
        .secret_string(value)
        .tags(tag)
        .send()
        .await;
    let arn = match created {
        Ok(output) => output.arn().map(str::to_owned),
        Err(err) if err.code() == Some("ResourceExistsException") => {
            let current = client.get_secret_value().secret_id(name).send().await;
            match current {
                Ok(current) if current.secret_string() == Some(value) => current.arn().map(str::to_owned),
                _ => {
                    let put = client
                        .put_secret_value()
                        .secret_id(name)
                        .secret_string(value)
                        .send()
                        .await
                        .map_err(|err| failure("PutSecretValue", &err))?;
                    retire_previous(client, name).await?;
                    put.arn().map(str::to_owned)
                }
            }
        }
        Err(err) => return Err(failure("CreateSecret", &err)),
    };
    arn.ok_or_else(|| CloudError::Retryable(format!("Secrets Manager answered for secret {name} without its ARN")))
}

/// What the secret's resource policy denies to every principal but its readers: reading it, and
/// writing it (a new value would be new keys for the API). Managing the policy itself stays with
/// the account's administrators.
const GUARDED: [&str; 4] = [
    "secretsmanager:GetSecretValue",
    "secretsmanager:PutSecretValue",
    "secretsmanager:UpdateSecret",
    "secretsmanager:UpdateSecretVersionStage",
];

/// The resource policy of a hosted API's secret: [`GUARDED`] denied to every principal whose ARN
/// is not one of `readers` (the VM's role, the deployer), whatever their own IAM policies allow.
pub fn readers_only_policy(readers: &[String]) -> String {
    serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "OnlyTheApiAndItsDeployer",
            "Effect": "Deny",
            "Principal": "*",
            "Action": GUARDED,
            "Resource": "*",
            "Condition": { "StringNotEquals": { "aws:PrincipalArn": readers } },
        }],
    })
    .to_string()
}

/// Puts [`readers_only_policy`] on secret `arn` (replacing the one there: a retry is a no-op).
pub async fn restrict(client: &Client, arn: &str, readers: &[String]) -> Result<(), CloudError> {
    client
        .put_resource_policy()
        .secret_id(arn)
        .resource_policy(readers_only_policy(readers))
        .block_public_policy(true)
        .send()
        .await
        .map_err(|err| failure("PutResourcePolicy", &err))?;
    Ok(())
}

/// The ARN a principal is matched by in `aws:PrincipalArn`: an assumed role's session
/// (`arn:aws:sts::A:assumed-role/ROLE/SESSION`) is its role (`arn:aws:iam::A:role/ROLE`; a role
/// with a path is matched without it: use a user or a role at `/` to deploy); a user or the root
/// is itself.
pub fn principal_arn(caller: &str) -> String {
    match caller.split_once(":assumed-role/") {
        Some((head, rest)) => {
            let account = head.rsplit(':').next().unwrap_or_default();
            let role = rest.split('/').next().unwrap_or_default();
            format!("arn:aws:iam::{account}:role/{role}")
        }
        None => caller.to_owned(),
    }
}

/// Takes the `AWSPREVIOUS` label from the version that has it, so that only the current version
/// of the secret stays readable by its label.
async fn retire_previous(client: &Client, name: &str) -> Result<(), CloudError> {
    let versions = client
        .list_secret_version_ids()
        .secret_id(name)
        .send()
        .await
        .map_err(|err| failure("ListSecretVersionIds", &err))?;
    for version in versions.versions() {
        if version.version_stages().iter().any(|stage| stage == "AWSPREVIOUS")
            && let Some(id) = version.version_id()
        {
            client
                .update_secret_version_stage()
                .secret_id(name)
                .version_stage("AWSPREVIOUS")
                .remove_from_version_id(id)
                .send()
                .await
                .map_err(|err| failure("UpdateSecretVersionStage", &err))?;
        }
    }
    Ok(())
}

/// What secret `name` holds now, read with the deployer's keys; `None` when there is no such
/// secret.
pub async fn read(client: &Client, name: &str) -> Result<Option<String>, CloudError> {
    match client.get_secret_value().secret_id(name).send().await {
        Ok(output) => Ok(output.secret_string().map(str::to_owned)),
        Err(err) if err.code() == Some("ResourceNotFoundException") => Ok(None),
        Err(err) => Err(failure("GetSecretValue", &err)),
    }
}

/// Deletes secret `name` at once (no recovery window: it is a copy of a credential the deployer
/// keeps sealed). Already gone is success.
pub async fn delete(client: &Client, name: &str) -> Result<(), CloudError> {
    match client.delete_secret().secret_id(name).force_delete_without_recovery(true).send().await {
        Ok(_) => Ok(()),
        Err(err) if err.code() == Some("ResourceNotFoundException") => Ok(()),
        Err(err) => Err(failure("DeleteSecret", &err)),
    }
}

/// Reads secret `arn` as this machine: the SDK's default chain (on an EC2 VM its instance
/// profile through IMDSv2), in the ARN's region, at `endpoint` when given (a private endpoint).
pub async fn read_as_vm(arn: &str, endpoint: Option<&str>) -> Result<String, String> {
    use aws_sdk_secretsmanager::config::{BehaviorVersion, Region};
    let region = arn.split(':').nth(3).filter(|region| !region.is_empty()).ok_or_else(|| {
        format!("`{arn}` is not a Secrets Manager ARN (arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME)")
    })?;
    let shared = aws_config::defaults(BehaviorVersion::latest()).region(Region::new(region.to_owned())).load().await;
    let mut config = aws_sdk_secretsmanager::config::Builder::from(&shared).timeout_config(timeouts());
    if let Some(endpoint) = endpoint {
        config = config.endpoint_url(endpoint);
    }
    let output =
        Client::from_conf(config.build()).get_secret_value().secret_id(arn).send().await.map_err(
            |err| match failure("GetSecretValue", &err) {
                CloudError::Retryable(message) | CloudError::Terminal(message) => message,
            },
        )?;
    output.secret_string().map(str::to_owned).ok_or_else(|| format!("secret {arn} holds no text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assumed_roles_session_is_matched_as_its_role() {
        let session = "arn:aws:sts::123456789012:assumed-role/Deployer/alice@example.com";
        assert_eq!(principal_arn(session), "arn:aws:iam::123456789012:role/Deployer");
        let user = "arn:aws:iam::123456789012:user/ops/alice";
        assert_eq!(principal_arn(user), user);
    }

    #[test]
    fn the_policy_denies_reading_and_writing_to_all_but_the_readers() {
        let readers = ["arn:aws:iam::1:role/anycloud-api-7".to_owned(), "arn:aws:iam::1:user/ops".to_owned()];
        let policy: serde_json::Value = serde_json::from_str(&readers_only_policy(&readers)).unwrap_or_default();
        let statement = &policy["Statement"][0];
        assert_eq!((statement["Effect"].as_str(), statement["Principal"].as_str()), (Some("Deny"), Some("*")));
        assert_eq!(statement["Condition"]["StringNotEquals"]["aws:PrincipalArn"], serde_json::json!(readers));
        let actions = statement["Action"].to_string();
        assert!(actions.contains("GetSecretValue") && actions.contains("PutSecretValue"), "{actions}");
        assert!(!actions.contains("ResourcePolicy"), "administrators keep the policy: {actions}");
    }
}
