//! The robot registry: the one place in the runtime and the CLI that names concrete
//! robots. A robot is chosen by name (`--robot NAME`, `robot = "NAME"`) with a TOML
//! table of its settings (`--robot-config FILE`, `[actor.robot]`); everything else
//! works on what this module hands out:
//! - [`RobotConfig`]: a built-in robot's validated settings, its [`RobotSpec`], and
//!   the JSON form a replay's manifest records;
//! - [`SimRobot`]: a simulated robot behind the [`Robot`] trait (drawing hooks
//!   included), with its scripted expert where the robot has one and a switch for who
//!   draws its camera frames;
//! - [`BatchRenderer`]: the robot's batched GPU camera, where it has one.
//!
//! Besides the built-in simulated robots, the kind `remote` is a robot in another
//! process or on another machine, reached over the bridge (`crate::bridge`,
//! docs/bridge.md): its settings name its key, and its spec is what it answers.
//!
//! Adding a robot means a variant here and its crate module in `imago-robots`; no
//! other runtime or CLI file changes (docs/architecture.md).

use imago_robots::pusht::{self, PushT, PushTConfig};
use imago_robots::reacher2d::{self, Reacher2d, Reacher2dConfig};
use imago_robots::{
    Action, ConfigError, ExpertConfig, FrameSource, Image, Observation, Robot, RobotSpec,
    SceneDrawing, Step,
};
use imago_shaders::{GpuContext, Reacher2dRenderer};
use serde::{Deserialize, Serialize};

use crate::bridge::remote::{self, RemoteRobotConfig, RemoteRobotSettings};
use crate::toml_file::table_into;

/// The built-in robots' names, as `--robot` and `robot = ` take them.
pub const ROBOT_NAMES: [&str; 2] = [reacher2d::NAME, pusht::NAME];
/// The robot commands use when none is named.
pub const DEFAULT_ROBOT: &str = reacher2d::NAME;

/// A built-in robot and its settings. As JSON (a replay's manifest) it is
/// `{"NAME": {settings}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RobotConfig {
    /// The planar two-link reacher with three coloured targets.
    #[serde(rename = "reacher2d")]
    Reacher2d(Reacher2dConfig),
    /// gym-pusht's PushT task on rapier2d.
    #[serde(rename = "pusht")]
    PushT(PushTConfig),
    /// A robot in another process, over the bridge, with the spec it answered.
    #[serde(rename = "remote")]
    Remote(RemoteRobotConfig),
}

impl Default for RobotConfig {
    fn default() -> Self {
        Self::Reacher2d(Reacher2dConfig::default())
    }
}

impl RobotConfig {
    /// The robot called `name` with its default settings; an unknown name is an error
    /// listing the known ones (so it serves as clap's value parser for `--robot`).
    pub fn named(name: &str) -> Result<Self, String> {
        match name {
            reacher2d::NAME => Ok(Self::Reacher2d(Reacher2dConfig::default())),
            pusht::NAME => Ok(Self::PushT(PushTConfig::default())),
            remote::NAME => Err(
                "robot `remote` is configured in a daemon config (robot = \"remote\" with [actor.robot] key = ...; docs/bridge.md), not by name alone".into(),
            ),
            other => Err(format!(
                "unknown robot `{other}`; the built-in robots are: {}, and `remote` names a robot in another process (docs/bridge.md)",
                ROBOT_NAMES.join(", ")
            )),
        }
    }

    /// The robot called `name` with the settings of `table` (keys left out keep their
    /// defaults); an unknown name, an unknown key or a value out of range is an error
    /// naming it.
    pub fn from_table(name: &str, table: &toml::Table) -> anyhow::Result<Self> {
        let config = Self::read_table(name, table)?;
        config.validate()?;
        Ok(config)
    }

    /// [`Self::from_table`] without the range checks, for a caller that checks the
    /// ranges itself (and names the keys from its own root: `actor.robot.control_hz`).
    /// A `remote` robot is asked for its spec here (waiting up to its
    /// `connect_timeout_s`): its settings are checked then.
    pub fn read_table(name: &str, table: &toml::Table) -> anyhow::Result<Self> {
        let settings = |e: String| anyhow::anyhow!("settings of robot {name}: {e}");
        if name == remote::NAME {
            let remote: RemoteRobotSettings = table_into(table).map_err(settings)?;
            return Ok(Self::Remote(remote.connect()?));
        }
        Ok(match Self::named(name).map_err(anyhow::Error::msg)? {
            Self::Reacher2d(_) => Self::Reacher2d(table_into(table).map_err(settings)?),
            Self::PushT(_) => Self::PushT(table_into(table).map_err(settings)?),
            Self::Remote(_) => unreachable!("`named` never gives a remote robot"),
        })
    }

