//! AWS, through aws-sdk-ec2 with static keys. The endpoint can be overridden (a private
//! endpoint, or moto on loopback in tests); requests are otherwise exactly what EC2 receives.

use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};

use crate::db::credentials::PublicPart;

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

/// An EC2 client for these keys.
pub fn ec2_client(public: &PublicPart, secret_access_key: &str) -> aws_sdk_ec2::Client {
    let credentials = Credentials::new(public.identity.clone(), secret_access_key.to_owned(), None, None, "anycloud");
    let mut config = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(public.region.clone().unwrap_or_else(|| "us-east-1".to_owned())))
        .credentials_provider(credentials);
    if let Some(endpoint) = &public.endpoint {
        config = config.endpoint_url(endpoint);
    }
    aws_sdk_ec2::Client::from_conf(config.build())
}

/// An IAM client for these keys (IAM is global: its endpoint is us-east-1's), with the same
/// endpoint override as EC2 (moto serves both).
pub fn iam_client(
    public: &PublicPart,
    secret_access_key: &str,
    timeouts: aws_sdk_iam::config::timeout::TimeoutConfig,
) -> aws_sdk_iam::Client {
    use aws_sdk_iam::config::{BehaviorVersion, Credentials, Region};
    let credentials = Credentials::new(public.identity.clone(), secret_access_key.to_owned(), None, None, "anycloud");
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

/// Whether an EC2 error code says the keys themselves are refused.
pub(crate) fn rejects(code: Option<&str>) -> bool {
    code.is_some_and(|code| REJECTING_CODES.contains(&code))
}
