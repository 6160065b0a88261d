//! The CPU renderer of PushT's top-down camera, drawn as gym-pusht draws it.
//!
//! gym-pusht paints a 512x512 pygame surface (white ground, the goal T filled light
//! green, the walls, the pusher as a royal-blue disc with a lighter core, the block
//! filled light slate grey with a 2-unit darker outline) and shrinks it with
//! `cv2.resize` (bilinear). This renderer does the same per output pixel: it shades the
//! four 512-grid pixel centres that `cv2.INTER_LINEAR` would blend and blends them
//! with the same weights, so a 96x96 frame shows what gym-pusht's `pixels` observation
//! shows (up to the anti-aliasing of pygame's rasteriser).

use super::geometry::{self, GOAL, Pose};
use super::physics::{PUSHER_RADIUS, WALL_RADIUS, WALLS};
use crate::observation::Image;

/// The ground.
pub const BACKGROUND: [u8; 3] = [255, 255, 255];
/// The goal T (pygame's `LightGreen`).
pub const GOAL_FILL: [u8; 3] = [144, 238, 144];
/// The walls (`LightGray`).
pub const WALL: [u8; 3] = [211, 211, 211];
/// The pusher's rim (`RoyalBlue`).
pub const PUSHER: [u8; 3] = [65, 105, 225];
/// The pusher's core (gym-pusht's `light_color` of `RoyalBlue`: 1.2x, capped).
pub const PUSHER_CORE: [u8; 3] = [78, 126, 255];
/// The block's outline (`LightSlateGray`).
pub const BLOCK_OUTLINE: [u8; 3] = [119, 136, 153];
/// The block's fill (`light_color` of `LightSlateGray`).
pub const BLOCK_FILL: [u8; 3] = [142, 163, 183];
/// Side of gym-pusht's drawing surface, and of the world, in units.
pub const WORLD_SIDE: f64 = 512.0;

/// A body's pose with its rotation worked out once per frame.
struct Placed {
    x: f64,
    y: f64,
    cos: f64,
    sin: f64,
}

impl Placed {
    fn new(pose: &Pose) -> Self {
        let (sin, cos) = pose.angle.sin_cos();
        Self {
            x: pose.x,
            y: pose.y,
            cos,
            sin,
        }
    }

    /// A world point in the body frame.
    fn local(&self, p: [f64; 2]) -> [f64; 2] {
        let (dx, dy) = (p[0] - self.x, p[1] - self.y);
        [
            dx * self.cos + dy * self.sin,
            -dx * self.sin + dy * self.cos,
        ]
    }
}

/// Whether a body-frame point is more than `margin` inside the bar or the stem (away
/// from every edge of either piece, the edge they share included).
fn deep_inside([x, y]: [f64; 2], margin: f64) -> bool {
    let bar = x.abs() <= geometry::BAR_HALF_LENGTH - margin
        && (margin..=geometry::THICKNESS - margin).contains(&y);
    let stem = x.abs() <= geometry::THICKNESS / 2.0 - margin
        && (geometry::THICKNESS + margin..=geometry::STEM_END - margin).contains(&y);
    bar || stem
}

/// Half width of a drawn outline (pygame's fat segments of radius 2).
const OUTLINE: f64 = 2.0;
/// Distance from the block origin beyond which no point of the T lies (its farthest
/// corner, `(15, 120)`, plus the outline).
const BLOCK_REACH: f64 = 123.0;

/// What the scene looks like at one point of the 512x512 surface. Cheap bounding tests
/// come first: most points are plain ground.
fn shade(pusher: [f64; 2], block: &Placed, goal: &Placed, p: [f64; 2]) -> [u8; 3] {
    let near = |body: &Placed| {
        (p[0] - body.x).powi(2) + (p[1] - body.y).powi(2) <= BLOCK_REACH * BLOCK_REACH
    };
    let mut colour = BACKGROUND;
    if near(goal) && geometry::local_distance(goal.local(p)) == 0.0 {
        colour = GOAL_FILL;
    }
    let border = WALL_RADIUS + 6.0;
    if (p[0].min(p[1]) <= border || p[0].max(p[1]) >= WORLD_SIDE - border)
        && WALLS
            .iter()
            .any(|&(a, b)| segment_distance(p, a, b) <= WALL_RADIUS)
    {
        colour = WALL;
    }
    let to_pusher = (p[0] - pusher[0]).powi(2) + (p[1] - pusher[1]).powi(2);
    if to_pusher <= PUSHER_RADIUS * PUSHER_RADIUS {
        colour = if to_pusher <= (PUSHER_RADIUS - 4.0).powi(2) {
            PUSHER_CORE
        } else {
            PUSHER
        };
    }
    if near(block) {
        let local = block.local(p);
        if geometry::local_distance(local) <= OUTLINE {
            colour = if deep_inside(local, OUTLINE) {
                BLOCK_FILL
            } else {
                BLOCK_OUTLINE
            };
        }
    }
    colour
}

