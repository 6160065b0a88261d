//! Closed-loop evaluation over paired seeds: every controller meets the same initial
//! conditions, and all episodes of one evaluation run in lock-step so that the policy
//! sees them as one batch per tick.

use std::collections::VecDeque;
use std::time::Instant;

use burn::prelude::*;
use imago_policies::{HostPolicy, Policy, PolicyConfig};
use imago_robots::{Action, ExpertConfig, Observation, Robot};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::act::camera::BatchCamera;
use crate::act::episode::TickCommand;
use crate::act::lerobot_driver::{LeRobotDriver, LeRobotEpisode};
use crate::act::lock_step::LockStep;
use crate::act::planned::{ChunkPlanner, planned_leading_actions};
use crate::act::sampling::{leading_actions, plan, plan_on_host};
use crate::progress;
use crate::robot::{RobotConfig, SimRobot};
use crate::stats::{MeanInterval, mean_interval, quantile, wilson_interval};

/// What drives the robot during an evaluation.
pub enum Controller<'a, B: Backend> {
    /// A VLA policy, acting on the mean of its action chunks or on samples of them.
    Policy {
        /// The policy.
        policy: &'a Policy<B>,
        /// Its config.
        config: &'a PolicyConfig,
        /// Where it runs.
        device: &'a B::Device,
        /// Give the policy one of the robot's alternative instructions, naming another
        /// goal than the robot's (success still means the robot's goal).
        wrong_instruction: bool,
        /// Actions of each chunk executed before re-planning (1..=K; more is an
        /// error).
        execute_steps: usize,
        /// Scale of the sampling noise relative to the policy's own spread: 0 acts on
        /// each chunk's mean, 1 samples the policy as it was trained. Each episode's
        /// noise comes from its seed, so two policies evaluated on the same seeds
        /// draw the same noise.
        sampling_noise: f32,
    },
    /// A VLA policy that proposes each chunk and a planner that plans from the
    /// proposal ([`ChunkPlanner`]): candidates drawn around the policy's Gaussian,
    /// its spread scaled by `sampling_noise`, are imagined in a world model (or
    /// stepped in copies of the simulated robot) and one of the best executed.
    Planned {
        /// The policy.
        policy: &'a Policy<B>,
        /// Its config.
        config: &'a PolicyConfig,
        /// Where policy and world model run.
        device: &'a B::Device,
        /// The planner and its model.
        planner: &'a ChunkPlanner<B>,
        /// Actions of each planned chunk executed before planning again.
        execute_steps: usize,
        /// Scale of the proposal's spread relative to the policy's own.
        sampling_noise: f32,
    },
    /// A LeRobot policy, through its own queues (one per episode).
    LeRobot(&'a LeRobotDriver<B>),
    /// Uniformly random actions within the limits.
    Random,
    /// The robot's scripted expert with the given imperfections.
    Expert(ExpertConfig),
}

impl<B: Backend> Controller<'_, B> {
    /// The actions, in robot units, that an imago policy executes from each of
    /// `observations` before it plans again (its leading actions, or those of the chunk
    /// its world model planned), observation `k` drawing from `rngs[acting[k]]`
    /// (through `host`, the policy's host forward, where there is one); `None` for a
    /// controller that does not plan chunks. `robots`, the simulated robots the
    /// observations came from, where there are, are what a simulator planner copies.
    pub(crate) fn leading_actions(
        &self,
        host: Option<&HostPolicy>,
        (observations, robots): (&[&Observation], Option<&[&SimRobot]>),
        (rngs, acting): (&mut [StdRng], &[usize]),
    ) -> anyhow::Result<Option<Vec<Vec<Action>>>> {
        let actions = match self {
            Controller::Policy {
                policy,
                config,
                device,
                execute_steps,
                sampling_noise,
                ..
            } => leading_actions(
                (*policy, *config, *device),
                host,
                observations.iter().copied(),
                (*execute_steps, *sampling_noise),
                (rngs, acting),
            )?,
            Controller::Planned {
                policy,
                config,
                device,
                planner,
                execute_steps,
                sampling_noise,
            } => {
                // The acting lanes' generators, lent to the planner and put back.
                let mut lent: Vec<StdRng> = acting
                    .iter()
                    .map(|&i| std::mem::replace(&mut rngs[i], StdRng::seed_from_u64(0)))
                    .collect();
                let actions = planned_leading_actions(
                    (*policy, *config, *device),
                    host,
                    planner,
                    (observations, robots),
                    (*execute_steps, *sampling_noise),
                    &mut lent,
                );
                for (&i, rng) in acting.iter().zip(lent) {
                    rngs[i] = rng;
                }
                actions?
            }
            _ => return Ok(None),
        };
        Ok(Some(actions))
    }
}

