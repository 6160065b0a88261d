//! Corrections for stale data: truncated importance weights and the effective sample
//! size they leave (DART, AReaL, M2PO).
//!
//! A transition recorded by policy version `v` is weighted by
//! `min(pi_now(a|s) / pi_v(a|s), max_ratio)`; truncation bounds the variance one
//! unlikely action can add, at the price of some bias.

/// `min(exp(log_ratio), max_ratio)` for each transition; non-finite log-ratios (a
/// behaviour probability of zero) are treated as the truncation bound.
pub fn truncated_importance_weights(log_ratios: &[f32], max_ratio: f32) -> Vec<f32> {
    log_ratios
        .iter()
        .map(|l| {
            let ratio = l.exp();
            if ratio.is_finite() {
                ratio.min(max_ratio)
            } else {
                max_ratio
            }
        })
        .collect()
}

/// Kish's effective sample size `(sum w)^2 / sum w^2` of a weighted sample: `n` for
/// equal weights, 1 when one weight carries everything, 0 for an empty or all-zero
/// sample.
pub fn effective_sample_size(weights: &[f32]) -> f32 {
    let sum: f64 = weights.iter().map(|&w| w as f64).sum();
    let squares: f64 = weights.iter().map(|&w| (w as f64).powi(2)).sum();
    if squares > 0.0 {
        (sum * sum / squares) as f32
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_ratios_truncated_at_the_bound() {
        let w = truncated_importance_weights(&[0.0, 2f32.ln(), 10.0, -1.0, f32::INFINITY], 1.5);
        let expect = [1.0, 1.5, 1.5, (-1.0f32).exp(), 1.5];
        for (a, b) in w.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{w:?}");
        }
    }

    #[test]
    fn effective_sample_size_by_hand() {
        assert_eq!(effective_sample_size(&[1.0; 8]), 8.0);
        assert_eq!(effective_sample_size(&[3.0, 0.0, 0.0]), 1.0);
        assert_eq!(effective_sample_size(&[]), 0.0);
        // (1 + 2 + 3)^2 / (1 + 4 + 9) = 36 / 14
        assert!((effective_sample_size(&[1.0, 2.0, 3.0]) - 36.0 / 14.0).abs() < 1e-6);
    }
}
