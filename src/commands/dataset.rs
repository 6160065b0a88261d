//! `imago import lerobot` and `imago export lerobot`: LeRobot datasets in and out
//! (docs/datasets.md); `imago export policy`: a LeRobot policy directory out
//! (docs/lerobot-policies.md).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use imago_runtime::jobs::export_policy::export_lerobot_policy;
use imago_runtime::store::lerobot::{
    CameraChoice, EpisodeRange, ExportOptions, FrameFormat, ImportOptions, export_lerobot,
    import_lerobot,
};
use imago_runtime::store::outputs::OutputPath;

/// What to import.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// A LeRobot dataset (v3.0 or v2.1) from a local folder, into a new replay whose
    /// robot spec comes from the dataset.
    Lerobot(ImportLerobotArgs),
}

/// Flags of `imago import lerobot`.
#[derive(Debug, Args)]
pub struct ImportLerobotArgs {
    /// The dataset folder (holding meta/info.json).
    pub dataset: PathBuf,
    /// The new replay directory.
    #[arg(long)]
    pub out: PathBuf,
    /// The camera feature (e.g. observation.images.top), or `none`; by default the
    /// dataset's only camera.
    #[arg(long)]
    pub camera: Option<CameraChoice>,
    /// The state feature (proprioception).
    #[arg(long, default_value = "observation.state")]
    pub state: String,
    /// The action feature.
    #[arg(long, default_value = "action")]
    pub action: String,
    /// Episodes to import: START..END (END excluded), START.., ..END or N.
    #[arg(long)]
    pub episodes: Option<EpisodeRange>,
    /// Resize camera frames to WxH (e.g. 96x96); by default they keep the dataset's size.
    #[arg(long, value_parser = parse_size)]
    pub resize: Option<(u32, u32)>,
    /// Record this instruction for every episode instead of the dataset's tasks (whose
    /// words must be in the policies' vocabulary).
    #[arg(long)]
    pub instruction: Option<String>,
    /// Replace what --out holds (kept until the new replay is complete).
    #[arg(long)]
    pub force: bool,
}

/// What to export.
#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// A replay's whole episodes as a LeRobot v3.0 dataset.
    Lerobot(ExportLerobotArgs),
    /// A policy as a LeRobot `pretrained_model/` directory (ACT or Diffusion Policy).
    Policy(ExportPolicyArgs),
}

/// The formats `imago export policy` writes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PolicyFormat {
    /// LeRobot's `pretrained_model/` layout (lerobot 0.4.4).
    Lerobot,
}

/// Flags of `imago export policy`.
#[derive(Debug, Args)]
pub struct ExportPolicyArgs {
    /// The policy: a LeRobot ACT or Diffusion Policy directory.
    #[arg(long)]
    pub policy: PathBuf,
    /// The new policy directory.
    #[arg(long)]
    pub out: PathBuf,
    /// The layout written.
    #[arg(long, value_enum, default_value = "lerobot")]
    pub format: PolicyFormat,
    /// Replace what --out holds (kept until the new directory is complete).
    #[arg(long)]
    pub force: bool,
}

/// Flags of `imago export lerobot`.
#[derive(Debug, Args)]
pub struct ExportLerobotArgs {
    /// The replay directory.
    #[arg(long)]
    pub replay: PathBuf,
    /// The new dataset folder.
    #[arg(long)]
    pub out: PathBuf,
    /// Frames per second to record; by default the robot's control rate.
    #[arg(long)]
    pub fps: Option<f64>,
    /// How camera frames are stored: png (image features; lossless). av1 is refused:
    /// this build has no AV1 encoder.
    #[arg(long, default_value = "png")]
    pub video: FrameFormat,
    /// Replace what --out holds (kept until the new dataset is complete).
    #[arg(long)]
    pub force: bool,
}

fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{text}` is not a size WxH (e.g. 96x96)");
    let (w, h) = text.split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u32, u32) = (w.parse().map_err(|_| bad())?, h.parse().map_err(|_| bad())?);
    if w == 0 || h == 0 || w > 4096 || h > 4096 {
        return Err(format!("size {text}: each side must be in [1, 4096]"));
    }
    Ok((w, h))
}

/// Imports a dataset and prints what was written.
pub fn run_import(command: ImportCommand) -> anyhow::Result<()> {
    let ImportCommand::Lerobot(args) = command;
    let report = import_lerobot(&ImportOptions {
        dataset: args.dataset,
        out: args.out.clone(),
        camera: args.camera.unwrap_or(CameraChoice::Only),
        state: args.state,
        action: args.action,
        episodes: args.episodes,
        resize: args.resize,
        instruction: args.instruction,
        force: args.force,
    })?;
    println!(
        "imported {} episodes ({} frames) into {} in {:.1} s: {} frames/s, {} decoded from video",
        report.episodes,
        report.frames,
        args.out.display(),
        report.seconds,
        (report.frames as f64 / report.seconds.max(1e-9)).round(),
        report.decoded_frames
    );
    println!("robot: {}", report.spec.summary());
    if !report.has_outcomes {
        println!(
            "the dataset has no next.reward or next.success columns: episodes are demonstrations without outcome (reward 0, no success)"
        );
    }
    Ok(())
}

/// Exports a replay and prints what was written.
pub fn run_export(command: ExportCommand) -> anyhow::Result<()> {
    let args = match command {
        ExportCommand::Lerobot(args) => args,
        ExportCommand::Policy(args) => {
            let PolicyFormat::Lerobot = args.format;
            let out = OutputPath {
                path: &args.out,
                force: args.force,
            };
            let export =
                out.announcing_replacement(|| export_lerobot_policy(&args.policy, &out))?;
            println!(
                "exported the {} policy of {} to {} as a LeRobot pretrained_model directory ({} tensors)",
                export.kind,
                args.policy.display(),
                export.path.display(),
                export.tensors
            );
            return Ok(());
        }
    };
    let report = export_lerobot(&ExportOptions {
        replay: args.replay,
        out: args.out.clone(),
        fps: args.fps,
        frames: args.video,
        force: args.force,
    })?;
    println!(
        "exported {} episodes ({} frames, {} tasks) to {} as a LeRobot v3.0 dataset{}",
        report.episodes,
        report.frames,
        report.tasks,
        args.out.display(),
        if report.damaged > 0 {
            format!("; {} damaged episodes left out", report.damaged)
        } else {
            String::new()
        }
    );
    Ok(())
}
