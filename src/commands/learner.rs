//! `imago learner`.

use std::path::PathBuf;

use clap::Args;
use imago_runtime::device::DeviceSpec;
use imago_runtime::engine::daemon::DaemonOptions;
use imago_runtime::engine::fleet::DEFAULT_FLEET_KEY;
use imago_runtime::engine::fleet::learner::run_fleet_learner;
use imago_runtime::telemetry::Telemetry;

use crate::args::{daemon_start, flag_link, write_json};

/// Flags of `imago learner`.
#[derive(Debug, Args)]
pub struct LearnerArgs {
    /// The fleet's config: the robot (its spec sizes the models), the learner and the
    /// replay, as a daemon config.
    #[arg(long)]
    config: PathBuf,
    /// Listen on this zenoh endpoint (repeatable), e.g. tcp/0.0.0.0:7447; actors
    /// connect with `imago daemon --learner`.
    #[arg(long, value_name = "ENDPOINT")]
    listen: Vec<String>,
    /// Where the fleet's replay and checkpoints go (overrides the config's run_dir).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Stop as on SIGTERM after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Continue the run in the run directory: its checkpoint and its replay.
    #[arg(long, conflicts_with = "fresh")]
    resume: bool,
    /// Move what the run directory holds aside and start a new run there.
    #[arg(long)]
    fresh: bool,
    /// The fleet's key.
    #[arg(long, default_value = DEFAULT_FLEET_KEY)]
    fleet_key: String,
    /// Also write the final status as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
}

/// Runs the fleet's learner until a signal or `--duration`, then prints what it did.
pub fn run(args: LearnerArgs, device: DeviceSpec) -> anyhow::Result<()> {
    let (config, duration, device, stop) = daemon_start(&args.config, args.duration, device)?;
    let report = run_fleet_learner(
        &config,
        &DaemonOptions {
            run_dir: args.run_dir,
            duration,
            resume: args.resume,
            fresh: args.fresh,
            max_learning_steps: None,
            telemetry: Telemetry::off(),
        },
        &device,
        &flag_link("--listen", args.listen, Vec::new())?,
        &args.fleet_key,
        stop,
    )?;
    println!(
        "learner stopped: {} episodes ({} transitions, {:.0} per second) stored from {} actors, {} duplicates, {} refused, {} learning steps, policy version {}",
        report.episodes_stored,
        report.transitions_stored,
        report.intake_transitions_per_second,
        report.per_actor.len(),
        report.duplicates,
        report.refused,
        report.learning_steps,
        report.final_policy_version
    );
    if let Some(path) = args.report {
        write_json(&path, &report)?;
    }
    Ok(())
}
