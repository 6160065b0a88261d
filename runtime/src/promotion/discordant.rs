//! The discordant-pairs e-process for paired success.
//!
//! Only pairs where exactly one policy succeeded carry information about which is
//! better. Let `p` be the chance that such a pair is the challenger's. Null: `p <= p0`.
//! For any `q >= p0`, the likelihood ratio `prod q^w (1-q)^l / (p0^w (1-p0)^l)` over
//! `w` challenger and `l` champion wins is a supermartingale under every `p <= p0`
//! (each factor's expectation, `p q / p0 + (1-p)(1-q)/(1-p0)`, is at most 1 there).
//! The e-process is the average of these ratios over a grid of `q` in `(p0, 1)`, a
//! mixture of supermartingales and so one too. The mirror e-process (null: `p >= 1/2`)
//! averages over `q` in `(0, 1/2)` and certifies a worse challenger.

use super::log_mean_exp;

/// Grid points of the mixtures.
const GRID: usize = 24;

/// Running discordant-pair counts and the two e-processes.
#[derive(Debug, Clone)]
pub struct DiscordantPairs {
    p0: f64,
    better_grid: Vec<f64>,
    worse_grid: Vec<f64>,
    /// Log-likelihood ratio per grid point.
    better_logs: Vec<f64>,
    worse_logs: Vec<f64>,
    /// Discordant pairs the challenger won and lost.
    pub wins: u32,
    /// See [`Self::wins`].
    pub losses: u32,
}

impl DiscordantPairs {
    /// A test of the null "the challenger wins at most a share `p0` of discordant
    /// pairs", `p0` in [1/2, 1).
    pub fn new(p0: f64) -> Self {
        let between = |lo: f64, hi: f64| -> Vec<f64> {
            (0..GRID)
                .map(|i| lo + (hi - lo) * (i as f64 + 0.5) / GRID as f64)
                .collect()
        };
        Self {
            p0,
            better_grid: between(p0, 1.0),
            worse_grid: between(0.0, 0.5),
            better_logs: vec![0.0; GRID],
            worse_logs: vec![0.0; GRID],
            wins: 0,
            losses: 0,
        }
    }

    /// Adds one discordant pair: `challenger_won`, or the champion did.
    pub fn observe(&mut self, challenger_won: bool) {
        let step = |logs: &mut [f64], grid: &[f64], null: f64| {
            for (log, q) in logs.iter_mut().zip(grid) {
                *log += if challenger_won {
                    (q / null).ln()
                } else {
                    ((1.0 - q) / (1.0 - null)).ln()
                };
            }
        };
        step(&mut self.better_logs, &self.better_grid, self.p0);
        step(&mut self.worse_logs, &self.worse_grid, 0.5);
        if challenger_won {
            self.wins += 1;
        } else {
            self.losses += 1;
        }
    }

    /// Evidence that the challenger wins more than a share `p0`.
    pub fn better(&self) -> f64 {
        log_mean_exp(&self.better_logs).exp()
    }

    /// Evidence that the challenger wins less than half.
    pub fn worse(&self) -> f64 {
        log_mean_exp(&self.worse_logs).exp()
    }
}
