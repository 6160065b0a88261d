//! `reacher2d`: a planar two-link arm on a table with three coloured targets, seen by a
//! top-down RGB camera, told in words which target to reach.
//!
//! The action is the commanded end-effector velocity `(vx, vy)` in m/s, as in most
//! vision-language-action robots (end-effector deltas). A low-level controller turns it
//! into joint velocities by damped-least-squares differential inverse kinematics, with
//! a first-order actuator lag and joint limits. Proprioception is
//! `[cos q1, sin q1, cos q2, sin q2, qd1, qd2, ee_x, ee_y]`. Target positions are not in
//! proprioception: only the camera shows them, and only the instruction says which to
//! reach, so a policy that succeeds must use both.
//!
//! Reward per tick is `-0.05 * distance` to the instructed target, plus `1` on success;
//! success (end effector within `success_radius` of the instructed target) ends the
//! episode, as does the step limit.

mod expert;
mod kinematics;
pub mod render;
mod scene;

pub use expert::ScriptedExpert;
pub use kinematics::{TwoLinkArm, wrap_angle};
pub use render::render;
pub use scene::{INSTRUCTION_TEMPLATES, Scene, TargetColour, instruction};

use nalgebra::Vector2;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::bounds::{ConfigError, all_in_range, in_range};
use crate::drawing::{SceneDrawing, SceneMark};
use crate::observation::{Action, Observation, Step, StepInfo};
use crate::robot::{CameraSpec, FrameSource, Robot, RobotSpec};
use crate::safety::{SafetyConfig, SafetyEnvelope};

/// The robot's name in configs and on the command line.
pub const NAME: &str = "reacher2d";

/// Settings of a [`Reacher2d`]; every field has a sensible default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Reacher2dConfig {
    /// Upper and lower link lengths, metres. Range: each in [0.05, 10].
    pub link_lengths: [f32; 2],
    /// Camera frame side, pixels. Range: [16, 256], a multiple of 8 (the policy reads
    /// 8x8 patches, at most 1024 of them).
    pub image_size: u32,
    /// Half side of the square the camera sees, metres. Range: [0.1, 100].
    pub view_half_extent: f32,
    /// Control ticks per second. Range: [0.1, 1000].
    pub control_hz: f32,
    /// Step limit of an episode. Range: [1, 100000].
    pub max_steps: u32,
    /// Largest commanded end-effector speed per axis, m/s. Range: [0.001, 100].
    pub max_speed: f32,
    /// Largest joint speed, rad/s. Range: [0.001, 1000].
    pub max_joint_speed: f32,
    /// Fraction of the gap to the commanded joint velocity closed each tick (actuator
    /// lag). Range: [0.001, 1].
    pub actuator_response: f32,
    /// Drawn radius of each target, metres. Range: [0.001, 10].
    pub target_radius: f32,
    /// Success distance between end effector and instructed target, metres. Range:
    /// [0.001, 10].
    pub success_radius: f32,
    /// Smallest distance between two targets, and between a target and the start pose,
    /// metres (a best effort: placement gives up after 1000 draws). Range: [0, 10].
    pub min_separation: f32,
    /// Elbow joint limit, radians (`|q2| <= elbow_limit`). Range: [0.1, pi].
    pub elbow_limit: f32,
    /// The safety envelope's settings.
    pub safety: SafetyConfig,
}

impl Default for Reacher2dConfig {
    fn default() -> Self {
        Self {
            link_lengths: [0.5, 0.4],
            image_size: 48,
            view_half_extent: 1.0,
            control_hz: 20.0,
            max_steps: 60,
            max_speed: 1.0,
            max_joint_speed: 5.0,
            actuator_response: 0.7,
            target_radius: 0.1,
            success_radius: 0.12,
            min_separation: 0.3,
            elbow_limit: 2.9,
            safety: SafetyConfig::default(),
        }
    }
}

