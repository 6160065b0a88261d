//! Sampling actions from a policy: the exploring action a rollout or the daemon's
//! actor executes, its log-density (recorded as the behaviour density), and the
//! chunk the policy intended; and the mean chunks evaluation acts on. One module,
//! shared by policy rollouts (`act::rollout`) and the daemon's actor
//! (`engine::actor`), so both record the same behaviour.

use burn::prelude::*;
use imago_policies::{HostPolicy, HostScratch, PolicyBatch, VlaPolicy, VlaPolicyConfig};
use imago_robots::{Action, Observation};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal};

/// A command (or a chunk of commands, one after another) in units of the action
/// limit, clamped to it, in robot units.
pub fn to_robot_units(normalised: &[f32], limits: &[f32]) -> Action {
    Action(
        normalised
            .iter()
            .zip(limits.iter().cycle())
            .map(|(v, l)| v.clamp(-1.0, 1.0) * l)
            .collect(),
    )
}

/// The exploration noise stream of the episode from `seed` under policy `version`.
pub fn exploration_rng(seed: u64, version: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ version.rotate_left(17) ^ 0x0c01_1ec7)
}

/// A command sampled for one robot: its first action and that action's density
/// (normalised units), and the whole chunk the policy intended (its mean for a
/// Gaussian head, the sample for a flow head).
#[derive(Debug, Clone, PartialEq)]
pub struct SampledCommand {
    /// The first action, clamped to the limits.
    pub action: Vec<f32>,
    /// Its log-density under the policy (Gaussian heads only).
    pub log_prob: Option<f32>,
    /// The intended chunk, `[steps * action_dim]`.
    pub chunk: Vec<f32>,
}

/// The first action of a sampled chunk for every observation of `batch` (robot
/// `acting[row]`, whose noise comes from `rngs[acting[row]]`), in units of the action
/// limit, with its log-density under the policy (Gaussian heads only).
pub fn sample_first_actions<B: Backend>(
    policy: &VlaPolicy<B>,
    batch: &PolicyBatch,
    device: &B::Device,
    rngs: &mut [StdRng],
    acting: &[usize],
    exploration: f32,
) -> anyhow::Result<Vec<SampledCommand>> {
    let read = |t: Tensor<B, 3>| -> anyhow::Result<Vec<f32>> {
        t.into_data()
            .convert::<f32>()
            .to_vec()
            .map_err(|e| anyhow::anyhow!("cannot read policy output: {e:?}"))
    };
    let normal = Normal::new(0.0f32, 1.0).expect("unit normal");
    let input = batch.to_input(device);
    match policy.gaussian(input.clone()) {
        Some(chunk) => {
            let [_, k, a] = chunk.mean.dims();
            let (mean, log_std) = (read(chunk.mean)?, read(chunk.log_std)?);
            Ok(sample_gaussian(
                &mean,
                &log_std,
                (k, a),
                rngs,
                acting,
                exploration,
            ))
        }
        None => {
            let n = acting.len();
            let (k, a) = policy.chunk_shape();
            let width = k * a;
            let noise: Vec<f32> = acting
                .iter()
                .flat_map(|&i| {
                    let rng = &mut rngs[i];
                    (0..width)
                        .map(|_| normal.sample(rng) * exploration)
                        .collect::<Vec<_>>()
                })
                .collect();
            let noise = Tensor::<B, 3>::from_data(TensorData::new(noise, [n, k, a]), device);
            let chunks = read(policy.act(input, Some(noise)))?;
            Ok((0..n)
                .map(|row| {
                    let chunk = chunks[row * width..(row + 1) * width].to_vec();
                    SampledCommand {
                        action: chunk[..a].to_vec(),
                        log_prob: None,
                        chunk,
                    }
                })
                .collect())
        }
    }
}

/// [`sample_first_actions`] through the policy's host forward ([`HostPolicy`]: the
/// same numbers within 1e-5, without tensors), for a Gaussian-head policy on the CPU.
pub fn sample_first_actions_on_host(
    host: &HostPolicy,
    scratch: &mut HostScratch,
    batch: &PolicyBatch,
    rngs: &mut [StdRng],
    acting: &[usize],
    exploration: f32,
) -> Vec<SampledCommand> {
    let (k, a) = host.chunk_shape();
    let n = batch.len();
    let (mut mean, mut log_std) = (vec![0.0; n * k * a], vec![0.0; n * k * a]);
    for row in 0..n {
        let rows = row * k * a..(row + 1) * k * a;
        host.gaussian(
            batch,
            row,
            scratch,
            &mut mean[rows.clone()],
            &mut log_std[rows],
        );
    }
    sample_gaussian(&mean, &log_std, (k, a), rngs, acting, exploration)
}

/// The first action of a chunk sampled from each row's Gaussian (`mean` and
/// `log_std` `[rows, k, a]`, row-major; row `row` explores with `rngs[acting[row]]`,
/// its standard deviations scaled by `exploration`), clamped to the limits, with its
/// log-density as recorded; the intended chunk is the mean.
fn sample_gaussian(
    mean: &[f32],
    log_std: &[f32],
    (k, a): (usize, usize),
    rngs: &mut [StdRng],
    acting: &[usize],
    exploration: f32,
) -> Vec<SampledCommand> {
    let normal = Normal::new(0.0f32, 1.0).expect("unit normal");
    let mut out = Vec::with_capacity(acting.len());
    for (row, &i) in acting.iter().enumerate() {
        let first = row * k * a;
        let mut action = Vec::with_capacity(a);
        let mut log_prob = 0.0f32;
        for j in first..first + a {
            let std = log_std[j].exp() * exploration.max(1e-6);
            let z: f32 = normal.sample(&mut rngs[i]);
            // The density of the action as recorded: clamped to the limit.
            let value = (mean[j] + std * z).clamp(-1.0, 1.0);
            let z = (value - mean[j]) / std;
            action.push(value);
            log_prob -= 0.5 * z * z + std.ln() + 0.5 * (2.0 * std::f32::consts::PI).ln();
        }
        out.push(SampledCommand {
            action,
            log_prob: Some(log_prob),
            chunk: mean[first..first + k * a].to_vec(),
        });
    }
    out
}

/// The mean action chunks of `policy` for `observations`, in robot units.
pub fn plan<'o, B: Backend>(
    policy: &VlaPolicy<B>,
    config: &VlaPolicyConfig,
    device: &B::Device,
    observations: impl Iterator<Item = &'o Observation>,
) -> anyhow::Result<Vec<Vec<Action>>> {
    let mut batch = PolicyBatch::new(config);
    for obs in observations {
        batch.push(obs)?;
    }
    let n = batch.len();
    let mean: Vec<f32> = policy
        .act(batch.to_input(device), None)
        .into_data()
        .convert::<f32>()
        .to_vec()
        .map_err(|e| anyhow::anyhow!("cannot read policy output: {e:?}"))?;
    let a = config.action_dim();
    Ok((0..n)
        .map(|i| {
            (0..config.chunk_len)
                .map(|k| {
                    let start = (i * config.chunk_len + k) * a;
                    Action(
                        mean[start..start + a]
                            .iter()
                            .zip(&config.action_limit)
                            .map(|(v, l)| v * l)
                            .collect(),
                    )
                })
                .collect()
        })
        .collect())
}
