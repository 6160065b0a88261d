//! Policy hot-swap: the learner publishes versioned snapshots into a mailbox; the actor
//! takes the newest between control ticks without ever waiting for the learner.

use std::sync::{Arc, Mutex, TryLockError};

use burn::Dispatch;
use imago_policies::{HostPolicy, Policy, PolicyConfig};

use crate::act::evaluate::Controller;
use crate::act::lerobot_driver::LeRobotDriver;
use crate::engine::chunking::ActorActing;

/// A policy ready for inference, and the version it is.
#[derive(Debug)]
pub struct PolicySnapshot {
    /// Monotonic version; 1 is the policy the run started from.
    pub version: u64,
    /// The weights, on the inference device.
    pub policy: SnapshotPolicy,
}

/// The weights a snapshot holds: an imago policy or a LeRobot one. Every version of a
/// run is of one kind (the kind it started with).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum SnapshotPolicy {
    /// An imago policy.
    Imago {
        /// The weights.
        policy: Policy<Dispatch>,
        /// Its config (every version of a run shares it).
        config: PolicyConfig,
        /// The same weights for the host forward, which the actor runs instead of
        /// burn's when inference is on a CPU device and the head is Gaussian (built
        /// here, on the publishing thread, so that a hot-swap costs the actor nothing).
        host: Option<HostPolicy>,
    },
    /// A LeRobot policy (ACT, Diffusion Policy) bound to the robot's features; it acts
    /// through its own queues, kept per episode by the actor.
    LeRobot(LeRobotDriver<Dispatch>),
}

impl PolicySnapshot {
    /// The imago `policy` of `config` as version `version`, with its host copy where
    /// the host forward runs it ([`Policy::host_copy`]).
    pub fn new(version: u64, policy: Policy<Dispatch>, config: &PolicyConfig) -> Self {
        Self {
            version,
            policy: SnapshotPolicy::Imago {
                host: policy.host_copy(),
                policy,
                config: config.clone(),
            },
        }
    }

    /// The policy as an evaluation's controller (the promotion test's), on `device`
    /// (the inference device it is on), acting as the actor does: an imago policy
    /// executing each chunk whole or its first action every tick, sampled with
    /// `acting`'s noise; a LeRobot policy through its own queues, as it acts on the
    /// robot.
    pub fn controller<'a>(
        &'a self,
        device: &'a burn::tensor::Device<Dispatch>,
        acting: ActorActing,
    ) -> Controller<'a, Dispatch> {
        match &self.policy {
            SnapshotPolicy::Imago { policy, config, .. } => Controller::Policy {
                policy,
                config,
                device,
                wrong_instruction: false,
                execute_steps: if acting.whole_chunks {
                    config.chunk_len()
                } else {
                    1
                },
                sampling_noise: acting.sampling_noise,
            },
            SnapshotPolicy::LeRobot(driver) => Controller::LeRobot(driver),
        }
    }

    /// The LeRobot policy `driver` as version `version`.
    pub fn lerobot(version: u64, driver: LeRobotDriver<Dispatch>) -> Self {
        Self {
            version,
            policy: SnapshotPolicy::LeRobot(driver),
        }
    }
}

/// Holds at most one unread snapshot: a newer publication replaces an unread older one.
/// With promotion mode `live`, also the challenger on offer ([`ChallengerSlot`]).
#[derive(Debug, Default)]
pub struct SnapshotMailbox {
    slot: Mutex<Option<Arc<PolicySnapshot>>>,
    challenger: Option<ChallengerSlot>,
}

impl SnapshotMailbox {
    /// A mailbox with a challenger slot whose challenger acts in at most
    /// `explore_fraction` of episodes.
    pub fn with_challenger_slot(explore_fraction: f64) -> Self {
        Self {
            slot: Mutex::default(),
            challenger: Some(ChallengerSlot::new(explore_fraction)),
        }
    }

    /// The challenger slot, in promotion mode `live`.
    pub fn challenger(&self) -> Option<&ChallengerSlot> {
        self.challenger.as_ref()
    }

    /// Publishes `snapshot`, replacing any the actor has not taken yet.
    pub fn publish(&self, snapshot: Arc<PolicySnapshot>) {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        *slot = Some(snapshot);
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

/// Promotion mode `live`: the challenger the learner offers the actor, if any
/// (`engine::challenger` decides which episodes it acts in).
#[derive(Debug)]
pub struct ChallengerSlot {
    slot: Mutex<Option<Arc<PolicySnapshot>>>,
    explore_fraction: f64,
}

impl ChallengerSlot {
    /// An empty slot; the challenger acts in at most `explore_fraction` of episodes.
    pub fn new(explore_fraction: f64) -> Self {
        Self {
            slot: Mutex::new(None),
            explore_fraction,
        }
    }

    /// Offers `challenger` (replacing any other).
    pub fn offer(&self, challenger: Arc<PolicySnapshot>) {
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(challenger);
    }

    /// The largest share of episodes the challenger acts in.
    pub fn explore_fraction(&self) -> f64 {
        self.explore_fraction
    }

    /// Withdraws the challenger: it does not act from the next tick on.
    pub fn withdraw(&self) {
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The challenger on offer; `Err` while the learner holds the slot (the caller
    /// keeps what it knew: an offer or a withdrawal is seen a tick later).
    pub(crate) fn peek(&self) -> Result<Option<Arc<PolicySnapshot>>, ()> {
        match self.slot.try_lock() {
            Ok(slot) => Ok(slot.clone()),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner().clone()),
            Err(TryLockError::WouldBlock) => Err(()),
        }
    }
}