impl Reacher2dConfig {
    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        all_in_range("link_lengths", &self.link_lengths, 0.05..=10.0)?;
        in_range("image_size", self.image_size, 16..=256)?;
        if !self.image_size.is_multiple_of(8) {
            return Err(ConfigError::new(
                "image_size",
                self.image_size,
                "must be a multiple of 8 (the policy reads 8x8 patches)",
            ));
        }
        in_range("view_half_extent", self.view_half_extent, 0.1..=100.0)?;
        in_range("control_hz", self.control_hz, 0.1..=1000.0)?;
        in_range("max_steps", self.max_steps, 1..=100_000)?;
        in_range("max_speed", self.max_speed, 0.001..=100.0)?;
        in_range("max_joint_speed", self.max_joint_speed, 0.001..=1000.0)?;
        in_range("actuator_response", self.actuator_response, 0.001..=1.0)?;
        in_range("target_radius", self.target_radius, 0.001..=10.0)?;
        in_range("success_radius", self.success_radius, 0.001..=10.0)?;
        in_range("min_separation", self.min_separation, 0.0..=10.0)?;
        in_range("elbow_limit", self.elbow_limit, 0.1..=std::f32::consts::PI)?;
        self.safety.validate().map_err(|e| e.within("safety"))
    }
}

/// The simulated planar reacher; see the module documentation.
#[derive(Debug, Clone)]
pub struct Reacher2d {
    config: Reacher2dConfig,
    spec: RobotSpec,
    arm: TwoLinkArm,
    envelope: SafetyEnvelope,
    q: [f32; 2],
    qd: [f32; 2],
    targets: [Vector2<f32>; 3],
    goal: TargetColour,
    template: usize,
    steps: u32,
    frames: FrameSource,
}

impl Reacher2d {
    /// A reacher with the given settings, reset to seed 0.
    pub fn new(config: Reacher2dConfig) -> Self {
        let spec = RobotSpec {
            name: NAME.to_string(),
            proprio_names: [
                "cos_q1", "sin_q1", "cos_q2", "sin_q2", "qd1", "qd2", "ee_x", "ee_y",
            ]
            .map(String::from)
            .to_vec(),
            action_limit: vec![config.max_speed; 2],
            control_hz: config.control_hz,
            max_steps: config.max_steps,
            camera: Some(CameraSpec {
                width: config.image_size,
                height: config.image_size,
            }),
            action_origin: None,
        };
        let arm = TwoLinkArm {
            upper: config.link_lengths[0],
            lower: config.link_lengths[1],
        };
        let envelope = SafetyEnvelope::new(config.safety.clone(), spec.action_limit.clone());
        let mut robot = Self {
            config,
            spec,
            arm,
            envelope,
            q: [0.0; 2],
            qd: [0.0; 2],
            targets: [Vector2::zeros(); 3],
            goal: TargetColour::Red,
            template: 0,
            steps: 0,
            frames: FrameSource::Robot,
        };
        robot.reset(0);
        robot
    }

    /// Chooses who draws the camera frames of the following observations.
    pub fn set_frame_source(&mut self, frames: FrameSource) {
        self.frames = frames;
    }

    /// The robot's settings.
    pub fn config(&self) -> &Reacher2dConfig {
        &self.config
    }

    /// The current scene (privileged state: for experts, renderers and tests).
    pub fn scene(&self) -> Scene {
        Scene {
            arm: self.arm,
            q: self.q,
            targets: self.targets,
            target_radius: self.config.target_radius,
        }
    }

    /// The colour of the instructed target.
    pub fn goal(&self) -> TargetColour {
        self.goal
    }

    /// The end effector's position, metres.
    pub fn end_effector(&self) -> Vector2<f32> {
        self.arm.end_effector(self.q)
    }

