//! `pusht`: gym-pusht 0.1.8's PushT task on rapier2d. A circular pusher moves a T block
//! on a table until the block covers a fixed T-shaped goal.
//!
//! The task is gym-pusht's, not an approximation of it: the 512x512 world with walls,
//! the pusher (radius 15, kinematic, PD control kp 100 / kv 20, ten 0.01 s physics steps
//! per 10 Hz tick), the T (bar 120x30 over a stem 30x90, mass 1, gym-pusht's centre of
//! gravity and moment), quasi-static contact, the goal pose `(256, 256, pi/4)`, reward
//! `clip(coverage / 0.95, 0, 1)`, success at coverage > 0.95, 300 ticks at most, and the
//! initial-state distribution (pusher in `[50, 450)^2`, block in `[100, 400)^2` on the
//! integer grid, angle uniform in `[-pi, pi)`, placed the way gym-pusht's
//! `reset_to_state` places it). Frames, units and angles are gym-pusht's: see
//! [`geometry`] and, for what rapier does differently from pymunk, [`physics`].
//!
//! What imago adds on top:
//! - **Action**: the pusher's target position in normalised units, `a = target / 256 -
//!   1` in `[-1, 1]^2`, through the [`SafetyEnvelope`] (clamped to the workspace, rate
//!   limited; a hold keeps the pusher where it is).
//! - **Proprioception**: the 5-number gym-pusht state with positions normalised the
//!   same way, `[agent_x, agent_y, block_x, block_y, block_angle, block_cos,
//!   block_sin]` (positions `/ 256 - 1`, the angle in radians in `[0, 2 pi)` as
//!   gym-pusht reports it, and its cosine and sine so that learners see no jump at 0).
//!   [`state_from_proprio`] turns it back into gym-pusht's state, so an episode
//!   re-simulates elsewhere from its first state and its actions.
//! - **Camera**: the top-down frame of [`render`] (96x96 by default).
//! - **Instruction**: "push the block onto the target" (gym-pusht has one task and no
//!   words; six words fit the policy's instruction length).

mod expert;
pub mod geometry;
pub mod physics;
mod raster;
pub mod render;

pub use expert::ScriptedExpert;
pub use geometry::Pose;
pub use physics::PushTWorld;
pub use render::render;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::bounds::{ConfigError, in_range};
use crate::drawing::{SceneDrawing, SceneMark};
use crate::observation::{Action, Observation, Step, StepInfo};
use crate::robot::{CameraSpec, FrameSource, Robot, RobotSpec};
use crate::safety::{SafetyConfig, SafetyEnvelope, SafetyVerdict};

/// The robot's name in configs and on the command line.
pub const NAME: &str = "pusht";
/// gym-pusht's single task.
pub const INSTRUCTION: &str = "push the block onto the target";
/// World units per normalised unit: `position = 256 * (1 + normalised)`.
pub const HALF_WORLD: f64 = 256.0;
/// Control ticks per second.
pub const CONTROL_HZ: f32 = 10.0;

/// Settings of a [`PushT`]; the defaults are gym-pusht's task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushTConfig {
    /// Camera frame side, pixels (gym-pusht's observation is 96x96). Range: [16, 512],
    /// a multiple of 8 (the policy reads 8x8 patches).
    pub image_size: u32,
    /// Step limit of an episode (gym-pusht registers 300). Range: [1, 100000].
    pub max_steps: u32,
    /// The safety envelope's settings (`max_rate` is a fraction of the half workspace
    /// per tick: 0.5 lets the target move 128 units per tick).
    pub safety: SafetyConfig,
    /// What the proprioception tells: the block's pose too (`pose`), or only the
    /// pusher's position (`vision`: the block is seen in the camera frame alone).
    pub observation: PushTObservation,
}

/// What a PushT observation's proprioception holds (`observation` in the robot's
/// config). The camera frame is the same in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PushTObservation {
    /// `[agent_x, agent_y, block_x, block_y, block_angle, block_cos, block_sin]`: the
    /// pusher and the block's pose, as gym-pusht's `state` observation (plus the
    /// angle's cosine and sine).
    #[default]
    Pose,
    /// `[agent_x, agent_y]`: the pusher alone, as gym-pusht's `pixels_agent_pos`
    /// observation; where the block is must be read from the frame.
    Vision,
}

