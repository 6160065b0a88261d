//! Flags and helpers several commands share: the robot (`--robot`,
//! `--robot-config`), the rerun recording (`--rerun*`), JSON reports and range checks.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use imago_robots::bounds::in_range;
use imago_runtime::act::loaded_policy::ExecutedSteps;
use imago_runtime::bridge::LinkConfig;
use imago_runtime::device::{DeviceSpec, ResolvedDevice, resolve};
use imago_runtime::engine::daemon::{DaemonConfig, DaemonOptions};
use imago_runtime::robot::{DEFAULT_ROBOT, RobotConfig};
use imago_runtime::store::outputs::check_file_output;
use imago_runtime::telemetry::{
    DEFAULT_VIEWER_URL, Telemetry, TelemetryConfig, TelemetrySession, TelemetryTarget,
};
use imago_runtime::toml_file::read_toml;

/// Longest world-model horizon a flag accepts (a config's too).
pub use imago_runtime::learn::world_model::MAX_HORIZON;

/// The robot a command creates (`--robot NAME`, `--robot-config FILE.toml`).
#[derive(Debug, Clone, Args)]
pub struct RobotArgs {
    /// The robot, by name (built in: reacher2d, pusht).
    #[arg(long, default_value = DEFAULT_ROBOT, value_parser = RobotConfig::named)]
    robot: RobotConfig,
    /// A TOML file of the robot's settings (keys left out keep their defaults; see
    /// docs/configuration.md).
    #[arg(long, value_name = "FILE.toml")]
    robot_config: Option<PathBuf>,
}

impl RobotArgs {
    /// The named robot with the settings of `--robot-config`, checked.
    pub fn resolve(&self) -> anyhow::Result<RobotConfig> {
        match &self.robot_config {
            None => Ok(self.robot.clone()),
            Some(path) => {
                let table: toml::Table = read_toml(path)?;
                RobotConfig::from_table(self.robot.name(), &table)
                    .map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))
            }
        }
    }
}

/// Where a rerun recording of the run goes (at most one of these).
#[derive(Debug, Clone, Default, Args)]
#[group(multiple = false)]
pub struct RerunArgs {
    /// Save a rerun recording of the run to this file (open it with `rerun PATH.rrd`).
    #[arg(long, value_name = "PATH.rrd")]
    pub rerun: Option<PathBuf>,
    /// Stream the recording to a running rerun viewer [URL default:
    /// rerun+http://127.0.0.1:9876/proxy].
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = DEFAULT_VIEWER_URL)]
    pub rerun_connect: Option<String>,
    /// Start a rerun viewer (`rerun` on the PATH) and stream the recording to it.
    #[arg(long)]
    pub rerun_spawn: bool,
}

impl RerunArgs {
    /// Where the recording goes, if anywhere.
    pub fn target(&self) -> Option<TelemetryTarget> {
        match (&self.rerun, &self.rerun_connect, self.rerun_spawn) {
            (Some(path), _, _) => Some(TelemetryTarget::File(path.clone())),
            (_, Some(url), _) => Some(TelemetryTarget::Connect(url.clone())),
            (_, _, true) => Some(TelemetryTarget::Spawn),
            _ => None,
        }
    }

    /// Starts the session these flags ask for (one that logs nothing without them).
    pub fn start(&self, config: &TelemetryConfig) -> anyhow::Result<TelemetrySession> {
        if let Some(path) = &self.rerun {
            check_file_output("--rerun", path, &[])?;
        }
        TelemetrySession::start(self.target().as_ref(), config, "imago")
    }

    /// Flushes the recording and says where it went. A file that cannot be written is
    /// an error; a live viewer that cannot be reached is a warning (the run's own
    /// results are already saved).
    pub fn finish(&self, session: TelemetrySession) -> anyhow::Result<()> {
        let Some(target) = self.target() else {
            return Ok(());
        };
        let report = match (session.finish(), &target) {
            (Ok(report), _) => report,
            // A live viewer that is not there loses nothing the run made: say so.
            (Err(error), TelemetryTarget::Connect(_) | TelemetryTarget::Spawn) => {
                eprintln!("warning: the rerun viewer did not receive the recording: {error:#}");
                return Ok(());
            }
            (Err(error), TelemetryTarget::File(_)) => return Err(error),
        };
        let place = match target {
            TelemetryTarget::File(path) => format!("written to {}", path.display()),
            TelemetryTarget::Connect(url) => format!("streamed to {url}"),
            TelemetryTarget::Spawn => "streamed to the spawned viewer".to_string(),
        };
        println!(
            "rerun recording {place}: {} events logged, {} dropped",
            report.logged, report.dropped
        );
        Ok(())
    }
}

