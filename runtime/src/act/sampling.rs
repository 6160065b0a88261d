//! Sampling actions from a policy: the exploring action a rollout or the daemon's
//! actor executes, its log-density (recorded as the behaviour density), and the
//! chunk the policy intended; and the mean chunks evaluation acts on. One module,
//! shared by policy rollouts (`act::rollout`) and the daemon's actor
//! (`engine::actor`), so both record the same behaviour.

use burn::prelude::*;
use imago_policies::{HostPolicy, HostScratch, Policy, PolicyBatch, PolicyConfig};
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

/// The scales of sampling noise relative to a policy's own spread that a rollout's
/// `exploration`, the actor's and an evaluation's `--sampling-noise` accept.
pub const NOISE_SCALES: std::ops::RangeInclusive<f32> = 0.0..=10.0;

/// The exploration noise stream of the episode from `seed` under policy `version`.
pub fn exploration_rng(seed: u64, version: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ version.rotate_left(17) ^ 0x0c01_1ec7)
}

/// A command sampled for one robot: its leading actions (the first, or the first
/// few of the chunk when a rollout executes them before sampling again), the first
/// action's density (normalised units), and the whole chunk the policy intended (its
/// mean for a Gaussian head, the sample for a flow head).
#[derive(Debug, Clone, PartialEq)]
pub struct SampledCommand {
    /// The leading actions, one after another (`[leading * action_dim]`), each
    /// clamped to the limits.
    pub action: Vec<f32>,
    /// The first action's log-density under the policy (Gaussian heads only).
    pub log_prob: Option<f32>,
    /// The intended chunk, `[steps * action_dim]`.
    pub chunk: Vec<f32>,
}

/// The first `leading` actions of a sampled chunk for every observation of `batch`
/// (robot `acting[row]`, whose noise comes from `rngs[acting[row]]`), in units of the
/// action limit, with the first one's log-density under the policy (Gaussian heads
/// only); `leading` is at most the chunk's length. Through `host`,
/// the policy's host forward with the caller's buffers ([`Policy::host_copy`]: the same
/// numbers within 1e-5, without tensors), where there is one; else through burn's
/// forward of `policy` on `device`.
pub fn sample_leading_actions<B: Backend>(
    policy: &Policy<B>,
    host: Option<(&HostPolicy, &mut HostScratch)>,
    batch: &PolicyBatch,
    device: &B::Device,
    (rngs, acting): (&mut [StdRng], &[usize]),
    (exploration, leading): (f32, usize),
) -> anyhow::Result<Vec<SampledCommand>> {
    let (k, _) = policy.chunk_shape();
    anyhow::ensure!(
        (1..=k).contains(&leading),
        "cannot execute {leading} actions of a chunk of {k}"
    );
    match host {
        Some((host, scratch)) => Ok(sample_on_host(
            host,
            scratch,
            batch,
            (rngs, acting),
            (exploration, leading),
        )),
        None => sample_through_burn(
            policy,
            batch,
            device,
            (rngs, acting),
            (exploration, leading),
        ),
    }
}

/// [`sample_leading_actions`] through burn's forward.
fn sample_through_burn<B: Backend>(
    policy: &Policy<B>,
    batch: &PolicyBatch,
    device: &B::Device,
    (rngs, acting): (&mut [StdRng], &[usize]),
    (exploration, leading): (f32, usize),
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
                (&mean, &log_std),
                (k, a),
                (rngs, acting),
                (exploration, leading),
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
                        action: chunk[..leading * a].to_vec(),
                        log_prob: None,
                        chunk,
                    }
                })
                .collect())
        }
    }
}

/// [`sample_leading_actions`] through the policy's host forward.
fn sample_on_host(
    host: &HostPolicy,
    scratch: &mut HostScratch,
    batch: &PolicyBatch,
    (rngs, acting): (&mut [StdRng], &[usize]),
    (exploration, leading): (f32, usize),
) -> Vec<SampledCommand> {
    let (k, a) = host.chunk_shape();
    let (mean, log_std) = if batch.len() == 1 {
        // The control loop's case: on the caller's thread, with its buffers.
        let (mut mean, mut log_std) = (vec![0.0; k * a], vec![0.0; k * a]);
        host.gaussian(batch, 0, scratch, &mut mean, &mut log_std);
        (mean, log_std)
    } else {
        host.gaussian_rows(batch)
    };
    sample_gaussian(
        (&mean, &log_std),
        (k, a),
        (rngs, acting),
        (exploration, leading),
    )
}