/// Per-episode outcomes of one evaluation, in seed order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalOutcome {
    /// Whether each episode succeeded.
    pub success: Vec<bool>,
    /// Ticks each episode took.
    pub length: Vec<u32>,
    /// The largest coverage of the goal each episode reached, for robots whose task
    /// is scored by coverage (pusht); empty for others.
    #[serde(default)]
    pub max_coverage: Vec<f64>,
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

    /// Mean over episodes of the largest coverage each reached, with its 95% interval;
    /// `None` for a robot whose task is not scored by coverage.
    pub fn mean_max_coverage(&self) -> Option<MeanInterval> {
        (!self.max_coverage.is_empty()).then(|| mean_interval(&self.max_coverage))
    }

    /// This outcome followed by `more` (episodes in order).
    pub fn extend(&mut self, more: EvalOutcome) {
        self.success.extend(more.success);
        self.length.extend(more.length);
        self.max_coverage.extend(more.max_coverage);
    }
}

/// Runs one episode per seed with `controller` and reports the outcomes. A policy on
/// a wgpu GPU sees frames rendered for the whole batch in one dispatch when the batch
/// is large ([`BatchCamera::for_device`]).
pub fn evaluate<B: Backend>(
    controller: &Controller<'_, B>,
    robot: &RobotConfig,
    seeds: &[u64],
    label: &str,
) -> anyhow::Result<EvalOutcome>
where
    B::Device: 'static,
{
    // A planned policy's world model reads every frame, so each robot draws its own.
    let camera = match controller {
        Controller::Policy { device, .. } => {
            BatchCamera::for_device::<B>(device, robot, seeds.len())
        }
        _ => BatchCamera::PerRobot,
    };
    evaluate_with_camera(controller, robot, seeds, label, &camera)
}

