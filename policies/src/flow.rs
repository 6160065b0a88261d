//! Flow matching (rectified flow): the straight path from noise to data, its target
//! velocity, time features, and the Euler sampler that integrates a learnt velocity
//! field from noise (`tau = 0`) to an action chunk (`tau = 1`).

use burn::prelude::*;

/// A point on the straight path from `noise` to `data` at times `tau` `[B]`, and the
/// path's velocity there: `x = (1 - tau) noise + tau data`, `u = data - noise`.
pub fn flow_path<B: Backend>(
    noise: Tensor<B, 2>,
    data: Tensor<B, 2>,
    tau: Tensor<B, 1>,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let t = tau.unsqueeze_dim::<2>(1);
    let x = noise.clone() * (t.clone().neg() + 1.0) + data.clone() * t;
    (x, data - noise)
}

/// Sine and cosine features of times `tau` `[B]` at `count` octaves (`pi 2^i tau`),
/// plus `tau` itself: `[B, 2 count + 1]`. Smooth, so the network can tell early
/// (noise-like) from late (action-like) points apart.
pub fn time_features<B: Backend>(tau: Tensor<B, 1>, count: usize) -> Tensor<B, 2> {
    let t = tau.unsqueeze_dim::<2>(1);
    let mut features = vec![t.clone()];
    for i in 0..count {
        let angle = t.clone() * (std::f64::consts::PI * 2f64.powi(i as i32));
        features.push(angle.clone().sin());
        features.push(angle.cos());
    }
    Tensor::cat(features, 1)
}

/// Integrates `velocity(x, tau)` from `noise` at `tau = 0` to `tau = 1` in `steps`
/// equal Euler steps. Starting from zero noise gives a deterministic sample (the flow's
/// image of the noise mode), which is what evaluation uses.
pub fn euler_sample<B: Backend>(
    velocity: impl Fn(Tensor<B, 2>, Tensor<B, 1>) -> Tensor<B, 2>,
    noise: Tensor<B, 2>,
    steps: usize,
) -> Tensor<B, 2> {
    let [batch, _] = noise.dims();
    let device = noise.device();
    let dt = 1.0 / steps.max(1) as f64;
    let mut x = noise;
    for i in 0..steps.max(1) {
        let tau = Tensor::<B, 1>::full([batch], i as f64 * dt, (&device, x.dtype()));
        x = x.clone() + velocity(x, tau) * dt;
    }
    x
}
