//! `imago train --what bc --init DIR` of a LeRobot policy directory: the policy trained
//! on a replay's episodes through its own loss, every transition at weight 1 (the
//! imitation LeRobot's own training does, on imago's recorded episodes), and written
//! back as a LeRobot directory with `DIR`'s config and processors. `--policy
//! diffusion` without `--init` starts a new Diffusion Policy sized for the replay's
//! robot ([`new_diffusion_config`]) with the replay's statistics, then trains it the
//! same way.

use std::collections::BTreeMap;
use std::path::Path;

use burn::Dispatch;
use burn::prelude::Backend;
use imago_robots::Robot;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::act::lerobot_driver::LeRobotBinding;
use crate::device::ResolvedDevice;
use crate::jobs::train::BcRunSummary;
use crate::learn::lerobot_update::{UpdateSettings, WeightedDraws, update_lerobot_policy};
use crate::learn::schedule::RateSchedule;
use crate::learn::weight_average::WeightAverageConfig;
use crate::store::lerobot::{EntryStats, VectorStats};
use crate::store::lerobot_policy::create::create_diffusion_policy;
use crate::store::lerobot_policy::{load_lerobot_policy, write_lerobot_policy};
use crate::store::outputs::{OutputKind, OutputPath};
use crate::store::replay::{
    Episode, ReplaySource, TrainingReplay, read_training_replay, transition_indices,
};
use crate::telemetry::{Telemetry, TelemetryEvent};
use imago_policies::diffusion::{DiffusionPolicyConfig, SamplerKind};
use imago_policies::lerobot::features::{ACTION_KEY, ENV_STATE_KEY, STATE_KEY};
use imago_policies::lerobot::{FeatureType, NormMode, PolicyFeature, PolicyFeatures};
use imago_policies::lora::LoraConfig;
use imago_robots::LeRobotUnits;

/// How a LeRobot policy is trained by imitation.
#[derive(Debug, Clone, PartialEq)]
pub struct LeRobotImitation {
    /// Optimiser steps.
    pub steps: usize,
    /// Transitions per step.
    pub batch_size: usize,
    /// Adam's peak rate; `None`: the policy's `optimizer_lr`.
    pub learning_rate: Option<f64>,
    /// How the rate moves over the steps.
    pub schedule: RateSchedule,
    /// Seed of batches and noise.
    pub seed: u64,
    /// Train LoRA adapters only (see `update_lerobot_policy`); `None`: every weight.
    pub lora: Option<LoraConfig>,
    /// Write the moving average of the weights (`learn::weight_average`); `None`: the
    /// last step's weights.
    pub average: Option<WeightAverageConfig>,
}

impl LeRobotImitation {
    /// `self` with Diffusion Policy's own recipe (LeRobot's preset), which a new
    /// Diffusion Policy trains with: warm-up over 500 steps and a cosine decay, and the
    /// weights' moving average written.
    pub fn with_diffusion_recipe(self) -> Self {
        Self {
            schedule: RateSchedule::WarmupCosine { warmup: 500 },
            average: Some(WeightAverageConfig::default()),
            ..self
        }
    }
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
    imitate((read, replay.dir), out, init, imitation, device, telemetry)
}

