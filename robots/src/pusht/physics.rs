//! gym-pusht's pymunk scene rebuilt on rapier2d: walls, a kinematic circular pusher
//! under a PD controller, and the T block, quasi-static.
//!
//! Where rapier and pymunk must differ, and what this module does about it:
//! - **Quasi-static block.** gym-pusht sets pymunk's space damping to 0, which scales
//!   every dynamic body's velocity by `0^dt = 0` at the start of each step: the block
//!   moves only by the contact impulses of the current step. Rapier's damping is
//!   `v / (1 + dt * d)` and cannot reach zero, so the block's velocities are set to zero
//!   before every physics step instead.
//! - **Friction: none.** gym-pusht writes `body.friction = 1` on the pusher and the
//!   block, an attribute pymunk's `Body` does not have (friction belongs to shapes), so
//!   every shape keeps pymunk's default friction 0 and every contact is frictionless
//!   (checked on gym-pusht 0.1.8: both block shapes and the pusher report friction 0).
//!   Rapier's default is 0.5; every collider here has friction 0. This matters: with
//!   friction 1 the same push turns the block about a quarter as much.
//! - **Mass properties.** pymunk's body carries mass 1, moment 3000 and the centre of
//!   gravity `(0, 45)` set by hand; rapier derives them from collider density. The
//!   colliders here have density 0 and the body gets exactly those mass properties.
//! - **Tolerances.** rapier is tuned in metres; `length_unit = 100` scales its allowed
//!   penetration to 0.1 units, pymunk's default collision slop.
//! - **Solver.** chipmunk's sequential-impulse solver (10 iterations) and rapier's soft
//!   TGS solver resolve contacts differently: the same push moves the block nearly, not
//!   bit for bit, the same way. Episodes are deterministic per seed within imago and
//!   re-simulate in gym-pusht approximately (docs/pusht.md gives the measured gap).
//! - **Turning a body.** setting a pymunk body's angle turns it about its centre of
//!   gravity; setting a rapier body's rotation turns it about its origin. Placement
//!   computes the origin explicitly ([`Pose::as_placed_by_reset`]), so both agree.

use nalgebra::{Isometry2, Point2, Vector2};
use rapier2d::prelude::*;

use super::geometry::{self, Pose};

/// The pusher's radius.
pub const PUSHER_RADIUS: f64 = 15.0;
/// PD gains of the pusher's controller (gym-pusht's `k_p, k_v`).
pub const KP: f64 = 100.0;
/// Velocity gain of the pusher's controller.
pub const KV: f64 = 20.0;
/// Physics step, seconds.
pub const DT: f64 = 0.01;
/// Physics steps per control tick (10 Hz control).
pub const SUBSTEPS: usize = 10;
/// The walls: segments of radius 2 just inside the 512x512 world.
pub const WALLS: [([f64; 2], [f64; 2]); 4] = [
    ([5.0, 506.0], [5.0, 5.0]),
    ([5.0, 5.0], [506.0, 5.0]),
    ([506.0, 5.0], [506.0, 506.0]),
    ([5.0, 506.0], [506.0, 506.0]),
];
/// Radius of the wall segments.
pub const WALL_RADIUS: f64 = 2.0;

/// Everything rapier needs to step one scene.
struct Solver {
    pipeline: PhysicsPipeline,
    parameters: IntegrationParameters,
    islands: IslandManager,
    broad_phase: DefaultBroadPhase,
    narrow_phase: NarrowPhase,
    bodies: RigidBodySet,
    colliders: ColliderSet,
    impulse_joints: ImpulseJointSet,
    multibody_joints: MultibodyJointSet,
    ccd: CCDSolver,
}

/// One PushT scene: the pusher, the block and the walls.
pub struct PushTWorld {
    solver: Solver,
    pusher: RigidBodyHandle,
    block: RigidBodyHandle,
    pusher_velocity: [f64; 2],
}

impl std::fmt::Debug for PushTWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushTWorld")
            .field("pusher", &self.pusher_position())
            .field("block", &self.block_pose())
            .finish()
    }
}

impl Clone for PushTWorld {
    /// A fresh world in the same state (rapier's contact caches start empty).
    fn clone(&self) -> Self {
        let mut world = Self::new(self.pusher_position(), self.block_pose());
        world.pusher_velocity = self.pusher_velocity;
        world
    }
}

