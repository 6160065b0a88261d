//! The CPU renderer of PushT's top-down camera: gym-pusht's `pixels` observation, byte
//! for byte.
//!
//! gym-pusht paints a 512x512 pygame surface (white ground; the goal T in `LightGreen`;
//! then pymunk's debug drawing through gym-pusht's `DrawOptions`: the block's bar and
//! stem, each filled with the light `LightSlateGray` and outlined by fat segments in
//! `LightSlateGray`, the pusher as a `RoyalBlue` disc with a lighter core, the walls as
//! fat `LightGray` segments) and shrinks it with `cv2.resize` (bilinear). This renderer
//! paints the same surface in the same order with pygame's rasterisation rules
//! (`raster`), every corner rounded to a whole pixel as pymunk's `to_pygame` rounds it,
//! and shrinks it with OpenCV's fixed-point bilinear arithmetic (`shrink`). What it
//! does not draw: the short red marks pymunk adds at contact points (a few pixels of
//! the 512x512 surface where the block touches the pusher or a wall).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use super::geometry::{GOAL, KEYPOINTS, Pose};
use super::physics::{PUSHER_RADIUS, WALL_RADIUS, WALLS};
use super::raster::Canvas;
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
/// The block's fill (`light_color` of `LightSlateGray`, 1.2x and rounded as pymunk's
/// `as_int` rounds).
pub const BLOCK_FILL: [u8; 3] = [143, 163, 184];
/// Side of gym-pusht's drawing surface, and of the world, in units.
pub const WORLD_SIDE: f64 = 512.0;
/// Half the width of pymunk's fat segments (`draw_fat_segment`'s radius): the walls'
/// radius, and the block's outline (gym-pusht's `draw_polygon` sets it to 2).
const FAT_RADIUS: f64 = WALL_RADIUS;
/// Width of the pusher's rim: its core is drawn `round(radius - 4)`.
const PUSHER_RIM: f64 = 4.0;

/// A world point as pymunk's `to_pygame` passes it to pygame: each coordinate
/// rounded to the nearest whole pixel, ties to even (Python's `round`).
fn to_pixel(p: [f64; 2]) -> [i64; 2] {
    [p[0].round_ties_even() as i64, p[1].round_ties_even() as i64]
}

/// The corners of the T's two pieces placed at `pose`, as pixels, in the order
/// pymunk keeps them (`KEYPOINTS`: the bar's four, then the stem's).
fn pieces(pose: &Pose) -> [[[i64; 2]; 4]; 2] {
    let place = |first: usize| std::array::from_fn(|i| to_pixel(pose.apply(KEYPOINTS[first + i])));
    [place(0), place(4)]
}

/// gym-pusht's `draw_fat_segment`: a line 4 pixels thick, a parallelogram offset
/// 2 pixels from the segment (along `(|dy|, |dx|)`, as gym-pusht writes it) and a
/// disc of radius 2 at each end.
fn fat_segment(canvas: &mut Canvas, a: [i64; 2], b: [i64; 2], colour: [u8; 3]) {
    let width = (2.0 * FAT_RADIUS).round_ties_even() as i64;
    canvas.thick_line(a, b, width, colour);
    let across = [(b[1] - a[1]).abs() as f64, (b[0] - a[0]).abs() as f64];
    let length = across[0].hypot(across[1]);
    if length == 0.0 {
        return;
    }
    let [ox, oy] = across.map(|v| (v * FAT_RADIUS / length).round_ties_even() as i64);
    canvas.fill_polygon(
        &[
            [a[0] - ox, a[1] - oy],
            [a[0] + ox, a[1] + oy],
            [b[0] + ox, b[1] + oy],
            [b[0] - ox, b[1] - oy],
        ],
        colour,
    );
    let radius = FAT_RADIUS.round_ties_even() as i64;
    canvas.fill_circle(a, radius, colour);
    canvas.fill_circle(b, radius, colour);
}

/// The 512x512 surface before anything moves onto it: the ground and the goal T.
static GROUND: LazyLock<Canvas> = LazyLock::new(|| {
    let mut canvas = Canvas::filled(WORLD_SIDE as usize, BACKGROUND);
    for piece in pieces(&GOAL) {
        canvas.fill_polygon(&piece, GOAL_FILL);
    }
    canvas
});