    /// The robot's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Reacher2d(_) => reacher2d::NAME,
            Self::PushT(_) => pusht::NAME,
            Self::Remote(_) => remote::NAME,
        }
    }

    /// Whether the proprioception holds the whole task state, so that a policy needs no
    /// camera: pusht's pose setting (the pusher and the block's pose). reacher2d shows
    /// its target only in the frame, pusht's vision setting the block, and a remote
    /// robot's state is not known here.
    pub fn state_in_proprioception(&self) -> bool {
        matches!(self, Self::PushT(config) if config.observation == pusht::PushTObservation::Pose)
    }

    /// The proprioception entries that give the pose of an object the robot moves
    /// by contact (pusht's block, where the proprioception holds its pose; entries
    /// the spec lacks are ignored by their users): the world-model evaluation splits
    /// its errors by whether they changed.
    pub fn object_pose_entries(&self) -> &'static [&'static str] {
        match self {
            Self::PushT(_) => &pusht::BLOCK_POSE,
            Self::Reacher2d(_) | Self::Remote(_) => &[],
        }
    }

    /// The task's reward as a function of the proprioception alone, where the
    /// proprioception determines it (pusht in the pose setting: the block's coverage of
    /// the goal): what a planner scores on states decoded from a world model.
    pub fn reward_of_state(&self) -> Option<fn(&[f32]) -> f32> {
        self.state_in_proprioception()
            .then_some(pusht_reward_of_state as fn(&[f32]) -> f32)
    }

    /// Checks every setting against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Self::Reacher2d(config) => config.validate(),
            Self::PushT(config) => config.validate(),
            Self::Remote(config) => config.validate(),
        }
    }

    /// The robot's spec (spaces, rate, camera).
    pub fn spec(&self) -> RobotSpec {
        match (self, self.simulated()) {
            (Self::Remote(config), _) => config.spec.clone(),
            (_, Some(robot)) => robot.spec().clone(),
            (_, None) => unreachable!("every robot but a remote one is simulated"),
        }
    }

    /// Whether the robot is simulated in this process (not `remote`).
    pub fn is_simulated(&self) -> bool {
        !matches!(self, Self::Remote(_))
    }

    /// A fresh simulated robot with these settings (reset to seed 0), without an
    /// expert; a remote robot cannot be simulated, which is an error naming it.
    pub fn build(&self) -> anyhow::Result<SimRobot> {
        self.simulated().ok_or_else(|| match self {
            Self::Remote(config) => anyhow::anyhow!(
                "robot {} at {} is a robot in another process: it cannot be simulated here (use a built-in robot, or drive it with `imago daemon`)",
                config.spec.name,
                config.settings.key
            ),
            _ => anyhow::anyhow!("robot {} cannot be simulated", self.name()),
        })
    }

    /// How the robot's proprioception and actions read in LeRobot's units: a built-in
    /// robot's own mapping (`Robot::lerobot_units`: pusht in gym-pusht's pixels), also
    /// when it is served from another process (`imago robot-serve`: the settings it
    /// reports build a robot of the very spec it answered); any other robot in another
    /// process speaks its LeRobot units already (the bridge's LeRobot and gym adapters
    /// pass them through).
    pub fn lerobot_units(&self) -> imago_robots::LeRobotUnits {
        match self {
            Self::Remote(remote) => match Self::from_json(&remote.robot_settings) {
                Ok(served) if served.is_simulated() && served.spec() == remote.spec => {
                    served.lerobot_units()
                }
                _ => imago_robots::LeRobotUnits::identity(&remote.spec),
            },
            Self::Reacher2d(_) | Self::PushT(_) => match self.simulated() {
                Some(robot) => robot.lerobot_units(),
                None => imago_robots::LeRobotUnits::identity(&self.spec()),
            },
        }
    }

    /// The simulated robot, `None` for a remote one.
    fn simulated(&self) -> Option<SimRobot> {
        let body = match self {
            Self::Reacher2d(config) => Body::Reacher2d {
                robot: Box::new(Reacher2d::new(config.clone())),
                expert: None,
            },
            Self::PushT(config) => Body::PushT {
                robot: Box::new(PushT::new(config.clone())),
                expert: None,
            },
            Self::Remote(_) => return None,
        };
        Some(SimRobot { body })
    }

    /// Whether the robot has a scripted expert (`imago collect`, takeovers).
    pub fn has_expert(&self) -> bool {
        match self {
            Self::Reacher2d(_) | Self::PushT(_) => true,
            Self::Remote(_) => false,
        }
    }

    /// The imperfections of the robot's scripted demonstrations when none are given:
    /// the noise is a fraction of the action limit, so a position-commanded robot
    /// (pusht: targets over the half workspace, 256 units) needs less than a
    /// velocity-commanded one (reacher2d).
    pub fn default_expert(&self) -> ExpertConfig {
        match self {
            Self::Reacher2d(_) | Self::Remote(_) => ExpertConfig::default(),
            Self::PushT(_) => ExpertConfig {
                noise: 0.02,
                ..ExpertConfig::default()
            },
        }
    }

    /// The settings as JSON, as a replay's manifest records them.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// Settings recorded by [`Self::to_json`]; an unknown robot or malformed settings
    /// are an error.
    pub fn from_json(value: &serde_json::Value) -> anyhow::Result<Self> {
        let config: Self = serde_json::from_value(value.clone())
            .map_err(|e| anyhow::anyhow!("recorded robot settings are not readable: {e}"))?;
        config.validate()?;
        Ok(config)
    }

    /// The robot that replays written before replays recorded their robot hold: the
    /// default reacher2d (the only robot then), used only when their episodes fit it.
    pub fn before_recorded_specs() -> Self {
        Self::default()
    }
}