/// [`evaluate`] with the camera chosen by the caller. An expert controller on a robot
/// without an expert is an error.
pub fn evaluate_with_camera<B: Backend>(
    controller: &Controller<'_, B>,
    robot: &RobotConfig,
    seeds: &[u64],
    label: &str,
    camera: &BatchCamera,
) -> anyhow::Result<EvalOutcome>
where
    B::Device: 'static,
{
    let spec = robot.spec();
    if let Controller::Policy { config, .. } | Controller::Planned { config, .. } = controller {
        anyhow::ensure!(
            config.action_limit() == spec.action_limit,
            "the policy acts in another action space ({:?}) than {} ({:?})",
            config.action_limit(),
            spec.summary(),
            spec.action_limit
        );
    }
    if let (Controller::LeRobot(driver), Some(&first)) = (controller, seeds.first()) {
        // A Diffusion Policy's noise comes from the backend's generator: seeded by the
        // batch's first seed, the same seeds give the same evaluation, and two policies
        // evaluated on them meet the same noise (paired comparisons).
        B::seed(driver.device(), first);
    }
    let mut run = LockStep::start(robot, seeds, camera, None)?;
    let mut commands = EvalCommands::new(controller, &mut run, robot)?;
    let bar = progress::bar(label, spec.max_steps as u64);
    while run.any_running() {
        let tick = commands.next(&mut run)?;
        run.step(tick)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let lanes = run.lanes();
    let max_coverage: Option<Vec<f64>> = lanes.iter().map(|l| l.episode.max_coverage()).collect();
    Ok(EvalOutcome {
        success: lanes.iter().map(|l| l.episode.succeeded()).collect(),
        length: lanes.iter().map(|l| l.episode.steps()).collect(),
        max_coverage: max_coverage.unwrap_or_default(),
    })
}

/// Each tick's commands of an evaluation's controller: a policy's planned chunks
/// (executed `execute_steps` at a time), uniform random actions, or the expert's.
struct EvalCommands<'c, 'a, B: Backend> {
    controller: &'c Controller<'a, B>,
    /// On a CPU, the host forward plans (the same chunks within 1e-5, without tensors).
    host: Option<HostPolicy>,
    queues: Vec<VecDeque<Action>>,
    /// A LeRobot policy's episodes, one per lane.
    lerobot: Vec<LeRobotEpisode<B>>,
    rngs: Vec<StdRng>,
    action_limit: Vec<f32>,
}

impl<'c, 'a, B: Backend> EvalCommands<'c, 'a, B> {
    /// Starts the robots' experts for an expert controller (an error on a robot
    /// without one) and gives a policy the wrong instruction when asked.
    fn new(
        controller: &'c Controller<'a, B>,
        run: &mut LockStep<'_>,
        robot: &RobotConfig,
    ) -> anyhow::Result<Self> {
        for lane in run.lanes_mut() {
            let seed = lane.seed();
            match controller {
                Controller::Expert(config) => anyhow::ensure!(
                    lane.robot.start_expert(config, seed),
                    "robot {} has no scripted expert",
                    robot.name()
                ),
                Controller::Policy {
                    wrong_instruction: true,
                    ..
                } => {
                    let alternatives = lane.robot.alternative_instructions();
                    if !alternatives.is_empty() {
                        let wrong = alternatives[seed as usize % alternatives.len()].clone();
                        lane.episode.override_instruction(wrong);
                    }
                }
                _ => {}
            }
        }
        let seeds = run.lanes().iter().map(|lane| lane.seed());
        Ok(Self {
            controller,
            host: match controller {
                Controller::Policy { policy, .. } | Controller::Planned { policy, .. } => {
                    policy.host_copy()
                }
                _ => None,
            },
            queues: vec![VecDeque::new(); run.lanes().len()],
            lerobot: match controller {
                Controller::LeRobot(driver) => {
                    run.lanes().iter().map(|_| driver.new_episode()).collect()
                }
                _ => Vec::new(),
            },
            rngs: seeds.map(|s| StdRng::seed_from_u64(s ^ 0x5eed)).collect(),
            action_limit: robot.spec().action_limit,
        })
    }

    /// Fills the empty queues of lanes `planning` with an imago policy's next plan.
    fn plan_for(&mut self, run: &LockStep<'_>, planning: &[usize]) -> anyhow::Result<()> {
        let lanes = run.lanes();
        let observations: Vec<&Observation> = planning
            .iter()
            .map(|&i| lanes[i].episode.observation())
            .collect();
        let robots: Vec<&SimRobot> = planning.iter().map(|&i| &lanes[i].robot).collect();
        let planned = self.controller.leading_actions(
            self.host.as_ref(),
            (&observations, Some(&robots)),
            (&mut self.rngs, planning),
        )?;
        for (&i, chunk) in planning.iter().zip(planned.unwrap_or_default()) {
            self.queues[i].extend(chunk);
        }
        Ok(())
    }

    /// A command for every running lane.
    fn next(&mut self, run: &mut LockStep<'_>) -> anyhow::Result<Vec<Option<TickCommand>>> {
        let running = run.running();
        let planning: Vec<usize> = running
            .iter()
            .copied()
            .filter(|&i| self.queues[i].is_empty())
            .collect();
        if !planning.is_empty() {
            self.plan_for(run, &planning)?;
        }
        // A LeRobot policy acts for every running lane at once (its chunks batched).
        let mut lerobot_actions = match self.controller {
            Controller::LeRobot(driver) => {
                let lanes = run.lanes();
                let observations: Vec<&Observation> = running
                    .iter()
                    .map(|&i| lanes[i].episode.observation())
                    .collect();
                let episodes = self
                    .lerobot
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| running.contains(i))
                    .map(|(_, e)| e);
                driver.act(episodes.zip(observations).collect())?
            }
            _ => Vec::new(),
        }
        .into_iter();
        let mut commands = vec![None; run.lanes().len()];
        for i in running {
            let action = match self.controller {
                Controller::Policy { .. } | Controller::Planned { .. } => self.queues[i]
                    .pop_front()
                    .ok_or_else(|| anyhow::anyhow!("the policy planned no action"))?,
                Controller::LeRobot(_) => lerobot_actions
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("the LeRobot policy gave no action"))?,
                Controller::Random => Action(
                    self.action_limit
                        .iter()
                        .map(|&limit| self.rngs[i].random_range(-limit..=limit))
                        .collect(),
                ),
                Controller::Expert(_) => run.lanes_mut()[i].expert_action()?,
            };
            commands[i] = Some(TickCommand::demonstration(action));
        }
        Ok(commands)
    }
}

