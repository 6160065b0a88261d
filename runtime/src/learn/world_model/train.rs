//! The world-model training loop.

use std::time::Instant;

use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use imago_policies::PolicyBatch;
use imago_robots::bounds::{ConfigError, in_range};
use imago_worldmodel::{
    LOSS_PARTS, LossWeights, Supervision, WorldModel, WorldModelBatch, WorldModelConfig,
    world_model_loss,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Poisson};
use serde::{Deserialize, Serialize};

use super::dataset::WindowDataset;
use crate::learn::schedule::warmup_cosine;
use crate::learn::{MAX_BATCH, MAX_STEPS};
use crate::progress;
use crate::telemetry::{Telemetry, TelemetryEvent};

/// World-model training settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorldModelTrainConfig {
    /// Optimiser steps.
    pub steps: usize,
    /// Windows per step.
    pub batch_size: usize,
    /// Steps per window (the multi-step supervision horizon).
    pub horizon: usize,
    /// One-step or multi-step supervision.
    pub supervision: Supervision,
    /// Peak learning rate (Adam).
    pub learning_rate: f64,
    /// Steps of linear warm-up before the cosine decay (`imago train` uses at most
    /// half the run's steps).
    pub warmup_steps: usize,
    /// Gradient norm clip.
    pub grad_clip: f32,
    /// Decay of the target encoder's moving average, per step.
    pub ema_decay: f64,
    /// Discount of the value head's returns.
    pub discount: f32,
    /// Give every member its own Poisson(1) bootstrap weights per window, so members
    /// differ by data as well as by initialisation.
    pub bootstrap: bool,
    /// Weights of the loss terms.
    pub losses: LossWeights,
    /// A new model's latent starts with the proprioception itself
    /// (`WorldModelConfig::state_in_latent`); a model continued keeps its own choice.
    pub state_in_latent: bool,
    /// Seed of the window sampler and the bootstrap.
    pub seed: u64,
}

impl WorldModelTrainConfig {
    /// Checks every value against its range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("steps", self.steps, 1..=MAX_STEPS)?;
        in_range("batch_size", self.batch_size, 1..=MAX_BATCH)?;
        in_range("horizon", self.horizon, 1..=MAX_HORIZON)?;
        in_range("learning_rate", self.learning_rate, 1e-9..=1.0)?;
        in_range("warmup_steps", self.warmup_steps, 0..=MAX_STEPS)?;
        in_range("grad_clip", self.grad_clip, 1e-6..=1e6)?;
        in_range("ema_decay", self.ema_decay, 0.0..=0.9999)?;
        in_range("discount", self.discount, 0.0..=1.0)?;
        self.losses.validate().map_err(|e| e.within("losses"))
    }

    /// The model a new run of these settings builds from `base` (the robot's config of
    /// the chosen family): a state decoder when the `state` loss weighs something, the
    /// state in the latent when asked; checked, so that asking for the state in the
    /// latent of a family that cannot gate it is an error naming `family`.
    pub fn new_model(&self, base: WorldModelConfig) -> Result<WorldModelConfig, ConfigError> {
        let config = base
            .with_state_decoder(self.losses.decodes_state())
            .with_state_in_latent(self.state_in_latent);
        config.validate()?;
        Ok(config)
    }
}

/// Longest training window, in steps, a config or flag may ask for.
pub const MAX_HORIZON: usize = 64;

impl Default for WorldModelTrainConfig {
    fn default() -> Self {
        Self {
            steps: 1000,
            batch_size: 16,
            horizon: 8,
            supervision: Supervision::MultiStep,
            learning_rate: 3e-3,
            warmup_steps: 50,
            grad_clip: 1.0,
            ema_decay: 0.99,
            discount: 0.95,
            bootstrap: true,
            losses: LossWeights::default(),
            state_in_latent: false,
            seed: 0,
        }
    }
}

/// One training step's record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorldModelStep {
    /// Unweighted loss terms, named by [`LOSS_PARTS`].
    pub losses: [f32; LOSS_PARTS.len()],
    /// Wall time of the step (batch assembly, forward, backward, update), seconds.
    pub seconds: f64,
}

