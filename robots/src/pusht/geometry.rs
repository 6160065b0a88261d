//! The T block's shape, poses in gym-pusht's frame, and the coverage of the goal.
//!
//! Frame: gym-pusht's pymunk world, 512x512 units, x to the right, **y down** (pygame
//! draws pymunk's coordinates without flipping), angles in radians with pymunk's
//! rotation `(x cos a - y sin a, x sin a + y cos a)`, which on screen turns clockwise.
//! A block pose is the position of the block body's **origin** (the middle of the bar's
//! top edge, not its centre of mass) and its angle, as gym-pusht's state reports it.

use std::f64::consts::PI;

/// Half length of the T's bar (gym-pusht: `length * scale / 2`, 4 * 30 / 2).
pub const BAR_HALF_LENGTH: f64 = 60.0;
/// Thickness of the bar and width of the stem (gym-pusht's `scale`).
pub const THICKNESS: f64 = 30.0;
/// Distance from the bar's top edge to the stem's end (gym-pusht: `length * scale`).
pub const STEM_END: f64 = 120.0;
/// The block's centre of gravity in its body frame: gym-pusht sets it to the mean of
/// the two rectangles' centroids, `((0, 15) + (0, 75)) / 2`, not the T's area
/// centroid `(0, 40.7)`.
pub const CENTER_OF_GRAVITY: [f64; 2] = [0.0, 45.0];
/// The block's mass.
pub const MASS: f64 = 1.0;
/// The block's moment of inertia about its centre of gravity: gym-pusht adds
/// `moment_for_poly(1, bar)` twice (it passes the bar's vertices for the stem too),
/// and chipmunk's `moment_for_poly` takes the moment about the body origin: 2 * 1500.
pub const INERTIA: f64 = 3000.0;
/// The goal pose of the block's origin (gym-pusht's `goal_pose`).
pub const GOAL: Pose = Pose {
    x: 256.0,
    y: 256.0,
    angle: PI / 4.0,
};
/// Coverage above which an episode succeeds (gym-pusht's `success_threshold`).
pub const SUCCESS_COVERAGE: f64 = 0.95;

/// The bar, body frame, in gym-pusht's vertex order.
pub const BAR: [[f64; 2]; 4] = [
    [-BAR_HALF_LENGTH, THICKNESS],
    [BAR_HALF_LENGTH, THICKNESS],
    [BAR_HALF_LENGTH, 0.0],
    [-BAR_HALF_LENGTH, 0.0],
];
/// The stem, body frame, in gym-pusht's vertex order.
pub const STEM: [[f64; 2]; 4] = [
    [-THICKNESS / 2.0, THICKNESS],
    [-THICKNESS / 2.0, STEM_END],
    [THICKNESS / 2.0, STEM_END],
    [THICKNESS / 2.0, THICKNESS],
];
/// The T's keypoints, body frame, in the order gym-pusht's `get_keypoints` lists them
/// (each shape's vertices as pymunk keeps them: bar, then stem).
pub const KEYPOINTS: [[f64; 2]; 8] = [
    [-BAR_HALF_LENGTH, 0.0],
    [BAR_HALF_LENGTH, 0.0],
    [BAR_HALF_LENGTH, THICKNESS],
    [-BAR_HALF_LENGTH, THICKNESS],
    [-THICKNESS / 2.0, THICKNESS],
    [THICKNESS / 2.0, THICKNESS],
    [THICKNESS / 2.0, STEM_END],
    [-THICKNESS / 2.0, STEM_END],
];
/// The T's outline, body frame, going round once (eight corners).
pub const OUTLINE: [[f64; 2]; 8] = [
    [-BAR_HALF_LENGTH, 0.0],
    [BAR_HALF_LENGTH, 0.0],
    [BAR_HALF_LENGTH, THICKNESS],
    [THICKNESS / 2.0, THICKNESS],
    [THICKNESS / 2.0, STEM_END],
    [-THICKNESS / 2.0, STEM_END],
    [-THICKNESS / 2.0, THICKNESS],
    [-BAR_HALF_LENGTH, THICKNESS],
];
/// Area of the T (bar 120x30 plus stem 30x90).
pub const AREA: f64 = 2.0 * BAR_HALF_LENGTH * THICKNESS + THICKNESS * (STEM_END - THICKNESS);

/// Where a body's origin is and how it is turned, gym-pusht's frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pose {
    /// Origin x.
    pub x: f64,
    /// Origin y (down).
    pub y: f64,
    /// Angle, radians.
    pub angle: f64,
}

impl Pose {
    /// The world frame itself.
    pub fn identity() -> Self {
        Self {
            x: 0.0,
            y: 0.0,
            angle: 0.0,
        }
    }

