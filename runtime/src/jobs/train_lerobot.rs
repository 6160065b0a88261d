//! `imago train --what bc --init DIR` of a LeRobot policy directory: the policy trained
//! on a replay's episodes through its own loss, every transition at weight 1 (the
//! imitation LeRobot's own training does, on imago's recorded episodes), and written
//! back as a LeRobot directory with `DIR`'s config and processors.

use std::path::Path;

use burn::Dispatch;
use burn::prelude::Backend;
use imago_robots::Robot;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::act::lerobot_driver::LeRobotBinding;
use crate::device::ResolvedDevice;
use crate::jobs::train::BcRunSummary;
use crate::learn::lerobot_update::{WeightedDraws, update_lerobot_policy};
use crate::store::lerobot_policy::{load_lerobot_policy, write_lerobot_policy};
use crate::store::outputs::{OutputKind, OutputPath};
use crate::store::replay::{ReplaySource, read_training_replay, transition_indices};
use crate::telemetry::{Telemetry, TelemetryEvent};
use imago_policies::lora::LoraConfig;

/// How a LeRobot policy is trained by imitation.
#[derive(Debug, Clone, PartialEq)]
pub struct LeRobotImitation {
    /// Optimiser steps.
    pub steps: usize,
    /// Transitions per step.
    pub batch_size: usize,
    /// Adam's constant rate; `None`: the policy's `optimizer_lr`.
    pub learning_rate: Option<f64>,
    /// Seed of batches and noise.
    pub seed: u64,
    /// Train LoRA adapters only (see `update_lerobot_policy`); `None`: every weight.
    pub lora: Option<LoraConfig>,
}

/// Trains the LeRobot policy of `init` on the replay at `replay` by imitation and
/// writes it to `out` as a LeRobot directory. A policy whose features the replay's
/// robot does not give is an error naming both.
pub fn train_lerobot_offline(
    replay: ReplaySource<'_>,
    out: OutputPath<'_>,
    init: &Path,
    imitation: &LeRobotImitation,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<BcRunSummary> {
    replay.ensure_exists()?;
    out.check(OutputKind::LeRobotPolicy, &replay.inputs_with(Some(init)))?;
    let read = read_training_replay(replay)?;
    let robot = read.robot_settings(
        replay.dir,
        "a LeRobot policy reads the robot in its own units",
    )?;
    let episodes = read.contents.episodes;
    Dispatch::seed(&device.training, imitation.seed);
    let policy = load_lerobot_policy::<Dispatch>(init, &device.training)?;
    let binding = LeRobotBinding::new(
        &policy,
        (&read.spec, robot.build()?.lerobot_units()),
        &device.training,
    )
    .map_err(|e| anyhow::anyhow!("{}: {e:#}", init.display()))?;
    let learning_rate = imitation
        .learning_rate
        .unwrap_or_else(|| policy.optimizer_lr());
    let draws = WeightedDraws {
        samples: transition_indices(&episodes),
        weights: None,
        batch_size: imitation.batch_size,
    };
    let transitions = draws.samples.len();
    let (policy, losses) = update_lerobot_policy(
        policy,
        (&binding, &episodes),
        &draws,
        (imitation.steps, learning_rate),
        imitation.lora.as_ref(),
        &mut StdRng::seed_from_u64(imitation.seed),
    )?;
    telemetry.send(TelemetryEvent::LossCurve {
        run: "bc".into(),
        term: "loss".into(),
        values: losses.clone(),
    });
    write_lerobot_policy(&policy.valid(), init, out.path)?;
    Ok(BcRunSummary {
        episodes: episodes.len(),
        transitions,
        unfinished_episodes: read.contents.unfinished_episodes,
        damaged_episodes: read.contents.damaged.len(),
        first_loss: *losses.first().unwrap_or(&f32::NAN),
        last_loss: *losses.last().unwrap_or(&f32::NAN),
        version: 1,
    })
}
