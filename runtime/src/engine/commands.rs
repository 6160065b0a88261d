//! Where the actor's commands come from (`[actor.chunking]`, docs/runtime.md):
//!
//! - `every_tick`: the policy runs on the control thread at every tick and the robot
//!   executes the first action of its chunk. Closed loop at every tick, but a policy
//!   slower than the control period makes every tick late.
//! - `synchronous`: the robot executes each chunk whole, then waits while the policy
//!   plans the next on the control thread (LeRobot's and openpi's default execution):
//!   a slow policy makes the robot pause at every chunk boundary, and the new chunk
//!   starts wherever it starts. Each chunk's first action records its behaviour
//!   density (it was sampled at the observation it is executed at).
//! - `realtime`: real-time chunking. A planner thread computes the next chunk from
//!   the newest observation while the robot executes the current one. It is asked
//!   just in time: when the plan left is no longer than the last chunk's planning
//!   delay (in ticks) plus the blend, so that the new chunk arrives with `blend_ticks`
//!   of the old plan left to fade across. Each new chunk skips the actions that fell
//!   due while it was computed and is cross-faded into the old plan ([`ChunkQueue`]).
//!   The control thread never waits on inference; if the plan runs out before the
//!   next chunk is in, the robot holds its last command (counted as a starved tick).
//!
//! Every mode samples its actions with `[actor] exploration` times the policy's
//! spread (0: the mean); the chunked modes sample every action of a chunk.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use burn::Dispatch;
use imago_policies::{HostScratch, PolicyBatch};
use imago_robots::Observation;
use rand::rngs::StdRng;

use super::chunking::{ChunkMode, Command, CommandSettings};
use super::lerobot_ticks::LeRobotTicks;
use super::planner::{ChunkPlanner, ChunkRequest, Executed, PlannedChunk, sample_command};
use super::snapshot::{PolicySnapshot, SnapshotPolicy};
use crate::act::chunk_queue::{ChunkQueue, QueuedAction};
use crate::act::sampling::{SampledCommand, exploration_rng};

/// The policy's commands, one per tick, by the configured [`ChunkMode`].
pub(crate) enum CommandSource {
    EveryTick(Box<EveryTick>),
    Realtime(Box<RealtimeChunks>),
    /// A LeRobot policy, through its own queues.
    LeRobot(Box<LeRobotTicks>),
}

/// `every_tick` and `synchronous`: inference on the control thread.
pub(crate) struct EveryTick {
    /// `synchronous`: the rest of the chunk being executed.
    whole_chunks: Option<ChunkQueue>,
    batch: PolicyBatch,
    scratch: HostScratch,
    rng: StdRng,
    exploration: f32,
    added_latency: Duration,
    device: burn::tensor::Device<Dispatch>,
}

/// `realtime`: a planner thread and the queue its chunks merge into.
pub(crate) struct RealtimeChunks {
    planner: ChunkPlanner,
    queue: ChunkQueue,
    blend: usize,
    /// Ticks the last chunk took from request to use.
    planning_delay: usize,
    episode: u64,
    seed: u64,
    last: QueuedAction,
    starved: u64,
}

impl CommandSource {
    /// The source `settings` describe, for policies of `initial`'s kind on `device`,
    /// driving a robot whose actions are bounded by `limits`.
    pub(crate) fn new(
        settings: &CommandSettings<'_>,
        initial: &PolicySnapshot,
        (limits, device): (&[f32], &burn::tensor::Device<Dispatch>),
    ) -> anyhow::Result<Self> {
        let policy_config = match &initial.policy {
            SnapshotPolicy::Imago { config, .. } => config,
            SnapshotPolicy::LeRobot(_) => {
                return Ok(Self::LeRobot(Box::new(LeRobotTicks::new(
                    settings, limits,
                )?)));
            }
        };
        let action_dim = policy_config.action_dim();
        Ok(match settings.chunking.mode {
            mode @ (ChunkMode::EveryTick | ChunkMode::Synchronous) => {
                Self::EveryTick(Box::new(EveryTick {
                    whole_chunks: (mode == ChunkMode::Synchronous)
                        .then(|| ChunkQueue::new(action_dim)),
                    batch: PolicyBatch::new(&policy_config.input_spec()),
                    scratch: HostScratch::default(),
                    rng: exploration_rng(0, 0),
                    exploration: settings.exploration,
                    added_latency: settings.added_latency,
                    device: device.clone(),
                }))
            }
            ChunkMode::Realtime => Self::Realtime(Box::new(RealtimeChunks {
                planner: ChunkPlanner::start(
                    policy_config,
                    device,
                    settings.exploration,
                    settings.added_latency,
                )?,
                queue: ChunkQueue::new(action_dim),
                blend: settings.chunking.blend_ticks as usize,
                planning_delay: 1,
                episode: 0,
                seed: 0,
                last: QueuedAction {
                    action: vec![0.0; action_dim],
                    version: 0,
                },
                starved: 0,
            })),
        })
    }