    /// Ticks taken in the current episode.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    fn observe(&self) -> Observation {
        let ee = self.end_effector();
        let image = match self.frames {
            FrameSource::Robot => Some(render(
                &self.scene(),
                self.config.image_size,
                self.config.view_half_extent,
            )),
            FrameSource::Caller => None,
        };
        Observation {
            image,
            proprio: vec![
                self.q[0].cos(),
                self.q[0].sin(),
                self.q[1].cos(),
                self.q[1].sin(),
                self.qd[0],
                self.qd[1],
                ee.x,
                ee.y,
            ],
            instruction: instruction(self.template, self.goal),
        }
    }

    fn distance_to_goal(&self) -> f32 {
        (self.end_effector() - self.targets[self.goal.index()]).norm()
    }

    fn sample_target(
        &self,
        rng: &mut StdRng,
        placed: &[Vector2<f32>],
        start: Vector2<f32>,
    ) -> Vector2<f32> {
        let reach = self.arm.upper + self.arm.lower;
        let (r_min, r_max) = (0.35 * reach / 0.9, 0.8 * reach / 0.9);
        let sep = self.config.min_separation;
        let mut candidate = Vector2::zeros();
        for _ in 0..1000 {
            let r = rng.random_range(r_min * r_min..r_max * r_max).sqrt();
            let theta = rng.random_range(-std::f32::consts::PI..std::f32::consts::PI);
            candidate = Vector2::new(r * theta.cos(), r * theta.sin());
            if (candidate - start).norm() >= sep
                && placed.iter().all(|p| (candidate - p).norm() >= sep)
            {
                break;
            }
        }
        candidate
    }
}

impl Default for Reacher2d {
    fn default() -> Self {
        Self::new(Reacher2dConfig::default())
    }
}

impl Robot for Reacher2d {
    fn spec(&self) -> &RobotSpec {
        &self.spec
    }

    fn reset(&mut self, seed: u64) -> Observation {
        let mut rng = StdRng::seed_from_u64(seed);
        let elbow = rng.random_range(0.3..2.5) * if rng.random_bool(0.5) { 1.0 } else { -1.0 };
        self.q = [
            rng.random_range(-std::f32::consts::PI..std::f32::consts::PI),
            elbow,
        ];
        self.qd = [0.0; 2];
        let start = self.end_effector();
        let mut placed: Vec<Vector2<f32>> = Vec::with_capacity(3);
        for _ in 0..3 {
            let target = self.sample_target(&mut rng, &placed, start);
            placed.push(target);
        }
        self.targets = [placed[0], placed[1], placed[2]];
        self.goal = TargetColour::ALL[rng.random_range(0..3)];
        self.template = rng.random_range(0..INSTRUCTION_TEMPLATES.len());
        self.steps = 0;
        self.envelope.reset();
        self.observe()
    }

    fn step(&mut self, action: &Action) -> Step {
        let safe = self.envelope.filter(action);
        let v = Vector2::new(safe.action.0[0], safe.action.0[1]);
        let dt = 1.0 / self.config.control_hz;
        let wanted = self.arm.joint_velocity_for(self.q, v, 0.05);
        for j in 0..2 {
            let target = wanted[j].clamp(-self.config.max_joint_speed, self.config.max_joint_speed);
            self.qd[j] += self.config.actuator_response * (target - self.qd[j]);
            self.q[j] += self.qd[j] * dt;
        }
        self.q[0] = wrap_angle(self.q[0]);
        if self.q[1].abs() > self.config.elbow_limit {
            self.q[1] = self.q[1].clamp(-self.config.elbow_limit, self.config.elbow_limit);
            self.qd[1] = 0.0;
        }
        self.steps += 1;
        let distance = self.distance_to_goal();
        let success = distance <= self.config.success_radius;
        let truncated = !success && self.steps >= self.config.max_steps;
        Step {
            observation: self.observe(),
            reward: -0.05 * distance + if success { 1.0 } else { 0.0 },
            done: success || truncated,
            success,
            info: StepInfo {
                executed: safe.action,
                safety: safe.verdict,
                truncated,
                distance_to_goal: distance,
                coverage: None,
            },
        }
    }

