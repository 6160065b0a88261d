//! Does the ensemble's disagreement rank its errors? Spearman correlations over
//! windows, shared by the latent evaluation and the read-out one.

use imago_worldmodel::metrics::spearman;
use serde::{Deserialize, Serialize};

/// Rank correlation between ensemble disagreement and realised error, over windows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpearmanReport {
    /// Mean over horizons of `per_horizon`: across the data set, at a fixed horizon,
    /// do the windows the ensemble disagrees on most have the largest errors?
    pub across_dataset: Option<f64>,
    /// Across the data set, at each horizon `1..H`.
    pub per_horizon: Vec<Option<f64>>,
    /// At horizon `H`, within each episode across its start steps, averaged over
    /// episodes with at least five windows.
    pub within_trajectory: Option<f64>,
    /// Over all windows and horizons together; inflated by both quantities growing
    /// with the horizon, reported for comparison with published figures.
    pub pooled: Option<f64>,
}

/// One window's entry at one horizon: its episode's index, the ensemble's
/// disagreement, and the error of the ensemble's mean.
pub(super) type RankedWindow = (usize, f64, f64);

/// Fewest windows an episode needs for its own correlation.
const MIN_WINDOWS_WITHIN: usize = 5;

impl SpearmanReport {
    /// The correlations of `ranked` (per horizon `1..H`, every window's entry) over
    /// `episodes` episodes.
    pub(super) fn of(ranked: &[Vec<RankedWindow>], episodes: usize) -> Self {
        let per_horizon: Vec<Option<f64>> = ranked
            .iter()
            .map(|r| {
                let (x, y): (Vec<f64>, Vec<f64>) = r.iter().map(|&(_, s, e)| (s, e)).unzip();
                spearman(&x, &y)
            })
            .collect();
        let defined: Vec<f64> = per_horizon.iter().flatten().copied().collect();
        let across_dataset =
            (!defined.is_empty()).then(|| defined.iter().sum::<f64>() / defined.len() as f64);
        let (px, py): (Vec<f64>, Vec<f64>) =
            ranked.iter().flatten().map(|&(_, s, e)| (s, e)).unzip();
        let last = ranked.last().map(Vec::as_slice).unwrap_or_default();
        let within: Vec<f64> = (0..episodes)
            .filter_map(|episode| {
                let (x, y): (Vec<f64>, Vec<f64>) = last
                    .iter()
                    .filter(|r| r.0 == episode)
                    .map(|&(_, s, e)| (s, e))
                    .unzip();
                if x.len() >= MIN_WINDOWS_WITHIN {
                    spearman(&x, &y)
                } else {
                    None
                }
            })
            .collect();
        Self {
            across_dataset,
            per_horizon,
            within_trajectory: (!within.is_empty())
                .then(|| within.iter().sum::<f64>() / within.len() as f64),
            pooled: spearman(&px, &py),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_trajectory_ranks_each_episode_on_its_own() {
        // Two episodes whose errors follow the disagreement inside each, but whose
        // levels run the other way between them: within +1, across the data set less.
        let mut last = Vec::new();
        for k in 0..6 {
            last.push((0, k as f64, 10.0 + k as f64));
            last.push((1, 10.0 + k as f64, k as f64));
        }
        let report = SpearmanReport::of(&[last.clone(), last], 2);
        assert_eq!(report.within_trajectory, Some(1.0));
        let across = report.across_dataset.unwrap();
        assert!(across < 0.5, "across the data set {across}");
        assert_eq!(report.per_horizon.len(), 2);
    }

    #[test]
    fn episodes_with_too_few_windows_are_left_out() {
        let short: Vec<RankedWindow> = (0..4).map(|k| (0, k as f64, k as f64)).collect();
        let report = SpearmanReport::of(&[short], 1);
        assert_eq!(report.within_trajectory, None);
        assert_eq!(report.across_dataset, Some(1.0));
    }
}
