//! How one account of the simulated cloud behaves: its injected faults, latency, quota and boot
//! times, and which image registries are private. A `sim` credential carries these (they are part of its public description); the
//! simulated cloud (`anycloud-sim`) acts on them.

use serde::{Deserialize, Serialize};

/// The simulated regions.
pub const REGIONS: &[&str] = &["sim-east-1", "sim-west-1", "sim-north-1"];
/// The simulated machine types.
pub const VM_TYPES: &[&str] = &["sim.small", "sim.medium", "sim.large"];

/// Behaviour and fault injection of one simulated account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Registry hosts (`ghcr.io`, `registry.local:5000`) whose images are private: the simulated
    /// kubelet pulls one only for a Pod whose `imagePullSecrets` name a registry secret for its
    /// host, and fails with `ErrImagePull` / `ImagePullBackOff` otherwise. Public (and the
    /// default) is every other host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub private_registries: Vec<String>,
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
            private_registries: Vec::new(),
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
    private_registries: Vec::new(),
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
        let registries = self.private_registries.iter().find_map(|host| {
            let bare = !host.is_empty()
                && host.len() <= 253
                && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'));
            (!bare).then(|| {
                format!(
                    "--sim-private-registry `{host}` is not a registry host: give the host (and port) alone, as in \
                     `ghcr.io` or `registry.local:5000`"
                )
            })
        });
        match checks.into_iter().flatten().chain(registries).next() {
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
        let registry =
            SimSettings { private_registries: vec!["https://ghcr.io/acme".into()], ..SimSettings::default() };
        assert!(registry.validate().unwrap_err().starts_with("--sim-private-registry `https://ghcr.io/acme`"));
        let registry = SimSettings { private_registries: vec!["registry.local:5000".into()], ..SimSettings::default() };
        assert!(registry.validate().is_ok());
    }

    /// Settings stored before private registries existed still parse, and an account without
    /// any stores none.
    #[test]
    fn private_registries_are_optional_in_stored_settings() {
        let old: SimSettings = serde_json::from_str(
            r#"{"fail_first":0,"latency_ms":0,"error_rate":0,"seed":0,"boot_ms":300,"never_ready":false}"#,
        )
        .unwrap();
        assert!(old.private_registries.is_empty());
        assert!(!serde_json::to_string(&old).unwrap().contains("private_registries"));
        let private = SimSettings { private_registries: vec!["ghcr.io".into()], ..SimSettings::default() };
        let stored = serde_json::to_string(&private).unwrap();
        assert_eq!(serde_json::from_str::<SimSettings>(&stored).unwrap(), private);
    }
}
