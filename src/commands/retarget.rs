//! `imago retarget`.

use std::path::PathBuf;

use clap::Args;
use imago_runtime::device::{DeviceSpec, resolve};
use imago_runtime::jobs::retarget::retarget_policy;
use imago_runtime::store::outputs::OutputPath;

use crate::args::RobotArgs;

/// Flags of `imago retarget`.
#[derive(Debug, Args)]
pub struct RetargetArgs {
    /// The policy checkpoint directory (only read).
    #[arg(long)]
    ckpt: PathBuf,
    #[command(flatten)]
    robot: RobotArgs,
    /// The new checkpoint directory.
    #[arg(long)]
    out: PathBuf,
    /// Replace what --out holds (it is kept until the new checkpoint is complete).
    #[arg(long)]
    force: bool,
}

/// Writes the retargeted checkpoint and says what it reads.
pub fn run(args: RetargetArgs, device: DeviceSpec) -> anyhow::Result<()> {
    let robot = args.robot.resolve()?;
    let device = resolve(device)?;
    let spec = robot.spec();
    let done = retarget_policy(
        &args.ckpt,
        &spec,
        OutputPath {
            path: &args.out,
            force: args.force,
        },
        &device,
    )?;
    println!(
        "{} as a policy for {}: reads {}{}; checkpoint version {} in {}",
        args.ckpt.display(),
        spec.summary(),
        done.reads.join(", "),
        if done.dropped_keypoint_targets {
            " (its keypoint readout left out: the robot does not give its targets)"
        } else {
            ""
        },
        done.version,
        args.out.display()
    );
    Ok(())
}
