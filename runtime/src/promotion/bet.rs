//! The betting e-process for a bounded paired difference.
//!
//! Each paired episode gives `d = challenger score - champion score` in [-1, 1]. Null:
//! `E[d] <= m`. A bettor who stakes a fixed fraction `lambda` in `[0, 1 / (1 + m))` on
//! `d - m` has wealth `prod (1 + lambda (d - m))`, nonnegative and a supermartingale
//! under the null; the e-process averages the wealth of bettors over a grid of
//! fractions (a mixture, so again a supermartingale). The mirror process bets on
//! `-d` (null: `E[d] >= 0`) and certifies a worse challenger.

use super::log_mean_exp;

/// The bettors' fractions, as shares of the largest safe one.
const FRACTIONS: [f64; 6] = [0.02, 0.05, 0.1, 0.2, 0.4, 0.7];

/// Running wealth of the two sets of bettors.
#[derive(Debug, Clone)]
pub struct BoundedMeanBet {
    margin: f64,
    better_logs: Vec<f64>,
    worse_logs: Vec<f64>,
}

impl BoundedMeanBet {
    /// A test of the null "the mean paired difference is at most `margin`".
    pub fn new(margin: f64) -> Self {
        Self {
            margin,
            better_logs: vec![0.0; FRACTIONS.len()],
            worse_logs: vec![0.0; FRACTIONS.len()],
        }
    }

    /// Adds one paired difference, clamped to [-1, 1].
    pub fn observe(&mut self, difference: f64) {
        let d = difference.clamp(-1.0, 1.0);
        let largest_up = 1.0 / (1.0 + self.margin);
        for (log, f) in self.better_logs.iter_mut().zip(FRACTIONS) {
            *log += (1.0 + f * largest_up * (d - self.margin)).ln();
        }
        for (log, f) in self.worse_logs.iter_mut().zip(FRACTIONS) {
            *log += (1.0 - f * d).ln();
        }
    }

    /// Evidence that the mean difference exceeds the margin.
    pub fn better(&self) -> f64 {
        log_mean_exp(&self.better_logs).exp()
    }

    /// Evidence that the mean difference is below 0.
    pub fn worse(&self) -> f64 {
        log_mean_exp(&self.worse_logs).exp()
    }
}
