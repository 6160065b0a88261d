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
    /// An episode was given up before its end (a remote robot answered late or went
    /// away): readers count it unfinished, never whole and never damaged.
    EpisodeAbandoned(EpisodeAbandoned),
    /// Where an episode was recorded first (a fleet learner's replay: which actor, and
    /// the episode's id in that actor's own replay), right after its start.
    EpisodeOrigin(EpisodeOrigin),
}

/// The actor that recorded an episode a fleet learner stored, and the episode's id
/// in that actor's replay: what makes a resent episode a duplicate, after a crash too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EpisodeOrigin {
    /// The episode's id in this replay.
    pub episode: u64,
    /// The actor's id (`imago daemon --actor-id`).
    pub actor: String,
    /// The actor's run directory, as a random number drawn when it was created: two
    /// run directories under one actor id are told apart (and refused).
    pub instance: u64,
    /// The episode's id in the actor's own replay.
    pub actor_episode: u64,
}

impl ReplayRecord {
    /// The id of the episode the record belongs to.
    pub fn episode(&self) -> u64 {
        match self {
            Self::EpisodeStart(s) => s.episode,
            Self::Transition(t) => t.episode,
            Self::EpisodeEnd(e) => e.episode,
            Self::EpisodeAbandoned(a) => a.episode,
            Self::EpisodeOrigin(o) => o.episode,
        }
    }
}

/// Why and where an episode was given up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeAbandoned {
    /// The episode's id.
    pub episode: u64,
    /// Steps recorded before it was given up.
    pub steps: u32,
    /// What happened (`late observation`, `link lost`).
    pub reason: String,
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

/// Every transition of `episodes` as `(episode index, step)`, in replay order: the
/// samples learners draw from.
pub fn transition_indices(episodes: &[Episode]) -> Vec<(usize, usize)> {
    episodes
        .iter()
        .enumerate()
        .flat_map(|(e, ep)| (0..ep.transitions.len()).map(move |t| (e, t)))
        .collect()
}
