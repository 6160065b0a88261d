//! The fine-tuning loop: collect, record, update the world model and the critic,
//! re-weight, update the policy; one policy version per round.

use std::time::Instant;

use burn::Dispatch;
use burn::module::AutodiffModule;
use imago_policies::{VlaPolicy, VlaPolicyConfig};
use imago_robots::reacher2d::Reacher2dConfig;
use imago_worldmodel::{LatentCriticConfig, WorldModel, WorldModelConfig};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::advantages::{AdvantageSummary, transition_weights};
use super::config::FinetuneConfig;
use super::critic::{CriticLosses, train_critic};
use super::latents::EncodedEpisodes;
use super::rollout::collect_policy_episodes;
use super::update::{PolicyUpdateReport, update_policy};
use crate::bc::ImitationDataset;
use crate::device::ResolvedDevice;
use crate::replay::{Episode, ReplayWriter};
use crate::world_model::{WindowDataset, WorldModelTrainConfig, mean_loss, train_world_model};

/// Seeds of fine-tuning rollouts start here, apart from demonstrations and evaluation.
pub const ROLLOUT_SEED_BASE: u64 = 5_000_000;

/// What one round did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundReport {
    /// The policy version that collected this round's episodes.
    pub policy_version: u64,
    /// Episodes collected.
    pub episodes: usize,
    /// Their success rate (exploring, with takeovers if enabled).
    pub rollout_success_rate: f64,
    /// Transitions chosen by an intervention.
    pub interventions: usize,
    /// World-model prediction loss over the round's last steps.
    pub world_model_prediction_loss: f32,
    /// Critic losses.
    pub critic: CriticLosses,
    /// The AWR weights.
    pub advantages: AdvantageSummary,
    /// The policy update.
    pub update: PolicyUpdateReport,
    /// Wall time of the round, seconds.
    pub seconds: f64,
}

/// What [`finetune`] returns.
pub struct FinetuneOutcome {
    /// The fine-tuned policy, for inference.
    pub policy: VlaPolicy<Dispatch>,
    /// Its version (the initial version plus the rounds).
    pub version: u64,
    /// The world model after the rounds' updates (training device).
    pub world_model: WorldModel<Dispatch>,
    /// Every round.
    pub rounds: Vec<RoundReport>,
}

/// Everything [`finetune`] starts from.
pub struct FinetuneStart<'a> {
    /// The policy to improve (training device) and its config.
    pub policy: (VlaPolicy<Dispatch>, &'a VlaPolicyConfig),
    /// Its version; the first round collects with it.
    pub version: u64,
    /// The world model (training device) and its config.
    pub world_model: (WorldModel<Dispatch>, &'a WorldModelConfig),
    /// How the world model is trained each round (`steps` is overridden by
    /// `FinetuneConfig::world_model_steps`).
    pub world_model_training: WorldModelTrainConfig,
    /// Recorded episodes to start from (demonstrations, earlier rollouts).
    pub episodes: Vec<Episode>,
}

/// Runs `config.rounds` rounds of advantage-weighted fine-tuning on `robot`,
/// appending every collected episode to `writer`.
pub fn finetune(
    start: FinetuneStart<'_>,
    config: &FinetuneConfig,
    robot: &Reacher2dConfig,
    writer: &mut ReplayWriter,
    device: &ResolvedDevice,
) -> anyhow::Result<FinetuneOutcome> {
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("fine-tuning config: {e}"))?;
    let FinetuneStart {
        policy: (mut policy, policy_config),
        version: first_version,
        world_model: (mut world_model, wm_config),
        world_model_training,
        mut episodes,
    } = start;
    let mut rng = StdRng::seed_from_u64(config.seed ^ 0xf1e7_0000);
    let mut critic = LatentCriticConfig::new(wm_config.latent_dim).init(&device.training);
    let mut rounds = Vec::with_capacity(config.rounds);
    let seeds_per_round = config.episodes_per_round.div_ceil(config.group_size);
    for round in 0..config.rounds {
        let started = Instant::now();
        let version = first_version + round as u64;
        let first_seed =
            ROLLOUT_SEED_BASE + config.seed * 10_000_000 + (version * seeds_per_round as u64);
        let seeds: Vec<u64> = (0..config.episodes_per_round)
            .map(|i| first_seed + (i / config.group_size) as u64)
            .collect();
        eprintln!(
            "round {}/{}: collecting {} episodes with policy version {version}",
            round + 1,
            config.rounds,
            seeds.len()
        );
        let collected = collect_policy_episodes(
            &policy.valid(),
            policy_config,
            &device.inference,
            version,
            robot,
            &seeds,
            &config.rollout,
            writer,
        )?;
        let successes = collected.iter().filter(|e| e.end.success).count();
        let interventions = collected
            .iter()
            .flat_map(|e| &e.transitions)
            .filter(|t| t.intervention)
            .count();
        let collected_count = collected.len();
        episodes.extend(collected);

        let train = WorldModelTrainConfig {
            steps: config.world_model_steps,
            warmup_steps: 0,
            seed: config.seed + version,
            ..world_model_training.clone()
        };
        let windows = WindowDataset::new(
            &episodes,
            train.horizon,
            &wm_config.action_limit,
            train.discount,
        );
        let history;
        (world_model, history) =
            train_world_model(world_model, wm_config, &windows, &train, &device.training)?;
        let wm = world_model.valid();
        let encoded = EncodedEpisodes::encode(&wm, wm_config, &episodes, &device.inference)?;
        let critic_losses;
        (critic, critic_losses) =
            train_critic(critic, &wm, &encoded, &episodes, config, device, &mut rng)?;
        let (weights, advantages) =
            transition_weights(&episodes, &encoded, &critic.valid(), config)?;
        let behaviour = policy.clone();
        let data = ImitationDataset::new(&episodes, policy_config);
        let update;
        (policy, update) = update_policy(
            policy,
            policy_config,
            &data,
            &weights,
            Some(&behaviour),
            version + 1,
            config,
            device,
            &mut rng,
        )?;
        let report = RoundReport {
            policy_version: version,
            episodes: collected_count,
            rollout_success_rate: successes as f64 / collected_count.max(1) as f64,
            interventions,
            world_model_prediction_loss: mean_loss(
                &history[history.len().saturating_sub(20)..],
                "prediction",
            ),
            critic: critic_losses,
            advantages,
            update,
            seconds: started.elapsed().as_secs_f64(),
        };
        eprintln!(
            "round {}: rollouts {:.1}% successful, mean AWR weight {:.2} (ESS {:.0}%), importance ESS {:.0}%, loss {:.3} -> {:.3}, {:.0} s",
            round + 1,
            100.0 * report.rollout_success_rate,
            advantages.mean_weight,
            100.0 * advantages.ess_fraction,
            100.0 * update.importance_ess_fraction,
            update.first_loss,
            update.last_loss,
            report.seconds
        );
        rounds.push(report);
    }
    Ok(FinetuneOutcome {
        policy: policy.valid(),
        version: first_version + config.rounds as u64,
        world_model,
        rounds,
    })
}
