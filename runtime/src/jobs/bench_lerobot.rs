//! `imago bench --policy DIR`: a LeRobot policy's speed on this machine, timed at the
//! network (what `scripts/lerobot_policy_speed.py` times of LeRobot's own on the same
//! inputs): batch-1 inference of one chunk (Diffusion Policy with its configured
//! sampler and with DDIM in 10 steps; ACT), and one training step (loss, backward,
//! AdamW step) at the given batch size. Inputs are random in the policy's shapes.

use std::path::Path;
use std::time::Instant;

use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::{Dispatch, DispatchDevice};
use imago_policies::act::{ActDemonstrations, ActPolicy};
use imago_policies::diffusion::{
    DiffusionModel, DiffusionPolicy, ImageCrop, ObservationHistory, SamplerKind,
};
use imago_policies::lerobot::TickObservation;
use serde::{Deserialize, Serialize};

use crate::act::evaluate::time_calls;
use crate::device::ResolvedDevice;
use crate::stats::quantile;
use crate::store::lerobot_policy::{LeRobotPolicy, load_lerobot_policy};

/// One timed figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeRobotBenchRow {
    /// What was timed.
    pub what: String,
    /// Samples per call.
    pub batch: usize,
    /// Median, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile (the slowest of few calls), milliseconds.
    pub p99_ms: f64,
    /// Timed calls.
    pub calls: usize,
}

impl LeRobotBenchRow {
    /// The rows as a table.
    pub fn table(rows: &[Self]) -> String {
        let mut out = format!(
            "{:<44} {:>6} {:>12} {:>12}\n",
            "what", "batch", "p50 ms", "p99 ms"
        );
        for r in rows {
            out += &format!(
                "{:<44} {:>6} {:>12.1} {:>12.1}\n",
                r.what, r.batch, r.p50_ms, r.p99_ms
            );
        }
        out
    }
}

/// Times the LeRobot policy of `dir`: inference over `steps` calls after 1 warm-up
/// call, training over `train_steps` steps of `batch_size` after one warm-up step.
pub fn bench_lerobot_policy(
    dir: &Path,
    device: &ResolvedDevice,
    (steps, train_steps, batch_size): (usize, usize, usize),
) -> anyhow::Result<Vec<LeRobotBenchRow>> {
    let inference = load_lerobot_policy::<Dispatch>(dir, &device.inference)?;
    let training = load_lerobot_policy::<Dispatch>(dir, &device.training)?;
    let row = |what: String, batch: usize, times: (f64, f64), calls: usize| LeRobotBenchRow {
        what,
        batch,
        p50_ms: times.0,
        p99_ms: times.1,
        calls,
    };
    let mut rows = Vec::new();
    match (inference, training) {
        (LeRobotPolicy::Diffusion(policy), LeRobotPolicy::Diffusion(trained)) => {
            let (sampler, sampler_steps) = policy.model.shape().sampler;
            let history = diffusion_history(&policy, 1, &device.inference);
            let time = |model: &DiffusionModel<Dispatch>| {
                time_calls(1, steps, || {
                    let shape = [1, model.shape().horizon, action_dim_of(&policy)];
                    let initial = normal(shape, &device.inference);
                    let chunk = model
                        .generate_actions(&history, initial, |_| normal(shape, &device.inference));
                    chunk.into_data();
                    Ok(())
                })
            };
            let own = time(&policy.model)?;
            let name = match sampler {
                SamplerKind::Ddpm => "DDPM",
                SamplerKind::Ddim => "DDIM",
            };
            rows.push(row(
                format!("inference, {name} {sampler_steps} steps (one chunk)"),
                1,
                (own.p50, own.p99),
                steps,
            ));
            let ddim = policy.model.clone().with_sampler(SamplerKind::Ddim, 10)?;
            let fast = time(&ddim)?;
            rows.push(row(
                "inference, DDIM 10 steps (one chunk)".into(),
                1,
                (fast.p50, fast.p99),
                steps,
            ));
            let times = diffusion_training(trained, &device.training, train_steps, batch_size);
            rows.push(row(
                "training step (loss, backward, AdamW)".into(),
                batch_size,
                times,
                train_steps,
            ));
        }
        (LeRobotPolicy::Act(policy), LeRobotPolicy::Act(trained)) => {
            let observation = act_observation(&policy, 1, &device.inference);
            let latency = time_calls(1, steps, || {
                policy.model.forward(&observation, None).into_data();
                Ok(())
            })?;
            rows.push(row(
                "inference (one chunk)".into(),
                1,
                (latency.p50, latency.p99),
                steps,
            ));
            let times = act_training(trained, &device.training, train_steps, batch_size);
            rows.push(row(
                "training step (loss, backward, AdamW)".into(),
                batch_size,
                times,
                train_steps,
            ));
        }
        _ => anyhow::bail!("the directory loaded as two architectures"),
    }
    Ok(rows)
}

