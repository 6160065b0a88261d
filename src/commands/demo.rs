//! `imago demo`.

use std::path::PathBuf;

use clap::Args;
use imago_runtime::device::DeviceSpec;
use imago_runtime::jobs::demo::{DemoOptions, run_demo};
use imago_runtime::telemetry::TelemetryConfig;

use crate::args::{RerunArgs, RobotArgs, write_json};

/// Flags of `imago demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The reduced demo (about 1 minute on 2 CPU cores; the full one about 2).
    #[arg(long)]
    quick: bool,
    /// Also write the figures as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Where the replay and the checkpoints go. A previous demo run there is
    /// replaced once this one is complete; anything else is refused (see --force).
    /// `--out`, as `collect` and `train` call their output, is taken too.
    #[arg(long, visible_alias = "out", default_value = "imago-runs/demo")]
    run_dir: PathBuf,
    /// Replace what --run-dir holds even when it is not a demo run (it is kept
    /// until the new run is complete).
    #[arg(long)]
    force: bool,
    /// Seed of the whole run.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    robot: RobotArgs,
    #[command(flatten)]
    rerun: RerunArgs,
}

/// Runs the demo and prints its table.
pub fn run(args: DemoArgs, device: DeviceSpec) -> anyhow::Result<()> {
    let robot = args.robot.resolve()?;
    let session = args.rerun.start(&TelemetryConfig::default())?;
    let outcome = run_demo(&DemoOptions {
        robot,
        quick: args.quick,
        device,
        run_dir: args.run_dir,
        force: args.force,
        seed: args.seed,
        telemetry: session.handle(),
    })?;
    print!("{}", outcome.table());
    if let Some(path) = args.report {
        write_json(&path, &outcome)?;
    }
    args.rerun.finish(session)
}
