//! Advantages and the weights advantage-weighted updates give transitions: the
//! normalisers of a group of advantages, the AWR weight `exp(A / beta)` with its clip,
//! lambda-returns and generalised advantage estimates over recorded steps.
//!
//! Host-side `f32` code: these run once per transition per round, not per gradient step.

use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

pub use imago_kernels::reference::lambda_returns;

/// How a group of raw advantages is put on a common scale before weighting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum AdvantageNormaliser {
    /// `(A - mean) / std` over the group (GRPO's group normalisation); the default.
    #[default]
    MeanStd,
    /// `(A - median) / std` over the group: the median of `G + 1` samples is a baseline
    /// that one outlier cannot drag (MC-GRPO), so small groups stay nearly as good as
    /// large ones; with an odd group the median sample gets exactly zero.
    MedianBaseline,
    /// `A / k` with a constant `k`, no group statistics: every step of every trajectory
    /// keeps the same scale, instead of the per-trajectory `1 / |tau|` that
    /// under-weights long failed trajectories (AsyncWebRL).
    Constant {
        /// The constant scale, e.g. the episode step limit for return advantages.
        k: f32,
    },
}

/// Standard deviations below this are treated as this, so a group of equal
/// advantages normalises to zeros instead of dividing by zero.
pub const MIN_GROUP_STD: f32 = 1e-6;

impl AdvantageNormaliser {
    /// Normalises one group of advantages in place. An empty group is left alone.
    pub fn normalise(&self, group: &mut [f32]) {
        if group.is_empty() {
            return;
        }
        match *self {
            Self::MeanStd => {
                let mean = mean(group);
                let std = std_about(group, mean).max(MIN_GROUP_STD);
                group.iter_mut().for_each(|a| *a = (*a - mean) / std);
            }
            Self::MedianBaseline => {
                let median = median(group);
                let std = std_about(group, mean(group)).max(MIN_GROUP_STD);
                group.iter_mut().for_each(|a| *a = (*a - median) / std);
            }
            Self::Constant { k } => group.iter_mut().for_each(|a| *a /= k),
        }
    }

    /// Checks the constant normaliser's `k`. Range: [1e-6, 1e9].
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            Self::Constant { k } => in_range("k", k, 1e-6..=1e9),
            _ => Ok(()),
        }
    }
}

fn mean(values: &[f32]) -> f32 {
    values.iter().sum::<f32>() / values.len() as f32
}

/// Population standard deviation of `values` about `centre`.
fn std_about(values: &[f32], centre: f32) -> f32 {
    (values.iter().map(|v| (v - centre).powi(2)).sum::<f32>() / values.len() as f32).sqrt()
}

/// Median; the mean of the two middle values for an even count.
fn median(values: &[f32]) -> f32 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f32::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
    }
}

/// The AWR weight of each (normalised) advantage: `min(exp(A / beta), max_weight)`.
/// Clipping bounds how much one lucky transition can dominate a batch.
pub fn awr_weights(advantages: &[f32], beta: f32, max_weight: f32) -> Vec<f32> {
    advantages
        .iter()
        .map(|a| (a / beta).exp().min(max_weight))
        .collect()
}

/// Generalised advantage estimates of one trajectory: the lambda-returns minus the
/// values they start from (`A_t = G_t - V_t`).
pub fn generalised_advantages(
    rewards: &[f32],
    continues: &[f32],
    values: &[f32],
    gamma: f32,
    lambda: f32,
) -> Vec<f32> {
    lambda_returns(rewards, continues, values, gamma, lambda)
        .into_iter()
        .zip(values)
        .map(|(g, v)| g - v)
        .collect()
}

/// Discounted returns-to-go of one trajectory: `G_t = r_t + gamma G_{t+1}`, `G_H = 0`.
pub fn discounted_returns(rewards: &[f32], gamma: f32) -> Vec<f32> {
    let mut returns = vec![0.0; rewards.len()];
    let mut next = 0.0;
    for (t, r) in rewards.iter().enumerate().rev() {
        next = r + gamma * next;
        returns[t] = next;
    }
    returns
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn generalised_advantages_are_returns_minus_values() {
        let (r, c, v) = ([1.0, 2.0], [1.0, 1.0], [0.5, 1.0, 4.0]);
        // lambda = 0.5: G = [2.25, 4] (imago_kernels::reference's test), minus V.
        close(&generalised_advantages(&r, &c, &v, 0.5, 0.5), &[1.75, 3.0]);
    }

    #[test]
    fn mean_std_normaliser_by_hand() {
        // mean 2.5, population std sqrt(1.25) = 1.118034
        let mut group = [1.0, 2.0, 3.0, 4.0];
        AdvantageNormaliser::MeanStd.normalise(&mut group);
        close(&group, &[-1.341641, -0.447214, 0.447214, 1.341641]);
    }

    #[test]
    fn median_baseline_by_hand() {
        // G + 1 = 5 samples, one outlier: median 2, mean 4, population std
        // sqrt((9 + 4 + 1 + 16 + 100) / 5) = sqrt(26).
        let mut group = [1.0, 2.0, 3.0, 0.0, 14.0];
        AdvantageNormaliser::MedianBaseline.normalise(&mut group);
        let s = 26f32.sqrt();
        close(&group, &[-1.0 / s, 0.0, 1.0 / s, -2.0 / s, 12.0 / s]);
        // The median sample gets exactly zero; the mean baseline would give it -2/s.
        assert_eq!(group[1], 0.0);
        let mut even = [4.0, 1.0, 3.0, 2.0];
        AdvantageNormaliser::MedianBaseline.normalise(&mut even);
        let s = 1.25f32.sqrt();
        close(&even, &[1.5 / s, -1.5 / s, 0.5 / s, -0.5 / s]);
    }

    #[test]
    fn constant_normaliser_divides_every_step_alike() {
        let mut group = [60.0, -30.0, 0.0];
        AdvantageNormaliser::Constant { k: 60.0 }.normalise(&mut group);
        close(&group, &[1.0, -0.5, 0.0]);
        let error = AdvantageNormaliser::Constant { k: 0.0 }
            .validate()
            .unwrap_err();
        assert_eq!(error.key, "k");
    }

    #[test]
    fn equal_advantages_normalise_to_zero_not_nan() {
        let mut group = [0.7; 3];
        AdvantageNormaliser::MeanStd.normalise(&mut group);
        close(&group, &[0.0; 3]);
        let mut single = [5.0];
        AdvantageNormaliser::MedianBaseline.normalise(&mut single);
        close(&single, &[0.0]);
    }

    #[test]
    fn awr_weights_by_hand_and_clipped() {
        let w = awr_weights(&[0.0, 1.0, -2.0, 10.0], 2.0, 20.0);
        close(&w, &[1.0, 0.5f32.exp(), (-1.0f32).exp(), 20.0]);
    }

    #[test]
    fn discounted_returns_by_hand() {
        close(&discounted_returns(&[1.0, 0.0, 2.0], 0.5), &[1.5, 1.0, 2.0]);
    }
}
