//! `imago inspect`.

use std::path::PathBuf;

use clap::Args;
use imago_runtime::device::{DeviceSpec, resolve};
use imago_runtime::jobs::inspect::inspect_replay;
use imago_runtime::store::outputs::{Input, check_file_output};
use imago_runtime::store::replay::{EpisodeSelection, ReplaySource};
use imago_runtime::telemetry::TelemetryConfig;

use crate::args::{MAX_HORIZON, RerunArgs, flag_in_range};

/// Flags of `imago inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Replay directory.
    #[arg(long)]
    replay: PathBuf,
    /// The recording to write (open it with `rerun PATH.rrd`). `--out` is accepted too,
    /// as `collect`, `train` and `demo` name their output.
    #[arg(long, visible_alias = "out", value_name = "PATH.rrd")]
    rrd: PathBuf,
    /// A world-model checkpoint: adds its rollout error per horizon and imagined
    /// rollouts beside what really followed.
    #[arg(long)]
    ckpt: Option<PathBuf>,
    /// Longest horizon imagined and scored.
    #[arg(long, default_value_t = 8)]
    horizon: usize,
    /// Log every this many episodes step by step (by episode id).
    #[arg(long, default_value_t = 1)]
    every: u64,
    /// Any damage in the replay is an error (else damaged episodes are left out
    /// with a warning).
    #[arg(long)]
    strict: bool,
}

/// Writes the replay (and the world model's imagined rollouts) to a recording.
pub fn run(args: InspectArgs, device: DeviceSpec) -> anyhow::Result<()> {
    flag_in_range("--horizon", args.horizon, 1..=MAX_HORIZON)?;
    flag_in_range("--every", args.every, 1..=u64::MAX)?;
    check_file_output(
        "--rrd",
        &args.rrd,
        &[Input {
            flag: "--replay",
            path: &args.replay,
        }],
    )?;
    let device = match &args.ckpt {
        Some(_) => Some(resolve(device)?),
        None => None,
    };
    let rerun = RerunArgs {
        rerun: Some(args.rrd.clone()),
        ..RerunArgs::default()
    };
    let session = rerun.start(&TelemetryConfig {
        replay_episode_every: args.every,
        ..TelemetryConfig::default()
    })?;
    let summary = inspect_replay(
        ReplaySource {
            dir: &args.replay,
            strict: args.strict,
            episodes: EpisodeSelection::All,
        },
        args.ckpt.as_deref(),
        args.horizon,
        device.as_ref(),
        &session.handle(),
    )?;
    println!(
        "logged {} of {} episodes{}",
        summary.logged,
        summary.episodes,
        if summary.world_model.is_some() {
            ", the world model's rollout error and imagined rollouts"
        } else {
            ""
        }
    );
    rerun.finish(session)
}
