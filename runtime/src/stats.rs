//! Small statistics used in reports.

/// The Wilson score interval for `successes` out of `trials` at 95% confidence.
pub fn wilson_interval(successes: usize, trials: usize) -> (f64, f64) {
    if trials == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let n = trials as f64;
    let p = successes as f64 / n;
    let denominator = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denominator;
    let half = z * ((p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt()) / denominator;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// A mean with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MeanInterval {
    /// The mean.
    pub mean: f64,
    /// 95% interval of the mean, `[low, high]`.
    pub interval: [f64; 2],
}

/// The mean of `values` and its 95% interval (normal approximation, `1.96` standard
/// errors; the interval is the mean itself for fewer than two values).
pub fn mean_interval(values: &[f64]) -> MeanInterval {
    let n = values.len();
    if n == 0 {
        return MeanInterval {
            mean: f64::NAN,
            interval: [f64::NAN; 2],
        };
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let half = if n > 1 {
        let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        1.959_963_984_540_054 * (variance / n as f64).sqrt()
    } else {
        0.0
    };
    MeanInterval {
        mean,
        interval: [mean - half, mean + half],
    }
}

/// The `q`-quantile (0..=1) of `values` by linear interpolation; `NaN` if empty.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let position = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let low = position.floor() as usize;
    let high = position.ceil() as usize;
    sorted[low] + (sorted[high] - sorted[low]) * (position - low as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_interval_matches_hand_computed_values() {
        // Mean 2.5, sample sd 1.2910, standard error 0.6455, half width 1.2652.
        let m = mean_interval(&[1.0, 2.0, 3.0, 4.0]);
        assert!((m.mean - 2.5).abs() < 1e-12);
        assert!((m.interval[0] - 1.2348).abs() < 1e-3 && (m.interval[1] - 3.7652).abs() < 1e-3);
        assert_eq!(mean_interval(&[0.7]).interval, [0.7, 0.7]);
    }

    #[test]
    fn wilson_matches_hand_computed_values() {
        // 8 of 10: centre 0.7133, half-width 0.2232 (hand computed).
        let (lo, hi) = wilson_interval(8, 10);
        assert!(
            (lo - 0.4902).abs() < 1e-3 && (hi - 0.9433).abs() < 1e-3,
            "{lo} {hi}"
        );
        assert_eq!(wilson_interval(0, 0), (0.0, 1.0));
        let (lo, hi) = wilson_interval(0, 20);
        assert_eq!(lo, 0.0);
        assert!((hi - 0.1611).abs() < 1e-3, "{hi}");
    }

    #[test]
    fn quantiles_interpolate() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 4.0);
        assert_eq!(quantile(&v, 0.5), 2.5);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
