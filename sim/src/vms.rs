//! A simulated VM: its row, and its state at the time it is read (VMs boot by the clock:
//! `pending` for `boot_ms` after launch, then `running`).

use anycloud_workflows::cloud::{NAME_TAG, ROLE_TAG, Role, Vm};

use crate::kube::Machine;

/// The columns of a simulated VM, as [`SimVmRow`] reads them.
pub(crate) const SELECT_VMS: &str = "SELECT id, account, tags, user_data, private_ip, public_ip, boot_ms, never_ready, \
                          launched_at, terminated_at FROM sim_vms";

/// How long a terminated VM is listed as `shutting-down`.
pub(crate) const SHUTDOWN_MS: i64 = 300;

/// A simulated VM with its state at the time it was read.
#[derive(Debug, Clone)]
pub struct SimVm {
    /// `sim-...`.
    pub id: String,
    /// Its account.
    pub account: String,
    /// Its tags.
    pub tags: std::collections::BTreeMap<String, String>,
    /// What it was launched with.
    pub user_data: String,
    /// Private address.
    pub private_ip: String,
    /// Public address (TEST-NET-3).
    pub public_ip: String,
    /// `pending`, `running`, `shutting-down` or `terminated`.
    pub state: &'static str,
    /// Milliseconds it has been running (0 unless running).
    pub running_for_ms: i64,
    /// How long it takes to boot.
    pub boot_ms: i64,
    /// Its node never becomes Ready.
    pub never_ready: bool,
}

#[derive(sqlx::FromRow)]
pub(crate) struct SimVmRow {
    pub(crate) id: String,
    pub(crate) account: String,
    pub(crate) tags: String,
    pub(crate) user_data: String,
    pub(crate) private_ip: String,
    pub(crate) public_ip: String,
    pub(crate) boot_ms: i64,
    pub(crate) never_ready: bool,
    pub(crate) launched_at: i64,
    pub(crate) terminated_at: Option<i64>,
}

impl SimVmRow {
    pub(crate) fn into_vm(self, now: i64) -> SimVm {
        let running_since = self.launched_at + self.boot_ms;
        let (state, running_for_ms) = match self.terminated_at {
            Some(at) if now >= at + SHUTDOWN_MS => ("terminated", 0),
            Some(_) => ("shutting-down", 0),
            None if now < running_since => ("pending", 0),
            None => ("running", now - running_since),
        };
        SimVm {
            id: self.id,
            account: self.account,
            tags: serde_json::from_str(&self.tags).unwrap_or_default(),
            user_data: self.user_data,
            private_ip: self.private_ip,
            public_ip: self.public_ip,
            state,
            running_for_ms,
            boot_ms: self.boot_ms,
            never_ready: self.never_ready,
        }
    }
}

impl SimVm {
    pub(crate) fn to_vm(&self) -> Vm {
        Vm {
            provider_id: self.id.clone(),
            name: self.tags.get(NAME_TAG).cloned().unwrap_or_default(),
            role: self.tags.get(ROLE_TAG).and_then(|role| Role::parse(role)).unwrap_or(Role::Worker),
            state: self.state.to_owned(),
            private_ip: Some(self.private_ip.clone()),
            public_ip: Some(self.public_ip.clone()),
        }
    }

    /// The VM as the simulated Kubernetes sees it: its node is Ready `boot_ms` after it runs
    /// (a control plane's at once), unless the account says never.
    pub(crate) fn machine(&self) -> Machine {
        let control_plane = self.tags.get(ROLE_TAG).map(String::as_str) == Some(Role::ControlPlane.as_str());
        Machine {
            id: self.id.clone(),
            name: self.tags.get(NAME_TAG).cloned().unwrap_or_default(),
            control_plane,
            state: self.state.to_owned(),
            running: self.state == "running",
            user_data: self.user_data.clone(),
            private_ip: Some(self.private_ip.clone()),
            public_ip: Some(self.public_ip.clone()),
            node_ready: !self.never_ready && (control_plane || self.running_for_ms >= self.boot_ms),
        }
    }
}
