//! WGSL pipelines for the wgpu path: reacher2d camera frames for a batch of simulated
//! robots rendered in one compute dispatch, matching the CPU reference renderer
//! (`imago_robots::reacher2d::render`) pixel for pixel up to float rounding on shape
//! edges. See `docs/kernels.md`.

mod gpu;
mod reacher2d;

pub use gpu::GpuContext;
pub use reacher2d::Reacher2dRenderer;

/// Why a shader could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShaderError {
    /// No wgpu adapter answered.
    #[error(
        "no wgpu adapter ({0}); on Linux install a Vulkan driver (mesa-vulkan-drivers gives a CPU one)"
    )]
    NoAdapter(String),
    /// The adapter refused a device.
    #[error("the wgpu adapter refused a device: {0}")]
    Device(String),
    /// Reading the result back failed.
    #[error("reading the frames back from the GPU failed: {0}")]
    Readback(String),
    /// The request does not fit the device.
    #[error("{0}")]
    TooLarge(String),
}
