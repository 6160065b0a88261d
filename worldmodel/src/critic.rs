//! Critics over world-model latents: a value head trained on imagined lambda-returns
//! (the advantage baseline of AWR and AdvantageFlow) and HABC's viability and
//! efficiency heads.

use burn::prelude::*;
use burn::tensor::activation::sigmoid;

use imago_kernels::{LambdaReturns, lambda_returns};

use crate::imagine::ImaginedRollout;
use crate::mlp::{Mlp, MlpConfig};

/// Sizes of a [`LatentCritic`].
#[derive(Config, Debug)]
pub struct LatentCriticConfig {
    /// Width of the world model's latents.
    pub latent_dim: usize,
    /// Hidden width of every head.
    #[config(default = 128)]
    pub hidden: usize,
}

impl LatentCriticConfig {
    /// A freshly initialised critic.
    pub fn init<B: Backend>(&self, device: &B::Device) -> LatentCritic<B> {
        let head = || MlpConfig::new(self.latent_dim, self.hidden, 1).init(device);
        LatentCritic {
            value: head(),
            viability: head(),
            efficiency: head(),
        }
    }
}

/// Three heads on a latent `z`: `value` (discounted return of the current policy,
/// learnt in imagination), `viability` (probability that the policy, left alone,
/// reaches the goal) and `efficiency` (`gamma^steps` to the goal, learnt from
/// successful segments only).
#[derive(Module, Debug)]
pub struct LatentCritic<B: Backend> {
    value: Mlp<B>,
    viability: Mlp<B>,
    efficiency: Mlp<B>,
}

impl<B: Backend> LatentCritic<B> {
    /// Values `[B]` of latents `[B, D]`.
    pub fn value(&self, latent: Tensor<B, 2>) -> Tensor<B, 1> {
        squeeze_last(self.value.forward(latent))
    }

    /// Logits `[B]` of the success probability.
    pub fn viability_logit(&self, latent: Tensor<B, 2>) -> Tensor<B, 1> {
        squeeze_last(self.viability.forward(latent))
    }

    /// Success probabilities `[B]`.
    pub fn viability(&self, latent: Tensor<B, 2>) -> Tensor<B, 1> {
        sigmoid(self.viability_logit(latent))
    }

    /// Efficiency values `[B]`, about `gamma^steps` to the goal.
    pub fn efficiency(&self, latent: Tensor<B, 2>) -> Tensor<B, 1> {
        squeeze_last(self.efficiency.forward(latent))
    }
}

fn squeeze_last<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 1> {
    let batch = x.dims()[0];
    x.reshape([batch])
}

/// Lambda-return targets of `rollout` under `values` `[B, H + 1]` (a critic's values
/// of the rollout's latents) and how much each step counts (the survival weights),
/// with the penalised rewards. Targets carry no gradient: the backward scan runs as
/// one kernel on wgpu/CUDA devices and as the plain Rust reference on the CPU
/// (`imago_kernels::lambda_returns`; docs/kernels.md).
pub fn imagined_returns<B: Backend>(
    rollout: &ImaginedRollout<B>,
    values: Tensor<B, 2>,
    gamma: f64,
    lambda: f64,
) -> LambdaReturns<B> {
    lambda_returns(
        rollout.rewards.clone(),
        rollout.continuation.clone(),
        values,
        gamma as f32,
        lambda as f32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    type B = Flex;

    #[test]
    fn imagined_returns_match_returns_worked_by_hand() {
        let device = Default::default();
        let rewards = [[1.0f32, 2.0, -1.0], [0.5, 0.0, 3.0]];
        let continuation = [[1.0f32, 0.5, 1.0], [0.0, 1.0, 1.0]];
        let values = [[0.5f32, 1.0, 4.0, 2.0], [1.0, -1.0, 0.0, 1.0]];
        let zeros = Tensor::<B, 2>::zeros([2, 3], &device);
        let rollout = ImaginedRollout {
            latents: Tensor::zeros([2, 4, 1], &device),
            actions: Tensor::zeros([2, 3, 1], &device),
            rewards: Tensor::from_data(rewards, &device),
            raw_rewards: zeros.clone(),
            continuation: Tensor::from_data(continuation, &device),
            values: Tensor::from_data(values, &device),
            disagreement: zeros,
        };
        let out = imagined_returns(&rollout, Tensor::from_data(values, &device), 0.9, 0.7);
        let returns: Vec<f32> = out.returns.into_data().to_vec().unwrap();
        let weights: Vec<f32> = out.weights.into_data().to_vec().unwrap();
        // G_t = r_t + 0.9 c_t (0.3 V_{t+1} + 0.7 G_{t+1}), G_3 = V_3, worked backwards
        // by hand: row 0 from G_2 = -1 + 0.9 (0.3 * 2 + 0.7 * 2) = 0.8; row 1's first
        // step ends its episode (c_0 = 0), so G_0 is its reward alone.
        let expect = [3.02896f32, 2.792, 0.8, 0.5, 2.457, 3.9];
        for (got, want) in returns.iter().zip(expect) {
            assert!((got - want).abs() < 1e-5, "{returns:?} vs {expect:?}");
        }
        assert_eq!(weights, vec![1.0, 1.0, 0.5, 1.0, 0.0, 0.0]);
    }
}
