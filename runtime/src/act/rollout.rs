//! Collecting episodes with the current policy: sampled (exploring) action chunks,
//! batched over many simulated robots in lock-step, each transition stamped with the
//! policy version and the behaviour log-density, optionally with a scripted takeover
//! when the policy stalls (a simulated human intervention) or with the scripted expert
//! coaching short stretches at random ticks (DAgger's mixture of expert and learner).

use std::collections::VecDeque;

use burn::prelude::*;
use imago_policies::{HostPolicy, HostScratch, MAX_CHUNK_LEN, Policy, PolicyBatch, PolicyConfig};
use imago_robots::ExpertConfig;
use imago_robots::bounds::{ConfigError, in_range};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::act::camera::BatchCamera;
use crate::act::episode::TickCommand;
use crate::act::lock_step::LockStep;
use crate::act::sampling::{NOISE_SCALES, exploration_rng, sample_leading_actions, to_robot_units};
use crate::act::takeover::TakeoverConfig;
use crate::progress;
use crate::robot::RobotConfig;
use crate::store::replay::{Episode, ReplayWriter, Transition};

/// When the scripted expert coaches: stretches of its commands among the policy's,
/// starting at random ticks. The states the policy's own mistakes lead to then get the
/// expert's commands, flagged as interventions: DAgger's mixture of expert and
/// learner, the simulated stand-in for a person who corrects the robot now and then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CoachingConfig {
    /// Chance, at every tick the policy would act, that a coached stretch starts.
    /// Range: [0, 1].
    pub probability: f32,
    /// Ticks the expert commands once a stretch starts (the policy's chunk length
    /// lets a stretch label whole chunks). Range: [1, 10000].
    pub ticks: u32,
}

impl CoachingConfig {
    /// Checks both values against their documented ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("probability", self.probability, 0.0..=1.0)?;
        in_range("ticks", self.ticks, 1..=10_000)
    }

    /// The expected share of coached ticks: a stretch of `ticks` after, on average,
    /// `1 / probability` policy ticks.
    pub fn coached_share(&self) -> f32 {
        let stretch = self.probability * self.ticks as f32;
        stretch / (1.0 + stretch)
    }
}

impl Default for CoachingConfig {
    fn default() -> Self {
        Self {
            probability: 0.1,
            ticks: 8,
        }
    }
}

/// How policy episodes are collected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RolloutConfig {
    /// Scale of the exploration noise relative to the policy's own spread (0: act on
    /// the mean, or the flow integrated from zero noise). Range: [0, 10].
    pub exploration: f32,
    /// Let the scripted expert take over when the policy stalls; taken-over ticks are
    /// flagged as interventions.
    pub takeover: Option<TakeoverConfig>,
    /// Let the scripted expert coach stretches at random ticks; coached ticks are
    /// flagged as interventions.
    pub coaching: Option<CoachingConfig>,
    /// Actions of each sampled chunk executed before the policy samples again (1:
    /// it samples at every tick). At most the policy's chunk length; a takeover or
    /// a coached stretch drops what is left. Only the first action of each sample
    /// records its behaviour density (the others were planned from an earlier
    /// observation, so they get no importance correction). Range: [1, 64].
    pub executed_per_plan: usize,
}

impl RolloutConfig {
    /// Whether `policy` can follow these settings: it executes at most its chunk's
    /// length of each plan (`executed_per_plan` is checked against the largest chunk
    /// alone by [`RolloutConfig::validate`]).
    pub fn check_fits(&self, policy: &PolicyConfig) -> anyhow::Result<()> {
        let chunk = policy.chunk_len();
        anyhow::ensure!(
            self.executed_per_plan <= chunk,
            "rollout.executed_per_plan is {} but the policy's chunks hold {chunk}: execute at most {chunk}",
            self.executed_per_plan
        );
        Ok(())
    }

    /// Checks every value against its documented range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("exploration", self.exploration, NOISE_SCALES)?;
        in_range(
            "executed_per_plan",
            self.executed_per_plan,
            1..=MAX_CHUNK_LEN,
        )?;
        if let Some(takeover) = &self.takeover {
            takeover.validate().map_err(|e| e.within("takeover"))?;
        }
        match &self.coaching {
            Some(coaching) => coaching.validate().map_err(|e| e.within("coaching")),
            None => Ok(()),
        }
    }
}

