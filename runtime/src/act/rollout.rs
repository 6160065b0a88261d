//! Collecting episodes with the current policy: sampled (exploring) action chunks,
//! batched over many simulated robots in lock-step, each transition stamped with the
//! policy version and the behaviour log-density, optionally with a scripted takeover
//! when the policy stalls (a simulated human intervention) or with the scripted expert
//! coaching short stretches at random ticks (DAgger's mixture of expert and learner).

use burn::prelude::*;
use imago_policies::{HostScratch, Policy, PolicyBatch, PolicyConfig};
use imago_robots::bounds::{ConfigError, in_range};
use imago_robots::{ExpertConfig, Observation, Robot};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::act::camera::BatchCamera;
use crate::act::sampling::{SampledCommand, exploration_rng, sample_first_actions, to_robot_units};
use crate::progress;
use crate::robot::{RobotConfig, SimRobot};
use crate::store::replay::{Episode, EpisodeEnd, EpisodeStart, ReplayWriter, Transition};

/// When the scripted expert takes over from a stalled policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TakeoverConfig {
    /// Ticks over which the robot's progress (its tracked point: reacher2d's end
    /// effector) is measured. Range: [1, 100000].
    pub window: u32,
    /// The policy has stalled when the tracked point moved less than this (world
    /// units: metres for reacher2d) over the last `window` ticks. Range: [0, 100].
    pub min_progress: f32,
}

impl TakeoverConfig {
    /// Checks both values against their documented ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("window", self.window, 1..=100_000)?;
        in_range("min_progress", self.min_progress, 0.0..=100.0)
    }
}

impl Default for TakeoverConfig {
    fn default() -> Self {
        Self {
            window: 10,
            min_progress: 0.03,
        }
    }
}

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
}

impl RolloutConfig {
    /// Checks every value against its documented range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("exploration", self.exploration, 0.0..=10.0)?;
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
        }
    }
}

/// One robot's episode in progress.
struct Running {
    robot: SimRobot,
    observation: Observation,
    start: EpisodeStart,
    transitions: Vec<Transition>,
    takeover: TakeoverWatch,
    coach: CoachStretches,
    seed: u64,
    done: bool,
}

