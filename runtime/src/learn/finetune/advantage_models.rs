//! The models that weigh a fine-tuning round's transitions, whatever the policy: the
//! world model (trained on the replay each round), the latent critic over its
//! encodings, and the weights of every recorded transition by the method's advantage.
//! imago's own policies ([`super::Learner`]) and LeRobot's
//! ([`super::LeRobotLearner`]) are weighed alike.

use burn::Dispatch;
use burn::module::AutodiffModule;
use imago_worldmodel::{LatentCritic, LatentCriticConfig, WorldModel, WorldModelConfig};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::advantages::{AdvantageSummary, TransitionWeights, round_episodes, transition_weights};
use super::config::{FinetuneConfig, FinetuneMethod, PpoBaseline};
use super::critic::{CriticLosses, train_critic};
use super::latents::EncodedEpisodes;
use super::state_value::cross_fitted_values;
use crate::device::ResolvedDevice;
use crate::learn::world_model::{
    WindowDataset, WorldModelTrainConfig, mean_loss, train_world_model,
};
use crate::store::replay::Episode;

/// What weighing a replay found.
pub struct Weighed {
    /// Every transition's advantage and weight.
    pub weights: TransitionWeights,
    /// World-model prediction loss over the round's last updates.
    pub world_model_prediction_loss: f32,
    /// Critic losses.
    pub critic: CriticLosses,
    /// The weights in summary.
    pub advantages: AdvantageSummary,
}

/// The world model and critic of a fine-tuning run (training device), and the
/// generator of its random draws.
pub struct AdvantageModels {
    world_model: WorldModel<Dispatch>,
    wm_config: WorldModelConfig,
    wm_training: WorldModelTrainConfig,
    critic: LatentCritic<Dispatch>,
    /// The run's random draws (critic batches, policy batches).
    pub rng: StdRng,
    max_steps: u32,
}

impl AdvantageModels {
    /// Weighing with `world_model`, trained by `wm_training` (its `steps` replaced by
    /// the fine-tuning config's), and a fresh critic, for a robot whose episodes last
    /// at most `max_steps` ticks.
    pub fn new(
        world_model: (WorldModel<Dispatch>, WorldModelConfig),
        wm_training: WorldModelTrainConfig,
        config: &FinetuneConfig,
        max_steps: u32,
        device: &ResolvedDevice,
    ) -> Self {
        Self {
            critic: LatentCriticConfig::new(world_model.1.latent_dim).init(&device.training),
            world_model: world_model.0,
            wm_config: world_model.1,
            wm_training,
            rng: StdRng::seed_from_u64(config.seed ^ 0xf1e7_0000),
            max_steps,
        }
    }

    /// Trains the world model and the critic on `episodes` (all replay so far) and
    /// weighs each of their transitions; `version` is the policy's before the update
    /// (it seeds the world model's batches).
    pub fn weigh(
        &mut self,
        episodes: &[Episode],
        version: u64,
        config: &FinetuneConfig,
        device: &ResolvedDevice,
    ) -> anyhow::Result<Weighed> {
        let train = WorldModelTrainConfig {
            steps: config.world_model_steps,
            warmup_steps: 0,
            seed: config.seed + version,
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
        let critic;
        (self.critic, critic) = train_critic(
            self.critic.clone(),
            &wm,
            &encoded,
            episodes,
            config,
            device,
            &mut self.rng,
        )?;
        let state_values = match (config.method, config.ppo().baseline) {
            (FinetuneMethod::PpoReturns, PpoBaseline::StateValue) => {
                let round: Vec<&Episode> = round_episodes(episodes, version)
                    .into_iter()
                    .map(|e| &episodes[e])
                    .collect();
                Some(cross_fitted_values(
                    &round,
                    (self.max_steps, config.discount),
                    config.ppo().value_steps,
                    device,
                    &mut self.rng,
                )?)
            }
            _ => None,
        };
        let (weights, advantages) = transition_weights(
            episodes,
            &encoded,
            &self.critic.valid(),
            config,
            (version, self.max_steps),
            state_values.as_ref(),
        )?;
        Ok(Weighed {
            weights,
            world_model_prediction_loss: mean_loss(
                &history[history.len().saturating_sub(20)..],
                "prediction",
            ),
            critic,
            advantages,
        })
    }
}
