//! `imago daemon`: the robot-side process. The actor runs the control loop and the
//! replay writer records every transition (see [`crate::engine`]); on the calling
//! thread the learner fine-tunes the policy on the replay
//! ([`crate::engine::learner_loop`]) and hands each new version to the actor through
//! the promotion gate ([`crate::engine::actor_feed`]); checkpoints are written on a
//! schedule and at shutdown. The fleet's learner (`engine::fleet::learner`) starts as
//! this one does ([`prepare`]) and learns the same way.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use burn::Dispatch;
use burn::prelude::Backend;
use imago_policies::{Architecture, PolicyConfig};
use imago_robots::RobotSpec;
use imago_robots::bounds::{ConfigError, in_range};
use imago_worldmodel::{TransitionFamily, WorldModelConfig};
use serde::{Deserialize, Serialize};

use crate::device::{DeviceSpec, ResolvedDevice};
use crate::engine::actor_feed::{ActorFeed, ChampionCheckpoint};
use crate::engine::champion::{ChampionGate, PromotionConfig, PromotionMode, PromotionSummary};
use crate::engine::learner_loop::{Checkpointing, LearnerConfig, LearnerLoop, enough_fresh, save};
use crate::engine::{
    ActorConfig, ActorStart, ControlReport, PolicySnapshot, Recording, ReplayWindow,
    ReplayWriterConfig, SnapshotMailbox, run_control_loop,
};
use crate::learn::finetune::Learner;
use crate::learn::world_model::WorldModelTrainConfig;
use crate::store::checkpoint::{
    ensure_trained_for, load_policy, load_policy_to_continue, load_world_model, read_meta,
    recover_checkpoint, stored_architecture,
};
use crate::store::lock::DirLock;
use crate::store::outputs::{
    Holding, Input, OutputKind, check_output, holding, mark_run_directory,
};
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

/// Where the daemon's policy checkpoint (the learner's newest weights) lives in
/// `run_dir`.
pub fn policy_checkpoint(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints").join("policy")
}

/// Where the champion (the policy that acts) is kept next to the learner's `checkpoint`.
pub fn champion_checkpoint(checkpoint: &Path) -> PathBuf {
    checkpoint.with_file_name("champion")
}

/// What the daemon starts from: the learner (policy, world model, critic), where it
/// records, the learner's window on that replay, and the run directory's lock (held
/// until the daemon ends).
pub(crate) struct Prepared {
    pub(crate) learner: Learner,
    pub(crate) replay: PathBuf,
    pub(crate) window: ReplayWindow,
    pub(crate) checkpoint: PathBuf,
    _lock: DirLock,
}

/// The run directory, locked, in the state `--resume` or `--fresh` asks for: a new
/// run gets an empty, marked directory (an existing run or anything else there is an
/// error naming both ways out, or with `--fresh` is moved aside, never deleted);
/// `--resume` needs a daemon run with a checkpoint.
fn open_run_dir(run_dir: &Path, options: &DaemonOptions) -> anyhow::Result<DirLock> {
    let lock = DirLock::acquire(run_dir, "imago daemon")?;
    let found = holding(run_dir);
    let is_run = found == Holding::RunDirectory("daemon".into());
    if options.resume {
        anyhow::ensure!(
            is_run,
            "--resume: {} holds {found}, not a daemon run to resume; start without --resume",
            run_dir.display()
        );
        return Ok(lock);
    }
    if found == Holding::EmptyDirectory {
        mark_run_directory(run_dir, "daemon")?;
        return Ok(lock);
    }
    if !options.fresh {
        let what = if is_run {
            format!(
                "the daemon run {} exists (checkpoint version {})",
                run_dir.display(),
                read_meta(&policy_checkpoint(run_dir))
                    .map_or("unreadable".into(), |m| m.version.to_string())
            )
        } else {
            format!("{} holds {found}", run_dir.display())
        };
        anyhow::bail!(
            "{what}; pass --resume to continue it, or --fresh to move it aside (kept, renamed) and start a new run"
        );
    }
    let aside = aside_name(run_dir);
    // The lock moves with the directory (it is held on the file, not the name).
    std::fs::rename(run_dir, &aside).with_context(|| {
        format!(
            "cannot move {} aside to {}",
            run_dir.display(),
            aside.display()
        )
    })?;
    drop(lock);
    eprintln!(
        "--fresh: moved the previous contents of {} to {}",
        run_dir.display(),
        aside.display()
    );
    let lock = DirLock::acquire(run_dir, "imago daemon")?;
    mark_run_directory(run_dir, "daemon")?;
    Ok(lock)
}

