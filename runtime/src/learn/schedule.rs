//! Learning-rate schedules shared by the trainers.

/// Learning rate at `step` of `steps`: linear warm-up over `warmup` steps to `peak`,
/// then cosine decay to a tenth of it.
pub fn warmup_cosine(step: usize, steps: usize, warmup: usize, peak: f64) -> f64 {
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let span = (steps.saturating_sub(warmup)).max(1) as f64;
    let progress = ((step - warmup) as f64 / span).min(1.0);
    peak * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()))
}

/// How a trainer's learning rate moves over its run, from a peak rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RateSchedule {
    /// The peak rate at every step.
    #[default]
    Constant,
    /// [`warmup_cosine`]: linear warm-up over `warmup` steps (at most a tenth of the
    /// run, so that a short run is not all warm-up), then cosine decay to a tenth.
    WarmupCosine {
        /// Warm-up steps asked for.
        warmup: usize,
    },
}

impl RateSchedule {
    /// The rate at `step` of a run of `steps`, peaking at `peak`.
    pub fn rate(self, step: usize, steps: usize, peak: f64) -> f64 {
        match self {
            Self::Constant => peak,
            Self::WarmupCosine { warmup } => {
                warmup_cosine(step, steps, warmup.min(steps / 10), peak)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_up_then_cosine_to_a_tenth_and_a_short_run_warms_up_briefly() {
        let schedule = RateSchedule::WarmupCosine { warmup: 500 };
        let rates: Vec<f64> = (0..10_000)
            .map(|s| schedule.rate(s, 10_000, 1e-3))
            .collect();
        assert!((rates[0] - 1e-3 / 500.0).abs() < 1e-12);
        assert!((rates[499] - 1e-3).abs() < 1e-12);
        assert!(rates[500..].windows(2).all(|w| w[1] <= w[0]));
        assert!((rates[9_999] - 1e-4).abs() < 1e-6);
        // 100 steps: 10 of warm-up, not 500.
        assert!((schedule.rate(9, 100, 1e-3) - 1e-3).abs() < 1e-12);
        assert!(schedule.rate(99, 100, 1e-3) < 1.1e-4);
        assert_eq!(RateSchedule::Constant.rate(7, 100, 3e-4), 3e-4);
    }
}
