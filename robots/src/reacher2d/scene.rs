//! The geometric state of a reacher2d scene: arm, joint angles and targets.

use nalgebra::Vector2;
use serde::{Deserialize, Serialize};

use super::kinematics::TwoLinkArm;

/// The three target colours; target `i` of a scene always has colour `ALL[i]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TargetColour {
    /// The red target.
    Red,
    /// The green target.
    Green,
    /// The blue target.
    Blue,
}

impl TargetColour {
    /// All colours, in target order.
    pub const ALL: [TargetColour; 3] = [TargetColour::Red, TargetColour::Green, TargetColour::Blue];

    /// The colour's word in instructions.
    pub fn name(self) -> &'static str {
        match self {
            TargetColour::Red => "red",
            TargetColour::Green => "green",
            TargetColour::Blue => "blue",
        }
    }

    /// The colour as rendered.
    pub fn rgb(self) -> [u8; 3] {
        match self {
            TargetColour::Red => [220, 45, 45],
            TargetColour::Green => [40, 170, 70],
            TargetColour::Blue => [45, 85, 225],
        }
    }

    /// Index of this colour's target in a scene.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Instruction templates; `{}` is replaced by the colour word.
pub const INSTRUCTION_TEMPLATES: [&str; 4] = [
    "reach the {} target",
    "move to the {} target",
    "touch the {} target",
    "go to the {} one",
];

/// The instruction built from template `template` for colour `colour`.
pub fn instruction(template: usize, colour: TargetColour) -> String {
    INSTRUCTION_TEMPLATES[template % INSTRUCTION_TEMPLATES.len()].replace("{}", colour.name())
}

/// Arm geometry, joint angles and target positions: all a frame is rendered from.
#[derive(Debug, Clone, PartialEq)]
pub struct Scene {
    /// Arm geometry.
    pub arm: TwoLinkArm,
    /// Joint angles, radians.
    pub q: [f32; 2],
    /// Target centres, metres, in [`TargetColour::ALL`] order.
    pub targets: [Vector2<f32>; 3],
    /// Drawn radius of each target, metres.
    pub target_radius: f32,
}
