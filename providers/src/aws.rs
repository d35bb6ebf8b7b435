//! AWS, through aws-sdk-ec2 with a credential's static keys, or, for a machine-identity
//! credential, as the machine the API runs on. The endpoint can be overridden (a private
//! endpoint, or moto on loopback in tests); requests are otherwise exactly what EC2 receives.

use aws_config::environment::credentials::EnvironmentVariableCredentialsProvider;
use aws_config::imds::credentials::ImdsCredentialsProvider;
use aws_config::meta::credentials::CredentialsProviderChain;
use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider};

use crate::credential::PublicPart;

/// EC2 error codes that mean the keys themselves are refused: retrying cannot help.
const REJECTING_CODES: &[&str] = &[
    "AuthFailure",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "OptInRequired",
    "Blocked",
    "InvalidParameterValue",
    "UnrecognizedClientException",
    "AccessDenied",
];

/// Who the SDK signs as: the credential's keys; for a machine-identity credential
/// ([`PublicPart::machine`]) the machine's own, found as the SDK's default chain finds them on a
/// VM: the process's `AWS_*` variables, else the instance profile through IMDSv2 (refreshed
/// before they expire).
pub fn credentials(public: &PublicPart, secret_access_key: &str) -> SharedCredentialsProvider {
    if public.machine {
        let chain = CredentialsProviderChain::first_try("Environment", EnvironmentVariableCredentialsProvider::new())
            .or_else("Ec2InstanceMetadata", ImdsCredentialsProvider::builder().build());
        return SharedCredentialsProvider::new(chain);
    }
    SharedCredentialsProvider::new(Credentials::new(
        public.identity.clone(),
        secret_access_key.to_owned(),
        None,
        None,
        "anycloud",
    ))
}

/// An EC2 client for this credential.
pub fn ec2_client(public: &PublicPart, secret_access_key: &str) -> aws_sdk_ec2::Client {
    let credentials = credentials(public, secret_access_key);
    let mut config = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(public.region.clone().unwrap_or_else(|| "us-east-1".to_owned())))
        .credentials_provider(credentials);
    if let Some(endpoint) = &public.endpoint {
        config = config.endpoint_url(endpoint);
    }
    aws_sdk_ec2::Client::from_conf(config.build())
}

/// An IAM client for this credential (IAM is global: its endpoint is us-east-1's), with the
/// same endpoint override as EC2 (moto serves both).
pub fn iam_client(
    public: &PublicPart,
    secret_access_key: &str,
    timeouts: aws_sdk_iam::config::timeout::TimeoutConfig,
) -> aws_sdk_iam::Client {
    use aws_sdk_iam::config::{BehaviorVersion, Region};
    let credentials = credentials(public, secret_access_key);
    let mut config = aws_sdk_iam::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(credentials)
        .timeout_config(timeouts);
    if let Some(endpoint) = &public.endpoint {
        config = config.endpoint_url(endpoint);
    }
    aws_sdk_iam::Client::from_conf(config.build())
}

/// An STS client for this credential, in `region`, with the same endpoint override.
pub fn sts_client(public: &PublicPart, secret_access_key: &str, region: &str) -> aws_sdk_sts::Client {
    use aws_sdk_sts::config::{BehaviorVersion, Region};
    let mut config = aws_sdk_sts::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_owned()))
        .credentials_provider(credentials(public, secret_access_key));
    if let Some(endpoint) = &public.endpoint {
        config = config.endpoint_url(endpoint);
    }
    aws_sdk_sts::Client::from_conf(config.build())
}

/// Whether an EC2 error code says the keys themselves are refused.
pub(crate) fn rejects(code: Option<&str>) -> bool {
    code.is_some_and(|code| REJECTING_CODES.contains(&code))
}