/// The first `leading` actions of a chunk sampled from each row's Gaussian (`mean`
/// and `log_std` `[rows, k, a]`, row-major; row `row` explores with
/// `rngs[acting[row]]`, its standard deviations scaled by `exploration`), clamped to
/// the limits, with the first one's log-density as recorded; the intended chunk is
/// the mean. Each position draws its own noise, the first before the others, so one
/// leading action draws what it always drew.
fn sample_gaussian(
    (mean, log_std): (&[f32], &[f32]),
    (k, a): (usize, usize),
    (rngs, acting): (&mut [StdRng], &[usize]),
    (exploration, leading): (f32, usize),
) -> Vec<SampledCommand> {
    let normal = Normal::new(0.0f32, 1.0).expect("unit normal");
    let mut out = Vec::with_capacity(acting.len());
    for (row, &i) in acting.iter().enumerate() {
        let first = row * k * a;
        let mut action = Vec::with_capacity(leading * a);
        let mut log_prob = 0.0f32;
        for j in first..first + leading * a {
            let std = log_std[j].exp() * exploration.max(1e-6);
            let z: f32 = normal.sample(&mut rngs[i]);
            // The density of the action as recorded: clamped to the limit.
            let value = (mean[j] + std * z).clamp(-1.0, 1.0);
            let z = (value - mean[j]) / std;
            action.push(value);
            if j < first + a {
                log_prob -= 0.5 * z * z + std.ln() + 0.5 * (2.0 * std::f32::consts::PI).ln();
            }
        }
        out.push(SampledCommand {
            action,
            log_prob: Some(log_prob),
            chunk: mean[first..first + k * a].to_vec(),
        });
    }
    out
}

/// The actions, in robot units, that a policy executes from each observation before
/// it plans again: the first `executed` (1..=its chunk length) of the chunk it plans,
/// its mean when `noise` is 0, else a sample with its spread scaled by `noise` (the
/// flow head: its noise), row `i` drawing from `rngs[acting[i]]`. Through `host`, the
/// policy's host forward, where there is one.
pub fn leading_actions<'o, B: Backend>(
    (policy, config, device): (&Policy<B>, &PolicyConfig, &B::Device),
    host: Option<&HostPolicy>,
    observations: impl Iterator<Item = &'o Observation>,
    (executed, noise): (usize, f32),
    (rngs, acting): (&mut [StdRng], &[usize]),
) -> anyhow::Result<Vec<Vec<Action>>> {
    let k = config.chunk_len();
    anyhow::ensure!(
        (1..=k).contains(&executed),
        "cannot execute {executed} actions of a chunk of {k}"
    );
    if noise == 0.0 {
        let chunks = match host {
            Some(host) => plan_on_host(host, config, observations)?,
            None => plan(policy, config, device, observations)?,
        };
        return Ok(chunks
            .into_iter()
            .map(|chunk| chunk.into_iter().take(executed).collect())
            .collect());
    }
    let mut batch = PolicyBatch::new(&config.input_spec());
    for obs in observations {
        batch.push(obs)?;
    }
    let mut scratch = HostScratch::default();
    let sampled = sample_leading_actions(
        policy,
        host.map(|host| (host, &mut scratch)),
        &batch,
        device,
        (rngs, acting),
        (noise, executed),
    )?;
    let limits = config.action_limit();
    Ok(sampled
        .iter()
        .map(|command| {
            command
                .action
                .chunks(limits.len())
                .map(|action| to_robot_units(action, limits))
                .collect()
        })
        .collect())
}

/// The mean action chunks of `policy` for `observations`, in robot units.
pub fn plan<'o, B: Backend>(
    policy: &Policy<B>,
    config: &PolicyConfig,
    device: &B::Device,
    observations: impl Iterator<Item = &'o Observation>,
) -> anyhow::Result<Vec<Vec<Action>>> {
    let mut batch = PolicyBatch::new(&config.input_spec());
    for obs in observations {
        batch.push(obs)?;
    }
    let mean: Vec<f32> = policy
        .act(batch.to_input(device), None)
        .into_data()
        .convert::<f32>()
        .to_vec()
        .map_err(|e| anyhow::anyhow!("cannot read policy output: {e:?}"))?;
    Ok(chunks_in_robot_units(&mean, batch.len(), config))
}