/// Trains `model` on windows of `data`; returns it with a record of every step.
pub fn train_world_model<B: AutodiffBackend>(
    mut model: WorldModel<B>,
    config: &WorldModelConfig,
    data: &WindowDataset,
    train: &WorldModelTrainConfig,
    device: &B::Device,
) -> anyhow::Result<(WorldModel<B>, Vec<WorldModelStep>)> {
    anyhow::ensure!(
        !data.is_empty(),
        "no episode is at least {} steps long; record longer episodes or lower the horizon",
        data.horizon()
    );
    let mut optimizer = AdamConfig::new()
        .with_grad_clipping(Some(burn::grad_clipping::GradientClippingConfig::Norm(
            train.grad_clip,
        )))
        .init();
    let mut rng = StdRng::seed_from_u64(train.seed);
    let poisson = Poisson::new(1.0).expect("rate 1 is valid");
    let input_spec = config.input_spec();
    let (mut starts, mut frames) = (PolicyBatch::new(&input_spec), PolicyBatch::new(&input_spec));
    let (n, b, h, a) = (
        config.ensemble_size,
        train.batch_size,
        data.horizon(),
        config.action_dim(),
    );
    let mut history = Vec::with_capacity(train.steps);
    let bar = progress::bar("train world model", train.steps as u64);
    for step in 0..train.steps {
        let started = Instant::now();
        let indices: Vec<usize> = (0..b).map(|_| rng.random_range(0..data.len())).collect();
        let targets = data.fill(&indices, &mut starts, &mut frames)?;
        let weights: Vec<f32> = (0..n * b)
            .map(|_| {
                if train.bootstrap {
                    poisson.sample(&mut rng) as f32
                } else {
                    1.0
                }
            })
            .collect();
        let tensor2 = |values: Vec<f32>, shape: [usize; 2]| {
            Tensor::<B, 2>::from_data(TensorData::new(values, shape), device)
        };
        let batch = WorldModelBatch {
            starts: starts.to_input(device),
            frames: frames.to_input(device),
            actions: Tensor::from_data(TensorData::new(targets.actions, [b, h, a]), device),
            rewards: tensor2(targets.rewards, [b, h]),
            continues: tensor2(targets.continues, [b, h]),
            returns: tensor2(targets.returns, [b, h]),
            member_weights: tensor2(weights, [n, b]),
        };
        let loss = world_model_loss(&model, &batch, train.supervision, &train.losses);
        let parts: Vec<f32> = loss
            .parts
            .into_data()
            .convert::<f32>()
            .to_vec()
            .map_err(|e| anyhow::anyhow!("cannot read the world-model loss back: {e:?}"))?;
        if let Some((name, value)) = LOSS_PARTS.iter().zip(&parts).find(|(_, v)| !v.is_finite()) {
            anyhow::bail!("world-model {name} loss became {value} at step {step}");
        }
        let grads = GradientsParams::from_grads(loss.total.backward(), &model);
        let lr = warmup_cosine(step, train.steps, train.warmup_steps, train.learning_rate);
        model = optimizer.step(lr, model, grads);
        model = model.update_target(train.ema_decay);
        history.push(WorldModelStep {
            losses: std::array::from_fn(|i| parts[i]),
            seconds: started.elapsed().as_secs_f64(),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((model, history))
}

/// Mean of one loss term over a stretch of steps.
pub fn mean_loss(history: &[WorldModelStep], term: &str) -> f32 {
    let i = LOSS_PARTS.iter().position(|p| *p == term).unwrap_or(0);
    history.iter().map(|h| h.losses[i]).sum::<f32>() / history.len().max(1) as f32
}

/// Sends every loss term of a world-model training run as a curve
/// (`train/world_model/<term>`).
pub fn log_world_model_losses(telemetry: &Telemetry, history: &[WorldModelStep]) {
    if !telemetry.is_on() {
        return;
    }
    for (i, term) in imago_worldmodel::LOSS_PARTS.iter().enumerate() {
        telemetry.send(TelemetryEvent::LossCurve {
            run: "world_model".into(),
            term: term.to_string(),
            values: history.iter().map(|step| step.losses[i]).collect(),
        });
    }
}
