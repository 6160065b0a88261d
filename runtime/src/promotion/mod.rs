//! Champion-challenger promotion tests (docs/promotion.md): sequential, anytime-valid
//! tests that decide from paired episodes whether a challenger policy is better than
//! the champion, stopping as soon as the evidence suffices without inflating the
//! error rate.
//!
//! Both tests are e-processes: nonnegative processes whose expectation stays at most 1
//! at every stopping time while the challenger is no better (the null). By Ville's
//! inequality the chance that one ever reaches `1 / (1 - confidence)` under the null
//! is at most `1 - confidence`, however often it is looked at, so promoting when it
//! does bounds the false-promotion rate by `1 - confidence`.
//!
//! - [`DiscordantPairs`] (metric `success`): among paired episodes where exactly one
//!   policy succeeded, the challenger's share of them. Null: share at most
//!   `1/2 + min_improvement`.
//! - [`BoundedMeanBet`] (metric `steps_to_success`, scores in [0, 1]): the paired
//!   score difference's mean. Null: mean at most `min_improvement`.
//!
//! Each also runs the mirror test (the challenger is at least as good) to reject a
//! certifiably worse challenger early; otherwise the test rejects when its episode
//! budget is spent. [`FailureCounts`] bounds a failure rate the same way (certified
//! acceleration), and [`RegressionGuard`] watches a promoted champion's live episodes
//! for a certified regression (rollback).

mod bet;
mod discordant;
mod failure_rate;
mod guard;
mod live_pairs;

pub use bet::BoundedMeanBet;
pub use discordant::DiscordantPairs;
pub use failure_rate::FailureCounts;
pub use guard::{GuardVerdict, LiveRecord, RegressionGuard};
pub use live_pairs::{LiveOutcome, LivePairing};

use serde::{Deserialize, Serialize};

use imago_robots::bounds::{ConfigError, in_range};

/// What a promotion test measures per paired episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromotionMetric {
    /// Whether the episode succeeded (paired: discordant pairs).
    Success,
    /// `1 - steps / max_steps` for a success, 0 for a failure: faster successes score
    /// higher (paired: score differences).
    StepsToSuccess,
}

impl std::str::FromStr for PromotionMetric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "success" => Ok(Self::Success),
            "steps_to_success" => Ok(Self::StepsToSuccess),
            "return" => Err(
                "metric `return` is not built yet: returns are unbounded without a robot-specific range, which the anytime-valid test needs; use success or steps_to_success".into(),
            ),
            other => Err(format!(
                "`{other}` is not a promotion metric (success, steps_to_success)"
            )),
        }
    }
}

/// Settings of a promotion test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PromotionTestConfig {
    /// One minus the largest false-promotion rate allowed. Range: [0.5, 0.9999].
    pub confidence: f64,
    /// Paired episodes after which an undecided test rejects. Range: [1, 100000].
    pub max_episodes: u32,
    /// What is compared.
    pub metric: PromotionMetric,
    /// How much better the challenger must be: for `success`, the challenger's share
    /// of discordant pairs must exceed `1/2 + min_improvement`; for
    /// `steps_to_success`, the mean score difference must exceed it. Range: [0, 0.45].
    pub min_improvement: f64,
}

impl Default for PromotionTestConfig {
    fn default() -> Self {
        Self {
            confidence: 0.95,
            max_episodes: 400,
            metric: PromotionMetric::Success,
            min_improvement: 0.0,
        }
    }
}

impl PromotionTestConfig {
    /// Checks every field against its documented range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("confidence", self.confidence, 0.5..=0.9999)?;
        in_range("max_episodes", self.max_episodes, 1..=100_000)?;
        in_range("min_improvement", self.min_improvement, 0.0..=0.45)?;
        Ok(())
    }

    /// The threshold an e-process must reach: `1 / (1 - confidence)`.
    pub fn threshold(&self) -> f64 {
        1.0 / (1.0 - self.confidence)
    }

    /// A fresh test of this config.
    pub fn start(&self) -> PromotionTest {
        let kind = match self.metric {
            PromotionMetric::Success => {
                TestKind::Discordant(DiscordantPairs::new(0.5 + self.min_improvement))
            }
            PromotionMetric::StepsToSuccess => {
                TestKind::Bet(BoundedMeanBet::new(self.min_improvement))
            }
        };
        PromotionTest {
            config: *self,
            kind,
            episodes: 0,
            verdict: Verdict::Undecided,
        }
    }
}

/// Where a promotion test stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// More episodes are needed.
    Undecided,
    /// The challenger is certified better: promote it.
    Promote,
    /// The challenger is certified worse: keep the champion.
    RejectWorse,
    /// The budget is spent without certifying the challenger better: keep the champion.
    RejectUnproven,
}

impl Verdict {
    /// Whether the test has ended.
    pub fn is_final(self) -> bool {
        self != Self::Undecided
    }
}

#[derive(Debug, Clone)]
enum TestKind {
    Discordant(DiscordantPairs),
    Bet(BoundedMeanBet),
}

/// One champion-challenger test, fed paired episodes in order.
#[derive(Debug, Clone)]
pub struct PromotionTest {
    config: PromotionTestConfig,
    kind: TestKind,
    episodes: u32,
    verdict: Verdict,
}

/// One paired episode: the champion's and the challenger's outcome on the same seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairedOutcome {
    /// The champion succeeded.
    pub champion_success: bool,
    /// The challenger succeeded.
    pub challenger_success: bool,
    /// The champion's score in [0, 1] (metric `steps_to_success`).
    pub champion_score: f64,
    /// The challenger's score in [0, 1].
    pub challenger_score: f64,
}

impl PromotionTest {
    /// Adds one paired episode (ignored once the test has ended) and returns the
    /// verdict.
    pub fn observe(&mut self, pair: PairedOutcome) -> Verdict {
        if self.verdict.is_final() {
            return self.verdict;
        }
        self.episodes += 1;
        match &mut self.kind {
            TestKind::Discordant(test) => match (pair.champion_success, pair.challenger_success) {
                (false, true) => test.observe(true),
                (true, false) => test.observe(false),
                _ => {}
            },
            TestKind::Bet(test) => test.observe(pair.challenger_score - pair.champion_score),
        }
        let (better, worse) = self.evidence();
        let threshold = self.config.threshold();
        self.verdict = if better >= threshold {
            Verdict::Promote
        } else if worse >= threshold {
            Verdict::RejectWorse
        } else if self.episodes >= self.config.max_episodes {
            Verdict::RejectUnproven
        } else {
            Verdict::Undecided
        };
        self.verdict
    }

    /// The e-values so far: evidence that the challenger is better, and that it is
    /// worse.
    pub fn evidence(&self) -> (f64, f64) {
        match &self.kind {
            TestKind::Discordant(test) => (test.better(), test.worse()),
            TestKind::Bet(test) => (test.better(), test.worse()),
        }
    }

    /// Paired episodes observed.
    pub fn episodes(&self) -> u32 {
        self.episodes
    }

    /// The verdict so far.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// The test's settings.
    pub fn config(&self) -> &PromotionTestConfig {
        &self.config
    }
}

/// Log of the mean of `exp(logs)`, computed without overflow.
fn log_mean_exp(logs: &[f64]) -> f64 {
    let max = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    max + (logs.iter().map(|l| (l - max).exp()).sum::<f64>() / logs.len() as f64).ln()
}

#[cfg(test)]
mod tests;