/// [`plan`] through the policy's host forward (the same numbers within 1e-5).
pub fn plan_on_host<'o>(
    host: &HostPolicy,
    config: &PolicyConfig,
    observations: impl Iterator<Item = &'o Observation>,
) -> anyhow::Result<Vec<Vec<Action>>> {
    let mut batch = PolicyBatch::new(&config.input_spec());
    for obs in observations {
        batch.push(obs)?;
    }
    let (mean, _) = host.gaussian_rows(&batch);
    Ok(chunks_in_robot_units(&mean, batch.len(), config))
}

/// `n` mean chunks `[n, K, A]` in units of the action limit, as actions in robot units.
fn chunks_in_robot_units(mean: &[f32], n: usize, config: &PolicyConfig) -> Vec<Vec<Action>> {
    let a = config.action_dim();
    (0..n)
        .map(|i| {
            (0..config.chunk_len())
                .map(|k| {
                    let start = (i * config.chunk_len() + k) * a;
                    Action(
                        mean[start..start + a]
                            .iter()
                            .zip(config.action_limit())
                            .map(|(v, l)| v * l)
                            .collect(),
                    )
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use burn::Dispatch;
    use burn::backend::ndarray::NdArrayDevice;

    use super::*;
    use imago_robots::Robot;

    use crate::robot::RobotConfig;

    /// Observations of a few reacher2d episodes after some random-looking commands.
    fn observations(robot: &RobotConfig, count: u64) -> Vec<Observation> {
        (0..count)
            .map(|seed| {
                let mut sim = robot.build().unwrap();
                let mut obs = sim.reset(seed);
                for tick in 0..seed {
                    let a = (tick as f32 * 0.9 + seed as f32).sin() * 0.3;
                    obs = sim.step(&Action(vec![a, -a])).observation;
                }
                obs
            })
            .collect()
    }

    #[test]
    fn the_host_paths_plan_and_sample_as_burns_forward_does() {
        let device = burn::DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let robot = RobotConfig::default();
        let config =
            PolicyConfig::for_robot(imago_policies::Architecture::Vla, &robot.spec()).unwrap();
        let policy = config.init::<Dispatch>(&device);
        let host = policy.host_copy().expect("a Gaussian head on the CPU");
        let observations = observations(&robot, 5);

        let burn = plan(&policy, &config, &device, observations.iter()).unwrap();
        let on_host = plan_on_host(&host, &config, observations.iter()).unwrap();
        assert_eq!(burn.len(), on_host.len());
        for (b, h) in burn.iter().flatten().zip(on_host.iter().flatten()) {
            for (x, y) in b.0.iter().zip(&h.0) {
                assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{b:?} vs {h:?}");
            }
        }

        let mut batch = PolicyBatch::new(&config.input_spec());
        observations.iter().for_each(|o| batch.push(o).unwrap());
        let acting: Vec<usize> = (0..observations.len()).collect();
        let rngs = || -> Vec<StdRng> { (0..5).map(|s| exploration_rng(s, 1)).collect() };
        let sample = |host: Option<(&HostPolicy, &mut HostScratch)>, leading| {
            sample_leading_actions(
                &policy,
                host,
                &batch,
                &device,
                (&mut rngs(), &acting),
                (1.0, leading),
            )
            .unwrap()
        };
        let mut scratch = HostScratch::default();
        let burn = sample(None, 2);
        let on_host = sample(Some((&host, &mut scratch)), 2);
        for (b, h) in burn.iter().zip(&on_host) {
            assert_eq!(b.action.len(), 2 * config.action_dim());
            for (x, y) in b.action.iter().zip(&h.action) {
                assert!((x - y).abs() <= 1e-4, "{b:?} vs {h:?}");
            }
            let (x, y) = (b.log_prob.unwrap(), h.log_prob.unwrap());
            assert!((x - y).abs() <= 1e-3 * (1.0 + x.abs()), "{x} vs {y}");
        }
        // One leading action is the first of two, with the same density: the first
        // position draws its noise first.
        for (one, two) in sample(None, 1).iter().zip(&burn) {
            assert_eq!(one.action[..], two.action[..config.action_dim()]);
            assert_eq!(one.log_prob, two.log_prob);
        }
        let k = config.chunk_len();
        let refused = sample_leading_actions(
            &policy,
            None,
            &batch,
            &device,
            (&mut rngs(), &acting),
            (1.0, k + 1),
        );
        assert!(refused.is_err(), "more actions than the chunk holds");
        // A flow head, or a GPU, has no host forward.
        let flow = config
            .clone()
            .with_head(imago_policies::ActionHeadKind::Flow);
        assert!(flow.init::<Dispatch>(&device).host_copy().is_none());
    }
}
