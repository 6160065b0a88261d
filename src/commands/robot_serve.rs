//! `imago robot-serve`.

use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, ValueEnum};
use imago_runtime::bridge::{FrameEncoding, LinkConfig, ServeOptions, serve_robot};

use crate::args::{RobotArgs, flag_link};

/// How camera frames travel on the bridge.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Frames {
    /// Raw RGB bytes (cheapest on loopback and fast links; docs/bridge.md).
    Raw,
    /// Deflated RGB bytes (zlib; for slow links).
    Deflate,
}

/// Flags of `imago robot-serve`.
#[derive(Debug, Args)]
pub struct RobotServeArgs {
    #[command(flatten)]
    robot: RobotArgs,
    /// The robot's key on the bridge [default: imago/robots/NAME].
    #[arg(long)]
    key: Option<String>,
    /// Listen on this zenoh endpoint (repeatable), e.g. tcp/0.0.0.0:7447. Without
    /// --listen or --connect, peers find each other by multicast on the LAN.
    #[arg(long, value_name = "ENDPOINT")]
    listen: Vec<String>,
    /// Connect to this zenoh endpoint (repeatable): a daemon or a router.
    #[arg(long, value_name = "ENDPOINT")]
    connect: Vec<String>,
    /// How camera frames travel.
    #[arg(long, value_enum, default_value = "raw")]
    frames: Frames,
}

/// Serves a built-in simulated robot until SIGINT/SIGTERM, then prints what it did.
pub fn run(args: RobotServeArgs) -> anyhow::Result<()> {
    let robot = args.robot.resolve()?;
    let key = args
        .key
        .unwrap_or_else(|| format!("imago/robots/{}", robot.name()));
    let link = if args.listen.is_empty() && args.connect.is_empty() {
        LinkConfig::default()
    } else {
        flag_link("--listen/--connect", args.listen, args.connect)?
    };
    let options = ServeOptions {
        key,
        link,
        frames: match args.frames {
            Frames::Raw => FrameEncoding::Raw,
            Frames::Deflate => FrameEncoding::Deflate,
        },
    };
    static STOP: AtomicBool = AtomicBool::new(false);
    ctrlc::set_handler(|| STOP.store(true, Ordering::Relaxed))
        .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))?;
    let report = serve_robot(&robot, &options, &STOP, || {
        println!(
            "serving {} at {} (listen {:?}, connect {:?}); stop with Ctrl-C",
            robot.spec().summary(),
            options.key,
            options.link.listen,
            options.link.connect
        );
    })?;
    println!(
        "robot-serve stopped: {} resets, {} steps, {} holds, {} stale commands, {} commands without an episode, {} unreadable messages",
        report.resets,
        report.steps,
        report.holds,
        report.stale_commands,
        report.commands_without_episode,
        report.unreadable
    );
    Ok(())
}
