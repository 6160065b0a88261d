//! `imago train --what worldmodel` and `imago wm-eval`: the world model from and on a
//! replay directory.

use std::path::Path;

use burn::Dispatch;
use burn::module::AutodiffModule;
use burn::prelude::Backend;
use imago_worldmodel::{TransitionFamily, WorldModel, WorldModelConfig};
use serde::{Deserialize, Serialize};

use crate::device::ResolvedDevice;
use crate::learn::world_model::{
    PhysicalQuantities, WindowDataset, WorldModelEvalReport, WorldModelStep, WorldModelTrainConfig,
    evaluate_world_model, log_imagined_windows, log_world_model_losses, mean_loss, split_episodes,
    train_world_model,
};
use crate::robot::RobotConfig;
use crate::store::checkpoint::{
    CheckpointMeta, WORLD_MODEL_KIND, ensure_trained_for, load_world_model, save_world_model,
};
use crate::store::outputs::{OutputKind, OutputPath};
use crate::store::replay::{Episode, ReplaySource, read_training_replay};
use crate::telemetry::{Telemetry, TelemetryEvent};

/// What an offline world-model run did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorldModelRunSummary {
    /// Episodes trained on (held-out episodes excluded).
    pub episodes: usize,
    /// Episodes held out for evaluation.
    pub held_out: usize,
    /// Training windows.
    pub windows: usize,
    /// Prediction loss over the first 50 steps, averaged.
    pub first_prediction_loss: f32,
    /// Prediction loss over the last 50 steps, averaged.
    pub last_prediction_loss: f32,
    /// Version of the written checkpoint.
    pub version: u64,
}

/// Trains a world model of `family` on the training episodes of `replay` (held-out
/// episodes are left out; see [`crate::learn::world_model::is_held_out`]) and writes it to `out`. With
/// `init`, training continues from that checkpoint, whose config must match. Every
/// loss term's curve goes to `telemetry`.
pub fn train_world_model_offline(
    replay: ReplaySource<'_>,
    out: OutputPath<'_>,
    init: Option<&Path>,
    family: TransitionFamily,
    train: &WorldModelTrainConfig,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<WorldModelRunSummary> {
    replay.ensure_exists()?;
    out.check(
        OutputKind::Checkpoint(WORLD_MODEL_KIND),
        &replay.inputs_with(init),
    )?;
    let read = read_training_replay(replay)?;
    let spec = read.spec;
    let (training, held_out) = split_episodes(&read.contents.episodes);
    let expected = WorldModelConfig::for_robot(&spec, family)
        .and_then(|base| train.new_model(base))
        .map_err(|e| anyhow::anyhow!("the world model for {}: {e}", spec.summary()))?;
    Dispatch::seed(&device.training, train.seed);
    let (model, config, version, parent) = match init {
        Some(dir) => {
            ensure_trained_for(dir, &spec)?;
            let (model, config, meta) =
                load_world_model::<Dispatch>(dir, Some(&expected), &device.training)?;
            let parent = Some(dir.display().to_string());
            (
                model.freeze_target(),
                config,
                meta.version.saturating_add(1),
                parent,
            )
        }
        None => (expected.init(&device.training), expected, 1, None),
    };
    let trained = train_and_save_world_model(
        model,
        &config,
        &training,
        train,
        CheckpointMeta::new(&spec, version, parent),
        out.path,
        device,
    )?;
    let history = &trained.history;
    log_world_model_losses(telemetry, history);
    let stretch = history.len().min(50);
    let first = mean_loss(&history[..stretch], "prediction");
    let last = mean_loss(&history[history.len() - stretch..], "prediction");
    Ok(WorldModelRunSummary {
        episodes: training.len(),
        held_out: held_out.len(),
        windows: trained.windows,
        first_prediction_loss: first,
        last_prediction_loss: last,
        version,
    })
}

/// A world model trained and saved by [`train_and_save_world_model`].
pub struct TrainedWorldModel {
    /// The model, ready for inference.
    pub model: WorldModel<Dispatch>,
    /// The same model on the training device, to train further.
    pub training: WorldModel<Dispatch>,
    /// Windows it was trained on.
    pub windows: usize,
    /// Every training step.
    pub history: Vec<WorldModelStep>,
}

/// Trains `model` on the windows of `episodes` and writes it to `out` with `meta`, to
/// which the prediction loss of the last 50 steps and the training horizon are added.
pub fn train_and_save_world_model(
    model: WorldModel<Dispatch>,
    config: &WorldModelConfig,
    episodes: &[Episode],
    train: &WorldModelTrainConfig,
    mut meta: CheckpointMeta,
    out: &Path,
    device: &ResolvedDevice,
) -> anyhow::Result<TrainedWorldModel> {
    let data = WindowDataset::new(
        episodes,
        train.horizon,
        &config.action_limit,
        train.discount,
    );
    let (model, history) =
        train_world_model::<Dispatch>(model, config, &data, train, &device.training)?;
    let last = &history[history.len().saturating_sub(50)..];
    meta.metrics.insert(
        "prediction_loss".into(),
        mean_loss(last, "prediction") as f64,
    );
    meta.metrics
        .insert("train_horizon".into(), train.horizon as f64);
    let training = model;
    let model = training.valid();
    save_world_model(&model, config, meta, out)?;
    Ok(TrainedWorldModel {
        model,
        training,
        windows: data.len(),
        history,
    })
}

/// Evaluates the world model at `ckpt` on `replay`: on its held-out episodes, or on
/// every episode with `all_episodes` (for a replay recorded apart from training). A
/// model trained for a robot of another spec than the replay's is an error naming
/// both. The per-horizon figures and imagined rollouts of the first evaluated
/// episodes, beside what really followed, go to `telemetry`.
pub fn evaluate_world_model_checkpoint(
    ckpt: &Path,
    replay: ReplaySource<'_>,
    horizon: usize,
    all_episodes: bool,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<WorldModelEvalReport> {
    let read = read_training_replay(replay)?;
    ensure_trained_for(ckpt, &read.spec)?;
    evaluate_world_model_checkpoint_on(
        ckpt,
        &read.contents.episodes,
        read.robot.as_ref(),
        horizon,
        all_episodes,
        device,
        telemetry,
    )
}

/// [`evaluate_world_model_checkpoint`] on episodes already read (of a spec the caller
/// has checked), recorded on `robot` when its settings are known.
pub fn evaluate_world_model_checkpoint_on(
    ckpt: &Path,
    all: &[Episode],
    robot: Option<&RobotConfig>,
    horizon: usize,
    all_episodes: bool,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<WorldModelEvalReport> {
    let (model, config, _) = load_world_model::<Dispatch>(ckpt, None, &device.inference)?;
    let held_out;
    let episodes = if all_episodes {
        all
    } else {
        held_out = split_episodes(all).1;
        &held_out
    };
    let report = evaluate_world_model(
        &model,
        &config,
        episodes,
        horizon,
        &PhysicalQuantities::of_robot(robot, config.proprio_dim),
        &device.inference,
    )?;
    telemetry.send(TelemetryEvent::WorldModelEvaluation {
        horizon_error: report.horizon_error.clone(),
        copy_last_error: report.copy_last_error.clone(),
        coverage_2sigma: report.coverage_2sigma.calibrated.clone(),
    });
    log_imagined_windows(
        telemetry,
        &model,
        &config,
        (episodes, all),
        &report.wide_interval_scale(),
        robot,
        &device.inference,
    )?;
    Ok(report)
}
