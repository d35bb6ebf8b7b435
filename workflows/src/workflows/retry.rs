//! The retry policies and timeouts the domain's steps share.

use std::time::Duration;

use anycloud_engine::{OnExhausted, RetryPolicy};

/// Calls to a cloud provider: back off from 1 s to 30 s, 8 attempts within 10 min, then park for
/// an operator (the provider keeps failing: throttling, 5xx, a network error).
pub fn cloud_calls() -> RetryPolicy {
    RetryPolicy {
        initial_delay: Duration::from_secs(1),
        multiplier: 2.0,
        max_delay: Duration::from_secs(30),
        jitter: 0.2,
        max_attempts: Some(8),
        max_elapsed: Some(Duration::from_secs(10 * 60)),
        on_exhausted: OnExhausted::Park,
    }
}

/// Sweeps that wait for VMs to go: every 1-5 s for up to 15 min, then park.
pub fn sweeps() -> RetryPolicy {
    RetryPolicy {
        initial_delay: Duration::from_secs(1),
        multiplier: 1.5,
        max_delay: Duration::from_secs(5),
        jitter: 0.1,
        max_attempts: Some(300),
        max_elapsed: Some(Duration::from_secs(15 * 60)),
        on_exhausted: OnExhausted::Park,
    }
}

/// How long one attempt of a step that changes things at a cloud may take: past it the attempt is
/// stopped and retried (a call that hangs cannot hold a run forever). Long enough for the
/// slowest documented wait (a GCE operation, up to 10 min); a retry finds what an earlier attempt
/// made, so a long launch still makes progress attempt by attempt.
pub const CLOUD_ATTEMPT: Duration = Duration::from_secs(15 * 60);

/// How long one attempt of a step that only asks a question (a read call, a poll's check) may take.
pub const QUICK_ATTEMPT: Duration = Duration::from_secs(2 * 60);

/// How long a cluster's Kubernetes API and its nodes may take to come up:
/// `ANYCLOUD_CLUSTER_READY_TIMEOUT_SECS`, 15 minutes by default (at most a day).
pub fn ready_timeout() -> Duration {
    let secs = std::env::var("ANYCLOUD_CLUSTER_READY_TIMEOUT_SECS").ok().and_then(|s| s.parse::<u64>().ok());
    Duration::from_secs(secs.unwrap_or(15 * 60).min(24 * 3600))
}
