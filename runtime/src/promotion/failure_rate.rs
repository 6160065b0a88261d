//! An anytime-valid upper bound on a failure rate: among episodes the reference
//! policy solves, how often a faster variant fails (certified acceleration,
//! `imago accelerate`).
//!
//! For a claimed bound `b`, the null is "the variant fails at least a share `b`". For
//! any `q < b`, `prod q^f (1-q)^(n-f) / (b^f (1-b)^(n-f))` over `f` failures in `n`
//! trials is a supermartingale under every rate `>= b` (each factor's expectation,
//! `r q / b + (1-r)(1-q)/(1-b)`, falls with `r` and is 1 at `r = b`); the e-value
//! averages it over a grid of `q` in `(0, b)`. The bound at confidence `c` is the
//! smallest `b` whose e-value reaches `1 / (1 - c)`: by Ville's inequality it is below
//! the true rate, at any time it is looked at, with probability at most `1 - c`.

/// Grid points of the mixture.
const GRID: usize = 24;

/// Failures among trials, and the bounds they certify.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailureCounts {
    /// Trials (episodes the reference solved).
    pub trials: u32,
    /// Of them, the variant failed.
    pub failures: u32,
}

impl FailureCounts {
    /// Adds one trial.
    pub fn observe(&mut self, failed: bool) {
        self.trials += 1;
        self.failures += failed as u32;
    }

    /// The e-value of "the failure rate is below `bound`".
    pub fn evidence_below(&self, bound: f64) -> f64 {
        if bound <= 0.0 {
            return 0.0;
        }
        if bound >= 1.0 {
            return f64::INFINITY;
        }
        let (f, s) = (self.failures as f64, (self.trials - self.failures) as f64);
        let logs: Vec<f64> = (0..GRID)
            .map(|i| {
                let q = bound * (i as f64 + 0.5) / GRID as f64;
                f * (q / bound).ln() + s * ((1.0 - q) / (1.0 - bound)).ln()
            })
            .collect();
        super::log_mean_exp(&logs).exp()
    }

    /// The smallest bound on the failure rate certified at `confidence` (to 0.001;
    /// 1 when nothing below 1 is certified).
    pub fn certified_bound(&self, confidence: f64) -> f64 {
        let threshold = 1.0 / (1.0 - confidence);
        (1..1000)
            .map(|i| i as f64 / 1000.0)
            .find(|&b| self.evidence_below(b) >= threshold)
            .unwrap_or(1.0)
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::*;

    #[test]
    fn the_certified_bound_covers_the_true_rate_at_any_time_it_is_looked_at() {
        // 2000 sequences of 300 trials at a true failure rate of 0.1: the bound, looked
        // at after every trial, ever falls below 0.1 in at most 5% of them.
        let mut rng = StdRng::seed_from_u64(9);
        let mut violated = 0;
        for _ in 0..2000 {
            let mut counts = FailureCounts::default();
            let mut below = false;
            for trial in 0..300 {
                counts.observe(rng.random::<f64>() < 0.1);
                if trial % 10 == 9 && counts.evidence_below(0.1) >= 20.0 {
                    below = true;
                }
            }
            violated += below as u32;
        }
        assert!(violated <= 100, "{violated} of 2000");
        // With no failures in 100 trials the bound is small; with many, near the rate.
        let none = FailureCounts {
            trials: 100,
            failures: 0,
        };
        assert!(
            none.certified_bound(0.95) < 0.06,
            "{}",
            none.certified_bound(0.95)
        );
        let half = FailureCounts {
            trials: 400,
            failures: 200,
        };
        let b = half.certified_bound(0.95);
        assert!((0.5..0.65).contains(&b), "{b}");
    }
}
