//! The post-promotion guard: after a promotion, the new champion's live episodes are
//! watched against the previous champion's live record, and a certified regression
//! rolls it back (docs/promotion.md, "Guard and rollback").
//!
//! The previous champion succeeded in `k` of its `n` live episodes. Its success rate
//! is bounded from below by the one-sided Clopper-Pearson bound `p0` at level
//! `alpha / 2` (`alpha = 1 - confidence`). The new champion's successes then feed
//! [`FailureCounts`] as "failures": its e-value of "the rate is below `p0`" is an
//! e-process under every success rate at least `p0`, so by Ville's inequality it
//! reaches `2 / alpha` with probability at most `alpha / 2`. A regression is certified
//! when it does; by the union bound, a new champion at least as good as the previous
//! one is rolled back with probability at most `alpha`, however long it is watched.

use super::FailureCounts;

/// Live episodes of one champion, and how many succeeded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveRecord {
    /// Episodes it acted from start to end.
    pub episodes: u32,
    /// Of them, succeeded without an intervention.
    pub successes: u32,
}

impl LiveRecord {
    /// Adds one episode.
    pub fn observe(&mut self, success: bool) {
        self.episodes += 1;
        self.successes += success as u32;
    }

    /// The one-sided Clopper-Pearson lower bound of the success rate at level
    /// `alpha`: the rate `p` at which `k` or more successes in `n` have probability
    /// `alpha` (0 when nothing succeeded).
    pub fn lower_bound(&self, alpha: f64) -> f64 {
        if self.successes == 0 {
            return 0.0;
        }
        let (mut low, mut high) = (0.0f64, 1.0f64);
        for _ in 0..60 {
            let p = 0.5 * (low + high);
            if binomial_upper_tail(self.episodes, self.successes, p) < alpha {
                low = p;
            } else {
                high = p;
            }
        }
        low
    }
}

/// `P(X >= k)` for `X ~ Binomial(n, p)`, summed in log space.
fn binomial_upper_tail(n: u32, k: u32, p: f64) -> f64 {
    if p <= 0.0 {
        return if k == 0 { 1.0 } else { 0.0 };
    }
    if p >= 1.0 {
        return 1.0;
    }
    let (ln_p, ln_q) = (p.ln(), (1.0 - p).ln());
    // ln C(n, j), built up from ln C(n, 0) = 0.
    let mut ln_choose = 0.0f64;
    let mut tail = 0.0f64;
    for j in 0..=n {
        if j > 0 {
            ln_choose += f64::from(n - j + 1).ln() - f64::from(j).ln();
        }
        if j >= k {
            tail += (ln_choose + f64::from(j) * ln_p + f64::from(n - j) * ln_q).exp();
        }
    }
    tail.min(1.0)
}

/// What the guard concluded after an episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardVerdict {
    /// Still watching.
    Watching,
    /// The new champion is certifiably worse than the previous one: roll back.
    Regressed,
    /// The watch is over without a regression (`max_episodes` watched).
    Cleared,
}

/// The watch over a newly promoted champion.
#[derive(Debug, Clone)]
pub struct RegressionGuard {
    baseline: f64,
    successes: FailureCounts,
    threshold: f64,
    max_episodes: u32,
}

impl RegressionGuard {
    /// A watch against `previous` (the replaced champion's live record) at
    /// `confidence`, for at most `max_episodes` live episodes; `None` when `previous`
    /// has no success, so that no regression below it can be certified.
    pub fn new(previous: LiveRecord, confidence: f64, max_episodes: u32) -> Option<Self> {
        let alpha = 1.0 - confidence;
        let baseline = previous.lower_bound(alpha / 2.0);
        (baseline > 0.0).then(|| Self {
            baseline,
            successes: FailureCounts::default(),
            threshold: 2.0 / alpha,
            max_episodes,
        })
    }

    /// The success rate the new champion is tested against: the lower bound of the
    /// previous champion's.
    pub fn baseline(&self) -> f64 {
        self.baseline
    }

    /// The evidence of a regression so far, and the threshold it must reach.
    pub fn evidence(&self) -> (f64, f64) {
        (self.successes.evidence_below(self.baseline), self.threshold)
    }

    /// Live episodes watched.
    pub fn episodes(&self) -> u32 {
        self.successes.trials
    }

    /// Adds one live episode of the new champion.
    pub fn observe(&mut self, success: bool) -> GuardVerdict {
        self.successes.observe(success);
        if self.evidence().0 >= self.threshold {
            GuardVerdict::Regressed
        } else if self.successes.trials >= self.max_episodes {
            GuardVerdict::Cleared
        } else {
            GuardVerdict::Watching
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::*;

    fn record(episodes: u32, successes: u32) -> LiveRecord {
        LiveRecord {
            episodes,
            successes,
        }
    }

    #[test]
    fn the_lower_bound_is_clopper_pearson() {
        // All n succeeded: the bound solves p^n = alpha.
        let bound = record(4, 4).lower_bound(0.025);
        assert!((bound - 0.025f64.powf(0.25)).abs() < 1e-9, "{bound}");
        // 30 of 50 at 2.5%: 0.4518 (R's binom.test(30, 50)$conf.int[1]).
        let bound = record(50, 30).lower_bound(0.025);
        assert!((bound - 0.4518).abs() < 5e-4, "{bound}");
        assert_eq!(record(10, 0).lower_bound(0.025), 0.0);
        assert!(RegressionGuard::new(record(10, 0), 0.95, 100).is_none());
    }

    #[test]
    fn a_champion_as_good_as_the_last_is_rarely_rolled_back() {
        // 2000 watches of 300 live episodes at the previous champion's own success
        // rate (its record: 40 episodes): at most 5% may end in a rollback.
        let mut rng = StdRng::seed_from_u64(11);
        let (rate, mut rollbacks) = (0.6, 0);
        for _ in 0..2000 {
            let mut previous = LiveRecord::default();
            for _ in 0..40 {
                previous.observe(rng.random::<f64>() < rate);
            }
            let Some(mut guard) = RegressionGuard::new(previous, 0.95, 300) else {
                continue;
            };
            loop {
                match guard.observe(rng.random::<f64>() < rate) {
                    GuardVerdict::Watching => {}
                    GuardVerdict::Regressed => {
                        rollbacks += 1;
                        break;
                    }
                    GuardVerdict::Cleared => break,
                }
            }
        }
        assert!(rollbacks <= 100, "{rollbacks} of 2000 rolled back");
    }

    #[test]
    fn a_broken_champion_is_rolled_back_within_a_few_episodes() {
        // The previous champion succeeded in 12 of 15; the new one never succeeds.
        let mut guard = RegressionGuard::new(record(15, 12), 0.95, 300).unwrap();
        let episodes = (1..=300)
            .find(|_| guard.observe(false) == GuardVerdict::Regressed)
            .unwrap();
        assert!(
            episodes <= 12,
            "{episodes} episodes to certify the regression"
        );
        // One that is as good clears the watch.
        let mut guard = RegressionGuard::new(record(15, 12), 0.95, 20).unwrap();
        let verdicts: Vec<GuardVerdict> = (0..20).map(|i| guard.observe(i % 5 != 0)).collect();
        assert_eq!(verdicts.last(), Some(&GuardVerdict::Cleared));
        assert!(!verdicts.contains(&GuardVerdict::Regressed));
    }
}
