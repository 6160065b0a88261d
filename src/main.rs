//! The `imago` command line: demo, device listing, demonstration collection, offline
//! training and evaluation. Every command takes `--device`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use imago_kernels::bench::KernelBenchRow;
use imago_policies::ActionHeadKind;
use imago_robots::bounds::in_range;
use imago_robots::reacher2d::{ExpertConfig, Reacher2d, Reacher2dConfig};
use imago_robots::{Robot, RobotSpec};
use imago_runtime::bc::BcConfig;
use imago_runtime::bench::{
    DaemonBenchRow, RenderBenchRow, WorldModelBenchRow, bench_daemon, bench_kernels, bench_policy,
    bench_render, bench_world_model,
};
use imago_runtime::checkpoint::POLICY_KIND;
use imago_runtime::collect::MAX_EPISODES;
use imago_runtime::collect::{CollectConfig, collect_demonstrations};
use imago_runtime::daemon::{DaemonConfig, DaemonOptions, run_daemon};
use imago_runtime::demo::{DemoOptions, run_demo};
use imago_runtime::device::{CpuBackend, DeviceSpec, list_devices, resolve};
use imago_runtime::device_check::{PARITY_TOLERANCE, compare_training_step};
use imago_runtime::evaluate::evaluate_checkpoint;
use imago_runtime::finetune::{FinetuneConfig, FinetuneMethod, finetune_offline};
use imago_runtime::finetune::{MAX_BATCH, MAX_STEPS};
use imago_runtime::inspect::inspect_replay;
use imago_runtime::outputs::{Input, OutputKind, OutputPath, check_file_output};
use imago_runtime::paired::{PairedCounts, PairedReport};
use imago_runtime::replay::{ReplayContents, check_replay, read_replay, repair_replay};
use imago_runtime::report::ControllerRow;
use imago_runtime::report::world_model_table;
use imago_runtime::telemetry::{
    DEFAULT_VIEWER_URL, TelemetryConfig, TelemetryEvent, TelemetrySession, TelemetryTarget,
    log_replay_episodes,
};
use imago_runtime::toml_file::read_toml;
use imago_runtime::train::{ReplaySource, check_replay_robot, train_bc_offline};
use imago_runtime::world_model::{
    WorldModelTrainConfig, evaluate_world_model_checkpoint, train_world_model_offline,
};
use imago_worldmodel::{Supervision, TransitionFamily, WorldModelConfig};

#[derive(Debug, Parser)]
#[command(
    name = "imago",
    version,
    about = "On-device trainer for robot policies and world models"
)]
struct Cli {
    /// Where models run: auto, cpu, cpu:flex, wgpu, wgpu:N, cuda, cuda:N.
    #[arg(long, global = true, default_value = "auto")]
    device: DeviceSpec,
    #[command(subcommand)]
    command: Command,
}

/// Where a rerun recording of the run goes (at most one of these).
#[derive(Debug, Clone, Default, Args)]
#[group(multiple = false)]
struct RerunArgs {
    /// Save a rerun recording of the run to this file (open it with `rerun PATH.rrd`).
    #[arg(long, value_name = "PATH.rrd")]
    rerun: Option<PathBuf>,
    /// Stream the recording to a running rerun viewer [URL default:
    /// rerun+http://127.0.0.1:9876/proxy].
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = DEFAULT_VIEWER_URL)]
    rerun_connect: Option<String>,
    /// Start a rerun viewer (`rerun` on the PATH) and stream the recording to it.
    #[arg(long)]
    rerun_spawn: bool,
}

impl RerunArgs {
    fn target(&self) -> Option<TelemetryTarget> {
        match (&self.rerun, &self.rerun_connect, self.rerun_spawn) {
            (Some(path), _, _) => Some(TelemetryTarget::File(path.clone())),
            (_, Some(url), _) => Some(TelemetryTarget::Connect(url.clone())),
            (_, _, true) => Some(TelemetryTarget::Spawn),
            _ => None,
        }
    }

