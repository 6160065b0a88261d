//! `imago daemon`.

use std::time::Duration;

use clap::Args;
use imago_runtime::device::DeviceSpec;
use imago_runtime::engine::daemon::run_daemon;
use imago_runtime::engine::fleet::DEFAULT_FLEET_KEY;
use imago_runtime::engine::fleet::actor::{FleetActorOptions, run_fleet_actor};

use crate::args::{RerunArgs, RunArgs, RunStart, flag_link};

/// Flags of `imago daemon`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Run as an actor of a fleet: no learner here; every whole episode goes to the
    /// `imago learner` at this zenoh endpoint (repeatable), e.g. tcp/10.0.0.5:7447,
    /// and its policy versions are swapped in (docs/fleet.md).
    #[arg(long, value_name = "ENDPOINT", conflicts_with_all = ["resume", "fresh"])]
    learner: Vec<String>,
    /// The actor's id in the fleet, the same across its restarts [default: the run
    /// directory's name].
    #[arg(long, requires = "learner")]
    actor_id: Option<String>,
    /// The fleet's key.
    #[arg(long, default_value = DEFAULT_FLEET_KEY, requires = "learner")]
    fleet_key: String,
    #[command(flatten)]
    rerun: RerunArgs,
}

/// Runs the daemon until a signal or `--duration`, then prints what it did.
pub fn run(args: DaemonArgs, device: DeviceSpec) -> anyhow::Result<()> {
    let RunStart {
        config,
        device,
        stop,
    } = args.run.start(device)?;
    let session = args.rerun.start(&config.telemetry)?;
    if !args.learner.is_empty() {
        let run_dir = args.run.run_dir.clone().unwrap_or(config.run_dir.clone());
        let actor_id = match args.actor_id {
            Some(id) => id,
            None => run_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| {
                    anyhow::anyhow!("--actor-id: the run directory has no name to take")
                })?,
        };
        let report = run_fleet_actor(
            &config,
            &FleetActorOptions {
                run_dir,
                actor_id: actor_id.clone(),
                duration: args.run.duration.map(Duration::from_secs_f64),
                link: flag_link("--learner", Vec::new(), args.learner)?,
                fleet_key: args.fleet_key,
                telemetry: session.handle(),
            },
            &device,
            stop,
        )?;
        let control = &report.control;
        println!(
            "actor {actor_id} stopped: {} ticks, {} deadline misses, policy versions {:?}, {} of {} transitions written; {} episodes forwarded ({} already stored), {} pending",
            control.ticks,
            control.deadline_misses,
            control.policy_versions,
            control.transitions_written,
            control.actor_transitions,
            report.episodes_forwarded,
            report.duplicates,
            report.episodes_pending
        );
        args.run.write_report(&report)?;
        return args.rerun.finish(session);
    }
    let outcome = run_daemon(&config, &args.run.options(session.handle()), &device, stop)?;
    let control = &outcome.control;
    println!(
        "daemon stopped: {} ticks, {} deadline misses, tick latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms, {} queue drops, {} telemetry drops, policy versions {:?}, {} of {} transitions written, {} learning steps; checkpoint version {} in {}",
        control.ticks,
        control.deadline_misses,
        control.tick_latency_ms.p50,
        control.tick_latency_ms.p99,
        control.tick_latency_ms.max,
        control.queue_drops,
        control.telemetry_dropped,
        control.policy_versions,
        control.transitions_written,
        control.actor_transitions,
        outcome.learning_steps,
        outcome.final_policy_version,
        outcome.checkpoint
    );
    if control.link_losses + control.late_observations > 0 {
        println!(
            "remote robot: {} link losses, {} late observations, {} episodes abandoned",
            control.link_losses, control.late_observations, control.episodes_abandoned
        );
    }
    args.run.write_report(&outcome)?;
    args.rerun.finish(session)
}
