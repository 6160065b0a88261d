//! Promotion mode `live`: the challenger on the real robot. The learner offers the
//! challenger under test in the mailbox's [`ChallengerSlot`]; the actor gives it whole
//! episodes,
//! never more than `explore_fraction` of all episodes ([`EpisodeAssignment`]), and
//! drops it at the next tick once it is withdrawn. Its episodes are recorded with its
//! version, which is how the replay tells champion and challenger episodes apart.

use std::sync::Arc;

use super::snapshot::{ChallengerSlot, PolicySnapshot};

/// Which policy acts in each episode: the challenger on offer gets an episode whenever
/// that keeps its share of the episodes since it was offered at or below
/// `explore_fraction` (so its episodes are spread out, not bunched, and no challenger's
/// share, nor all challengers' together, ever exceeds it).
#[derive(Debug, Default)]
pub(crate) struct EpisodeAssignment {
    /// The challenger these counts are about.
    offered: Option<u64>,
    episodes: u64,
    challenger_episodes: u64,
    acting: Option<Arc<PolicySnapshot>>,
}

impl EpisodeAssignment {
    /// Starts an episode: whether the challenger on offer in `slot` acts in it.
    pub(crate) fn start_episode(&mut self, slot: Option<&ChallengerSlot>) -> bool {
        self.acting = None;
        let Some(slot) = slot else {
            return false;
        };
        let Ok(offered) = slot.peek() else {
            // The learner holds the slot: the champion acts, and the episode counts.
            self.episodes += 1;
            return false;
        };
        let version = offered.as_ref().map(|c| c.version);
        if version != self.offered {
            (self.offered, self.episodes, self.challenger_episodes) = (version, 0, 0);
        }
        self.episodes += 1;
        let within_share = (self.challenger_episodes + 1) as f64
            <= slot.explore_fraction() * self.episodes as f64 + 1e-9;
        if within_share && let Some(challenger) = offered {
            self.challenger_episodes += 1;
            self.acting = Some(challenger);
        }
        self.acting.is_some()
    }

    /// The policy that acts at this tick: the episode's challenger while it is still on
    /// offer, else `champion`.
    pub(crate) fn acting<'a>(
        &'a mut self,
        slot: Option<&ChallengerSlot>,
        champion: &'a Arc<PolicySnapshot>,
    ) -> &'a Arc<PolicySnapshot> {
        if let (Some(challenger), Some(slot)) = (&self.acting, slot)
            && let Ok(offered) = slot.peek()
            && offered.is_none_or(|o| o.version != challenger.version)
        {
            self.acting = None;
        }
        self.acting.as_ref().unwrap_or(champion)
    }

    /// Episodes started since the challenger on offer was offered, and of them, given
    /// to it.
    #[cfg(test)]
    fn counts(&self) -> (u64, u64) {
        (self.episodes, self.challenger_episodes)
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::ndarray::NdArrayDevice;
    use burn::{Dispatch, DispatchDevice};
    use imago_policies::PolicyConfig;

    use super::*;
    use crate::robot::RobotConfig;

    fn snapshot(version: u64) -> PolicySnapshot {
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let config = PolicyConfig::for_robot(
            imago_policies::Architecture::Vla,
            &RobotConfig::default().spec(),
        )
        .unwrap();
        PolicySnapshot::new(version, config.init::<Dispatch>(&device), &config)
    }

    #[test]
    fn the_challenger_never_acts_in_more_than_its_share_of_episodes() {
        let slot = ChallengerSlot::new(0.25);
        let champion = Arc::new(snapshot(1));
        let mut assignment = EpisodeAssignment::default();
        assert!(!assignment.start_episode(Some(&slot)), "nothing on offer");
        slot.offer(Arc::new(snapshot(2)));
        let mut given = Vec::new();
        for _ in 0..40 {
            given.push(assignment.start_episode(Some(&slot)));
            let (episodes, challenger) = assignment.counts();
            assert!(challenger as f64 <= 0.25 * episodes as f64, "{given:?}");
        }
        assert_eq!(assignment.counts(), (40, 10));
        // Spread out: one episode in four, never two in a row.
        assert!(given.windows(2).all(|w| !(w[0] && w[1])), "{given:?}");
        // A new challenger starts its own count.
        slot.offer(Arc::new(snapshot(3)));
        assert!(!assignment.start_episode(Some(&slot)));
        assert_eq!(assignment.counts(), (1, 0));
        // An episode the challenger started acts with it, until it is withdrawn.
        while !assignment.start_episode(Some(&slot)) {}
        assert_eq!(assignment.acting(Some(&slot), &champion).version, 3);
        slot.withdraw();
        assert_eq!(assignment.acting(Some(&slot), &champion).version, 1);
        assert!(!assignment.start_episode(None));
    }
}
