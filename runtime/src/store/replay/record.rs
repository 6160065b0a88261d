//! What the replay store records.

use imago_robots::{Action, Observation};
use serde::{Deserialize, Serialize};

/// The start of an episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeStart {
    /// Episode id, unique within the replay.
    pub episode: u64,
    /// Name of the robot.
    pub robot: String,
    /// The seed the robot was reset with.
    pub seed: u64,
    /// The episode's instruction.
    pub instruction: String,
}

/// One control tick: the observation, what was commanded and what followed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    /// Episode id.
    pub episode: u64,
    /// Tick index within the episode, from 0.
    pub step: u32,
    /// The observation the command was chosen from.
    pub observation: Observation,
    /// The command as chosen (by the policy or the intervening controller).
    pub action: Action,
    /// The command as executed after the safety envelope.
    pub executed: Action,
    /// Reward of the tick.
    pub reward: f32,
    /// The episode ended with this tick.
    pub done: bool,
    /// The task was achieved on this tick.
    pub success: bool,
    /// Version of the policy that chose the command (0: a scripted controller).
    pub policy_version: u64,
    /// The command came from an intervention (a human or scripted takeover), not the policy.
    pub intervention: bool,
    /// Log-density of the command's first step under the policy that sampled it (in
    /// units of the action limit), for importance weights on stale data; `None` for
    /// scripted or intervening controllers and for heads without a tractable density.
    pub behaviour_log_prob: Option<f32>,
}

/// The end of an episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeEnd {
    /// Episode id.
    pub episode: u64,
    /// Number of ticks.
    pub steps: u32,
    /// Whether the task was achieved.
    pub success: bool,
    /// The observation after the last tick.
    pub final_observation: Observation,
}

/// One record of a replay segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReplayRecord {
    /// An episode begins.
    EpisodeStart(EpisodeStart),
    /// A control tick.
    Transition(Box<Transition>),
    /// An episode ends.
    EpisodeEnd(Box<EpisodeEnd>),
}

/// One whole episode: it began, every step from 0 was recorded in order, it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// How it began.
    pub start: EpisodeStart,
    /// Its ticks, in order.
    pub transitions: Vec<Transition>,
    /// How it ended.
    pub end: EpisodeEnd,
}
