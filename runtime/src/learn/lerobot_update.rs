//! Training a LeRobot policy on recorded episodes through its own loss (Diffusion's
//! noise prediction, ACT's L1 + KL), per demonstration, weighted, in burn's autodiff:
//! the policy update of fine-tuning (weights from advantages) and of behaviour cloning
//! (every transition at weight 1).

use burn::Dispatch;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::Distribution;
use imago_policies::lora::LoraConfig;
use rand::RngExt;
use rand::rngs::StdRng;

use crate::act::lerobot_driver::LeRobotBinding;
use crate::learn::lerobot_batches::{act_batch, diffusion_batch};
use crate::learn::schedule::RateSchedule;
use crate::learn::weight_average::{WeightAverage, WeightAverageConfig};
use crate::progress;
use crate::store::lerobot_policy::LeRobotPolicy;
use crate::store::replay::Episode;

/// Batches drawn uniformly from transitions, each with its weight.
pub struct WeightedDraws<'w> {
    /// The transitions `(e, t)` drawn from.
    pub samples: Vec<(usize, usize)>,
    /// Every transition's weight `[e][t]`; `None`: all 1.
    pub weights: Option<&'w [Vec<f32>]>,
    /// Transitions per batch.
    pub batch_size: usize,
}

impl WeightedDraws<'_> {
    /// One batch: its transitions and their weights `[batch]` on `device`.
    fn draw(
        &self,
        rng: &mut StdRng,
        device: &burn::DispatchDevice,
    ) -> (Vec<(usize, usize)>, Tensor<Dispatch, 1>) {
        let batch: Vec<(usize, usize)> = (0..self.batch_size)
            .map(|_| self.samples[rng.random_range(0..self.samples.len())])
            .collect();
        let weights: Vec<f32> = batch
            .iter()
            .map(|&(e, t)| self.weights.map_or(1.0, |w| w[e][t]))
            .collect();
        let n = weights.len();
        (
            batch,
            Tensor::from_data(TensorData::new(weights, [n]), device),
        )
    }
}

/// How a LeRobot policy's weights are updated.
#[derive(Debug, Clone, Copy)]
pub struct UpdateSettings<'a> {
    /// Adam steps.
    pub steps: usize,
    /// Adam's peak rate.
    pub learning_rate: f64,
    /// How the rate moves over the steps.
    pub schedule: RateSchedule,
    /// Train LoRA adapters only; `None`: every weight.
    pub lora: Option<&'a LoraConfig>,
    /// Return the moving average of the weights over the steps rather than the last
    /// step's (`learn::weight_average`); `None`: the last step's.
    pub average: Option<WeightAverageConfig>,
}

/// `settings.steps` Adam steps (gradients clipped to norm 1, as for imago's policies;
/// the rate as `settings.schedule` moves it)
/// on the mean of each drawn demonstration's loss times its weight, the episodes read
/// through `binding` (on the training device); the updated policy and every step's
/// loss. With `lora`, only fresh LoRA adapters of the policy's transformer or U-Net
/// linear layers learn (every other weight frozen; the optimiser keeps state for the
/// adapters alone), folded into the weights at the end; with `average`, the result is
/// the weights' moving average.
pub fn update_lerobot_policy(
    policy: LeRobotPolicy<Dispatch>,
    (binding, episodes): (&LeRobotBinding<Dispatch>, &[Episode]),
    draws: &WeightedDraws<'_>,
    settings: &UpdateSettings<'_>,
    rng: &mut StdRng,
) -> anyhow::Result<(LeRobotPolicy<Dispatch>, Vec<f32>)> {
    let UpdateSettings {
        steps,
        learning_rate,
        schedule,
        lora,
        average,
    } = *settings;
    let rate = |step: usize| schedule.rate(step, steps, learning_rate);
    let device = binding.device().clone();
    let policy = match lora {
        Some(config) => policy.with_lora(config, &device),
        None => policy,
    };
    let adam = AdamConfig::new()
        .with_grad_clipping(Some(burn::grad_clipping::GradientClippingConfig::Norm(1.0)));
    let mut losses = Vec::with_capacity(steps);
    let bar = progress::bar("fine-tune LeRobot policy", steps as u64);
    let mut record = |loss: &Tensor<Dispatch, 1>, step: usize| -> anyhow::Result<()> {
        let value: f32 = loss.clone().into_scalar().elem();
        anyhow::ensure!(
            value.is_finite(),
            "fine-tuning loss became {value} at step {step}"
        );
        losses.push(value);
        bar.inc(1);
        Ok(())
    };
    let policy = match policy {
        LeRobotPolicy::Diffusion(mut p) => {
            let mut optimizer = adam.init();
            let mut averaged = average.map(WeightAverage::new);
            let shape = p.model.shape().clone();
            let timesteps = p.config.schedule.num_train_timesteps;
            for step in 0..steps {
                let (batch, weights) = draws.draw(rng, &device);
                // LeRobot's training augmentation: one random crop per batch.
                let crop = p.training_crop(|n| rng.random_range(0..n));
                let demonstrations = diffusion_batch(
                    binding,
                    (episodes, &batch),
                    (shape.n_obs_steps, shape.horizon),
                    crop,
                )?;
                let noise = Tensor::random(
                    demonstrations.actions.dims(),
                    Distribution::Normal(0.0, 1.0),
                    &device,
                );
                let t: Vec<usize> = batch
                    .iter()
                    .map(|_| rng.random_range(0..timesteps))
                    .collect();
                let loss = (p.losses(demonstrations, (noise, &t)) * weights).mean();
                record(&loss, step)?;
                let grads = GradientsParams::from_grads(loss.backward(), &p.model);
                p.model = optimizer.step(rate(step), p.model, grads);
                if let Some(average) = &mut averaged {
                    average.update(&p.model);
                }
            }
            if let Some(average) = &averaged {
                p.model = average.apply(p.model);
            }
            LeRobotPolicy::Diffusion(p)
        }
        LeRobotPolicy::Act(mut p) => {
            let mut optimizer = adam.init();
            let mut averaged = average.map(WeightAverage::new);
            let (chunk, latent) = (p.config.chunk_size, p.config.latent_dim);
            for step in 0..steps {
                let (batch, weights) = draws.draw(rng, &device);
                let demonstrations = act_batch(binding, (episodes, &batch), chunk)?;
                let noise = Tensor::random(
                    [batch.len(), latent],
                    Distribution::Normal(0.0, 1.0),
                    &device,
                );
                let loss = (p.losses(demonstrations, noise).total * weights).mean();
                record(&loss, step)?;
                let grads = GradientsParams::from_grads(loss.backward(), &p.model);
                p.model = optimizer.step(rate(step), p.model, grads);
                if let Some(average) = &mut averaged {
                    average.update(&p.model);
                }
            }
            if let Some(average) = &averaged {
                p.model = average.apply(p.model);
            }
            LeRobotPolicy::Act(p)
        }
    };
    bar.finish_and_clear();
    Ok((policy.merged(), losses))
}