    fn alternative_instructions(&self) -> Vec<String> {
        TargetColour::ALL
            .into_iter()
            .filter(|&c| c != self.goal)
            .map(|c| instruction(self.template, c))
            .collect()
    }

    fn tracked_point(&self) -> Option<[f32; 2]> {
        let ee = self.end_effector();
        Some([ee.x, ee.y])
    }

    fn scene_drawing(&self) -> SceneDrawing {
        SceneDrawing {
            marks: TargetColour::ALL
                .iter()
                .map(|&colour| SceneMark {
                    position: [
                        self.targets[colour.index()].x,
                        self.targets[colour.index()].y,
                    ],
                    radius: self.config.target_radius,
                    rgb: colour.rgb(),
                    label: colour.name().to_string(),
                    instructed: colour == self.goal,
                })
                .collect(),
        }
    }

    /// Base, elbow and end effector from `[cos q1, sin q1, cos q2, sin q2, qd1, qd2,
    /// ee_x, ee_y]`.
    fn body_from_proprio(&self, proprio: &[f32]) -> Vec<[f32; 2]> {
        if proprio.len() < 8 {
            return Vec::new();
        }
        let upper = self.arm.upper;
        vec![
            [0.0, 0.0],
            [upper * proprio[0], upper * proprio[1]],
            [proprio[6], proprio[7]],
        ]
    }

