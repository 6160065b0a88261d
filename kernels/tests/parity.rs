//! Every kernel against its plain Rust reference, on every backend this build and
//! machine have: the CPU (reference route, checked against the composite ops),
//! wgpu (lavapipe in CI; under `CI=true` a missing adapter is a failure) and CUDA
//! (with `--features cuda` on a machine with an NVIDIA driver; skipped otherwise,
//! except under `IMAGO_REQUIRE_CUDA=1`, as `scripts/gpu-check.sh` runs it).

use burn::prelude::*;
use burn::tensor::TensorData;
use imago_kernels::{composite, ensemble_statistics, lambda_returns, reference, salt_step};

/// Deterministic values in `[low, high)`.
fn values(count: usize, seed: u64, low: f32, high: f32) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            low + (high - low) * ((state >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

fn tensor<B: Backend, const D: usize>(
    data: &[f32],
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(data.to_vec(), shape), device)
}

fn read<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().into_vec().unwrap()
}

/// Largest difference relative to `max(1, |expected|)`.
fn assert_close(what: &str, actual: &[f32], expected: &[f32], tolerance: f32) {
    assert_eq!(actual.len(), expected.len(), "{what}: lengths");
    let worst = actual
        .iter()
        .zip(expected)
        .map(|(a, e)| (a - e).abs() / e.abs().max(1.0))
        .fold(0.0f32, f32::max);
    assert!(
        worst <= tolerance,
        "{what}: largest relative difference {worst} > {tolerance}"
    );
}

/// Kernels (through the entry points) on `device` against the references, on shapes
/// that do not fill whole workgroups, and an empty batch.
fn check_against_reference<B: Backend>(device: &B::Device, label: &str) {
    let tolerance = 1e-5;
    for (rows, horizon) in [(300, 15), (1, 1), (0, 8)] {
        let rewards = values(rows * horizon, 1, -1.0, 1.0);
        let continues: Vec<f32> = values(rows * horizon, 2, 0.0, 1.0)
            .into_iter()
            .map(|c| if c < 0.1 { 0.0 } else { c.max(0.5) })
            .collect();
        let state_values = values(rows * (horizon + 1), 3, -2.0, 2.0);
        let out = lambda_returns(
            tensor::<B, 2>(&rewards, [rows, horizon], device),
            tensor::<B, 2>(&continues, [rows, horizon], device),
            tensor::<B, 2>(&state_values, [rows, horizon + 1], device),
            0.97,
            0.95,
        );
        let (returns, weights) = reference::lambda_returns_batch(
            &rewards,
            &continues,
            &state_values,
            horizon,
            0.97,
            0.95,
        );
        assert_eq!(out.returns.dims(), [rows, horizon]);
        assert_close(
            &format!("{label} returns {rows}x{horizon}"),
            &read(out.returns),
            &returns,
            tolerance,
        );
        assert_close(
            &format!("{label} weights {rows}x{horizon}"),
            &read(out.weights),
            &weights,
            tolerance,
        );
    }
    for (members, rows, width) in [(5, 203, 24), (1, 3, 4), (2, 0, 8)] {
        let predictions = values(members * rows * width, 4, -3.0, 3.0);
        let out = ensemble_statistics(tensor::<B, 3>(&predictions, [members, rows, width], device));
        let (mean, variance, disagreement) =
            reference::ensemble_statistics(&predictions, members, width);
        let what = format!("{label} ensemble {members}x{rows}x{width}");
        assert_close(&format!("{what} mean"), &read(out.mean), &mean, tolerance);
        assert_close(
            &format!("{what} variance"),
            &read(out.variance),
            &variance,
            tolerance,
        );
        assert_close(
            &format!("{what} disagreement"),
            &read(out.disagreement),
            &disagreement,
            tolerance,
        );
    }
    for (batch, dim) in [(130, 16), (1, 1), (0, 4)] {
        let matrices = values(batch * dim * dim, 5, -1.0, 1.0);
        let latents = values(batch * dim, 6, -2.0, 2.0);
        let offsets = values(batch * dim, 7, -0.5, 0.5);
        let out = salt_step(
            tensor::<B, 3>(&matrices, [batch, dim, dim], device),
            tensor::<B, 2>(&latents, [batch, dim], device),
            tensor::<B, 2>(&offsets, [batch, dim], device),
        );
        let expected = reference::salt_step(&matrices, &latents, &offsets, dim);
        assert_close(
            &format!("{label} salt {batch}x{dim}"),
            &read(out),
            &expected,
            tolerance,
        );
    }
}

