//! Random-shift augmentation of the camera frames a policy is trained on: each
//! training sample's frame moved by a random whole number of camera pixels in x and
//! y, the edges repeated into the uncovered border (DrQ's random shift; Diffusion
//! Policy's random crop is the same idea). A policy then cannot key its actions to
//! where exactly an edge falls on the pixel grid, which a few hundred demonstrations
//! otherwise let it memorise. Acting reads the frame unshifted.

use std::borrow::Cow;

use imago_robots::Observation;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Largest shift, in camera pixels, any config or flag may ask for.
pub const MAX_FRAME_SHIFT: u32 = 32;

/// Draws each training frame's shift: uniform in `[-max, max]` camera pixels per
/// axis, independently per sample, from its own seeded generator (so the batches'
/// transitions are the same with and without the shift).
#[derive(Debug)]
pub struct FrameShifter {
    max: u32,
    rng: StdRng,
}

impl FrameShifter {
    /// Shifts of up to `max` camera pixels; `seed` makes them reproducible.
    pub fn new(max: u32, seed: u64) -> Self {
        Self {
            max,
            // Decorrelated from the batch sampler, which takes `seed` itself.
            rng: StdRng::seed_from_u64(seed ^ 0x5348_4946_5446_524d),
        }
    }

    /// `observation` with its frame shifted at random; borrowed unchanged when the
    /// shift is zero or there is no frame.
    pub fn shift<'a>(&mut self, observation: &'a Observation) -> Cow<'a, Observation> {
        let Some(image) = observation.image.as_ref().filter(|_| self.max > 0) else {
            return Cow::Borrowed(observation);
        };
        let max = self.max as i32;
        let (dx, dy) = (
            self.rng.random_range(-max..=max),
            self.rng.random_range(-max..=max),
        );
        if dx == 0 && dy == 0 {
            return Cow::Borrowed(observation);
        }
        Cow::Owned(Observation {
            image: Some(image.shifted(dx, dy)),
            proprio: observation.proprio.clone(),
            instruction: observation.instruction.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use imago_robots::Image;

    use super::*;

    /// An observation whose 16x16 frame is black but for one white pixel at `(8, 8)`.
    fn one_white_pixel() -> Observation {
        let mut image = Image::filled(16, 16, [0, 0, 0]);
        let i = (8 * 16 + 8) * 3;
        image.rgb[i..i + 3].copy_from_slice(&[255, 255, 255]);
        Observation {
            image: Some(image),
            proprio: vec![0.5, -0.5],
            instruction: "push".into(),
        }
    }

    /// Where the white pixel went.
    fn white_at(observation: &Observation) -> (i32, i32) {
        let image = observation.image.as_ref().unwrap();
        let i = image.rgb.iter().position(|&v| v == 255).unwrap() / 3;
        ((i % 16) as i32, (i / 16) as i32)
    }

    #[test]
    fn shifts_cover_the_range_move_only_the_frame_and_repeat_with_the_seed() {
        let observation = one_white_pixel();
        let mut shifter = FrameShifter::new(2, 7);
        let mut seen = std::collections::BTreeSet::new();
        let moves: Vec<(i32, i32)> = (0..400)
            .map(|_| {
                let shifted = shifter.shift(&observation);
                assert_eq!(shifted.proprio, observation.proprio);
                assert_eq!(shifted.instruction, observation.instruction);
                let (x, y) = white_at(&shifted);
                seen.insert((x - 8, y - 8));
                (x, y)
            })
            .collect();
        // Every one of the 5 x 5 shifts in [-2, 2]^2 is drawn, and none beyond.
        let all: std::collections::BTreeSet<(i32, i32)> = (-2..=2)
            .flat_map(|dx| (-2..=2).map(move |dy| (dx, dy)))
            .collect();
        assert_eq!(seen, all);
        let mut again = FrameShifter::new(2, 7);
        let repeated: Vec<(i32, i32)> = (0..400)
            .map(|_| white_at(&again.shift(&observation)))
            .collect();
        assert_eq!(moves, repeated);
    }

    #[test]
    fn no_shift_borrows_the_observation_unchanged() {
        let observation = one_white_pixel();
        let mut shifter = FrameShifter::new(0, 1);
        assert!(matches!(shifter.shift(&observation), Cow::Borrowed(_)));
        let blind = Observation {
            image: None,
            ..one_white_pixel()
        };
        assert!(matches!(
            FrameShifter::new(4, 1).shift(&blind),
            Cow::Borrowed(_)
        ));
    }
}