    /// Starts episode `episode` (from `seed`, first seeing `observation`). Realtime
    /// chunking plans the first chunk and waits for it (the robot is at rest, as during
    /// a reset); `false` when `stop` was set meanwhile.
    pub(crate) fn start_episode(
        &mut self,
        (episode, seed): (u64, u64),
        observation: &Observation,
        current: &Arc<PolicySnapshot>,
        stop: &AtomicBool,
    ) -> anyhow::Result<bool> {
        match self {
            Self::EveryTick(source) => {
                source.rng = exploration_rng(seed, current.version);
                if let Some(queue) = &mut source.whole_chunks {
                    queue.clear();
                }
                Ok(true)
            }
            Self::Realtime(source) => {
                source.start_episode((episode, seed), observation, current, stop)
            }
            Self::LeRobot(source) => source.start_episode(current).map(|()| true),
        }
    }

    /// The command for tick `step`, at which the robot is seen as `observation` and
    /// `current` is the newest policy.
    pub(crate) fn command(
        &mut self,
        step: u32,
        observation: &Observation,
        current: &Arc<PolicySnapshot>,
    ) -> anyhow::Result<Command> {
        match self {
            Self::EveryTick(source) => source.command(observation, current),
            Self::Realtime(source) => source.command(step, observation, current),
            Self::LeRobot(source) => source.command(observation),
        }
    }

    /// The scripted expert drives from now on: the plan is dropped.
    pub(crate) fn expert_took_over(&mut self) {
        match self {
            Self::EveryTick(source) => {
                if let Some(queue) = &mut source.whole_chunks {
                    queue.clear();
                }
            }
            Self::Realtime(source) => source.queue.clear(),
            Self::LeRobot(source) => source.expert_took_over(),
        }
    }

    /// Ticks the realtime plan ran out and the robot held its last command.
    pub(crate) fn starved_ticks(&self) -> u64 {
        match self {
            Self::EveryTick(_) | Self::LeRobot(_) => 0,
            Self::Realtime(source) => source.starved,
        }
    }
}

impl EveryTick {
    fn command(
        &mut self,
        observation: &Observation,
        current: &Arc<PolicySnapshot>,
    ) -> anyhow::Result<Command> {
        let Some(mut queue) = self.whole_chunks.take() else {
            let sampled = self.sample(observation, current, Executed::First)?;
            return Ok(Command {
                action: sampled.action,
                log_prob: sampled.log_prob,
                plan: sampled.chunk,
                version: current.version,
            });
        };
        let next = self.next_of_chunk(&mut queue, observation, current);
        self.whole_chunks = Some(queue);
        next
    }

    /// `synchronous`: the next action of the sampled chunk in `queue`, sampling a new
    /// chunk when it is done; a new chunk's first action carries its density.
    fn next_of_chunk(
        &mut self,
        queue: &mut ChunkQueue,
        observation: &Observation,
        current: &PolicySnapshot,
    ) -> anyhow::Result<Command> {
        let mut log_prob = None;
        if queue.is_empty() {
            let sampled = self.sample(observation, current, Executed::WholeChunk)?;
            queue.merge(&sampled.action, 0, 0, current.version);
            log_prob = sampled.log_prob;
        }
        let next = queue
            .pop()
            .ok_or_else(|| anyhow::anyhow!("the policy planned an empty chunk"))?;
        let mut plan = next.action.clone();
        plan.extend(queue.planned());
        Ok(Command {
            action: next.action,
            log_prob,
            plan,
            version: next.version,
        })
    }