/// One built-in robot's state, with its expert once one is started.
enum Body {
    Reacher2d {
        robot: Box<Reacher2d>,
        expert: Option<reacher2d::ScriptedExpert>,
    },
    PushT {
        robot: Box<PushT>,
        expert: Option<pusht::ScriptedExpert>,
    },
}

/// `$body` evaluated with `$robot` (and `$expert`) bound to the concrete robot (and
/// its expert slot), whichever it is: the robots and their experts share these
/// methods by name, not by a trait.
macro_rules! with_robot {
    ($body:expr, $robot:ident => $e:expr) => {
        with_robot!($body, $robot, _expert => $e)
    };
    ($body:expr, $robot:ident, $expert:ident => $e:expr) => {
        match $body {
            Body::Reacher2d {
                robot: $robot,
                expert: $expert,
            } => $e,
            Body::PushT {
                robot: $robot,
                expert: $expert,
            } => $e,
        }
    };
}

/// A simulated robot from the registry: a [`Robot`] (drawing hooks included) plus
/// what only simulation has: a scripted expert reading privileged state, and the
/// choice of who draws its camera frames.
pub struct SimRobot {
    body: Body,
}

impl SimRobot {
    /// Chooses who draws the camera frames of the following observations.
    pub fn set_frame_source(&mut self, frames: FrameSource) {
        with_robot!(&mut self.body, robot => robot.set_frame_source(frames))
    }

    /// A copy of the robot in its current state, without its expert and drawing no
    /// frames (observations come with `image: None`): a model of itself to plan in,
    /// stepped without touching the original.
    pub fn planning_copy(&self) -> SimRobot {
        let body = match &self.body {
            Body::Reacher2d { robot, .. } => Body::Reacher2d {
                robot: robot.clone(),
                expert: None,
            },
            Body::PushT { robot, .. } => Body::PushT {
                robot: robot.clone(),
                expert: None,
            },
        };
        let mut copy = SimRobot { body };
        copy.set_frame_source(FrameSource::Caller);
        copy
    }

    /// Ticks taken in the current episode.
    pub fn steps(&self) -> u32 {
        with_robot!(&self.body, robot => robot.steps())
    }