impl Default for RolloutConfig {
    fn default() -> Self {
        Self {
            exploration: 1.0,
            takeover: None,
            coaching: None,
            executed_per_plan: 1,
        }
    }
}

/// A policy version as it acts in rollouts: its weights, config and device.
pub struct ActingPolicy<'a, B: Backend> {
    /// The policy.
    pub policy: &'a Policy<B>,
    /// Its config.
    pub config: &'a PolicyConfig,
    /// Where it runs.
    pub device: &'a B::Device,
    /// The version its transitions are stamped with.
    pub version: u64,
}

/// Who commands the ticks a policy acts on while episodes are collected.
pub trait PolicyCommands {
    /// One command per lane of `lanes`, in their order: of the lanes `run` has
    /// running, the ones the policy commands this tick (never empty, ascending).
    fn commands(&mut self, run: &LockStep<'_>, lanes: &[usize])
    -> anyhow::Result<Vec<TickCommand>>;
}

/// Runs one episode per seed with `acting`, sampling its action chunks and executing
/// the first `rollout.executed_per_plan` actions of each (more than the chunk holds
/// is an error), and appends every finished episode whole to `writer`
/// (flushed as it ends). Returns the episodes in seed order.
pub fn collect_policy_episodes<B: Backend>(
    acting: &ActingPolicy<'_, B>,
    robot: &RobotConfig,
    seeds: &[u64],
    rollout: &RolloutConfig,
    writer: &mut ReplayWriter,
) -> anyhow::Result<Vec<Episode>>
where
    B::Device: 'static,
{
    rollout.check_fits(acting.config)?;
    let camera = BatchCamera::for_device::<B>(acting.device, robot, seeds.len());
    let mut sampler = RolloutSampler::new(acting, seeds, rollout);
    collect_episodes(
        (&mut sampler, acting.version),
        (robot, &camera),
        seeds,
        rollout,
        writer,
    )
}

/// Runs one episode per seed on `robot` (frames drawn by `camera`), the policy's ticks
/// commanded by `policy` (its transitions stamped with `version`), the expert's where
/// `rollout` lets it take over or coach, and appends every finished episode whole to
/// `writer` (flushed as it ends). Returns the episodes in seed order.
pub fn collect_episodes(
    (policy, version): (&mut impl PolicyCommands, u64),
    (robot, camera): (&RobotConfig, &BatchCamera),
    seeds: &[u64],
    rollout: &RolloutConfig,
    writer: &mut ReplayWriter,
) -> anyhow::Result<Vec<Episode>> {
    let mut run = LockStep::start(robot, seeds, camera, rollout.takeover.as_ref())?;
    let mut coaches: Vec<CoachStretches> = run
        .lanes_mut()
        .iter_mut()
        .map(|lane| {
            // Coaching starts the robot's noiseless expert; a robot without one is not
            // coached.
            let seed = lane.seed();
            let coaching = rollout
                .coaching
                .as_ref()
                .filter(|_| lane.robot.start_expert(&ExpertConfig::noiseless(), seed));
            CoachStretches::new(coaching, seed, version)
        })
        .collect();
    let mut transitions: Vec<Vec<Transition>> = vec![Vec::new(); seeds.len()];
    let mut episodes: Vec<Option<Episode>> = vec![None; seeds.len()];
    let bar = progress::bar("collect policy episodes", robot.spec().max_steps as u64);
    while run.any_running() {
        let running = run.running();
        // Who commands this tick: the expert (taken over, or coaching) or the policy.
        let (expert_commands, policy_lanes): (Vec<usize>, Vec<usize>) = running
            .iter()
            .partition(|&&i| run.lanes()[i].takeover.is_active() || coaches[i].coaches_this_tick());
        let mut commands = vec![None; seeds.len()];
        if !policy_lanes.is_empty() {
            for (&i, command) in policy_lanes
                .iter()
                .zip(policy.commands(&run, &policy_lanes)?)
            {
                commands[i] = Some(command);
            }
        }
        for &i in &expert_commands {
            let action = run.lanes_mut()[i].expert_action()?;
            commands[i] = Some(TickCommand::intervention(action, version));
        }
        for (i, transition) in run.step(commands)? {
            transitions[i].push(transition);
        }
        for i in running {
            let lane = &run.lanes()[i].episode;
            if !lane.is_done() {
                continue;
            }
            let id = writer.next_episode_id()?;
            let episode = lane
                .finished(id, std::mem::take(&mut transitions[i]))
                .ok_or_else(|| anyhow::anyhow!("episode {id} ended without an end"))?;
            writer.append_episode(&episode)?;
            episodes[i] = Some(episode);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(episodes.into_iter().flatten().collect())
}

/// The policy's sampled commands for a tick's lanes: one batch through the host
/// forward on a CPU (the same distribution within 1e-5), else burn's, for the lanes
/// whose sampled actions have all run; each lane draws its exploration noise from its
/// own generator.
struct RolloutSampler<'a, B: Backend> {
    acting: &'a ActingPolicy<'a, B>,
    host: Option<HostPolicy>,
    scratch: HostScratch,
    batch: PolicyBatch,
    rngs: Vec<StdRng>,
    exploration: f32,
    executed_per_plan: usize,
    /// Per lane, the sampled commands still to run.
    queues: Vec<VecDeque<TickCommand>>,
}

impl<'a, B: Backend> RolloutSampler<'a, B> {
    fn new(acting: &'a ActingPolicy<'a, B>, seeds: &[u64], rollout: &RolloutConfig) -> Self {
        Self {
            acting,
            host: acting.policy.host_copy(),
            scratch: HostScratch::default(),
            batch: PolicyBatch::new(&acting.config.input_spec()),
            rngs: seeds
                .iter()
                .map(|&seed| exploration_rng(seed, acting.version))
                .collect(),
            exploration: rollout.exploration,
            executed_per_plan: rollout.executed_per_plan,
            queues: vec![VecDeque::new(); seeds.len()],
        }
    }
}

impl<B: Backend> PolicyCommands for RolloutSampler<'_, B> {
    fn commands(
        &mut self,
        run: &LockStep<'_>,
        lanes: &[usize],
    ) -> anyhow::Result<Vec<TickCommand>> {
        // The expert commanded the running lanes left out (`lanes` is ascending): their
        // plans are dropped.
        for i in run.running() {
            if lanes.binary_search(&i).is_err() {
                self.queues[i].clear();
            }
        }
        let sampling: Vec<usize> = lanes
            .iter()
            .copied()
            .filter(|&i| self.queues[i].is_empty())
            .collect();
        if !sampling.is_empty() {
            self.batch.clear();
            for &i in &sampling {
                self.batch.push(run.lanes()[i].episode.observation())?;
            }
            let sampled = sample_leading_actions(
                self.acting.policy,
                self.host.as_ref().map(|host| (host, &mut self.scratch)),
                &self.batch,
                self.acting.device,
                (&mut self.rngs, &sampling),
                (self.exploration, self.executed_per_plan),
            )?;
            let limits = self.acting.config.action_limit();
            for (&i, command) in sampling.iter().zip(sampled) {
                let actions = command.action.chunks(limits.len());
                self.queues[i].extend(actions.enumerate().map(|(j, action)| TickCommand {
                    action: to_robot_units(action, limits),
                    sent: None,
                    behaviour_log_prob: command.log_prob.filter(|_| j == 0),
                    intervention: false,
                    policy_version: self.acting.version,
                }));
            }
        }
        lanes
            .iter()
            .map(|&i| {
                self.queues[i]
                    .pop_front()
                    .ok_or_else(|| anyhow::anyhow!("the policy sampled no action"))
            })
            .collect()
    }
}

/// One episode's coaching: where the expert's stretches start (drawn from the
/// episode's seed and the policy version, apart from the exploration noise) and how
/// many ticks of the current one are left. Without a config it never coaches.
struct CoachStretches {
    config: Option<CoachingConfig>,
    rng: StdRng,
    left: u32,
}

impl CoachStretches {
    fn new(config: Option<&CoachingConfig>, seed: u64, version: u64) -> Self {
        Self {
            config: config.cloned(),
            rng: StdRng::seed_from_u64(seed ^ version.rotate_left(29) ^ 0xc0ac_4ed0),
            left: 0,
        }
    }

