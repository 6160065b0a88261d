//! Getting GPU devices ready for kernels (and for burn): the wgpu device is set up
//! with an explicit graphics API once per process, and the CUDA driver is probed for
//! before any CUDA device is created (burn-cuda panics inside a device thread
//! without it).

use std::any::Any;
use std::path::Path;

use crate::route::{Route, route};

/// Whether `device` (any backend's device, `Dispatch`'s included) is a wgpu device,
/// where the kernels and the batched WGSL renderer run.
pub fn is_wgpu(device: &dyn Any) -> bool {
    match route(device) {
        #[cfg(feature = "wgpu")]
        Route::Wgpu(_) => true,
        _ => false,
    }
}

/// Sets up the compute server of a wgpu `device` with Vulkan on Linux (Mesa's GL
/// path deadlocks) and the platform's native API elsewhere, once per process
/// (setting it up twice panics inside cubecl). Call before the first tensor or
/// kernel touches the device.
#[cfg(feature = "wgpu")]
pub fn prepare_wgpu(device: &burn::backend::wgpu::WgpuDevice) {
    use burn::backend::wgpu::{RuntimeOptions, WgpuDevice, graphics, init_setup};
    use std::sync::Mutex;

    static PREPARED: Mutex<Vec<WgpuDevice>> = Mutex::new(Vec::new());
    let mut done = PREPARED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if done.contains(device) {
        return;
    }
    if cfg!(target_os = "linux") {
        init_setup::<graphics::Vulkan>(device, RuntimeOptions::default());
    } else {
        init_setup::<graphics::AutoGraphicsApi>(device, RuntimeOptions::default());
    }
    done.push(device.clone());
}

/// Where NVIDIA's driver library is installed on the systems imago runs on.
const CUDA_DRIVER_DIRS: [&str; 6] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/local/nvidia/lib64",
    "/usr/local/cuda/lib64",
    "/usr/lib/wsl/lib",
];

/// Whether the CUDA driver library (`libcuda.so.1`) is where the loader looks,
/// `LD_LIBRARY_PATH` included.
pub fn cuda_driver_present() -> bool {
    let extra = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    CUDA_DRIVER_DIRS
        .iter()
        .map(|d| d.to_string())
        .chain(extra.split(':').filter(|d| !d.is_empty()).map(String::from))
        .any(|dir| {
            Path::new(&dir).join("libcuda.so.1").exists()
                || Path::new(&dir).join("libcuda.so").exists()
        })
}

/// Indices of the NVIDIA devices the driver exposes (`/dev/nvidiaN`); empty without
/// the driver library.
pub fn cuda_device_indices() -> Vec<usize> {
    if !cuda_driver_present() {
        return Vec::new();
    }
    (0..64)
        .filter(|i| Path::new(&format!("/dev/nvidia{i}")).exists())
        .collect()
}