    /// A body-frame point in the world.
    pub fn apply(&self, local: [f64; 2]) -> [f64; 2] {
        let (s, c) = self.angle.sin_cos();
        [
            self.x + local[0] * c - local[1] * s,
            self.y + local[0] * s + local[1] * c,
        ]
    }

    /// A world point in the body frame.
    pub fn inverse_apply(&self, world: [f64; 2]) -> [f64; 2] {
        let (s, c) = self.angle.sin_cos();
        let (dx, dy) = (world[0] - self.x, world[1] - self.y);
        [dx * c + dy * s, -dx * s + dy * c]
    }

    /// A body-frame direction in the world.
    pub fn rotate(&self, local: [f64; 2]) -> [f64; 2] {
        let (s, c) = self.angle.sin_cos();
        [local[0] * c - local[1] * s, local[0] * s + local[1] * c]
    }

    /// The block's centre of gravity in the world.
    pub fn center_of_gravity(&self) -> [f64; 2] {
        self.apply(CENTER_OF_GRAVITY)
    }

    /// The pose a block ends up in when gym-pusht 0.1.8's `_set_state` asks for this
    /// one. For compatibility with legacy data it sets the position first (with the
    /// block still at angle 0, as `_setup` has just built it) and then the angle, and
    /// pymunk turns a body about its centre of gravity, so the origin moves by
    /// `(I - R(angle)) * cog`: asking for the goal pose gives the origin
    /// `(287.82, 269.18)`, a coverage of 0.298 (both as gym-pusht 0.1.8 reports them).
    pub fn as_placed_by_reset(&self) -> Pose {
        let cog = CENTER_OF_GRAVITY;
        let turned = Pose {
            x: 0.0,
            y: 0.0,
            angle: self.angle,
        }
        .rotate(cog);
        Pose {
            x: self.x + cog[0] - turned[0],
            y: self.y + cog[1] - turned[1],
            angle: self.angle,
        }
    }
}

/// `angle` wrapped into `[0, 2 pi)`, as gym-pusht's state reports the block's angle.
pub fn wrap_positive(angle: f64) -> f64 {
    let wrapped = angle.rem_euclid(2.0 * PI);
    if wrapped >= 2.0 * PI { 0.0 } else { wrapped }
}

/// `angle` wrapped into `(-pi, pi]`.
pub fn wrap_signed(angle: f64) -> f64 {
    let wrapped = wrap_positive(angle);
    if wrapped > PI {
        wrapped - 2.0 * PI
    } else {
        wrapped
    }
}

/// The fraction of the goal T's area that a block at `block` covers: gym-pusht's
/// `_get_coverage` (shapely's intersection of the two T's, each the union of bar and
/// stem). Bar and stem share only an edge, so the intersection area is the sum over the
/// four pairs of rectangles, each a convex clip.
pub fn coverage(block: &Pose) -> f64 {
    let pieces = |pose: &Pose| [BAR.map(|v| pose.apply(v)), STEM.map(|v| pose.apply(v))];
    let goal = pieces(&GOAL);
    let placed = pieces(block);
    let overlap: f64 = goal
        .iter()
        .flat_map(|g| placed.iter().map(move |b| convex_overlap_area(g, b)))
        .sum();
    (overlap / AREA).clamp(0.0, 1.0)
}

/// Area of the intersection of two convex polygons (Sutherland-Hodgman clipping).
pub fn convex_overlap_area(a: &[[f64; 2]], b: &[[f64; 2]]) -> f64 {
    let orientation = signed_area(b).signum();
    let mut clipped: Vec<[f64; 2]> = a.to_vec();
    for i in 0..b.len() {
        if clipped.is_empty() {
            return 0.0;
        }
        let (p, q) = (b[i], b[(i + 1) % b.len()]);
        let inside = |v: [f64; 2]| {
            orientation * ((q[0] - p[0]) * (v[1] - p[1]) - (q[1] - p[1]) * (v[0] - p[0])) >= 0.0
        };
        let input = std::mem::take(&mut clipped);
        for j in 0..input.len() {
            let (s, e) = (input[j], input[(j + 1) % input.len()]);
            match (inside(s), inside(e)) {
                (true, true) => clipped.push(e),
                (true, false) => clipped.push(crossing(s, e, p, q)),
                (false, true) => {
                    clipped.push(crossing(s, e, p, q));
                    clipped.push(e);
                }
                (false, false) => {}
            }
        }
    }
    signed_area(&clipped).abs()
}

/// Signed area of a polygon (positive when its corners go counter-clockwise in a
/// y-up frame).
fn signed_area(polygon: &[[f64; 2]]) -> f64 {
    let n = polygon.len();
    (0..n)
        .map(|i| {
            let (a, b) = (polygon[i], polygon[(i + 1) % n]);
            a[0] * b[1] - b[0] * a[1]
        })
        .sum::<f64>()
        / 2.0
}

