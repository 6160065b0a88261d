//! `imago train --what finetune`: advantage-weighted fine-tuning of a policy
//! checkpoint from a replay directory that the collected episodes are appended to,
//! with a given world-model checkpoint or one trained on the replay first.

use std::path::Path;

use burn::Dispatch;
use burn::prelude::Backend;
use imago_robots::Robot;
use imago_robots::reacher2d::{NAME, Reacher2d, Reacher2dConfig};
use imago_worldmodel::TransitionFamily;
use serde::{Deserialize, Serialize};

use super::config::FinetuneConfig;
use super::run::{FinetuneStart, RoundReport, finetune};
use crate::checkpoint::{CheckpointMeta, POLICY_KIND, load_policy, load_world_model, save_policy};
use crate::device::ResolvedDevice;
use crate::outputs::{Input, OutputKind, OutputPath};
use crate::replay::{ReplayWriter, ReplayWriterConfig};
use crate::telemetry::{Telemetry, log_world_model_losses};
use crate::train::{ReplaySource, read_training_replay};
use crate::world_model::{
    WindowDataset, WorldModelTrainConfig, reacher2d_world_model, train_world_model,
};

/// What an offline fine-tuning run did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinetuneRunSummary {
    /// Episodes in the replay before the run.
    pub episodes_before: usize,
    /// Every round.
    pub rounds: Vec<RoundReport>,
    /// Version of the written checkpoint.
    pub version: u64,
}

/// Fine-tunes the policy checkpoint `init` on the replay at `replay` (collected episodes
/// are appended to it) and writes the policy to `out`. Imagination runs in the world
/// model checkpoint `world_model`; without one, a SALT world model is first trained on
/// the replay for `config.initial_world_model_steps` steps. Training curves, sampled
/// rollouts and learning steps go to `telemetry`.
pub fn finetune_offline(
    replay: ReplaySource<'_>,
    init: &Path,
    world_model: Option<&Path>,
    out: OutputPath<'_>,
    config: &FinetuneConfig,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<FinetuneRunSummary> {
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("fine-tuning settings: {e}"))?;
    replay.ensure_exists()?;
    let mut inputs = replay.inputs_with(Some(init));
    inputs.extend(world_model.map(|path| Input {
        flag: "--world-model",
        path,
    }));
    out.check(OutputKind::Checkpoint(POLICY_KIND), &inputs)?;
    let robot_config = Reacher2dConfig::default();
    let spec = Reacher2d::new(robot_config.clone()).spec().clone();
    let episodes = read_training_replay(replay, Some(&spec))?.episodes;
    let episodes_before = episodes.len();
    Dispatch::seed(&device.training, config.seed);
    let (policy, policy_config, meta) = load_policy::<Dispatch>(init, None, &device.training)?;
    let (model, wm_config) = match world_model {
        Some(dir) => {
            let (model, config, _) = load_world_model::<Dispatch>(dir, None, &device.training)?;
            (model.freeze_target(), config)
        }
        None => {
            let wm_config = reacher2d_world_model(TransitionFamily::Salt);
            let defaults = WorldModelTrainConfig::default();
            let steps = config.initial_world_model_steps;
            let train = WorldModelTrainConfig {
                steps,
                warmup_steps: defaults.warmup_steps.min(steps / 2),
                seed: config.seed,
                ..defaults
            };
            eprintln!(
                "no --world-model given: training a salt world model on the replay first ({steps} steps)"
            );
            let data = WindowDataset::new(
                &episodes,
                train.horizon,
                &wm_config.action_limit,
                train.discount,
            );
            let (model, history) = train_world_model::<Dispatch>(
                wm_config.init(&device.training),
                &wm_config,
                &data,
                &train,
                &device.training,
            )?;
            log_world_model_losses(telemetry, &history);
            (model, wm_config)
        }
    };
    let (mut writer, repaired) = ReplayWriter::open(
        replay.dir,
        ReplayWriterConfig::default(),
        &spec,
        "imago train --what finetune",
    )?;
    repaired.warn();
    let outcome = finetune(
        FinetuneStart {
            policy: (policy, &policy_config),
            version: meta.version,
            world_model: (model, &wm_config),
            world_model_training: WorldModelTrainConfig::default(),
            episodes,
        },
        config,
        &robot_config,
        &mut writer,
        device,
        telemetry,
    )?;
    writer.close()?;
    let mut meta = CheckpointMeta::new(NAME, outcome.version, Some(init.display().to_string()));
    if let Some(last) = outcome.rounds.last() {
        meta.metrics
            .insert("rollout_success_rate".into(), last.rollout_success_rate);
    }
    save_policy(&outcome.policy, &policy_config, meta, out.path)?;
    Ok(FinetuneRunSummary {
        episodes_before,
        rounds: outcome.rounds,
        version: outcome.version,
    })
}
