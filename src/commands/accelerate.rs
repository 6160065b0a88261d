//! `imago accelerate`.

use std::path::PathBuf;

use clap::Args;
use imago_runtime::device::{DeviceSpec, resolve};
use imago_runtime::jobs::accelerate::{AccelerateOptions, run_accelerate};
use imago_runtime::jobs::accelerate_lerobot::{SamplerReport, accelerate_lerobot_policy};
use imago_runtime::jobs::demo::EVAL_SEED_BASE;
use imago_runtime::store::lerobot_policy::names_lerobot_policy;
use imago_runtime::store::outputs::{Input, check_file_output};

use crate::args::{RobotArgs, write_json};

/// Flags of `imago accelerate`.
#[derive(Debug, Args)]
pub struct AccelerateArgs {
    /// The policy's checkpoint, or a LeRobot Diffusion Policy directory (its
    /// denoising steps are what is cut).
    #[arg(long)]
    ckpt: PathBuf,
    /// Largest share of the episodes the reference solves that a faster variant may
    /// fail, in (0, 1).
    #[arg(long, default_value_t = 0.1)]
    budget: f64,
    /// Confidence of the bound, in [0.5, 0.9999].
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    /// Paired episodes per variant at most.
    #[arg(long, default_value_t = 400)]
    max_episodes: usize,
    /// Seed of the first paired episode.
    #[arg(long, default_value_t = EVAL_SEED_BASE)]
    seed: u64,
    /// Also write the choice and every variant's figures as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    #[command(flatten)]
    robot: RobotArgs,
}

/// Tries the variants, prints a table and the choice.
pub fn run(args: AccelerateArgs, device: DeviceSpec) -> anyhow::Result<()> {
    if let Some(report) = &args.report {
        check_file_output(
            "--report",
            report,
            &[Input {
                flag: "--ckpt",
                path: &args.ckpt,
            }],
        )?;
    }
    anyhow::ensure!(
        (1..=100_000).contains(&args.max_episodes),
        "--max-episodes {}: must lie in [1, 100000]",
        args.max_episodes
    );
    let robot = args.robot.resolve()?;
    let device = resolve(device)?;
    let options = AccelerateOptions {
        ckpt: &args.ckpt,
        robot: &robot,
        budget: args.budget,
        confidence: args.confidence,
        max_episodes: args.max_episodes,
        first_seed: args.seed,
    };
    if names_lerobot_policy(&args.ckpt) {
        let report = accelerate_lerobot_policy(&options, &device)?;
        print_samplers(&report);
        if let Some(path) = &args.report {
            write_json(path, &report)?;
        }
        return Ok(());
    }
    let report = run_accelerate(&options, &device)?;
    let steps = |s: Option<usize>| s.map_or("-".to_string(), |s| s.to_string());
    println!(
        "{:>13} {:>10} {:>9} {:>8} {:>14} {:>9} {:>17} {:>8} {:>9}",
        "execute_steps",
        "flow_steps",
        "precision",
        "speed-up",
        "policy ms/tick",
        "episodes",
        "failed/ref-solved",
        "bound",
        "certified"
    );
    println!(
        "{:>13} {:>10} {:>9} {:>8} {:>14.3} {:>9} {:>17} {:>8} {:>9}",
        1,
        steps(report.reference_flow_steps),
        "f32",
        "1.0x",
        report.reference_policy_ms,
        "-",
        "-",
        "-",
        "reference"
    );
    for v in &report.variants {
        println!(
            "{:>13} {:>10} {:>9} {:>7.1}x {:>14.3} {:>9} {:>17} {:>8.3} {:>9}",
            v.execute_steps,
            steps(v.flow_steps),
            v.precision.to_string(),
            v.speedup,
            v.policy_ms_per_tick,
            v.test.episodes,
            format!("{}/{}", v.test.variant_failed, v.test.reference_solved),
            v.test.certified_bound,
            v.test.certified
        );
    }
    let precisions: Vec<String> = report.precisions.iter().map(|p| p.to_string()).collect();
    println!(
        "precisions measured on this device: {}",
        precisions.join(", ")
    );
    if report.variants.iter().any(|v| v.test.certified) {
        println!(
            "chosen: execute_steps = {}, flow_steps = {}, precision = {} ({:.1}x less policy compute per tick), failure rate among reference-solved episodes certified below {:.3} at {:.0}% (budget {})",
            report.chosen_execute_steps,
            steps(report.chosen_flow_steps),
            report.chosen_precision,
            report.chosen_speedup,
            report.chosen_bound,
            report.confidence * 100.0,
            report.budget
        );
    } else {
        println!(
            "chosen: the reference (no faster variant's failure rate among reference-solved episodes was certified below {} at {:.0}%)",
            report.budget,
            report.confidence * 100.0
        );
    }
    if let Some(path) = &args.report {
        write_json(path, &report)?;
    }
    Ok(())
}

/// The table of a LeRobot Diffusion Policy's samplers and the choice.
fn print_samplers(report: &SamplerReport) {
    println!(
        "{:>8} {:>6} {:>9} {:>8} {:>9} {:>17} {:>8} {:>9}",
        "sampler",
        "steps",
        "chunk ms",
        "speed-up",
        "episodes",
        "failed/ref-solved",
        "bound",
        "certified"
    );
    let r = &report.reference;
    println!(
        "{:>8} {:>6} {:>9.1} {:>8} {:>9} {:>17} {:>8} {:>9}",
        r.sampler, r.steps, r.chunk_ms, "1.0x", "-", "-", "-", "reference"
    );
    for v in &report.variants {
        println!(
            "{:>8} {:>6} {:>9.1} {:>7.1}x {:>9} {:>17} {:>8.3} {:>9}",
            v.sampler,
            v.steps,
            v.chunk_ms,
            v.speedup,
            v.test.episodes,
            format!("{}/{}", v.test.variant_failed, v.test.reference_solved),
            v.test.certified_bound,
            v.test.certified
        );
    }
    if report.variants.iter().any(|v| v.test.certified) {
        println!(
            "chosen: noise_scheduler_type = \"{}\", num_inference_steps = {} in config.json ({:.1}x less compute per chunk), failure rate among reference-solved episodes certified below {:.3} at {:.0}% (budget {})",
            report.chosen_sampler,
            report.chosen_steps,
            report.chosen_speedup,
            report.chosen_bound,
            report.confidence * 100.0,
            report.budget
        );
    } else {
        println!(
            "chosen: the reference (no faster sampler's failure rate among reference-solved episodes was certified below {} at {:.0}%)",
            report.budget,
            report.confidence * 100.0
        );
    }
}