/// gym-pusht's 512x512 surface for the scene (pymunk draws the moving shapes before
/// the static walls).
fn draw(pusher: [f64; 2], block: &Pose) -> Canvas {
    let mut canvas = GROUND.clone();
    for piece in pieces(block) {
        canvas.fill_polygon(&piece, BLOCK_FILL);
        for i in 0..piece.len() {
            fat_segment(
                &mut canvas,
                piece[i],
                piece[(i + 1) % piece.len()],
                BLOCK_OUTLINE,
            );
        }
    }
    let centre = to_pixel(pusher);
    canvas.fill_circle(centre, PUSHER_RADIUS.round_ties_even() as i64, PUSHER);
    let core = (PUSHER_RADIUS - PUSHER_RIM).round_ties_even() as i64;
    canvas.fill_circle(centre, core, PUSHER_CORE);
    for (a, b) in WALLS {
        fat_segment(&mut canvas, to_pixel(a), to_pixel(b), WALL);
    }
    canvas
}

/// Renders the scene as a `size x size` frame (rows top first, y down as in the world).
pub fn render(pusher: [f64; 2], block: &Pose, size: u32) -> Image {
    shrink(&draw(pusher, block), size)
}

/// Bits of OpenCV's fixed-point resize weights (`INTER_RESIZE_COEF_BITS`).
const WEIGHT_BITS: u32 = 11;

/// For each output row or column of a `from`-to-`to` bilinear resize, the two source
/// indices and their fixed-point weights, computed as `cv::resize` computes them
/// (single-precision source positions, weights rounded to 1/2048).
fn taps(from: usize, to: usize) -> Vec<([usize; 2], [i32; 2])> {
    // OpenCV's scale is the inverse of its inverse scale, in double precision.
    let scale = 1.0 / (to as f64 / from as f64);
    let unit = (1 << WEIGHT_BITS) as f32;
    (0..to)
        .map(|i| {
            let source = ((i as f64 + 0.5) * scale - 0.5) as f32;
            let low = source.floor();
            // Before the first pixel or from the last on, the edge pixel alone.
            let (low, frac) = if low < 0.0 {
                (0, 0.0)
            } else if low as usize >= from - 1 {
                (from - 1, 0.0)
            } else {
                (low as usize, source - low)
            };
            let weights = [
                ((1.0 - frac) * unit).round_ties_even() as i32,
                (frac * unit).round_ties_even() as i32,
            ];
            ([low, (low + 1).min(from - 1)], weights)
        })
        .collect()
}

