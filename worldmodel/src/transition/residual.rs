//! The residual-MLP transition, `z' = z + MLP(z, a)`.

use burn::prelude::*;

use crate::config::WorldModelConfig;
use crate::mlp::{Mlp, MlpConfig};

/// `z' = z + MLP([z, a])`, the output layer started near zero so an untrained member
/// copies its input.
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
        latent + delta
    }
}