    /// The end effector integrated under the commanded velocities, one tick each.
    fn intended_path(&self, chunk: &[f32]) -> Vec<[f32; 2]> {
        let dt = 1.0 / self.config.control_hz;
        let ee = self.end_effector();
        let mut at = [ee.x, ee.y];
        let mut path = vec![at];
        for velocity in chunk.chunks_exact(2) {
            at = [at[0] + velocity[0] * dt, at[1] + velocity[1] * dt];
            path.push(at);
        }
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_drawn_frames_leave_the_image_out() {
        let mut robot = Reacher2d::default();
        robot.set_frame_source(FrameSource::Caller);
        let observation = robot.reset(4);
        assert!(observation.image.is_none());
        let step = robot.step(&Action(vec![0.5, 0.0]));
        assert!(step.observation.image.is_none());
        robot.set_frame_source(FrameSource::Robot);
        let step = robot.step(&Action(vec![0.5, 0.0]));
        let size = robot.config().image_size;
        let expected = render(&robot.scene(), size, robot.config().view_half_extent);
        assert_eq!(step.observation.image, Some(expected));
    }

    #[test]
    fn the_body_drawn_from_proprioception_is_the_live_arm() {
        let mut robot = Reacher2d::default();
        let observation = robot.reset(7);
        let scene = robot.scene();
        let live = [
            [0.0, 0.0],
            [scene.arm.elbow(scene.q).x, scene.arm.elbow(scene.q).y],
            robot.tracked_point().expect("end effector"),
        ];
        let drawn = robot.body_from_proprio(&observation.proprio);
        assert_eq!(drawn.len(), 3);
        for (a, b) in live.iter().zip(&drawn) {
            assert!((a[0] - b[0]).abs() < 1e-5 && (a[1] - b[1]).abs() < 1e-5);
        }
        let marks = robot.scene_drawing().marks;
        assert_eq!(marks.len(), 3);
        assert_eq!(marks.iter().filter(|m| m.instructed).count(), 1);
        let path = robot.intended_path(&[1.0, 0.0, 1.0, 0.0]);
        assert_eq!(path.len(), 3);
        assert!((path[2][0] - path[0][0] - 2.0 / robot.config().control_hz).abs() < 1e-5);
    }

    fn rollout(seed: u64, actions: &[[f32; 2]]) -> Vec<Observation> {
        let mut robot = Reacher2d::default();
        let mut out = vec![robot.reset(seed)];
        for a in actions {
            out.push(robot.step(&Action(a.to_vec())).observation);
        }
        out
    }

    #[test]
    fn same_seed_same_episode_bit_for_bit() {
        let actions = [[0.5, 0.1], [0.3, -0.8], [-1.0, 0.2], [0.0, 0.0]];
        assert_eq!(rollout(7, &actions), rollout(7, &actions));
        assert_ne!(rollout(7, &actions)[0], rollout(8, &actions)[0]);
    }

    #[test]
    fn targets_are_separated_and_reachable() {
        let mut robot = Reacher2d::default();
        for seed in 0..200 {
            robot.reset(seed);
            let scene = robot.scene();
            for (i, a) in scene.targets.iter().enumerate() {
                assert!(
                    scene.arm.inverse(*a, 1.0).is_some(),
                    "seed {seed} target {i}"
                );
                assert!((a - robot.end_effector()).norm() >= 0.29);
                for b in &scene.targets[i + 1..] {
                    assert!((a - b).norm() >= 0.29, "seed {seed}");
                }
            }
        }
    }

    #[test]
    fn instruction_names_the_goal_and_alternatives_name_the_others() {
        let mut robot = Reacher2d::default();
        let obs = robot.reset(3);
        assert!(obs.instruction.contains(robot.goal().name()));
        let alternatives = robot.alternative_instructions();
        assert_eq!(alternatives.len(), 2);
        for alt in alternatives {
            assert!(!alt.contains(robot.goal().name()));
        }
    }

    #[test]
    fn render_shows_targets_in_their_colours_at_their_positions() {
        let mut robot = Reacher2d::default();
        let obs = robot.reset(11);
        let image = obs.image.expect("camera");
        let cfg = robot.config().clone();
        let to_pixel = |p: Vector2<f32>| {
            let scale = cfg.image_size as f32 / (2.0 * cfg.view_half_extent);
            (
                ((p.x + cfg.view_half_extent) * scale) as u32,
                ((cfg.view_half_extent - p.y) * scale) as u32,
            )
        };
        for (target, colour) in robot.scene().targets.iter().zip(TargetColour::ALL) {
            let (x, y) = to_pixel(*target);
            assert_eq!(image.pixel(x, y), colour.rgb(), "{colour:?}");
        }
        let (x, y) = to_pixel(Vector2::zeros());
        assert_eq!(image.pixel(x, y), render::BASE);
        assert_eq!(image.pixel(0, 0), render::BACKGROUND);
        assert_eq!(image.width, 48);
        assert_eq!(image.rgb.len(), 48 * 48 * 3);
    }

    #[test]
    fn commanded_velocity_moves_the_end_effector_that_way() {
        let mut robot = Reacher2d::default();
        robot.reset(5);
        let before = robot.end_effector();
        for _ in 0..5 {
            robot.step(&Action(vec![0.4, 0.0]));
        }
        let moved = robot.end_effector() - before;
        assert!(moved.x > 0.05, "{moved:?}");
        assert!(moved.y.abs() < moved.x, "{moved:?}");
    }

    #[test]
    fn nan_command_holds_the_arm() {
        let mut robot = Reacher2d::default();
        robot.reset(2);
        robot.step(&Action(vec![0.0, 0.0]));
        let before = robot.end_effector();
        let step = robot.step(&Action(vec![f32::NAN, 0.5]));
        assert!(matches!(step.info.safety, crate::SafetyVerdict::Held(_)));
        assert_eq!(step.info.executed.0, vec![0.0, 0.0]);
        assert!((robot.end_effector() - before).norm() < 1e-6);
    }

    #[test]
    fn episode_ends_at_the_step_limit() {
        let mut robot = Reacher2d::default();
        robot.reset(1);
        let mut last = None;
        for _ in 0..robot.config().max_steps {
            last = Some(robot.step(&Action(vec![0.0, 0.0])));
        }
        let last = last.expect("steps");
        assert!(last.done && last.info.truncated && !last.success);
    }
}
