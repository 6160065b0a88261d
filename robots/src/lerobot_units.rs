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
    /// LeRobot's `observation.environment_state`, if the robot gives one.
    pub env_state: Option<EnvState>,
}

/// An environment state a robot gives LeRobot's policies, computed from its
/// proprioception as the task's LeRobot datasets record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvState {
    /// gym-pusht's `environment_state`: the T's eight keypoints `[x0, y0, x1, y1, ...]`
    /// in gym-pusht's pixels (`obs_type = "environment_state_agent_pos"`), from the
    /// block pose in pusht's proprioception.
    PushTKeypoints,
}

impl EnvState {
    /// Values in the environment state.
    pub fn len(self) -> usize {
        match self {
            Self::PushTKeypoints => 16,
        }
    }

    /// Never empty.
    pub fn is_empty(self) -> bool {
        false
    }

    /// The environment state of the proprioception `proprio`; `None` when it is too
    /// short to hold what the state is computed from.
    pub fn of(self, proprio: &[f32]) -> Option<Vec<f32>> {
        match self {
            Self::PushTKeypoints => crate::pusht::keypoints_from_proprio(proprio)
                .map(|points| points.iter().flatten().map(|&v| v as f32).collect()),
        }
    }
}

impl LeRobotUnits {
    /// The robot's own units: all of its proprioception and its action as they are.
    pub fn identity(spec: &RobotSpec) -> Self {
        Self {
            state: (0..spec.proprio_dim())
                .map(|i| (i, Affine::IDENTITY))
                .collect(),
            action: vec![Affine::IDENTITY; spec.action_dim()],
            env_state: None,
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

    /// gym-pusht 0.1.8's `environment_state` for the block at (328.98980, 260.58210),
    /// angle 0.7 (printed by `env.reset(options={"reset_to_state": [100, 200, 300,
    /// 250, 0.7]})` with `obs_type="environment_state_agent_pos"`, which places the
    /// block there).
    #[test]
    fn pusht_gives_gym_pushts_keypoints_as_its_environment_state() {
        const GYM_PUSHT: [f64; 16] = [
            283.09926, 221.92904, 374.88033, 299.23516, 355.55380, 322.18043, 263.77273, 244.87431,
            298.19063, 273.86410, 321.13590, 293.19063, 263.15631, 362.02643, 240.21104, 342.69990,
        ];
        let units = PushT::default().lerobot_units();
        let env_state = units.env_state.expect("pusht gives an environment state");
        let proprio = [
            0.0,
            0.0,
            to_normalised(328.9897959256961),
            to_normalised(260.58210157219804),
            0.7,
            0.7f32.cos(),
            0.7f32.sin(),
        ];
        let keypoints = env_state.of(&proprio).unwrap();
        assert_eq!(keypoints.len(), env_state.len());
        for (ours, gym) in keypoints.iter().zip(GYM_PUSHT) {
            assert!((*ours as f64 - gym).abs() < 1e-2, "{keypoints:?}");
        }
        assert_eq!(env_state.of(&proprio[..4]), None);
    }
}