/// The proprioception entries that give the block's pose (in the `pose` setting):
/// what moves only when the pusher touches the block.
pub const BLOCK_POSE: [&str; 5] = [
    "block_x",
    "block_y",
    "block_angle",
    "block_cos",
    "block_sin",
];

impl PushTObservation {
    /// The names of the proprioception's entries.
    pub fn proprio_names(self) -> &'static [&'static str] {
        const POSE: [&str; 7] = [
            "agent_x",
            "agent_y",
            "block_x",
            "block_y",
            "block_angle",
            "block_cos",
            "block_sin",
        ];
        match self {
            Self::Pose => &POSE,
            Self::Vision => &POSE[..2],
        }
    }
}

impl Default for PushTConfig {
    fn default() -> Self {
        Self {
            image_size: 96,
            max_steps: 300,
            safety: SafetyConfig::default(),
            observation: PushTObservation::Pose,
        }
    }
}

impl PushTConfig {
    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("image_size", self.image_size, 16..=512)?;
        if !self.image_size.is_multiple_of(8) {
            return Err(ConfigError::new(
                "image_size",
                self.image_size,
                "must be a multiple of 8 (the policy reads 8x8 patches)",
            ));
        }
        in_range("max_steps", self.max_steps, 1..=100_000)?;
        self.safety.validate().map_err(|e| e.within("safety"))
    }
}

/// gym-pusht's state `[agent_x, agent_y, block_x, block_y, block_angle]` from a PushT
/// observation's proprioception (`None` if it is too short).
pub fn state_from_proprio(proprio: &[f32]) -> Option<[f64; 5]> {
    let p = proprio.get(..5)?;
    Some([
        to_world(p[0]),
        to_world(p[1]),
        to_world(p[2]),
        to_world(p[3]),
        p[4] as f64,
    ])
}

/// The T's eight keypoints in the world (gym-pusht's `get_keypoints`), from the block
/// pose in pusht's proprioception; `None` when `proprio` is shorter than the pose.
pub fn keypoints_from_proprio(proprio: &[f32]) -> Option<[[f64; 2]; 8]> {
    let [_, _, x, y, angle] = state_from_proprio(proprio)?;
    let block = geometry::Pose { x, y, angle };
    Some(geometry::KEYPOINTS.map(|local| block.apply(local)))
}

/// A normalised coordinate in world units.
pub fn to_world(normalised: f32) -> f64 {
    HALF_WORLD * (1.0 + normalised as f64)
}

/// A tick's coverage as gym-pusht and LeRobot score it, `clip(coverage / 0.95, 0, 1)`
/// (gym-pusht's reward): the per-episode maximum of this, averaged over episodes, is
/// the "mean max coverage" the field reports for PushT.
pub fn coverage_score(coverage: f64) -> f64 {
    (coverage / geometry::SUCCESS_COVERAGE).clamp(0.0, 1.0)
}

/// gym-pusht's reward [`coverage_score`] of the block pose in a pose-setting
/// proprioception (see the module documentation); the angle is read from its cosine
/// and sine, so a state decoded from a world model's latent, whose angle entry cannot
/// wrap at 2 pi, still scores where the block points. `None` when `proprio` is
/// shorter than the pose setting's.
pub fn reward_of_proprio(proprio: &[f32]) -> Option<f64> {
    let p = proprio.get(..7)?;
    let block = geometry::Pose {
        x: to_world(p[2]),
        y: to_world(p[3]),
        angle: (p[6] as f64).atan2(p[5] as f64),
    };
    Some(coverage_score(geometry::coverage(&block)))
}

/// A world coordinate in normalised units.
pub fn to_normalised(world: f64) -> f32 {
    (world / HALF_WORLD - 1.0) as f32
}

/// gym-pusht's initial state for `seed` (its distribution; the numbers come from
/// imago's generator, not numpy's).
pub fn initial_state(seed: u64) -> [f64; 5] {
    let mut rng = StdRng::seed_from_u64(seed);
    [
        rng.random_range(50..450) as f64,
        rng.random_range(50..450) as f64,
        rng.random_range(100..400) as f64,
        rng.random_range(100..400) as f64,
        rng.random_range(-std::f64::consts::PI..std::f64::consts::PI),
    ]
}

