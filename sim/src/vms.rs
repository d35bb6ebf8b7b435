//! A simulated VM: its row, and its state at the time it is read (VMs boot by the clock:
//! `pending` for `boot_ms` after launch, then `running`).
//!
//! Its user-data is kept sealed (`sim_vms.user_data`, under the API's [`SecretBox`], bound to the
//! VM's id): a control plane's carries the cluster's server and agent tokens, a `system:masters`
//! API token and the CA key, which must no more be readable in the database than the `clusters`
//! table's sealed copy. It is opened only where the simulated Kubernetes reads it, as a booting
//! VM would run it ([`SimVm::machine`]).

use anycloud_workflows::cloud::{NAME_TAG, ROLE_TAG, Role, Vm};
use anycloud_workflows::secrets::{Place, SecretBox};

use crate::kube::Machine;

/// The columns of a simulated VM, as [`SimVmRow`] reads them.
pub(crate) const SELECT_VMS: &str = "SELECT id, account, tags, user_data, private_ip, public_ip, boot_ms, never_ready, \
                          private_registries, launched_at, terminated_at FROM sim_vms";

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
    /// What it was launched with, sealed ([`open_user_data`] opens it).
    pub(crate) sealed_user_data: String,
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
    /// The registry hosts whose images are private (its account's setting when it launched).
    pub private_registries: Vec<String>,
}

#[derive(sqlx::FromRow)]
pub(crate) struct SimVmRow {
    pub(crate) id: String,
    pub(crate) account: String,
    pub(crate) tags: String,
    /// Sealed: [`seal_user_data`].
    pub(crate) user_data: String,
    pub(crate) private_ip: String,
    pub(crate) public_ip: String,
    pub(crate) boot_ms: i64,
    pub(crate) never_ready: bool,
    /// A JSON array of hosts.
    pub(crate) private_registries: String,
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
            sealed_user_data: self.user_data,
            private_ip: self.private_ip,
            public_ip: self.public_ip,
            state,
            running_for_ms,
            boot_ms: self.boot_ms,
            never_ready: self.never_ready,
            private_registries: serde_json::from_str(&self.private_registries).unwrap_or_default(),
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
    /// (a control plane's at once), unless the account says never. A VM whose user-data does not
    /// open (sealed under another key, or altered) ran nothing: it serves no API and joins no
    /// cluster. `opened` is its user-data as the caller opened it (`crate::opened`).
    pub(crate) fn machine(&self, opened: Result<String, UserDataError>) -> Machine {
        let control_plane = self.tags.get(ROLE_TAG).map(String::as_str) == Some(Role::ControlPlane.as_str());
        let user_data = opened.unwrap_or_else(|err| {
            tracing::warn!(vm = %self.id, error = %err, "simulated cloud: a VM's user-data does not open; it boots nothing");
            String::new()
        });
        Machine {
            id: self.id.clone(),
            name: self.tags.get(NAME_TAG).cloned().unwrap_or_default(),
            control_plane,
            state: self.state.to_owned(),
            running: self.state == "running",
            user_data,
            private_ip: Some(self.private_ip.clone()),
            public_ip: Some(self.public_ip.clone()),
            node_ready: !self.never_ready && (control_plane || self.running_for_ms >= self.boot_ms),
            private_registries: self.private_registries.clone(),
        }
    }
}

/// Why a VM's user-data did not open: another key sealed it, it was sealed for another VM's row
/// (the place is bound into the seal), or altered.
pub type UserDataError = anycloud_workflows::secrets::SecretError;

/// Where a VM's sealed user-data is stored: bound into the seal, so that a sealed value copied
/// into another VM's row does not open there.
fn place(id: &str) -> Place<'_> {
    Place { table: "sim_vms", column: "user_data", row: id }
}

/// Seals `user_data` for the row of VM `id`.
pub(crate) fn seal_user_data(sealer: &SecretBox, id: &str, user_data: &str) -> String {
    sealer.seal(place(id), user_data.as_bytes())
}

/// Opens what [`seal_user_data`] sealed for VM `id`.
pub fn open_user_data(sealer: &SecretBox, id: &str, sealed: &str) -> Result<String, UserDataError> {
    Ok(String::from_utf8_lossy(&sealer.open(place(id), sealed)?).into_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn user_data_is_sealed_for_its_vm_alone() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = SecretBox::load_or_create(dir.path()).unwrap();
        let script = "#!/bin/sh\nK3S_TOKEN='s3cr3t'\n";
        let sealed = seal_user_data(&sealer, "sim-1", script);
        assert!(!sealed.contains("s3cr3t") && !sealed.contains("#!/bin/sh"), "{sealed}");
        assert_eq!(open_user_data(&sealer, "sim-1", &sealed).unwrap(), script);
        assert!(open_user_data(&sealer, "sim-2", &sealed).is_err(), "another VM's row");
        let other = SecretBox::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        assert!(open_user_data(&other, "sim-1", &sealed).is_err(), "another key");
        // A row written in the clear (as before sealing) is not taken for a script.
        assert!(open_user_data(&sealer, "sim-1", script).is_err());
    }

    /// A VM whose user-data does not open (another VM's, written in the clear) ran nothing: the
    /// simulated Kubernetes sees no script, so no token, no node, no CA.
    #[test]
    fn a_vm_whose_user_data_does_not_open_boots_nothing() {
        let sealer = SecretBox::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        let script = "#!/bin/sh\nK3S_TOKEN='s3cr3t'\n";
        let row = |id: &str, user_data: String| SimVmRow {
            id: id.to_owned(),
            account: "a".to_owned(),
            tags: r#"{"anycloud-role":"control-plane"}"#.to_owned(),
            user_data,
            private_ip: "10.77.0.2".to_owned(),
            public_ip: "203.0.113.2".to_owned(),
            boot_ms: 0,
            never_ready: false,
            private_registries: "[]".to_owned(),
            launched_at: 0,
            terminated_at: None,
        };
        let open = |vm: &SimVm| open_user_data(&sealer, &vm.id, &vm.sealed_user_data);
        let vm = row("sim-1", seal_user_data(&sealer, "sim-1", script)).into_vm(1);
        assert_eq!(vm.machine(open(&vm)).user_data, script);
        for (id, stored) in [("sim-2", seal_user_data(&sealer, "sim-1", script)), ("sim-1", script.to_owned())] {
            let vm = row(id, stored).into_vm(1);
            let machine = vm.machine(open(&vm));
            assert!(machine.running && machine.control_plane, "{machine:?}");
            assert_eq!(machine.user_data, "", "{id}");
        }
    }
}
