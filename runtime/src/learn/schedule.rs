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
