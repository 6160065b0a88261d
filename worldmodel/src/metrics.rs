//! Rollout-error statistics: rank correlation, interval coverage and its calibration.
//! Plain host-side functions on slices, so they are checked against hand-computed
//! cases and run the same whatever backend produced the numbers.

/// Probability mass of a Gaussian within one standard deviation of its mean.
pub const ONE_SIGMA_MASS: f64 = 0.682_689_492_137_085_9;
/// Probability mass of a Gaussian within two standard deviations of its mean.
pub const TWO_SIGMA_MASS: f64 = 0.954_499_736_103_641_6;

/// Ranks of `values` from 1, ties sharing their average rank.
pub fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let average = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            ranks[k] = average;
        }
        i = j + 1;
    }
    ranks
}

/// Pearson correlation; `None` when fewer than two pairs or either side is constant.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    assert_eq!(x.len(), y.len(), "pearson needs pairs");
    let n = x.len();
    if n < 2 {
        return None;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
    let (mx, my) = (mean(x), mean(y));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx).powi(2);
        syy += (b - my).powi(2);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// Spearman rank correlation (Pearson correlation of the ranks, ties averaged);
/// `None` when fewer than two pairs or either side is constant.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    pearson(&ranks(x), &ranks(y))
}

/// The standardised error `|error| / std`; a zero `std` gives 0 for a zero error and
/// infinity otherwise.
pub fn standardised_error(error: f64, std: f64) -> f64 {
    let error = error.abs();
    if std > 0.0 {
        error / std
    } else if error == 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

/// Fraction of standardised errors within `width` standard deviations.
pub fn coverage(standardised: &[f64], width: f64) -> f64 {
    if standardised.is_empty() {
        return f64::NAN;
    }
    standardised.iter().filter(|&&r| r <= width).count() as f64 / standardised.len() as f64
}

/// Sorted standardised errors, for fast coverage queries.
#[derive(Debug, Clone)]
struct SortedErrors(Vec<f64>);

impl SortedErrors {
    fn new(values: &[f64]) -> Self {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        Self(v)
    }

    fn count_within(&self, width: f64) -> usize {
        self.0.partition_point(|&r| r <= width)
    }
}

/// Candidate scales: points where one- or two-sigma coverage of `all` changes,
/// thinned to about 800 (every quantile step of 0.25%), which bounds the fitting
/// error in coverage by that step.
fn candidate_scales(all: &SortedErrors) -> Vec<f64> {
    let finite: Vec<f64> = all.0.iter().copied().filter(|r| r.is_finite()).collect();
    if finite.is_empty() {
        return vec![1.0];
    }
    let stride = (finite.len() / 400).max(1);
    let mut candidates: Vec<f64> = finite
        .iter()
        .step_by(stride)
        .flat_map(|&r| [r, r / 2.0])
        .filter(|&s| s > 0.0)
        .collect();
    candidates.sort_by(f64::total_cmp);
    candidates.dedup();
    if candidates.is_empty() {
        candidates.push(1.0);
    }
    candidates
}

/// The scale `s` for which intervals of `s` and `2 s` standard deviations best cover
/// their Gaussian masses, given how many of `total` errors lie within a width. Each
/// level's miscoverage is measured in units of its binomial standard deviation
/// `sqrt(p (1 - p))` (a chi-square fit of the two coverage counts): missing 95.4% by
/// four points is as serious as missing 68.3% by nine. With errors heavier-tailed
/// than a Gaussian no scale hits both; this one splits the miss by that measure.
fn best_scale(candidates: &[f64], total: usize, within: impl Fn(f64) -> usize) -> f64 {
    let miss = |s: f64| {
        let one = within(s) as f64 / total as f64 - ONE_SIGMA_MASS;
        let two = within(2.0 * s) as f64 / total as f64 - TWO_SIGMA_MASS;
        one * one / (ONE_SIGMA_MASS * (1.0 - ONE_SIGMA_MASS))
            + two * two / (TWO_SIGMA_MASS * (1.0 - TWO_SIGMA_MASS))
    };
    candidates
        .iter()
        .copied()
        .min_by(|&a, &b| miss(a).total_cmp(&miss(b)))
        .unwrap_or(1.0)
}

/// The rescaling of standard deviations fitted on `standardised` errors: multiply
/// each standard deviation by it so that one- and two-sigma intervals cover as close
/// to 68.3% and 95.4% as one scale can.
pub fn fit_interval_scale(standardised: &[f64]) -> f64 {
    let sorted = SortedErrors::new(standardised);
    if sorted.0.is_empty() {
        return 1.0;
    }
    best_scale(&candidate_scales(&sorted), sorted.0.len(), |w| {
        sorted.count_within(w)
    })
}

/// Coverage at `widths` (in calibrated standard deviations) of standardised errors
/// grouped by episode, each group rescaled by a scale fitted on all other groups
/// (leave-one-episode-out), pooled over groups. Groups with no errors are skipped;
/// with a single group there is nothing to fit on and the result is NaN.
pub fn leave_one_out_coverage(groups: &[Vec<f64>], widths: &[f64]) -> Vec<f64> {
    let all: Vec<f64> = groups.iter().flatten().copied().collect();
    let populated = groups.iter().filter(|g| !g.is_empty()).count();
    if populated < 2 {
        return vec![f64::NAN; widths.len()];
    }
    let all_sorted = SortedErrors::new(&all);
    let candidates = candidate_scales(&all_sorted);
    let mut covered = vec![0usize; widths.len()];
    for group in groups.iter().filter(|g| !g.is_empty()) {
        let held_out = SortedErrors::new(group);
        let rest = all.len() - group.len();
        let scale = best_scale(&candidates, rest, |w| {
            all_sorted.count_within(w) - held_out.count_within(w)
        });
        for (count, width) in covered.iter_mut().zip(widths) {
            *count += held_out.count_within(width * scale);
        }
    }
    covered
        .into_iter()
        .map(|c| c as f64 / all.len() as f64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_average_ties() {
        assert_eq!(ranks(&[10.0, 30.0, 20.0, 30.0]), vec![1.0, 3.5, 2.0, 3.5]);
    }

    #[test]
    fn spearman_matches_hand_computed_cases() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(spearman(&x, &[2.0, 4.0, 8.0, 16.0, 32.0]), Some(1.0));
        let reversed = spearman(&x, &[5.0, 4.0, 3.0, 2.0, 1.0]).unwrap();
        assert!((reversed + 1.0).abs() < 1e-12);
        // Ranks of y are 2, 1, 4, 3, 5: d^2 sums to 4, rho = 1 - 6*4/(5*24) = 0.8.
        let rho = spearman(&x, &[20.0, 10.0, 40.0, 30.0, 50.0]).unwrap();
        assert!((rho - 0.8).abs() < 1e-12, "{rho}");
        // With ties: x ranks 1.5, 1.5, 3, 4 and y ranks 1, 2, 3, 4, deviations from the
        // mean rank 2.5 are (-1, -1, 0.5, 1.5) and (-1.5, -0.5, 0.5, 1.5): the cross
        // sum is 4.5, the squared sums 4.5 and 5, so rho = 4.5 / sqrt(22.5).
        let tied = spearman(&[1.0, 1.0, 2.0, 3.0], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!((tied - 4.5 / 22.5f64.sqrt()).abs() < 1e-9, "{tied}");
        assert_eq!(spearman(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&[1.0], &[1.0]), None);
    }

    #[test]
    fn coverage_counts_errors_within_the_width() {
        let errors = [
            standardised_error(0.5, 1.0),
            standardised_error(-1.5, 1.0),
            standardised_error(1.0, 2.0),
            standardised_error(3.0, 1.0),
        ];
        assert_eq!(errors, [0.5, 1.5, 0.5, 3.0]);
        assert_eq!(coverage(&errors, 1.0), 0.5);
        assert_eq!(coverage(&errors, 2.0), 0.75);
        assert_eq!(standardised_error(0.0, 0.0), 0.0);
        assert_eq!(standardised_error(1.0, 0.0), f64::INFINITY);
        assert!(coverage(&[], 1.0).is_nan());
    }

    /// Standardised errors of Gaussian draws whose predicted std is `1 / scale` of
    /// the truth: their quantiles, evenly spaced, stand in for a large sample.
    fn overconfident(scale: f64, count: usize) -> Vec<f64> {
        // Quantiles of |N(0, 1)|, whose CDF is erf(x / sqrt 2), by bisection.
        (0..count)
            .map(|i| {
                let p = (i as f64 + 0.5) / count as f64;
                let (mut lo, mut hi) = (0.0, 10.0);
                for _ in 0..60 {
                    let mid = (lo + hi) / 2.0;
                    if erf(mid / 2f64.sqrt()) < p {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                scale * (lo + hi) / 2.0
            })
            .collect()
    }

    /// Abramowitz-Stegun 7.1.26 (error below 1.5e-7).
    fn erf(x: f64) -> f64 {
        let t = 1.0 / (1.0 + 0.327_591_1 * x);
        let poly = t
            * (0.254_829_592
                + t * (-0.284_496_736
                    + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
        1.0 - poly * (-x * x).exp()
    }

    #[test]
    fn fitted_scale_undoes_overconfidence() {
        let errors = overconfident(4.0, 4000);
        assert!(coverage(&errors, 1.0) < 0.25);
        let scale = fit_interval_scale(&errors);
        assert!((scale - 4.0).abs() < 0.05, "{scale}");
    }

    #[test]
    fn leave_one_out_coverage_is_nominal_for_consistently_scaled_groups() {
        let groups: Vec<Vec<f64>> = (0..5).map(|_| overconfident(3.0, 800)).collect();
        let covered = leave_one_out_coverage(&groups, &[1.0, 2.0]);
        assert!((covered[0] - ONE_SIGMA_MASS).abs() < 0.01, "{covered:?}");
        assert!((covered[1] - TWO_SIGMA_MASS).abs() < 0.01, "{covered:?}");
        // An outlying group is judged by the others' scale, not its own (a scale
        // fitted on the group itself would give nominal coverage again).
        let mut skewed = groups.clone();
        skewed[0] = overconfident(30.0, 800);
        let covered = leave_one_out_coverage(&skewed, &[1.0]);
        assert!((covered[0] - ONE_SIGMA_MASS).abs() > 0.05, "{covered:?}");
        assert!(leave_one_out_coverage(&groups[..1], &[1.0])[0].is_nan());
    }
}
