//! The noise schedules of denoising diffusion, as LeRobot's Diffusion Policy
//! configures them through `diffusers` (`DDPMScheduler`, `DDIMScheduler`): the betas
//! (`linear`, `scaled_linear` or `squaredcos_cap_v2`), noising a clean sample for the
//! training loss, and one reverse step of DDPM (ancestral, `fixed_small` variance) or
//! DDIM (deterministic, `eta = 0`), for a model that predicts the noise (`epsilon`) or
//! the clean sample (`sample`).
//!
//! The coefficients are computed on the host in `f32` exactly as `diffusers` computes
//! them (betas in `f64`, then `float32`, the cumulative product in `float32`), and
//! applied to burn tensors, so a step runs on any backend. Randomness comes from the
//! caller (the step's noise is an argument), so a run can replay another's noise.

use burn::prelude::*;
use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

/// How the betas grow over the training timesteps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BetaSchedule {
    /// `linspace(beta_start, beta_end)`.
    Linear,
    /// `linspace(sqrt(beta_start), sqrt(beta_end))^2`.
    ScaledLinear,
    /// The cosine schedule of Nichol and Dhariwal (2021), each beta capped at 0.999
    /// (LeRobot's default).
    SquaredcosCapV2,
}

/// What the denoising model predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prediction {
    /// The noise that was added (LeRobot's default).
    Epsilon,
    /// The clean sample.
    Sample,
}

/// The reverse process used to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SamplerKind {
    /// Ancestral sampling (Ho et al. 2020): noise is added at every step but the last.
    #[serde(rename = "DDPM")]
    Ddpm,
    /// Deterministic implicit sampling (Song et al. 2021, `eta = 0`): fewer steps.
    #[serde(rename = "DDIM")]
    Ddim,
}

/// A schedule's settings, named as LeRobot's `config.json` names them (a key left out
/// takes LeRobot's default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NoiseScheduleConfig {
    /// Timesteps of the forward process. Range: [1, 10000].
    pub num_train_timesteps: usize,
    /// First beta of the linear schedules. Range: (0, 1).
    pub beta_start: f64,
    /// Last beta of the linear schedules. Range: (0, 1).
    pub beta_end: f64,
    /// The betas' shape.
    pub beta_schedule: BetaSchedule,
    /// Clip the predicted clean sample to `[-clip_sample_range, clip_sample_range]`.
    pub clip_sample: bool,
    /// Range: (0, 1e6].
    pub clip_sample_range: f64,
    /// What the model predicts.
    pub prediction_type: Prediction,
}

impl Default for NoiseScheduleConfig {
    /// LeRobot's Diffusion Policy defaults.
    fn default() -> Self {
        Self {
            num_train_timesteps: 100,
            beta_start: 0.0001,
            beta_end: 0.02,
            beta_schedule: BetaSchedule::SquaredcosCapV2,
            clip_sample: true,
            clip_sample_range: 1.0,
            prediction_type: Prediction::Epsilon,
        }
    }
}

impl NoiseScheduleConfig {
    /// Checks every value against its range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("num_train_timesteps", self.num_train_timesteps, 1..=10_000)?;
        in_range("beta_start", self.beta_start, f64::MIN_POSITIVE..=0.999_999)?;
        in_range("beta_end", self.beta_end, f64::MIN_POSITIVE..=0.999_999)?;
        in_range(
            "clip_sample_range",
            self.clip_sample_range,
            f64::MIN_POSITIVE..=1e6,
        )
    }
}

/// A schedule ready to noise and denoise: the cumulative products of `1 - beta`.
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseSchedule {
    config: NoiseScheduleConfig,
    alphas_cumprod: Vec<f32>,
}

impl NoiseSchedule {
    /// The schedule `config` describes.
    pub fn new(config: NoiseScheduleConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let betas = betas(&config);
        let mut alphas_cumprod = Vec::with_capacity(betas.len());
        let mut product = 1.0f32;
        for beta in betas {
            product *= 1.0 - beta;
            alphas_cumprod.push(product);
        }
        Ok(Self {
            config,
            alphas_cumprod,
        })
    }

    /// Its settings.
    pub fn config(&self) -> &NoiseScheduleConfig {
        &self.config
    }