/// One episode of the scripted expert as gym-pusht can replay it: the state asked of
/// `reset_to_state`, the pusher targets executed (world units, after the safety
/// envelope) and what imago saw after reset and after each tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpertEpisode {
    /// The episode's seed.
    pub seed: u64,
    /// The state given to gym-pusht's `reset(options={"reset_to_state": ...})`.
    pub reset_to_state: [f64; 5],
    /// imago's state after the reset.
    pub start: [f64; 5],
    /// The executed pusher target of each tick, world units.
    pub targets: Vec<[f64; 2]>,
    /// imago's state after each tick.
    pub states: Vec<[f64; 5]>,
    /// The coverage after each tick.
    pub coverage: Vec<f64>,
    /// Whether the episode succeeded.
    pub success: bool,
}

impl ExpertEpisode {
    /// Runs the scripted expert with `config` for one episode from `seed`.
    pub fn record(robot: &mut PushT, config: &crate::ExpertConfig, seed: u64) -> Self {
        let mut expert = ScriptedExpert::new(config.clone());
        robot.reset(seed);
        expert.begin_episode(robot, seed);
        let mut episode = Self {
            seed,
            reset_to_state: initial_state(seed),
            start: robot.state(),
            targets: Vec::new(),
            states: Vec::new(),
            coverage: Vec::new(),
            success: false,
        };
        loop {
            let step = robot.step(&expert.act(robot));
            let executed = &step.info.executed.0;
            episode
                .targets
                .push([to_world(executed[0]), to_world(executed[1])]);
            episode.states.push(robot.state());
            episode.coverage.push(robot.coverage());
            if step.done {
                episode.success = step.success;
                return episode;
            }
        }
    }

    /// The largest coverage the episode reached.
    pub fn max_coverage(&self) -> f64 {
        self.coverage.iter().copied().fold(0.0, f64::max)
    }
}

/// The simulated PushT task; see the module documentation.
#[derive(Debug, Clone)]
pub struct PushT {
    config: PushTConfig,
    spec: RobotSpec,
    world: PushTWorld,
    envelope: SafetyEnvelope,
    steps: u32,
    frames: FrameSource,
}

