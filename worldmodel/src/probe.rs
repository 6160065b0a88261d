//! A probe from latents to a low-dimensional physical quantity (the end effector's
//! position): the mean of the quantity over the `k` real latents nearest to the one
//! asked about. It lets imagined latent rollouts be drawn in the same space as the
//! real trajectory that followed.
//!
//! Nearest neighbours rather than a fitted regression: imagined latents drift off
//! the manifold of real ones, where a linear or quadratic readout extrapolates to
//! places the robot cannot be (measured on the quick demo's SALT model: a quadratic
//! ridge probe with 1.7 cm in-sample error drew 8-step paths of over a metre, ten
//! times the arm's top speed). A neighbour readout always answers with states the
//! robot really visited, so a drawn path that goes wrong shows where the model's
//! latent went, not where a readout extrapolated to.

/// Why a probe could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProbeError {
    /// Latents and targets differ in count, or rows differ in width.
    #[error("{0}")]
    Shape(String),
    /// No more samples than neighbours.
    #[error("a probe over {k} neighbours needs more than {k} samples, got {samples}")]
    TooFewSamples {
        /// Neighbours averaged.
        k: usize,
        /// Samples given.
        samples: usize,
    },
}

/// The `k`-nearest-neighbour readout of latents; see the module documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct LatentProbe {
    latents: Vec<Vec<f32>>,
    targets: Vec<Vec<f32>>,
    k: usize,
    /// Leave-one-out root-mean-square error, per output.
    fit_rmse: Vec<f32>,
}

/// Samples the leave-one-out error is measured on, at most (evenly spaced).
const ERROR_SAMPLES: usize = 512;

fn squared_distance(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

impl LatentProbe {
    /// A probe over the rows of `latents` and their `targets`, averaging `k`
    /// neighbours; measures its leave-one-out error.
    pub fn fit(latents: &[Vec<f32>], targets: &[Vec<f32>], k: usize) -> Result<Self, ProbeError> {
        let samples = latents.len();
        if samples != targets.len() {
            return Err(ProbeError::Shape(format!(
                "{samples} latents but {} targets",
                targets.len()
            )));
        }
        let dim = latents.first().map_or(0, Vec::len);
        let outputs = targets.first().map_or(0, Vec::len);
        if latents.iter().any(|z| z.len() != dim) || targets.iter().any(|y| y.len() != outputs) {
            return Err(ProbeError::Shape("rows of different widths".into()));
        }
        if k == 0 || samples <= k {
            return Err(ProbeError::TooFewSamples { k, samples });
        }
        let mut probe = Self {
            latents: latents.to_vec(),
            targets: targets.to_vec(),
            k,
            fit_rmse: Vec::new(),
        };
        let stride = samples.div_ceil(ERROR_SAMPLES);
        let mut squared = vec![0.0f64; outputs];
        let mut count = 0;
        for i in (0..samples).step_by(stride) {
            let guess = probe.average(&latents[i], Some(i));
            for (s, (g, t)) in squared.iter_mut().zip(guess.iter().zip(&targets[i])) {
                *s += ((g - t) as f64).powi(2);
            }
            count += 1;
        }
        probe.fit_rmse = squared
            .iter()
            .map(|s| (s / count as f64).sqrt() as f32)
            .collect();
        Ok(probe)
    }

    /// The mean target of the `k` samples nearest to `latent`, leaving out sample
    /// `skip`.
    fn average(&self, latent: &[f32], skip: Option<usize>) -> Vec<f32> {
        let mut nearest: Vec<(f32, usize)> = self
            .latents
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != skip)
            .map(|(i, z)| (squared_distance(z, latent), i))
            .collect();
        nearest.select_nth_unstable_by(self.k - 1, |a, b| a.0.total_cmp(&b.0));
        let outputs = self.targets[0].len();
        let mut mean = vec![0.0f32; outputs];
        for &(_, i) in &nearest[..self.k] {
            for (m, t) in mean.iter_mut().zip(&self.targets[i]) {
                *m += t / self.k as f32;
            }
        }
        mean
    }

    /// The probe's answer for one latent.
    pub fn predict(&self, latent: &[f32]) -> Vec<f32> {
        self.average(latent, None)
    }

    /// Leave-one-out root-mean-square error on (up to 512 of) its samples, per output.
    pub fn fit_rmse(&self) -> &[f32] {
        &self.fit_rmse
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_with_the_neighbours_mean_and_stays_within_the_data() {
        // Points on a line, the target their position along it.
        let latents: Vec<Vec<f32>> = (0..100).map(|i| vec![i as f32 * 0.1, 0.0]).collect();
        let targets: Vec<Vec<f32>> = (0..100).map(|i| vec![i as f32]).collect();
        let probe = LatentProbe::fit(&latents, &targets, 2).unwrap();
        // Between samples 30 and 31: their mean.
        assert!((probe.predict(&[3.04, 0.0])[0] - 30.5).abs() < 1e-4);
        // Far off the data, the answer is still a state that was seen (the end).
        assert!((probe.predict(&[100.0, 50.0])[0] - 98.5).abs() < 1e-4);
        // Leaving each sample out, its two neighbours average to it (ends excepted).
        assert!(probe.fit_rmse()[0] < 0.3, "{:?}", probe.fit_rmse());
    }

    #[test]
    fn refuses_too_few_samples_and_mismatched_rows() {
        let latents = vec![vec![0.0, 1.0], vec![1.0, 0.0]];
        let targets = vec![vec![0.0], vec![1.0]];
        assert_eq!(
            LatentProbe::fit(&latents, &targets, 2),
            Err(ProbeError::TooFewSamples { k: 2, samples: 2 })
        );
        assert!(matches!(
            LatentProbe::fit(&latents, &targets[..1], 1),
            Err(ProbeError::Shape(_))
        ));
    }
}
