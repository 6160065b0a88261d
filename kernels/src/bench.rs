//! Measures every kernel against the same computation in burn's composite tensor ops
//! (`imago bench --what kernels`). Each call is timed to completion (`Backend::sync`)
//! and the median of `steps` calls after two warm-up calls is reported.

use std::time::Instant;

use burn::Dispatch;
use burn::prelude::*;
use burn::tensor::TensorData;
use serde::Serialize;

use crate::{composite, ensemble_statistics, lambda_returns, salt_step};

/// Where the benchmark runs.
#[derive(Debug, Clone)]
pub enum KernelBenchDevice {
    /// burn-ndarray: composite ops against the plain Rust reference.
    Cpu,
    /// A wgpu device.
    #[cfg(feature = "wgpu")]
    Wgpu(burn::backend::wgpu::WgpuDevice),
    /// A CUDA device.
    #[cfg(feature = "cuda")]
    Cuda(burn::backend::cuda::CudaDevice),
}

/// One measured problem size of one kernel.
#[derive(Debug, Clone, Serialize)]
pub struct KernelBenchRow {
    /// Which computation.
    pub kernel: &'static str,
    /// The problem size, e.g. `128 x 8`.
    pub size: String,
    /// The device, e.g. `wgpu` or `cpu (ndarray)`.
    pub device: &'static str,
    /// Median milliseconds of the composite ops on burn's default backend for the
    /// device (fused on wgpu and CUDA, as `Dispatch` runs it).
    pub composite_ms: f64,
    /// Median milliseconds of the entry point on the plain CubeCL backend (no copy),
    /// or of the reference on the CPU.
    pub kernel_ms: f64,
    /// Median milliseconds of the entry point on `Dispatch` (one host copy each way on
    /// a GPU); `None` on the CPU, where it equals `kernel_ms`' route.
    pub dispatch_ms: Option<f64>,
}

impl KernelBenchRow {
    /// Composite time over kernel time: above 1 the kernel is faster.
    pub fn speedup(&self) -> f64 {
        self.composite_ms / self.kernel_ms
    }

    /// The rows as a Markdown table.
    pub fn table(rows: &[Self]) -> String {
        let mut out = String::from(
            "| kernel | size | device | composite ms | kernel ms | speed-up | via Dispatch ms |\n|---|---|---|---:|---:|---:|---:|\n",
        );
        for row in rows {
            out.push_str(&format!(
                "| {} | {} | {} | {:.3} | {:.3} | {:.2}x | {} |\n",
                row.kernel,
                row.size,
                row.device,
                row.composite_ms,
                row.kernel_ms,
                row.speedup(),
                row.dispatch_ms
                    .map_or("-".to_string(), |ms| format!("{ms:.3}")),
            ));
        }
        out
    }
}

/// The problem sizes measured: the fine-tuning critic's (batch 128, horizon 8,
/// latent 32, 5 members) and a large batch.
const SIZES: [(usize, usize); 2] = [(128, 8), (16384, 8)];
const MEMBERS: usize = 5;
const LATENT: usize = 32;

/// Measures the three kernels on `device`, `steps` timed calls per entry.
pub fn bench_kernels(device: &KernelBenchDevice, steps: usize) -> Vec<KernelBenchRow> {
    match device {
        KernelBenchDevice::Cpu => {
            let device = Default::default();
            measure::<burn::backend::NdArray, burn::backend::NdArray>(
                &device,
                &device,
                None,
                "cpu (ndarray)",
                steps,
            )
        }
        #[cfg(feature = "wgpu")]
        KernelBenchDevice::Wgpu(device) => {
            use burn::backend::wgpu::{CubeBackend, Wgpu, WgpuRuntime};
            crate::devices::prepare_wgpu(device);
            let dispatch = burn::DispatchDevice::Wgpu(device.clone());
            measure::<Wgpu, CubeBackend<WgpuRuntime, f32, i32, u32>>(
                device,
                device,
                Some(&dispatch),
                "wgpu",
                steps,
            )
        }
        #[cfg(feature = "cuda")]
        KernelBenchDevice::Cuda(device) => {
            use burn::backend::cuda::Cuda;
            let dispatch = burn::DispatchDevice::Cuda(device.clone());
            measure::<Cuda, burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>>(
                device,
                device,
                Some(&dispatch),
                "cuda",
                steps,
            )
        }
    }
}

