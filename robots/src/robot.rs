//! The interface every robot implements, simulated or real.

use serde::{Deserialize, Serialize};

use crate::bounds::{ConfigError, all_in_range, in_range, length_in_range};
use crate::drawing::SceneDrawing;
use crate::observation::{Action, Observation, Step};

/// The camera a robot carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CameraSpec {
    /// Frame width in pixels.
    pub width: u32,
    /// Frame height in pixels.
    pub height: u32,
}

/// Largest length of a proprioception or action vector a spec or config may name.
pub const MAX_VECTOR: usize = 1024;
/// Range of every action bound: positive, and small enough that models working in
/// units of it (and a safety envelope clamping to it) stay meaningful in `f32`.
pub const ACTION_LIMIT_RANGE: std::ops::RangeInclusive<f32> = 1e-6..=1e6;
/// Largest camera frame side a spec may give, in pixels.
pub const MAX_CAMERA_SIDE: u32 = 4096;

/// Checks an action limit has 1 to 64 entries, each in [`ACTION_LIMIT_RANGE`]. The one
/// check of every action limit imago reads: a robot's spec (built in, from the bridge,
/// from a dataset, from a manifest or a checkpoint) and every model config.
pub fn validate_action_limit(limit: &[f32]) -> Result<(), ConfigError> {
    length_in_range("action_limit", limit, 1..=64)?;
    all_in_range("action_limit", limit, ACTION_LIMIT_RANGE)
}

/// What a learner needs to know about a robot before it sees any data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RobotSpec {
    /// The robot's name, as used in configs and on the command line.
    pub name: String,
    /// Names of the proprioception entries, in order. Velocities are named with the
    /// prefix `qd` (joint velocities) or the suffix `_vel`.
    pub proprio_names: Vec<String>,
    /// Symmetric per-dimension bound of the action space: `|a_i| <= action_limit[i]`.
    pub action_limit: Vec<f32>,
    /// Control ticks per second.
    pub control_hz: f32,
    /// Step limit of one episode.
    pub max_steps: u32,
    /// The camera, if the robot has one.
    pub camera: Option<CameraSpec>,
    /// For robots whose action commands a position they also report (a target for a
    /// pusher or an end effector): per action dimension, the proprioception entry that
    /// holds that position now, in the action's units. Policies then predict each action
    /// as a displacement from where the robot is, which a small network resolves far more
    /// finely than the absolute position (docs/policy.md, "Actions relative to the robot").
    /// `None` for actions that are not positions (reacher2d's joint velocities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_origin: Option<Vec<usize>>,
}

