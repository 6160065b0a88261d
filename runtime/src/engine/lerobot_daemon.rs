//! `imago daemon` with a LeRobot policy (ACT, Diffusion Policy): the config's
//! `policy` names a LeRobot `pretrained_model/` directory. The actor runs it through
//! its own queues (`engine::lerobot_ticks`) and records every transition as for any
//! policy; the learner fine-tunes it as `imago train --what finetune --init DIR` does
//! ([`LeRobotLearner`]: world model, critic, each demonstration's own loss weighted)
//! and every new version reaches the actor through the promotion gate as imago's do
//! (the gate tests snapshots of either kind), acting from the next episode on.
//! Checkpoints (the learner's and the champion's) are LeRobot directories that
//! LeRobot's `from_pretrained` loads, carrying imago's signed meta (version, robot, the
//! weights' checksum) beside LeRobot's files, so `--resume` continues them and a
//! damaged one is refused.
//!
//! Not yet: real-time chunking, and a fleet's learner.

use std::path::{Path, PathBuf};

use anyhow::Context;
use burn::prelude::Backend;
use burn::{Dispatch, DispatchDevice};
use imago_robots::RobotSpec;

use crate::act::rollout::RolloutConfig;
use crate::device::ResolvedDevice;
use crate::engine::PolicySnapshot;
use crate::engine::daemon_config::{DaemonConfig, DaemonOptions};
use crate::engine::learner_loop::LoopLearner;
use crate::engine::lerobot_ticks::check_chunking;
use crate::engine::run_start::{OpenedRun, Prepared, initial_world_model, open_window};
use crate::learn::finetune::{
    FinetuneConfig, FinetuneMethod, LeRobotLearner, LearnReport, RoundLearner,
};
use crate::learn::world_model::WorldModelTrainConfig;
use crate::robot::RobotConfig;
use crate::store::checkpoint::{CheckpointMeta, read_lerobot_meta};
use crate::store::lerobot_policy::{load_lerobot_policy, save_lerobot_checkpoint};
use crate::store::replay::{Episode, ReplayWriter};

/// A LeRobot policy's learner as a daemon runs it: the learner, and what its versions
/// need to act and to be checkpointed.
pub(crate) struct LeRobotRun {
    learner: LeRobotLearner,
    /// The LeRobot directory whose config and processors every checkpoint carries
    /// (the run's own checkpoint once the first is written).
    source: PathBuf,
    /// Where versions act.
    inference: DispatchDevice,
}

/// Checks the settings a daemon of a LeRobot policy cannot honour, before anything in
/// the run directory is touched: each is one error naming the key and the way out.
pub(crate) fn check_lerobot_settings(config: &DaemonConfig) -> anyhow::Result<()> {
    anyhow::ensure!(
        !config.learner.publish_fresh_weights,
        "[learner] publish_fresh_weights replaces the policy by freshly initialised imago weights, which a LeRobot policy cannot take; remove it"
    );
    anyhow::ensure!(
        !(config.learner.enabled
            && config.learner.finetune.method == FinetuneMethod::AdvantageFlow),
        "[learner.finetune] method = \"advantage-flow\" fine-tunes a flow head, which a LeRobot policy does not have; use awr-returns, awr-imagination, habc or dagger"
    );
    anyhow::ensure!(
        !(config.learner.enabled && config.learner.finetune.method == FinetuneMethod::PpoReturns),
        "[learner.finetune] method = \"ppo-returns\" weighs the density of a Gaussian head's sampled chunks, which a LeRobot policy does not record; use awr-returns, awr-imagination, habc or dagger"
    );
    check_chunking(&config.actor.chunking)
}