    /// `alpha_bar(t)`: how much of the clean sample is left at timestep `t`.
    pub fn alpha_bar(&self, t: usize) -> f32 {
        self.alphas_cumprod[t]
    }

    /// The timesteps a sampler of `steps` steps visits, first to last (`diffusers`'
    /// "leading" spacing: every `num_train_timesteps / steps`-th from 0, reversed).
    /// `steps` outside [1, num_train_timesteps] is an error.
    pub fn timesteps(&self, steps: usize) -> Result<Vec<usize>, ConfigError> {
        let total = self.config.num_train_timesteps;
        in_range("num_inference_steps", steps, 1..=total)?;
        let ratio = total / steps;
        Ok((0..steps).rev().map(|i| i * ratio).collect())
    }

    /// `sqrt(alpha_bar(t)) x0 + sqrt(1 - alpha_bar(t)) noise`, with `t` per sample (the
    /// first dimension): the noisy sample the training loss starts from.
    pub fn add_noise<B: Backend, const D: usize>(
        &self,
        clean: Tensor<B, D>,
        noise: Tensor<B, D>,
        timesteps: &[usize],
    ) -> Tensor<B, D> {
        let device = clean.device();
        let per_sample = |f: &dyn Fn(f32) -> f32| {
            let values: Vec<f32> = timesteps.iter().map(|&t| f(self.alpha_bar(t))).collect();
            let mut shape = [1; D];
            shape[0] = timesteps.len();
            Tensor::<B, 1>::from_data(TensorData::new(values, [timesteps.len()]), &device)
                .reshape(shape)
        };
        let keep = per_sample(&|a| a.sqrt());
        let add = per_sample(&|a| (1.0 - a).sqrt());
        clean * keep + noise * add
    }

    /// One reverse step from `sample` at timestep `t` of a `steps`-step run, given the
    /// model's output there. DDPM adds `noise` (standard normal, the sample's shape)
    /// scaled by the step's standard deviation, except at `t = 0`, where it needs none;
    /// DDIM never reads it.
    pub fn step<B: Backend, const D: usize>(
        &self,
        kind: SamplerKind,
        steps: usize,
        (t, model_output): (usize, Tensor<B, D>),
        sample: Tensor<B, D>,
        noise: Option<Tensor<B, D>>,
    ) -> Tensor<B, D> {
        let previous = t.checked_sub(self.config.num_train_timesteps / steps);
        let alpha_bar = self.alpha_bar(t);
        let alpha_bar_prev = previous.map_or(1.0, |p| self.alpha_bar(p));
        let (beta_bar, beta_bar_prev) = (1.0 - alpha_bar, 1.0 - alpha_bar_prev);
        let (clean, epsilon) = match self.config.prediction_type {
            Prediction::Epsilon => {
                let clean =
                    (sample.clone() - model_output.clone() * beta_bar.sqrt()) / alpha_bar.sqrt();
                (clean, model_output)
            }
            Prediction::Sample => {
                let epsilon =
                    (sample.clone() - model_output.clone() * alpha_bar.sqrt()) / beta_bar.sqrt();
                (model_output, epsilon)
            }
        };
        let clean = if self.config.clip_sample {
            let range = self.config.clip_sample_range as f32;
            clean.clamp(-range, range)
        } else {
            clean
        };
        match kind {
            SamplerKind::Ddim => clean * alpha_bar_prev.sqrt() + epsilon * beta_bar_prev.sqrt(),
            SamplerKind::Ddpm => {
                let alpha = alpha_bar / alpha_bar_prev;
                let beta = 1.0 - alpha;
                let mean = clean * (alpha_bar_prev.sqrt() * beta / beta_bar)
                    + sample * (alpha.sqrt() * beta_bar_prev / beta_bar);
                match (t > 0, noise) {
                    (true, Some(noise)) => {
                        let variance = (beta_bar_prev / beta_bar * beta).max(1e-20);
                        mean + noise * variance.sqrt()
                    }
                    _ => mean,
                }
            }
        }
    }
}

