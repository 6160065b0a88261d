//! `imago bench`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use imago_kernels::bench::KernelBenchRow;
use imago_runtime::device::{DeviceSpec, resolve};
use imago_runtime::engine::learner_loop::LearnerConfig;
use imago_runtime::jobs::bench::{
    DaemonBenchRow, RenderBenchRow, WorldModelBenchRow, bench_daemon, bench_kernels, bench_policy,
    bench_render, bench_world_model,
};
use imago_runtime::jobs::bench_bridge::{bench_bridge, bench_frame_codec};
use imago_runtime::jobs::bench_learner::{LearnerBenchRow, bench_learner};
use imago_runtime::jobs::bench_lerobot::{LeRobotBenchRow, bench_lerobot_policy};
use imago_runtime::learn::MAX_BATCH;
use imago_runtime::learn::world_model::WorldModelTrainConfig;

use crate::args::{RobotArgs, flag_in_range, write_json};

/// Flags of `imago bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to time.
    #[arg(long, value_enum, default_value_t = BenchTarget::Policy)]
    what: BenchTarget,
    /// Transitions (policy) or windows (worldmodel) per training step [default: 64
    /// for policy, 16 for worldmodel].
    #[arg(long)]
    batch_size: Option<usize>,
    /// Timed steps [default: 30; 3 learning steps per replay size for learner; with
    /// --policy, 30 inferences and 3 training steps, or this many of each].
    #[arg(long)]
    steps: Option<usize>,
    /// Replay sizes, in episodes, at which the learner is timed (learner only).
    #[arg(long, value_delimiter = ',', default_values_t = [100, 500, 2000])]
    episodes: Vec<usize>,
    /// The learner's window, in episodes (learner only) [default: the daemon's].
    #[arg(long)]
    window: Option<usize>,
    /// Also write the figures as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Time this LeRobot policy directory (ACT or Diffusion Policy) instead of
    /// `--what`: batch-1 inference of a chunk and a training step of `--batch-size`
    /// (compare with scripts/lerobot_policy_speed.py).
    #[arg(long, value_name = "DIR")]
    policy: Option<PathBuf>,
    #[command(flatten)]
    robot: RobotArgs,
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
    /// The daemon's learning step as the replay grows to each of `--episodes`: its
    /// time and the process's resident memory with the learner's window.
    Learner,
    /// The robot's camera frames: the CPU renderer versus the batched WGSL renderer
    /// on the first wgpu adapter, at `--batch-size` scenes per call [default: 1, 16,
    /// 64, 256].
    Render,
    /// The CubeCL kernels (lambda-return scan, ensemble statistics, SALT step) versus
    /// the same computations in burn's composite ops, on `--device` (`wgpu`, `cuda`,
    /// or the CPU reference on `cpu`).
    Kernels,
    /// The robot bridge's round trip on loopback (command out, step, observation
    /// back and decoded), with raw and deflated frames, at `--batch-size` pixels of
    /// camera side [default: 96 and 224]; a reacher2d served on a thread of its own.
    Bridge,
}