fn point(p: [f64; 2]) -> Point2<f32> {
    Point2::new(p[0] as f32, p[1] as f32)
}

impl PushTWorld {
    /// A scene with the pusher at `pusher` (at rest) and the block exactly at `block`.
    pub fn new(pusher: [f64; 2], block: Pose) -> Self {
        let mut bodies = RigidBodySet::new();
        let mut colliders = ColliderSet::new();
        for (a, b) in WALLS {
            colliders.insert(
                ColliderBuilder::capsule_from_endpoints(point(a), point(b), WALL_RADIUS as f32)
                    .friction(0.0),
            );
        }
        let pusher_handle = bodies.insert(
            RigidBodyBuilder::kinematic_velocity_based()
                .translation(Vector2::new(pusher[0] as f32, pusher[1] as f32))
                .can_sleep(false),
        );
        colliders.insert_with_parent(
            ColliderBuilder::ball(PUSHER_RADIUS as f32)
                .friction(0.0)
                .friction_combine_rule(CoefficientCombineRule::Multiply),
            pusher_handle,
            &mut bodies,
        );
        let cog = geometry::CENTER_OF_GRAVITY;
        let block_handle = bodies.insert(
            RigidBodyBuilder::dynamic()
                .pose(Isometry2::new(
                    Vector2::new(block.x as f32, block.y as f32),
                    block.angle as f32,
                ))
                .additional_mass_properties(MassProperties::new(
                    point(cog),
                    geometry::MASS as f32,
                    geometry::INERTIA as f32,
                ))
                .can_sleep(false),
        );
        let half_bar = geometry::BAR_HALF_LENGTH as f32;
        let half_thickness = geometry::THICKNESS as f32 / 2.0;
        let half_stem = (geometry::STEM_END - geometry::THICKNESS) as f32 / 2.0;
        for (half, centre) in [
            ([half_bar, half_thickness], [0.0, half_thickness]),
            (
                [half_thickness, half_stem],
                [0.0, 2.0 * half_thickness + half_stem],
            ),
        ] {
            colliders.insert_with_parent(
                ColliderBuilder::cuboid(half[0], half[1])
                    .translation(Vector2::new(centre[0], centre[1]))
                    .density(0.0)
                    .friction(0.0),
                block_handle,
                &mut bodies,
            );
        }
        let parameters = IntegrationParameters {
            dt: DT as f32,
            length_unit: 100.0,
            ..IntegrationParameters::default()
        };
        Self {
            solver: Solver {
                pipeline: PhysicsPipeline::new(),
                parameters,
                islands: IslandManager::new(),
                broad_phase: DefaultBroadPhase::new(),
                narrow_phase: NarrowPhase::new(),
                bodies,
                colliders,
                impulse_joints: ImpulseJointSet::new(),
                multibody_joints: MultibodyJointSet::new(),
                ccd: CCDSolver::new(),
            },
            pusher: pusher_handle,
            block: block_handle,
            pusher_velocity: [0.0; 2],
        }
    }

    /// gym-pusht's `reset_to_state`: a fresh scene with the pusher at
    /// `state[0..2]`, the block placed as gym-pusht 0.1.8 places a block asked to be at
    /// `state[2..5]` ([`Pose::as_placed_by_reset`]), then one physics step "to take
    /// effect" (which pushes the block out of the pusher where they overlap).
    pub fn reset_to_state(state: [f64; 5]) -> Self {
        let asked = Pose {
            x: state[2],
            y: state[3],
            angle: state[4],
        };
        let mut world = Self::new([state[0], state[1]], asked.as_placed_by_reset());
        world.physics_step();
        world
    }

    /// The pusher's centre.
    pub fn pusher_position(&self) -> [f64; 2] {
        let t = self.solver.bodies[self.pusher].translation();
        [t.x as f64, t.y as f64]
    }

    /// The pusher's velocity, units per second.
    pub fn pusher_velocity(&self) -> [f64; 2] {
        self.pusher_velocity
    }

    /// The block's pose (its origin, as gym-pusht reports it; the angle unwrapped).
    pub fn block_pose(&self) -> Pose {
        let body = &self.solver.bodies[self.block];
        let t = body.translation();
        Pose {
            x: t.x as f64,
            y: t.y as f64,
            angle: body.rotation().angle() as f64,
        }
    }