/// Renders the scene as a `size x size` frame (rows top first, y down as in the world).
pub fn render(pusher: [f64; 2], block: &Pose, size: u32) -> Image {
    let mut image = Image::filled(size, size, BACKGROUND);
    let (block, goal) = (Placed::new(block), Placed::new(&GOAL));
    let scale = WORLD_SIDE / size as f64;
    let last = WORLD_SIDE - 1.0;
    // The 512-grid pixels and weights cv2's bilinear resize blends for each output
    // row or column (the same for x and y).
    let taps: Vec<(f64, f64, f64)> = (0..size)
        .map(|i| {
            let source = ((i as f64 + 0.5) * scale - 0.5).clamp(0.0, last);
            let low = source.floor();
            (low, (low + 1.0).min(last), source - low)
        })
        .collect();
    for (row, &(y0, y1, wy)) in taps.iter().enumerate() {
        for (column, &(x0, x1, wx)) in taps.iter().enumerate() {
            let mut rgb = [0.0f64; 3];
            for (x, y, w) in [
                (x0, y0, (1.0 - wx) * (1.0 - wy)),
                (x1, y0, wx * (1.0 - wy)),
                (x0, y1, (1.0 - wx) * wy),
                (x1, y1, wx * wy),
            ] {
                if w == 0.0 {
                    continue;
                }
                let colour = shade(pusher, &block, &goal, [x + 0.5, y + 0.5]);
                for (sum, &value) in rgb.iter_mut().zip(&colour) {
                    *sum += w * value as f64;
                }
            }
            let i = (row * size as usize + column) * 3;
            for (out, sum) in image.rgb[i..i + 3].iter_mut().zip(rgb) {
                *out = (sum + 0.5).clamp(0.0, 255.0) as u8;
            }
        }
    }
    image
}

/// Distance from `p` to the segment `a`-`b`.
fn segment_distance(p: [f64; 2], a: [f64; 2], b: [f64; 2]) -> f64 {
    let ab = [b[0] - a[0], b[1] - a[1]];
    let len2 = ab[0] * ab[0] + ab[1] * ab[1];
    let t = if len2 > 0.0 {
        (((p[0] - a[0]) * ab[0] + (p[1] - a[1]) * ab[1]) / len2).clamp(0.0, 1.0)
    } else {
        0.0
    };
    ((p[0] - a[0] - t * ab[0]).powi(2) + (p[1] - a[1] - t * ab[1]).powi(2)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outline_is_two_units_wide_on_every_edge_of_both_pieces() {
        // Body frame: inside the bar, near the shared edge with the stem, on the far
        // side of the bar, and outside near the stem's end.
        assert!(deep_inside([0.0, 15.0], OUTLINE) && deep_inside([0.0, 75.0], OUTLINE));
        assert!(!deep_inside([0.0, 29.0], OUTLINE) && !deep_inside([59.0, 15.0], OUTLINE));
        assert_eq!(geometry::local_distance([0.0, 121.5]), 1.5);
        assert_eq!(geometry::local_distance([40.0, 60.0]), 25.0);
    }

    #[test]
    fn the_frame_shows_goal_block_pusher_and_walls_where_they_are() {
        let block = Pose {
            x: 120.0,
            y: 330.0,
            angle: 0.0,
        };
        let pusher = [400.0, 100.0];
        let image = render(pusher, &block, 96);
        assert_eq!((image.width, image.height), (96, 96));
        let at =
            |p: [f64; 2]| image.pixel((p[0] / 512.0 * 96.0) as u32, (p[1] / 512.0 * 96.0) as u32);
        assert_eq!(at(GOAL.apply([0.0, 60.0])), GOAL_FILL);
        assert_eq!(at(block.apply([0.0, 75.0])), BLOCK_FILL);
        assert_eq!(at(block.apply([-40.0, 15.0])), BLOCK_FILL);
        assert_eq!(at(pusher), PUSHER_CORE);
        assert_eq!(at([200.0, 60.0]), BACKGROUND);
        // The walls are 4 units wide at 5 and 506: faint but visible at the border.
        let corner = image.pixel(0, 48);
        assert!(corner != BACKGROUND && corner[0] > 200, "{corner:?}");
    }
}
