//! The three computations written with burn's composite tensor ops. They are
//! differentiable and run on any backend, so the models use them where gradients
//! flow (training); the kernels are measured against them (`imago bench --what
//! kernels`).

use burn::prelude::*;

use crate::{EnsembleStatistics, LambdaReturns};

/// Lambda-returns and survival weights of `rows x horizon` trajectories
/// (see [`crate::lambda_returns`]), computed backwards over the horizon one column
/// at a time.
pub fn lambda_returns<B: Backend>(
    rewards: Tensor<B, 2>,
    continues: Tensor<B, 2>,
    values: Tensor<B, 2>,
    gamma: f32,
    lambda: f32,
) -> LambdaReturns<B> {
    let [rows, horizon] = rewards.dims();
    let column = |x: &Tensor<B, 2>, t: usize| x.clone().narrow(1, t, 1);
    let mut next = column(&values, horizon);
    let mut returns = Vec::with_capacity(horizon);
    for t in (0..horizon).rev() {
        let bootstrap = column(&values, t + 1) * (1.0 - lambda) + next * lambda;
        next = column(&rewards, t) + column(&continues, t) * bootstrap * gamma;
        returns.push(next.clone());
    }
    returns.reverse();
    let mut alive = Tensor::<B, 2>::ones([rows, 1], &values.device());
    let mut weights = Vec::with_capacity(horizon);
    for t in 0..horizon {
        weights.push(alive.clone());
        alive = alive * column(&continues, t);
    }
    LambdaReturns {
        returns: Tensor::cat(returns, 1),
        weights: Tensor::cat(weights, 1),
    }
}

/// Mean, unbiased variance and disagreement of `[members, rows, width]` predictions
/// (see [`crate::ensemble_statistics`]).
pub fn ensemble_statistics<B: Backend>(predictions: Tensor<B, 3>) -> EnsembleStatistics<B> {
    let [members, rows, width] = predictions.dims();
    let mean = predictions.clone().mean_dim(0);
    let variance =
        (predictions - mean.clone()).powf_scalar(2.0).sum_dim(0) / (members.max(2) - 1) as f64;
    let variance = variance.reshape([rows, width]);
    let disagreement = variance.clone().sqrt().mean_dim(1).reshape([rows]);
    EnsembleStatistics {
        mean: mean.reshape([rows, width]),
        variance,
        disagreement,
    }
}

/// One SALT transition `z' = A z + o` for a batch: matrices `[B, D, D]`, latents and
/// offsets `[B, D]` (see [`crate::salt_step`]).
pub fn salt_step<B: Backend>(
    matrices: Tensor<B, 3>,
    latents: Tensor<B, 2>,
    offsets: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let [batch, dim] = latents.dims();
    matrices
        .matmul(latents.reshape([batch, dim, 1]))
        .reshape([batch, dim])
        + offsets
}