/// Runs one episode per seed with `policy` (version `version`), sampling its action
/// chunks and executing the first action of each, and appends every finished episode
/// whole to `writer` (flushed as it ends). Returns the episodes in seed order.
#[allow(clippy::too_many_arguments)]
pub fn collect_policy_episodes<B: Backend>(
    policy: &Policy<B>,
    policy_config: &PolicyConfig,
    device: &B::Device,
    version: u64,
    robot_config: &RobotConfig,
    seeds: &[u64],
    rollout: &RolloutConfig,
    writer: &mut ReplayWriter,
) -> anyhow::Result<Vec<Episode>>
where
    B::Device: 'static,
{
    let camera = BatchCamera::for_device::<B>(device, robot_config, seeds.len());
    let max_steps = robot_config.spec().max_steps;
    let mut running: Vec<Running> = seeds
        .iter()
        .map(|&seed| {
            let mut robot = robot_config.build()?;
            robot.set_frame_source(camera.frame_source());
            let observation = robot.reset(seed);
            // Coaching starts the robot's noiseless expert; a robot without one is not
            // coached.
            let coaching = rollout
                .coaching
                .as_ref()
                .filter(|_| robot.start_expert(&ExpertConfig::noiseless(), seed));
            let coach = CoachStretches::new(coaching, seed, version);
            Ok(Running {
                start: EpisodeStart {
                    episode: 0,
                    robot: robot_config.name().to_string(),
                    seed,
                    instruction: observation.instruction.clone(),
                },
                takeover: TakeoverWatch::new(rollout.takeover.as_ref(), &robot),
                coach,
                robot,
                observation,
                transitions: Vec::new(),
                seed,
                done: false,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    camera.fill(running.iter_mut().map(|r| (&r.robot, &mut r.observation)))?;
    let mut rngs: Vec<StdRng> = seeds
        .iter()
        .map(|&seed| exploration_rng(seed, version))
        .collect();
    let limits = &policy_config.action_limit();
    let a = limits.len();
    let mut batch = PolicyBatch::new(&policy_config.input_spec());
    // On a CPU, the host forward samples (the same distribution within 1e-5).
    let host = policy.host_copy();
    let mut scratch = HostScratch::default();
    let mut episodes: Vec<Option<Episode>> = vec![None; seeds.len()];
    let bar = progress::bar("collect policy episodes", max_steps as u64);
    while running.iter().any(|r| !r.done) {
        // Who commands this tick: the expert (taken over, or coaching) or the policy.
        let expert_commands: Vec<bool> = running
            .iter_mut()
            .map(|r| !r.done && (r.takeover.is_active() || r.coach.coaches_this_tick()))
            .collect();
        let acting: Vec<usize> = (0..running.len())
            .filter(|&i| !running[i].done && !expert_commands[i])
            .collect();
        let mut commands: Vec<Option<SampledCommand>> = vec![None; running.len()];
        if !acting.is_empty() {
            batch.clear();
            for &i in &acting {
                batch.push(&running[i].observation)?;
            }
            let sampled = sample_first_actions(
                policy,
                host.as_ref().map(|host| (host, &mut scratch)),
                &batch,
                device,
                &mut rngs,
                &acting,
                rollout.exploration,
            )?;
            for (&i, command) in acting.iter().zip(sampled) {
                commands[i] = Some(command);
            }
        }
        let mut stepped = vec![false; running.len()];
        for (i, run) in running.iter_mut().enumerate() {
            if run.done {
                continue;
            }
            let (action, log_prob, intervention) = if expert_commands[i] {
                let expert = run.robot.expert_action();
                (expert.expect("a started expert commands"), None, true)
            } else {
                let command = commands[i]
                    .take()
                    .expect("every acting robot got a command");
                (
                    to_robot_units(&command.action, limits),
                    command.log_prob,
                    false,
                )
            };
            debug_assert_eq!(action.0.len(), a);
            let outcome = run.robot.step(&action);
            let observation = std::mem::replace(&mut run.observation, outcome.observation);
            run.transitions.push(Transition {
                episode: 0,
                step: run.transitions.len() as u32,
                observation,
                action,
                executed: outcome.info.executed.clone(),
                reward: outcome.reward,
                done: outcome.done,
                success: outcome.success,
                policy_version: version,
                intervention,
                behaviour_log_prob: log_prob,
            });
            run.takeover.observe(&mut run.robot, run.seed, outcome.done);
            stepped[i] = true;
            run.done = outcome.done;
        }
        // The new observations' frames (one dispatch on a wgpu GPU) before any is
        // recorded or read by the policy.
        camera.fill(
            running
                .iter_mut()
                .zip(&stepped)
                .filter(|(_, stepped)| **stepped)
                .map(|(r, _)| (&r.robot, &mut r.observation)),
        )?;
        for (i, run) in running.iter_mut().enumerate() {
            if stepped[i] && run.done {
                let success = run.transitions.last().is_some_and(|t| t.success);
                let id = writer.next_episode_id()?;
                let mut episode = Episode {
                    start: EpisodeStart {
                        episode: id,
                        ..run.start.clone()
                    },
                    transitions: std::mem::take(&mut run.transitions),
                    end: EpisodeEnd {
                        episode: id,
                        steps: run.robot.steps(),
                        success,
                        final_observation: run.observation.clone(),
                    },
                };
                episode.transitions.iter_mut().for_each(|t| t.episode = id);
                writer.append_episode(&episode)?;
                episodes[i] = Some(episode);
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(episodes.into_iter().flatten().collect())
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

/// One episode's takeover: the tracked point's path, and whether the robot's
/// noiseless scripted expert has taken over (the tracked point moved less than
/// `min_progress` over `window` ticks while the episode went on). Without a config, or
/// on a robot without a tracked point or an expert, it never takes over.
pub(crate) struct TakeoverWatch {
    config: Option<TakeoverConfig>,
    path: Vec<[f32; 2]>,
    active: bool,
}

impl TakeoverWatch {
    /// A watch over the episode `robot` was just reset to.
    pub(crate) fn new(config: Option<&TakeoverConfig>, robot: &SimRobot) -> Self {
        Self {
            config: config.cloned(),
            path: robot.tracked_point().into_iter().collect(),
            active: false,
        }
    }

    /// Whether the expert has taken over.
    pub(crate) fn is_active(&self) -> bool {
        self.active
    }

    /// Records the tracked point after a tick and starts `robot`'s noiseless expert
    /// (towards the instructed goal) if the policy stalled and the episode goes on;
    /// from then on `robot.expert_action()` gives the commands.
    pub(crate) fn observe(&mut self, robot: &mut SimRobot, seed: u64, done: bool) {
        let Some(point) = robot.tracked_point() else {
            return;
        };
        self.path.push(point);
        let Some(config) = &self.config else { return };
        let window = config.window as usize;
        if done || self.active || self.path.len() <= window {
            return;
        }
        let (now, then) = (
            self.path[self.path.len() - 1],
            self.path[self.path.len() - 1 - window],
        );
        if (now[0] - then[0]).hypot(now[1] - then[1]) < config.min_progress {
            self.active = robot.start_expert(&ExpertConfig::noiseless(), seed);
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::Dispatch;
    use burn::DispatchDevice;
    use burn::backend::ndarray::NdArrayDevice;
    use imago_policies::{ActionHeadKind, PolicyConfig};

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
        };
        for head in ActionHeadKind::ALL {
            let config = PolicyConfig::for_robot(imago_policies::Architecture::Vla, &spec)
                .unwrap()
                .with_head(head);
            let policy = config.init::<Dispatch>(&device);
            let episodes = collect_policy_episodes(
                &policy,
                &config,
                &device,
                7,
                &robot,
                &[11, 12, 13],
                &rollout,
                &mut writer,
            )
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
        };
        let config =
            PolicyConfig::for_robot(imago_policies::Architecture::Vla, &robot.spec()).unwrap();
        let policy = config.init::<Dispatch>(&device);
        let seeds = [21, 22, 23, 24];
        let episodes = collect_policy_episodes(
            &policy,
            &config,
            &device,
            3,
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
            &policy,
            &config,
            &device,
            1,
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