    /// Whether the expert commands the tick about to be taken; called once a tick.
    fn coaches_this_tick(&mut self) -> bool {
        let Some(config) = &self.config else {
            return false;
        };
        if self.left > 0 {
            self.left -= 1;
            return true;
        }
        if self.rng.random::<f32>() < config.probability {
            self.left = config.ticks - 1;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use burn::Dispatch;
    use burn::DispatchDevice;
    use burn::backend::ndarray::NdArrayDevice;
    use imago_policies::{ActionHeadKind, PolicyConfig};

    use imago_robots::Robot;

    use super::*;
    use crate::store::replay::{ReplayWriterConfig, read_replay};

    fn writer_in(dir: &std::path::Path) -> ReplayWriter {
        ReplayWriter::open(
            dir,
            ReplayWriterConfig::default(),
            &RobotConfig::default(),
            "test",
        )
        .unwrap()
        .0
    }

    #[test]
    fn takeover_flags_interventions_and_policy_steps_carry_their_density() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer_in(dir.path());
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let robot = RobotConfig::default();
        let spec = robot.spec();
        // An always-met stall threshold: the expert takes over after `window` ticks.
        let rollout = RolloutConfig {
            exploration: 1.0,
            takeover: Some(TakeoverConfig {
                window: 5,
                min_progress: 10.0,
            }),
            coaching: None,
            executed_per_plan: 1,
        };
        for head in ActionHeadKind::ALL {
            let config = PolicyConfig::for_robot(imago_policies::Architecture::Vla, &spec)
                .unwrap()
                .with_head(head);
            let policy = config.init::<Dispatch>(&device);
            let acting = ActingPolicy {
                policy: &policy,
                config: &config,
                device: &device,
                version: 7,
            };
            let episodes =
                collect_policy_episodes(&acting, &robot, &[11, 12, 13], &rollout, &mut writer)
                    .unwrap();
            assert_eq!(episodes.len(), 3);
            for episode in &episodes {
                for t in &episode.transitions {
                    assert_eq!(t.policy_version, 7);
                    assert_eq!(t.intervention, t.step >= 5, "step {}", t.step);
                    let density = head == ActionHeadKind::Gaussian && !t.intervention;
                    assert_eq!(t.behaviour_log_prob.is_some(), density);
                    assert!(t.action.0.iter().all(|v| v.abs() <= spec.action_limit[0]));
                }
            }
            // The noiseless rescuer reaches the instructed target.
            assert!(episodes.iter().filter(|e| e.end.success).count() >= 2);
        }
        writer.close().unwrap();
        let stored = read_replay(dir.path()).unwrap().episodes;
        assert_eq!(stored.len(), 6);
        let ids: Vec<u64> = stored.iter().map(|e| e.start.episode).collect();
        assert_eq!(ids, (0..6).collect::<Vec<_>>());
    }

    #[test]
    fn coached_stretches_carry_the_experts_commands_on_the_policys_states() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer_in(dir.path());
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let robot = RobotConfig::default();
        let coaching = CoachingConfig {
            probability: 0.2,
            ticks: 3,
        };
        let rollout = RolloutConfig {
            exploration: 1.0,
            takeover: None,
            coaching: Some(coaching.clone()),
            executed_per_plan: 1,
        };
        let config =
            PolicyConfig::for_robot(imago_policies::Architecture::Vla, &robot.spec()).unwrap();
        let policy = config.init::<Dispatch>(&device);
        let seeds = [21, 22, 23, 24];
        let episodes = collect_policy_episodes(
            &ActingPolicy {
                policy: &policy,
                config: &config,
                device: &device,
                version: 3,
            },
            &robot,
            &seeds,
            &rollout,
            &mut writer,
        )
        .unwrap();
        let (mut coached, mut ticks) = (0, 0);
        for episode in &episodes {
            // Replaying the recorded commands reaches the same states, where each
            // coached command is the noiseless expert's.
            let mut replay = robot.build().unwrap();
            replay.reset(episode.start.seed);
            assert!(replay.start_expert(&ExpertConfig::noiseless(), episode.start.seed));
            let flags: Vec<bool> = episode.transitions.iter().map(|t| t.intervention).collect();
            for t in &episode.transitions {
                let expert = replay.expert_action().unwrap();
                if t.intervention {
                    assert_eq!(t.action, expert, "step {}", t.step);
                    assert!(t.behaviour_log_prob.is_none());
                } else {
                    assert!(t.behaviour_log_prob.is_some());
                }
                replay.step(&t.action);
            }
            // Stretches last `ticks` ticks unless the episode ends first.
            let mut run = 0;
            for (step, &flag) in flags.iter().enumerate() {
                if flag {
                    run += 1;
                } else {
                    assert!(
                        run == 0 || run >= 3,
                        "a stretch of {run} before step {step}"
                    );
                    run = 0;
                }
            }
            coached += flags.iter().filter(|&&f| f).count();
            ticks += flags.len();
        }
        let share = coached as f32 / ticks as f32;
        let expected = coaching.coached_share();
        assert!(
            (share - expected).abs() < 0.15,
            "coached share {share}, expected about {expected}"
        );
        writer.close().unwrap();
    }