/// Policy latency at batch 1 (observation to action chunk on the host), in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Times `repeats` batch-1 inferences on `observation` after a few warm-up calls, on
/// the path the robot runs the policy on (`Policy::host_copy`: the host forward, else
/// burn's).
pub fn measure_latency<B: Backend>(
    policy: &Policy<B>,
    config: &PolicyConfig,
    device: &B::Device,
    observation: &Observation,
    repeats: usize,
) -> anyhow::Result<Latency> {
    // The robot's path: the host forward where the policy has one (its weights copied
    // out once, as the actor does when a version is published), else burn's.
    match policy.host_copy() {
        Some(host) => time_calls(5, repeats, || {
            plan_on_host(&host, config, std::iter::once(observation)).map(drop)
        }),
        None => time_calls(5, repeats, || {
            plan(policy, config, device, std::iter::once(observation)).map(drop)
        }),
    }
}

/// The latency of `call` over `repeats` timed calls after `warm_up` untimed ones.
pub fn time_calls(
    warm_up: usize,
    repeats: usize,
    mut call: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Latency> {
    for _ in 0..warm_up {
        call()?;
    }
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let start = Instant::now();
        call()?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Latency {
        p50: quantile(&times, 0.5),
        p99: quantile(&times, 0.99),
    })
}

#[cfg(test)]
mod tests {
    use burn::backend::ndarray::NdArrayDevice;
    use burn::{Dispatch, DispatchDevice};

    use super::*;
    use crate::act::camera::tests::batched;

    /// Receding horizon: a policy executing `k` actions per plan sends the first `k`
    /// actions of the chunk planned from the observation at which it planned, then
    /// plans again from the observation it has reached.
    #[test]
    fn a_policy_executes_the_first_actions_of_each_plan_then_plans_again() {
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let robot = crate::robot::reacher2d_with("max_steps = 20");
        let (config, policy) = compact_vla(&robot, &device, 7);
        let executed = config.chunk_len() - 1;
        assert!(executed >= 2, "the default chunk is long enough to test");
        let controller = Controller::Policy {
            policy: &policy,
            config: &config,
            device: &device,
            wrong_instruction: false,
            execute_steps: executed,
            sampling_noise: 0.0,
        };
        let mut run = LockStep::start(&robot, &[3], &BatchCamera::PerRobot, None).unwrap();
        let mut commands = EvalCommands::new(&controller, &mut run, &robot).unwrap();
        let mut previous_plan: Option<Vec<Action>> = None;
        for _ in 0..3 {
            let observation = run.lanes()[0].episode.observation();
            let planned = plan(&policy, &config, &device, std::iter::once(observation))
                .unwrap()
                .remove(0);
            if let Some(previous) = &previous_plan {
                // Had it not planned again, the next action would be the old chunk's.
                assert!(distance(&previous[executed], &planned[0]) > 1e-3);
            }
            for expected in &planned[..executed] {
                let tick = commands.next(&mut run).unwrap();
                let sent = &tick[0].as_ref().expect("the lane runs").action;
                assert!(distance(sent, expected) < 1e-4, "{sent:?} vs {expected:?}");
                run.step(tick).unwrap();
            }
            previous_plan = Some(planned);
        }
    }