#[test]
fn references_match_the_composite_ops_on_the_cpu() {
    type B = burn::backend::NdArray;
    let device = Default::default();
    check_against_reference::<B>(&device, "ndarray");
    let (rows, horizon) = (64, 12);
    let rewards = values(rows * horizon, 11, -1.0, 1.0);
    let continues = values(rows * horizon, 12, 0.0, 1.0);
    let state_values = values(rows * (horizon + 1), 13, -1.0, 1.0);
    let composite = composite::lambda_returns(
        tensor::<B, 2>(&rewards, [rows, horizon], &device),
        tensor::<B, 2>(&continues, [rows, horizon], &device),
        tensor::<B, 2>(&state_values, [rows, horizon + 1], &device),
        0.9,
        0.8,
    );
    let (returns, weights) =
        reference::lambda_returns_batch(&rewards, &continues, &state_values, horizon, 0.9, 0.8);
    assert_close(
        "composite returns",
        &read(composite.returns),
        &returns,
        1e-5,
    );
    assert_close(
        "composite weights",
        &read(composite.weights),
        &weights,
        1e-5,
    );

    let (members, rows, width) = (5, 40, 32);
    let predictions = values(members * rows * width, 14, -2.0, 2.0);
    let composite = composite::ensemble_statistics(tensor::<B, 3>(
        &predictions,
        [members, rows, width],
        &device,
    ));
    let (mean, variance, disagreement) =
        reference::ensemble_statistics(&predictions, members, width);
    assert_close("composite mean", &read(composite.mean), &mean, 1e-5);
    assert_close(
        "composite variance",
        &read(composite.variance),
        &variance,
        1e-5,
    );
    assert_close(
        "composite disagreement",
        &read(composite.disagreement),
        &disagreement,
        1e-5,
    );

    let (batch, dim) = (20, 8);
    let matrices = values(batch * dim * dim, 15, -1.0, 1.0);
    let latents = values(batch * dim, 16, -1.0, 1.0);
    let offsets = values(batch * dim, 17, -1.0, 1.0);
    let composite = composite::salt_step(
        tensor::<B, 3>(&matrices, [batch, dim, dim], &device),
        tensor::<B, 2>(&latents, [batch, dim], &device),
        tensor::<B, 2>(&offsets, [batch, dim], &device),
    );
    let expected = reference::salt_step(&matrices, &latents, &offsets, dim);
    assert_close("composite salt", &read(composite), &expected, 1e-5);
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use burn::backend::wgpu::{CubeBackend, Wgpu, WgpuDevice, WgpuRuntime};
    use burn::{Dispatch, DispatchDevice};
    use imago_kernels::devices::{is_wgpu, prepare_wgpu};

    use super::check_against_reference;

    /// Whether a wgpu adapter exists (Vulkan on Linux, as imago selects); without one
    /// the test skips, except under `CI=true` where it fails.
    fn adapter_present() -> bool {
        let backends = if cfg!(target_os = "linux") {
            wgpu::Backends::VULKAN
        } else {
            wgpu::Backends::PRIMARY
        };
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let found = !pollster::block_on(instance.enumerate_adapters(backends)).is_empty();
        if !found {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "no wgpu adapter under CI=true: install mesa-vulkan-drivers"
            );
            eprintln!("skipped: no wgpu adapter on this machine");
        }
        found
    }

    #[test]
    fn kernels_match_the_reference_on_wgpu() {
        if !adapter_present() {
            return;
        }
        let device = WgpuDevice::DefaultDevice;
        prepare_wgpu(&device);
        // Every one of these devices takes the kernel route (the reference would pass
        // the comparisons below too).
        let dispatch = DispatchDevice::Wgpu(device.clone());
        assert!(is_wgpu(&device));
        assert!(is_wgpu(&dispatch));
        assert!(is_wgpu(&DispatchDevice::autodiff(dispatch.clone())));
        assert!(!is_wgpu(&DispatchDevice::NdArray(Default::default())));
        // Zero-copy: the kernel reads and writes the backend's own buffers.
        check_against_reference::<CubeBackend<WgpuRuntime, f32, i32, u32>>(&device, "wgpu");
        // Fused backend and the run-time dispatch backend the runtime uses: one host
        // copy each way around the kernel.
        check_against_reference::<Wgpu>(&device, "wgpu fusion");
        check_against_reference::<Dispatch>(&dispatch, "dispatch wgpu");
        check_against_reference::<Dispatch>(
            &DispatchDevice::autodiff(dispatch),
            "dispatch autodiff wgpu",
        );
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use burn::backend::cuda::{Cuda, CudaDevice};
    use burn::{Dispatch, DispatchDevice};
    use burn_cubecl::CubeBackend;
    use cubecl::cuda::CudaRuntime;
    use imago_kernels::devices::cuda_device_indices;

    use super::check_against_reference;

    #[test]
    fn kernels_match_the_reference_on_cuda() {
        let Some(&index) = cuda_device_indices().first() else {
            assert!(
                std::env::var("IMAGO_REQUIRE_CUDA").as_deref() != Ok("1"),
                "IMAGO_REQUIRE_CUDA=1 but no NVIDIA driver or CUDA device answers"
            );
            eprintln!("skipped: no NVIDIA driver or CUDA device on this machine");
            return;
        };
        let device = CudaDevice::new(index);
        check_against_reference::<CubeBackend<CudaRuntime, f32, i32, u8>>(&device, "cuda");
        check_against_reference::<Cuda>(&device, "cuda fusion");
        check_against_reference::<Dispatch>(&DispatchDevice::Cuda(device), "dispatch cuda");
    }
}