    /// Starts the scripted expert with `config` on the episode the robot was just reset
    /// to with `seed` (its noise stream and mistake draw come from `seed`). Returns
    /// false for a robot without an expert.
    pub fn start_expert(&mut self, config: &ExpertConfig, seed: u64) -> bool {
        match &mut self.body {
            Body::Reacher2d { robot, expert } => {
                let mut started = reacher2d::ScriptedExpert::new(config.clone());
                started.begin_episode(robot, seed);
                *expert = Some(started);
            }
            Body::PushT { robot, expert } => {
                let mut started = pusht::ScriptedExpert::new(config.clone());
                started.begin_episode(robot, seed);
                *expert = Some(started);
            }
        }
        true
    }

    /// Whether an expert has been started.
    pub fn expert_started(&self) -> bool {
        with_robot!(&self.body, _robot, expert => expert.is_some())
    }

    /// The started expert's command for the current state; `None` before
    /// [`Self::start_expert`].
    pub fn expert_action(&mut self) -> Option<Action> {
        with_robot!(&mut self.body, robot, expert => expert.as_mut().map(|e| e.act(robot)))
    }

    /// The current camera frame drawn on the CPU (`None` for a robot without camera).
    pub fn render_frame(&self) -> Option<Image> {
        match &self.body {
            Body::Reacher2d { robot, .. } => Some(reacher2d::render(
                &robot.scene(),
                robot.config().image_size,
                robot.config().view_half_extent,
            )),
            Body::PushT { robot, .. } => Some(robot.render_frame()),
        }
    }
}

impl Robot for SimRobot {
    fn spec(&self) -> &RobotSpec {
        with_robot!(&self.body, robot => robot.spec())
    }

    fn reset(&mut self, seed: u64) -> Observation {
        with_robot!(&mut self.body, robot, expert => {
            *expert = None;
            robot.reset(seed)
        })
    }

    fn step(&mut self, action: &Action) -> Step {
        with_robot!(&mut self.body, robot => robot.step(action))
    }

    fn alternative_instructions(&self) -> Vec<String> {
        with_robot!(&self.body, robot => robot.alternative_instructions())
    }

    fn tracked_point(&self) -> Option<[f32; 2]> {
        with_robot!(&self.body, robot => robot.tracked_point())
    }

    fn scene_drawing(&self) -> SceneDrawing {
        with_robot!(&self.body, robot => robot.scene_drawing())
    }

    fn body_from_proprio(&self, proprio: &[f32]) -> Vec<[f32; 2]> {
        with_robot!(&self.body, robot => robot.body_from_proprio(proprio))
    }

    fn intended_path(&self, chunk: &[f32]) -> Vec<[f32; 2]> {
        with_robot!(&self.body, robot => robot.intended_path(chunk))
    }

    fn lerobot_units(&self) -> imago_robots::LeRobotUnits {
        with_robot!(&self.body, robot => robot.lerobot_units())
    }
}

/// A robot's batched camera: the frames of many robots of one config in one GPU
/// dispatch (`imago_shaders`).
pub enum BatchRenderer {
    /// reacher2d's WGSL renderer.
    Reacher2d(Reacher2dRenderer),
}

impl BatchRenderer {
    /// The batched renderer of `robot` on `gpu`; `None` for a robot without one
    /// (pusht: its frames are drawn on the CPU).
    pub fn new(robot: &RobotConfig, gpu: GpuContext) -> Option<Self> {
        match robot {
            RobotConfig::Reacher2d(_) => Some(Self::Reacher2d(Reacher2dRenderer::new(gpu))),
            RobotConfig::PushT(_) | RobotConfig::Remote(_) => None,
        }
    }

    /// The current frames of `robots`, in order (one dispatch).
    pub fn render(&self, robots: &[&SimRobot]) -> anyhow::Result<Vec<Image>> {
        let Some(first) = robots.first() else {
            return Ok(Vec::new());
        };
        match self {
            Self::Reacher2d(renderer) => {
                let reacher = |sim: &SimRobot| match &sim.body {
                    Body::Reacher2d { robot, .. } => Ok(robot.scene()),
                    Body::PushT { .. } => Err(anyhow::anyhow!(
                        "reacher2d's renderer was given another robot"
                    )),
                };
                let Body::Reacher2d { robot, .. } = &first.body else {
                    return Err(reacher(first).unwrap_err());
                };
                let (size, extent) = (robot.config().image_size, robot.config().view_half_extent);
                let scenes = robots
                    .iter()
                    .map(|sim| reacher(sim))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                Ok(renderer.render(&scenes, size, extent)?)
            }
        }
    }
}