/// A visible sibling name for moving `dir` aside: `DIR.previous-<unix seconds>`.
fn aside_name(dir: &Path) -> PathBuf {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into());
    let mut candidate = dir.with_file_name(format!("{name}.previous-{seconds}"));
    let mut n = 1;
    while candidate.exists() {
        candidate = dir.with_file_name(format!("{name}.previous-{seconds}-{n}"));
        n += 1;
    }
    candidate
}

/// Loads or initialises the models (from the run's checkpoint with `--resume`) and
/// writes a first checkpoint, so that a crash at any time leaves one to resume.
pub(crate) fn prepare(
    config: &DaemonConfig,
    options: &DaemonOptions,
    device: &ResolvedDevice,
) -> anyhow::Result<Prepared> {
    let run_dir = options.run_dir.clone().unwrap_or(config.run_dir.clone());
    anyhow::ensure!(
        !(options.resume && options.fresh),
        "--resume and --fresh exclude each other"
    );
    // A new run must not bury the models it starts from (`--fresh` would move them
    // aside with the old run).
    let sources = [
        ("policy", &config.policy),
        ("world_model", &config.world_model),
    ];
    for (key, path) in sources.iter().filter(|_| !options.resume) {
        if let Some(path) = path {
            check_output(
                "--run-dir",
                &run_dir,
                OutputKind::RunDirectory("daemon"),
                &[Input { flag: key, path }],
                true,
            )?;
        }
    }
    let lock = open_run_dir(&run_dir, options)?;
    let checkpoint = policy_checkpoint(&run_dir);
    let replay = run_dir.join("replay");
    for note in recover_checkpoint(&checkpoint)? {
        eprintln!("{note}");
    }
    let spec = config.spec();
    // A new policy is a VLA; one continued keeps its checkpoint's architecture.
    let expected = |architecture: Architecture| {
        PolicyConfig::for_robot(architecture, &spec)
            .map_err(|e| anyhow::anyhow!("the policy for {}: {e}", spec.summary()))
    };
    let start_from = if options.resume {
        Some(checkpoint.clone())
    } else {
        config.policy.clone()
    };
    Dispatch::seed(&device.training, config.learner.finetune.seed);
    let (policy, policy_config, mut version) = match &start_from {
        Some(dir) => {
            ensure_trained_for(dir, &spec)
                .with_context(|| format!("cannot start from {}", dir.display()))?;
            let architecture = stored_architecture(dir)
                .with_context(|| format!("cannot start from {}", dir.display()))?;
            let (policy, config, meta) = load_policy_to_continue::<Dispatch>(
                dir,
                &expected(architecture)?,
                &device.training,
            )
            .with_context(|| format!("cannot start from {}", dir.display()))?;
            (policy, config, meta.version)
        }
        None => {
            let config = expected(Architecture::Vla)?;
            (config.init(&device.training), config, 1)
        }
    };
    // With `--resume`, the window catches up on the replay once (reading it segment by
    // segment, keeping only the newest episodes); from then on it reads what is new.
    let mut window = ReplayWindow::new(&replay, config.learner.window_episodes);
    if options.resume {
        window.refresh()?;
        // Versions the learner published after the last checkpoint acted (and were
        // recorded) before a crash; their weights are lost. The checkpoint's weights
        // continue under a new number, so that no version names two sets of weights.
        let recorded = window.max_policy_version();
        if recorded > version {
            eprintln!(
                "--resume: the replay holds policy versions up to {recorded}, newer than the checkpoint's {version} (lost in a crash); its weights continue as version {}",
                recorded + 1
            );
            version = recorded.saturating_add(1);
        }
    }
    let (world_model, wm_config) = match &config.world_model {
        Some(dir) => {
            ensure_trained_for(dir, &spec)?;
            let (model, config, _) = load_world_model::<Dispatch>(dir, None, &device.training)?;
            (model.freeze_target(), config)
        }
        None => {
            let config = WorldModelConfig::for_robot(&spec, TransitionFamily::Salt)
                .map_err(|e| anyhow::anyhow!("the world model for {}: {e}", spec.summary()))?;
            (config.init(&device.training), config)
        }
    };
    let learner = Learner::new(
        (policy, policy_config),
        version,
        (world_model, wm_config),
        WorldModelTrainConfig::default(),
        &config.learner.finetune,
        spec.max_steps,
        device,
    )
    .with_telemetry(options.telemetry.clone());
    save(&learner, &config.spec(), &checkpoint)?;
    Ok(Prepared {
        learner,
        replay,
        window,
        checkpoint,
        _lock: lock,
    })
}