    /// The policy's command for `observation`, after the added latency.
    fn sample(
        &mut self,
        observation: &Observation,
        current: &PolicySnapshot,
        executed: Executed,
    ) -> anyhow::Result<SampledCommand> {
        let sampled = sample_command(
            current,
            observation,
            (&mut self.batch, &mut self.scratch),
            &self.device,
            &mut self.rng,
            (self.exploration, executed),
        )?;
        if !self.added_latency.is_zero() {
            std::thread::sleep(self.added_latency);
        }
        Ok(sampled)
    }
}

impl RealtimeChunks {
    fn start_episode(
        &mut self,
        (episode, seed): (u64, u64),
        observation: &Observation,
        current: &Arc<PolicySnapshot>,
        stop: &AtomicBool,
    ) -> anyhow::Result<bool> {
        // An answer still being planned for the last episode is of no use now.
        if self.planner.busy() && self.planner.wait(stop)?.is_none() {
            return Ok(false);
        }
        (self.episode, self.seed) = (episode, seed);
        self.queue.clear();
        self.ask(0, observation, current)?;
        let Some(first) = self.planner.wait(stop)? else {
            return Ok(false);
        };
        self.queue.merge(&first.chunk, 0, 0, first.version);
        Ok(true)
    }

    fn command(
        &mut self,
        step: u32,
        observation: &Observation,
        current: &Arc<PolicySnapshot>,
    ) -> anyhow::Result<Command> {
        if let Some(planned) = self.planner.try_take()?
            && planned.episode == self.episode
        {
            self.merge(&planned, step);
        }
        if !self.planner.busy() && self.queue.len() <= self.planning_delay + self.blend {
            self.ask(step, observation, current)?;
        }
        match self.queue.pop() {
            Some(next) => self.last = next,
            None => self.starved += 1,
        }
        let mut plan = self.last.action.clone();
        plan.extend(self.queue.planned());
        Ok(Command {
            action: self.last.action.clone(),
            log_prob: None,
            plan,
            version: self.last.version,
        })
    }

    /// Asks the planner for the chunk from `observation`, seen at tick `step`.
    fn ask(
        &mut self,
        step: u32,
        observation: &Observation,
        current: &Arc<PolicySnapshot>,
    ) -> anyhow::Result<()> {
        let noise_seed = self.seed ^ (u64::from(step) << 40);
        self.planner.request(ChunkRequest {
            episode: self.episode,
            step,
            observation: observation.clone(),
            snapshot: Arc::clone(current),
            rng: exploration_rng(noise_seed, current.version),
        })
    }