impl RobotSpec {
    /// Checks every field against its range, wherever the spec came from (a robot over
    /// the bridge, a dataset, a replay's manifest, a checkpoint's meta): the error
    /// names the first field that does not fit.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::new("name", &self.name, "must not be empty"));
        }
        length_in_range("proprio_names", &self.proprio_names, 0..=MAX_VECTOR)?;
        validate_action_limit(&self.action_limit)?;
        in_range("control_hz", self.control_hz, 0.1..=1000.0)?;
        in_range("max_steps", self.max_steps, 1..=10_000_000)?;
        if let Some(camera) = self.camera {
            in_range("camera.width", camera.width, 1..=MAX_CAMERA_SIDE)?;
            in_range("camera.height", camera.height, 1..=MAX_CAMERA_SIDE)?;
        }
        if let Some(origin) = &self.action_origin {
            let proprio = self.proprio_dim();
            if origin.len() != self.action_dim() || origin.iter().any(|&i| i >= proprio) {
                return Err(ConfigError::new(
                    "action_origin",
                    origin,
                    format!(
                        "needs one proprioception index (< {proprio}) per action dimension ({})",
                        self.action_dim()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Length of the proprioception vector.
    pub fn proprio_dim(&self) -> usize {
        self.proprio_names.len()
    }

    /// Indices of the proprioception entries that are not velocities.
    pub fn non_velocity_proprio(&self) -> Vec<usize> {
        self.proprio_names
            .iter()
            .enumerate()
            .filter(|(_, name)| !(name.starts_with("qd") || name.ends_with("_vel")))
            .map(|(i, _)| i)
            .collect()
    }

    /// The side of the robot's square camera frames, in pixels (`None` without a
    /// camera). The models' pixel stems read square frames whose side is a multiple of
    /// `multiple_of` (the policy's patch size) between `multiple_of` and `max`: any
    /// other camera is a config error naming the camera, not a failure later.
    pub fn camera_side(&self, multiple_of: u32, max: u32) -> Result<Option<u32>, ConfigError> {
        let Some(camera) = self.camera else {
            return Ok(None);
        };
        let shown = format!("{}x{}", camera.width, camera.height);
        if camera.width != camera.height {
            return Err(ConfigError::new(
                "camera",
                shown,
                "must be square (the models read square frames)",
            ));
        }
        let multiple_of = multiple_of.max(1);
        if camera.width < multiple_of
            || camera.width > max
            || !camera.width.is_multiple_of(multiple_of)
        {
            return Err(ConfigError::new(
                "camera",
                shown,
                format!(
                    "side must be a multiple of {multiple_of} from {multiple_of} to {max} (the models' pixel stem)"
                ),
            ));
        }
        Ok(Some(camera.width))
    }

    /// One line naming the spec: robot, camera, proprioception and action sizes.
    pub fn summary(&self) -> String {
        let camera = self.camera.map_or("no camera".to_string(), |c| {
            format!("camera {}x{}", c.width, c.height)
        });
        format!(
            "{} ({camera}, proprioception {}, action {})",
            self.name,
            self.proprio_dim(),
            self.action_dim()
        )
    }

    /// Length of an action.
    pub fn action_dim(&self) -> usize {
        self.action_limit.len()
    }

    /// What differs between this spec and `other` in what data and models depend on
    /// (robot, proprioception names, action limits, camera), one `field: this vs
    /// other` per difference; empty when data of one fits the other. The control rate
    /// and the step limit may differ.
    pub fn data_differences(&self, other: &RobotSpec) -> Vec<String> {
        let mut out = Vec::new();
        if self.name != other.name {
            out.push(format!("robot: {} vs {}", self.name, other.name));
        }
        if self.proprio_names != other.proprio_names {
            out.push(format!(
                "proprioception: {:?} vs {:?}",
                self.proprio_names, other.proprio_names
            ));
        }
        if self.action_limit != other.action_limit {
            out.push(format!(
                "action limits: {:?} vs {:?}",
                self.action_limit, other.action_limit
            ));
        }
        if self.camera != other.camera {
            let show = |c: Option<CameraSpec>| {
                c.map_or("none".to_string(), |c| format!("{}x{}", c.width, c.height))
            };
            out.push(format!(
                "camera: {} vs {}",
                show(self.camera),
                show(other.camera)
            ));
        }
        out
    }
}

/// Who draws the camera frame of a simulated robot's observations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FrameSource {
    /// The robot renders each frame on the CPU as it observes.
    #[default]
    Robot,
    /// Observations come without a frame (`image: None`): the caller renders the
    /// frames of many robots at once (the batched GPU renderer) and fills them in
    /// before anything reads them.
    Caller,
}

/// A robot that can be reset to a seeded initial condition and stepped at its control rate.
///
/// Simulated robots are deterministic: the same seed and the same actions give the same
/// observations, bit for bit.
pub trait Robot: Send {
    /// The robot's spaces, rate and limits.
    fn spec(&self) -> &RobotSpec;

    /// Starts a new episode from the initial condition that `seed` selects.
    fn reset(&mut self, seed: u64) -> Observation;

    /// Applies one command for one control tick.
    fn step(&mut self, action: &Action) -> Step;

    /// Instructions the current scene could have been given that name a different goal.
    /// Used to check that a policy really follows its instruction.
    fn alternative_instructions(&self) -> Vec<String>;

    /// The point whose motion shows the robot's progress and whose path telemetry
    /// draws (an end effector, a pusher), in world units; `None` for a robot without
    /// one (then a stalled policy is never taken over).
    fn tracked_point(&self) -> Option<[f32; 2]> {
        None
    }

    /// The parts of the current episode's scene that stay put (targets, goals), as
    /// telemetry draws them at the episode's start. Default: nothing.
    fn scene_drawing(&self) -> SceneDrawing {
        SceneDrawing::default()
    }

    /// The robot's body as a polyline whose last point is the tracked point, drawn
    /// from a recorded observation's proprioception (so recorded episodes are drawn
    /// without re-simulating them). Default: nothing.
    fn body_from_proprio(&self, proprio: &[f32]) -> Vec<[f32; 2]> {
        let _ = proprio;
        Vec::new()
    }

    /// How its proprioception and actions read in the units of its task's LeRobot
    /// datasets and policies. Default: its own.
    fn lerobot_units(&self) -> crate::LeRobotUnits {
        crate::LeRobotUnits::identity(self.spec())
    }

    /// The path the tracked point would take under `chunk` (robot units, one action
    /// after another, each held for one tick), from where it is now. Default: none.
    fn intended_path(&self, chunk: &[f32]) -> Vec<[f32; 2]> {
        let _ = chunk;
        Vec::new()
    }
}
