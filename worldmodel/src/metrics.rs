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

/// Tail factors tried by [`fit_intervals`]: 2 (a Gaussian's) to 4 in steps of 0.1.
pub fn tail_factors() -> impl Iterator<Item = f64> {
    (0..=20).map(|i| 2.0 + 0.1 * i as f64)
}

/// Candidate scales: points where the coverage of `all` at the scale or at `tail`
/// times it changes, thinned to about 800 (every quantile step of 0.25%), which bounds
/// the fitting error in coverage by that step.
fn candidate_scales(all: &SortedErrors, tail: f64) -> Vec<f64> {
    let finite: Vec<f64> = all.0.iter().copied().filter(|r| r.is_finite()).collect();
    if finite.is_empty() {
        return vec![1.0];
    }
    let stride = (finite.len() / 400).max(1);
    let mut candidates: Vec<f64> = finite
        .iter()
        .step_by(stride)
        .flat_map(|&r| [r, r / tail])
        .filter(|&s| s > 0.0)
        .collect();
    candidates.sort_by(f64::total_cmp);
    candidates.dedup();
    if candidates.is_empty() {
        candidates.push(1.0);
    }
    candidates
}

/// The scale `s` for which intervals of `s` and `tail * s` standard deviations best
/// cover the Gaussian masses within one and two standard deviations (68.3% and
/// 95.4%), given how many of `total` errors lie within a width, and its miss. Each
/// level's miscoverage is measured in units of its binomial standard deviation
/// `sqrt(p (1 - p))` (a chi-square fit of the two coverage counts): missing 95.4% by
/// four points is as serious as missing 68.3% by nine.
fn best_scale(
    candidates: &[f64],
    total: usize,
    tail: f64,
    within: impl Fn(f64) -> usize,
) -> (f64, f64) {
    let miss = |s: f64| {
        let one = within(s) as f64 / total as f64 - ONE_SIGMA_MASS;
        let two = within(tail * s) as f64 / total as f64 - TWO_SIGMA_MASS;
        one * one / (ONE_SIGMA_MASS * (1.0 - ONE_SIGMA_MASS))
            + two * two / (TWO_SIGMA_MASS * (1.0 - TWO_SIGMA_MASS))
    };
    candidates
        .iter()
        .map(|&s| (s, miss(s)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((1.0, f64::INFINITY))
}

/// Interval widths fitted to standardised errors, in their units: the interval meant
/// to hold 68.3% (a Gaussian's one standard deviation) is `scale` wide on each side,
/// the one meant to hold 95.4% (two) is `tail_factor * scale`. A Gaussian's tail
/// factor is 2. Errors with heavier tails (pusht's block is either still or pushed)
/// need more: with 2, one scale over-covers the first mass to cover the second.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalFit {
    /// The tail factor, shared by every dimension.
    pub tail_factor: f64,
    /// Each dimension's scale.
    pub scales: Vec<f64>,
}

/// How the tail factor of intervals is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TailFactor {
    /// 2: Gaussian intervals, one scale per dimension.
    Gaussian,
    /// The one of [`tail_factors`] that misses both masses least, summed over the
    /// dimensions (each at its best scale).
    Fitted,
}

/// [`fit_intervals`] on each dimension's sorted errors.
fn fit_on(dims: &[SortedErrors], tail: TailFactor) -> IntervalFit {
    let at = |factor: f64| -> (Vec<f64>, f64) {
        let fits: Vec<(f64, f64)> = dims
            .iter()
            .map(|sorted| {
                if sorted.0.is_empty() {
                    return (1.0, 0.0);
                }
                best_scale(
                    &candidate_scales(sorted, factor),
                    sorted.0.len(),
                    factor,
                    |w| sorted.count_within(w),
                )
            })
            .collect();
        let miss = fits.iter().map(|f| f.1).sum();
        (fits.into_iter().map(|f| f.0).collect(), miss)
    };
    let (tail_factor, (scales, _)) = match tail {
        TailFactor::Gaussian => (2.0, at(2.0)),
        TailFactor::Fitted => tail_factors()
            .map(|factor| (factor, at(factor)))
            .min_by(|a, b| (a.1).1.total_cmp(&(b.1).1))
            .expect("tail factors to try"),
    };
    IntervalFit {
        tail_factor,
        scales,
    }
}

/// The intervals fitted on `dims` (each dimension's standardised errors): a scale
/// per dimension and the tail factor `tail` says, so that each dimension's intervals
/// cover 68.3% and 95.4% of its errors as closely as they can. A dimension with no
/// errors gets scale 1.
pub fn fit_intervals(dims: &[Vec<f64>], tail: TailFactor) -> IntervalFit {
    let sorted: Vec<SortedErrors> = dims.iter().map(|d| SortedErrors::new(d)).collect();
    fit_on(&sorted, tail)
}

/// Folds the tail factor is cross-fitted over in [`leave_one_out_coverage`].
const TAIL_FOLDS: usize = 5;

