//! The `imago` command line: a thin dispatcher. Each command's flags and what it runs
//! live in [`commands`]; flags several commands share in [`args`]. Every command takes
//! `--device`.

mod args;
mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use imago_runtime::device::DeviceSpec;

use commands::{
    accelerate, bench, collect, daemon, dataset, demo, devices, eval, gate, inspect, learner,
    replay, retarget, robot_serve, train, wm_eval,
};

#[derive(Debug, Parser)]
#[command(
    name = "imago",
    version,
    about = "On-device trainer for robot policies and world models"
)]
struct Cli {
    /// Where models run: auto, cpu (burn-flex; also cpu:flex), cpu:ndarray, wgpu, wgpu:N,
    /// cuda, cuda:N.
    #[arg(long, global = true, default_value = "auto")]
    device: DeviceSpec,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Collect imperfect demonstrations, train a VLA policy by behaviour cloning,
    /// evaluate it on paired seeds and print a table.
    Demo(demo::DemoArgs),
    /// Run on the robot: the control loop at its rate, crash-safe recording, and a
    /// learner that fine-tunes the policy and hot-swaps it in. SIGINT/SIGTERM stop at a
    /// tick boundary, flush the replay, write a checkpoint and exit 0.
    Daemon(daemon::DaemonArgs),
    /// Turn a recorded replay (and optionally a world model, for imagined rollouts)
    /// into a rerun recording.
    Inspect(inspect::InspectArgs),
    /// List the devices this build can use on this machine.
    Devices(devices::DevicesArgs),
    /// Time the policy's training step and batch-1 inference, or the world model's
    /// training step and imagination, on `--device`.
    Bench(bench::BenchArgs),
    /// Record scripted demonstrations into a replay directory.
    Collect(collect::CollectArgs),
    /// Train from a replay directory (the models' shapes come from the robot it
    /// records).
    Train(train::TrainArgs),
    /// Score a world model's open-loop rollouts on held-out episodes: error per
    /// horizon, disagreement-error rank correlation, interval coverage.
    WmEval(wm_eval::WmEvalArgs),
    /// Check a replay for damage, or copy its whole episodes into a clean one.
    Replay {
        #[command(subcommand)]
        command: replay::ReplayCommand,
    },
    /// Evaluate a policy checkpoint in closed loop, alone or paired with another on the
    /// same seeds.
    Eval(eval::EvalArgs),
    /// Rewrite a policy checkpoint for a robot whose proprioception has, by name, every
    /// entry the policy reads (pusht's pose-setting clone that learned to see the block
    /// for the vision setting; docs/policy.md, "Keypoint targets").
    Retarget(retarget::RetargetArgs),
    /// Serve a built-in simulated robot over the bridge (zenoh), for a daemon with
    /// `robot = "remote"` in another process or on another machine (docs/bridge.md).
    RobotServe(robot_serve::RobotServeArgs),
    /// The learner of a fleet: stores the episodes of every actor (`imago daemon
    /// --learner`) in one replay, trains on it and publishes each new policy version
    /// (docs/fleet.md).
    Learner(learner::LearnerArgs),
    /// The champion-challenger promotion test offline: paired episodes in simulation
    /// until a sequential, anytime-valid test promotes the challenger or keeps the
    /// champion (docs/promotion.md).
    Gate(gate::GateArgs),
    /// Certified acceleration: the fastest variant of a policy (more of each action
    /// chunk executed open-loop) whose failure rate on episodes the policy solves is
    /// certified below a budget (docs/promotion.md).
    Accelerate(accelerate::AccelerateArgs),
    /// Bring data in: a LeRobot dataset becomes a replay (docs/datasets.md).
    Import {
        #[command(subcommand)]
        command: dataset::ImportCommand,
    },
    /// Hand data out: a replay becomes a LeRobot dataset (docs/datasets.md).
    Export {
        #[command(subcommand)]
        command: dataset::ExportCommand,
    },
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let device = cli.device;
    match cli.command {
        Command::Demo(args) => demo::run(args, device),
        Command::Daemon(args) => daemon::run(args, device),
        Command::Inspect(args) => inspect::run(args, device),
        Command::Devices(args) => devices::run(args, device),
        Command::Bench(args) => bench::run(args, device),
        Command::Collect(args) => collect::run(args),
        Command::Train(args) => train::run(args, device),
        Command::WmEval(args) => wm_eval::run(args, device),
        Command::Replay { command } => replay::run(command),
        Command::Eval(args) => eval::run(args, device),
        Command::Retarget(args) => retarget::run(args, device),
        Command::RobotServe(args) => robot_serve::run(args),
        Command::Learner(args) => learner::run(args, device),
        Command::Gate(args) => gate::run(args, device),
        Command::Accelerate(args) => accelerate::run(args, device),
        Command::Import { command } => dataset::run_import(command),
        Command::Export { command } => dataset::run_export(command),
    }
}

fn main() -> ExitCode {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // SAFETY: no other thread exists yet. Vulkan loaders warn without this variable.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir()) };
    }
    imago_runtime::allocator::reuse_freed_tensor_memory();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
