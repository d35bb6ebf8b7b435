//! A container's end, seen as it happens: the task that reaps a container's process
//! ([`super::process::spawn`]) reports its exit here, and a task beside the control loop (in
//! `reconcile.rs`) passes the kubelet over that one Pod at once, as a kubelet with the evented
//! PLEG learns of a container's end from the runtime's event rather than from its next relist
//! (<https://kubernetes.io/docs/tasks/administer-cluster/switch-to-evented-pleg/>). Without it,
//! an exit waits for the control loop's kubelet, which comes after the Job controller and the
//! scheduler in a pass that, with hundreds of Pods on a busy machine, takes seconds.
//!
//! The loop's passes stay the safety net: a process that outlived an API restart is not this
//! API's child, and the next pass finds its exit file. A Pod being deleted is left to the loop,
//! which takes it out of its Services before it signals what still runs. A Pod that the loop's
//! kubelet holds at that moment (`Kubelet::hold`) is tried again shortly after.

use std::sync::{Mutex, PoisonError};

use tokio::sync::mpsc;

/// A container process that ended, by its Pod.
#[derive(Debug, Clone)]
pub(crate) struct Exit {
    pub(crate) cluster: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
}

/// The exits reported and not yet handled.
pub(crate) struct Exits {
    sender: mpsc::UnboundedSender<Exit>,
    receiver: Mutex<Option<mpsc::UnboundedReceiver<Exit>>>,
}

impl Exits {
    pub(crate) fn new() -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        Self { sender, receiver: Mutex::new(Some(receiver)) }
    }

    /// The exits, for the one task that handles them (`None` once taken).
    pub(crate) fn take(&self) -> Option<mpsc::UnboundedReceiver<Exit>> {
        self.receiver.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// What a container's reaper runs when its process ends.
    pub(crate) fn reporter(&self, exit: Exit) -> impl FnOnce() + Send + 'static {
        let sender = self.sender.clone();
        move || {
            // Nobody listens once the simulated Kubernetes has ended: nothing to tell.
            let _ = sender.send(exit);
        }
    }
}
