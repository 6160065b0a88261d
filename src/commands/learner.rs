//! `imago learner`.

use clap::Args;
use imago_runtime::device::DeviceSpec;
use imago_runtime::engine::fleet::DEFAULT_FLEET_KEY;
use imago_runtime::engine::fleet::learner::run_fleet_learner;
use imago_runtime::telemetry::Telemetry;

use crate::args::{RunArgs, RunStart, flag_link};

/// Flags of `imago learner`.
#[derive(Debug, Args)]
pub struct LearnerArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Listen on this zenoh endpoint (repeatable), e.g. tcp/0.0.0.0:7447; actors
    /// connect with `imago daemon --learner`.
    #[arg(long, value_name = "ENDPOINT")]
    listen: Vec<String>,
    /// The fleet's key.
    #[arg(long, default_value = DEFAULT_FLEET_KEY)]
    fleet_key: String,
}

/// Runs the fleet's learner until a signal or `--duration`, then prints what it did.
pub fn run(args: LearnerArgs, device: DeviceSpec) -> anyhow::Result<()> {
    let RunStart {
        config,
        device,
        stop,
    } = args.run.start(device)?;
    let report = run_fleet_learner(
        &config,
        &args.run.options(Telemetry::off()),
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
    args.run.write_report(&report)
}
