//! The fine-tuning loop: collect, record, update the world model and the critic,
//! re-weight, update the policy; one policy version per round.

use std::time::Instant;

use burn::Dispatch;
use imago_policies::{Policy, PolicyConfig};

use imago_worldmodel::{WorldModel, WorldModelConfig};
use serde::{Deserialize, Serialize};

use super::config::{FinetuneConfig, FinetuneMethod};
use super::learner::{LearnReport, Learner};
use crate::act::rollout::{ActingPolicy, RolloutConfig, collect_policy_episodes};
use crate::device::ResolvedDevice;
use crate::learn::world_model::WorldModelTrainConfig;
use crate::robot::RobotConfig;
use crate::store::replay::{Episode, ReplayWriter};
use crate::telemetry::{Telemetry, TelemetryEvent, log_replay_episodes};

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
    /// The learning step after the collection.
    #[serde(flatten)]
    pub learned: LearnReport,
    /// Wall time of the round, seconds.
    pub seconds: f64,
}

/// What [`finetune`] returns.
pub struct FinetuneOutcome {
    /// The fine-tuned policy, for inference.
    pub policy: Policy<Dispatch>,
    /// Its version (the initial version plus the rounds).
    pub version: u64,
    /// Every round.
    pub rounds: Vec<RoundReport>,
}

/// Everything [`finetune`] starts from.
pub struct FinetuneStart<'a> {
    /// The policy to improve (training device) and its config.
    pub policy: (Policy<Dispatch>, &'a PolicyConfig),
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

/// A policy fine-tuned in rounds: imago's own ([`Learner`]) or a LeRobot policy
/// ([`super::LeRobotLearner`]).
pub trait RoundLearner {
    /// The current policy's version.
    fn version(&self) -> u64;

    /// One episode per seed on `robot` with the current policy, appended to `writer`.
    fn collect(
        &self,
        robot: &RobotConfig,
        seeds: &[u64],
        rollout: &RolloutConfig,
        writer: &mut ReplayWriter,
        device: &ResolvedDevice,
    ) -> anyhow::Result<Vec<Episode>>;

    /// One learning step on `episodes` (all replay so far); the version goes up by one.
    fn learn(
        &mut self,
        episodes: &[Episode],
        config: &FinetuneConfig,
        device: &ResolvedDevice,
    ) -> anyhow::Result<LearnReport>;
}

impl RoundLearner for Learner {
    fn version(&self) -> u64 {
        Learner::version(self)
    }

    fn collect(
        &self,
        robot: &RobotConfig,
        seeds: &[u64],
        rollout: &RolloutConfig,
        writer: &mut ReplayWriter,
        device: &ResolvedDevice,
    ) -> anyhow::Result<Vec<Episode>> {
        collect_policy_episodes(
            &ActingPolicy {
                policy: &self.policy(),
                config: self.policy_config(),
                device: &device.inference,
                version: self.version(),
            },
            robot,
            seeds,
            rollout,
            writer,
        )
    }

    fn learn(
        &mut self,
        episodes: &[Episode],
        config: &FinetuneConfig,
        device: &ResolvedDevice,
    ) -> anyhow::Result<LearnReport> {
        Learner::learn(self, episodes, config, device)
    }
}

/// Runs `config.rounds` rounds of advantage-weighted fine-tuning on `robot`,
/// appending every collected episode to `writer`. Sampled rollouts, every learning
/// step and each round's rollout success go to `telemetry`.
pub fn finetune(
    start: FinetuneStart<'_>,
    config: &FinetuneConfig,
    robot: &RobotConfig,
    writer: &mut ReplayWriter,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<FinetuneOutcome> {
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("fine-tuning config: {e}"))?;
    let FinetuneStart {
        policy: (policy, policy_config),
        version: first_version,
        world_model: (world_model, wm_config),
        world_model_training,
        episodes,
    } = start;
    let mut learner = Learner::new(
        (policy, policy_config.clone()),
        first_version,
        (world_model, wm_config.clone()),
        world_model_training,
        config,
        robot.spec().max_steps,
        device,
    )
    .with_telemetry(telemetry.clone());
    let rounds = run_rounds(
        &mut learner,
        episodes,
        config,
        (robot, writer),
        device,
        telemetry,
    )?;
    Ok(FinetuneOutcome {
        policy: learner.policy(),
        version: learner.version(),
        rounds,
    })
}

/// `config.rounds` rounds of `learner` on `robot` from the recorded `episodes`, every
/// collected episode appended to `writer`; each round's report.
pub fn run_rounds(
    learner: &mut impl RoundLearner,
    mut episodes: Vec<Episode>,
    config: &FinetuneConfig,
    (robot, writer): (&RobotConfig, &mut ReplayWriter),
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<Vec<RoundReport>> {
    let mut rounds = Vec::with_capacity(config.rounds);
    let seeds_per_round = config.episodes_per_round.div_ceil(config.group_size);
    for round in 0..config.rounds {
        let started = Instant::now();
        let version = learner.version();
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
        let collected = learner.collect(robot, &seeds, &config.rollout, writer, device)?;
        let successes = collected.iter().filter(|e| e.end.success).count();
        let interventions = collected
            .iter()
            .flat_map(|e| &e.transitions)
            .filter(|t| t.intervention)
            .count();
        let collected_count = collected.len();
        telemetry.send(TelemetryEvent::Note(format!(
            "fine-tuning round {}: {collected_count} rollouts of policy version {version}, {successes} successful",
            round + 1
        )));
        log_replay_episodes(telemetry, &collected, Some(robot));
        episodes.extend(collected);
        let learned = learner.learn(&episodes, config, device)?;
        let report = RoundReport {
            policy_version: version,
            episodes: collected_count,
            rollout_success_rate: successes as f64 / collected_count.max(1) as f64,
            interventions,
            learned,
            seconds: started.elapsed().as_secs_f64(),
        };
        telemetry.send(TelemetryEvent::LearnerScalars {
            version: learner.version(),
            values: vec![
                ("rollout_success_rate".into(), report.rollout_success_rate),
                ("interventions".into(), report.interventions as f64),
                ("round_seconds".into(), report.seconds),
            ],
        });
        let (advantages, update) = (&report.learned.advantages, &report.learned.update);
        let weights = if advantages.weighted == 0 {
            format!("{} expert commands imitated", advantages.unweighted)
        } else if config.method == FinetuneMethod::PpoReturns {
            format!(
                "{} samples (mean |advantage| {:.2}, baseline explains {:.0}% of returns' variance) beside {} imitated, ratio ESS {:.0}%, clip active for {:.0}%",
                advantages.weighted,
                advantages.mean_weight,
                100.0 * advantages.baseline_explained,
                advantages.unweighted,
                100.0 * update.importance_ess_fraction,
                100.0 * update.truncated_fraction,
            )
        } else {
            format!(
                "mean AWR weight {:.2} (ESS {:.0}%), importance ESS {:.0}%",
                advantages.mean_weight,
                100.0 * advantages.ess_fraction,
                100.0 * update.importance_ess_fraction,
            )
        };
        eprintln!(
            "round {}: rollouts {:.1}% successful, {} interventions, {weights}, loss {:.3} -> {:.3}, {:.0} s",
            round + 1,
            100.0 * report.rollout_success_rate,
            report.interventions,
            update.first_loss,
            update.last_loss,
            report.seconds
        );
        rounds.push(report);
    }
    Ok(rounds)
}