    #[test]
    fn rollouts_execute_the_leading_actions_of_each_sampled_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer_in(dir.path());
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let robot = crate::robot::reacher2d_with("max_steps = 11");
        let spec = robot.spec();
        let config = PolicyConfig::for_robot(imago_policies::Architecture::Vla, &spec).unwrap();
        let policy = config.init::<Dispatch>(&device);
        let acting = ActingPolicy {
            policy: &policy,
            config: &config,
            device: &device,
            version: 2,
        };
        let k = config.chunk_len();
        assert!(k >= 2, "the test needs chunks of at least 2");
        // Without exploration, every sampled action is the mean chunk's, planned from
        // the observation of the tick the chunk was sampled at.
        let rollout = RolloutConfig {
            exploration: 0.0,
            executed_per_plan: k,
            ..RolloutConfig::default()
        };
        let episodes =
            collect_policy_episodes(&acting, &robot, &[5, 6], &rollout, &mut writer).unwrap();
        for episode in &episodes {
            assert_eq!(episode.transitions.len(), 11);
            for plan_start in episode.transitions.chunks(k) {
                let planned_at = &plan_start[0].observation;
                let chunk = crate::act::sampling::plan(
                    &policy,
                    &config,
                    &device,
                    std::iter::once(planned_at),
                )
                .unwrap()
                .remove(0);
                for (j, (t, planned)) in plan_start.iter().zip(&chunk).enumerate() {
                    for ((x, y), limit) in t.action.0.iter().zip(&planned.0).zip(&spec.action_limit)
                    {
                        let expected = y.clamp(-limit, *limit);
                        assert!(
                            (x - expected).abs() <= 1e-4,
                            "step {}: {x} vs {expected}",
                            t.step
                        );
                    }
                    // Only a sample's first action carries its behaviour density.
                    assert_eq!(t.behaviour_log_prob.is_some(), j == 0, "step {}", t.step);
                }
            }
        }
        let too_many = RolloutConfig {
            executed_per_plan: k + 1,
            ..rollout
        };
        let refused = collect_policy_episodes(&acting, &robot, &[5], &too_many, &mut writer)
            .expect_err("more actions than a chunk holds");
        assert!(
            refused
                .to_string()
                .contains(&format!("execute at most {k}")),
            "{refused}"
        );
        writer.close().unwrap();
    }

