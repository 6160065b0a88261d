//! Fine-tuning a LeRobot policy (ACT, Diffusion Policy) on the device: the same rounds,
//! world model, critic and transition weights as imago's own policies
//! ([`AdvantageModels`]), with the policy updated through its own training loss
//! (Diffusion's noise prediction, ACT's L1 + KL), per demonstration, weighted by each
//! transition's weight, in burn's autodiff. Its commands carry no log-density, so
//! older data gets no importance correction; staleness still bounds it.

use burn::{Dispatch, DispatchDevice};
use imago_robots::{LeRobotUnits, RobotSpec};
use imago_worldmodel::{WorldModel, WorldModelConfig};

use super::advantage_models::AdvantageModels;
use super::config::{FinetuneConfig, FinetuneMethod};
use super::learner::LearnReport;
use super::run::RoundLearner;
use super::update::{PolicyUpdateReport, eligible_samples};
use crate::act::lerobot_driver::{LeRobotBinding, LeRobotDriver};
use crate::act::lerobot_rollout::collect_lerobot_episodes;
use crate::act::rollout::RolloutConfig;
use crate::device::ResolvedDevice;
use crate::learn::lerobot_update::{UpdateSettings, WeightedDraws, update_lerobot_policy};
use crate::learn::schedule::RateSchedule;
use crate::learn::world_model::WorldModelTrainConfig;
use crate::robot::RobotConfig;
use crate::store::lerobot_policy::LeRobotPolicy;
use crate::store::replay::{Episode, ReplayWriter, transition_indices};
use crate::telemetry::Telemetry;

/// A LeRobot policy, world model and critic being fine-tuned (training device).
pub struct LeRobotLearner {
    telemetry: Telemetry,
    /// The policy; taken out only while an update runs (Adam consumes the module it
    /// steps, and a copy left behind would keep every tensor twice).
    policy: Option<LeRobotPolicy<Dispatch>>,
    robot: (RobotSpec, LeRobotUnits),
    /// The policy's features bound to the robot, on the training device.
    binding: LeRobotBinding<Dispatch>,
    models: AdvantageModels,
    version: u64,
}

impl LeRobotLearner {
    /// A learner starting from `policy` (training device; version `version`) with its
    /// features bound to robots of `robot` (its spec and LeRobot units) by
    /// [`Self::binding`], weighing with `world_model` trained by `wm_training`.
    pub fn new(
        (policy, binding): (LeRobotPolicy<Dispatch>, LeRobotBinding<Dispatch>),
        robot: (RobotSpec, LeRobotUnits),
        version: u64,
        world_model: (WorldModel<Dispatch>, WorldModelConfig),
        wm_training: WorldModelTrainConfig,
        config: &FinetuneConfig,
        device: &ResolvedDevice,
    ) -> Self {
        let max_steps = robot.0.max_steps;
        Self {
            telemetry: Telemetry::off(),
            policy: Some(policy),
            robot,
            binding,
            models: AdvantageModels::new(world_model, wm_training, config, max_steps, device),
            version,
        }
    }

    /// `policy`'s features bound to `robot` on the training device, checked before
    /// anything is trained: features the robot does not give, a method that needs a
    /// flow head (`advantage-flow`) or a Gaussian one (`ppo-returns`), or rollouts asked to execute more than one action
    /// per plan (the policy executes through its own queue), are an error.
    pub fn binding(
        policy: &LeRobotPolicy<Dispatch>,
        robot: (&RobotSpec, LeRobotUnits),
        config: &FinetuneConfig,
        device: &ResolvedDevice,
    ) -> anyhow::Result<LeRobotBinding<Dispatch>> {
        anyhow::ensure!(
            config.method != FinetuneMethod::AdvantageFlow,
            "advantage-flow fine-tunes a flow head, which a LeRobot {} policy does not have; use awr-returns, awr-imagination, habc or dagger",
            policy.kind()
        );
        anyhow::ensure!(
            config.method != FinetuneMethod::PpoReturns,
            "ppo-returns weighs the density of a Gaussian head's sampled chunks, which a LeRobot {} policy does not record; use awr-returns, awr-imagination, habc or dagger",
            policy.kind()
        );
        anyhow::ensure!(
            config.rollout.executed_per_plan == 1,
            "rollout.executed_per_plan is {}, but a LeRobot policy executes its chunks through its own queue (its config's n_action_steps): leave it at 1 for it",
            config.rollout.executed_per_plan
        );
        LeRobotBinding::new(policy, robot, &device.training)
    }

    /// Logs every learning step's losses, weights and version to `telemetry`.
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// The current policy, for inference.
    pub fn policy(&self) -> LeRobotPolicy<Dispatch> {
        self.trained().valid()
    }

    /// The current policy driving robots of the learner's spec, on `device` (the
    /// inference device: its weights are the trained ones without gradient tracking).
    pub fn driver(&self, device: &DispatchDevice) -> anyhow::Result<LeRobotDriver<Dispatch>> {
        LeRobotDriver::new(self.policy(), (&self.robot.0, self.robot.1.clone()), device)
    }

    fn trained(&self) -> &LeRobotPolicy<Dispatch> {
        self.policy
            .as_ref()
            .expect("the policy is back in place after every update")
    }
}

impl RoundLearner for LeRobotLearner {
    fn version(&self) -> u64 {
        self.version
    }

    fn collect(
        &self,
        robot: &RobotConfig,
        seeds: &[u64],
        rollout: &RolloutConfig,
        writer: &mut ReplayWriter,
        device: &ResolvedDevice,
    ) -> anyhow::Result<Vec<Episode>> {
        let driver = self.driver(&device.inference)?;
        collect_lerobot_episodes((&driver, self.version), robot, seeds, rollout, writer)
    }

    fn learn(
        &mut self,
        episodes: &[Episode],
        config: &FinetuneConfig,
        device: &ResolvedDevice,
    ) -> anyhow::Result<LearnReport> {
        let weighed = self.models.weigh(episodes, self.version, config, device)?;
        let samples = transition_indices(episodes);
        let (eligible, stale) = eligible_samples(
            episodes,
            &samples,
            &weighed.weights.weights,
            self.version + 1,
            config,
        )?;
        let draws = WeightedDraws {
            samples: eligible.iter().map(|&i| samples[i]).collect(),
            weights: Some(&weighed.weights.weights),
            batch_size: config.batch_size,
        };
        let learning_rate = config
            .lerobot_learning_rate
            .unwrap_or_else(|| self.trained().optimizer_lr());
        let policy = self
            .policy
            .take()
            .expect("the policy is back in place after every update");
        let (policy, losses) = update_lerobot_policy(
            policy,
            (&self.binding, episodes),
            &draws,
            &UpdateSettings {
                steps: config.policy_steps,
                learning_rate,
                lora: config.lora.as_ref(),
                schedule: RateSchedule::Constant,
                average: config.weight_average,
            },
            &mut self.models.rng,
        )?;
        self.policy = Some(policy);
        self.version += 1;
        let update = PolicyUpdateReport::of_losses((eligible.len(), stale.len()), &losses);
        let report = LearnReport::of(&weighed, update);
        report.log(&self.telemetry, self.version, &weighed.weights);
        Ok(report)
    }
}
