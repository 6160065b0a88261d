//! The robot the actor drives: simulated in this process, or remote over the bridge.
//! Both reset to a seed and take one command per tick; only a remote one can fail to
//! answer in time or disappear, which the actor handles as an [`Interruption`].

use std::sync::atomic::AtomicBool;

use imago_robots::{Action, Observation, Robot, RobotSpec, Step};

use crate::bridge::{Interruption, RemoteRobot};
use crate::robot::{RobotConfig, SimRobot};

/// A robot under the actor's control.
pub(crate) enum DrivenRobot {
    /// A built-in robot simulated on the actor's thread.
    Simulated(Box<SimRobot>),
    /// A robot in another process.
    Remote(Box<RemoteRobot>),
}

impl DrivenRobot {
    /// The robot `config` names, built or connected.
    pub(crate) fn open(config: &RobotConfig) -> anyhow::Result<Self> {
        Ok(match config {
            RobotConfig::Remote(remote) => Self::Remote(Box::new(RemoteRobot::open(remote)?)),
            simulated => Self::Simulated(Box::new(simulated.build()?)),
        })
    }

    /// The robot's spec.
    pub(crate) fn spec(&self) -> &RobotSpec {
        match self {
            Self::Simulated(robot) => robot.spec(),
            Self::Remote(robot) => robot.spec(),
        }
    }

    /// The simulated robot (expert, takeover and drawing), `None` for a remote one.
    pub(crate) fn simulated(&mut self) -> Option<&mut SimRobot> {
        match self {
            Self::Simulated(robot) => Some(robot),
            Self::Remote(_) => None,
        }
    }

    /// What telemetry draws the robot with, `None` for a remote one.
    pub(crate) fn drawing(&self) -> Option<&dyn Robot> {
        match self {
            Self::Simulated(robot) => Some(robot.as_ref()),
            Self::Remote(_) => None,
        }
    }

    /// Starts episode `episode` from `seed`. A remote robot is waited for while it is
    /// down; `None` once `stop` is set.
    pub(crate) fn reset(
        &mut self,
        seed: u64,
        episode: u64,
        stop: &AtomicBool,
    ) -> anyhow::Result<Option<Observation>> {
        match self {
            Self::Simulated(robot) => Ok(Some(robot.reset(seed))),
            Self::Remote(robot) => robot.reset(seed, episode, stop),
        }
    }

    /// The scripted expert's command, when one has taken over (simulated robots).
    pub(crate) fn expert_action(&mut self) -> Option<Action> {
        self.simulated().and_then(SimRobot::expert_action)
    }

    /// Executes `action` (the first of the predicted `chunk`, chosen by
    /// `policy_version`) for one tick.
    pub(crate) fn step(
        &mut self,
        episode: u64,
        policy_version: u64,
        action: &Action,
        chunk: &[f32],
    ) -> anyhow::Result<Result<Step, Interruption>> {
        match self {
            Self::Simulated(robot) => Ok(Ok(robot.step(action))),
            Self::Remote(robot) => robot.step(episode, policy_version, &action.0, chunk),
        }
    }

    /// Holds the robot still after an interruption.
    pub(crate) fn hold(&mut self, episode: u64) {
        if let Self::Remote(robot) = self {
            robot.hold(episode);
        }
    }
}
