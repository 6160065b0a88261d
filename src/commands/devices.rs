//! `imago devices`.

use clap::Args;
use imago_runtime::device::{CpuBackend, DeviceSpec, list_devices, resolve};
use imago_runtime::jobs::device_check::{PARITY_TOLERANCE, compare_training_step};

use crate::args::RobotArgs;

/// Flags of `imago devices`.
#[derive(Debug, Args)]
pub struct DevicesArgs {
    /// Also run one training step on `--device` and on the CPU and compare them.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    robot: RobotArgs,
}

/// Lists the devices and, with `--check`, compares a training step with the CPU's.
pub fn run(args: DevicesArgs, device: DeviceSpec) -> anyhow::Result<()> {
    println!(
        "backends compiled in: {}",
        imago_runtime::device::compiled_backends().join(", ")
    );
    for device in list_devices() {
        println!("{:<12} {}", device.spec, device.description);
    }
    match resolve(DeviceSpec::Auto) {
        Ok(device) => println!("auto picks: {}", device.description),
        Err(e) => println!("auto picks nothing: {e}"),
    }
    if !args.check {
        return Ok(());
    }
    let robot = args.robot.resolve()?;
    let candidate = resolve(device)?;
    let reference = resolve(DeviceSpec::Cpu(CpuBackend::NdArray))?;
    let comparison = compare_training_step(&robot, &reference, &candidate)?;
    let agrees = comparison.agrees(PARITY_TOLERANCE);
    println!(
        "training step on {} vs {}: loss {:.5} vs {:.5}, largest prediction difference {:.2e}: {}",
        candidate.description,
        reference.description,
        comparison.loss.1,
        comparison.loss.0,
        comparison.max_mean_difference,
        if agrees { "agrees" } else { "DISAGREES" }
    );
    anyhow::ensure!(
        agrees,
        "{} does not compute what the CPU computes",
        candidate.description
    );
    Ok(())
}
