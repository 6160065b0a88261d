//! `imago collect`.

use std::path::PathBuf;

use clap::Args;
use imago_robots::ExpertConfig;
use imago_runtime::act::collect::{
    CollectConfig, MAX_EPISODES, Perturbation, collect_demonstrations,
};
use imago_runtime::store::replay::read_replay;
use imago_runtime::telemetry::{TelemetryConfig, log_replay_episodes};

use crate::args::{RerunArgs, RobotArgs, flag_in_range};

/// Flags of `imago collect`.
#[derive(Debug, Args)]
pub struct CollectArgs {
    #[command(flatten)]
    robot: RobotArgs,
    /// Number of episodes.
    #[arg(long, default_value_t = 100)]
    episodes: usize,
    /// Replay directory (created if needed; episodes are appended to a replay of
    /// the same robot spec).
    #[arg(long)]
    out: PathBuf,
    /// Replace what --out holds even when it is not a replay (it is kept until the
    /// new replay is complete).
    #[arg(long)]
    force: bool,
    /// Action noise, as a fraction of the action limit [default: the robot's; reacher2d
    /// 0.2, pusht 0.02].
    #[arg(long)]
    noise: Option<f32>,
    /// Fraction of episodes in which the expert makes the robot's deliberate mistake
    /// (reacher2d: it goes to a wrong target; pusht: it settles for a near miss)
    /// [default: 0.15].
    #[arg(long, alias = "wrong-target-rate")]
    mistake_rate: Option<f64>,
    /// Perturb what the robot is sent by noise of this spread (a fraction of the
    /// action limit, in [0, 1]), recording the expert's own command as the label
    /// (DART: the demonstrations then cover states off the expert's path) [default: 0].
    #[arg(long)]
    perturbation: Option<f32>,
    /// Correlation of the perturbation from one tick to the next, in [0, 0.99]
    /// [default: 0.8].
    #[arg(long)]
    perturbation_correlation: Option<f32>,
    /// Seed of the first episode (episode i uses SEED + i) [default: each episode's
    /// id in the replay, so collecting into the same replay again records new scenes].
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    rerun: RerunArgs,
}

/// Records scripted demonstrations and says what was recorded.
pub fn run(args: CollectArgs) -> anyhow::Result<()> {
    flag_in_range("--episodes", args.episodes, 1..=MAX_EPISODES)?;
    let robot = args.robot.resolve()?;
    let defaults = robot.default_expert();
    let expert = ExpertConfig {
        noise: args.noise.unwrap_or(defaults.noise),
        mistake_rate: args.mistake_rate.unwrap_or(defaults.mistake_rate),
    };
    flag_in_range("--noise", expert.noise, 0.0..=10.0)?;
    flag_in_range("--mistake-rate", expert.mistake_rate, 0.0..=1.0)?;
    let defaults = Perturbation::default();
    let perturbation = Perturbation {
        sigma: args.perturbation.unwrap_or(defaults.sigma),
        correlation: args
            .perturbation_correlation
            .unwrap_or(defaults.correlation),
    };
    flag_in_range("--perturbation", perturbation.sigma, 0.0..=1.0)?;
    flag_in_range(
        "--perturbation-correlation",
        perturbation.correlation,
        0.0..=0.99,
    )?;
    let summary = collect_demonstrations(
        &CollectConfig {
            robot: robot.clone(),
            expert,
            perturbation,
            episodes: args.episodes,
            first_seed: args.seed,
        },
        &args.out,
        args.force,
    )?;
    let seeds = summary
        .seeds
        .map(|(first, last)| format!(", seeds {first}..={last}"))
        .unwrap_or_default();
    println!(
        "recorded {} episodes of {} ({} transitions, {:.1}% successful{seeds}) in {}",
        summary.episodes,
        robot.name(),
        summary.transitions,
        100.0 * summary.success_rate(),
        args.out.display()
    );
    if args.rerun.target().is_some() {
        let session = args.rerun.start(&TelemetryConfig::default())?;
        let episodes = read_replay(&args.out)?.episodes;
        let new = &episodes[episodes.len().saturating_sub(summary.episodes)..];
        log_replay_episodes(&session.handle(), new, Some(&robot));
        args.rerun.finish(session)?;
    }
    Ok(())
}
