//! What a model reads from an observation, apart from how it reads it: the cameras and
//! the size each is read at, the proprioception entries, the instruction's length and
//! the observation history. Policies and the world model each describe their inputs
//! with one; [`crate::PolicyBatch`] builds tensors from observations by it alone.

use imago_robots::bounds::{ConfigError, in_range, length_in_range};
use serde::{Deserialize, Serialize};

use crate::model::MAX_VECTOR;

/// Name of the camera every robot's observation carries (`Observation::image`).
pub const MAIN_CAMERA: &str = "main";

/// One camera a model reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CameraInput {
    /// The camera's name ([`MAIN_CAMERA`] for the robot's one camera).
    pub name: String,
    /// Side of the square frame the model reads, in pixels.
    pub side: usize,
    /// The whole factor the recorded frame is averaged down by to `side` (1: read as
    /// recorded): the robot's frames are `side * pool` pixels square.
    pub pool: usize,
    /// The model is given a blank (white) frame instead of the camera's: it learns
    /// nothing from the camera and needs none (a policy that must not depend on how
    /// a simulator draws its frames).
    #[serde(default)]
    pub blank: bool,
}

impl CameraInput {
    /// Side of the robot's frames, in pixels.
    pub fn recorded_side(&self) -> usize {
        self.side * self.pool.max(1)
    }
}

/// What a model reads from each observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputSpec {
    /// Length of the robot's proprioception vector.
    pub proprio_dim: usize,
    /// The proprioception entries read, in order.
    pub state: Vec<usize>,
    /// The cameras read; empty for a state-only model.
    pub cameras: Vec<CameraInput>,
    /// Words of the instruction read (padded or refused beyond); `None` for a model
    /// that does not read the instruction.
    pub instruction_words: Option<usize>,
    /// Observations read per decision, the current one last.
    pub history: usize,
    /// Proprioception entries a training batch carries as targets without the model
    /// reading them (a policy's keypoint targets); empty when acting needs none.
    #[serde(default)]
    pub targets: Vec<usize>,
    /// Per action dimension, the magnitude that maps to 1 (actions are predicted in
    /// units of it).
    pub action_limit: Vec<f32>,
    /// Per action dimension, the proprioception entry it is measured from (actions
    /// relative to the robot's commanded position); `None` for absolute actions.
    pub action_origin: Option<Vec<usize>>,
}

impl InputSpec {
    /// Length of an action.
    pub fn action_dim(&self) -> usize {
        self.action_limit.len()
    }

    /// The camera read, if any (observations carry one frame: [`MAIN_CAMERA`]).
    pub fn camera(&self) -> Option<&CameraInput> {
        self.cameras.first()
    }

    /// Checks the spec against what observations can provide; the error names the
    /// first field that does not fit.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("proprio_dim", self.proprio_dim, 1..=MAX_VECTOR)?;
        length_in_range("state", &self.state, 0..=self.proprio_dim)?;
        entries_of_proprio("state", &self.state, self.proprio_dim)?;
        entries_of_proprio("targets", &self.targets, self.proprio_dim)?;
        imago_robots::validate_action_limit(&self.action_limit)?;
        if let Some(origin) = &self.action_origin {
            action_origin_fits(origin, self.action_dim(), self.proprio_dim)?;
        }
        if self.cameras.len() > 1 || self.cameras.iter().any(|c| c.name != MAIN_CAMERA) {
            let names: Vec<&str> = self.cameras.iter().map(|c| c.name.as_str()).collect();
            return Err(ConfigError::new(
                "cameras",
                names.join(","),
                format!("observations carry one frame, the camera `{MAIN_CAMERA}`"),
            ));
        }
        for camera in &self.cameras {
            in_range("camera side", camera.side, 1..=512)?;
            in_range("camera pool", camera.pool, 1..=64)?;
        }
        if let Some(words) = self.instruction_words {
            in_range("instruction_words", words, 1..=64)?;
        }
        // Frame stacking is not built: a model reads the current observation.
        in_range("history", self.history, 1..=1)
    }
}

/// Checks an `action_origin`: one proprioception entry per action dimension.
pub(crate) fn action_origin_fits(
    origin: &[usize],
    action_dim: usize,
    proprio_dim: usize,
) -> Result<(), ConfigError> {
    if origin.len() != action_dim {
        return Err(ConfigError::new(
            "action_origin",
            origin,
            format!("needs one entry per action dimension ({action_dim})"),
        ));
    }
    entries_of_proprio("action_origin", origin, proprio_dim)
}

/// Checks that every index in `indices` (the field `key`) names one of the
/// `proprio_dim` proprioception entries.
pub(crate) fn entries_of_proprio(
    key: &str,
    indices: &[usize],
    proprio_dim: usize,
) -> Result<(), ConfigError> {
    match indices.iter().find(|&&i| i >= proprio_dim) {
        Some(i) => Err(ConfigError::new(
            key,
            indices,
            format!("names entry {i}, but proprioception has {proprio_dim} entries"),
        )),
        None => Ok(()),
    }
}
