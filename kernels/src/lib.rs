//! Hot loops of imago as CubeCL kernels shared by the CUDA and wgpu backends, each
//! with a plain Rust reference used on the CPU (`docs/kernels.md`).
//!
//! Three computations, each exposed through one function generic over the burn
//! backend:
//! - [`lambda_returns`]: the lambda-return / advantage backward scan over an imagined
//!   horizon, with the survival weights of the steps;
//! - [`ensemble_statistics`]: mean, variance and disagreement over ensemble members;
//! - [`salt_step`]: the SALT transition `z' = A z + o` for a batch.
//!
//! Each runs its kernel when the tensors live on a wgpu or CUDA device (burn's plain,
//! fused, autodiff or `Dispatch` backends alike) and the [`reference`] elsewhere.
//! The results carry no gradient: they are targets and statistics, computed where
//! nothing is differentiated through them. [`composite`] holds the same
//! computations in burn's differentiable tensor ops, for training and as the
//! baseline the kernels are benchmarked against ([`bench`]).

pub mod bench;
pub mod composite;
mod cube;
pub mod devices;
pub mod reference;
mod route;
mod transfer;

use burn::prelude::*;
use burn_cubecl::CubeRuntime;

use route::{Route, route};
use transfer::{download, from_host, host, upload};

/// Lambda-return targets of a batch of trajectories and how much each step counts.
#[derive(Debug, Clone)]
pub struct LambdaReturns<B: Backend> {
    /// `G_t = r_t + gamma c_t ((1 - lambda) V_{t+1} + lambda G_{t+1})`, `G_H = V_H`;
    /// `[rows, H]`. The advantages are `G_t - V_t`.
    pub returns: Tensor<B, 2>,
    /// Probability that the trajectory is still running at step `t`
    /// (`prod_{i < t} c_i`), `[rows, H]`.
    pub weights: Tensor<B, 2>,
}

/// Statistics of an ensemble's predictions over its members.
#[derive(Debug, Clone)]
pub struct EnsembleStatistics<B: Backend> {
    /// Mean over members, `[rows, width]`.
    pub mean: Tensor<B, 2>,
    /// Unbiased variance over members (divided by `max(N, 2) - 1`), `[rows, width]`.
    pub variance: Tensor<B, 2>,
    /// Per row, the mean over `width` of the standard deviation, `[rows]`: the
    /// disagreement that imagination penalises.
    pub disagreement: Tensor<B, 1>,
}

/// Lambda-returns and survival weights of `rows` trajectories: `rewards` and
/// `continues` `[rows, H]` (`continues` is 0 where the episode ends after the step),
/// `values` `[rows, H + 1]` (the last column bootstraps). A kernel on wgpu/CUDA
/// devices, [`reference::lambda_returns_batch`] elsewhere; no gradient.
///
/// # Panics
/// If the shapes disagree (a programming error).
pub fn lambda_returns<B: Backend>(
    rewards: Tensor<B, 2>,
    continues: Tensor<B, 2>,
    values: Tensor<B, 2>,
    gamma: f32,
    lambda: f32,
) -> LambdaReturns<B> {
    let [rows, horizon] = rewards.dims();
    assert_eq!(
        continues.dims(),
        [rows, horizon],
        "one continuation per reward"
    );
    assert_eq!(values.dims(), [rows, horizon + 1], "one value per state");
    let inputs = (rewards, continues, values, gamma, lambda);
    match route(&inputs.0.device()) {
        #[cfg(feature = "wgpu")]
        Route::Wgpu(device) => {
            devices::prepare_wgpu(&device);
            lambda_returns_on::<B, burn::backend::wgpu::WgpuRuntime>(&device, inputs)
        }
        #[cfg(feature = "cuda")]
        Route::Cuda(device) => lambda_returns_on::<B, cubecl::cuda::CudaRuntime>(&device, inputs),
        Route::Host => {
            let device = inputs.0.device();
            let (returns, weights) = reference::lambda_returns_batch(
                &host(inputs.0),
                &host(inputs.1),
                &host(inputs.2),
                horizon,
                gamma,
                lambda,
            );
            LambdaReturns {
                returns: from_host(returns, [rows, horizon], &device),
                weights: from_host(weights, [rows, horizon], &device),
            }
        }
    }
}

type LambdaInputs<B> = (Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 2>, f32, f32);

