//! SALT, the state-affine latent transition `z' = A(a) z + b(a)`.

use burn::prelude::*;
use imago_kernels::composite;

use crate::config::WorldModelConfig;
use crate::mlp::{Mlp, MlpConfig};

/// `z' = A(a) z + b(a)` with `A(a) = I + M(a)`: the action alone produces the matrix
/// and the offset, so the Jacobian of a step does not depend on the state and the
/// error of a multi-step rollout splits exactly (see [`SaltErrorSplit`]).
#[derive(Module, Debug)]
pub struct Salt<B: Backend> {
    /// `a -> [vec(M(a)), b(a)]`.
    pub(crate) affine: Mlp<B>,
    pub(crate) latent_dim: usize,
}

/// The error of an open-loop SALT rollout at every horizon `h = 1..H`, split into the
/// error injected by step `h` and the earlier error that step `h` propagated:
/// `total_h = injected_h + propagated_h`, where, with `z*` the true latents and `ẑ` the
/// rollout (`ẑ_0` given), `injected_h = z*_h - (A_h z*_{h-1} + b_h)` and
/// `propagated_h = A_h (z*_{h-1} - ẑ_{h-1})`. The identity is exact because the step
/// is affine in the state.
#[derive(Debug, Clone)]
pub struct SaltErrorSplit<B: Backend> {
    /// `z*_h - ẑ_h`, `[B, H, D]`.
    pub total: Tensor<B, 3>,
    /// Error injected by step `h` alone, `[B, H, D]`.
    pub injected: Tensor<B, 3>,
    /// Earlier error carried through step `h`, `[B, H, D]`.
    pub propagated: Tensor<B, 3>,
}

impl<B: Backend> Salt<B> {
    /// A freshly initialised member for `config`; `A(a)` starts near the identity.
    pub fn new(config: &WorldModelConfig, device: &B::Device) -> Self {
        let d = config.latent_dim;
        Self {
            affine: MlpConfig::new(config.action_dim(), config.hidden, d * d + d)
                .with_output_init_std(Some(1e-3))
                .init(device),
            latent_dim: d,
        }
    }

    /// `A(a)` `[B, D, D]` and `b(a)` `[B, D]` for actions `[B, A]`.
    pub fn affine(&self, action: Tensor<B, 2>) -> (Tensor<B, 3>, Tensor<B, 2>) {
        let (displacement, offset) = self.displacement(action);
        let d = self.latent_dim;
        let identity = Tensor::<B, 2>::eye(d, &offset.device()).unsqueeze_dim::<3>(0);
        (displacement + identity, offset)
    }

    /// `M(a) = A(a) - I` `[B, D, D]` and `b(a)` `[B, D]` for actions `[B, A]`.
    fn displacement(&self, action: Tensor<B, 2>) -> (Tensor<B, 3>, Tensor<B, 2>) {
        let d = self.latent_dim;
        let batch = action.dims()[0];
        let out = self.affine.forward(action);
        let matrix = out.clone().narrow(1, 0, d * d).reshape([batch, d, d]);
        let offset = out.narrow(1, d * d, d);
        (matrix, offset)
    }

    /// The next latent `[B, D]` from latents `[B, D]` and actions `[B, A]`, as
    /// `z + M(a) z + b(a)`: the same map as `A(a) z + b(a)` without adding the
    /// identity to every matrix, which on burn-flex took a strided broadcast path, 9%
    /// of a SALT world-model training step (docs/performance.md).
    pub fn step(&self, latent: Tensor<B, 2>, action: Tensor<B, 2>) -> Tensor<B, 2> {
        let (displacement, offset) = self.displacement(action);
        composite::salt_step(displacement, latent.clone(), offset) + latent
    }

    /// Latents `[B, H, D]` reached after each of `actions` `[B, H, A]` from `latent`
    /// `[B, D]`, open loop. The affine maps depend on the actions alone, so one pass of
    /// the MLP over all `H x B` actions makes them (step-major, so that each step's
    /// maps are a contiguous block of rows), then `H` matrix-vector steps follow.
    pub fn rollout(&self, latent: Tensor<B, 2>, actions: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, horizon, action_dim] = actions.dims();
        let step_major = actions
            .swap_dims(0, 1)
            .reshape([horizon * batch, action_dim]);
        let (displacements, offsets) = self.displacement(step_major);
        let mut latent = latent;
        let mut steps = Vec::with_capacity(horizon);
        for h in 0..horizon {
            let displacement = displacements.clone().narrow(0, h * batch, batch);
            let offset = offsets.clone().narrow(0, h * batch, batch);
            latent = composite::salt_step(displacement, latent.clone(), offset) + latent;
            steps.push(latent.clone());
        }
        Tensor::stack(steps, 1)
    }

    /// Rolls open loop from `start` `[B, D]` under `actions` `[B, H, A]` and splits the
    /// error against `true_latents` `[B, H + 1, D]` (index 0: the true start) at every
    /// horizon. A `start` that differs from the true start adds its error to the
    /// propagated part of the first step.
    pub fn split_error(
        &self,
        true_latents: Tensor<B, 3>,
        actions: Tensor<B, 3>,
        start: Tensor<B, 2>,
    ) -> SaltErrorSplit<B> {
        let [batch, horizon, _] = actions.dims();
        let d = self.latent_dim;
        let truth = |h: usize| true_latents.clone().narrow(1, h, 1).reshape([batch, d]);
        let mut predicted = start;
        let (mut total, mut injected, mut propagated) = (vec![], vec![], vec![]);
        for h in 0..horizon {
            let action = actions
                .clone()
                .narrow(1, h, 1)
                .reshape([batch, actions.dims()[2]]);
            let (matrix, offset) = self.affine(action);
            let previous_truth = truth(h);
            let carried = apply(&matrix, previous_truth.clone() - predicted.clone());
            let one_step = apply(&matrix, previous_truth) + offset.clone();
            predicted = apply(&matrix, predicted) + offset;
            let next_truth = truth(h + 1);
            injected.push(next_truth.clone() - one_step);
            propagated.push(carried);
            total.push(next_truth - predicted.clone());
        }
        SaltErrorSplit {
            total: Tensor::stack(total, 1),
            injected: Tensor::stack(injected, 1),
            propagated: Tensor::stack(propagated, 1),
        }
    }
}

/// `matrix @ vector` for batches: `[B, D, D] x [B, D] -> [B, D]`.
fn apply<B: Backend>(matrix: &Tensor<B, 3>, vector: Tensor<B, 2>) -> Tensor<B, 2> {
    let [batch, d] = vector.dims();
    matrix
        .clone()
        .matmul(vector.reshape([batch, d, 1]))
        .reshape([batch, d])
}
