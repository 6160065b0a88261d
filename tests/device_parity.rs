//! The wgpu backend computes what the CPU computes: one training step from the same
//! weights on the same batch. In CI (CI=true) a missing wgpu adapter is a failure.

use imago_runtime::device::{CpuBackend, DeviceSpec, resolve};
use imago_runtime::jobs::device_check::{PARITY_TOLERANCE, compare_training_step};
use imago_runtime::robot::RobotConfig;

#[test]
fn wgpu_training_step_matches_cpu() {
    if !cfg!(feature = "wgpu") {
        eprintln!("skipped: this build has no wgpu backend");
        return;
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let candidate = match resolve(DeviceSpec::Wgpu(None)) {
        Ok(device) => device,
        Err(e) if !in_ci => {
            eprintln!("skipped: no wgpu adapter ({e})");
            return;
        }
        Err(e) => panic!("CI needs a wgpu adapter (install mesa-vulkan-drivers): {e}"),
    };
    let reference = resolve(DeviceSpec::Cpu(CpuBackend::NdArray)).unwrap();
    let comparison =
        compare_training_step(&RobotConfig::default(), &reference, &candidate).unwrap();
    eprintln!(
        "{} vs {}: {comparison:?}",
        candidate.description, reference.description
    );
    assert!(comparison.agrees(PARITY_TOLERANCE), "{comparison:?}");
    assert!(comparison.loss.0.is_finite() && comparison.max_mean > 0.0);
}

#[test]
fn flex_training_step_matches_ndarray() {
    let reference = resolve(DeviceSpec::Cpu(CpuBackend::NdArray)).unwrap();
    let candidate = resolve(DeviceSpec::Cpu(CpuBackend::Flex)).unwrap();
    let comparison =
        compare_training_step(&RobotConfig::default(), &reference, &candidate).unwrap();
    assert!(comparison.agrees(PARITY_TOLERANCE), "{comparison:?}");
}
