//! What a robot reports each control tick and what it is commanded with.

use serde::{Deserialize, Serialize};

use crate::safety::SafetyVerdict;

/// An 8-bit RGB camera frame, row-major, top row first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 3` bytes, `[r, g, b]` per pixel.
    pub rgb: Vec<u8>,
}

impl Image {
    /// A frame filled with one colour.
    pub fn filled(width: u32, height: u32, colour: [u8; 3]) -> Self {
        let rgb = colour
            .iter()
            .copied()
            .cycle()
            .take((width * height * 3) as usize)
            .collect();
        Self { width, height, rgb }
    }

    /// The colour of pixel `(x, y)`, with `(0, 0)` the top-left corner.
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let i = ((y * self.width + x) * 3) as usize;
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }

    /// The frame moved `dx` pixels right and `dy` down, the edge rows and columns
    /// repeated into the uncovered border (as DrQ's random shift pads by replication):
    /// pixel `(x, y)` of the result is pixel `(x - dx, y - dy)` clamped to the frame.
    pub fn shifted(&self, dx: i32, dy: i32) -> Self {
        let (w, h) = (self.width as i64, self.height as i64);
        let mut rgb = Vec::with_capacity(self.rgb.len());
        for y in 0..h {
            let from_y = (y - dy as i64).clamp(0, h - 1);
            for x in 0..w {
                let from_x = (x - dx as i64).clamp(0, w - 1);
                let i = ((from_y * w + from_x) * 3) as usize;
                rgb.extend_from_slice(&self.rgb[i..i + 3]);
            }
        }
        Self {
            width: self.width,
            height: self.height,
            rgb,
        }
    }
}

/// Everything a policy may see at one control tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The camera frame, for robots that have a camera.
    pub image: Option<Image>,
    /// Proprioception; its layout is named by [`crate::RobotSpec::proprio_names`].
    pub proprio: Vec<f32>,
    /// The natural-language instruction for the current episode.
    pub instruction: String,
}

/// A command for one control tick, in the robot's action space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action(pub Vec<f32>);

/// Diagnostics of one tick that a policy must not see but people and tests may.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    /// The command that was actually executed after the safety envelope.
    pub executed: Action,
    /// What the safety envelope did to the commanded action.
    pub safety: SafetyVerdict,
    /// The episode ended because it ran out of steps, not because it succeeded.
    pub truncated: bool,
    /// Distance from the tracked part (end effector, block) to the instructed goal, in
    /// the robot's world units.
    pub distance_to_goal: f32,
    /// The fraction of the goal region covered, for tasks scored by coverage (pusht);
    /// `None` for others. Evaluations score it as gym-pusht does
    /// ([`crate::pusht::coverage_score`]).
    pub coverage: Option<f32>,
}

/// The outcome of one control tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The observation after the tick.
    pub observation: Observation,
    /// The reward earned by the tick.
    pub reward: f32,
    /// The episode is over (success or step limit).
    pub done: bool,
    /// The instructed task was achieved on this tick.
    pub success: bool,
    /// Diagnostics.
    pub info: StepInfo,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4x3 frame whose pixel `(x, y)` is `[x, y, 7]`.
    fn coordinates() -> Image {
        let rgb = (0..3u8)
            .flat_map(|y| (0..4u8).flat_map(move |x| [x, y, 7]))
            .collect();
        Image {
            width: 4,
            height: 3,
            rgb,
        }
    }

    #[test]
    fn a_shifted_frame_moves_its_pixels_and_repeats_the_edge() {
        let frame = coordinates();
        assert_eq!(frame.shifted(0, 0), frame);
        let moved = frame.shifted(1, -1);
        assert_eq!((moved.width, moved.height), (4, 3));
        // What was at (0, 1) is now at (1, 0).
        assert_eq!(moved.pixel(1, 0), [0, 1, 7]);
        assert_eq!(moved.pixel(3, 1), [2, 2, 7]);
        // The uncovered left column repeats the old edge; the bottom row repeats the last.
        assert_eq!(moved.pixel(0, 0), [0, 1, 7]);
        assert_eq!(moved.pixel(0, 2), [0, 2, 7]);
        assert_eq!(moved.pixel(2, 2), [1, 2, 7]);
        // A shift past the frame leaves the edge everywhere.
        let far = frame.shifted(-10, 0);
        assert!((0..3).all(|y| (0..4).all(|x| far.pixel(x, y) == [3, y as u8, 7])));
    }
}
