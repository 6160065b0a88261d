//! `robot.toml`, the daemon's config file, and the daemon's command-line options
//! and final report.

use std::path::{Path, PathBuf};
use std::time::Duration;

use imago_robots::RobotSpec;
use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;
use crate::engine::champion::{PromotionConfig, PromotionSummary};
use crate::engine::learner_loop::LearnerConfig;
use crate::engine::{ActorConfig, ControlReport, ReplayWriterConfig};
use crate::telemetry::{Telemetry, TelemetryConfig};
use crate::toml_file::parse_toml;

/// `robot.toml`: everything the daemon needs; every field but the robot has a default.
/// `A` is the actor's settings: resolved ([`ActorConfig`], the default) once loaded,
/// with the raw `[actor.robot]` table as the file holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig<A = ActorConfig> {
    /// Which robot (`robot = "NAME"`, a name of the robot registry: reacher2d); its
    /// settings are the `[actor.robot]` table.
    pub robot: String,
    /// Where models run: auto, cpu (burn-flex), cpu:ndarray, wgpu[:N], cuda[:N].
    #[serde(default = "default_device")]
    pub device: String,
    /// Where the replay and checkpoints go (`--run-dir` overrides).
    #[serde(default = "default_run_dir")]
    pub run_dir: PathBuf,
    /// The policy checkpoint to start from; none: a freshly initialised policy.
    #[serde(default)]
    pub policy: Option<PathBuf>,
    /// The world-model checkpoint to start from; none: a fresh SALT world model.
    #[serde(default)]
    pub world_model: Option<PathBuf>,
    /// The control loop: robot settings (rate, safety limits), exploration, takeover.
    #[serde(default)]
    pub actor: A,
    /// The learner.
    #[serde(default)]
    pub learner: LearnerConfig,
    /// The promotion gate between the learner and the actor (docs/promotion.md).
    #[serde(default)]
    pub promotion: PromotionConfig,
    /// Replay segment size and retention limit (`retention_bytes`, oldest closed
    /// segments deleted first).
    #[serde(default)]
    pub replay: ReplayWriterConfig,
    /// Seconds between scheduled checkpoints. Range: [0.1, 1000000].
    #[serde(default = "default_checkpoint_seconds")]
    pub checkpoint_every_seconds: f64,
    /// Seconds between status lines on standard error. Range: [0.1, 86400].
    #[serde(default = "default_status_seconds")]
    pub status_every_seconds: f64,
    /// How much the rerun telemetry logs (used with `--rerun*`).
    #[serde(default)]
    pub telemetry: TelemetryConfig,
}

fn default_status_seconds() -> f64 {
    10.0
}

fn default_device() -> String {
    "auto".into()
}

fn default_run_dir() -> PathBuf {
    PathBuf::from("imago-runs/daemon")
}

fn default_checkpoint_seconds() -> f64 {
    60.0
}

impl DaemonConfig {
    /// Reads and checks `path`; errors name the file, the key and the problem.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))
    }

    /// Parses and checks a config file's text: the robot named by `robot` with the
    /// settings of `[actor.robot]`, every other key against its range.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let file: DaemonConfig<ActorConfig<toml::Table>> =
            parse_toml(text).map_err(anyhow::Error::msg)?;
        let actor = file.actor.resolve(&file.robot)?;
        let config = DaemonConfig {
            robot: file.robot,
            device: file.device,
            run_dir: file.run_dir,
            policy: file.policy,
            world_model: file.world_model,
            actor,
            learner: file.learner,
            promotion: file.promotion,
            replay: file.replay,
            checkpoint_every_seconds: file.checkpoint_every_seconds,
            status_every_seconds: file.status_every_seconds,
            telemetry: file.telemetry,
        };
        config.validate()?;
        Ok(config)
    }

    /// The spec of the robot the daemon drives.
    pub fn spec(&self) -> RobotSpec {
        self.actor.robot.spec()
    }

    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.robot != self.actor.robot.name() {
            return Err(ConfigError::new(
                "robot",
                &self.robot,
                format!("the actor's robot is {}", self.actor.robot.name()),
            ));
        }
        if let Err(e) = self.device.parse::<DeviceSpec>() {
            return Err(ConfigError::new("device", &self.device, e.to_string()));
        }
        self.actor.validate().map_err(|e| e.within("actor"))?;
        self.replay.validate().map_err(|e| e.within("replay"))?;
        in_range(
            "checkpoint_every_seconds",
            self.checkpoint_every_seconds,
            0.1..=1e6,
        )?;
        in_range(
            "status_every_seconds",
            self.status_every_seconds,
            0.1..=86_400.0,
        )?;
        self.telemetry
            .validate()
            .map_err(|e| e.within("telemetry"))?;
        if self.learner.enabled {
            self.promotion
                .validate(&self.actor.robot)
                .map_err(|e| e.within("promotion"))?;
        }
        self.learner.validate().map_err(|e| e.within("learner"))
    }
}

/// Options from the command line.
#[derive(Debug, Clone, Default)]
pub struct DaemonOptions {
    /// Overrides the config's run directory.
    pub run_dir: Option<PathBuf>,
    /// Stop as on SIGTERM after this long.
    pub duration: Option<Duration>,
    /// Continue from the newest checkpoint in the run directory and its replay.
    pub resume: bool,
    /// Move an existing run directory aside (never deleted) and start a new run.
    pub fresh: bool,
    /// Stop after this many learning steps (benchmarks).
    pub max_learning_steps: Option<u64>,
    /// Where the control loop and the learner log (off: [`Telemetry::off`]).
    pub telemetry: Telemetry,
}

/// The daemon's final status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonReport {
    /// The control loop and the recording.
    #[serde(flatten)]
    pub control: ControlReport,
    /// Learning steps completed.
    pub learning_steps: u64,
    /// The policy version at shutdown.
    pub final_policy_version: u64,
    /// Wall time from the first tick to shutdown, seconds.
    pub seconds: f64,
    /// The checkpoint written at shutdown.
    pub checkpoint: String,
    /// What the promotion gate did.
    #[serde(flatten)]
    pub promotion: PromotionSummary,
}