    /// One control tick toward the pusher target `target`: ten physics steps of the PD
    /// controller (`a = kp (target - p) - kv v`, integrated as gym-pusht does).
    pub fn tick(&mut self, target: [f64; 2]) {
        for _ in 0..SUBSTEPS {
            let p = self.pusher_position();
            for i in 0..2 {
                let acceleration = KP * (target[i] - p[i]) - KV * self.pusher_velocity[i];
                self.pusher_velocity[i] += acceleration * DT;
            }
            self.physics_step();
        }
    }

    fn physics_step(&mut self) {
        let v = self.pusher_velocity;
        let s = &mut self.solver;
        s.bodies[self.pusher].set_linvel(Vector2::new(v[0] as f32, v[1] as f32), true);
        let block = &mut s.bodies[self.block];
        block.set_linvel(Vector2::zeros(), true);
        block.set_angvel(0.0, true);
        s.pipeline.step(
            &Vector2::zeros(),
            &s.parameters,
            &mut s.islands,
            &mut s.broad_phase,
            &mut s.narrow_phase,
            &mut s.bodies,
            &mut s.colliders,
            &mut s.impulse_joints,
            &mut s.multibody_joints,
            &mut s.ccd,
            &(),
            &(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> Pose {
        Pose {
            x: 256.0,
            y: 300.0,
            angle: 0.0,
        }
    }

    #[test]
    fn the_block_moves_only_when_pushed() {
        let mut world = PushTWorld::new([100.0, 100.0], start());
        for target in [[150.0, 80.0], [60.0, 60.0], [120.0, 140.0]] {
            for _ in 0..5 {
                world.tick(target);
            }
        }
        assert_eq!(world.block_pose(), start(), "untouched block moved");
        let pusher = world.pusher_position();
        assert!((pusher[0] - 120.0).abs() < 5.0 && (pusher[1] - 140.0).abs() < 5.0);
        // Push the bar's top edge straight down through the centre of gravity.
        let mut world = PushTWorld::new([256.0, 250.0], start());
        for _ in 0..20 {
            world.tick([256.0, 330.0]);
        }
        let pushed = world.block_pose();
        assert!(pushed.y > 320.0, "{pushed:?}");
        assert!((pushed.x - 256.0).abs() < 2.0, "{pushed:?}");
        assert!(pushed.angle.abs() < 0.05, "{pushed:?}");
        // The pusher stops: so does the block, at once.
        let resting = world.block_pose();
        world.tick(world.pusher_position());
        world.tick([256.0, 200.0]);
        let after = world.block_pose();
        assert!(
            (after.y - resting.y).abs() < 1.0,
            "{resting:?} -> {after:?}"
        );
    }

    #[test]
    fn pushing_off_centre_turns_the_block() {
        let mut world = PushTWorld::new([236.0, 250.0], start());
        for _ in 0..10 {
            world.tick([236.0, 300.0]);
        }
        // Pushing the bar down left of the centre of gravity turns it the other way
        // (positive angles turn clockwise on screen, y down).
        assert!(world.block_pose().angle < -0.02, "{:?}", world.block_pose());
    }

    #[test]
    fn walls_hold_the_block() {
        let mut world = PushTWorld::new([256.0, 250.0], start());
        for _ in 0..60 {
            world.tick([256.0, 520.0]);
        }
        let pose = world.block_pose();
        let lowest = geometry::OUTLINE
            .iter()
            .map(|&v| pose.apply(v)[1])
            .fold(f64::MIN, f64::max);
        assert!(lowest < 504.5, "the block went through the wall: {lowest}");
        assert!(pose.y > 300.0, "{pose:?}");
    }

    #[test]
    fn same_commands_same_states() {
        let run = || {
            let mut world = PushTWorld::reset_to_state([200.0, 240.0, 250.0, 280.0, 0.6]);
            let mut poses = Vec::new();
            for k in 0..30 {
                world.tick([240.0 + k as f64, 300.0 - 2.0 * k as f64]);
                poses.push((world.pusher_position(), world.block_pose()));
            }
            poses
        };
        assert_eq!(run(), run());
    }
}
