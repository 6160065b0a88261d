//! `imago daemon`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use imago_runtime::device::{DeviceSpec, resolve};
use imago_runtime::engine::daemon::{DaemonConfig, DaemonOptions, run_daemon};

use crate::args::{RerunArgs, flag_in_range, write_json};

/// Longest daemon run `--duration` accepts: ten years, in seconds.
const MAX_DURATION_SECONDS: f64 = 315_360_000.0;

/// Flags of `imago daemon`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// The robot's config (see examples/reacher2d-daemon.toml).
    #[arg(long)]
    config: PathBuf,
    /// Where replay and checkpoints go (overrides the config's run_dir).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Stop as on SIGTERM after this many seconds (0.1 to 315360000, ten years).
    #[arg(long)]
    duration: Option<f64>,
    /// Continue the run in the run directory: its checkpoint and its replay.
    #[arg(long, conflicts_with = "fresh")]
    resume: bool,
    /// Move what the run directory holds aside (renamed, never deleted) and start
    /// a new run there.
    #[arg(long)]
    fresh: bool,
    /// Also write the final status as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    #[command(flatten)]
    rerun: RerunArgs,
}

/// Runs the daemon until a signal or `--duration`, then prints what it did.
pub fn run(args: DaemonArgs, device: DeviceSpec) -> anyhow::Result<()> {
    let config = DaemonConfig::load(&args.config)?;
    if let Some(seconds) = args.duration {
        flag_in_range("--duration", seconds, 0.1..=MAX_DURATION_SECONDS)?;
    }
    // The config's device unless --device was given.
    let spec = match device {
        DeviceSpec::Auto => config
            .device
            .parse()
            .map_err(|e| anyhow::anyhow!("device: {e}"))?,
        other => other,
    };
    let device = resolve(spec)?;
    static STOP: AtomicBool = AtomicBool::new(false);
    ctrlc::set_handler(|| STOP.store(true, Ordering::Relaxed))
        .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))?;
    let session = args.rerun.start(&config.telemetry)?;
    let outcome = run_daemon(
        &config,
        &DaemonOptions {
            run_dir: args.run_dir,
            duration: args.duration.map(Duration::from_secs_f64),
            resume: args.resume,
            fresh: args.fresh,
            max_learning_steps: None,
            telemetry: session.handle(),
        },
        &device,
        &STOP,
    )?;
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
    if let Some(path) = args.report {
        write_json(&path, &outcome)?;
    }
    args.rerun.finish(session)
}