/// Writes `value` as pretty JSON to `path` (a `--report`), atomically.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    check_file_output("--report", path, &[])?;
    let json = serde_json::to_vec_pretty(value)?;
    imago_runtime::store::atomic::write_file(path, &json)
}

/// Checks a flag's value against its documented range; the error names the flag.
pub fn flag_in_range<T: PartialOrd + std::fmt::Debug>(
    flag: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> anyhow::Result<()> {
    in_range(flag, value, range).map_err(anyhow::Error::from)
}

/// `steps` actions per plan, or an error naming `flag` and the range.
pub fn executed_steps(flag: &str, steps: usize) -> anyhow::Result<ExecutedSteps> {
    flag_in_range(flag, steps, 1..=ExecutedSteps::MAX)?;
    Ok(ExecutedSteps::new(steps).expect("checked against the same range"))
}

/// Longest run `--duration` accepts: ten years, in seconds.
const MAX_DURATION_SECONDS: f64 = 315_360_000.0;

/// The flags of a command run from a daemon config (`daemon`, `learner`): the config,
/// the run directory and how to treat an existing one, how long to run, the report.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The daemon config: robot, actor, learner, replay (see
    /// examples/reacher2d-daemon.toml).
    #[arg(long)]
    pub config: PathBuf,
    /// Where the replay and checkpoints go (overrides the config's run_dir).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Stop as on SIGTERM after this many seconds (0.1 to 315360000, ten years).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Continue the run in the run directory: its checkpoint and its replay.
    #[arg(long, conflicts_with = "fresh")]
    pub resume: bool,
    /// Move what the run directory holds aside (renamed, never deleted) and start
    /// a new run there.
    #[arg(long)]
    pub fresh: bool,
    /// Also write the final status as JSON here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// What a run starts with, once its flags are checked.
pub struct RunStart {
    /// The config, loaded and checked.
    pub config: DaemonConfig,
    /// The device: `--device`, else the config's.
    pub device: ResolvedDevice,
    /// Set by SIGINT/SIGTERM.
    pub stop: &'static AtomicBool,
}

impl RunArgs {
    /// Loads the config, checks `--duration` and `--report` (before anything runs, so
    /// a bad report path costs no run), resolves the device and installs the signal
    /// handler.
    pub fn start(&self, device: DeviceSpec) -> anyhow::Result<RunStart> {
        let config = DaemonConfig::load(&self.config)?;
        if let Some(seconds) = self.duration {
            flag_in_range("--duration", seconds, 0.1..=MAX_DURATION_SECONDS)?;
        }
        if let Some(path) = &self.report {
            check_file_output("--report", path, &[])?;
        }
        let spec = match device {
            DeviceSpec::Auto => config
                .device
                .parse()
                .map_err(|e| anyhow::anyhow!("device: {e}"))?,
            other => other,
        };
        let device = resolve(spec)?;
        static STOP: AtomicBool = AtomicBool::new(false);
        ctrlc::set_handler(|| STOP.store(true, Ordering::Relaxed))
            .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))?;
        Ok(RunStart {
            config,
            device,
            stop: &STOP,
        })
    }

    /// The runtime's options for these flags, logging to `telemetry`.
    pub fn options(&self, telemetry: Telemetry) -> DaemonOptions {
        DaemonOptions {
            run_dir: self.run_dir.clone(),
            duration: self.duration.map(Duration::from_secs_f64),
            resume: self.resume,
            fresh: self.fresh,
            max_learning_steps: None,
            telemetry,
        }
    }

    /// Writes `value` to `--report`, when given.
    pub fn write_report(&self, value: &impl serde::Serialize) -> anyhow::Result<()> {
        self.report
            .as_ref()
            .map_or(Ok(()), |path| write_json(path, value))
    }
}

/// A zenoh link listening on `listen` and connecting to `connect` (no multicast
/// scouting), its endpoints checked; the error names `flag`.
pub fn flag_link(
    flag: &str,
    listen: Vec<String>,
    connect: Vec<String>,
) -> anyhow::Result<LinkConfig> {
    let link = LinkConfig::explicit(listen, connect);
    link.validate()
        .map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
    Ok(link)
}
