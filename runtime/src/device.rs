//! Run-time backend choice: `--device auto|cpu|wgpu[:N]|cuda[:N]`.
//!
//! Every model runs on burn's `Dispatch` backend, which forwards each operation to the
//! backend of the device it was created on. So the code is compiled once, and this
//! module only decides which device to create, checking first that the backend is
//! compiled in and that the device exists, so that a wrong choice is a one-line error
//! rather than a panic inside a driver thread.

use std::fmt;
use std::str::FromStr;

use burn::{DispatchDevice, backend::flex::FlexDevice, backend::ndarray::NdArrayDevice};
use thiserror::Error;

/// The CPU backends compiled into every build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuBackend {
    /// burn-flex: pure Rust, SIMD; the default, measured faster on the world model's
    /// and the policy's training steps and on the demo since the pixel pipeline runs
    /// on the host (docs/backends.md).
    Flex,
    /// burn-ndarray: the default until 2026-12-02, kept as `cpu:ndarray`.
    NdArray,
}

/// What the user asked for with `--device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// CUDA if compiled in and a device answers, else a hardware wgpu adapter, else CPU.
    Auto,
    /// A CPU backend.
    Cpu(CpuBackend),
    /// A wgpu adapter: `None` for the first hardware adapter or, failing that, the first
    /// adapter of any kind (software adapters such as lavapipe included).
    Wgpu(Option<usize>),
    /// The CUDA device with this index.
    Cuda(usize),
}

/// A `--device` value that does not parse, or a device that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeviceError {
    /// The text is not a device specification.
    #[error(
        "`{0}` is not a device; use auto, cpu, cpu:flex, cpu:ndarray, wgpu, wgpu:N, cuda or cuda:N"
    )]
    Syntax(String),
    /// The backend was left out of this build.
    #[error(
        "`{asked}` needs the `{feature}` backend, which this build does not include (it has: {available}); rebuild with `cargo build --release --features {feature}`"
    )]
    NotCompiled {
        /// What was asked for.
        asked: String,
        /// The cargo feature that adds it.
        feature: &'static str,
        /// Backends this build has.
        available: String,
    },
    /// The backend is compiled in but the device is absent.
    #[error("`{asked}`: {reason}; devices here: {available} (see `imago devices`)")]
    NoDevice {
        /// What was asked for.
        asked: String,
        /// Why it is not usable.
        reason: String,
        /// Devices this machine has.
        available: String,
    },
}

impl FromStr for DeviceSpec {
    type Err = DeviceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let lower = text.trim().to_ascii_lowercase();
        let (name, index) = match lower.split_once(':') {
            Some((name, index)) => (name, Some(index)),
            None => (lower.as_str(), None),
        };
        let number = |index: Option<&str>| -> Result<Option<usize>, DeviceError> {
            index
                .map(|i| {
                    i.parse::<usize>()
                        .map_err(|_| DeviceError::Syntax(text.to_string()))
                })
                .transpose()
        };
        match (name, index) {
            ("auto", None) => Ok(Self::Auto),
            ("cpu", None | Some("flex")) => Ok(Self::Cpu(CpuBackend::Flex)),
            ("cpu", Some("ndarray")) => Ok(Self::Cpu(CpuBackend::NdArray)),
            ("wgpu", index) => Ok(Self::Wgpu(number(index)?)),
            ("cuda", index) => Ok(Self::Cuda(number(index)?.unwrap_or(0))),
            _ => Err(DeviceError::Syntax(text.to_string())),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => write!(f, "auto"),
            Self::Cpu(CpuBackend::Flex) => write!(f, "cpu"),
            Self::Cpu(CpuBackend::NdArray) => write!(f, "cpu:ndarray"),
            Self::Wgpu(None) => write!(f, "wgpu"),
            Self::Wgpu(Some(i)) => write!(f, "wgpu:{i}"),
            Self::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// A device ready for models: where to infer and where to train.
#[derive(Debug, Clone)]
pub struct ResolvedDevice {
    /// One line saying what was chosen, e.g. `cpu (flex)` or `wgpu:0 (llvmpipe, cpu, vulkan)`.
    pub description: String,
    /// The device for inference.
    pub inference: DispatchDevice,
    /// The same device with automatic differentiation, for training.
    pub training: DispatchDevice,
}

impl ResolvedDevice {
    fn new(description: String, inference: DispatchDevice) -> Self {
        let training = DispatchDevice::autodiff(inference.clone());
        Self {
            description,
            inference,
            training,
        }
    }
}

/// One device this build could use on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceListing {
    /// What to pass to `--device`.
    pub spec: String,
    /// What it is.
    pub description: String,
}

/// Backends compiled into this build.
pub fn compiled_backends() -> Vec<&'static str> {
    let mut names = vec!["cpu"];
    if cfg!(feature = "wgpu") {
        names.push("wgpu");
    }
    if cfg!(feature = "cuda") {
        names.push("cuda");
    }
    names
}

