//! `[actor.chunking]` and what every source of the actor's commands shares: the
//! settings a source is built from and the command it gives for a tick
//! (`engine::commands` for imago's policies, `engine::lerobot_ticks` for LeRobot's).

use std::time::Duration;

use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

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

impl ChunkMode {
    /// The mode as the config file writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::EveryTick => "every_tick",
            Self::Synchronous => "synchronous",
            Self::Realtime => "realtime",
        }
    }
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

/// How the actor acts with a policy: what a promotion test in simulation repeats, so
/// that it certifies the behaviour the robot will run (a policy that gains on sampled
/// whole chunks may lose on the mean re-planned every tick, and the other way round;
/// on pusht the two differ by 30 points, docs/pusht.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActorActing {
    /// Each chunk executed whole before the next is planned (`synchronous`, and
    /// `realtime`, whose just-in-time plans execute most of each chunk), rather than
    /// the first action re-planned at every tick (`every_tick`).
    pub whole_chunks: bool,
    /// The noise the actions are sampled with, relative to the policy's spread
    /// (`[actor] exploration`; 0: the mean).
    pub sampling_noise: f32,
}

impl ActorActing {
    /// Acting as `[actor.chunking]` and `[actor] exploration` say.
    pub fn new(chunking: &ChunkingConfig, exploration: f32) -> Self {
        Self {
            whole_chunks: chunking.mode != ChunkMode::EveryTick,
            sampling_noise: exploration,
        }
    }
}

/// One tick's command, in normalised units.
pub(crate) struct Command {
    /// What the robot executes now.
    pub action: Vec<f32>,
    /// Its density under the policy where it was sampled at this tick's observation
    /// (with a Gaussian head: every `every_tick` action, a `synchronous` chunk's
    /// first); `None` for an action planned at an earlier tick.
    pub log_prob: Option<f32>,
    /// The plan from this tick on, `[steps * action_dim]`, `action` first.
    pub plan: Vec<f32>,
    /// The policy version that chose it.
    pub version: u64,
}

/// The settings a command source (`engine::commands`) is built from.
pub(crate) struct CommandSettings<'a> {
    pub chunking: &'a ChunkingConfig,
    pub exploration: f32,
    /// Latency added to every inference (the slowed-policy knob).
    pub added_latency: Duration,
}