/// Median milliseconds of `call` on fresh inputs from `setup` (made, and uploaded,
/// before the clock starts, so that no input is shared with an earlier call),
/// timed until the device has finished.
fn median_ms<B: Backend, I, T>(
    device: &B::Device,
    steps: usize,
    mut setup: impl FnMut() -> I,
    mut call: impl FnMut(I) -> T,
) -> f64 {
    let mut run = || {
        let inputs = setup();
        B::sync(device).expect("the device finishes its work");
        let start = Instant::now();
        let out = call(inputs);
        B::sync(device).expect("the device finishes its work");
        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        drop(out);
        elapsed
    };
    run();
    run();
    let mut times: Vec<f64> = (0..steps.max(1)).map(|_| run()).collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn random<B: Backend, const D: usize>(shape: [usize; D], device: &B::Device) -> Tensor<B, D> {
    let count = shape.iter().product::<usize>();
    let values: Vec<f32> = (0..count)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
        .collect();
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// Composite ops on `C`, the entry point on `K` and on `Dispatch` (when given).
fn measure<C: Backend, K: Backend>(
    composite_device: &C::Device,
    kernel_device: &K::Device,
    dispatch_device: Option<&burn::DispatchDevice>,
    label: &'static str,
    steps: usize,
) -> Vec<KernelBenchRow> {
    let mut rows = Vec::new();
    for (batch, horizon) in SIZES {
        for case in [Case::Scan, Case::Ensemble, Case::Salt] {
            rows.push(KernelBenchRow {
                kernel: case.name(),
                size: case.size(batch, horizon),
                device: label,
                composite_ms: median_ms::<C, _, _>(
                    composite_device,
                    steps,
                    || Inputs::<C>::new(case, batch, horizon, composite_device),
                    Inputs::composite,
                ),
                kernel_ms: median_ms::<K, _, _>(
                    kernel_device,
                    steps,
                    || Inputs::<K>::new(case, batch, horizon, kernel_device),
                    Inputs::kernel,
                ),
                dispatch_ms: dispatch_device.map(|d| {
                    median_ms::<Dispatch, _, _>(
                        d,
                        steps,
                        || Inputs::<Dispatch>::new(case, batch, horizon, d),
                        Inputs::kernel,
                    )
                }),
            });
        }
    }
    rows
}

/// The computations measured.
#[derive(Debug, Clone, Copy)]
enum Case {
    Scan,
    Ensemble,
    Salt,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Self::Scan => "lambda-return scan",
            Self::Ensemble => "ensemble statistics",
            Self::Salt => "SALT step",
        }
    }

    fn size(self, batch: usize, horizon: usize) -> String {
        match self {
            Self::Scan => format!("{batch} x {horizon}"),
            Self::Ensemble => format!("{MEMBERS} x {} x {LATENT}", batch * horizon),
            Self::Salt => format!("{batch} x {LATENT}"),
        }
    }
}

/// The inputs of one call: `batch` trajectories of `horizon` steps (scan), their
/// `batch x horizon` latents from every member (ensemble), `batch` latents (SALT).
enum Inputs<B: Backend> {
    Scan {
        rewards: Tensor<B, 2>,
        continues: Tensor<B, 2>,
        values: Tensor<B, 2>,
    },
    Ensemble(Tensor<B, 3>),
    Salt {
        matrices: Tensor<B, 3>,
        latents: Tensor<B, 2>,
        offsets: Tensor<B, 2>,
    },
}

/// What a call returns, kept until the device has finished (so that a fusing
/// backend cannot skip the work).
enum Outputs<B: Backend> {
    Returns(crate::LambdaReturns<B>),
    Statistics(crate::EnsembleStatistics<B>),
    Latents(Tensor<B, 2>),
}

impl<B: Backend> Inputs<B> {
    fn new(case: Case, batch: usize, horizon: usize, device: &B::Device) -> Self {
        match case {
            Case::Scan => Self::Scan {
                rewards: random([batch, horizon], device),
                continues: random([batch, horizon], device),
                values: random([batch, horizon + 1], device),
            },
            Case::Ensemble => Self::Ensemble(random([MEMBERS, batch * horizon, LATENT], device)),
            Case::Salt => Self::Salt {
                matrices: random([batch, LATENT, LATENT], device),
                latents: random([batch, LATENT], device),
                offsets: random([batch, LATENT], device),
            },
        }
    }

    /// The computation in burn's composite ops.
    fn composite(self) -> Outputs<B> {
        match self {
            Self::Scan {
                rewards,
                continues,
                values,
            } => Outputs::Returns(composite::lambda_returns(
                rewards, continues, values, 0.97, 0.95,
            )),
            Self::Ensemble(predictions) => {
                Outputs::Statistics(composite::ensemble_statistics(predictions))
            }
            Self::Salt {
                matrices,
                latents,
                offsets,
            } => Outputs::Latents(composite::salt_step(matrices, latents, offsets)),
        }
    }

    /// The computation through the entry point (kernel or reference).
    fn kernel(self) -> Outputs<B> {
        match self {
            Self::Scan {
                rewards,
                continues,
                values,
            } => Outputs::Returns(lambda_returns(rewards, continues, values, 0.97, 0.95)),
            Self::Ensemble(predictions) => Outputs::Statistics(ensemble_statistics(predictions)),
            Self::Salt {
                matrices,
                latents,
                offsets,
            } => Outputs::Latents(salt_step(matrices, latents, offsets)),
        }
    }
}