fn lambda_returns_on<B: Backend, R: CubeRuntime>(
    cube_device: &R::Device,
    (rewards, continues, values, gamma, lambda): LambdaInputs<B>,
) -> LambdaReturns<B> {
    let client = R::client(cube_device);
    let device = rewards.device();
    let [rows, horizon] = rewards.dims();
    let (returns, weights) = cube::lambda_returns(
        &client,
        &upload(rewards, &client),
        &upload(continues, &client),
        &upload(values, &client),
        rows,
        horizon,
        gamma,
        lambda,
    );
    let shape = [rows, horizon];
    LambdaReturns {
        returns: download(returns, shape, &client, cube_device, &device),
        weights: download(weights, shape, &client, cube_device, &device),
    }
}

/// Mean, variance and disagreement of `predictions` `[members, rows, width]` over
/// the members. A kernel on wgpu/CUDA devices, [`reference::ensemble_statistics`]
/// elsewhere; no gradient.
pub fn ensemble_statistics<B: Backend>(predictions: Tensor<B, 3>) -> EnsembleStatistics<B> {
    match route(&predictions.device()) {
        #[cfg(feature = "wgpu")]
        Route::Wgpu(device) => {
            devices::prepare_wgpu(&device);
            ensemble_statistics_on::<B, burn::backend::wgpu::WgpuRuntime>(&device, predictions)
        }
        #[cfg(feature = "cuda")]
        Route::Cuda(device) => {
            ensemble_statistics_on::<B, cubecl::cuda::CudaRuntime>(&device, predictions)
        }
        Route::Host => {
            let device = predictions.device();
            let [members, rows, width] = predictions.dims();
            let (mean, variance, disagreement) =
                reference::ensemble_statistics(&host(predictions), members, width);
            EnsembleStatistics {
                mean: from_host(mean, [rows, width], &device),
                variance: from_host(variance, [rows, width], &device),
                disagreement: from_host(disagreement, [rows], &device),
            }
        }
    }
}

fn ensemble_statistics_on<B: Backend, R: CubeRuntime>(
    cube_device: &R::Device,
    predictions: Tensor<B, 3>,
) -> EnsembleStatistics<B> {
    let client = R::client(cube_device);
    let device = predictions.device();
    let [members, rows, width] = predictions.dims();
    let (mean, variance, disagreement) =
        cube::ensemble_statistics(&client, &upload(predictions, &client), members, rows, width);
    EnsembleStatistics {
        mean: download(mean, [rows, width], &client, cube_device, &device),
        variance: download(variance, [rows, width], &client, cube_device, &device),
        disagreement: download(disagreement, [rows], &client, cube_device, &device),
    }
}

/// One SALT transition `z' = A z + o` for a batch: `matrices` `[B, D, D]` (`A[i][j]`
/// multiplies `z[j]` into `z'[i]`), `latents` and `offsets` `[B, D]`. A kernel on
/// wgpu/CUDA devices, [`reference::salt_step`] elsewhere; no gradient.
///
/// # Panics
/// If the shapes disagree (a programming error).
pub fn salt_step<B: Backend>(
    matrices: Tensor<B, 3>,
    latents: Tensor<B, 2>,
    offsets: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let [batch, dim] = latents.dims();
    assert_eq!(
        matrices.dims(),
        [batch, dim, dim],
        "one D x D matrix per latent"
    );
    assert_eq!(offsets.dims(), [batch, dim], "one offset per latent");
    match route(&latents.device()) {
        #[cfg(feature = "wgpu")]
        Route::Wgpu(device) => {
            devices::prepare_wgpu(&device);
            salt_step_on::<B, burn::backend::wgpu::WgpuRuntime>(&device, matrices, latents, offsets)
        }
        #[cfg(feature = "cuda")]
        Route::Cuda(device) => {
            salt_step_on::<B, cubecl::cuda::CudaRuntime>(&device, matrices, latents, offsets)
        }
        Route::Host => {
            let device = latents.device();
            let next = reference::salt_step(&host(matrices), &host(latents), &host(offsets), dim);
            from_host(next, [batch, dim], &device)
        }
    }
}

fn salt_step_on<B: Backend, R: CubeRuntime>(
    cube_device: &R::Device,
    matrices: Tensor<B, 3>,
    latents: Tensor<B, 2>,
    offsets: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let client = R::client(cube_device);
    let device = latents.device();
    let [batch, dim] = latents.dims();
    let next = cube::salt_step(
        &client,
        &upload(matrices, &client),
        &upload(latents, &client),
        &upload(offsets, &client),
        batch,
        dim,
    );
    download(next, [batch, dim], &client, cube_device, &device)
}
