//! A secret a hosted API's EC2 VM reads as itself, in AWS Secrets Manager: the deployer puts it
//! there with the hosting credential's keys, the VM reads it with its instance profile (whose
//! policy names this one secret, `aws_iam`). Used for the checkpoint bucket's key when the bucket
//! is on another provider (docs/hosting.md, "Placement"). Every call tolerates "already exists"
//! and "already gone", so a retried step finishes what an earlier attempt began.

use std::time::Duration;

use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::config::timeout::TimeoutConfig;
use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_secretsmanager::types::Tag;

use crate::cloud::{CLUSTER_TAG, CloudError};
use crate::db::credentials::PublicPart;

/// Secrets Manager in `region` for these keys, with the same endpoint override as EC2 (moto
/// serves both).
pub fn client(public: &PublicPart, secret_access_key: &str, region: &str) -> Client {
    use aws_sdk_secretsmanager::config::{BehaviorVersion, Credentials, Region};
    let credentials = Credentials::new(public.identity.clone(), secret_access_key.to_owned(), None, None, "anycloud");
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
                    "{message}; hosting an API whose checkpoint bucket is on another provider needs \
                     secretsmanager:CreateSecret, PutSecretValue and DeleteSecret on anycloud/*"
                ))
            } else {
                CloudError::Terminal(message)
            }
        }
        SdkError::ConstructionFailure(_) => CloudError::terminal(&format!("Secrets Manager {call}: building it"), err),
        _ => CloudError::retryable(&format!("Secrets Manager {call}"), err),
    }
}

/// Creates secret `name` holding `value`, or adds `value` as its current version; answers its
/// ARN (which the VM's policy names).
pub async fn store(client: &Client, owner: &str, name: &str, value: &str) -> Result<String, CloudError> {
    let tag = Tag::builder().key(CLUSTER_TAG).value(owner).build();
    let created = client
        .create_secret()
        .name(name)
        .description(format!("anycloud {owner}: the hosted API's checkpoint-storage key, read by its VM"))
        .secret_string(value)
        .tags(tag)
        .send()
        .await;
    let arn = match created {
        Ok(output) => output.arn().map(str::to_owned),
        Err(err) if err.code() == Some("ResourceExistsException") => client
            .put_secret_value()
            .secret_id(name)
            .secret_string(value)
            .send()
            .await
            .map_err(|err| failure("PutSecretValue", &err))?
            .arn()
            .map(str::to_owned),
        Err(err) => return Err(failure("CreateSecret", &err)),
    };
    arn.ok_or_else(|| CloudError::Retryable(format!("Secrets Manager answered for secret {name} without its ARN")))
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
