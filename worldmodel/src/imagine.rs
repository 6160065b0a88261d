//! Imagination: rolling a policy forward inside the world model.

use burn::prelude::*;
use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

use crate::model::WorldModel;

/// Something that chooses actions from latent states, as imagination needs.
pub trait LatentPolicy<B: Backend> {
    /// Actions for the next `K >= 1` steps, `[B, K, A]` in units of the action limit,
    /// from latents `[B, D]` at imagined step `step`. Imagination executes all `K`
    /// (or as many as the horizon leaves) before asking again.
    fn act(&self, latent: Tensor<B, 2>, step: usize) -> Tensor<B, 3>;
}

/// The world model's latent actor, one action at a time (closed loop).
#[derive(Debug, Clone, Copy)]
pub struct LatentActor<'a, B: Backend>(pub &'a WorldModel<B>);

impl<B: Backend> LatentPolicy<B> for LatentActor<'_, B> {
    fn act(&self, latent: Tensor<B, 2>, _step: usize) -> Tensor<B, 3> {
        self.0.act(latent).unsqueeze_dim::<3>(1)
    }
}

/// A fixed action sequence `[B, H, A]`, handed over whole (open loop): the
/// action-prefix family then predicts the horizon in one pass.
#[derive(Debug, Clone)]
pub struct OpenLoopActions<B: Backend>(pub Tensor<B, 3>);

impl<B: Backend> LatentPolicy<B> for OpenLoopActions<B> {
    fn act(&self, _latent: Tensor<B, 2>, step: usize) -> Tensor<B, 3> {
        let horizon = self.0.dims()[1];
        self.0.clone().narrow(1, step, horizon - step)
    }
}

/// Settings of [`imagine`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImaginationConfig {
    /// Imagined steps. Range: [1, 64].
    pub horizon: usize,
    /// Coefficient of the ensemble disagreement subtracted from the predicted reward.
    /// Range: [0, 1000].
    pub uncertainty_penalty: f64,
}

impl ImaginationConfig {
    /// Checks both values against their documented ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("horizon", self.horizon, 1..=64)?;
        in_range(
            "uncertainty_penalty",
            self.uncertainty_penalty,
            0.0..=1000.0,
        )
    }
}

impl Default for ImaginationConfig {
    fn default() -> Self {
        Self {
            horizon: 8,
            uncertainty_penalty: 1.0,
        }
    }
}

/// What [`imagine`] returns; `B` start states, `H` steps.
#[derive(Debug, Clone)]
pub struct ImaginedRollout<B: Backend> {
    /// Ensemble-mean latents, `[B, H + 1, D]`; index 0 is the start.
    pub latents: Tensor<B, 3>,
    /// Actions taken, `[B, H, A]`.
    pub actions: Tensor<B, 3>,
    /// Predicted rewards minus the uncertainty penalty, `[B, H]`.
    pub rewards: Tensor<B, 2>,
    /// Predicted rewards without the penalty, `[B, H]`.
    pub raw_rewards: Tensor<B, 2>,
    /// Probability that the episode goes on after each step, `[B, H]`.
    pub continuation: Tensor<B, 2>,
    /// Values of every latent, `[B, H + 1]`.
    pub values: Tensor<B, 2>,
    /// Ensemble disagreement of each step: the members' standard deviation about the
    /// step's latent, averaged over latent dimensions, `[B, H]`.
    pub disagreement: Tensor<B, 2>,
}

/// Rolls `policy` for `config.horizon` steps from `start` `[B, D]` in `model`, all start
/// states at once. Each time the policy is asked it returns a chunk of actions; every
/// member rolls the chunk from the current ensemble-mean latent on its own predictions
/// (one pass for the action-prefix family), and the next latent is the members' mean.
/// With one-action chunks (a closed-loop policy) the disagreement is the members'
/// spread about each single step.
pub fn imagine<B: Backend>(
    model: &WorldModel<B>,
    start: Tensor<B, 2>,
    policy: &impl LatentPolicy<B>,
    config: &ImaginationConfig,
) -> ImaginedRollout<B> {
    let [batch, d] = start.dims();
    let horizon = config.horizon;
    let mut latent = start.clone();
    let mut latents = vec![start.unsqueeze_dim::<3>(1)];
    let (mut actions, mut disagreement) = (vec![], vec![]);
    let mut step = 0;
    while step < horizon {
        let chunk = policy.act(latent.clone(), step);
        let len = chunk.dims()[1].min(horizon - step);
        assert!(len > 0, "a latent policy returned an empty action chunk");
        let chunk = chunk.narrow(1, 0, len);
        let statistics = model
            .rollout_members(latent.clone(), chunk.clone())
            .statistics();
        let mean = statistics.mean.reshape([batch, len, d]);
        disagreement.push(statistics.disagreement.reshape([batch, len]));
        latent = mean.clone().narrow(1, len - 1, 1).reshape([batch, d]);
        latents.push(mean);
        actions.push(chunk);
        step += len;
    }
    let latents = Tensor::cat(latents, 1);
    let actions = Tensor::cat(actions, 1);
    let disagreement = Tensor::cat(disagreement, 1);
    let action_dim = actions.dims()[2];
    let before = latents
        .clone()
        .narrow(1, 0, horizon)
        .reshape([batch * horizon, d]);
    let after = latents
        .clone()
        .narrow(1, 1, horizon)
        .reshape([batch * horizon, d]);
    let raw_rewards = model
        .reward(
            before,
            actions.clone().reshape([batch * horizon, action_dim]),
        )
        .reshape([batch, horizon]);
    let continuation = model.continuation(after).reshape([batch, horizon]);
    let values = model
        .value(latents.clone().reshape([batch * (horizon + 1), d]))
        .reshape([batch, horizon + 1]);
    let rewards = raw_rewards.clone() - disagreement.clone() * config.uncertainty_penalty;
    ImaginedRollout {
        latents,
        actions,
        rewards,
        raw_rewards,
        continuation,
        values,
        disagreement,
    }
}
