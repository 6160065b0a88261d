//! Closed-loop evaluation over paired seeds: every controller meets the same initial
//! conditions, and all episodes of one evaluation run in lock-step so that the policy
//! sees them as one batch per tick.

use std::collections::VecDeque;
use std::time::Instant;

use burn::prelude::*;
use imago_policies::{PolicyBatch, VlaPolicy, VlaPolicyConfig};
use imago_robots::reacher2d::{ExpertConfig, Reacher2d, Reacher2dConfig, ScriptedExpert};
use imago_robots::{Action, Observation, Robot};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::camera::BatchCamera;
use crate::progress;
use crate::stats::{quantile, wilson_interval};

/// What drives the robot during an evaluation.
pub enum Controller<'a, B: Backend> {
    /// A VLA policy, acting on the mean of its action chunks.
    Policy {
        /// The policy.
        policy: &'a VlaPolicy<B>,
        /// Its config.
        config: &'a VlaPolicyConfig,
        /// Where it runs.
        device: &'a B::Device,
        /// Give the policy an instruction naming another target than the robot's goal
        /// (success still means reaching the robot's goal).
        wrong_instruction: bool,
        /// Actions of each chunk executed before re-planning (1..=K).
        execute_steps: usize,
    },
    /// Uniformly random actions within the limits.
    Random,
    /// The scripted expert with the given imperfections.
    Expert(ExpertConfig),
}

/// Per-episode outcomes of one evaluation, in seed order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalOutcome {
    /// Whether each episode succeeded.
    pub success: Vec<bool>,
    /// Ticks each episode took.
    pub length: Vec<u32>,
}

impl EvalOutcome {
    /// Number of episodes.
    pub fn episodes(&self) -> usize {
        self.success.len()
    }

    /// Number of successes.
    pub fn successes(&self) -> usize {
        self.success.iter().filter(|&&s| s).count()
    }

    /// Success rate.
    pub fn success_rate(&self) -> f64 {
        self.successes() as f64 / self.episodes().max(1) as f64
    }

    /// 95% Wilson interval of the success rate.
    pub fn interval(&self) -> (f64, f64) {
        wilson_interval(self.successes(), self.episodes())
    }

    /// Mean episode length in ticks.
    pub fn mean_length(&self) -> f64 {
        self.length.iter().map(|&l| l as f64).sum::<f64>() / self.episodes().max(1) as f64
    }
}

/// Runs one episode per seed with `controller` and reports the outcomes. A policy on
/// a wgpu GPU sees frames rendered for the whole batch in one dispatch when the batch
/// is large ([`BatchCamera::for_device`]).
pub fn evaluate<B: Backend>(
    controller: &Controller<'_, B>,
    robot_config: &Reacher2dConfig,
    seeds: &[u64],
    label: &str,
) -> anyhow::Result<EvalOutcome> {
    let camera = match controller {
        Controller::Policy { device, .. } => BatchCamera::for_device::<B>(device, seeds.len()),
        _ => BatchCamera::PerRobot,
    };
    evaluate_with_camera(controller, robot_config, seeds, label, &camera)
}

