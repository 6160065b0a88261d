//! Diffusion Policy's reverse process (LeRobot's `DiffusionModel.conditional_sample`):
//! from a noisy chunk, one U-Net prediction and one scheduler step per timestep of a
//! DDPM or DDIM run, conditioned on the observation features.

use burn::prelude::*;
use burn::tensor::Distribution;
use imago_robots::bounds::ConfigError;

use super::scheduler::{NoiseSchedule, SamplerKind};
use super::unet::DiffusionUnet;

/// The denoised chunk `[batch, horizon, action_dim]` from `initial` noise of that
/// shape, by `sampler` in `steps` steps of `schedule`, conditioned on `global_cond`.
/// DDPM adds noise at every step but the last: `step_noise(t)` gives it (standard
/// normal, the chunk's shape; from the caller, so a run can replay another's noise).
/// A step count the schedule cannot take is an error.
pub fn denoise<B: Backend>(
    (unet, schedule): (&DiffusionUnet<B>, &NoiseSchedule),
    (sampler, steps): (SamplerKind, usize),
    global_cond: Option<Tensor<B, 2>>,
    initial: Tensor<B, 3>,
    mut step_noise: impl FnMut(usize) -> Tensor<B, 3>,
) -> Result<Tensor<B, 3>, ConfigError> {
    let batch = initial.dims()[0];
    let mut sample = initial;
    for t in schedule.timesteps(steps)? {
        let output = unet.forward(sample.clone(), &vec![t; batch], global_cond.clone());
        let noise = (sampler == SamplerKind::Ddpm && t > 0).then(|| step_noise(t));
        sample = schedule.step(sampler, steps, (t, output), sample, noise);
    }
    Ok(sample)
}

/// Where a policy's sampling noise comes from: the initial chunk and DDPM's noise at
/// each step (standard normal, the chunk's shape). A trait so that a test can replay
/// LeRobot's noise; [`StandardNormal`] draws it from the backend's generator.
pub trait ChunkNoise<B: Backend> {
    /// The noise a chunk of `shape` `[batch, horizon, action_dim]` starts from.
    fn initial(&mut self, shape: [usize; 3], device: &B::Device) -> Tensor<B, 3>;
    /// DDPM's noise for its step from timestep `t`.
    fn step(&mut self, t: usize, shape: [usize; 3], device: &B::Device) -> Tensor<B, 3>;
}

/// Standard normal noise from the backend's random generator (`B::seed` seeds it).
#[derive(Debug, Clone, Copy, Default)]
pub struct StandardNormal;

impl<B: Backend> ChunkNoise<B> for StandardNormal {
    fn initial(&mut self, shape: [usize; 3], device: &B::Device) -> Tensor<B, 3> {
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
    }

    fn step(&mut self, _: usize, shape: [usize; 3], device: &B::Device) -> Tensor<B, 3> {
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diffusion::scheduler::NoiseScheduleConfig;
    use crate::diffusion::unet::DiffusionUnetConfig;
    use crate::lerobot_fixtures::{Array, FIXTURES, lerobot_unet, read};

    #[derive(serde::Deserialize)]
    struct Run {
        sampler: SamplerKind,
        steps: usize,
        initial: Array,
        step_noise: Vec<Array>,
        sample: Array,
    }

    #[derive(serde::Deserialize)]
    struct Fixture {
        unet: DiffusionUnetConfig,
        schedule: NoiseScheduleConfig,
        global_cond: Array,
        runs: Vec<Run>,
    }

    /// LeRobot's `DiffusionModel.conditional_sample` (lerobot 0.4.4) with DDPM in 100
    /// steps and DDIM in 10, from recorded initial noise, replaying the noise DDPM drew
    /// at each step.
    #[test]
    fn denoised_chunks_match_lerobots_conditional_sample() {
        let f: Fixture = read(FIXTURES, "diffusion_sampling");
        let unet = lerobot_unet(&f.unet, "diffusion_sampling_unet.safetensors");
        let schedule = NoiseSchedule::new(f.schedule).unwrap();
        for run in &f.runs {
            let mut noises = run.step_noise.iter();
            let sample = denoise(
                (&unet, &schedule),
                (run.sampler, run.steps),
                Some(f.global_cond.tensor()),
                run.initial.tensor(),
                |_| {
                    noises
                        .next()
                        .expect("recorded noise for every noisy step")
                        .tensor()
                },
            )
            .unwrap();
            assert!(noises.next().is_none(), "DDPM used every recorded noise");
            let gap = run.sample.largest_gap(sample);
            println!("{:?} {} steps: largest gap {gap:e}", run.sampler, run.steps);
            assert!(gap < 1e-3, "{:?}: largest gap {gap}", run.sampler);
        }
    }
}