/// Starts a new Diffusion Policy for the robot of the replay at `replay`
/// ([`new_diffusion_config`], normalised by the replay's statistics, weights
/// initialised from `imitation.seed`), trains it as [`train_lerobot_offline`] does and
/// writes it to `out` as a LeRobot directory.
pub fn train_new_diffusion_offline(
    replay: ReplaySource<'_>,
    out: OutputPath<'_>,
    imitation: &LeRobotImitation,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<BcRunSummary> {
    replay.ensure_exists()?;
    out.check(OutputKind::LeRobotPolicy, &replay.inputs_with(None))?;
    anyhow::ensure!(
        imitation.lora.is_none(),
        "a new policy trains every weight: LoRA adapts a trained one (--init DIR)"
    );
    let read = read_training_replay(replay)?;
    let units = read
        .robot_settings(
            replay.dir,
            "a new LeRobot policy reads the robot in its units",
        )?
        .build()?
        .lerobot_units();
    anyhow::ensure!(
        units.env_state.is_some(),
        "a new Diffusion Policy reads the robot's state and environment state (pusht gives its block's keypoints), and robot {} gives no environment state (pusht gives none with `observation = \"vision\"`); imago does not start camera-based ones yet",
        read.spec.name
    );
    let config = new_diffusion_config(&units);
    let stats = feature_stats(&read.contents.episodes, &units)?;
    Dispatch::seed(&device.training, imitation.seed);
    // The fresh policy lives in the system's temporary directory while it trains (the
    // directory is removed when `fresh` drops), never beside the user's --out.
    let fresh = tempfile::Builder::new()
        .prefix("imago-new-policy-")
        .tempdir()
        .map_err(|e| anyhow::anyhow!("cannot create a temporary directory: {e}"))?;
    let source = fresh.path().join("policy");
    create_diffusion_policy(&source, &config, &stats, &device.training)?;
    imitate(
        (read, replay.dir),
        out,
        &source,
        imitation,
        device,
        telemetry,
    )
}

/// A new Diffusion Policy for a robot read in `units`: LeRobot's Diffusion Policy
/// reading the robot's state (and its environment state where it gives one: pusht's
/// block keypoints), no camera, sized to train on a CPU: a U-Net of widths 64, 128,
/// 256 (about 4 M parameters, against LeRobot's 512, 1024, 2048), 2 observations, 16
/// actions denoised, 8 executed, 10 DDIM steps at inference. Every feature is scaled
/// to [-1, 1] by its range, as LeRobot scales states and actions.
pub fn new_diffusion_config(units: &LeRobotUnits) -> DiffusionPolicyConfig {
    let vector = |kind, len| PolicyFeature {
        kind,
        shape: vec![len],
    };
    let mut inputs = vec![(
        STATE_KEY.to_string(),
        vector(FeatureType::State, units.state.len()),
    )];
    if let Some(env) = units.env_state {
        inputs.push((
            ENV_STATE_KEY.to_string(),
            vector(FeatureType::Env, env.len()),
        ));
    }
    let mut config = DiffusionPolicyConfig {
        input_features: PolicyFeatures(inputs),
        output_features: PolicyFeatures(vec![(
            ACTION_KEY.to_string(),
            vector(FeatureType::Action, units.action.len()),
        )]),
        crop_shape: None,
        down_dims: vec![64, 128, 256],
        noise_scheduler_type: SamplerKind::Ddim,
        num_inference_steps: Some(10),
        do_mask_loss_for_padding: true,
        ..DiffusionPolicyConfig::default()
    };
    config
        .normalization_mapping
        .insert(FeatureType::Env, NormMode::MinMax);
    config
}

/// Each vector feature's statistics over every transition of `episodes`, in the
/// robot's LeRobot units.
fn feature_stats(
    episodes: &[Episode],
    units: &LeRobotUnits,
) -> anyhow::Result<BTreeMap<String, EntryStats>> {
    let mut state = VectorStats::new(units.state.len());
    let mut action = VectorStats::new(units.action.len());
    let mut env_state = units
        .env_state
        .map(|env| (env, VectorStats::new(env.len())));
    for t in episodes.iter().flat_map(|e| &e.transitions) {
        state.add(&units.state_of(&t.observation.proprio));
        action.add(&units.action_of(&t.action));
        if let Some((env, stats)) = &mut env_state {
            let values = env.of(&t.observation.proprio).ok_or_else(|| {
                anyhow::anyhow!("a recorded proprioception holds no environment state")
            })?;
            stats.add(&values);
        }
    }
    let mut features = vec![(STATE_KEY, state), (ACTION_KEY, action)];
    features.extend(env_state.map(|(_, stats)| (ENV_STATE_KEY, stats)));
    features
        .into_iter()
        .map(|(key, stats)| {
            let entries = stats.entries().ok_or_else(|| {
                anyhow::anyhow!("the replay has no transitions to take {key}'s statistics from")
            })?;
            Ok((key.to_string(), entries))
        })
        .collect()
}

/// Trains the LeRobot policy of the directory `init` on the replay `read` by
/// imitation and writes it to `out` with `init`'s config and processors.
fn imitate(
    (read, replay_dir): (TrainingReplay, &Path),
    out: OutputPath<'_>,
    init: &Path,
    imitation: &LeRobotImitation,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<BcRunSummary> {
    let robot = read.robot_settings(
        replay_dir,
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
        &UpdateSettings {
            steps: imitation.steps,
            learning_rate,
            schedule: imitation.schedule,
            lora: imitation.lora.as_ref(),
            average: imitation.average,
        },
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