    /// Merges `planned` into the queue at tick `now`.
    fn merge(&mut self, planned: &PlannedChunk, now: u32) {
        let delay = now.saturating_sub(planned.step) as usize;
        self.planning_delay = delay;
        self.queue
            .merge(&planned.chunk, delay, self.blend, planned.version);
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::ndarray::NdArrayDevice;
    use burn::{Dispatch, DispatchDevice};
    use imago_policies::{Architecture, PolicyConfig};
    use imago_robots::Robot;

    use super::super::chunking::ChunkingConfig;
    use super::*;
    use crate::robot::RobotConfig;

    /// `mode` with `exploration`: the commands of `chunks` whole chunks from one
    /// observation (the robot is not stepped, so every chunk is planned from it), the
    /// same episode's commands again, and the mean chunk the policy plans there.
    fn commands_at_rest(
        mode: ChunkMode,
        exploration: f32,
        chunks: usize,
    ) -> (Vec<Command>, Vec<Command>, Vec<f32>, usize) {
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let robot_config = RobotConfig::default();
        let config = PolicyConfig::for_robot(Architecture::Vla, &robot_config.spec()).unwrap();
        let snapshot = Arc::new(PolicySnapshot::new(
            1,
            config.init::<Dispatch>(&device),
            &config,
        ));
        let chunking = ChunkingConfig {
            mode,
            ..ChunkingConfig::default()
        };
        let settings = CommandSettings {
            chunking: &chunking,
            exploration,
            added_latency: Duration::ZERO,
        };
        let limits = config.action_limit().to_vec();
        let mut source = CommandSource::new(&settings, &snapshot, (&limits, &device)).unwrap();
        let observation = robot_config.build().unwrap().reset(3);
        let k = config.chunk_len();
        let mut episode = || -> Vec<Command> {
            assert!(
                source
                    .start_episode((0, 3), &observation, &snapshot, &AtomicBool::new(false))
                    .unwrap()
            );
            (0..(chunks * k) as u32)
                .map(|step| source.command(step, &observation, &snapshot).unwrap())
                .collect()
        };
        let (commands, again) = (episode(), episode());
        let mean = sample_command(
            &snapshot,
            &observation,
            (
                &mut PolicyBatch::new(&config.input_spec()),
                &mut HostScratch::default(),
            ),
            &device,
            &mut exploration_rng(0, 0),
            (0.0, Executed::First),
        )
        .unwrap()
        .chunk;
        (commands, again, mean, k)
    }

    /// The executed actions of `commands`, one after another.
    fn executed(commands: &[Command]) -> Vec<f32> {
        commands.iter().flat_map(|c| c.action.clone()).collect()
    }

    #[test]
    fn synchronous_chunks_are_sampled_whole_and_their_first_action_carries_its_density() {
        let (commands, again, mean, k) = commands_at_rest(ChunkMode::Synchronous, 1.0, 3);
        let a = mean.len() / k;
        for (tick, command) in commands.iter().enumerate() {
            // Only a fresh chunk's first action was sampled at the tick it executes.
            assert_eq!(command.log_prob.is_some(), tick % k == 0, "tick {tick}");
            // The plan is the rest of the chunk being executed, this action first.
            assert_eq!(command.plan.len(), (k - tick % k) * a, "tick {tick}");
            assert_eq!(command.plan[..a], command.action[..], "tick {tick}");
        }
        // Every action of every chunk is a sample, not the mean, and each chunk
        // draws its own: the same observation gives three different chunks.
        let actions = executed(&commands);
        let chunks: Vec<&[f32]> = actions.chunks(k * a).collect();
        for chunk in &chunks {
            for (step, (sampled, mean)) in chunk.chunks(a).zip(mean.chunks(a)).enumerate() {
                let gap: f32 = sampled.iter().zip(mean).map(|(s, m)| (s - m).abs()).sum();
                assert!(
                    gap > 1e-3,
                    "action {step} of a chunk is the mean: {sampled:?}"
                );
            }
        }
        assert_ne!(chunks[0], chunks[1]);
        assert_ne!(chunks[1], chunks[2]);
        // The episode's seed fixes the noise.
        assert_eq!(executed(&again), actions);
    }

    #[test]
    fn synchronous_chunks_without_exploration_are_the_mean() {
        let (commands, _, mean, _) = commands_at_rest(ChunkMode::Synchronous, 0.0, 3);
        let expected: Vec<f32> = mean.iter().map(|v| v.clamp(-1.0, 1.0)).collect();
        for chunk in executed(&commands).chunks(mean.len()) {
            for (got, want) in chunk.iter().zip(&expected) {
                assert!((got - want).abs() < 1e-4, "{chunk:?} against {expected:?}");
            }
        }
    }

    /// Real-time chunking plans on another thread; its first chunk (planned while
    /// the robot is at rest, so on time) is sampled the same way.
    #[test]
    fn realtime_chunks_are_sampled_and_without_exploration_the_mean() {
        let first = |exploration| {
            let (commands, again, mean, k) = commands_at_rest(ChunkMode::Realtime, exploration, 1);
            let a = mean.len() / k;
            let actions: Vec<f32> = executed(&commands).into_iter().take(a).collect();
            assert_eq!(executed(&again)[..a], actions[..]);
            let gap: f32 = actions.iter().zip(&mean).map(|(s, m)| (s - m).abs()).sum();
            gap
        };
        assert!(first(1.0) > 1e-3);
        assert!(first(0.0) < 1e-4);
    }
}
