//! What the daemon's actor acts with, as the learner produces versions: without a
//! promotion gate, every new version at once; with one, only champions (each saved
//! beside the learner's checkpoint, so that a restart never deploys an unproven
//! version), and in mode `live` the challenger under test in its slot.

use std::path::PathBuf;
use std::sync::Arc;

use imago_robots::RobotSpec;

use crate::device::ResolvedDevice;
use crate::engine::champion::{ChallengerChange, ChampionGate, GateChange, PromotionSummary};
use crate::engine::learner_loop::{LearnerListener, LoopLearner};
use crate::engine::{PolicySnapshot, SnapshotMailbox, SnapshotPolicy};
use crate::store::checkpoint::{CheckpointMeta, save_policy};
use crate::store::lerobot_policy::save_lerobot_checkpoint;
use crate::store::replay::Episode;

/// The daemon's [`LearnerListener`]: the gate (if any) and the actor's mailbox, for a
/// learner of either kind (imago's policy or a LeRobot one: the gate tests snapshots).
pub(crate) struct ActorFeed<'a> {
    gate: Option<ChampionGate>,
    mailbox: &'a SnapshotMailbox,
    champion: ChampionCheckpoint,
    device: &'a ResolvedDevice,
}

/// Where the gate's champion is kept, and for what.
pub(crate) struct ChampionCheckpoint {
    /// The champion's checkpoint directory.
    pub(crate) dir: PathBuf,
    /// The robot it is for.
    pub(crate) spec: RobotSpec,
    /// The learner's checkpoint: a LeRobot champion is written with its config and
    /// processors (unused for imago's policies, whose config the snapshot holds).
    pub(crate) learner_checkpoint: PathBuf,
}

impl ChampionCheckpoint {
    /// Writes `gate`'s champion: an imago checkpoint, or a LeRobot directory with
    /// imago's meta.
    pub(crate) fn save(&self, gate: &ChampionGate) -> anyhow::Result<()> {
        let champion = gate.champion();
        let meta = CheckpointMeta::new(&self.spec, champion.version, None);
        match &champion.policy {
            SnapshotPolicy::Imago { policy, config, .. } => {
                save_policy(policy, config, meta, &self.dir)?;
                Ok(())
            }
            SnapshotPolicy::LeRobot(driver) => {
                save_lerobot_checkpoint(driver.policy(), &self.learner_checkpoint, &self.dir, meta)
            }
        }
    }
}

/// What `gate` decided; without a gate, every version up to `version` (the learner's)
/// was deployed.
pub(crate) fn promotion_summary(gate: Option<&ChampionGate>, version: u64) -> PromotionSummary {
    match gate {
        Some(gate) => gate.summary().clone(),
        None => PromotionSummary {
            champion_version: version,
            ..PromotionSummary::default()
        },
    }
}

impl<'a> ActorFeed<'a> {
    /// The feed of `mailbox`, through `gate` when there is one.
    pub(crate) fn new(
        gate: Option<ChampionGate>,
        mailbox: &'a SnapshotMailbox,
        champion: ChampionCheckpoint,
        device: &'a ResolvedDevice,
    ) -> Self {
        Self {
            gate,
            mailbox,
            champion,
            device,
        }
    }

    /// What the actor starts with: the champion, or the learner's current version.
    pub(crate) fn initial(
        &self,
        learner: &impl LoopLearner,
    ) -> anyhow::Result<Arc<PolicySnapshot>> {
        match &self.gate {
            Some(gate) => Ok(Arc::clone(gate.champion())),
            None => Ok(Arc::new(learner.snapshot()?)),
        }
    }

    /// Writes the champion once more (at shutdown); nothing without a gate.
    pub(crate) fn save_champion(&self) -> anyhow::Result<()> {
        match &self.gate {
            Some(gate) => self.champion.save(gate),
            None => Ok(()),
        }
    }

    /// What the gate decided; without one, every version of `learner` was deployed.
    pub(crate) fn summary(&self, learner: &impl LoopLearner) -> PromotionSummary {
        promotion_summary(self.gate.as_ref(), learner.version())
    }
}

impl<L: LoopLearner> LearnerListener<L> for ActorFeed<'_> {
    fn recorded(&mut self, episodes: &[Episode]) -> anyhow::Result<()> {
        if let Some(gate) = self.gate.as_mut() {
            let change = gate.watch_live(episodes);
            deliver(self.mailbox, &self.champion, gate, change);
        }
        Ok(())
    }

    fn new_version(&mut self, learner: &L) -> anyhow::Result<()> {
        let snapshot = Arc::new(learner.snapshot()?);
        let Some(gate) = self.gate.as_mut() else {
            self.mailbox.publish(snapshot);
            return Ok(());
        };
        let change = gate.consider(snapshot, self.device)?;
        deliver(self.mailbox, &self.champion, gate, change);
        Ok(())
    }
}

/// Hands the actor what `change` says changed at `gate`: a new champion (saved to
/// `champion` too), a challenger offered or withdrawn.
fn deliver(
    mailbox: &SnapshotMailbox,
    champion: &ChampionCheckpoint,
    gate: &ChampionGate,
    change: GateChange,
) {
    if change.champion {
        mailbox.publish(Arc::clone(gate.champion()));
        if let Err(error) = champion.save(gate) {
            eprintln!("warning: the champion's checkpoint failed: {error:#}");
        }
    }
    if let Some(slot) = mailbox.challenger() {
        match (change.challenger, gate.challenger()) {
            (ChallengerChange::Offer, Some(challenger)) => slot.offer(Arc::clone(challenger)),
            (ChallengerChange::Withdraw, _) => slot.withdraw(),
            _ => {}
        }
    }
}
