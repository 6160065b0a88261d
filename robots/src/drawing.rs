//! What telemetry draws of a robot's scene: plain 2-D shapes in the robot's world
//! units, so that the recording code needs no robot-specific drawing (each robot says
//! what it looks like through the [`crate::Robot`] drawing hooks).

use serde::{Deserialize, Serialize};

/// A marked place in the scene (a target, a goal), drawn as a labelled disc.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SceneMark {
    /// Centre, world units.
    pub position: [f32; 2],
    /// Radius, world units.
    pub radius: f32,
    /// Colour.
    pub rgb: [u8; 3],
    /// Label shown beside it.
    pub label: String,
    /// The mark the instruction names (drawn larger).
    pub instructed: bool,
}

/// The parts of a scene that stay put during an episode, drawn at its start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SceneDrawing {
    /// Targets and goals.
    pub marks: Vec<SceneMark>,
}
