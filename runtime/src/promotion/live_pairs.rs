//! Promotion mode `live`: pairing interleaved live episodes for the sequential test.
//!
//! On the real robot the champion and the challenger cannot replay the same seed, so
//! each challenger episode is paired with the champion's most recent unpaired episode
//! before it (or, if there is none, the champion's next one). Which episodes pair up
//! depends only on their order, never on their outcomes, so with exchangeable
//! episodes each pair is an independent draw of the two policies' outcomes, and the
//! paired tests keep their guarantee (docs/promotion.md, "Mode live").

use std::collections::VecDeque;

use super::{PairedOutcome, PromotionTest, Verdict};

/// One live episode's outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LiveOutcome {
    /// Succeeded without an intervention.
    pub success: bool,
    /// Its score in [0, 1] (metric `steps_to_success`).
    pub score: f64,
}

/// A live test in progress: the sequential test and the episodes not yet paired.
#[derive(Debug, Clone)]
pub struct LivePairing {
    test: PromotionTest,
    last_champion: Option<LiveOutcome>,
    waiting_challenger: VecDeque<LiveOutcome>,
}

impl LivePairing {
    /// Pairs episodes into `test`.
    pub fn new(test: PromotionTest) -> Self {
        Self {
            test,
            last_champion: None,
            waiting_challenger: VecDeque::new(),
        }
    }

    /// A champion episode ended; returns the verdict.
    pub fn champion_episode(&mut self, outcome: LiveOutcome) -> Verdict {
        match self.waiting_challenger.pop_front() {
            Some(challenger) => self.observe(outcome, challenger),
            None => {
                self.last_champion = Some(outcome);
                self.test.verdict()
            }
        }
    }

    /// A challenger episode ended; returns the verdict.
    pub fn challenger_episode(&mut self, outcome: LiveOutcome) -> Verdict {
        match self.last_champion.take() {
            Some(champion) => self.observe(champion, outcome),
            None => {
                self.waiting_challenger.push_back(outcome);
                self.test.verdict()
            }
        }
    }

    /// The test so far.
    pub fn test(&self) -> &PromotionTest {
        &self.test
    }

    fn observe(&mut self, champion: LiveOutcome, challenger: LiveOutcome) -> Verdict {
        self.test.observe(PairedOutcome {
            champion_success: champion.success,
            challenger_success: challenger.success,
            champion_score: champion.score,
            challenger_score: challenger.score,
        })
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::*;
    use crate::promotion::PromotionTestConfig;

    fn outcome(success: bool) -> LiveOutcome {
        LiveOutcome {
            success,
            score: f64::from(u8::from(success)),
        }
    }

    #[test]
    fn challenger_episodes_pair_with_the_champions_latest_before_them() {
        let mut pairing = LivePairing::new(PromotionTestConfig::default().start());
        for _ in 0..5 {
            pairing.champion_episode(outcome(true));
        }
        assert_eq!(pairing.test().episodes(), 0, "no challenger episode yet");
        pairing.challenger_episode(outcome(false));
        assert_eq!(pairing.test().episodes(), 1);
        // A challenger episode with no champion episode before it waits for the next.
        pairing.challenger_episode(outcome(false));
        assert_eq!(pairing.test().episodes(), 1);
        pairing.champion_episode(outcome(true));
        assert_eq!(pairing.test().episodes(), 2);
    }

    #[test]
    fn a_worse_challenger_is_rejected_and_an_equal_one_rarely_promoted() {
        // A challenger that always fails against a champion that succeeds 90% of the
        // time, one challenger episode in four.
        let mut rng = StdRng::seed_from_u64(5);
        let mut pairing = LivePairing::new(PromotionTestConfig::default().start());
        let mut verdict = Verdict::Undecided;
        let mut challenger_episodes = 0;
        for episode in 0..400 {
            verdict = if episode % 4 == 3 {
                challenger_episodes += 1;
                pairing.challenger_episode(outcome(false))
            } else {
                pairing.champion_episode(outcome(rng.random::<f64>() < 0.9))
            };
            if verdict.is_final() {
                break;
            }
        }
        assert_eq!(verdict, Verdict::RejectWorse);
        assert!(challenger_episodes <= 12, "{challenger_episodes}");
        // Equal policies (60% each): 1000 live tests promote at most 5%.
        let mut promoted = 0;
        for _ in 0..1000 {
            let config = PromotionTestConfig {
                max_episodes: 200,
                ..PromotionTestConfig::default()
            };
            let mut pairing = LivePairing::new(config.start());
            let mut episode = 0u32;
            let verdict = loop {
                let success = rng.random::<f64>() < 0.6;
                let verdict = if episode % 3 == 2 {
                    pairing.challenger_episode(outcome(success))
                } else {
                    pairing.champion_episode(outcome(success))
                };
                episode += 1;
                if verdict.is_final() {
                    break verdict;
                }
            };
            promoted += u32::from(verdict == Verdict::Promote);
        }
        assert!(promoted <= 50, "{promoted} of 1000 promoted");
    }
}
