//! `imago daemon`: the robot-side process. The actor runs the control loop and the
//! replay writer records every transition (see [`crate::engine`]); on the calling
//! thread the learner fine-tunes the policy on the replay
//! ([`crate::engine::learner_loop`]) and hands each new version to the actor through
//! the promotion gate ([`crate::engine::actor_feed`]); checkpoints are written on a
//! schedule and at shutdown. The fleet's learner (`engine::fleet::learner`) starts as
//! this one does ([`prepare`]) and learns the same way.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use burn::Dispatch;

pub use super::daemon_config::{DaemonConfig, DaemonOptions, DaemonReport};
pub use super::run_start::{champion_checkpoint, policy_checkpoint};

use crate::act::lerobot_driver::LeRobotDriver;
use crate::device::ResolvedDevice;
use crate::engine::actor_feed::{ActorFeed, ChampionCheckpoint};
use crate::engine::champion::{ChampionGate, PromotionMode, PromotionSummary};
use crate::engine::learner_loop::{Checkpointing, LearnerLoop, LoopLearner, enough_fresh};
use crate::engine::lerobot_daemon::{check_lerobot_settings, prepare_lerobot};
use crate::engine::run_start::{
    Prepared, check_imago_settings, open_run, prepare, prepare_opened, starts_from_lerobot,
};
use crate::engine::{
    ActorStart, ControlReport, PolicySnapshot, Recording, SnapshotMailbox, SnapshotPolicy,
    run_control_loop,
};
use crate::store::checkpoint::{load_policy, read_lerobot_meta};
use crate::store::lerobot_policy::load_lerobot_policy;

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
/// promotion gate ([`ActorFeed`]). A LeRobot policy (the config's `policy`, or the
/// run's checkpoint with `--resume`) runs through `engine::lerobot_daemon`.
pub fn run_daemon(
    config: &DaemonConfig,
    options: &DaemonOptions,
    device: &ResolvedDevice,
    stop: &AtomicBool,
) -> anyhow::Result<DaemonReport> {
    if starts_from_lerobot(config, options) {
        check_lerobot_settings(config)?;
    } else {
        check_imago_settings(config)?;
    }
    let run = open_run(config, options)?;
    if run.is_lerobot() {
        let prepared = prepare_lerobot(run, config, options, device)?;
        return drive((config, options, device), stop, prepared);
    }
    let prepared = prepare_opened(run, config, options, device)?;
    drive((config, options, device), stop, prepared)
}

/// Runs the actor's control loop with the promotion gate's champion (or, without a
/// gate, the learner's first version), and on this thread the learner of `prepared`
/// handing each new version to the actor through the gate ([`ActorFeed`]), until the
/// run ends; the learner's weights and the champion are checkpointed whatever stopped
/// it.
fn drive<L: LoopLearner>(
    (config, options, device): (&DaemonConfig, &DaemonOptions, &ResolvedDevice),
    stop: &AtomicBool,
    prepared: Prepared<L>,
) -> anyhow::Result<DaemonReport> {
    let mailbox = actor_mailbox(config);
    let champion = ChampionCheckpoint {
        dir: champion_checkpoint(&prepared.checkpoint),
        spec: config.spec(),
        learner_checkpoint: prepared.checkpoint.clone(),
    };
    let gate = start_gate(config, options, &prepared.learner, &champion, device)?;
    let mut feed = ActorFeed::new(gate, &mailbox, champion, device);
    let Prepared {
        learner,
        replay,
        window,
        checkpoint,
        lock: _lock,
    } = prepared;
    let initial = feed.initial(&learner)?;
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
pub(crate) fn start_gate<L: LoopLearner>(
    config: &DaemonConfig,
    options: &DaemonOptions,
    learner: &L,
    champion: &ChampionCheckpoint,
    device: &ResolvedDevice,
) -> anyhow::Result<Option<ChampionGate>> {
    let champion_dir = &champion.dir;
    if !(config.promotion.enabled && config.learner.enabled) {
        return Ok(None);
    }
    let learners = Arc::new(learner.snapshot()?);
    let acting = if options.resume && champion_dir.exists() {
        resumed_champion(champion_dir, &learners, config, device)
            .with_context(|| format!("cannot resume the champion in {}", champion_dir.display()))?
    } else {
        learners
    };
    let gate = ChampionGate::new(&config.promotion, &config.actor, acting)
        .with_telemetry(options.telemetry.clone());
    champion.save(&gate)?;
    Ok(Some(gate))
}

/// The champion checkpointed in `dir`, of the kind of the learner's version
/// `learners` (an imago policy of its config, or a LeRobot policy bound to the robot),
/// on the inference device.
fn resumed_champion(
    dir: &Path,
    learners: &PolicySnapshot,
    config: &DaemonConfig,
    device: &ResolvedDevice,
) -> anyhow::Result<Arc<PolicySnapshot>> {
    let snapshot = match &learners.policy {
        SnapshotPolicy::Imago {
            config: policy_config,
            ..
        } => {
            let (policy, _, meta) =
                load_policy::<Dispatch>(dir, Some(policy_config), &device.inference)?;
            PolicySnapshot::new(meta.version, policy, policy_config)
        }
        SnapshotPolicy::LeRobot(_) => {
            let version = read_lerobot_meta(dir)?.version;
            let policy = load_lerobot_policy::<Dispatch>(dir, &device.inference)?;
            let robot = (&config.spec(), config.actor.robot.lerobot_units());
            PolicySnapshot::lerobot(
                version,
                LeRobotDriver::new(policy, robot, &device.inference)?,
            )
        }
    };
    Ok(Arc::new(snapshot))
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
        lock: _lock,
    } = prepare(config, options, device)?;
    let started = Instant::now();
    let mut control: Option<ControlReport> = None;
    for _ in 0..steps {
        let stop = AtomicBool::new(false);
        let mut ready = false;
        let turn = run_control_loop(
            ActorStart {
                config: &config.actor,
                initial: Arc::new(learner.snapshot()?),
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
                        Ok(_) => {
                            ready = enough_fresh(&mut window, learner.version(), &config.learner)
                        }
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
    learner.save(&config.spec(), &checkpoint)?;
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