/// When a daemon's run ends: a signal (`stop`), its duration, or its learning steps
/// done.
struct RunEnd<'a> {
    stop: &'a AtomicBool,
    deadline: Option<Instant>,
    max_learning_steps: Option<u64>,
}

impl RunEnd<'_> {
    /// Whether the run is over after `learning_steps`.
    fn reached(&self, learning_steps: u64) -> bool {
        self.stop.load(Ordering::Relaxed)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
            || self
                .max_learning_steps
                .is_some_and(|max| learning_steps >= max)
    }
}

/// The actor's mailbox: with promotion mode `live`, with a slot where challengers are
/// offered beside the champion.
fn actor_mailbox(config: &DaemonConfig) -> SnapshotMailbox {
    let live_tests = config.learner.enabled
        && config.promotion.enabled
        && config.promotion.mode == PromotionMode::Live;
    if live_tests {
        SnapshotMailbox::with_challenger_slot(config.promotion.explore_fraction)
    } else {
        SnapshotMailbox::default()
    }
}

/// Runs the daemon until `stop` is set (by a signal), `options.duration` passes or
/// `options.max_learning_steps` are done: the actor's control loop on its threads,
/// and on this one the learner ([`LearnerLoop`]) feeding the actor through the
/// promotion gate ([`ActorFeed`]).
pub fn run_daemon(
    config: &DaemonConfig,
    options: &DaemonOptions,
    device: &ResolvedDevice,
    stop: &AtomicBool,
) -> anyhow::Result<DaemonReport> {
    let Prepared {
        learner,
        replay,
        window,
        checkpoint,
        _lock,
    } = prepare(config, options, device)?;
    let mailbox = actor_mailbox(config);
    let champion = ChampionCheckpoint {
        dir: champion_checkpoint(&checkpoint),
        policy_config: learner.policy_config().clone(),
        spec: config.spec(),
    };
    let gate = start_gate(config, options, &learner, &champion, device)?;
    let mut feed = ActorFeed::new(gate, &mailbox, champion, device);
    let initial = feed.initial(&learner);
    let policy_config = learner.policy_config().clone();
    let checkpointing = Checkpointing {
        dir: &checkpoint,
        spec: config.spec(),
        every: Duration::from_secs_f64(config.checkpoint_every_seconds),
    };
    let mut learning = LearnerLoop::new(&config.learner, (learner, window), checkpointing, device)?;
    let started = Instant::now();
    let end = RunEnd {
        stop,
        deadline: options.duration.map(|d| started + d),
        max_learning_steps: options.max_learning_steps,
    };
    let mut learner_error = None;
    let control = run_control_loop(
        ActorStart {
            config: &config.actor,
            policy_config: &policy_config,
            initial,
            device: &device.inference,
        },
        Recording {
            dir: &replay,
            config: config.replay.clone(),
            status_every: Some(Duration::from_secs_f64(config.status_every_seconds)),
            telemetry: options.telemetry.clone(),
            purpose: "imago daemon",
        },
        &mailbox,
        stop,
        || {
            learner_error = learning.run(|steps| !end.reached(steps), &mut feed).err();
            // A learner that failed leaves the actor running until the run ends.
            while !end.reached(learning.steps()) {
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::Relaxed);
        },
    );
    // Whatever stopped the control loop, the learner's weights are whole: keep them,
    // and the champion's.
    let saved = learning.save().and_then(|()| feed.save_champion());
    let learner = learning.learner();
    let control = match (control, saved) {
        (Ok(control), Ok(())) => control,
        (Ok(_), Err(error)) => return Err(error.context("the final checkpoint failed")),
        (Err(error), Ok(())) => {
            return Err(error.context(format!(
                "the daemon stopped; policy version {} checkpointed in {}",
                learner.version(),
                checkpoint.display()
            )));
        }
        (Err(error), Err(save_error)) => {
            return Err(error.context(format!(
                "the daemon stopped, and its checkpoint failed too ({save_error:#})"
            )));
        }
    };
    if let Some(error) = learner_error {
        eprintln!("warning: the learner stopped: {error:#}");
    }
    Ok(DaemonReport {
        control,
        learning_steps: learning.steps(),
        final_policy_version: learner.version(),
        seconds: started.elapsed().as_secs_f64(),
        checkpoint: checkpoint.display().to_string(),
        promotion: feed.summary(learner),
    })
}

