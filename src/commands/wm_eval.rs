//! `imago wm-eval`.

use std::path::PathBuf;

use clap::Args;
use imago_runtime::device::{DeviceSpec, resolve};
use imago_runtime::jobs::report::world_model_table;
use imago_runtime::jobs::train_world_model::evaluate_world_model_checkpoint;
use imago_runtime::store::replay::{EpisodeSelection, ReplaySource};
use imago_runtime::telemetry::TelemetryConfig;

use crate::args::{MAX_HORIZON, RerunArgs, flag_in_range, write_json};

/// Flags of `imago wm-eval`.
#[derive(Debug, Args)]
pub struct WmEvalArgs {
    /// World-model checkpoint directory.
    #[arg(long)]
    ckpt: PathBuf,
    /// Replay directory; its held-out episodes are scored (see --all-episodes).
    #[arg(long)]
    replay: PathBuf,
    /// Longest horizon scored.
    #[arg(long, default_value_t = 8)]
    horizon: usize,
    /// Score every episode, for a replay recorded apart from the training one.
    #[arg(long)]
    all_episodes: bool,
    /// Score only the episodes a policy of at least this version recorded (a
    /// fine-tuning run's later rounds; demonstrations are version 0), e.g. a model on
    /// the states a fine-tuned policy visits. With --all-episodes, all of those.
    #[arg(long, value_name = "VERSION")]
    from_version: Option<u64>,
    /// Any damage in the replay is an error (else damaged episodes are left out
    /// with a warning).
    #[arg(long)]
    strict: bool,
    /// Also write the figures as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    #[command(flatten)]
    rerun: RerunArgs,
}

/// Scores the world model on the replay and prints the table.
pub fn run(args: WmEvalArgs, device: DeviceSpec) -> anyhow::Result<()> {
    flag_in_range("--horizon", args.horizon, 1..=MAX_HORIZON)?;
    let device = resolve(device)?;
    let session = args.rerun.start(&TelemetryConfig::default())?;
    let outcome = evaluate_world_model_checkpoint(
        &args.ckpt,
        ReplaySource {
            dir: &args.replay,
            strict: args.strict,
            episodes: args
                .from_version
                .map_or(EpisodeSelection::All, EpisodeSelection::FromVersion),
        },
        args.horizon,
        args.all_episodes,
        &device,
        &session.handle(),
    )?;
    print!("{}", world_model_table(&outcome));
    if let Some(path) = args.report {
        write_json(&path, &outcome)?;
    }
    args.rerun.finish(session)
}
