//! Policy hot-swap: the learner publishes versioned snapshots into a mailbox; the actor
//! takes the newest between control ticks without ever waiting for the learner.

use std::sync::{Arc, Mutex, TryLockError};

use burn::Dispatch;
use imago_policies::VlaPolicy;

/// A policy ready for inference, and the version it is.
#[derive(Debug)]
pub struct PolicySnapshot {
    /// Monotonic version; 1 is the policy the run started from.
    pub version: u64,
    /// The weights, on the inference device.
    pub policy: VlaPolicy<Dispatch>,
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
