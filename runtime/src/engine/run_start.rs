//! How a daemon's run starts: its run directory opened (locked, resumed or moved
//! aside, an interrupted checkpoint save cleaned up), and imago's models loaded or
//! initialised with a first checkpoint written. What `imago daemon`, a fleet's
//! learner and a daemon of a LeRobot policy (`engine::lerobot_daemon`) share.

use std::path::{Path, PathBuf};

use anyhow::Context;
use burn::Dispatch;
use burn::prelude::Backend;
use imago_policies::{Architecture, PolicyConfig};
use imago_worldmodel::{TransitionFamily, WorldModel, WorldModelConfig};

use crate::device::ResolvedDevice;
use crate::engine::ReplayWindow;
use crate::engine::daemon_config::{DaemonConfig, DaemonOptions};
use crate::engine::learner_loop::LoopLearner;
use crate::learn::finetune::{FinetuneMethod, Learner, check_ppo_head};
use crate::learn::world_model::WorldModelTrainConfig;
use crate::store::checkpoint::{
    ensure_trained_for, load_policy_to_continue, load_world_model, read_lerobot_meta, read_meta,
    recover_checkpoint, stored_architecture,
};
use crate::store::lerobot_policy::names_lerobot_policy;
use crate::store::lock::DirLock;
use crate::store::outputs::{
    Holding, Input, OutputKind, check_output, holding, mark_run_directory,
};

/// Where the daemon's policy checkpoint (the learner's newest weights) lives in
/// `run_dir`.
pub fn policy_checkpoint(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints").join("policy")
}

/// Where the champion (the policy that acts) is kept next to the learner's `checkpoint`.
pub fn champion_checkpoint(checkpoint: &Path) -> PathBuf {
    checkpoint.with_file_name("champion")
}

/// What the daemon starts from: the learner (policy, world model, critic: imago's
/// [`Learner`], or a LeRobot policy's), where it records, the learner's window on that
/// replay, and the run directory's lock (held until the daemon ends).
pub(crate) struct Prepared<L = Learner> {
    pub(crate) learner: L,
    pub(crate) replay: PathBuf,
    pub(crate) window: ReplayWindow,
    pub(crate) checkpoint: PathBuf,
    pub(crate) lock: DirLock,
}

/// A run directory opened for a run: locked, in the state `--resume` or `--fresh`
/// asks for, an interrupted checkpoint save cleaned up.
pub(crate) struct OpenedRun {
    /// The learner's checkpoint (the policy's newest weights).
    pub(crate) checkpoint: PathBuf,
    /// The replay the actor records to.
    pub(crate) replay: PathBuf,
    /// The policy the run starts from: the checkpoint with `--resume`, else the
    /// config's `policy`, if any.
    pub(crate) start_from: Option<PathBuf>,
    pub(crate) lock: DirLock,
}

impl OpenedRun {
    /// Whether the run's policy is a LeRobot policy directory.
    pub(crate) fn is_lerobot(&self) -> bool {
        self.start_from.as_deref().is_some_and(names_lerobot_policy)
    }
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
                    .or_else(|_| read_lerobot_meta(&policy_checkpoint(run_dir)))
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

/// Opens the run directory of `config` and `options` (see [`open_run_dir`]): a new run
/// must not bury the models it starts from (`--fresh` would move them aside with the
/// old run).
pub(crate) fn open_run(
    config: &DaemonConfig,
    options: &DaemonOptions,
) -> anyhow::Result<OpenedRun> {
    let run_dir = run_dir_of(config, options).to_path_buf();
    anyhow::ensure!(
        !(options.resume && options.fresh),
        "--resume and --fresh exclude each other"
    );
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
    for note in recover_checkpoint(&checkpoint)? {
        eprintln!("{note}");
    }
    Ok(OpenedRun {
        replay: run_dir.join("replay"),
        start_from: start_from(config, options),
        checkpoint,
        lock,
    })
}

/// The run directory: `--run-dir`, else the config's.
fn run_dir_of<'a>(config: &'a DaemonConfig, options: &'a DaemonOptions) -> &'a Path {
    options.run_dir.as_deref().unwrap_or(&config.run_dir)
}

/// The policy a run starts from: its checkpoint with `--resume`, else the config's
/// `policy`, if any.
fn start_from(config: &DaemonConfig, options: &DaemonOptions) -> Option<PathBuf> {
    if options.resume {
        Some(policy_checkpoint(run_dir_of(config, options)))
    } else {
        config.policy.clone()
    }
}

/// Whether the run of `config` and `options` starts from a LeRobot policy directory,
/// as far as can be told before its run directory is opened (a checkpoint an
/// interrupted save left missing is found once it is: [`OpenedRun::is_lerobot`]).
pub(crate) fn starts_from_lerobot(config: &DaemonConfig, options: &DaemonOptions) -> bool {
    start_from(config, options).is_some_and(|dir| names_lerobot_policy(&dir))
}

/// Checks the settings only a LeRobot policy's run takes, for a run of imago's own
/// policy: each is one error naming the key.
pub(crate) fn check_imago_settings(config: &DaemonConfig) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.learner.finetune.lora.is_none(),
        "[learner.finetune.lora]: LoRA adapts a LeRobot policy's transformer or U-Net; imago's own policies train whole (leave it out, or start from a LeRobot policy)"
    );
    let finetune = &config.learner.finetune;
    anyhow::ensure!(
        finetune.method != FinetuneMethod::PpoReturns
            || finetune.rollout.exploration == config.actor.exploration,
        "[learner.finetune] method = \"ppo-returns\" weighs the chunks the actor samples at [actor] exploration = {}, with their spread read from [learner.finetune.rollout] exploration = {}: set both alike",
        config.actor.exploration,
        finetune.rollout.exploration
    );
    Ok(())
}