    /// A sampling policy's noise comes from the episode's seed: the same seed draws
    /// the same actions, which part from the mean's by the policy's spread scaled by
    /// the noise.
    #[test]
    fn a_sampling_policy_draws_its_noise_from_the_episode_seed() {
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let robot = crate::robot::reacher2d_with("max_steps = 6");
        let (config, policy) = compact_vla(&robot, &device, 9);
        let sent = |sampling_noise: f32| -> Vec<Action> {
            let controller = Controller::Policy {
                policy: &policy,
                config: &config,
                device: &device,
                wrong_instruction: false,
                execute_steps: 2,
                sampling_noise,
            };
            let mut run = LockStep::start(&robot, &[3], &BatchCamera::PerRobot, None).unwrap();
            let mut commands = EvalCommands::new(&controller, &mut run, &robot).unwrap();
            (0..4)
                .map(|_| {
                    let tick = commands.next(&mut run).unwrap();
                    let action = tick[0].as_ref().expect("the lane runs").action.clone();
                    run.step(tick).unwrap();
                    action
                })
                .collect()
        };
        let (mean, sampled) = (sent(0.0), sent(1.0));
        assert_eq!(sampled, sent(1.0), "the same seed, the same noise");
        assert!(
            distance(&sampled[0], &mean[0]) > 1e-3,
            "{sampled:?} vs {mean:?}"
        );
        for (barely, mean) in sent(1e-4).iter().zip(&mean) {
            assert!(distance(barely, mean) < 1e-3, "{barely:?} vs {mean:?}");
        }
    }

    /// A small VLA for `robot`, its weights drawn on `device` from `seed`.
    fn compact_vla(
        robot: &RobotConfig,
        device: &DispatchDevice,
        seed: u64,
    ) -> (PolicyConfig, Policy<Dispatch>) {
        Dispatch::seed(device, seed);
        let config = PolicyConfig::for_robot(imago_policies::Architecture::Vla, &robot.spec())
            .unwrap()
            .compact();
        let policy = config.init::<Dispatch>(device);
        (config, policy)
    }

    fn distance(a: &Action, b: &Action) -> f32 {
        a.0.iter().zip(&b.0).map(|(x, y)| (x - y).abs()).sum()
    }

    #[test]
    fn a_policy_evaluates_the_same_on_batched_frames() {
        let Some(camera) = batched() else { return };
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let robot = crate::robot::reacher2d_with("max_steps = 6");
        let (config, policy) = compact_vla(&robot, &device, 5);
        let controller = Controller::Policy {
            policy: &policy,
            config: &config,
            device: &device,
            wrong_instruction: false,
            execute_steps: 2,
            sampling_noise: 0.0,
        };
        let seeds: Vec<u64> = (0..6).collect();
        let own = evaluate_with_camera(&controller, &robot, &seeds, "own", &BatchCamera::PerRobot)
            .unwrap();
        let batched = evaluate_with_camera(&controller, &robot, &seeds, "batched", &camera)
            .expect("every observation the policy reads has its frame");
        assert_eq!(own, batched);
    }
}