/// Loads the LeRobot policy the opened `run` starts from (the config's `policy`, or
/// the run's checkpoint with `--resume`) onto the training device, checks the settings
/// ([`check_lerobot_settings`]) and its features against the robot, and writes a first
/// checkpoint.
pub(crate) fn prepare_lerobot(
    run: OpenedRun,
    config: &DaemonConfig,
    options: &DaemonOptions,
    device: &ResolvedDevice,
) -> anyhow::Result<Prepared<LeRobotRun>> {
    check_lerobot_settings(config)?;
    let dir = run
        .start_from
        .clone()
        .ok_or_else(|| anyhow::anyhow!("no LeRobot policy to start from"))?;
    let spec = config.spec();
    let units = config.actor.robot.lerobot_units();
    Dispatch::seed(&device.training, config.learner.finetune.seed);
    let cannot = || format!("cannot start from {}", dir.display());
    let policy = load_lerobot_policy::<Dispatch>(&dir, &device.training).with_context(cannot)?;
    let binding = LeRobotLearner::binding(
        &policy,
        (&spec, units.clone()),
        &config.learner.finetune,
        device,
    )
    .with_context(cannot)?;
    let version = if options.resume {
        checkpoint_version(&dir, &spec)?
    } else {
        1
    };
    let (window, version) = open_window(&run.replay, config, options, version)?;
    let learner = LeRobotLearner::new(
        (policy, binding),
        (spec.clone(), units),
        version,
        initial_world_model(config, device)?,
        WorldModelTrainConfig::default(),
        &config.learner.finetune,
        device,
    )
    .with_telemetry(options.telemetry.clone());
    let mut lerobot = LeRobotRun {
        learner,
        source: dir,
        inference: device.inference.clone(),
    };
    lerobot.save(&spec, &run.checkpoint)?;
    lerobot.source = run.checkpoint.clone();
    Ok(Prepared {
        learner: lerobot,
        replay: run.replay,
        window,
        checkpoint: run.checkpoint,
        lock: run.lock,
    })
}

/// The version of the LeRobot checkpoint `dir` a run resumes, checked whole and
/// written for a robot of `spec`.
fn checkpoint_version(dir: &Path, spec: &RobotSpec) -> anyhow::Result<u64> {
    let meta = read_lerobot_meta(dir).with_context(|| format!("--resume: {}", dir.display()))?;
    if let Some(trained) = &meta.spec {
        anyhow::ensure!(
            trained == spec,
            "--resume: the checkpoint {} was written for {}, not for {} (the config's robot)",
            dir.display(),
            trained.summary(),
            spec.summary()
        );
    }
    Ok(meta.version)
}

impl RoundLearner for LeRobotRun {
    fn version(&self) -> u64 {
        self.learner.version()
    }

    fn collect(
        &self,
        robot: &RobotConfig,
        seeds: &[u64],
        rollout: &RolloutConfig,
        writer: &mut ReplayWriter,
        device: &ResolvedDevice,
    ) -> anyhow::Result<Vec<Episode>> {
        self.learner.collect(robot, seeds, rollout, writer, device)
    }

    fn learn(
        &mut self,
        episodes: &[Episode],
        config: &FinetuneConfig,
        device: &ResolvedDevice,
    ) -> anyhow::Result<LearnReport> {
        self.learner.learn(episodes, config, device)
    }
}

impl LoopLearner for LeRobotRun {
    fn snapshot(&self) -> anyhow::Result<PolicySnapshot> {
        let driver = self.learner.driver(&self.inference)?;
        Ok(PolicySnapshot::lerobot(self.learner.version(), driver))
    }

    fn save(&self, spec: &RobotSpec, dir: &Path) -> anyhow::Result<()> {
        save_lerobot_checkpoint(
            &self.learner.policy(),
            &self.source,
            dir,
            CheckpointMeta::new(spec, self.learner.version(), None),
        )
    }

    fn replace_with_fresh_weights(&mut self, _device: &ResolvedDevice) -> anyhow::Result<()> {
        anyhow::bail!(
            "publish_fresh_weights replaces the policy by fresh imago weights; a LeRobot policy cannot take them"
        )
    }
}