/// Times what `--what` names and prints the figures.
pub fn run(args: BenchArgs, device: DeviceSpec) -> anyhow::Result<()> {
    let (batch_size, report) = (args.batch_size, args.report);
    if let Some(batch_size) = batch_size {
        flag_in_range("--batch-size", batch_size, 1..=MAX_BATCH)?;
    }
    let default_steps = match args.what {
        BenchTarget::Learner => 3,
        _ => 30,
    };
    let steps = args.steps.unwrap_or(default_steps);
    flag_in_range("--steps", steps, 1..=100_000)?;
    let robot = args.robot.resolve()?;
    if let Some(dir) = &args.policy {
        let device = resolve(device)?;
        let train_steps = args.steps.unwrap_or(3);
        let rows =
            bench_lerobot_policy(dir, &device, (steps, train_steps, batch_size.unwrap_or(64)))?;
        println!("{} on {}", dir.display(), device.description);
        print!("{}", LeRobotBenchRow::table(&rows));
        if let Some(path) = &report {
            write_json(path, &rows)?;
        }
        return Ok(());
    }
    if let BenchTarget::Bridge = args.what {
        let sizes = match batch_size {
            Some(side) => vec![side as u32],
            None => vec![96, 224],
        };
        let rows = bench_bridge(&sizes, steps.max(20))?;
        println!(
            "bridge round trip on loopback (zenoh tcp), {} steps per row; local step = the robot's simulation and rendering alone",
            steps.max(20)
        );
        println!(
            "| camera | frames | message bytes | round trip p50 ms | p99 ms | local step p50 ms |"
        );
        println!("|---|---|---|---|---|---|");
        for row in &rows {
            println!(
                "| {0}x{0} | {1} | {2} | {3:.3} | {4:.3} | {5:.3} |",
                row.image_size,
                row.frames,
                row.message_bytes,
                row.round_trip_p50_ms,
                row.round_trip_p99_ms,
                row.local_step_p50_ms
            );
        }
        let codec = bench_frame_codec(&sizes, steps.max(20))?;
        println!("\ndeflate (zlib level 1) on one frame, by content:");
        println!(
            "| camera | content | raw bytes | deflated bytes | deflate p50 ms | inflate p50 ms |"
        );
        println!("|---|---|---|---|---|---|");
        for row in &codec {
            println!(
                "| {0}x{0} | {1} | {2} | {3} | {4:.3} | {5:.3} |",
                row.image_size,
                row.content,
                row.raw_bytes,
                row.deflate_bytes,
                row.encode_p50_ms,
                row.decode_p50_ms
            );
        }
        return report.map_or(Ok(()), |path| {
            write_json(
                &path,
                &serde_json::json!({ "round_trips": rows, "frame_codec": codec }),
            )
        });
    }
    if let BenchTarget::Render = args.what {
        let batches = match batch_size {
            Some(n) => vec![n],
            None => vec![1, 16, 64, 256],
        };
        let rows = bench_render(&robot, &batches, steps)?;
        print!("{}", RenderBenchRow::table(&rows));
        return report.map_or(Ok(()), |path| write_json(&path, &rows));
    }
    let device = resolve(device)?;
    match args.what {
        BenchTarget::Kernels => {
            println!("{}, median of {steps} timed calls", device.description);
            let rows = bench_kernels(&device, steps);
            print!("{}", KernelBenchRow::table(&rows));
            report.map_or(Ok(()), |path| write_json(&path, &rows))
        }
        BenchTarget::Daemon => {
            let rows = bench_daemon(&device, &robot, steps as u64)?;
            print!("{}", DaemonBenchRow::table(&rows));
            if let [overlapped, in_turns] = rows.as_slice() {
                println!(
                    "overlapped / in turns: {:.2}x learning steps per minute",
                    overlapped.learning_steps_per_minute / in_turns.learning_steps_per_minute
                );
            }
            report.map_or(Ok(()), |path| write_json(&path, &rows))
        }
        BenchTarget::Learner => {
            let learner = LearnerConfig::default();
            let window = args.window.unwrap_or(learner.window_episodes);
            flag_in_range("--window", window, 1..=100_000)?;
            let mut sizes = args.episodes;
            for &size in &sizes {
                flag_in_range("--episodes", size, 1..=1_000_000)?;
            }
            sizes.sort_unstable();
            println!(
                "{}: {steps} learning steps per replay size, {} new episodes before each",
                device.description, learner.min_episodes
            );
            let rows = bench_learner(&device, &robot, &sizes, window, steps)?;
            print!("{}", LearnerBenchRow::table(&rows));
            report.map_or(Ok(()), |path| write_json(&path, &rows))
        }
        BenchTarget::Worldmodel => {
            let batch_size = batch_size.unwrap_or(WorldModelTrainConfig::default().batch_size);
            let rows = bench_world_model(&device, &robot, batch_size, steps)?;
            print!("{}", WorldModelBenchRow::table(&rows));
            report.map_or(Ok(()), |path| write_json(&path, &rows))
        }
        BenchTarget::Policy | BenchTarget::Render | BenchTarget::Bridge => {
            let bench = bench_policy(&device, &robot, batch_size.unwrap_or(64), steps)?;
            println!(
                "{}: training step (batch {}) p50 {:.1} ms, p90 {:.1} ms over {} steps; inference (batch 1) through burn's forward p50 {:.2} ms, p99 {:.2} ms",
                bench.device,
                bench.batch_size,
                bench.train_step_p50_ms,
                bench.train_step_p90_ms,
                bench.steps,
                bench.inference_p50_ms,
                bench.inference_p99_ms
            );
            if let (Some(p50), Some(p99)) =
                (bench.host_inference_p50_ms, bench.host_inference_p99_ms)
            {
                println!(
                    "inference (batch 1) through the host forward the daemon's actor runs on the CPU: p50 {p50:.3} ms, p99 {p99:.3} ms"
                );
            }
            report.map_or(Ok(()), |path| write_json(&path, &bench))
        }
    }
}