/// [`evaluate`] with the camera chosen by the caller.
pub fn evaluate_with_camera<B: Backend>(
    controller: &Controller<'_, B>,
    robot_config: &Reacher2dConfig,
    seeds: &[u64],
    label: &str,
    camera: &BatchCamera,
) -> anyhow::Result<EvalOutcome> {
    let n = seeds.len();
    let mut robots: Vec<Reacher2d> = (0..n)
        .map(|_| {
            let mut robot = Reacher2d::new(robot_config.clone());
            robot.set_frame_source(camera.frame_source());
            robot
        })
        .collect();
    let mut observations: Vec<Observation> = robots
        .iter_mut()
        .zip(seeds)
        .map(|(r, &s)| r.reset(s))
        .collect();
    camera.fill(robots.iter().zip(observations.iter_mut()))?;
    let mut experts: Vec<ScriptedExpert> = Vec::new();
    if let Controller::Expert(config) = controller {
        for (robot, &seed) in robots.iter().zip(seeds) {
            let mut expert = ScriptedExpert::new(config.clone());
            expert.begin_episode(robot, seed);
            experts.push(expert);
        }
    }
    if let Controller::Policy {
        wrong_instruction: true,
        ..
    } = controller
    {
        for ((robot, obs), &seed) in robots.iter().zip(observations.iter_mut()).zip(seeds) {
            let alternatives = robot.alternative_instructions();
            obs.instruction = alternatives[seed as usize % alternatives.len()].clone();
        }
    }
    let mut rngs: Vec<StdRng> = seeds
        .iter()
        .map(|&s| StdRng::seed_from_u64(s ^ 0x5eed))
        .collect();
    let mut queues: Vec<VecDeque<Action>> = vec![VecDeque::new(); n];
    let mut outcome = EvalOutcome {
        success: vec![false; n],
        length: vec![0; n],
    };
    let mut active: Vec<bool> = vec![true; n];
    let limit = robot_config.max_speed;
    let bar = progress::bar(label, robot_config.max_steps as u64);
    while active.iter().any(|&a| a) {
        if let Controller::Policy {
            policy,
            config,
            device,
            execute_steps,
            ..
        } = controller
        {
            let planning: Vec<usize> = (0..n)
                .filter(|&i| active[i] && queues[i].is_empty())
                .collect();
            if !planning.is_empty() {
                let chunks = plan(
                    policy,
                    config,
                    device,
                    planning.iter().map(|&i| &observations[i]),
                )?;
                for (&i, chunk) in planning.iter().zip(chunks) {
                    queues[i].extend(
                        chunk
                            .into_iter()
                            .take((*execute_steps).clamp(1, config.chunk_len)),
                    );
                }
            }
        }
        let stepping: Vec<usize> = (0..n).filter(|&i| active[i]).collect();
        for i in stepping {
            let action = match controller {
                Controller::Policy { .. } => queues[i].pop_front().expect("planned"),
                Controller::Random => Action(vec![
                    rngs[i].random_range(-limit..=limit),
                    rngs[i].random_range(-limit..=limit),
                ]),
                Controller::Expert(_) => experts[i].act(&robots[i]),
            };
            let step = robots[i].step(&action);
            let instruction = std::mem::take(&mut observations[i].instruction);
            observations[i] = step.observation;
            observations[i].instruction = instruction;
            if step.done {
                active[i] = false;
                outcome.success[i] = step.success;
                outcome.length[i] = robots[i].steps();
            }
        }
        camera.fill(
            robots
                .iter()
                .zip(observations.iter_mut())
                .zip(&active)
                .filter(|(_, running)| **running)
                .map(|(pair, _)| pair),
        )?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(outcome)
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

/// Policy latency at batch 1 (observation to action chunk on the host), in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Times `repeats` batch-1 inferences on `observation` after a few warm-up calls.
pub fn measure_latency<B: Backend>(
    policy: &VlaPolicy<B>,
    config: &VlaPolicyConfig,
    device: &B::Device,
    observation: &Observation,
    repeats: usize,
) -> anyhow::Result<Latency> {
    for _ in 0..5 {
        plan(policy, config, device, std::iter::once(observation))?;
    }
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let start = Instant::now();
        plan(policy, config, device, std::iter::once(observation))?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Latency {
        p50: quantile(&times, 0.5),
        p99: quantile(&times, 0.99),
    })
}

/// Evaluates the policy checkpoint at `dir` on `episodes` seeds from `first_seed`.
pub fn evaluate_checkpoint(
    dir: &std::path::Path,
    episodes: usize,
    first_seed: u64,
    device: &crate::device::ResolvedDevice,
) -> anyhow::Result<EvalOutcome> {
    let (policy, config, _) =
        crate::checkpoint::load_policy::<burn::Dispatch>(dir, None, &device.inference)?;
    let seeds: Vec<u64> = (0..episodes as u64)
        .map(|i| first_seed.wrapping_add(i))
        .collect();
    let controller = Controller::Policy {
        policy: &policy,
        config: &config,
        device: &device.inference,
        wrong_instruction: false,
        execute_steps: 1,
    };
    // Episodes are independent: running them in bounded batches keeps memory flat for
    // any number of them and gives the same outcomes.
    let mut outcome = EvalOutcome {
        success: Vec::with_capacity(episodes),
        length: Vec::with_capacity(episodes),
    };
    for batch in seeds.chunks(EVAL_BATCH) {
        let part = evaluate(&controller, &Reacher2dConfig::default(), batch, "eval")?;
        outcome.success.extend(part.success);
        outcome.length.extend(part.length);
    }
    Ok(outcome)
}

/// Episodes one lock-step evaluation of a checkpoint runs at once.
pub const EVAL_BATCH: usize = 1024;