/// The canvas shrunk to `size x size` as gym-pusht's `cv2.resize(img, (size, size))`
/// shrinks it, byte for byte: OpenCV's bilinear interpolation in fixed point (each row
/// interpolated with 11-bit weights, then rows blended as its vectorised path does),
/// and, where the canvas is exactly twice the size, the 2x2 average OpenCV switches to.
fn shrink(canvas: &Canvas, size: u32) -> Image {
    let (from, to) = (canvas.side(), size as usize);
    let mut image = Image::filled(size, size, BACKGROUND);
    if from == 2 * to {
        for (i, out) in image.rgb.iter_mut().enumerate() {
            let (pixel, channel) = (i / 3, i % 3);
            let (x, y) = (2 * (pixel % to), 2 * (pixel / to));
            let sum: u32 = [(x, y), (x + 1, y), (x, y + 1), (x + 1, y + 1)]
                .iter()
                .map(|&(x, y)| canvas.pixel(x, y)[channel] as u32)
                .sum();
            *out = ((sum + 2) >> 2) as u8;
        }
        return image;
    }
    let taps = taps(from, to);
    // Each source row the shrunk rows blend, interpolated along x once.
    let rows: BTreeMap<usize, Vec<i32>> = taps
        .iter()
        .flat_map(|(sources, _)| *sources)
        .map(|y| {
            let row = canvas.row(y);
            let across = taps.iter().flat_map(|&([x0, x1], [w0, w1])| {
                (0..3).map(move |c| row[x0 * 3 + c] as i32 * w0 + row[x1 * 3 + c] as i32 * w1)
            });
            (y, across.collect())
        })
        .collect();
    for (y, &([y0, y1], [w0, w1])) in taps.iter().enumerate() {
        let out = &mut image.rgb[y * to * 3..(y + 1) * to * 3];
        for ((value, &top), &bottom) in out.iter_mut().zip(&rows[&y0]).zip(&rows[&y1]) {
            let blended = ((w0 * (top >> 4)) >> 16) + ((w1 * (bottom >> 4)) >> 16);
            *value = ((blended + 2) >> 2).clamp(0, 255) as u8;
        }
    }
    image
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_surface_outlines_the_block_and_rounds_corners_to_pixels() {
        let block = Pose {
            x: 120.4,
            y: 330.0,
            angle: 0.0,
        };
        let canvas = draw([400.0, 100.0], &block);
        // The bar's top edge at y = 330 (the body origin) is outlined over the fill:
        // pygame's 4-pixel line covers rows 329 to 332, gym-pusht's parallelogram
        // 2 pixels either side 328 to 332; white above.
        let column: Vec<[u8; 3]> = (326..336).map(|y| canvas.pixel(120, y)).collect();
        assert_eq!(column[..2], [BACKGROUND; 2]);
        assert_eq!(column[2..7], [BLOCK_OUTLINE; 5]);
        assert_eq!(column[7..], [BLOCK_FILL; 3]);
        // The bar's left end at x = 120.4 - 60, rounded to 60: outline from 58 to 62.
        let row: Vec<[u8; 3]> = (57..64).map(|x| canvas.pixel(x, 340)).collect();
        assert_eq!(row[0], BACKGROUND);
        assert_eq!(row[1..6], [BLOCK_OUTLINE; 5]);
        assert_eq!(row[6], BLOCK_FILL);
        // The pusher at (400, 100): pygame's disc of radius 15 covers 385..=414.
        assert_eq!(canvas.pixel(385, 100), PUSHER);
        assert_eq!(canvas.pixel(414, 100), PUSHER);
        assert_eq!(canvas.pixel(384, 100), BACKGROUND);
        assert_eq!(canvas.pixel(415, 100), BACKGROUND);
    }

    /// A 16x16 test card whose channels vary at different rates.
    fn test_card() -> Canvas {
        let mut canvas = Canvas::filled(16, BACKGROUND);
        for y in 0..16i64 {
            for x in 0..16i64 {
                let value = |a: i64, b: i64| ((a * x * x + b * y + 7 * x * y) % 256) as u8;
                // A one-corner polygon is one pixel.
                canvas.fill_polygon(&[[x, y]], [value(3, 11), value(5, 2), value(1, 17)]);
            }
        }
        canvas
    }

    #[test]
    fn shrinking_matches_opencv_byte_for_byte() {
        // cv2.resize(card, (6, 6)) (INTER_LINEAR, OpenCV 4.x), first channel.
        let expected: [[u8; 6]; 6] = [
            [16, 67, 160, 82, 111, 147],
            [61, 162, 48, 127, 142, 92],
            [106, 128, 185, 171, 172, 180],
            [151, 95, 81, 117, 75, 75],
            [196, 126, 183, 91, 106, 163],
            [205, 156, 107, 207, 136, 108],
        ];
        let image = shrink(&test_card(), 6);
        for (y, row) in expected.iter().enumerate() {
            for (x, &value) in row.iter().enumerate() {
                assert_eq!(image.pixel(x as u32, y as u32)[0], value, "({x}, {y})");
            }
        }
        // cv2.resize(card, (8, 8)) averages 2x2 squares, rounding half up.
        let image = shrink(&test_card(), 8);
        let card = test_card();
        let average = |x: usize, y: usize| {
            let sum: u32 = [(0, 0), (1, 0), (0, 1), (1, 1)]
                .iter()
                .map(|&(dx, dy)| card.pixel(2 * x + dx, 2 * y + dy)[1] as u32)
                .sum();
            ((sum + 2) / 4) as u8
        };
        assert_eq!(image.pixel(3, 5)[1], average(3, 5));
        assert_eq!(image.pixel(7, 0)[1], average(7, 0));
    }

    #[test]
    fn shrinking_to_the_same_size_and_uniform_colour_are_exact() {
        let card = test_card();
        let same = shrink(&card, 16);
        for (x, y) in [(0, 0), (5, 9), (15, 15)] {
            assert_eq!(same.pixel(x, y), card.pixel(x as usize, y as usize));
        }
        let grey = Canvas::filled(512, [17, 128, 254]);
        for size in [16, 24, 96, 200] {
            assert!(
                shrink(&grey, size)
                    .rgb
                    .chunks_exact(3)
                    .all(|p| p == [17, 128, 254]),
                "{size}"
            );
        }
    }
}