impl PushT {
    /// A PushT scene with the given settings, reset to seed 0.
    pub fn new(config: PushTConfig) -> Self {
        let spec = RobotSpec {
            name: NAME.to_string(),
            proprio_names: config
                .observation
                .proprio_names()
                .iter()
                .map(|name| name.to_string())
                .collect(),
            action_limit: vec![1.0; 2],
            control_hz: CONTROL_HZ,
            max_steps: config.max_steps,
            camera: Some(CameraSpec {
                width: config.image_size,
                height: config.image_size,
            }),
            // The action is the pusher's target, in the units of agent_x and agent_y.
            action_origin: Some(vec![0, 1]),
        };
        let envelope = SafetyEnvelope::new(config.safety.clone(), spec.action_limit.clone());
        let mut robot = Self {
            config,
            spec,
            world: PushTWorld::reset_to_state(initial_state(0)),
            envelope,
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
    pub fn config(&self) -> &PushTConfig {
        &self.config
    }

    /// The scene (privileged state: for experts, renderers and tests).
    pub fn world(&self) -> &PushTWorld {
        &self.world
    }

    /// Ticks taken in the current episode.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// The fraction of the goal the block covers now.
    pub fn coverage(&self) -> f64 {
        geometry::coverage(&self.world.block_pose())
    }

    /// gym-pusht's state now: `[agent_x, agent_y, block_x, block_y, block_angle]`,
    /// world units, the angle in `[0, 2 pi)`.
    pub fn state(&self) -> [f64; 5] {
        let agent = self.world.pusher_position();
        let block = self.world.block_pose();
        [
            agent[0],
            agent[1],
            block.x,
            block.y,
            geometry::wrap_positive(block.angle),
        ]
    }

    /// gym-pusht's `reset(options={"reset_to_state": state})`: starts an episode from
    /// `state`, with the block placed as gym-pusht 0.1.8 places it.
    pub fn reset_to_state(&mut self, state: [f64; 5]) -> Observation {
        self.world = PushTWorld::reset_to_state(state);
        self.steps = 0;
        let agent = self.world.pusher_position();
        self.envelope
            .reset_to(&[to_normalised(agent[0]), to_normalised(agent[1])]);
        self.observe()
    }

    /// The camera frame of the scene now.
    pub fn render_frame(&self) -> crate::observation::Image {
        render(
            self.world.pusher_position(),
            &self.world.block_pose(),
            self.config.image_size,
        )
    }

    fn observe(&self) -> Observation {
        let [ax, ay, bx, by, angle] = self.state();
        let image = match self.frames {
            FrameSource::Robot => Some(self.render_frame()),
            FrameSource::Caller => None,
        };
        let mut proprio = vec![
            to_normalised(ax),
            to_normalised(ay),
            to_normalised(bx),
            to_normalised(by),
            angle as f32,
            angle.cos() as f32,
            angle.sin() as f32,
        ];
        proprio.truncate(self.spec.proprio_names.len());
        Observation {
            image,
            proprio,
            instruction: INSTRUCTION.to_string(),
        }
    }
}

impl Default for PushT {
    fn default() -> Self {
        Self::new(PushTConfig::default())
    }
}

impl Robot for PushT {
    fn spec(&self) -> &RobotSpec {
        &self.spec
    }

    /// gym-pusht's: the pusher's position as `observation.state` and the action, in
    /// pixels (`HALF_WORLD (1 + x)`).
    fn lerobot_units(&self) -> crate::LeRobotUnits {
        let pixels = crate::Affine {
            scale: HALF_WORLD as f32,
            offset: HALF_WORLD as f32,
        };
        crate::LeRobotUnits {
            state: vec![(0, pixels), (1, pixels)],
            action: vec![pixels; 2],
            // Without the block's pose there are no keypoints to give.
            env_state: (self.config.observation == PushTObservation::Pose)
                .then_some(crate::EnvState::PushTKeypoints),
        }
    }

    fn reset(&mut self, seed: u64) -> Observation {
        self.reset_to_state(initial_state(seed))
    }

    fn step(&mut self, action: &Action) -> Step {
        let safe = self.envelope.filter(action);
        let target = match safe.verdict {
            SafetyVerdict::Held(_) => self.world.pusher_position(),
            _ => [to_world(safe.action.0[0]), to_world(safe.action.0[1])],
        };
        self.world.tick(target);
        self.steps += 1;
        let block = self.world.block_pose();
        let coverage = geometry::coverage(&block);
        let success = coverage > geometry::SUCCESS_COVERAGE;
        let truncated = !success && self.steps >= self.config.max_steps;
        Step {
            observation: self.observe(),
            reward: (coverage / geometry::SUCCESS_COVERAGE).clamp(0.0, 1.0) as f32,
            done: success || truncated,
            success,
            info: StepInfo {
                executed: safe.action,
                safety: safe.verdict,
                truncated,
                distance_to_goal: (block.x - geometry::GOAL.x).hypot(block.y - geometry::GOAL.y)
                    as f32,
                coverage: Some(coverage as f32),
            },
        }
    }

    fn alternative_instructions(&self) -> Vec<String> {
        Vec::new()
    }

    fn tracked_point(&self) -> Option<[f32; 2]> {
        let p = self.world.pusher_position();
        Some([p[0] as f32, p[1] as f32])
    }

    /// The goal T's outline corners, each a small mark, and its origin.
    fn scene_drawing(&self) -> SceneDrawing {
        let mut marks: Vec<SceneMark> = geometry::OUTLINE
            .iter()
            .map(|&corner| {
                let p = geometry::GOAL.apply(corner);
                SceneMark {
                    position: [p[0] as f32, p[1] as f32],
                    radius: 4.0,
                    rgb: render::GOAL_FILL,
                    label: String::new(),
                    instructed: false,
                }
            })
            .collect();
        marks.push(SceneMark {
            position: [geometry::GOAL.x as f32, geometry::GOAL.y as f32],
            radius: 8.0,
            rgb: render::GOAL_FILL,
            label: "goal".to_string(),
            instructed: true,
        });
        SceneDrawing { marks }
    }

    /// The block's outline (closed) and then the pusher, from the proprioception; the
    /// pusher alone when the proprioception has no block (`observation = "vision"`).
    fn body_from_proprio(&self, proprio: &[f32]) -> Vec<[f32; 2]> {
        let Some([ax, ay, bx, by, angle]) = state_from_proprio(proprio) else {
            return match proprio {
                [x, y] => vec![[to_world(*x) as f32, to_world(*y) as f32]],
                _ => Vec::new(),
            };
        };
        let pose = Pose {
            x: bx,
            y: by,
            angle,
        };
        let mut body: Vec<[f32; 2]> = geometry::OUTLINE
            .iter()
            .chain(std::iter::once(&geometry::OUTLINE[0]))
            .map(|&v| {
                let p = pose.apply(v);
                [p[0] as f32, p[1] as f32]
            })
            .collect();
        body.push([ax as f32, ay as f32]);
        body
    }

    /// The commanded targets, one per tick, from where the pusher is.
    fn intended_path(&self, chunk: &[f32]) -> Vec<[f32; 2]> {
        let mut path = self.tracked_point().into_iter().collect::<Vec<_>>();
        path.extend(
            chunk
                .chunks_exact(2)
                .map(|a| [to_world(a[0]) as f32, to_world(a[1]) as f32]),
        );
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::Image;

    fn rollout(seed: u64, actions: &[[f32; 2]]) -> Vec<Observation> {
        let mut robot = PushT::default();
        let mut out = vec![robot.reset(seed)];
        for a in actions {
            out.push(robot.step(&Action(a.to_vec())).observation);
        }
        out
    }

    #[test]
    fn same_seed_same_episode_bit_for_bit() {
        let actions = [[0.1, 0.2], [0.3, 0.2], [0.2, -0.1], [0.0, 0.0], [-0.4, 0.1]];
        assert_eq!(rollout(3, &actions), rollout(3, &actions));
        assert_ne!(rollout(3, &actions)[0], rollout(4, &actions)[0]);
    }

    #[test]
    fn initial_states_follow_gym_pushts_distribution() {
        let states: Vec<[f64; 5]> = (0..500).map(initial_state).collect();
        for s in &states {
            assert!((50.0..450.0).contains(&s[0]) && (50.0..450.0).contains(&s[1]));
            assert!((100.0..400.0).contains(&s[2]) && (100.0..400.0).contains(&s[3]));
            assert!(s[..4].iter().all(|v| v.fract() == 0.0));
            assert!((-std::f64::consts::PI..std::f64::consts::PI).contains(&s[4]));
        }
        let mean_angle = states.iter().map(|s| s[4]).sum::<f64>() / 500.0;
        assert!(mean_angle.abs() < 0.3, "{mean_angle}");
    }

    #[test]
    fn proprioception_is_the_gym_state_and_round_trips() {
        let mut robot = PushT::default();
        let observation = robot.reset_to_state([100.0, 120.0, 300.0, 200.0, 0.5]);
        let state = state_from_proprio(&observation.proprio).expect("state");
        let live = robot.state();
        for (a, b) in state.iter().zip(&live) {
            assert!((a - b).abs() < 1e-3, "{state:?} vs {live:?}");
        }
        // gym-pusht's legacy placement: the block is not where it was asked to be.
        assert!((live[2] - 300.0).abs() > 1.0);
        assert_eq!(observation.proprio.len(), robot.spec().proprio_dim());
        assert_eq!(observation.instruction, INSTRUCTION);
    }

    #[test]
    fn the_vision_setting_keeps_the_block_out_of_the_proprioception() {
        let vision = PushTConfig {
            observation: PushTObservation::Vision,
            ..PushTConfig::default()
        };
        let (mut seeing, mut told) = (PushT::new(vision), PushT::default());
        let (a, b) = (seeing.reset(4), told.reset(4));
        assert_eq!(seeing.spec().proprio_names, ["agent_x", "agent_y"]);
        assert_eq!(a.proprio, b.proprio[..2]);
        assert_eq!(a.image, b.image, "the same frame in both settings");
        assert!(seeing.lerobot_units().env_state.is_none());
        assert!(told.lerobot_units().env_state.is_some());
        let step = seeing.step(&Action(vec![0.1, 0.2]));
        assert_eq!(step.observation.proprio.len(), 2);
        assert_eq!(
            seeing.body_from_proprio(&a.proprio),
            [[to_world(a.proprio[0]) as f32, to_world(a.proprio[1]) as f32]]
        );
    }

    #[test]
    fn the_safety_envelope_clamps_and_rate_limits_the_target() {
        let mut robot = PushT::default();
        robot.reset_to_state([256.0, 256.0, 150.0, 150.0, 0.0]);
        let step = robot.step(&Action(vec![3.0, 0.0]));
        let executed = &step.info.executed.0;
        // Clamped to the workspace (1.0), then limited to half of it per tick.
        assert!((executed[0] - 0.5).abs() < 1e-6, "{executed:?}");
        assert!(matches!(step.info.safety, SafetyVerdict::Limited));
        let step = robot.step(&Action(vec![f32::NAN, 0.0]));
        assert!(matches!(step.info.safety, SafetyVerdict::Held(_)));
        let before = robot.world().pusher_position();
        let step = robot.step(&Action(vec![0.0, 0.0]));
        assert!(matches!(step.info.safety, SafetyVerdict::Held(_)));
        let after = robot.world().pusher_position();
        // A hold keeps the pusher where it is (up to the PD controller settling).
        assert!(
            (after[0] - before[0]).abs() < 15.0,
            "{before:?} -> {after:?}"
        );
    }

    #[test]
    fn reward_and_success_follow_coverage() {
        let mut robot = PushT::default();
        // Ask gym-pusht's reset for the goal pose: the legacy placement misses it.
        robot.reset_to_state([50.0, 50.0, 256.0, 256.0, std::f64::consts::FRAC_PI_4]);
        let missed = robot.coverage();
        assert!((missed - 0.2982).abs() < 1e-3, "{missed}");
        let step = robot.step(&Action(vec![to_normalised(50.0), to_normalised(50.0)]));
        assert!(!step.success && !step.done);
        assert!((step.reward as f64 - (missed / 0.95).min(1.0)).abs() < 1e-4);
        assert_eq!(step.info.coverage, Some(missed as f32));
        // Place the block exactly: full coverage, success, the episode ends.
        robot.world = PushTWorld::new([50.0, 50.0], geometry::GOAL);
        let step = robot.step(&Action(vec![to_normalised(50.0), to_normalised(50.0)]));
        assert!(step.success && step.done && step.reward == 1.0);
    }

    /// The reward read off an observation's proprioception is the step's reward, for
    /// blocks at every angle (the angle entry wraps at 2 pi; cosine and sine do not).
    #[test]
    fn the_reward_of_the_proprioception_is_the_steps_reward() {
        let mut robot = PushT::default();
        for seed in 0..12 {
            robot.reset(seed);
            let target = Action(vec![0.1, -0.2]);
            let mut step = robot.step(&target);
            for _ in 0..5 {
                step = robot.step(&target);
            }
            let from_proprio = reward_of_proprio(&step.observation.proprio).expect("pose");
            assert!(
                (from_proprio - step.reward as f64).abs() < 1e-4,
                "seed {seed}"
            );
        }
        robot.world = PushTWorld::new([50.0, 50.0], geometry::GOAL);
        let at_goal = robot.step(&Action(vec![to_normalised(50.0), to_normalised(50.0)]));
        assert_eq!(reward_of_proprio(&at_goal.observation.proprio), Some(1.0));
        assert_eq!(reward_of_proprio(&at_goal.observation.proprio[..2]), None);
    }

    #[test]
    fn the_episode_ends_at_300_steps() {
        let mut robot = PushT::default();
        robot.reset(1);
        let hold = robot.step(&Action(vec![0.0, 0.0])).info.executed;
        let mut last = None;
        for _ in 1..300 {
            last = Some(robot.step(&hold));
        }
        let last = last.expect("steps");
        assert!(last.done && last.info.truncated);
        assert_eq!(robot.steps(), 300);
    }

    #[test]
    fn observations_carry_the_camera_unless_the_caller_draws() {
        let mut robot = PushT::default();
        let observation = robot.reset(2);
        let image: Image = observation.image.expect("frame");
        assert_eq!((image.width, image.height), (96, 96));
        assert_eq!(image, robot.render_frame());
        robot.set_frame_source(FrameSource::Caller);
        assert!(robot.reset(2).image.is_none());
        let body = robot.body_from_proprio(&observation.proprio);
        assert_eq!(body.len(), 10);
        assert_eq!(robot.scene_drawing().marks.len(), 9);
    }
}
