//! The wgpu device the shaders run on.

use crate::ShaderError;

/// The graphics API: Vulkan on Linux (Mesa's GL path deadlocks), the platform's
/// native API elsewhere.
fn backends() -> wgpu::Backends {
    if cfg!(target_os = "linux") {
        wgpu::Backends::VULKAN
    } else {
        wgpu::Backends::PRIMARY
    }
}

/// A wgpu device and its queue, with the adapter's name.
pub struct GpuContext {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    adapter: wgpu::AdapterInfo,
}

impl GpuContext {
    /// The first adapter wgpu offers (a hardware GPU when there is one, else a
    /// software adapter such as lavapipe) and a device on it.
    pub fn new() -> Result<Self, ShaderError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: backends(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
        }))
        .map_err(|e| ShaderError::NoAdapter(e.to_string()))?;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("imago-shaders"),
            ..Default::default()
        }))
        .map_err(|e| ShaderError::Device(e.to_string()))?;
        Ok(Self {
            device,
            queue,
            adapter: adapter.get_info(),
        })
    }

    /// The adapter's name and kind, for reports.
    pub fn description(&self) -> String {
        format!("{} ({:?})", self.adapter.name, self.adapter.device_type)
    }
}
