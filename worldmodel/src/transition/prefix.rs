//! Action-prefix prediction: the latent after every prefix of an action sequence, in
//! one parallel pass.

use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::prelude::*;
use imago_policies::linear_rows;

use crate::config::WorldModelConfig;
use crate::mlp::{Mlp, MlpConfig};

/// Predicts `z_h` for `h = 1..H` from `z_0` and `a_1..a_H` at once: each action is
/// embedded, a lower-triangular matrix product sums the embeddings of every prefix
/// `a_1..a_h` (a cumulative sum, computed as one matmul so it runs on every backend),
/// a horizon embedding says how long the prefix is, and one MLP over all `B x H`
/// (start latent, prefix summary) pairs predicts the change from `z_0`.
#[derive(Module, Debug)]
pub struct ActionPrefix<B: Backend> {
    pub(crate) action_embed: Linear<B>,
    pub(crate) horizon_embed: Embedding<B>,
    pub(crate) predict: Mlp<B>,
    max_horizon: usize,
}

impl<B: Backend> ActionPrefix<B> {
    /// A freshly initialised member for `config`.
    pub fn new(config: &WorldModelConfig, device: &B::Device) -> Self {
        let width = config.hidden;
        Self {
            action_embed: LinearConfig::new(config.action_dim(), width).init(device),
            horizon_embed: EmbeddingConfig::new(config.prefix_horizon, width).init(device),
            predict: MlpConfig::new(config.latent_dim + width, config.hidden, config.latent_dim)
                .with_output_init_std(Some(1e-3))
                .init(device),
            max_horizon: config.prefix_horizon,
        }
    }

    /// Longest prefix one pass predicts.
    pub fn max_horizon(&self) -> usize {
        self.max_horizon
    }

    /// Latents `[B, H, D]` after each prefix of `actions` `[B, H, A]`, `H <= max_horizon`,
    /// from `latent` `[B, D]`, in one pass.
    pub fn predict_prefixes(&self, latent: Tensor<B, 2>, actions: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, horizon, _] = actions.dims();
        debug_assert!(horizon <= self.max_horizon);
        let device = latent.device();
        // One GEMM over all `B H` actions, then a running sum along the horizon.
        let prefix_sums = linear_rows(&self.action_embed, actions).cumsum(1);
        let horizons =
            Tensor::<B, 1, Int>::arange(0..horizon as i64, &device).reshape([1, horizon]);
        // Both operands of each sum below are contiguous and of the same shape
        // (`repeat_dim` copies where `expand` would broadcast): on burn-flex a
        // broadcast operand takes a strided path, about 5% of this family's training
        // step (docs/performance.md).
        let summary = prefix_sums + self.horizon_embed.forward(horizons).repeat_dim(0, batch);
        let start = latent.clone().unsqueeze_dim::<3>(1).repeat_dim(1, horizon);
        let delta = self
            .predict
            .forward(Tensor::cat(vec![start.clone(), summary], 2));
        start + delta
    }
}
