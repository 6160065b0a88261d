//! What the daemon's actor acts with, as the learner produces versions: without a
//! promotion gate, every new version at once; with one, only champions (each saved
//! beside the learner's checkpoint, so that a restart never deploys an unproven
//! version), and in mode `live` the challenger under test in its slot.

use std::path::PathBuf;

use imago_policies::PolicyConfig;
use imago_robots::RobotSpec;

use crate::device::ResolvedDevice;
use crate::engine::champion::{ChallengerChange, ChampionGate, GateChange, PromotionSummary};
use crate::engine::learner_loop::LearnerListener;
use crate::engine::{PolicySnapshot, SnapshotMailbox};
use crate::learn::finetune::Learner;
use crate::store::checkpoint::{CheckpointMeta, save_policy};
use crate::store::replay::Episode;

/// What hands a daemon's actor the versions of a learner of type `L`: its first one,
/// each new one as the learner produces it ([`LearnerListener`]), and the record of
/// what was deployed.
pub(crate) trait DaemonFeed<L>: LearnerListener<L> + Send {
    /// What the actor starts with.
    fn initial(&self, learner: &L) -> anyhow::Result<PolicySnapshot>;

    /// Writes the acting champion once more (at shutdown); nothing without a gate.
    fn save_champion(&self) -> anyhow::Result<()>;

    /// What was deployed, and what a gate decided.
    fn summary(&self, learner: &L) -> PromotionSummary;
}

/// The daemon's [`LearnerListener`]: the gate (if any) and the actor's mailbox.
pub(crate) struct ActorFeed<'a> {
    gate: Option<ChampionGate>,
    mailbox: &'a SnapshotMailbox,
    champion: ChampionCheckpoint,
    device: &'a ResolvedDevice,
}

/// Where the gate's champion is kept, and what it is.
pub(crate) struct ChampionCheckpoint {
    /// The champion's checkpoint directory.
    pub(crate) dir: PathBuf,
    /// The policy's config (every version shares it).
    pub(crate) policy_config: PolicyConfig,
    /// The robot it is for.
    pub(crate) spec: RobotSpec,
}

impl ChampionCheckpoint {
    /// Writes `gate`'s champion.
    pub(crate) fn save(&self, gate: &ChampionGate) -> anyhow::Result<()> {
        let (champion, version) = gate.champion();
        let meta = CheckpointMeta::new(&self.spec, version, None);
        save_policy(champion, &self.policy_config, meta, &self.dir)?;
        Ok(())
    }
}

/// What `gate` decided; without a gate, every version of `learner` was deployed.
pub(crate) fn promotion_summary(
    gate: Option<&ChampionGate>,
    learner: &Learner,
) -> PromotionSummary {
    match gate {
        Some(gate) => gate.summary().clone(),
        None => PromotionSummary {
            champion_version: learner.version(),
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
}

impl DaemonFeed<Learner> for ActorFeed<'_> {
    /// The champion, or the learner's current version.
    fn initial(&self, learner: &Learner) -> anyhow::Result<PolicySnapshot> {
        Ok(match &self.gate {
            Some(gate) => {
                let (champion, version) = gate.champion();
                PolicySnapshot::new(version, champion.clone(), &self.champion.policy_config)
            }
            None => PolicySnapshot::new(
                learner.version(),
                learner.policy(),
                &self.champion.policy_config,
            ),
        })
    }

    fn save_champion(&self) -> anyhow::Result<()> {
        match &self.gate {
            Some(gate) => self.champion.save(gate),
            None => Ok(()),
        }
    }

    /// Without a gate, every version of `learner` was deployed.
    fn summary(&self, learner: &Learner) -> PromotionSummary {
        promotion_summary(self.gate.as_ref(), learner)
    }
}

impl LearnerListener<Learner> for ActorFeed<'_> {
    fn recorded(&mut self, episodes: &[Episode]) -> anyhow::Result<()> {
        if let Some(gate) = self.gate.as_mut() {
            let change = gate.watch_live(episodes);
            deliver(self.mailbox, &self.champion, gate, change);
        }
        Ok(())
    }

    fn new_version(&mut self, learner: &Learner) -> anyhow::Result<()> {
        let Some(gate) = self.gate.as_mut() else {
            self.mailbox.publish(PolicySnapshot::new(
                learner.version(),
                learner.policy(),
                learner.policy_config(),
            ));
            return Ok(());
        };
        let challenger = (learner.policy(), learner.policy_config(), learner.version());
        let change = gate.consider(challenger, self.device)?;
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
        let (policy, version) = gate.champion();
        mailbox.publish(PolicySnapshot::new(
            version,
            policy.clone(),
            &champion.policy_config,
        ));
        if let Err(error) = champion.save(gate) {
            eprintln!("warning: the champion's checkpoint failed: {error:#}");
        }
    }
    if let Some(slot) = mailbox.challenger() {
        match (change.challenger, gate.challenger()) {
            (ChallengerChange::Offer, Some((challenger, version))) => slot.offer(
                PolicySnapshot::new(version, challenger.clone(), &champion.policy_config),
            ),
            (ChallengerChange::Withdraw, _) => slot.withdraw(),
            _ => {}
        }
    }
}
