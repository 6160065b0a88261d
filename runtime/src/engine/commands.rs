//! Where the actor's commands come from (`[actor.chunking]`, docs/runtime.md):
//!
//! - `every_tick`: the policy runs on the control thread at every tick and the robot
//!   executes the first action of its chunk. Closed loop at every tick, but a policy
//!   slower than the control period makes every tick late.
//! - `synchronous`: the robot executes each chunk whole, then waits while the policy
//!   plans the next on the control thread (LeRobot's and openpi's default execution):
//!   a slow policy makes the robot pause at every chunk boundary, and the new chunk
//!   starts wherever it starts.
//! - `realtime`: real-time chunking. A planner thread computes the next chunk from
//!   the newest observation while the robot executes the current one. It is asked
//!   just in time: when the plan left is no longer than the last chunk's planning
//!   delay (in ticks) plus the blend, so that the new chunk arrives with `blend_ticks`
//!   of the old plan left to fade across. Each new chunk skips the actions that fell
//!   due while it was computed and is cross-faded into the old plan ([`ChunkQueue`]).
//!   The control thread never waits on inference; if the plan runs out before the
//!   next chunk is in, the robot holds its last command (counted as a starved tick).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use burn::Dispatch;
use imago_policies::{HostScratch, PolicyBatch};
use imago_robots::Observation;
use rand::rngs::StdRng;

use super::chunking::{ChunkMode, Command, CommandSettings};
use super::lerobot_ticks::LeRobotTicks;
use super::planner::{ChunkPlanner, ChunkRequest, PlannedChunk, sample_command};
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
            let sampled = self.sample(observation, current)?;
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

    /// `synchronous`: the next action of the chunk in `queue`, planning a new chunk
    /// when it is done.
    fn next_of_chunk(
        &mut self,
        queue: &mut ChunkQueue,
        observation: &Observation,
        current: &PolicySnapshot,
    ) -> anyhow::Result<Command> {
        if queue.is_empty() {
            let sampled = self.sample(observation, current)?;
            queue.merge(&sampled.chunk, 0, 0, current.version);
        }
        let next = queue
            .pop()
            .ok_or_else(|| anyhow::anyhow!("the policy planned an empty chunk"))?;
        let mut plan = next.action.clone();
        plan.extend(queue.planned());
        Ok(Command {
            action: next.action,
            log_prob: None,
            plan,
            version: next.version,
        })
    }

    /// The policy's command for `observation`, after the added latency.
    fn sample(
        &mut self,
        observation: &Observation,
        current: &PolicySnapshot,
    ) -> anyhow::Result<SampledCommand> {
        let sampled = sample_command(
            current,
            observation,
            (&mut self.batch, &mut self.scratch),
            &self.device,
            &mut self.rng,
            self.exploration,
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
