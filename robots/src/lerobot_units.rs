//! How a robot's observations and actions read in the units of its task's LeRobot
//! datasets and policies. imago's robots scale their proprioception and actions (PushT
//! to [-1, 1]); a LeRobot policy trained on gym-pusht reads the pusher's position and
//! writes its target in gym-pusht's pixels (0-512). Each entry is an affine map.

use crate::observation::Action;
use crate::robot::RobotSpec;

/// One entry in LeRobot's units: `scale * imago_value + offset`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Affine {
    /// Scale.
    pub scale: f32,
    /// Offset.
    pub offset: f32,
}

impl Affine {
    /// The same units.
    pub const IDENTITY: Self = Self {
        scale: 1.0,
        offset: 0.0,
    };
}

/// A robot's units as LeRobot's features read them.
#[derive(Debug, Clone, PartialEq)]
pub struct LeRobotUnits {
    /// LeRobot's `observation.state`: per entry, the proprioception index it reads and
    /// how.
    pub state: Vec<(usize, Affine)>,
    /// LeRobot's `action`: per entry, how it reads imago's action entry.
    pub action: Vec<Affine>,
}

impl LeRobotUnits {
    /// The robot's own units: all of its proprioception and its action as they are.
    pub fn identity(spec: &RobotSpec) -> Self {
        Self {
            state: (0..spec.proprio_dim())
                .map(|i| (i, Affine::IDENTITY))
                .collect(),
            action: vec![Affine::IDENTITY; spec.action_dim()],
        }
    }

    /// LeRobot's `observation.state` of the proprioception `proprio`.
    pub fn state_of(&self, proprio: &[f32]) -> Vec<f32> {
        self.state
            .iter()
            .map(|&(i, a)| a.scale * proprio[i] + a.offset)
            .collect()
    }

    /// imago's action of LeRobot's `action` (same length as [`Self::action`]).
    pub fn action_from(&self, lerobot: &[f32]) -> Action {
        Action(
            lerobot
                .iter()
                .zip(&self.action)
                .map(|(v, a)| (v - a.offset) / a.scale)
                .collect(),
        )
    }

    /// LeRobot's `action` of imago's `action`: the inverse of [`Self::action_from`],
    /// how a recorded command becomes a LeRobot policy's training target.
    pub fn action_of(&self, action: &Action) -> Vec<f32> {
        action
            .0
            .iter()
            .zip(&self.action)
            .map(|(v, a)| a.scale * v + a.offset)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::Robot;
    use crate::pusht::{PushT, to_normalised};

    #[test]
    fn pusht_reads_in_gym_pushts_pixels() {
        let mut robot = PushT::default();
        let units = robot.lerobot_units();
        let observation = robot.reset(3);
        let state = units.state_of(&observation.proprio);
        let [ax, ay, ..] = crate::pusht::state_from_proprio(&observation.proprio).unwrap();
        assert!((state[0] as f64 - ax).abs() < 1e-3 && (state[1] as f64 - ay).abs() < 1e-3);
        let action = units.action_from(&[100.0, 400.0]);
        let want = [to_normalised(100.0), to_normalised(400.0)];
        assert!(action.0.iter().zip(want).all(|(a, w)| (a - w).abs() < 1e-6));
        let back = units.action_of(&action);
        assert!((back[0] - 100.0).abs() < 1e-3 && (back[1] - 400.0).abs() < 1e-3);
    }
}
