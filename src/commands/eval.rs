//! `imago eval`.

use std::path::PathBuf;

use clap::Args;
use imago_runtime::act::collect::MAX_EPISODES;
use imago_runtime::act::loaded_policy::evaluate_checkpoint;
use imago_runtime::act::planned::{ChunkPlanner, WorldModelPlanner};
use imago_runtime::act::sampling::NOISE_SCALES;
use imago_runtime::act::simulated_planning::SimulatorPlanner;
use imago_runtime::bridge::remote;
use imago_runtime::device::{DeviceSpec, resolve};
use imago_runtime::jobs::demo::EVAL_SEED_BASE;
use imago_runtime::jobs::report::{ControllerRow, PairedReport};
use imago_runtime::robot::RobotConfig;
use imago_runtime::telemetry::{TelemetryConfig, TelemetryEvent};
use imago_runtime::toml_file::read_toml;
use imago_worldmodel::PlannerConfig;

use crate::args::{RerunArgs, RobotArgs, executed_steps, flag_in_range, write_json};

/// `--plan-with`'s name for the robot's own simulator (a directory of that name, where
/// there is one, is a world model checkpoint as any other: `./simulator`).
const SIMULATOR: &str = "simulator";

/// Flags of `imago eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The policy: an imago checkpoint directory, or a LeRobot policy directory
    /// (`pretrained_model/`: ACT or Diffusion Policy, docs/lerobot-policies.md).
    #[arg(long, visible_alias = "policy")]
    ckpt: PathBuf,
    /// A second checkpoint (the baseline), evaluated on the same seeds: success
    /// rates, episodes only one of them solved, and the difference's 95% interval.
    #[arg(long)]
    paired_with: Option<PathBuf>,
    /// Episodes.
    #[arg(long, default_value_t = 100)]
    episodes: usize,
    /// Seed of the first episode.
    #[arg(long, default_value_t = EVAL_SEED_BASE)]
    seed: u64,
    /// Actions of each planned chunk an imago policy executes before it plans again
    /// (receding horizon; 1 re-plans every tick), at most its chunk length; with
    /// `--paired-with`, the baseline too unless `--baseline-execute` says otherwise.
    /// A LeRobot policy keeps its own `n_action_steps`.
    #[arg(long, default_value_t = 1, value_name = "N")]
    execute: usize,
    /// Actions of each chunk the `--paired-with` baseline executes per plan (default:
    /// `--execute`): with the same checkpoint on both sides, a paired comparison of
    /// two receding horizons.
    #[arg(long, value_name = "N", requires = "paired_with")]
    baseline_execute: Option<usize>,
    /// Act on actions sampled from an imago policy, its noise scaled by S relative
    /// to the policy's own spread (1: the policy as trained), in [0, 10]; 0 acts on
    /// each chunk's mean. Each episode's noise comes from its seed, so paired
    /// policies draw the same. With `--paired-with`, the baseline too unless
    /// `--baseline-sampling-noise` says otherwise. A LeRobot policy samples as its
    /// config says.
    #[arg(long, default_value_t = 0.0, value_name = "S")]
    sampling_noise: f32,
    /// The `--paired-with` baseline's sampling noise (default: `--sampling-noise`):
    /// with the same checkpoint on both sides, the mean against samples.
    #[arg(long, value_name = "S", requires = "paired_with")]
    baseline_sampling_noise: Option<f32>,
    /// Plan the evaluated policy's chunks in this world model (a world-model
    /// checkpoint directory, e.g. a demo run's `world-model/`): candidates drawn
    /// around each chunk the policy proposes are imagined, and one of the best
    /// executed (CEM and MPPI; docs/worldmodel.md, "Planning"). `simulator` plans in
    /// copies of the simulated robot itself instead: the bound a perfect model gives.
    /// Needs a sampling noise above 0; the `--paired-with` baseline acts without
    /// planning.
    #[arg(long, value_name = "DIR|simulator")]
    plan_with: Option<PathBuf>,
    /// The planner's settings, a TOML file (`candidates`, `iterations`, `elites`,
    /// `temperature`, `min_std`, `discount`, `uncertainty_penalty`,
    /// `terminal_value`; docs/configuration.md, "Planner settings", for the defaults).
    #[arg(long, value_name = "FILE.toml", requires = "plan_with")]
    planner: Option<PathBuf>,
    /// With `--plan-with DIR` on a simulated robot: also score every plan's
    /// candidates in a copy of the robot, and print how the world model's ranking of
    /// them agrees with the simulator's and what its choices gain there
    /// (docs/worldmodel.md, "Planning").
    #[arg(long, requires = "plan_with")]
    check_plans: bool,
    /// Also write the figures as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    #[command(flatten)]
    robot: RobotArgs,
    /// Evaluate on a robot in another process instead: a TOML file of its bridge
    /// settings (`key`, `[link]`, as a daemon's `[actor.robot]` for `robot =
    /// "remote"`; docs/bridge.md), e.g. gym-pusht served by
    /// `scripts/pusht_gym_serve.py`.
    #[arg(long, value_name = "FILE.toml", conflicts_with_all = ["robot", "robot_config"])]
    remote: Option<PathBuf>,
    #[command(flatten)]
    rerun: RerunArgs,
}