/// Every device this build can use here, in `--device` syntax.
pub fn list_devices() -> Vec<DeviceListing> {
    let mut out = vec![
        DeviceListing {
            spec: "cpu".into(),
            description: "CPU, burn-flex (default CPU backend; also `cpu:flex`)".into(),
        },
        DeviceListing {
            spec: "cpu:ndarray".into(),
            description: "CPU, burn-ndarray".into(),
        },
    ];
    out.extend(
        wgpu_probe::adapters()
            .into_iter()
            .enumerate()
            .map(|(i, a)| DeviceListing {
                spec: format!("wgpu:{i}"),
                description: a.description(),
            }),
    );
    out.extend(cuda_probe::devices().into_iter().map(|i| DeviceListing {
        spec: format!("cuda:{i}"),
        description: "NVIDIA GPU through CUDA".into(),
    }));
    out
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn available_summary() -> String {
    list_devices()
        .into_iter()
        .map(|d| d.spec)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Turns a [`DeviceSpec`] into a usable device, or a clear error.
pub fn resolve(spec: DeviceSpec) -> Result<ResolvedDevice, DeviceError> {
    match spec {
        DeviceSpec::Auto => {
            if let Some(&index) = cuda_probe::devices().first() {
                return resolve(DeviceSpec::Cuda(index));
            }
            if let Some(index) = wgpu_probe::adapters().iter().position(|a| a.is_hardware()) {
                return resolve(DeviceSpec::Wgpu(Some(index)));
            }
            resolve(DeviceSpec::Cpu(CpuBackend::Flex))
        }
        DeviceSpec::Cpu(CpuBackend::Flex) => Ok(ResolvedDevice::new(
            "cpu (flex)".into(),
            DispatchDevice::Flex(FlexDevice),
        )),
        DeviceSpec::Cpu(CpuBackend::NdArray) => Ok(ResolvedDevice::new(
            "cpu (ndarray)".into(),
            DispatchDevice::NdArray(NdArrayDevice::Cpu),
        )),
        DeviceSpec::Wgpu(index) => wgpu_probe::resolve(spec, index),
        DeviceSpec::Cuda(index) => cuda_probe::resolve(spec, index),
    }
}

#[cfg(feature = "wgpu")]
mod wgpu_probe {
    use burn::backend::wgpu::WgpuDevice;

    use super::{DeviceError, DeviceSpec, ResolvedDevice, available_summary};

    /// One adapter as wgpu reports it.
    pub struct Adapter {
        info: wgpu::AdapterInfo,
        /// Index among adapters of the same type, as burn's `WgpuDevice` counts them.
        type_index: usize,
    }

    impl Adapter {
        pub fn is_hardware(&self) -> bool {
            matches!(
                self.info.device_type,
                wgpu::DeviceType::DiscreteGpu | wgpu::DeviceType::IntegratedGpu
            )
        }

        pub fn description(&self) -> String {
            format!(
                "{} ({:?}, {:?})",
                self.info.name, self.info.device_type, self.info.backend
            )
        }

        fn device(&self) -> WgpuDevice {
            match self.info.device_type {
                wgpu::DeviceType::DiscreteGpu => WgpuDevice::DiscreteGpu(self.type_index),
                wgpu::DeviceType::IntegratedGpu => WgpuDevice::IntegratedGpu(self.type_index),
                wgpu::DeviceType::VirtualGpu => WgpuDevice::VirtualGpu(self.type_index),
                _ => WgpuDevice::Cpu,
            }
        }
    }

    /// The graphics API used: Vulkan on Linux (Mesa's GL path deadlocks), the
    /// platform's native API elsewhere.
    fn backends() -> wgpu::Backends {
        if cfg!(target_os = "linux") {
            wgpu::Backends::VULKAN
        } else {
            wgpu::Backends::PRIMARY
        }
    }

    /// All adapters, in wgpu's enumeration order.
    pub fn adapters() -> Vec<Adapter> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: backends(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let mut seen: Vec<wgpu::DeviceType> = Vec::new();
        pollster::block_on(instance.enumerate_adapters(backends()))
            .into_iter()
            .map(|adapter| {
                let info = adapter.get_info();
                let type_index = seen.iter().filter(|&&t| t == info.device_type).count();
                seen.push(info.device_type);
                Adapter { info, type_index }
            })
            .filter(|a| a.info.device_type != wgpu::DeviceType::Other)
            .collect()
    }

    pub fn resolve(spec: DeviceSpec, index: Option<usize>) -> Result<ResolvedDevice, DeviceError> {
        let adapters = adapters();
        let chosen = match index {
            Some(i) => adapters.get(i),
            None => adapters
                .iter()
                .find(|a| a.is_hardware())
                .or(adapters.first()),
        };
        let Some(adapter) = chosen else {
            return Err(DeviceError::NoDevice {
                asked: spec.to_string(),
                reason: match index {
                    Some(i) => format!("there is no wgpu adapter {i} ({} found)", adapters.len()),
                    None => "no wgpu adapter found (on Linux install a Vulkan driver, e.g. `apt-get install mesa-vulkan-drivers`)".into(),
                },
                available: available_summary(),
            });
        };
        let device = adapter.device();
        imago_kernels::devices::prepare_wgpu(&device);
        let position = adapters
            .iter()
            .position(|a| std::ptr::eq(a, adapter))
            .unwrap_or(0);
        Ok(ResolvedDevice::new(
            format!("wgpu:{position} ({})", adapter.description()),
            burn::DispatchDevice::Wgpu(device),
        ))
    }
}

#[cfg(not(feature = "wgpu"))]
mod wgpu_probe {
    use super::{DeviceError, DeviceSpec, ResolvedDevice, compiled_backends};

    pub struct Adapter;

    impl Adapter {
        pub fn is_hardware(&self) -> bool {
            false
        }

        pub fn description(&self) -> String {
            String::new()
        }
    }

    pub fn adapters() -> Vec<Adapter> {
        Vec::new()
    }

    pub fn resolve(spec: DeviceSpec, _index: Option<usize>) -> Result<ResolvedDevice, DeviceError> {
        Err(DeviceError::NotCompiled {
            asked: spec.to_string(),
            feature: "wgpu",
            available: compiled_backends().join(", "),
        })
    }
}

#[cfg(feature = "cuda")]
mod cuda_probe {
    use burn::backend::cuda::CudaDevice;
    use imago_kernels::devices::{cuda_device_indices, cuda_driver_present};

    use super::{DeviceError, DeviceSpec, ResolvedDevice, available_summary};

    /// Indices of the NVIDIA devices the driver exposes.
    pub fn devices() -> Vec<usize> {
        cuda_device_indices()
    }

    pub fn resolve(spec: DeviceSpec, index: usize) -> Result<ResolvedDevice, DeviceError> {
        let reason = if !cuda_driver_present() {
            Some("the NVIDIA driver (libcuda.so.1) is not installed".to_string())
        } else if !devices().contains(&index) {
            Some(format!("there is no CUDA device {index}"))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(DeviceError::NoDevice {
                asked: spec.to_string(),
                reason,
                available: available_summary(),
            });
        }
        Ok(ResolvedDevice::new(
            format!("cuda:{index}"),
            burn::DispatchDevice::Cuda(CudaDevice::new(index)),
        ))
    }
}

#[cfg(not(feature = "cuda"))]
mod cuda_probe {
    use super::{DeviceError, DeviceSpec, ResolvedDevice, compiled_backends};

    pub fn devices() -> Vec<usize> {
        Vec::new()
    }

    pub fn resolve(spec: DeviceSpec, _index: usize) -> Result<ResolvedDevice, DeviceError> {
        Err(DeviceError::NotCompiled {
            asked: spec.to_string(),
            feature: "cuda",
            available: compiled_backends().join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_form() {
        assert_eq!("auto".parse(), Ok(DeviceSpec::Auto));
        assert_eq!("cpu".parse(), Ok(DeviceSpec::Cpu(CpuBackend::Flex)));
        assert_eq!(
            "CPU:ndarray".parse(),
            Ok(DeviceSpec::Cpu(CpuBackend::NdArray))
        );
        assert_eq!("cpu:flex".parse(), Ok(DeviceSpec::Cpu(CpuBackend::Flex)));
        assert_eq!("wgpu".parse(), Ok(DeviceSpec::Wgpu(None)));
        assert_eq!("wgpu:3".parse(), Ok(DeviceSpec::Wgpu(Some(3))));
        assert_eq!("cuda".parse(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!("cuda:1".parse(), Ok(DeviceSpec::Cuda(1)));
        for bad in ["gpu", "wgpu:x", "cuda:-1", "cpu:fast", ""] {
            let err = bad.parse::<DeviceSpec>().unwrap_err();
            assert!(err.to_string().contains("is not a device"), "{bad}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in ["auto", "cpu", "cpu:ndarray", "wgpu", "wgpu:2", "cuda:1"] {
            assert_eq!(text.parse::<DeviceSpec>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn a_missing_wgpu_adapter_is_a_one_line_error() {
        let err = resolve(DeviceSpec::Wgpu(Some(7))).unwrap_err();
        let message = err.to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(message.contains("wgpu:7"), "{message}");
    }

    #[test]
    fn cuda_without_driver_or_feature_is_a_one_line_error() {
        if !cuda_probe::devices().is_empty() {
            eprintln!("skipped: a CUDA device is present");
            return;
        }
        let message = resolve(DeviceSpec::Cuda(0)).unwrap_err().to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(message.contains("cuda"), "{message}");
    }

    #[test]
    fn cpu_always_resolves() {
        let device = resolve(DeviceSpec::Cpu(CpuBackend::NdArray)).unwrap();
        assert_eq!(device.description, "cpu (ndarray)");
    }
}
