//! The CPU reference renderer of reacher2d's top-down camera.
//!
//! Every pixel is shaded independently from its centre's world coordinates by
//! testing, in painter's order, the base, the two links (capsules), the end effector
//! and the three targets (discs, drawn last so the arm never hides them). The same
//! per-pixel rule is what a GPU shader must reproduce.

use nalgebra::Vector2;

use super::scene::{Scene, TargetColour};
use crate::observation::Image;

/// Table colour.
pub const BACKGROUND: [u8; 3] = [232, 228, 218];
/// Base disc colour.
pub const BASE: [u8; 3] = [60, 60, 60];
/// Upper link colour.
pub const UPPER_LINK: [u8; 3] = [95, 95, 115];
/// Lower link colour.
pub const LOWER_LINK: [u8; 3] = [130, 130, 150];
/// End-effector colour.
pub const END_EFFECTOR: [u8; 3] = [240, 200, 40];

/// Radius of the base disc, metres.
pub const BASE_RADIUS: f32 = 0.06;
/// Half-width of each link capsule, metres.
pub const LINK_HALF_WIDTH: f32 = 0.035;
/// Radius of the end-effector disc, metres.
pub const END_EFFECTOR_RADIUS: f32 = 0.045;

/// Renders `scene` as seen from above, the square `[-half_extent, half_extent]^2`
/// (metres, y up) mapped onto `size x size` pixels.
pub fn render(scene: &Scene, size: u32, half_extent: f32) -> Image {
    let mut image = Image::filled(size, size, BACKGROUND);
    let elbow = scene.arm.elbow(scene.q);
    let ee = scene.arm.end_effector(scene.q);
    let origin = Vector2::zeros();
    let pixel = 2.0 * half_extent / size as f32;
    for py in 0..size {
        for px in 0..size {
            let p = Vector2::new(
                -half_extent + (px as f32 + 0.5) * pixel,
                half_extent - (py as f32 + 0.5) * pixel,
            );
            let mut colour = BACKGROUND;
            if segment_distance(p, origin, elbow) <= LINK_HALF_WIDTH {
                colour = UPPER_LINK;
            }
            if segment_distance(p, elbow, ee) <= LINK_HALF_WIDTH {
                colour = LOWER_LINK;
            }
            if p.norm() <= BASE_RADIUS {
                colour = BASE;
            }
            if (p - ee).norm() <= END_EFFECTOR_RADIUS {
                colour = END_EFFECTOR;
            }
            for (target, colour_of) in scene.targets.iter().zip(TargetColour::ALL) {
                if (p - target).norm() <= scene.target_radius {
                    colour = colour_of.rgb();
                }
            }
            let i = ((py * size + px) * 3) as usize;
            image.rgb[i..i + 3].copy_from_slice(&colour);
        }
    }
    image
}

/// Distance from `p` to the segment `a`-`b`.
fn segment_distance(p: Vector2<f32>, a: Vector2<f32>, b: Vector2<f32>) -> f32 {
    let ab = b - a;
    let len2 = ab.norm_squared();
    let t = if len2 > 0.0 {
        ((p - a).dot(&ab) / len2).clamp(0.0, 1.0)
    } else {
        0.0
    };
    (p - (a + ab * t)).norm()
}
