//! How an error answer of a Google API is read: retryable or terminal, in words that never
//! repeat a body that is not Google's.

use google_cloud_compute_v1::model::Operation;

use crate::cloud::CloudError;

/// The `reason`s of a service error (`alreadyExists`, `quotaExceeded`, ...), as text to search.
/// The details are google-cloud-gax types, which this crate does not name.
pub(super) fn reasons(err: &google_cloud_compute_v1::Error) -> String {
    err.status().map(|status| format!("{:?}", status.details)).unwrap_or_default()
}

/// Retryable or terminal: 5xx, 429, rate limits, a resource busy with another operation, and
/// transport failures are worth another attempt; quota, 400 and refusals are not.
pub(super) fn classify(context: &str, err: &google_cloud_compute_v1::Error) -> CloudError {
    if let Some(code) = err.http_status_code() {
        let reasons = reasons(err);
        let message = err.status().map_or_else(|| not_google(err), |s| s.message.clone());
        let text = format!("{context}: Compute Engine answered HTTP {code}: {message}");
        return if answer_is_retryable(code, &reasons, &message) {
            CloudError::Retryable(text)
        } else {
            CloudError::Terminal(text)
        };
    }
    if err.is_binding() || err.is_serialization() || err.is_authentication() {
        return CloudError::terminal(context, err);
    }
    CloudError::retryable(context, err)
}

/// What is said of an HTTP error answer that is not a Google API error (its `status` did not
/// parse): its size, never its body, which an endpoint override could fill with what it read
/// from elsewhere.
pub(super) fn not_google(err: &google_cloud_compute_v1::Error) -> String {
    let bytes = err.http_payload().map_or(0, |payload| payload.len());
    format!("an answer that is not a Google API error ({bytes} bytes, not shown)")
}

/// Whether an HTTP error answer of Compute Engine is worth another attempt: 5xx, a rate limit, a
/// resource busy with another operation, but not a resource quota.
///
/// A rate limit is HTTP 429 (or 403 `rateLimitExceeded`), and its message speaks of a quota too
/// ("Quota exceeded for quota metric 'Queries' and limit 'Queries per minute'"): it passes within
/// the minute, so the word "quota" does not make it final. A resource quota (CPUs, addresses) is
/// 403 `quotaExceeded`, or an operation's `QUOTA_EXCEEDED` ([`check_operation`]), and is final.
fn answer_is_retryable(code: u16, reasons: &str, message: &str) -> bool {
    let rate_limited = code == 429
        || (code == 403 && (reasons.contains("rateLimitExceeded") || reasons.contains("RateLimitExceeded")));
    if rate_limited {
        return true;
    }
    let quota = reasons.contains("quotaExceeded") || message.to_ascii_lowercase().contains("quota");
    !quota && (code >= 500 || (code == 400 && reasons.contains("resourceNotReady")))
}

/// The error a `DONE` operation carries, if any, as a [`CloudError`].
pub(super) fn check_operation(context: &str, op: &Operation) -> Result<(), CloudError> {
    let Some(error) = op.error.as_ref().filter(|e| !e.errors.is_empty()) else {
        return Ok(());
    };
    let codes: Vec<&str> = error.errors.iter().filter_map(|e| e.code.as_deref()).collect();
    let messages: Vec<&str> = error.errors.iter().filter_map(|e| e.message.as_deref()).collect();
    let http = op.http_error_status_code.unwrap_or(0);
    let text = format!("{context}: operation failed ({}): {}", codes.join(", "), messages.join("; "));
    let quota = codes.iter().any(|c| c.contains("QUOTA")) || text.to_ascii_lowercase().contains("quota");
    let stockout = codes.iter().any(|c| c.contains("RESOURCE_POOL_EXHAUSTED") || c.contains("RESOURCE_NOT_READY"));
    if !quota && (stockout || http == 429 || http >= 500) {
        Err(CloudError::Retryable(text))
    } else {
        Err(CloudError::Terminal(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fault proxy's 429 (tests/tests/provider_faults.rs) was once final because its message,
    /// as Compute Engine words a rate limit, says "Quota exceeded": a create unwound on a
    /// throttled call.
    #[test]
    fn a_rate_limit_is_retried_and_a_resource_quota_is_not() {
        let rate_limit = "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service \
                          'compute.googleapis.com' for consumer 'project_number:1'.";
        assert!(answer_is_retryable(429, "", rate_limit));
        assert!(answer_is_retryable(403, "[ErrorInfo { reason: \"rateLimitExceeded\" }]", "Rate Limit Exceeded"));
        assert!(answer_is_retryable(503, "", "Internal error. Please try again."));
        assert!(answer_is_retryable(400, "resourceNotReady", "The resource is not ready"));
        assert!(!answer_is_retryable(403, "quotaExceeded", "Quota 'CPUS' exceeded. Limit: 8.0 in region us-central1."));
        assert!(!answer_is_retryable(503, "", "Quota 'CPUS' exceeded. Limit: 8.0 in region us-central1."));
        assert!(!answer_is_retryable(400, "", "Invalid value for field 'resource.name'"));
        assert!(!answer_is_retryable(403, "", "Required 'compute.instances.create' permission"));
    }
}