/// pusht's reward of a pose-setting proprioception (0 for one too short).
fn pusht_reward_of_state(proprio: &[f32]) -> f32 {
    pusht::reward_of_proprio(proprio).unwrap_or(0.0) as f32
}

/// reacher2d with the settings `settings` (TOML), for tests.
#[cfg(test)]
pub(crate) fn reacher2d_with(settings: &str) -> RobotConfig {
    let table: toml::Table = toml::from_str(settings).expect("test settings are TOML");
    RobotConfig::from_table(reacher2d::NAME, &table).expect("valid test settings")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_builds_a_robot_of_that_name_and_json_round_trips() {
        for name in ROBOT_NAMES {
            let config = RobotConfig::named(name).expect("built in");
            assert_eq!(config.name(), name);
            assert_eq!(config.spec().name, name);
            let back = RobotConfig::from_json(&config.to_json()).expect("round trip");
            assert_eq!(back, config);
        }
    }

    #[test]
    fn unknown_names_and_keys_are_errors_naming_them() {
        let error = RobotConfig::named("reacher3d").unwrap_err();
        assert!(
            error.contains("reacher3d") && error.contains("reacher2d"),
            "{error}"
        );
        let table: toml::Table = toml::from_str("image_sise = 32").expect("toml");
        let error = format!(
            "{:#}",
            RobotConfig::from_table("reacher2d", &table).unwrap_err()
        );
        assert!(error.contains("image_sise"), "{error}");
        let table: toml::Table = toml::from_str("image_size = 36").expect("toml");
        let error = format!(
            "{:#}",
            RobotConfig::from_table("reacher2d", &table).unwrap_err()
        );
        assert!(error.contains("image_size"), "{error}");
    }

    #[test]
    fn table_settings_reach_the_spec() {
        let table: toml::Table = toml::from_str("image_size = 32\nmax_steps = 7").expect("toml");
        let spec = RobotConfig::from_table("reacher2d", &table)
            .expect("valid")
            .spec();
        assert_eq!(spec.camera.map(|c| c.width), Some(32));
        assert_eq!(spec.max_steps, 7);
    }

    #[test]
    fn pusht_settings_reach_its_spec_and_its_expert_drives_it() {
        let table: toml::Table = toml::from_str("image_size = 48").expect("toml");
        let config = RobotConfig::from_table("pusht", &table).expect("valid");
        let spec = config.spec();
        assert_eq!(spec.camera.map(|c| c.width), Some(48));
        assert_eq!((spec.max_steps, spec.control_hz), (300, 10.0));
        assert_eq!(
            spec.proprio_names[..5],
            ["agent_x", "agent_y", "block_x", "block_y", "block_angle"]
        );
        let table: toml::Table = toml::from_str("observation = \"vision\"").expect("toml");
        let vision = RobotConfig::from_table("pusht", &table).expect("valid");
        assert_eq!(vision.spec().proprio_names, ["agent_x", "agent_y"]);
        let table: toml::Table = toml::from_str("observation = \"pixels\"").expect("toml");
        let error = format!(
            "{:#}",
            RobotConfig::from_table("pusht", &table).unwrap_err()
        );
        assert!(error.contains("vision"), "{error}");
        let table: toml::Table = toml::from_str("image_size = 50").expect("toml");
        let error = format!(
            "{:#}",
            RobotConfig::from_table("pusht", &table).unwrap_err()
        );
        assert!(error.contains("image_size"), "{error}");
        let mut robot = config.build().unwrap();
        let first = robot.reset(9);
        assert!(robot.start_expert(&config.default_expert(), 9));
        let action = robot.expert_action().expect("started");
        let step = robot.step(&action);
        assert!(step.info.coverage.is_some());
        assert_eq!(robot.render_frame().map(|f| f.width), Some(48));
        assert_ne!(first.proprio, step.observation.proprio);
    }

    #[test]
    fn the_expert_acts_only_once_started_and_reset_stops_it() {
        let mut robot = RobotConfig::default().build().unwrap();
        robot.reset(3);
        assert!(robot.expert_action().is_none());
        assert!(robot.start_expert(&ExpertConfig::noiseless(), 3));
        let action = robot.expert_action().expect("started");
        assert_eq!(action.0.len(), robot.spec().action_dim());
        robot.reset(4);
        assert!(!robot.expert_started());
    }
}