    /// Starts the session these flags ask for (one that logs nothing without them).
    fn start(&self, config: &TelemetryConfig) -> anyhow::Result<TelemetrySession> {
        if let Some(path) = &self.rerun {
            check_file_output("--rerun", path, &[])?;
        }
        TelemetrySession::start(self.target().as_ref(), config, "imago")
    }
}

/// Flushes the recording and says where it went. A file that cannot be written is an
/// error; a live viewer that cannot be reached is a warning (the run's own results
/// are already saved).
fn finish_telemetry(session: TelemetrySession, args: &RerunArgs) -> anyhow::Result<()> {
    let Some(target) = args.target() else {
        return Ok(());
    };
    let report = match (session.finish(), &target) {
        (Ok(report), _) => report,
        // A live viewer that is not there loses nothing the run made: say so.
        (Err(error), TelemetryTarget::Connect(_) | TelemetryTarget::Spawn) => {
            eprintln!("warning: the rerun viewer did not receive the recording: {error:#}");
            return Ok(());
        }
        (Err(error), TelemetryTarget::File(_)) => return Err(error),
    };
    let place = match target {
        TelemetryTarget::File(path) => format!("written to {}", path.display()),
        TelemetryTarget::Connect(url) => format!("streamed to {url}"),
        TelemetryTarget::Spawn => "streamed to the spawned viewer".to_string(),
    };
    println!(
        "rerun recording {place}: {} events logged, {} dropped",
        report.logged, report.dropped
    );
    Ok(())
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Collect imperfect demonstrations, train a VLA policy by behaviour cloning,
    /// evaluate it on paired seeds and print a table.
    Demo {
        /// The reduced demo (about 5 minutes on 2 CPU cores).
        #[arg(long)]
        quick: bool,
        /// Also write the figures as JSON here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Where the replay and the checkpoints go. A previous demo run there is
        /// replaced once this one is complete; anything else is refused (see --force).
        #[arg(long, default_value = "imago-runs/demo")]
        run_dir: PathBuf,
        /// Replace what --run-dir holds even when it is not a demo run (it is kept
        /// until the new run is complete).
        #[arg(long)]
        force: bool,
        /// Seed of the whole run.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        rerun: RerunArgs,
    },
    /// Run on the robot: the control loop at its rate, crash-safe recording, and a
    /// learner that fine-tunes the policy and hot-swaps it in. SIGINT/SIGTERM stop at a
    /// tick boundary, flush the replay, write a checkpoint and exit 0.
    Daemon {
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
    },
    /// Turn a recorded replay (and optionally a world model, for imagined rollouts)
    /// into a rerun recording.
    Inspect {
        /// Replay directory.
        #[arg(long)]
        replay: PathBuf,
        /// The recording to write (open it with `rerun PATH.rrd`).
        #[arg(long, value_name = "PATH.rrd")]
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
    },
    /// List the devices this build can use on this machine.
    Devices {
        /// Also run one training step on `--device` and on the CPU and compare them.
        #[arg(long)]
        check: bool,
    },
    /// Time the policy's training step and batch-1 inference, or the world model's
    /// training step and imagination, on `--device`.
    Bench {
        /// What to time.
        #[arg(long, value_enum, default_value_t = BenchTarget::Policy)]
        what: BenchTarget,
        /// Transitions (policy) or windows (worldmodel) per training step [default: 64
        /// for policy, 16 for worldmodel].
        #[arg(long)]
        batch_size: Option<usize>,
        /// Timed training steps.
        #[arg(long, default_value_t = 30)]
        steps: usize,
        /// Also write the figures as JSON here.
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// Record scripted demonstrations into a replay directory.
    Collect {
        /// The robot.
        #[arg(long, value_enum, default_value_t = RobotName::Reacher2d)]
        robot: RobotName,
        /// Number of episodes.
        #[arg(long, default_value_t = 100)]
        episodes: usize,
        /// Replay directory (created if needed; episodes are appended to a replay of
        /// the same robot).
        #[arg(long)]
        out: PathBuf,
        /// Replace what --out holds even when it is not a replay (it is kept until the
        /// new replay is complete).
        #[arg(long)]
        force: bool,
        /// Action noise, as a fraction of the speed limit.
        #[arg(long, default_value_t = ExpertConfig::default().noise)]
        noise: f32,
        /// Fraction of episodes in which the expert goes to a wrong target.
        #[arg(long, default_value_t = ExpertConfig::default().wrong_target_rate)]
        wrong_target_rate: f64,
        /// Seed of the first episode.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        rerun: RerunArgs,
    },
    /// Train from a replay directory.
    Train {
        /// Replay directory.
        #[arg(long)]
        replay: PathBuf,
        /// What to train.
        #[arg(long, value_enum, default_value_t = TrainTarget::Bc)]
        what: TrainTarget,
        /// Checkpoint directory to write (a checkpoint of the same kind there is
        /// replaced atomically; anything else is refused, see --force).
        #[arg(long)]
        out: PathBuf,
        /// Replace what --out holds even when it is another kind of thing, or update
        /// the --init checkpoint in place (the old one is kept until the new one is
        /// complete).
        #[arg(long)]
        force: bool,
        /// Any damage in the replay is an error (else damaged episodes are left out
        /// with a warning).
        #[arg(long)]
        strict: bool,
        /// Continue from this checkpoint.
        #[arg(long)]
        init: Option<PathBuf>,
        /// Optimiser steps [default: 1500 for bc, 1000 for worldmodel].
        #[arg(long)]
        steps: Option<usize>,
        /// Transitions (bc) or windows (worldmodel) per step [default: 64 for bc, 16
        /// for worldmodel].
        #[arg(long)]
        batch_size: Option<usize>,
        /// Peak learning rate [default: 1e-3 for bc, 3e-3 for worldmodel].
        #[arg(long)]
        learning_rate: Option<f64>,
        /// World model: the transition family of the ensemble members.
        #[arg(long, default_value_t = WorldModelConfig::new(1, vec![1.0]).family)]
        family: TransitionFamily,
        /// World model: steps per training window.
        #[arg(long, default_value_t = WorldModelTrainConfig::default().horizon)]
        horizon: usize,
        /// World model: feed predictions back in (multi-step) or not (one-step).
        #[arg(long, value_enum, default_value_t = SupervisionArg::MultiStep)]
        supervision: SupervisionArg,
        /// Policy: the action-chunk head of a new policy.
        #[arg(long, default_value_t = ActionHeadKind::Gaussian)]
        head: ActionHeadKind,
        /// Fine-tuning: the world-model checkpoint imagination runs in [default: a SALT
        /// world model trained on the replay first].
        #[arg(long)]
        world_model: Option<PathBuf>,
        /// Fine-tuning: advantage source and policy loss [default: awr-imagination,
        /// or the config's].
        #[arg(long)]
        method: Option<FinetuneMethod>,
        /// Fine-tuning: collect-update rounds [default: 3, or the config's].
        #[arg(long)]
        rounds: Option<usize>,
        /// Fine-tuning: a TOML file of settings (see docs/finetuning.md); flags win.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Also write what the run did as JSON here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        rerun: RerunArgs,
    },
    /// Score a world model's open-loop rollouts on held-out episodes: error per
    /// horizon, disagreement-error rank correlation, interval coverage.
    WmEval {
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
        /// Any damage in the replay is an error (else damaged episodes are left out
        /// with a warning).
        #[arg(long)]
        strict: bool,
        /// Also write the figures as JSON here.
        #[arg(long)]
        report: Option<PathBuf>,
        #[command(flatten)]
        rerun: RerunArgs,
    },
    /// Check a replay for damage, or copy its whole episodes into a clean one.
    Replay {
        #[command(subcommand)]
        command: ReplayCommand,
    },
    /// Evaluate a policy checkpoint in closed loop, alone or paired with another on the
    /// same seeds.
    Eval {
        /// Checkpoint directory.
        #[arg(long)]
        ckpt: PathBuf,
        /// A second checkpoint (the baseline), evaluated on the same seeds: success
        /// rates, episodes only one of them solved, and the difference's 95% interval.
        #[arg(long)]
        paired_with: Option<PathBuf>,
        /// Episodes.
        #[arg(long, default_value_t = 100)]
        episodes: usize,
        /// Seed of the first episode.
        #[arg(long, default_value_t = imago_runtime::demo::EVAL_SEED_BASE)]
        seed: u64,
        /// Also write the figures as JSON here.
        #[arg(long)]
        report: Option<PathBuf>,
        #[command(flatten)]
        rerun: RerunArgs,
    },
}

#[derive(Debug, Subcommand)]
enum ReplayCommand {
    /// Read every segment and print, per segment, its records and its whole and
    /// damaged episodes, then every damaged stretch and every episode left out with
    /// the reason. Exits non-zero when anything is damaged.
    Check {
        /// Replay directory.
        dir: PathBuf,
    },
    /// Write a clean copy of every whole episode of a damaged replay into a new replay.
    Repair {
        /// The damaged replay directory (only read).
        dir: PathBuf,
        /// The new replay directory.
        #[arg(long)]
        out: PathBuf,
        /// Replace what --out holds (it is kept until the copy is complete).
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum RobotName {
    /// Planar two-link arm with three coloured targets.
    Reacher2d,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TrainTarget {
    /// Behaviour cloning of the VLA policy.
    Bc,
    /// The latent world model (held-out episodes are left out).
    Worldmodel,
    /// Advantage-weighted fine-tuning of `--init` (with `--world-model`, or one trained
    /// on the replay first); collected episodes are appended to `--replay`.
    Finetune,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SupervisionArg {
    /// Each step from the encoding of the real previous observation.
    OneStep,
    /// Predictions fed back in over the whole window.
    MultiStep,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum BenchTarget {
    /// The VLA policy.
    Policy,
    /// The world model, every transition family.
    Worldmodel,
    /// The daemon: `--steps` learning steps with actor and learner overlapped versus
    /// in turns, and the control loop's tick latency meanwhile.
    Daemon,
    /// reacher2d camera frames: the CPU renderer versus the batched WGSL renderer on
    /// the first wgpu adapter, at `--batch-size` scenes per call [default: 1, 16, 64,
    /// 256].
    Render,
    /// The CubeCL kernels (lambda-return scan, ensemble statistics, SALT step) versus
    /// the same computations in burn's composite ops, on `--device` (`wgpu`, `cuda`,
    /// or the CPU reference on `cpu`).
    Kernels,
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    check_file_output("--report", path, &[])?;
    let json = serde_json::to_vec_pretty(value)?;
    imago_runtime::atomic::write_file(path, &json)
}

/// Longest daemon run `--duration` accepts: ten years, in seconds.
const MAX_DURATION_SECONDS: f64 = 315_360_000.0;
/// Longest world-model horizon a flag accepts.
const MAX_HORIZON: usize = 64;

/// Checks a flag's value against its documented range; the error names the flag.
fn flag_in_range<T: PartialOrd + std::fmt::Debug>(
    flag: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> anyhow::Result<()> {
    in_range(flag, value, range).map_err(anyhow::Error::from)
}

/// The robot spec of a replay's episodes: the one its manifest records, or, for a
/// replay written before it did, the default reacher2d's if its episodes fit it.
fn replay_spec(contents: &ReplayContents, dir: &Path) -> anyhow::Result<RobotSpec> {
    if let Some(spec) = &contents.spec {
        return Ok(spec.clone());
    }
    let spec = Reacher2d::new(Reacher2dConfig::default()).spec().clone();
    check_replay_robot(contents, dir, &spec).map_err(|e| {
        e.context("the replay records no robot spec (it predates them) and does not fit the default reacher2d")
    })?;
    Ok(spec)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo {
            quick,
            report,
            run_dir,
            force,
            seed,
            rerun,
        } => {
            let session = rerun.start(&TelemetryConfig::default())?;
            let outcome = run_demo(&DemoOptions {
                quick,
                device: cli.device,
                run_dir,
                force,
                seed,
                telemetry: session.handle(),
            })?;
            print!("{}", outcome.table());
            if let Some(path) = report {
                write_json(&path, &outcome)?;
            }
            finish_telemetry(session, &rerun)?;
        }
        Command::Daemon {
            config,
            run_dir,
            duration,
            resume,
            fresh,
            report,
            rerun,
        } => {
            let config = DaemonConfig::load(&config)?;
            if let Some(seconds) = duration {
                flag_in_range("--duration", seconds, 0.1..=MAX_DURATION_SECONDS)?;
            }
            // The config's device unless --device was given.
            let spec = match cli.device {
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
            let session = rerun.start(&config.telemetry)?;
            let outcome = run_daemon(
                &config,
                &DaemonOptions {
                    run_dir,
                    duration: duration.map(Duration::from_secs_f64),
                    resume,
                    fresh,
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
            if let Some(path) = report {
                write_json(&path, &outcome)?;
            }
            finish_telemetry(session, &rerun)?;
        }
        Command::Devices { check } => {
            println!(
                "backends compiled in: {}",
                imago_runtime::device::compiled_backends().join(", ")
            );
            for device in list_devices() {
                println!("{:<12} {}", device.spec, device.description);
            }
            match resolve(DeviceSpec::Auto) {
                Ok(device) => println!("auto picks: {}", device.description),
                Err(e) => println!("auto picks nothing: {e}"),
            }
            if check {
                let candidate = resolve(cli.device)?;
                let reference = resolve(DeviceSpec::Cpu(CpuBackend::NdArray))?;
                let comparison = compare_training_step(&reference, &candidate)?;
                let agrees = comparison.agrees(PARITY_TOLERANCE);
                println!(
                    "training step on {} vs {}: loss {:.5} vs {:.5}, largest prediction difference {:.2e}: {}",
                    candidate.description,
                    reference.description,
                    comparison.loss.1,
                    comparison.loss.0,
                    comparison.max_mean_difference,
                    if agrees { "agrees" } else { "DISAGREES" }
                );
                anyhow::ensure!(
                    agrees,
                    "{} does not compute what the CPU computes",
                    candidate.description
                );
            }
        }
        Command::Bench {
            what,
            batch_size,
            steps,
            report,
        } => {
            if let Some(batch_size) = batch_size {
                flag_in_range("--batch-size", batch_size, 1..=MAX_BATCH)?;
            }
            flag_in_range("--steps", steps, 1..=100_000)?;
            if let BenchTarget::Render = what {
                let batches = match batch_size {
                    Some(n) => vec![n],
                    None => vec![1, 16, 64, 256],
                };
                let rows = bench_render(&batches, steps)?;
                print!("{}", RenderBenchRow::table(&rows));
                if let Some(path) = report {
                    write_json(&path, &rows)?;
                }
                return Ok(());
            }
            let device = resolve(cli.device)?;
            if let BenchTarget::Kernels = what {
                println!("{}, median of {steps} timed calls", device.description);
                let rows = bench_kernels(&device, steps);
                print!("{}", KernelBenchRow::table(&rows));
                if let Some(path) = report {
                    write_json(&path, &rows)?;
                }
                return Ok(());
            }
            if let BenchTarget::Daemon = what {
                let rows = bench_daemon(&device, steps as u64)?;
                print!("{}", DaemonBenchRow::table(&rows));
                if let [overlapped, in_turns] = rows.as_slice() {
                    println!(
                        "overlapped / in turns: {:.2}x learning steps per minute",
                        overlapped.learning_steps_per_minute / in_turns.learning_steps_per_minute
                    );
                }
                if let Some(path) = report {
                    write_json(&path, &rows)?;
                }
                return Ok(());
            }
            if let BenchTarget::Worldmodel = what {
                let batch_size = batch_size.unwrap_or(WorldModelTrainConfig::default().batch_size);
                let rows = bench_world_model(&device, batch_size, steps)?;
                print!("{}", WorldModelBenchRow::table(&rows));
                if let Some(path) = report {
                    write_json(&path, &rows)?;
                }
                return Ok(());
            }
            let bench = bench_policy(&device, batch_size.unwrap_or(64), steps)?;
            println!(
                "{}: training step (batch {}) p50 {:.1} ms, p90 {:.1} ms over {} steps; inference (batch 1) p50 {:.2} ms, p99 {:.2} ms",
                bench.device,
                bench.batch_size,
                bench.train_step_p50_ms,
                bench.train_step_p90_ms,
                bench.steps,
                bench.inference_p50_ms,
                bench.inference_p99_ms
            );
            if let Some(path) = report {
                write_json(&path, &bench)?;
            }
        }
        Command::Collect {
            robot: RobotName::Reacher2d,
            episodes,
            out,
            force,
            noise,
            wrong_target_rate,
            seed,
            rerun,
        } => {
            flag_in_range("--episodes", episodes, 1..=MAX_EPISODES)?;
            flag_in_range("--noise", noise, 0.0..=10.0)?;
            flag_in_range("--wrong-target-rate", wrong_target_rate, 0.0..=1.0)?;
            let summary = collect_demonstrations(
                &CollectConfig {
                    robot: Reacher2dConfig::default(),
                    expert: ExpertConfig {
                        noise,
                        wrong_target_rate,
                        ..ExpertConfig::default()
                    },
                    episodes,
                    first_seed: seed,
                },
                &out,
                force,
            )?;
            println!(
                "recorded {} episodes ({} transitions, {:.1}% successful) in {}",
                summary.episodes,
                summary.transitions,
                100.0 * summary.success_rate(),
                out.display()
            );
            if rerun.target().is_some() {
                let session = rerun.start(&TelemetryConfig::default())?;
                let episodes = read_replay(&out)?.episodes;
                let new = &episodes[episodes.len().saturating_sub(summary.episodes)..];
                log_replay_episodes(&session.handle(), new, &Reacher2dConfig::default());
                finish_telemetry(session, &rerun)?;
            }
        }
        Command::Train {
            replay,
            what,
            out,
            force,
            strict,
            init,
            steps,
            batch_size,
            learning_rate,
            family,
            horizon,
            supervision,
            head,
            world_model,
            method,
            rounds,
            config,
            report,
            seed,
            rerun,
        } => {
            if let Some(steps) = steps {
                flag_in_range("--steps", steps, 1..=MAX_STEPS)?;
            }
            if let Some(batch_size) = batch_size {
                flag_in_range("--batch-size", batch_size, 1..=MAX_BATCH)?;
            }
            if let Some(learning_rate) = learning_rate {
                flag_in_range("--learning-rate", learning_rate, 1e-9..=1.0)?;
            }
            if let Some(rounds) = rounds {
                flag_in_range("--rounds", rounds, 1..=10_000)?;
            }
            flag_in_range("--horizon", horizon, 1..=MAX_HORIZON)?;
            let source = ReplaySource {
                dir: &replay,
                strict,
            };
            let output = OutputPath { path: &out, force };
            let device = resolve(cli.device)?;
            let session = rerun.start(&TelemetryConfig::default())?;
            let telemetry = session.handle();
            match what {
                TrainTarget::Bc => {
                    let defaults = BcConfig::default();
                    let steps = steps.unwrap_or(defaults.steps);
                    let bc = BcConfig {
                        steps,
                        batch_size: batch_size.unwrap_or(defaults.batch_size),
                        learning_rate: learning_rate.unwrap_or(defaults.learning_rate),
                        seed,
                        warmup_steps: defaults.warmup_steps.min(steps / 2),
                        ..defaults
                    };
                    let summary = train_bc_offline(
                        source,
                        output,
                        init.as_deref(),
                        head,
                        &bc,
                        &device,
                        &telemetry,
                    )?;
                    println!(
                        "trained on {} episodes ({} transitions) on {}: loss {:.3} -> {:.3}; checkpoint version {} in {}",
                        summary.episodes,
                        summary.transitions,
                        device.description,
                        summary.first_loss,
                        summary.last_loss,
                        summary.version,
                        out.display()
                    );
                }
                TrainTarget::Worldmodel => {
                    let defaults = WorldModelTrainConfig::default();
                    let steps = steps.unwrap_or(defaults.steps);
                    let train = WorldModelTrainConfig {
                        steps,
                        batch_size: batch_size.unwrap_or(defaults.batch_size),
                        learning_rate: learning_rate.unwrap_or(defaults.learning_rate),
                        horizon,
                        supervision: match supervision {
                            SupervisionArg::OneStep => Supervision::OneStep,
                            SupervisionArg::MultiStep => Supervision::MultiStep,
                        },
                        seed,
                        warmup_steps: defaults.warmup_steps.min(steps / 2),
                        ..defaults
                    };
                    let summary = train_world_model_offline(
                        source,
                        output,
                        init.as_deref(),
                        family,
                        &train,
                        &device,
                        &telemetry,
                    )?;
                    println!(
                        "trained a {family} world model on {} episodes ({} windows of {horizon} steps; {} held out) on {}: prediction loss {:.4} -> {:.4}; checkpoint version {} in {}",
                        summary.episodes,
                        summary.windows,
                        summary.held_out,
                        device.description,
                        summary.first_prediction_loss,
                        summary.last_prediction_loss,
                        summary.version,
                        out.display()
                    );
                }
                TrainTarget::Finetune => {
                    let init = init.ok_or_else(|| {
                        anyhow::anyhow!(
                            "fine-tuning needs --init, the policy checkpoint to improve"
                        )
                    })?;
                    let mut settings = match &config {
                        Some(path) => {
                            let config_file = Input {
                                flag: "--config",
                                path,
                            };
                            output.check(OutputKind::Checkpoint(POLICY_KIND), &[config_file])?;
                            read_toml::<FinetuneConfig>(path)?
                        }
                        None => FinetuneConfig::default(),
                    };
                    settings.seed = seed;
                    settings.method = method.unwrap_or(settings.method);
                    settings.rounds = rounds.unwrap_or(settings.rounds);
                    settings.policy_steps = steps.unwrap_or(settings.policy_steps);
                    settings.batch_size = batch_size.unwrap_or(settings.batch_size);
                    settings.learning_rate = learning_rate.unwrap_or(settings.learning_rate);
                    settings
                        .validate()
                        .map_err(|e| anyhow::anyhow!("fine-tuning settings: {e}"))?;
                    let summary = finetune_offline(
                        source,
                        &init,
                        world_model.as_deref(),
                        output,
                        &settings,
                        &device,
                        &telemetry,
                    )?;
                    println!(
                        "fine-tuned {} ({}, {} rounds) on {}: checkpoint version {} in {}",
                        init.display(),
                        settings.method,
                        summary.rounds.len(),
                        device.description,
                        summary.version,
                        out.display()
                    );
                    if let Some(path) = report {
                        write_json(&path, &summary)?;
                    }
                }
            }
            finish_telemetry(session, &rerun)?;
        }
        Command::WmEval {
            ckpt,
            replay,
            horizon,
            all_episodes,
            strict,
            report,
            rerun,
        } => {
            flag_in_range("--horizon", horizon, 1..=MAX_HORIZON)?;
            let device = resolve(cli.device)?;
            let session = rerun.start(&TelemetryConfig::default())?;
            let outcome = evaluate_world_model_checkpoint(
                &ckpt,
                ReplaySource {
                    dir: &replay,
                    strict,
                },
                horizon,
                all_episodes,
                &device,
                &session.handle(),
            )?;
            print!("{}", world_model_table(&outcome));
            if let Some(path) = report {
                write_json(&path, &outcome)?;
            }
            finish_telemetry(session, &rerun)?;
        }
        Command::Inspect {
            replay,
            rrd,
            ckpt,
            horizon,
            every,
            strict,
        } => {
            flag_in_range("--horizon", horizon, 1..=MAX_HORIZON)?;
            flag_in_range("--every", every, 1..=u64::MAX)?;
            check_file_output(
                "--rrd",
                &rrd,
                &[Input {
                    flag: "--replay",
                    path: &replay,
                }],
            )?;
            let device = match &ckpt {
                Some(_) => Some(resolve(cli.device)?),
                None => None,
            };
            let rerun = RerunArgs {
                rerun: Some(rrd),
                ..RerunArgs::default()
            };
            let session = rerun.start(&TelemetryConfig {
                replay_episode_every: every,
                ..TelemetryConfig::default()
            })?;
            let summary = inspect_replay(
                ReplaySource {
                    dir: &replay,
                    strict,
                },
                ckpt.as_deref(),
                horizon,
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
            finish_telemetry(session, &rerun)?;
        }
        Command::Replay {
            command: ReplayCommand::Check { dir },
        } => {
            let (contents, table) = check_replay(&dir)?;
            print!("{table}");
            anyhow::ensure!(
                !contents.is_damaged(),
                "replay {} is damaged: {} episodes left out, {} damaged stretches; `imago replay repair {} --out NEW` writes a clean copy",
                dir.display(),
                contents.damaged.len(),
                contents.corruptions.len(),
                dir.display()
            );
        }
        Command::Replay {
            command: ReplayCommand::Repair { dir, out, force },
        } => {
            let contents = read_replay(&dir)?;
            let spec = replay_spec(&contents, &dir)?;
            let report = repair_replay(&dir, &out, &spec, force)?;
            println!(
                "copied {} whole episodes into {}; left out {} damaged and {} unfinished",
                report.episodes,
                out.display(),
                report.damaged,
                report.unfinished
            );
        }
        Command::Eval {
            ckpt,
            paired_with,
            episodes,
            seed,
            report,
            rerun,
        } => {
            flag_in_range("--episodes", episodes, 1..=MAX_EPISODES)?;
            let device = resolve(cli.device)?;
            let session = rerun.start(&TelemetryConfig::default())?;
            let telemetry = session.handle();
            let outcome = evaluate_checkpoint(&ckpt, episodes, seed, &device)?;
            let row = ControllerRow::new(&ckpt.display().to_string(), &outcome);
            telemetry.send(TelemetryEvent::EvalSuccess {
                name: "candidate".into(),
                rate: outcome.success_rate(),
            });
            match paired_with {
                None => {
                    print!("{}{}", ControllerRow::table_header(), row.table_line());
                    if let Some(path) = report {
                        write_json(&path, &row)?;
                    }
                }
                Some(baseline) => {
                    let baseline_outcome = evaluate_checkpoint(&baseline, episodes, seed, &device)?;
                    telemetry.send(TelemetryEvent::EvalSuccess {
                        name: "baseline".into(),
                        rate: baseline_outcome.success_rate(),
                    });
                    let paired = PairedReport::new(
                        ControllerRow::new(&baseline.display().to_string(), &baseline_outcome),
                        row,
                        PairedCounts::count(&baseline_outcome, &outcome)?,
                    );
                    print!("{}", paired.table());
                    if let Some(path) = report {
                        write_json(&path, &paired)?;
                    }
                }
            }
            finish_telemetry(session, &rerun)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // SAFETY: no other thread exists yet. Vulkan loaders warn without this variable.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir()) };
    }
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
