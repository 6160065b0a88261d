//! The learner: the models fine-tuning trains, and one learning step over a replay
//! (world-model update, encoding, critic, weights, policy update). The fine-tuning loop
//! runs it after each collection; the daemon's learner thread runs it on what the
//! actor recorded.

use burn::Dispatch;
use burn::module::{AutodiffModule, Module};
use imago_policies::{Policy, PolicyConfig};
use imago_worldmodel::{WorldModel, WorldModelConfig};
use serde::{Deserialize, Serialize};

use super::advantage_models::{AdvantageModels, Weighed};
use super::advantages::{AdvantageSummary, TransitionWeights};
use super::config::FinetuneConfig;
use super::critic::CriticLosses;
use super::update::{PolicyUpdateReport, update_policy};
use crate::device::ResolvedDevice;
use crate::learn::bc::ImitationDataset;
use crate::learn::world_model::WorldModelTrainConfig;
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

impl LearnReport {
    /// The report of a step that weighed the replay as `weighed` and updated the
    /// policy as `update`.
    pub fn of(weighed: &Weighed, update: PolicyUpdateReport) -> Self {
        Self {
            world_model_prediction_loss: weighed.world_model_prediction_loss,
            critic: weighed.critic,
            advantages: weighed.advantages,
            update,
        }
    }

    /// Sends this step's scalars, version and (at most [`LOGGED_TRANSITIONS`]) newest
    /// transition weights to `telemetry`.
    pub fn log(&self, telemetry: &Telemetry, version: u64, weights: &TransitionWeights) {
        if !telemetry.is_on() {
            return;
        }
        let mut values = scalars_of(self);
        values.push(("policy_version".into(), version as f64));
        telemetry.send(TelemetryEvent::LearnerScalars { version, values });
        let (advantages, weights) = weights.newest(LOGGED_TRANSITIONS).into_iter().unzip();
        telemetry.send(TelemetryEvent::TransitionWeights {
            version,
            advantages,
            weights,
        });
    }
}

/// Transitions whose advantages and weights are logged per learning step, at most.
const LOGGED_TRANSITIONS: usize = 1024;

/// The policy, world model and critic being fine-tuned (all on the training device).
pub struct Learner {
    telemetry: Telemetry,
    policy: Policy<Dispatch>,
    policy_config: PolicyConfig,
    models: AdvantageModels,
    version: u64,
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
            models: AdvantageModels::new(world_model, wm_training, config, max_steps, device),
            version,
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
        let weighed = self.models.weigh(episodes, self.version, config, device)?;
        let behaviour = self.policy.clone();
        let data = ImitationDataset::new(episodes, &self.policy_config);
        let update;
        (self.policy, update) = update_policy(
            (self.policy.clone(), &self.policy_config),
            (&data, &weighed.weights),
            Some(&behaviour),
            self.version + 1,
            config,
            device,
            &mut self.models.rng,
        )?;
        self.version += 1;
        let report = LearnReport::of(&weighed, update);
        report.log(&self.telemetry, self.version, &weighed.weights);
        Ok(report)
    }
}
