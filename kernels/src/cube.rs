//! The CubeCL kernels and their launches on a cubecl client. One source compiles to
//! WGSL/SPIR-V (wgpu) and CUDA C++ (NVRTC); buffers are flat, row-major `f32`.

use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::{CubeCount, calculate_cube_count_elemwise};

/// One unit per trajectory: walks the horizon backwards accumulating the
/// lambda-return, then forwards accumulating the survival weight.
#[cube(launch)]
fn lambda_return_kernel(
    rewards: &Array<f32>,
    continues: &Array<f32>,
    values: &Array<f32>,
    returns: &mut Array<f32>,
    weights: &mut Array<f32>,
    rows: usize,
    horizon: usize,
    gamma: f32,
    lambda: f32,
) {
    let row = ABSOLUTE_POS;
    if row < rows {
        let base = row * horizon;
        let value_base = row * (horizon + 1);
        let keep = f32::new(1.0) - lambda;
        let mut next = values[value_base + horizon];
        for step in 0..horizon {
            let t = horizon - 1 - step;
            let bootstrap = keep * values[value_base + t + 1] + lambda * next;
            next = rewards[base + t] + gamma * continues[base + t] * bootstrap;
            returns[base + t] = next;
        }
        let mut alive = f32::new(1.0);
        for t in 0..horizon {
            weights[base + t] = alive;
            alive *= continues[base + t];
        }
    }
}

/// One unit per row: mean and variance over members of each of the row's `width`
/// elements (the variance divided by `dof`), and the row's mean standard deviation.
#[cube(launch)]
fn ensemble_statistics_kernel(
    predictions: &Array<f32>,
    mean: &mut Array<f32>,
    variance: &mut Array<f32>,
    disagreement: &mut Array<f32>,
    members: usize,
    rows: usize,
    width: usize,
    dof: f32,
) {
    let row = ABSOLUTE_POS;
    if row < rows {
        let stride = rows * width;
        let count = f32::cast_from(members);
        let mut spread = f32::new(0.0);
        for d in 0..width {
            let at = row * width + d;
            let mut sum = f32::new(0.0);
            for n in 0..members {
                sum += predictions[n * stride + at];
            }
            let m = sum / count;
            let mut squares = f32::new(0.0);
            for n in 0..members {
                let centred = predictions[n * stride + at] - m;
                squares += centred * centred;
            }
            let v = squares / dof;
            mean[at] = m;
            variance[at] = v;
            spread += f32::sqrt(v);
        }
        disagreement[row] = spread / f32::cast_from(width);
    }
}

/// One unit per output element `(b, i)`: `z'[b, i] = o[b, i] + sum_j A[b, i, j] z[b, j]`.
#[cube(launch)]
fn salt_step_kernel(
    matrices: &Array<f32>,
    latents: &Array<f32>,
    offsets: &Array<f32>,
    next: &mut Array<f32>,
    batch: usize,
    dim: usize,
) {
    let at = ABSOLUTE_POS;
    if at < batch * dim {
        let b = at / dim;
        let row = at * dim;
        let mut sum = offsets[at];
        for j in 0..dim {
            sum += matrices[row + j] * latents[b * dim + j];
        }
        next[at] = sum;
    }
}

/// Grid for `units` independent units of work.
fn grid<R: Runtime>(client: &ComputeClient<R>, units: usize) -> (CubeCount, CubeDim) {
    let cube_dim = CubeDim::new(client, units.max(1));
    let count = calculate_cube_count_elemwise(client, units.max(1), cube_dim);
    (count, cube_dim)
}

/// An `f32` output buffer of `len` elements.
fn output<R: Runtime>(client: &ComputeClient<R>, len: usize) -> Handle {
    client.empty(len.max(1) * size_of::<f32>())
}

/// # Safety (for the `from_raw_parts` below)
/// Every buffer passed holds at least the number of `f32` it is declared with: the
/// callers ([`crate::lambda_returns`] and friends) check the shapes first.
fn array<R: Runtime>(handle: &Handle, len: usize) -> ArrayArg<R> {
    unsafe { ArrayArg::from_raw_parts(handle.clone(), len) }
}

/// Launches the lambda-return scan; returns `(returns, weights)`, `rows x horizon`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn lambda_returns<R: Runtime>(
    client: &ComputeClient<R>,
    rewards: &Handle,
    continues: &Handle,
    values: &Handle,
    rows: usize,
    horizon: usize,
    gamma: f32,
    lambda: f32,
) -> (Handle, Handle) {
    let len = rows * horizon;
    let (returns, weights) = (output(client, len), output(client, len));
    let (count, cube_dim) = grid(client, rows);
    lambda_return_kernel::launch::<R>(
        client,
        count,
        cube_dim,
        array(rewards, len),
        array(continues, len),
        array(values, rows * (horizon + 1)),
        array(&returns, len),
        array(&weights, len),
        rows,
        horizon,
        gamma,
        lambda,
    );
    (returns, weights)
}

/// Launches the ensemble statistics; returns `(mean, variance, disagreement)`.
pub(crate) fn ensemble_statistics<R: Runtime>(
    client: &ComputeClient<R>,
    predictions: &Handle,
    members: usize,
    rows: usize,
    width: usize,
) -> (Handle, Handle, Handle) {
    let len = rows * width;
    let (mean, variance, disagreement) = (
        output(client, len),
        output(client, len),
        output(client, rows),
    );
    let (count, cube_dim) = grid(client, rows);
    ensemble_statistics_kernel::launch::<R>(
        client,
        count,
        cube_dim,
        array(predictions, members * len),
        array(&mean, len),
        array(&variance, len),
        array(&disagreement, rows),
        members,
        rows,
        width,
        (members.max(2) - 1) as f32,
    );
    (mean, variance, disagreement)
}

/// Launches one SALT step; returns the next latents, `batch x dim`.
pub(crate) fn salt_step<R: Runtime>(
    client: &ComputeClient<R>,
    matrices: &Handle,
    latents: &Handle,
    offsets: &Handle,
    batch: usize,
    dim: usize,
) -> Handle {
    let len = batch * dim;
    let next = output(client, len);
    let (count, cube_dim) = grid(client, len);
    salt_step_kernel::launch::<R>(
        client,
        count,
        cube_dim,
        array(matrices, len * dim),
        array(latents, len),
        array(offsets, len),
        array(&next, len),
        batch,
        dim,
    );
    next
}
