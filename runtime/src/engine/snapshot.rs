//! Policy hot-swap: the learner publishes versioned snapshots into a mailbox; the actor
//! takes the newest between control ticks without ever waiting for the learner.

use std::sync::{Arc, Mutex, TryLockError};

use burn::{Dispatch, DispatchDevice};
use imago_policies::{HostPolicy, VlaPolicy};

use crate::act::sampling::host_forward;

/// A policy ready for inference, and the version it is.
#[derive(Debug)]
pub struct PolicySnapshot {
    /// Monotonic version; 1 is the policy the run started from.
    pub version: u64,
    /// The weights, on the inference device.
    pub policy: VlaPolicy<Dispatch>,
    /// The same weights for the host forward, which the actor runs instead of burn's
    /// when inference is on a CPU device and the head is Gaussian (built here, on the
    /// publishing thread, so that a hot-swap costs the actor nothing).
    pub host: Option<HostPolicy>,
}

impl PolicySnapshot {
    /// `policy`, on `device`, as version `version`.
    pub fn new(version: u64, policy: VlaPolicy<Dispatch>, device: &DispatchDevice) -> Self {
        Self {
            version,
            host: host_forward(&policy, device),
            policy,
        }
    }
}

/// Holds at most one unread snapshot: a newer publication replaces an unread older one.
#[derive(Debug, Default)]
pub struct SnapshotMailbox {
    slot: Mutex<Option<Arc<PolicySnapshot>>>,
}

impl SnapshotMailbox {
    /// Publishes `snapshot`, replacing any the actor has not taken yet.
    pub fn publish(&self, snapshot: PolicySnapshot) {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        *slot = Some(Arc::new(snapshot));
    }

    /// The newest unread snapshot, if any; never blocks (a publication in progress
    /// is picked up at the next tick).
    pub fn take(&self) -> Option<Arc<PolicySnapshot>> {
        match self.slot.try_lock() {
            Ok(mut slot) => slot.take(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().take(),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}
