//! The residual-MLP transition, `z' = z + tanh(MLP(z, a))`.

use burn::prelude::*;

use crate::config::WorldModelConfig;
use crate::mlp::{Mlp, MlpConfig};

/// `z' = z + tanh(MLP([z, a]))`, the output layer started near zero so an untrained
/// member copies its input. The squashing bounds one step's change to 1 per latent
/// dimension (the latents' spread is about 1, the variance term's floor), so that
/// open loop, outside the latents it was trained on, a member cannot feed its own
/// growth: without it a residual member on pusht reached errors of 1e6 in 8 steps
/// (docs/worldmodel.md, "PushT"). Inside the bound, where real steps lie, `tanh` is
/// nearly the identity.
#[derive(Module, Debug)]
pub struct ResidualMlp<B: Backend> {
    pub(crate) delta: Mlp<B>,
}

impl<B: Backend> ResidualMlp<B> {
    /// A freshly initialised member for `config`.
    pub fn new(config: &WorldModelConfig, device: &B::Device) -> Self {
        Self {
            delta: MlpConfig::new(
                config.latent_dim + config.action_dim(),
                config.hidden,
                config.latent_dim,
            )
            .with_output_init_std(Some(1e-3))
            .init(device),
        }
    }

    /// The next latent `[B, D]` from latents `[B, D]` and actions `[B, A]`.
    pub fn step(&self, latent: Tensor<B, 2>, action: Tensor<B, 2>) -> Tensor<B, 2> {
        let delta = self
            .delta
            .forward(Tensor::cat(vec![latent.clone(), action], 1));
        latent + burn::tensor::activation::tanh(delta)
    }
}