    #[test]
    fn large_batches_on_wgpu_record_the_frame_of_every_step() {
        if crate::act::camera::tests::batched().is_none() {
            return;
        }
        let device = crate::device::resolve(crate::device::DeviceSpec::Wgpu(None))
            .unwrap()
            .inference;
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer_in(dir.path());
        let robot = crate::robot::reacher2d_with("max_steps = 3");
        let config = PolicyConfig::for_robot(imago_policies::Architecture::Vla, &robot.spec())
            .unwrap()
            .compact();
        let policy = config.init::<Dispatch>(&device);
        let seeds: Vec<u64> = (0..BatchCamera::MIN_BATCH as u64).collect();
        let episodes = collect_policy_episodes(
            &ActingPolicy {
                policy: &policy,
                config: &config,
                device: &device,
                version: 1,
            },
            &robot,
            &seeds,
            &RolloutConfig::default(),
            &mut writer,
        )
        .unwrap();
        assert_eq!(episodes.len(), seeds.len());
        // Replaying each episode's actions on a robot that draws its own frames
        // reproduces every recorded frame, the final one included.
        for episode in &episodes {
            let mut replay = robot.build().unwrap();
            let mut expected = replay.reset(episode.start.seed).image.unwrap();
            for t in &episode.transitions {
                let recorded = t.observation.image.as_ref().expect("a frame");
                crate::act::camera::tests::assert_same_frame(recorded, &expected);
                expected = replay.step(&t.action).observation.image.unwrap();
            }
            let last = episode
                .end
                .final_observation
                .image
                .as_ref()
                .expect("a frame");
            crate::act::camera::tests::assert_same_frame(last, &expected);
        }
    }
}