fn normal<const D: usize>(shape: [usize; D], device: &DispatchDevice) -> Tensor<Dispatch, D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

fn uniform<const D: usize>(shape: [usize; D], device: &DispatchDevice) -> Tensor<Dispatch, D> {
    Tensor::random(shape, Distribution::Uniform(0.0, 1.0), device)
}

fn action_dim_of(policy: &DiffusionPolicy<Dispatch>) -> usize {
    policy.config.action_dim().unwrap_or(1)
}

/// Random observations of the policy's shapes, `batch` of them.
fn diffusion_history(
    policy: &DiffusionPolicy<Dispatch>,
    batch: usize,
    device: &DispatchDevice,
) -> ObservationHistory<Dispatch> {
    let c = &policy.config;
    let n = c.n_obs_steps;
    let image = c.input_features.camera_shape().ok().flatten();
    ObservationHistory {
        state: normal([batch, n, c.state_dim().unwrap_or(0)], device),
        images: c
            .camera_keys()
            .iter()
            .filter_map(|_| image.map(|[ch, h, w]| uniform([batch, n, ch, h, w], device)))
            .collect(),
        env_state: c
            .env_state_dim()
            .ok()
            .flatten()
            .map(|e| normal([batch, n, e], device)),
    }
}

fn diffusion_training(
    policy: DiffusionPolicy<Dispatch>,
    device: &DispatchDevice,
    steps: usize,
    batch: usize,
) -> (f64, f64) {
    let history = diffusion_history(&policy, batch, device);
    let shape = [batch, policy.config.horizon, action_dim_of(&policy)];
    let timesteps: Vec<usize> = (0..batch)
        .map(|i| i * 37 % policy.config.schedule.num_train_timesteps)
        .collect();
    let mut model = policy.model;
    let mut optimizer = AdamWConfig::new().init();
    timed_steps(steps, || {
        let losses = model.losses(
            (&history, ImageCrop::Centre),
            uniform(shape, device),
            (normal(shape, device), &timesteps),
            None,
        );
        let loss = losses.mean();
        let _: f32 = loss.clone().into_scalar().elem();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(1e-4, model.clone(), grads);
    })
}

fn act_observation(
    policy: &ActPolicy<Dispatch>,
    batch: usize,
    device: &DispatchDevice,
) -> TickObservation<Dispatch> {
    let c = &policy.config;
    let image = c.input_features.camera_shape().ok().flatten();
    TickObservation {
        state: normal([batch, c.state_dim().ok().flatten().unwrap_or(0)], device),
        images: c
            .camera_keys()
            .iter()
            .filter_map(|_| image.map(|[ch, h, w]| uniform([batch, ch, h, w], device)))
            .collect(),
        env_state: c
            .env_state_dim()
            .ok()
            .flatten()
            .map(|e| normal([batch, e], device)),
    }
}

fn act_training(
    mut policy: ActPolicy<Dispatch>,
    device: &DispatchDevice,
    steps: usize,
    batch: usize,
) -> (f64, f64) {
    let observation = act_observation(&policy, batch, device);
    let chunk = policy.config.chunk_size;
    let shape = [batch, chunk, policy.config.action_dim().unwrap_or(1)];
    let latent = policy.config.latent_dim;
    let mut optimizer = AdamWConfig::new().init();
    timed_steps(steps, || {
        let batch_data = ActDemonstrations {
            observation: observation.clone(),
            actions: normal(shape, device),
            action_is_pad: Tensor::<Dispatch, 2>::zeros([batch, chunk], device).greater_elem(1.0),
        };
        let loss = policy
            .losses(batch_data, normal([batch, latent], device))
            .total
            .mean();
        let _: f32 = loss.clone().into_scalar().elem();
        let model = policy.model.clone();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        policy.model = optimizer.step(1e-4, model, grads);
    })
}

/// Median and 99th percentile of `steps` timed calls of `step` after one untimed one,
/// milliseconds.
fn timed_steps(steps: usize, mut step: impl FnMut()) -> (f64, f64) {
    step();
    let times: Vec<f64> = (0..steps)
        .map(|_| {
            let start = Instant::now();
            step();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    (quantile(&times, 0.5), quantile(&times, 0.99))
}
