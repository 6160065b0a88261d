//! `imago gate`.

use std::path::PathBuf;

use clap::Args;
use imago_runtime::act::sampling::NOISE_SCALES;
use imago_runtime::device::{DeviceSpec, resolve};
use imago_runtime::jobs::demo::EVAL_SEED_BASE;
use imago_runtime::jobs::gate::{GateOptions, run_gate};
use imago_runtime::promotion::{PromotionMetric, PromotionTestConfig, Verdict};
use imago_runtime::store::outputs::{Input, check_file_output};

use crate::args::{RobotArgs, executed_steps, flag_in_range, write_json};

/// Flags of `imago gate`.
#[derive(Debug, Args)]
pub struct GateArgs {
    /// The deployed policy's checkpoint (or a LeRobot policy directory).
    #[arg(long)]
    champion: PathBuf,
    /// The candidate policy's checkpoint (or a LeRobot policy directory).
    #[arg(long)]
    challenger: PathBuf,
    /// What is compared per paired episode: success, or steps_to_success (faster
    /// successes score higher).
    #[arg(long, default_value = "success")]
    metric: PromotionMetric,
    /// One minus the largest false-promotion rate allowed, in [0.5, 0.9999].
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    /// Paired episodes after which an undecided test keeps the champion.
    #[arg(long, default_value_t = 400)]
    max_episodes: u32,
    /// How much better the challenger must be (success: its share of the pairs only
    /// one policy solved must exceed 1/2 + this), in [0, 0.45].
    #[arg(long, default_value_t = 0.0)]
    min_improvement: f64,
    /// Seed of the first paired episode.
    #[arg(long, default_value_t = EVAL_SEED_BASE)]
    seed: u64,
    /// Actions of each planned chunk an imago policy executes before it plans again
    /// (1 re-plans every tick), at most its chunk length: both sides act alike, as
    /// `imago eval --execute` (and a daemon's `[actor.chunking]`) acts. A LeRobot
    /// policy keeps its own `n_action_steps`.
    #[arg(long, default_value_t = 1, value_name = "N")]
    execute: usize,
    /// Act on actions sampled from an imago policy, its noise scaled by S relative
    /// to its own spread (1: the policy as trained, as a daemon's default `[actor]
    /// exploration` acts), in [0, 10]; 0 acts on each chunk's mean. Both sides draw
    /// the same noise in a paired episode. A LeRobot policy samples as its config
    /// says.
    #[arg(long, default_value_t = 0.0, value_name = "S")]
    sampling_noise: f32,
    /// Also write the decision and its figures as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    #[command(flatten)]
    robot: RobotArgs,
}

/// Runs the promotion test and prints the decision; exits 0 either way (the report's
/// `decision` says which).
pub fn run(args: GateArgs, device: DeviceSpec) -> anyhow::Result<()> {
    let test = PromotionTestConfig {
        confidence: args.confidence,
        max_episodes: args.max_episodes,
        metric: args.metric,
        min_improvement: args.min_improvement,
    };
    test.validate()
        .map_err(|e| anyhow::anyhow!("--{}", e.to_string().replace('_', "-")))?;
    let executed = executed_steps("--execute", args.execute)?;
    flag_in_range("--sampling-noise", args.sampling_noise, NOISE_SCALES)?;
    if let Some(report) = &args.report {
        let inputs = [
            Input {
                flag: "--champion",
                path: &args.champion,
            },
            Input {
                flag: "--challenger",
                path: &args.challenger,
            },
        ];
        check_file_output("--report", report, &inputs)?;
    }
    let robot = args.robot.resolve()?;
    let device = resolve(device)?;
    let report = run_gate(
        &GateOptions {
            champion: &args.champion,
            challenger: &args.challenger,
            robot: &robot,
            test,
            first_seed: args.seed,
            executed,
            sampling_noise: args.sampling_noise,
        },
        &device,
    )?;
    let decision = match report.run.decision {
        Verdict::Promote => "promote the challenger",
        Verdict::RejectWorse => "keep the champion (the challenger is certified worse)",
        Verdict::RejectUnproven => "keep the champion (the challenger was not proven better)",
        Verdict::Undecided => "undecided",
    };
    let p = &report.run.paired;
    println!(
        "{decision}: {} paired episodes ({} fewer than a fixed-size test of the same confidence); only the challenger solved {}, only the champion {}, both {}, neither {}; evidence better {:.3e}, worse {:.3e}, threshold {:.0}",
        report.run.episodes,
        report.episodes_saved,
        p.only_candidate,
        p.only_baseline,
        p.both,
        p.neither,
        report.run.evidence_better,
        report.run.evidence_worse,
        report.run.threshold
    );
    if let Some(path) = &args.report {
        write_json(path, &report)?;
    }
    Ok(())
}
