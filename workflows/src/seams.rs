//! Test seams: what a test may change in how the workflows reach the world. Every one is off in
//! production: the `anycloud` binary builds its API with [`TestSeams::default()`], and only the
//! test suite's own binary (`anycloud-seamed`, in the tests crate) turns them on, from variables
//! it reads itself (docs/operations.md lists them). No code of the production binary reads them.

use std::time::Duration;

/// The seams; the default is none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TestSeams {
    /// Where a simulated Kubernetes serves the control planes of clusters whose VMs cannot boot
    /// here (moto's, the fake Compute server's): the URL of a cluster's API is this base, then
    /// `/` and the control-plane VM's provider id. The Kubernetes calls are the production ones.
    pub simulated_kube: Option<String>,
    /// A pause between a launch call's answer and the end of its step, so that a crash test can
    /// kill the API between the two.
    pub pause_after_launch: Option<Duration>,
    /// A pause between a job's Secrets and its Job in `job.run`'s `apply`, so that a crash test
    /// can kill the API inside the secrets' apply.
    pub pause_in_secret_apply: Option<Duration>,
    /// Where every hosted API's VM is reached (moto's and the fake Compute server's VMs boot
    /// nothing: the tests' VM runner runs the API their user-data names at this address).
    pub hosted_api_address: Option<String>,
    /// The exec idle limit, instead of [`crate::operations::EXEC_IDLE_LIMIT`], so that a test
    /// sees a session end without waiting half an hour.
    pub exec_idle_limit: Option<Duration>,
}

impl TestSeams {
    /// Whether any seam is on.
    pub fn any(&self) -> bool {
        *self != Self::default()
    }

    /// The seams that are on, in words, for the loud announcement a binary with seams makes.
    pub fn describe(&self) -> Vec<String> {
        let mut on = Vec::new();
        if let Some(url) = &self.simulated_kube {
            on.push(format!("every cluster's Kubernetes API is the simulated one at {url}"));
        }
        if let Some(pause) = self.pause_after_launch {
            on.push(format!("each launch step pauses {} ms before its checkpoint", pause.as_millis()));
        }
        if let Some(pause) = self.pause_in_secret_apply {
            on.push(format!("a job's apply pauses {} ms between its Secrets and its Job", pause.as_millis()));
        }
        if let Some(address) = &self.hosted_api_address {
            on.push(format!("every hosted API's VM is reached at {address}"));
        }
        if let Some(limit) = self.exec_idle_limit {
            on.push(format!("an exec session ends after {} ms without input or output", limit.as_millis()));
        }
        on
    }
}
