//! The learner: the models fine-tuning trains, and one learning step over a replay
//! (world-model update, encoding, critic, weights, policy update). The fine-tuning loop
//! runs it after each collection; the daemon's learner thread runs it on what the
//! actor recorded.

use burn::Dispatch;
use burn::module::{AutodiffModule, Module};
use imago_policies::{Policy, PolicyConfig};
use imago_worldmodel::{LatentCritic, LatentCriticConfig, WorldModel, WorldModelConfig};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::advantages::{AdvantageSummary, transition_weights};
use super::config::FinetuneConfig;
use super::critic::{CriticLosses, train_critic};
use super::latents::EncodedEpisodes;
use super::update::{PolicyUpdateReport, update_policy};
use crate::device::ResolvedDevice;
use crate::learn::bc::ImitationDataset;
use crate::learn::world_model::{
    WindowDataset, WorldModelTrainConfig, mean_loss, train_world_model,
};
use crate::store::replay::Episode;
use crate::telemetry::{Telemetry, TelemetryEvent, scalars_of};

/// What one learning step did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnReport {
    /// World-model prediction loss over the step's last updates.
    pub world_model_prediction_loss: f32,
    /// Critic losses.
    pub critic: CriticLosses,
    /// The AWR weights.
    pub advantages: AdvantageSummary,
    /// The policy update.
    pub update: PolicyUpdateReport,
}

/// Transitions whose advantages and weights are logged per learning step, at most.
const LOGGED_TRANSITIONS: usize = 1024;

/// The policy, world model and critic being fine-tuned (all on the training device).
pub struct Learner {
    telemetry: Telemetry,
    policy: Policy<Dispatch>,
    policy_config: PolicyConfig,
    world_model: WorldModel<Dispatch>,
    wm_config: WorldModelConfig,
    wm_training: WorldModelTrainConfig,
    critic: LatentCritic<Dispatch>,
    rng: StdRng,
    version: u64,
    max_steps: u32,
}

impl Learner {
    /// A learner starting from `policy` (version `version`) and `world_model`, which
    /// is trained with `wm_training` (its `steps` replaced by the fine-tuning config's),
    /// for a robot whose episodes last at most `max_steps` ticks.
    pub fn new(
        policy: (Policy<Dispatch>, PolicyConfig),
        version: u64,
        world_model: (WorldModel<Dispatch>, WorldModelConfig),
        wm_training: WorldModelTrainConfig,
        config: &FinetuneConfig,
        max_steps: u32,
        device: &ResolvedDevice,
    ) -> Self {
        // burn initialises parameters lazily, and each clone of an uninitialised
        // module draws its own weights: the checkpoint, the actor's snapshot and a
        // fleet's published version of "version 1" would differ. Materialise them once.
        let record = policy.0.clone().into_record();
        let initialised = policy.0.load_record(record);
        Self {
            telemetry: Telemetry::off(),
            policy: initialised,
            policy_config: policy.1,
            critic: LatentCriticConfig::new(world_model.1.latent_dim).init(&device.training),
            world_model: world_model.0,
            wm_config: world_model.1,
            wm_training,
            rng: StdRng::seed_from_u64(config.seed ^ 0xf1e7_0000),
            version,
            max_steps,
        }
    }

    /// Logs every learning step's losses, weights and version to `telemetry`.
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// The policy's config.
    pub fn policy_config(&self) -> &PolicyConfig {
        &self.policy_config
    }

    /// The current policy's version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Replaces the policy's weights by freshly initialised ones (keeping the version):
    /// a learner gone wrong, for testing the promotion gate
    /// (`learner.publish_fresh_weights`).
    pub fn replace_with_fresh_weights(&mut self, device: &ResolvedDevice) {
        let fresh = self.policy_config.init::<Dispatch>(&device.training);
        let record = fresh.clone().into_record();
        self.policy = fresh.load_record(record);
    }

    /// The current policy, for inference.
    pub fn policy(&self) -> Policy<Dispatch> {
        self.policy.valid()
    }

    /// One learning step on `episodes` (all replay so far): the world model, the
    /// critic, the weights, then the policy, whose version goes up by one.
    pub fn learn(
        &mut self,
        episodes: &[Episode],
        config: &FinetuneConfig,
        device: &ResolvedDevice,
    ) -> anyhow::Result<LearnReport> {
        let train = WorldModelTrainConfig {
            steps: config.world_model_steps,
            warmup_steps: 0,
            seed: config.seed + self.version,
            ..self.wm_training.clone()
        };
        let windows = WindowDataset::new(
            episodes,
            train.horizon,
            &self.wm_config.action_limit,
            train.discount,
        );
        let history;
        (self.world_model, history) = train_world_model(
            self.world_model.clone(),
            &self.wm_config,
            &windows,
            &train,
            &device.training,
        )?;
        let wm = self.world_model.valid();
        let encoded = EncodedEpisodes::encode(&wm, &self.wm_config, episodes, &device.inference)?;
        let critic_losses;
        (self.critic, critic_losses) = train_critic(
            self.critic.clone(),
            &wm,
            &encoded,
            episodes,
            config,
            device,
            &mut self.rng,
        )?;
        let (weights, advantages) = transition_weights(
            episodes,
            &encoded,
            &self.critic.valid(),
            config,
            self.max_steps,
        )?;
        let behaviour = self.policy.clone();
        let data = ImitationDataset::new(episodes, &self.policy_config);
        let update;
        (self.policy, update) = update_policy(
            (self.policy.clone(), &self.policy_config),
            (&data, &weights.weights),
            Some(&behaviour),
            self.version + 1,
            config,
            device,
            &mut self.rng,
        )?;
        self.version += 1;
        let report = LearnReport {
            world_model_prediction_loss: mean_loss(
                &history[history.len().saturating_sub(20)..],
                "prediction",
            ),
            critic: critic_losses,
            advantages,
            update,
        };
        if self.telemetry.is_on() {
            let mut values = scalars_of(&report);
            values.push(("policy_version".into(), self.version as f64));
            self.telemetry.send(TelemetryEvent::LearnerScalars {
                version: self.version,
                values,
            });
            let (advantages, weights) = weights.newest(LOGGED_TRANSITIONS).into_iter().unzip();
            self.telemetry.send(TelemetryEvent::TransitionWeights {
                version: self.version,
                advantages,
                weights,
            });
        }
        Ok(report)
    }
}
