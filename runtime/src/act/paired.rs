//! Paired comparison of two controllers evaluated on the same seeds: who solved what,
//! and a confidence interval for the difference of their success rates.

use serde::{Deserialize, Serialize};

use crate::act::evaluate::EvalOutcome;
use crate::stats::{MeanInterval, mean_interval};

/// The candidate's mean max coverage minus the baseline's over the same seeds, with the
/// 95% interval of the mean paired difference; `None` where the robot's task is not
/// scored by coverage or the episodes differ.
pub fn coverage_difference(
    baseline: &EvalOutcome,
    candidate: &EvalOutcome,
) -> Option<MeanInterval> {
    if baseline.max_coverage.is_empty()
        || baseline.max_coverage.len() != candidate.max_coverage.len()
    {
        return None;
    }
    let differences: Vec<f64> = baseline
        .max_coverage
        .iter()
        .zip(&candidate.max_coverage)
        .map(|(b, c)| c - b)
        .collect();
    Some(mean_interval(&differences))
}

/// Episode counts of a paired evaluation of a baseline and a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairedCounts {
    /// Both succeeded.
    pub both: usize,
    /// Only the baseline succeeded.
    pub only_baseline: usize,
    /// Only the candidate succeeded.
    pub only_candidate: usize,
    /// Neither succeeded.
    pub neither: usize,
}

impl PairedCounts {
    /// Counts the four outcomes of `baseline` and `candidate`, which must come from the
    /// same seeds in the same order.
    pub fn count(baseline: &EvalOutcome, candidate: &EvalOutcome) -> anyhow::Result<Self> {
        anyhow::ensure!(
            baseline.episodes() == candidate.episodes(),
            "paired evaluations need the same episodes: {} vs {}",
            baseline.episodes(),
            candidate.episodes()
        );
        let mut counts = Self {
            both: 0,
            only_baseline: 0,
            only_candidate: 0,
            neither: 0,
        };
        for (&b, &c) in baseline.success.iter().zip(&candidate.success) {
            match (b, c) {
                (true, true) => counts.both += 1,
                (true, false) => counts.only_baseline += 1,
                (false, true) => counts.only_candidate += 1,
                (false, false) => counts.neither += 1,
            }
        }
        Ok(counts)
    }

    /// Number of paired episodes.
    pub fn episodes(&self) -> usize {
        self.both + self.only_baseline + self.only_candidate + self.neither
    }

    /// Candidate's success rate minus the baseline's.
    pub fn difference(&self) -> f64 {
        (self.only_candidate as f64 - self.only_baseline as f64) / self.episodes().max(1) as f64
    }

    /// 95% interval of [`Self::difference`]: Agresti and Min's adjusted Wald interval
    /// for paired proportions (half an episode added to each of the four cells), which
    /// keeps its coverage where the plain Wald interval fails (few discordant pairs).
    pub fn difference_interval(&self) -> (f64, f64) {
        let z = 1.959_963_984_540_054_f64;
        let n = self.episodes() as f64 + 2.0;
        let b = self.only_candidate as f64 + 0.5;
        let c = self.only_baseline as f64 + 0.5;
        let d = (b - c) / n;
        let variance = ((b + c) - (b - c).powi(2) / n) / (n * n);
        let half = z * variance.max(0.0).sqrt();
        ((d - half).max(-1.0), (d + half).min(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(success: &[bool]) -> EvalOutcome {
        EvalOutcome {
            success: success.to_vec(),
            length: vec![10; success.len()],
            max_coverage: Vec::new(),
        }
    }

    #[test]
    fn coverage_differences_are_paired() {
        let with = |coverage: &[f64]| EvalOutcome {
            max_coverage: coverage.to_vec(),
            ..outcome(&vec![false; coverage.len()])
        };
        // The candidate gains 0.1 on every seed: the paired interval is that point,
        // although the two sets of coverages overlap widely.
        let baseline = with(&[0.1, 0.5, 0.9, 0.3]);
        let candidate = with(&[0.2, 0.6, 1.0, 0.4]);
        let d = coverage_difference(&baseline, &candidate).expect("scored by coverage");
        assert!((d.mean - 0.1).abs() < 1e-12 && (d.interval[0] - 0.1).abs() < 1e-9);
        assert!(coverage_difference(&outcome(&[true]), &outcome(&[true])).is_none());
    }

    #[test]
    fn counts_and_interval_by_hand() {
        let baseline = outcome(&[true, true, false, false, true]);
        let candidate = outcome(&[true, false, true, true, true]);
        let counts = PairedCounts::count(&baseline, &candidate).unwrap();
        assert_eq!(
            counts,
            PairedCounts {
                both: 2,
                only_baseline: 1,
                only_candidate: 2,
                neither: 0
            }
        );
        assert!((counts.difference() - 0.2).abs() < 1e-12);
        // n' = 7, b' = 2.5, c' = 1.5: d = 1/7, var = (4 - 1/7) / 49.
        let (lo, hi) = counts.difference_interval();
        let half = 1.959_963_984_540_054 * ((4.0 - 1.0 / 7.0) / 49.0f64).sqrt();
        assert!((lo - (1.0 / 7.0 - half)).abs() < 1e-12, "{lo}");
        assert!((hi - (1.0 / 7.0 + half)).abs() < 1e-12, "{hi}");
        assert!(PairedCounts::count(&baseline, &outcome(&[true])).is_err());
    }

    #[test]
    fn a_large_consistent_gain_excludes_zero() {
        // 200 pairs, the candidate alone solves 60, the baseline alone 5.
        let counts = PairedCounts {
            both: 80,
            only_baseline: 5,
            only_candidate: 60,
            neither: 55,
        };
        let (lo, hi) = counts.difference_interval();
        assert!(lo > 0.2 && hi < 0.35, "{lo} {hi}");
        let tie = PairedCounts {
            both: 80,
            only_baseline: 10,
            only_candidate: 10,
            neither: 100,
        };
        let (lo, hi) = tie.difference_interval();
        assert!(lo < 0.0 && hi > 0.0);
    }
}