/// Opens the run directory and loads or initialises imago's models (see
/// [`prepare_opened`]): what a fleet's learner starts from.
pub(crate) fn prepare(
    config: &DaemonConfig,
    options: &DaemonOptions,
    device: &ResolvedDevice,
) -> anyhow::Result<Prepared> {
    prepare_opened(open_run(config, options)?, config, options, device)
}

/// Loads or initialises imago's models in the opened `run` (from the run's checkpoint
/// with `--resume`) and writes a first checkpoint, so that a crash at any time leaves
/// one to resume.
pub(crate) fn prepare_opened(
    run: OpenedRun,
    config: &DaemonConfig,
    options: &DaemonOptions,
    device: &ResolvedDevice,
) -> anyhow::Result<Prepared> {
    anyhow::ensure!(
        !run.is_lerobot(),
        "{} is a LeRobot policy, which runs in `imago daemon` on one robot; a fleet's learner trains imago's policies",
        run.start_from.as_deref().unwrap_or(Path::new("")).display()
    );
    check_imago_settings(config)?;
    let spec = config.spec();
    // A new policy is a VLA; one continued keeps its checkpoint's architecture.
    let expected = |architecture: Architecture| {
        PolicyConfig::for_robot(architecture, &spec)
            .map_err(|e| anyhow::anyhow!("the policy for {}: {e}", spec.summary()))
    };
    Dispatch::seed(&device.training, config.learner.finetune.seed);
    let (policy, policy_config, version) = match &run.start_from {
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
    check_ppo_head(&config.learner.finetune, &policy)?;
    let (window, version) = open_window(&run.replay, config, options, version)?;
    let learner = Learner::new(
        (policy, policy_config),
        version,
        initial_world_model(config, device)?,
        WorldModelTrainConfig::default(),
        &config.learner.finetune,
        spec.max_steps,
        device,
    )
    .with_telemetry(options.telemetry.clone());
    learner.save(&spec, &run.checkpoint)?;
    Ok(Prepared {
        learner,
        replay: run.replay,
        window,
        checkpoint: run.checkpoint,
        lock: run.lock,
    })
}

/// The learner's window on `replay` and the version its policy continues as. With
/// `--resume`, the window catches up on the replay once (reading it segment by
/// segment, keeping only the newest episodes), and versions the learner published
/// after the last checkpoint (recorded, their weights lost in a crash) are skipped:
/// the checkpoint's weights continue under a new number, so that no version names two
/// sets of weights.
pub(crate) fn open_window(
    replay: &Path,
    config: &DaemonConfig,
    options: &DaemonOptions,
    mut version: u64,
) -> anyhow::Result<(ReplayWindow, u64)> {
    let mut window = ReplayWindow::new(replay, config.learner.window_episodes);
    if options.resume {
        window.refresh()?;
        let recorded = window.max_policy_version();
        if recorded > version {
            eprintln!(
                "--resume: the replay holds policy versions up to {recorded}, newer than the checkpoint's {version} (lost in a crash); its weights continue as version {}",
                recorded + 1
            );
            version = recorded.saturating_add(1);
        }
    }
    Ok((window, version))
}

/// The world model the learner starts from: the config's `world_model` checkpoint
/// (trained for the robot), or a fresh SALT world model.
pub(crate) fn initial_world_model(
    config: &DaemonConfig,
    device: &ResolvedDevice,
) -> anyhow::Result<(WorldModel<Dispatch>, WorldModelConfig)> {
    let spec = config.spec();
    Ok(match &config.world_model {
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ppo-returns` reads the spread of the actor's samples from the learner's
    /// rollout settings: the two differing is one error naming both keys.
    #[test]
    fn ppo_in_the_daemon_needs_the_actors_exploration() {
        let config = |actor: f32, learner: f32| {
            DaemonConfig::parse(&format!(
                "robot = \"reacher2d\"\n[actor]\nexploration = {actor}\n\
                 [learner.finetune]\nmethod = \"ppo-returns\"\n\
                 [learner.finetune.rollout]\nexploration = {learner}\n"
            ))
            .unwrap()
        };
        assert!(check_imago_settings(&config(0.5, 0.5)).is_ok());
        let error = check_imago_settings(&config(0.5, 1.0))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("[actor] exploration = 0.5")
                && error.contains("[learner.finetune.rollout] exploration = 1"),
            "{error}"
        );
    }
}