/// Evaluates the checkpoint (paired with a baseline) on the robot and prints the table.
pub fn run(args: EvalArgs, device: DeviceSpec) -> anyhow::Result<()> {
    flag_in_range("--episodes", args.episodes, 1..=MAX_EPISODES)?;
    let executed = executed_steps("--execute", args.execute)?;
    let baseline_executed = match args.baseline_execute {
        Some(steps) => executed_steps("--baseline-execute", steps)?,
        None => executed,
    };
    flag_in_range("--sampling-noise", args.sampling_noise, NOISE_SCALES)?;
    let baseline_noise = args.baseline_sampling_noise.unwrap_or(args.sampling_noise);
    flag_in_range("--baseline-sampling-noise", baseline_noise, NOISE_SCALES)?;
    // The robot's own simulator, unless a directory of that name is a checkpoint.
    let in_simulator = args
        .plan_with
        .as_ref()
        .is_some_and(|dir| dir.as_os_str() == SIMULATOR && !dir.exists());
    // Checked before a remote robot is contacted (its spec is read over the link).
    anyhow::ensure!(
        !(in_simulator && args.remote.is_some()),
        "--plan-with simulator plans in copies of a robot simulated here; --remote drives a robot in another process (plan in a world model checkpoint instead)"
    );
    anyhow::ensure!(
        !(args.check_plans && in_simulator),
        "--check-plans checks a world model's plans against the simulator; with --plan-with simulator there is no model to check (give a world model checkpoint)"
    );
    anyhow::ensure!(
        !(args.check_plans && args.remote.is_some()),
        "--check-plans scores plans in copies of a robot simulated here; --remote drives a robot in another process"
    );
    let robot = match &args.remote {
        Some(path) => RobotConfig::from_table(remote::NAME, &read_toml(path)?)
            .map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?,
        None => args.robot.resolve()?,
    };
    let planner_settings: PlannerConfig = match &args.planner {
        Some(path) => read_toml(path)?,
        None => PlannerConfig::default(),
    };
    let device = resolve(device)?;
    let planner = match &args.plan_with {
        Some(_) if in_simulator => Some(ChunkPlanner::Simulator(SimulatorPlanner::new(
            planner_settings,
        )?)),
        Some(dir) => {
            let planner =
                WorldModelPlanner::load(dir, planner_settings, &robot, &device.inference)?;
            Some(ChunkPlanner::WorldModel(Box::new(if args.check_plans {
                planner.check_in_simulator()
            } else {
                planner
            })))
        }
        None => None,
    };
    if let (Some(planner), Some(dir)) = (&planner, &args.plan_with) {
        eprintln!(
            "planning in {}: {} candidates x {} iterations, rewards from {}",
            dir.display(),
            planner.settings().candidates,
            planner.settings().iterations,
            planner.describe_reward()
        );
    }
    let session = args.rerun.start(&TelemetryConfig::default())?;
    let telemetry = session.handle();
    let seeds = (args.episodes, args.seed);
    let outcome = evaluate_checkpoint(
        &args.ckpt,
        &robot,
        seeds,
        (executed, args.sampling_noise),
        planner.as_ref(),
        &device,
    )?;
    telemetry.send(TelemetryEvent::EvalSuccess {
        name: "candidate".into(),
        rate: outcome.success_rate(),
    });
    let check = match &planner {
        Some(ChunkPlanner::WorldModel(planner)) => planner.check_report(),
        _ => None,
    };
    match &args.paired_with {
        None => {
            let row = ControllerRow {
                plan_check: check.clone(),
                ..ControllerRow::new(&args.ckpt.display().to_string(), &outcome)
            };
            print!(
                "{}{}",
                ControllerRow::table_header(row.mean_max_coverage.is_some()),
                row.table_line()
            );
            if let Some(path) = &args.report {
                write_json(path, &row)?;
            }
        }
        Some(baseline) => {
            let baseline_outcome = evaluate_checkpoint(
                baseline,
                &robot,
                seeds,
                (baseline_executed, baseline_noise),
                None,
                &device,
            )?;
            telemetry.send(TelemetryEvent::EvalSuccess {
                name: "baseline".into(),
                rate: baseline_outcome.success_rate(),
            });
            let mut paired = PairedReport::new(
                (&baseline.display().to_string(), &baseline_outcome),
                (&args.ckpt.display().to_string(), &outcome),
            )?;
            paired.candidate.plan_check = check.clone();
            print!("{}", paired.table());
            if let Some(path) = &args.report {
                write_json(path, &paired)?;
            }
        }
    }
    if let Some(check) = check {
        println!("{}", check.line());
    }
    args.rerun.finish(session)
}