/// Where segment `s`-`e` crosses the line through `p` and `q`.
fn crossing(s: [f64; 2], e: [f64; 2], p: [f64; 2], q: [f64; 2]) -> [f64; 2] {
    let d = [e[0] - s[0], e[1] - s[1]];
    let l = [q[0] - p[0], q[1] - p[1]];
    let denominator = l[0] * d[1] - l[1] * d[0];
    if denominator == 0.0 {
        return e;
    }
    let t = (l[1] * (s[0] - p[0]) - l[0] * (s[1] - p[1])) / denominator;
    [s[0] + t * d[0], s[1] + t * d[1]]
}

/// Whether a world point lies inside the T at `pose`.
pub fn contains(pose: &Pose, world: [f64; 2]) -> bool {
    let [x, y] = pose.inverse_apply(world);
    let in_bar = x.abs() <= BAR_HALF_LENGTH && (0.0..=THICKNESS).contains(&y);
    let in_stem = x.abs() <= THICKNESS / 2.0 && (THICKNESS..=STEM_END).contains(&y);
    in_bar || in_stem
}

/// Distance from a world point to the T at `pose` (0 inside).
pub fn distance(pose: &Pose, world: [f64; 2]) -> f64 {
    local_distance(pose.inverse_apply(world))
}

/// Distance from a point of the block's body frame to the T (0 inside).
pub fn local_distance([x, y]: [f64; 2]) -> f64 {
    let to_box = |half_x: f64, y0: f64, y1: f64| {
        let dx = (x.abs() - half_x).max(0.0);
        let dy = (y0 - y).max(y - y1).max(0.0);
        (dx * dx + dy * dy).sqrt()
    };
    let bar = to_box(BAR_HALF_LENGTH, 0.0, THICKNESS);
    if bar == 0.0 {
        return 0.0;
    }
    bar.min(to_box(THICKNESS / 2.0, THICKNESS, STEM_END))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_goal_pose_covers_the_goal_and_a_far_pose_covers_nothing() {
        assert!((coverage(&GOAL) - 1.0).abs() < 1e-9);
        let far = Pose {
            x: 60.0,
            y: 450.0,
            angle: 1.0,
        };
        assert_eq!(coverage(&far), 0.0);
        let shifted = Pose { x: 266.0, ..GOAL };
        let partial = coverage(&shifted);
        assert!(partial > 0.5 && partial < 0.95, "{partial}");
    }

    #[test]
    fn the_area_is_bar_plus_stem_and_overlap_is_symmetric() {
        assert_eq!(AREA, 6300.0);
        let a = BAR;
        let b = BAR.map(|[x, y]| [x + 30.0, y + 10.0]);
        assert!((convex_overlap_area(&a, &b) - 90.0 * 20.0).abs() < 1e-9);
        assert!((convex_overlap_area(&b, &a) - 90.0 * 20.0).abs() < 1e-9);
    }

    #[test]
    fn reset_placement_matches_gym_pushts_documented_example() {
        // gym-pusht 0.1.8's docstring: reset_to_state [0, 10, 20, 30, 1] reports the
        // block at (57.866196, 50.686398).
        let placed = Pose {
            x: 20.0,
            y: 30.0,
            angle: 1.0,
        }
        .as_placed_by_reset();
        assert!((placed.x - 57.866196).abs() < 1e-4, "{placed:?}");
        assert!((placed.y - 50.686398).abs() < 1e-4, "{placed:?}");
        let at_goal = GOAL.as_placed_by_reset();
        assert!((at_goal.x - 287.82).abs() < 0.01 && (at_goal.y - 269.18).abs() < 0.01);
        // gym-pusht 0.1.8 reports coverage 0.2981872 after reset_to_state at the goal.
        let c = coverage(&at_goal);
        assert!((c - 0.298_187_2).abs() < 1e-6, "{c}");
    }

    #[test]
    fn containment_and_distance_agree_with_the_outline() {
        let pose = Pose {
            x: 200.0,
            y: 150.0,
            angle: 0.7,
        };
        assert!(contains(&pose, pose.apply([0.0, 15.0])));
        assert!(contains(&pose, pose.apply([0.0, 100.0])));
        assert!(!contains(&pose, pose.apply([40.0, 60.0])));
        assert!((distance(&pose, pose.apply([40.0, 60.0])) - 25.0).abs() < 1e-9);
        assert_eq!(distance(&pose, pose.apply([10.0, 50.0])), 0.0);
        assert!((wrap_signed(3.0 * PI / 2.0) + PI / 2.0).abs() < 1e-12);
    }
}