/// The promotion gate of a run (a daemon's, or a fleet learner's), when the config has
/// it and a learner: its champion is the one `--resume` finds in `champion`'s
/// directory, else the policy the learner starts from; written there at once, so that
/// a restart never deploys an unproven version.
pub(crate) fn start_gate(
    config: &DaemonConfig,
    options: &DaemonOptions,
    learner: &Learner,
    champion: &ChampionCheckpoint,
    device: &ResolvedDevice,
) -> anyhow::Result<Option<ChampionGate>> {
    let champion_dir = &champion.dir;
    if !(config.promotion.enabled && config.learner.enabled) {
        return Ok(None);
    }
    let acting = if options.resume && champion_dir.exists() {
        let (policy, _, meta) = load_policy::<Dispatch>(
            champion_dir,
            Some(learner.policy_config()),
            &device.training,
        )
        .with_context(|| format!("cannot resume the champion in {}", champion_dir.display()))?;
        (policy, meta.version)
    } else {
        (learner.policy(), learner.version())
    };
    let gate = ChampionGate::new(&config.promotion, &config.actor.robot, acting)
        .with_telemetry(options.telemetry.clone());
    champion.save(&gate)?;
    Ok(Some(gate))
}

/// The same work as [`run_daemon`] with `max_learning_steps`, done in turns instead
/// of overlapped: the actor records until enough fresh episodes exist, stops, the
/// learner takes one step, and so on. The baseline of the daemon benchmark.
pub fn run_in_turns(
    config: &DaemonConfig,
    options: &DaemonOptions,
    device: &ResolvedDevice,
    steps: u64,
) -> anyhow::Result<DaemonReport> {
    let Prepared {
        mut learner,
        replay,
        mut window,
        checkpoint,
        _lock,
    } = prepare(config, options, device)?;
    let started = Instant::now();
    let mut control: Option<ControlReport> = None;
    for _ in 0..steps {
        let stop = AtomicBool::new(false);
        let mut ready = false;
        let policy_config = learner.policy_config().clone();
        let turn = run_control_loop(
            ActorStart {
                config: &config.actor,
                policy_config: &policy_config,
                initial: PolicySnapshot::new(learner.version(), learner.policy()),
                device: &device.inference,
            },
            Recording {
                dir: &replay,
                config: config.replay.clone(),
                status_every: None,
                telemetry: options.telemetry.clone(),
                purpose: "imago bench (daemon in turns)",
            },
            &SnapshotMailbox::default(),
            &stop,
            || {
                while !ready {
                    std::thread::sleep(Duration::from_millis(100));
                    match window.refresh() {
                        Ok(_) => ready = enough_fresh(&mut window, &learner, &config.learner),
                        Err(error) => {
                            eprintln!("warning: {error:#}");
                            break;
                        }
                    }
                }
                stop.store(true, Ordering::Relaxed);
            },
        )?;
        control = Some(match control {
            None => turn,
            Some(total) => total.merged(turn),
        });
        anyhow::ensure!(ready, "the replay could not be read");
        learner.learn(window.episodes(), &config.learner.finetune, device)?;
    }
    save(&learner, &config.spec(), &checkpoint)?;
    Ok(DaemonReport {
        control: control.ok_or_else(|| anyhow::anyhow!("no turn was run"))?,
        learning_steps: steps,
        final_policy_version: learner.version(),
        seconds: started.elapsed().as_secs_f64(),
        checkpoint: checkpoint.display().to_string(),
        promotion: PromotionSummary {
            champion_version: learner.version(),
            ..PromotionSummary::default()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/reacher2d-daemon.toml");
        let config = DaemonConfig::load(&path).unwrap();
        assert_eq!(config.robot, "reacher2d");
        assert_eq!(config.spec().control_hz, 20.0);
        assert_eq!(config.replay.retention_bytes, Some(8 << 30));
        assert_eq!(config.learner.finetune.policy_steps, 100);
        assert_eq!(config.learner.window_episodes, 100);
        assert_eq!(config.telemetry.frame_every, 5);
    }
}
