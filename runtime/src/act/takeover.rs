//! Takeover: the robot's noiseless scripted expert commands from the tick a policy
//! stalls (a simulated person taking over), in rollouts and in the daemon's actor.

use imago_robots::bounds::{ConfigError, in_range};
use imago_robots::{ExpertConfig, Robot};
use serde::{Deserialize, Serialize};

use crate::robot::SimRobot;

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

/// One episode's takeover: the tracked point's path, and whether the robot's
/// noiseless scripted expert has taken over (the tracked point moved less than
/// `min_progress` over `window` ticks while the episode went on). Without a config, or
/// on a robot without a tracked point or an expert, it never takes over.
pub struct TakeoverWatch {
    config: Option<TakeoverConfig>,
    path: Vec<[f32; 2]>,
    active: bool,
}

impl TakeoverWatch {
    /// A watch over the episode `robot` was just reset to.
    pub fn new(config: Option<&TakeoverConfig>, robot: &SimRobot) -> Self {
        Self {
            config: config.cloned(),
            path: robot.tracked_point().into_iter().collect(),
            active: false,
        }
    }

    /// Whether the expert has taken over.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Records the tracked point after a tick and starts `robot`'s noiseless expert
    /// (towards the instructed goal) if the policy stalled and the episode goes on;
    /// from then on `robot.expert_action()` gives the commands.
    pub fn observe(&mut self, robot: &mut SimRobot, seed: u64, done: bool) {
        let Some(config) = &self.config else { return };
        let Some(point) = robot.tracked_point() else {
            return;
        };
        self.path.push(point);
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