/// Held-out coverage of the intervals [`fit_intervals`] fits, for standardised errors
/// grouped by dimension and episode (`dims[j][g]`, every dimension with the same
/// episodes), pooled over dimensions and episodes: `[68.3% interval, 95.4% interval]`.
/// Each episode's errors are judged by scales fitted on all other episodes
/// (leave-one-episode-out); a fitted tail factor, one number shared by all
/// dimensions, is cross-fitted: the episodes fall in up to five folds by position, and
/// each fold's episodes are judged with the factor fitted on the other folds. Groups
/// with no errors are skipped; with fewer than two episodes there is nothing to fit on
/// and the result is NaN.
pub fn leave_one_out_coverage(dims: &[Vec<Vec<f64>>], tail: TailFactor) -> [f64; 2] {
    let episodes = dims.first().map_or(0, Vec::len);
    let populated: Vec<usize> = (0..episodes)
        .filter(|&g| dims.iter().any(|d| !d[g].is_empty()))
        .collect();
    if populated.len() < 2 {
        return [f64::NAN; 2];
    }
    // The populated episodes by fold: the k-th of them falls in fold `k % folds`.
    let folds = populated.len().min(TAIL_FOLDS);
    let all: Vec<SortedErrors> = dims
        .iter()
        .map(|d| SortedErrors::new(&d.concat()))
        .collect();
    let fold_factor: Vec<f64> = (0..folds)
        .map(|fold| match tail {
            TailFactor::Gaussian => 2.0,
            TailFactor::Fitted => {
                let rest: Vec<SortedErrors> = dims
                    .iter()
                    .map(|d| {
                        let kept: Vec<f64> = populated
                            .iter()
                            .enumerate()
                            .filter(|&(k, _)| k % folds != fold)
                            .flat_map(|(_, &g)| d[g].iter().copied())
                            .collect();
                        SortedErrors::new(&kept)
                    })
                    .collect();
                fit_on(&rest, TailFactor::Fitted).tail_factor
            }
        })
        .collect();
    let (mut covered, mut total) = ([0usize; 2], 0usize);
    for (d, all) in dims.iter().zip(&all) {
        let candidates: Vec<Vec<f64>> = fold_factor
            .iter()
            .map(|&factor| candidate_scales(all, factor))
            .collect();
        for (k, &g) in populated.iter().enumerate() {
            let held_out = SortedErrors::new(&d[g]);
            let fold = k % folds;
            let factor = fold_factor[fold];
            let rest = all.0.len() - held_out.0.len();
            if rest == 0 || held_out.0.is_empty() {
                continue;
            }
            let (scale, _) = best_scale(&candidates[fold], rest, factor, |w| {
                all.count_within(w) - held_out.count_within(w)
            });
            covered[0] += held_out.count_within(scale);
            covered[1] += held_out.count_within(factor * scale);
            total += held_out.0.len();
        }
    }
    covered.map(|c| c as f64 / total.max(1) as f64)
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
        for tail in [TailFactor::Gaussian, TailFactor::Fitted] {
            let fit = fit_intervals(std::slice::from_ref(&errors), tail);
            assert!((fit.scales[0] - 4.0).abs() < 0.05, "{fit:?}");
            // Gaussian errors need no heavier tail.
            assert!(fit.tail_factor <= 2.1, "{fit:?}");
        }
    }

    /// Standardised errors of a scale mixture the predicted std does not see: 75%
    /// from a Gaussian of std 1 and 25% from one of std 3 (a block still, or pushed).
    fn heavy_tailed(count: usize) -> Vec<f64> {
        let still = overconfident(1.0, count * 3 / 4);
        still
            .into_iter()
            .chain(overconfident(3.0, count / 4))
            .collect()
    }

    #[test]
    fn a_fitted_tail_factor_covers_both_masses_of_heavy_tailed_errors() {
        let dims: Vec<Vec<Vec<f64>>> = (0..3)
            .map(|_| (0..6).map(|_| heavy_tailed(800)).collect())
            .collect();
        // One Gaussian scale cannot hold both masses: it over-covers 68.3% to come
        // close to 95.4%.
        let gaussian = leave_one_out_coverage(&dims, TailFactor::Gaussian);
        assert!(gaussian[0] - ONE_SIGMA_MASS > 0.05, "{gaussian:?}");
        let fitted = leave_one_out_coverage(&dims, TailFactor::Fitted);
        assert!((fitted[0] - ONE_SIGMA_MASS).abs() < 0.01, "{fitted:?}");
        assert!((fitted[1] - TWO_SIGMA_MASS).abs() < 0.01, "{fitted:?}");
        let pooled: Vec<Vec<f64>> = dims.iter().map(|d| d.concat()).collect();
        let fit = fit_intervals(&pooled, TailFactor::Fitted);
        // The mixture's 95.4% quantile is 3.1 times its 68.3% one (from the two
        // Gaussians' CDFs, weighed 3:1); a Gaussian's is 2.
        assert!((fit.tail_factor - 3.1).abs() < 0.25, "{fit:?}");
        assert_eq!(
            fit_intervals(&pooled, TailFactor::Gaussian).tail_factor,
            2.0
        );
    }

    #[test]
    fn leave_one_out_coverage_is_nominal_for_consistently_scaled_groups() {
        let groups: Vec<Vec<f64>> = (0..5).map(|_| overconfident(3.0, 800)).collect();
        for tail in [TailFactor::Gaussian, TailFactor::Fitted] {
            let covered = leave_one_out_coverage(std::slice::from_ref(&groups), tail);
            assert!((covered[0] - ONE_SIGMA_MASS).abs() < 0.01, "{covered:?}");
            assert!((covered[1] - TWO_SIGMA_MASS).abs() < 0.01, "{covered:?}");
        }
        // An outlying group is judged by the others' scale, not its own (a scale
        // fitted on the group itself would give nominal coverage again).
        let mut skewed = groups.clone();
        skewed[0] = overconfident(30.0, 800);
        let covered = leave_one_out_coverage(&[skewed], TailFactor::Gaussian);
        assert!((covered[0] - ONE_SIGMA_MASS).abs() > 0.05, "{covered:?}");
        let single = leave_one_out_coverage(&[groups[..1].to_vec()], TailFactor::Fitted);
        assert!(single[0].is_nan());
    }
}
