//! How one account of the simulated cloud behaves: its injected faults, latency, quota and boot
//! times. A `sim` credential carries these (they are part of its public description); the
//! simulated cloud (`anycloud-sim`) acts on them.

use serde::{Deserialize, Serialize};

/// The simulated regions.
pub const REGIONS: &[&str] = &["sim-east-1", "sim-west-1", "sim-north-1"];
/// The simulated machine types.
pub const VM_TYPES: &[&str] = &["sim.small", "sim.medium", "sim.large"];

/// Behaviour and fault injection of one simulated account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimSettings {
    /// The first this many API calls fail with a transient error (HTTP 503).
    pub fail_first: u32,
    /// Every call is rejected with this message, as a cloud rejects bad keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reject: Option<String>,
    /// Each call takes this long.
    pub latency_ms: u64,
    /// Percentage (0-100) of calls after `fail_first` that fail transiently, chosen by `seed`.
    pub error_rate: u8,
    /// Seed of the transient errors and of VM ids and addresses.
    pub seed: u64,
    /// At most this many live VMs in the account; a launch beyond fails with a quota error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_vms: Option<u32>,
    /// How long a VM takes to boot, and a node to become Ready after that.
    pub boot_ms: u64,
    /// VMs boot but their Kubernetes nodes never become Ready.
    pub never_ready: bool,
}

impl Default for SimSettings {
    fn default() -> Self {
        Self {
            fail_first: 0,
            reject: None,
            latency_ms: 0,
            error_rate: 0,
            seed: 0,
            quota_vms: None,
            boot_ms: 300,
            never_ready: false,
        }
    }
}

/// The largest value each numeric setting takes: a simulated account is for tests and demos, and
/// a value past these would only hang them (an hour's latency) or overflow a timer.
pub const LIMITS: SimSettings = SimSettings {
    fail_first: 1_000_000,
    reject: None,
    latency_ms: 60_000,
    error_rate: 100,
    seed: u64::MAX,
    quota_vms: Some(10_000),
    boot_ms: 3_600_000,
    never_ready: false,
};

impl SimSettings {
    /// Checks every number against [`LIMITS`]; the error names the setting, its flag and its range.
    pub fn validate(&self) -> Result<(), String> {
        let out_of_range = |flag: &str, value: u64, max: u64| {
            (value > max).then(|| format!("--{flag} {value} is out of range: use 0 to {max}"))
        };
        let checks = [
            out_of_range("sim-fail-first", u64::from(self.fail_first), u64::from(LIMITS.fail_first)),
            out_of_range("sim-latency-ms", self.latency_ms, LIMITS.latency_ms),
            out_of_range("sim-error-rate", u64::from(self.error_rate), u64::from(LIMITS.error_rate)),
            out_of_range(
                "sim-quota-vms",
                self.quota_vms.map_or(0, u64::from),
                u64::from(LIMITS.quota_vms.unwrap_or(0)),
            ),
            out_of_range("sim-boot-ms", self.boot_ms, LIMITS.boot_ms),
        ];
        match checks.into_iter().flatten().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_past_their_limits_are_refused_by_name() {
        assert!(SimSettings::default().validate().is_ok());
        assert!(LIMITS.validate().is_ok());
        let slow = SimSettings { latency_ms: 60_001, ..SimSettings::default() };
        assert_eq!(slow.validate().unwrap_err(), "--sim-latency-ms 60001 is out of range: use 0 to 60000");
        let rate = SimSettings { error_rate: 101, ..SimSettings::default() };
        assert!(rate.validate().unwrap_err().starts_with("--sim-error-rate 101"));
    }
}
