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
use imago_policies::{HostScratch, PolicyBatch, PolicyConfig};
use imago_robots::Observation;
use imago_robots::bounds::{ConfigError, in_range};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::planner::{ChunkPlanner, ChunkRequest, PlannedChunk, sample_command};
use super::snapshot::PolicySnapshot;
use crate::act::chunk_queue::{ChunkQueue, QueuedAction};
use crate::act::sampling::{SampledCommand, exploration_rng};

/// How the actor turns the policy's chunks into commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkMode {
    /// Run the policy at every tick on the control thread; execute the first action.
    #[default]
    EveryTick,
    /// Execute each chunk whole, then plan the next on the control thread.
    Synchronous,
    /// Real-time chunking: plan the next chunk on another thread while the current
    /// one executes, and blend it in.
    Realtime,
}

/// `[actor.chunking]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChunkingConfig {
    /// `every_tick`, `synchronous` or `realtime`.
    pub mode: ChunkMode,
    /// Realtime: ticks over which a new chunk is cross-faded into the old plan
    /// (0: switch at once). Range: [0, 64].
    pub blend_ticks: u32,
}

impl Default for ChunkingConfig {
    fn default() -> Self {
        Self {
            mode: ChunkMode::EveryTick,
            blend_ticks: 4,
        }
    }
}

impl ChunkingConfig {
    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("blend_ticks", self.blend_ticks, 0..=64)
    }
}

/// One tick's command, in normalised units.
pub(crate) struct Command {
    /// What the robot executes now.
    pub action: Vec<f32>,
    /// Its density under the policy where it was sampled at this tick's observation
    /// (`every_tick` with a Gaussian head); `None` for a planned chunk's action.
    pub log_prob: Option<f32>,
    /// The plan from this tick on, `[steps * action_dim]`, `action` first.
    pub plan: Vec<f32>,
    /// The policy version that chose it.
    pub version: u64,
}

/// The policy's commands, one per tick, by the configured [`ChunkMode`].
pub(crate) enum CommandSource {
    EveryTick(Box<EveryTick>),
    Realtime(Box<RealtimeChunks>),
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

/// The settings a [`CommandSource`] is built from.
pub(crate) struct CommandSettings<'a> {
    pub chunking: &'a ChunkingConfig,
    pub exploration: f32,
    /// Latency added to every inference (the slowed-policy knob).
    pub added_latency: Duration,
}

impl CommandSource {
    /// The source `settings` describe, for policies of `policy_config` on `device`.
    pub(crate) fn new(
        settings: &CommandSettings<'_>,
        policy_config: &PolicyConfig,
        device: &burn::tensor::Device<Dispatch>,
    ) -> anyhow::Result<Self> {
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
        }
    }

    /// Ticks the realtime plan ran out and the robot held its last command.
    pub(crate) fn starved_ticks(&self) -> u64 {
        match self {
            Self::EveryTick(_) => 0,
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
