//! What every EC2 call of the AWS provider shares: the filters and tags that find and mark a
//! cluster's resources, the name the EC2 console shows, and how a failed call is read
//! (retryable or terminal).

use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::{Filter, Tag};

use super::aws;
use crate::cloud::{CLUSTER_TAG, CloudError};

/// EC2 error codes of requests that will never succeed as asked (beyond refused keys, which
/// [`aws::rejects`] knows): quotas, capacity, unknown or malformed parameters.
const TERMINAL_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "Unsupported",
    "UnsupportedOperation",
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "InvalidParameter",
    "MissingParameter",
    "IdempotentParameterMismatch",
    "InvalidAMIID.NotFound",
    "InvalidAMIID.Malformed",
    "InvalidAMIID.Unavailable",
    "InvalidInstanceType",
    "InvalidUserData.Malformed",
    "InvalidInstanceID.Malformed",
    "InvalidGroupId.Malformed",
    "InvalidVpcID.NotFound",
    "SecurityGroupLimitExceeded",
    "RulesPerSecurityGroupLimitExceeded",
];

/// EC2 error codes worth another attempt: throttling, EC2's own failures, and the eventual
/// consistency of a resource just made or just released.
const RETRYABLE_CODES: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "EC2ThrottledException",
    "TooManyRequestsException",
    "PriorRequestNotComplete",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "RequestTimeout",
    "RequestTimeoutException",
    "DependencyViolation",
    "IncorrectState",
    "IncorrectInstanceState",
];

/// An EC2 filter on `name` matching any of `values`.
pub(super) fn filter<'a>(name: &str, values: impl IntoIterator<Item = &'a str>) -> Filter {
    Filter::builder().name(name).set_values(Some(values.into_iter().map(str::to_owned).collect())).build()
}

/// The filter on the cluster's tag.
pub(super) fn cluster_filter(cluster_id: &str) -> Filter {
    filter(&format!("tag:{CLUSTER_TAG}"), [cluster_id])
}

/// A tag.
pub(super) fn tag(key: &str, value: &str) -> Tag {
    Tag::builder().key(key).value(value).build()
}

/// The `Name` tag shown in the EC2 console: the VM's name and the start of the cluster's id.
pub(super) fn console_name(cluster_id: &str, vm_name: &str) -> String {
    let short = cluster_id.get(..8).unwrap_or(cluster_id);
    format!("anycloud-{vm_name}-{short}")
}

/// What an EC2 failure means for the step: refused keys and requests that cannot succeed as
/// asked are terminal; throttling, 5xx, network failures and eventual consistency are worth
/// another attempt. Any other client error (4xx) is terminal.
pub(super) fn ec2_failure<E>(operation: &str, err: &SdkError<E>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match err {
        SdkError::ServiceError(failure) => {
            let code = failure.err().code().unwrap_or("UnknownError");
            let message = format!("EC2 {operation}: {code}: {}", failure.err().message().unwrap_or("no message"));
            let status = failure.raw().status().as_u16();
            if code == "InvalidParameterValue" && message.contains("iamInstanceProfile") {
                // An instance profile just made is not visible to EC2 for some seconds.
                CloudError::Retryable(format!("{message} (a new instance profile takes a few seconds to reach EC2)"))
            } else if TERMINAL_CODES.contains(&code) {
                CloudError::Terminal(message)
            } else if aws::rejects(Some(code)) {
                CloudError::Terminal(format!("EC2 refused the keys: {message}"))
            } else if RETRYABLE_CODES.contains(&code) || code.ends_with(".NotFound") || status >= 500 {
                CloudError::Retryable(message)
            } else {
                CloudError::Terminal(message)
            }
        }
        // The request could not even be built (a bad endpoint, say): retrying cannot help.
        SdkError::ConstructionFailure(_) => {
            CloudError::terminal(&format!("EC2 {operation}: building the request"), err)
        }
        _ => CloudError::retryable(&format!("EC2 {operation}"), err),
    }
}
