//! Behaviour-cloning losses.

use burn::prelude::*;

use crate::model::GaussianChunk;

/// Mean Gaussian negative log-likelihood (without the constant) of `target`
/// `[batch, K, A]` under `chunk`, over the chunk steps that `mask` `[batch, K]` marks
/// valid (1) rather than past the episode's end (0).
pub fn gaussian_nll<B: Backend>(
    chunk: &GaussianChunk<B>,
    target: Tensor<B, 3>,
    mask: Tensor<B, 2>,
) -> Tensor<B, 1> {
    let z = (target - chunk.mean.clone()) * chunk.log_std.clone().neg().exp();
    let per_element = z.powf_scalar(2.0) * 0.5 + chunk.log_std.clone();
    let per_step: Tensor<B, 2> = per_element.sum_dim(2).squeeze_dim(2);
    let valid = mask.clone().sum().clamp_min(1.0);
    (per_step * mask).sum() / valid
}
