//! `imago train --what finetune`: advantage-weighted fine-tuning of a policy
//! checkpoint, or of a LeRobot policy directory, from a replay directory that the
//! collected episodes are appended to, with a given world-model checkpoint or one
//! trained on the replay first. A LeRobot policy comes back as a LeRobot directory.

use std::path::Path;

use burn::Dispatch;
use burn::prelude::Backend;
use imago_robots::Robot;
use imago_worldmodel::{TransitionFamily, WorldModelConfig};
use serde::{Deserialize, Serialize};

use crate::act::lerobot_driver::LeRobotBinding;
use crate::device::ResolvedDevice;
use crate::learn::finetune::{
    FinetuneConfig, FinetuneStart, LeRobotLearner, RoundLearner, RoundReport, check_ppo_head,
    finetune, run_rounds,
};
use crate::learn::world_model::{
    WindowDataset, WorldModelTrainConfig, log_world_model_losses, train_world_model,
};
use crate::store::checkpoint::{
    CheckpointMeta, ensure_trained_for, load_policy, load_world_model, save_policy,
};
use crate::store::lerobot_policy::{
    LeRobotPolicy, load_lerobot_policy, names_lerobot_policy, write_lerobot_policy,
};
use crate::store::outputs::{Input, OutputKind, OutputPath};
use crate::store::replay::{ReplaySource, ReplayWriter, ReplayWriterConfig, read_training_replay};
use crate::telemetry::Telemetry;

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
/// are appended to it) and writes the policy to `out`: an imago checkpoint, or for a
/// LeRobot policy directory `init`, a LeRobot directory with `init`'s config and
/// processors. Imagination runs in the world
/// model checkpoint `world_model`; without one, a SALT world model is first trained on
/// the replay for `config.initial_world_model_steps` steps. Training curves, sampled
/// rollouts and learning steps go to `telemetry`. Episodes are collected on the robot
/// the replay records (its spec and settings); checkpoints of another spec are an
/// error naming both.
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
    // A LeRobot directory, or the training checkpoint above one (refused by the loader
    // with a pointer to it).
    let lerobot = names_lerobot_policy(init);
    let kind = if lerobot {
        OutputKind::LeRobotPolicy
    } else {
        OutputKind::PolicyCheckpoint
    };
    out.check(kind, &inputs)?;
    let read = read_training_replay(replay)?;
    let spec = read.spec.clone();
    let robot_config = read.robot_settings(
        replay.dir,
        "fine-tuning collects new episodes on that robot",
    )?;
    let episodes = read.contents.episodes;
    let episodes_before = episodes.len();
    Dispatch::seed(&device.training, config.seed);
    let policy = if lerobot {
        let policy = load_lerobot_policy::<Dispatch>(init, &device.training)?;
        let units = robot_config.build()?.lerobot_units();
        // Checked before a world model is trained for it.
        let binding = LeRobotLearner::binding(&policy, (&spec, units.clone()), config, device)
            .map_err(|e| anyhow::anyhow!("{}: {e:#}", init.display()))?;
        StartingPolicy::LeRobot(policy, binding, units)
    } else {
        anyhow::ensure!(
            config.lora.is_none(),
            "lora: LoRA adapts a LeRobot policy's transformer or U-Net; {} is an imago checkpoint, whose policy trains whole (leave [lora] out)",
            init.display()
        );
        ensure_trained_for(init, &spec)?;
        let (policy, policy_config, meta) = load_policy::<Dispatch>(init, None, &device.training)?;
        // Checked here as well as where rollouts start, so that a setting the policy
        // cannot follow fails before the world model trains.
        config.rollout.check_fits(&policy_config)?;
        check_ppo_head(config, &policy).map_err(|e| anyhow::anyhow!("{}: {e}", init.display()))?;
        StartingPolicy::Imago(policy, policy_config, meta.version)
    };
    let (model, wm_config) = match world_model {
        Some(dir) => {
            ensure_trained_for(dir, &spec)?;
            let (model, config, _) = load_world_model::<Dispatch>(dir, None, &device.training)?;
            (model.freeze_target(), config)
        }
        None => {
            let wm_config = WorldModelConfig::for_robot(&spec, TransitionFamily::Salt)?;
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
        &robot_config,
        "imago train --what finetune",
    )?;
    repaired.warn();
    writer.ensure_episode_ids_for((config.rounds * config.episodes_per_round) as u64)?;
    let (rounds, version) = match policy {
        StartingPolicy::Imago(policy, policy_config, version) => {
            let outcome = finetune(
                FinetuneStart {
                    policy: (policy, &policy_config),
                    version,
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
            let mut meta =
                CheckpointMeta::new(&spec, outcome.version, Some(init.display().to_string()));
            if let Some(last) = outcome.rounds.last() {
                meta.metrics
                    .insert("rollout_success_rate".into(), last.rollout_success_rate);
            }
            save_policy(&outcome.policy, &policy_config, meta, out.path)?;
            (outcome.rounds, outcome.version)
        }
        StartingPolicy::LeRobot(policy, binding, units) => {
            let mut learner = LeRobotLearner::new(
                (policy, binding),
                (spec.clone(), units),
                0,
                (model, wm_config),
                WorldModelTrainConfig::default(),
                config,
                device,
            )
            .with_telemetry(telemetry.clone());
            let rounds = run_rounds(
                &mut learner,
                episodes,
                config,
                (&robot_config, &mut writer),
                device,
                telemetry,
            )?;
            writer.close()?;
            write_lerobot_policy(&learner.policy(), init, out.path)?;
            (rounds, learner.version())
        }
    };
    Ok(FinetuneRunSummary {
        episodes_before,
        rounds,
        version,
    })
}

/// The policy a run starts from (made once, held while the run lasts).
#[allow(clippy::large_enum_variant)]
enum StartingPolicy {
    /// An imago checkpoint's policy, its config and version.
    Imago(
        imago_policies::Policy<Dispatch>,
        imago_policies::PolicyConfig,
        u64,
    ),
    /// A LeRobot policy, its features bound to the robot, and the robot's units.
    LeRobot(
        LeRobotPolicy<Dispatch>,
        LeRobotBinding<Dispatch>,
        imago_robots::LeRobotUnits,
    ),
}
