//! Choosing where an entry point computes: a CubeCL kernel on a wgpu or CUDA device,
//! or the plain Rust reference for every other device (the CPU backends).

use std::any::Any;

/// Where a computation on a tensor of some backend runs.
pub(crate) enum Route {
    /// A CubeCL kernel on this wgpu device.
    #[cfg(feature = "wgpu")]
    Wgpu(burn::backend::wgpu::WgpuDevice),
    /// A CubeCL kernel on this CUDA device.
    #[cfg(feature = "cuda")]
    Cuda(burn::backend::cuda::CudaDevice),
    /// The plain Rust reference on the host.
    Host,
}

/// The route for tensors on `device` (a backend's device): recognises the devices of
/// burn's wgpu and CUDA backends (plain, fused or autodiff-wrapped) and of `Dispatch`
/// on them.
pub(crate) fn route(device: &dyn Any) -> Route {
    if let Some(dispatch) = device.downcast_ref::<burn::DispatchDevice>() {
        return dispatch_route(dispatch);
    }
    #[cfg(feature = "wgpu")]
    if let Some(wgpu) = device.downcast_ref::<burn::backend::wgpu::WgpuDevice>() {
        return Route::Wgpu(wgpu.clone());
    }
    #[cfg(feature = "cuda")]
    if let Some(cuda) = device.downcast_ref::<burn::backend::cuda::CudaDevice>() {
        return Route::Cuda(cuda.clone());
    }
    Route::Host
}

fn dispatch_route(device: &burn::DispatchDevice) -> Route {
    match device {
        burn::DispatchDevice::Autodiff(inner) => dispatch_route(inner),
        #[cfg(feature = "wgpu")]
        burn::DispatchDevice::Wgpu(wgpu) => Route::Wgpu(wgpu.clone()),
        #[cfg(feature = "cuda")]
        burn::DispatchDevice::Cuda(cuda) => Route::Cuda(cuda.clone()),
        _ => Route::Host,
    }
}