/// The betas of `config`, in `f32` as `diffusers` stores them.
fn betas(config: &NoiseScheduleConfig) -> Vec<f32> {
    let n = config.num_train_timesteps;
    let linspace = |from: f64, to: f64| -> Vec<f64> {
        (0..n)
            .map(|i| match n {
                1 => from,
                _ => from + (to - from) * i as f64 / (n - 1) as f64,
            })
            .collect()
    };
    match config.beta_schedule {
        BetaSchedule::Linear => linspace(config.beta_start, config.beta_end)
            .into_iter()
            .map(|b| b as f32)
            .collect(),
        BetaSchedule::ScaledLinear => linspace(config.beta_start.sqrt(), config.beta_end.sqrt())
            .into_iter()
            .map(|b| (b as f32) * (b as f32))
            .collect(),
        BetaSchedule::SquaredcosCapV2 => {
            let alpha_bar = |t: f64| {
                ((t + 0.008) / 1.008 * std::f64::consts::FRAC_PI_2)
                    .cos()
                    .powi(2)
            };
            (0..n)
                .map(|i| {
                    let (t1, t2) = (i as f64 / n as f64, (i + 1) as f64 / n as f64);
                    (1.0 - alpha_bar(t2) / alpha_bar(t1)).min(0.999) as f32
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::lerobot_fixtures::{Array, FIXTURES, read};

    type B = Flex;

    fn tensor(values: &[f32]) -> Tensor<B, 2> {
        Tensor::from_data(
            TensorData::new(values.to_vec(), [1, values.len()]),
            &Default::default(),
        )
    }

    fn values(t: Tensor<B, 2>) -> Vec<f32> {
        t.into_data().to_vec().unwrap()
    }

    #[test]
    fn the_cosine_schedule_keeps_less_of_the_sample_at_every_step() {
        let schedule = NoiseSchedule::new(NoiseScheduleConfig::default()).unwrap();
        let n = schedule.config().num_train_timesteps;
        // alpha_bar(t) of the cosine schedule is cos^2((t/n + s)/(1 + s) pi/2) /
        // cos^2(s/(1 + s) pi/2) before the cap; the cap never binds before the end.
        let f = |t: f64| {
            ((t / n as f64 + 0.008) / 1.008 * std::f64::consts::FRAC_PI_2)
                .cos()
                .powi(2)
        };
        for t in [0, 10, 50, 90] {
            let expected = f((t + 1) as f64) / f(0.0);
            assert!(
                (schedule.alpha_bar(t) as f64 - expected).abs() < 1e-5,
                "t {t}: {} vs {expected}",
                schedule.alpha_bar(t)
            );
        }
        assert!((0..n - 1).all(|t| schedule.alpha_bar(t + 1) < schedule.alpha_bar(t)));
        assert!(schedule.alpha_bar(n - 1) < 1e-3);
        let linear = NoiseSchedule::new(NoiseScheduleConfig {
            beta_schedule: BetaSchedule::Linear,
            ..NoiseScheduleConfig::default()
        })
        .unwrap();
        assert!((linear.alpha_bar(0) - (1.0 - 0.0001)).abs() < 1e-7);
    }

    #[test]
    fn timesteps_lead_from_zero_and_bad_step_counts_are_errors() {
        let schedule = NoiseSchedule::new(NoiseScheduleConfig::default()).unwrap();
        assert_eq!(
            schedule.timesteps(10).unwrap(),
            [90, 80, 70, 60, 50, 40, 30, 20, 10, 0]
        );
        assert_eq!(schedule.timesteps(100).unwrap().len(), 100);
        assert_eq!(
            schedule.timesteps(0).unwrap_err().key,
            "num_inference_steps"
        );
        assert!(schedule.timesteps(101).is_err());
        let bad = NoiseScheduleConfig {
            beta_end: 1.5,
            ..NoiseScheduleConfig::default()
        };
        assert_eq!(NoiseSchedule::new(bad).unwrap_err().key, "beta_end");
    }

    /// With a model that predicts the noise exactly, DDIM walks the noisy sample back
    /// to the clean one, whatever the number of steps; DDPM without its added noise
    /// does too (its mean is the posterior mean given the true clean sample).
    #[test]
    fn an_exact_noise_model_denoises_back_to_the_clean_sample() {
        let schedule = NoiseSchedule::new(NoiseScheduleConfig::default()).unwrap();
        let clean = [0.3f32, -0.7, 0.05, 0.9];
        let noise = [1.2f32, -0.4, 0.8, -1.9];
        for (kind, steps) in [
            (SamplerKind::Ddim, 10),
            (SamplerKind::Ddim, 100),
            (SamplerKind::Ddpm, 100),
        ] {
            let timesteps = schedule.timesteps(steps).unwrap();
            let first = timesteps[0];
            let mut sample = schedule.add_noise(tensor(&clean), tensor(&noise), &[first]);
            for &t in &timesteps {
                // The noise that takes `clean` to `sample` at `t`.
                let a = schedule.alpha_bar(t);
                let epsilon = (sample.clone() - tensor(&clean) * a.sqrt()) / (1.0 - a).sqrt();
                sample = schedule.step(kind, steps, (t, epsilon), sample, None);
            }
            for (got, want) in values(sample).iter().zip(clean) {
                assert!(
                    (got - want).abs() < 1e-4,
                    "{kind:?} {steps}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn ddpm_adds_the_posterior_deviation_except_at_the_last_step() {
        let schedule = NoiseSchedule::new(NoiseScheduleConfig::default()).unwrap();
        let sample = tensor(&[0.5, -0.5]);
        let output = tensor(&[0.1, 0.2]);
        let step = |t, noise| {
            values(schedule.step(
                SamplerKind::Ddpm,
                100,
                (t, output.clone()),
                sample.clone(),
                noise,
            ))
        };
        let (quiet, noisy) = (step(40, None), step(40, Some(tensor(&[1.0, 1.0]))));
        let (a, a_prev) = (schedule.alpha_bar(40), schedule.alpha_bar(39));
        let deviation = ((1.0 - a_prev) / (1.0 - a) * (1.0 - a / a_prev)).sqrt();
        for (q, n) in quiet.iter().zip(&noisy) {
            assert!((n - q - deviation).abs() < 1e-6, "{n} - {q} vs {deviation}");
        }
        assert_eq!(step(0, None), step(0, Some(tensor(&[1.0, 1.0]))));
    }

    #[derive(serde::Deserialize)]
    struct Step {
        sampler: SamplerKind,
        inference_steps: usize,
        timestep: usize,
        noise: Array,
        prev_sample: Array,
    }

    #[derive(serde::Deserialize)]
    struct Fixture {
        config: NoiseScheduleConfig,
        alphas_cumprod: Vec<f32>,
        ddim_timesteps: Vec<usize>,
        sample: Array,
        model_output: Array,
        clean: Array,
        noise: Array,
        noised_at: Vec<usize>,
        noised: Array,
        steps: Vec<Step>,
    }

    /// `diffusers`' schedulers as LeRobot configures them, recorded by
    /// `scripts/lerobot_policy_fixtures.py` (lerobot 0.4.4, torch 2.10).
    #[test]
    fn schedules_and_steps_match_diffusers() {
        let fixture: Fixture = read(FIXTURES, "schedules");
        let schedule = NoiseSchedule::new(fixture.config).unwrap();
        for (t, &want) in fixture.alphas_cumprod.iter().enumerate() {
            assert!((schedule.alpha_bar(t) - want).abs() <= 1e-6, "t {t}");
        }
        assert_eq!(schedule.timesteps(10).unwrap(), fixture.ddim_timesteps);
        let noised = schedule.add_noise(
            fixture.clean.tensor::<3>(),
            fixture.noise.tensor(),
            &fixture.noised_at,
        );
        assert!(fixture.noised.largest_gap(noised) < 1e-6);
        for step in &fixture.steps {
            let out = schedule.step(
                step.sampler,
                step.inference_steps,
                (step.timestep, fixture.model_output.tensor::<3>()),
                fixture.sample.tensor(),
                Some(step.noise.tensor()),
            );
            let gap = step.prev_sample.largest_gap(out);
            assert!(
                gap < 1e-5,
                "{:?} {} steps at t {}: {gap}",
                step.sampler,
                step.inference_steps,
                step.timestep
            );
        }
    }

    #[test]
    fn the_predicted_clean_sample_is_clipped() {
        let schedule = NoiseSchedule::new(NoiseScheduleConfig::default()).unwrap();
        // At t = 0 a DDIM step returns the predicted clean sample itself.
        let far = values(schedule.step(
            SamplerKind::Ddim,
            100,
            (0, tensor(&[-50.0, 50.0])),
            tensor(&[0.0, 0.0]),
            None,
        ));
        assert_eq!(far, [1.0, -1.0]);
    }
}
