//! A policy to act with, read from a directory: an imago policy checkpoint or a
//! LeRobot policy directory (ACT, Diffusion Policy), bound to the robot it will drive.
//! What `imago eval` and `imago gate` load, so either side of a comparison may be
//! either kind.

use std::path::Path;

use burn::{Dispatch, DispatchDevice};
use imago_policies::{Policy, PolicyConfig};
use imago_robots::Robot;

use crate::act::evaluate::{Controller, EvalOutcome, evaluate};
use crate::act::lerobot_driver::LeRobotDriver;
use crate::act::planned::ChunkPlanner;
use crate::act::remote_eval::evaluate_remote;
use crate::device::ResolvedDevice;
use crate::robot::RobotConfig;
use crate::store::checkpoint::{ensure_trained_for, load_policy};
use crate::store::lerobot_policy::{load_lerobot_policy, names_lerobot_policy};

/// Episodes one lock-step evaluation of a checkpoint runs at once.
pub const EVAL_BATCH: usize = 1024;

/// A loaded policy, ready to drive robots of one spec.
#[allow(clippy::large_enum_variant)]
pub enum LoadedPolicy {
    /// An imago checkpoint's policy and config.
    Imago {
        /// The policy.
        policy: Policy<Dispatch>,
        /// Its config.
        config: PolicyConfig,
    },
    /// A LeRobot policy with its features bound to the robot.
    LeRobot(LeRobotDriver<Dispatch>),
}

impl LoadedPolicy {
    /// The policy of `dir` on `device`, for robots of `robot`: a checkpoint trained
    /// for another spec, or a LeRobot policy that reads features the robot does not
    /// give, is one error naming both. A LeRobot directory is recognised also by the
    /// training checkpoint above it (refused, pointing to its `pretrained_model`).
    pub fn load(dir: &Path, robot: &RobotConfig, device: &DispatchDevice) -> anyhow::Result<Self> {
        if names_lerobot_policy(dir) {
            let policy = load_lerobot_policy::<Dispatch>(dir, device)?;
            let units = robot.build()?.lerobot_units();
            let driver = LeRobotDriver::new(policy, (&robot.spec(), units), device)
                .map_err(|e| anyhow::anyhow!("{}: {e:#}", dir.display()))?;
            return Ok(Self::LeRobot(driver));
        }
        ensure_trained_for(dir, &robot.spec())?;
        let (policy, config, _) = load_policy::<Dispatch>(dir, None, device)?;
        Ok(Self::Imago { policy, config })
    }

    /// The policy as an evaluation's controller on `device` (the device it was loaded
    /// on): an imago policy acting on the mean of its chunks, re-planning every tick.
    pub fn controller<'a>(&'a self, device: &'a DispatchDevice) -> Controller<'a, Dispatch> {
        self.controller_executing(device, ExecutedSteps::EVERY_TICK, 0.0)
            .expect("re-planning every tick on the mean suits every policy")
    }

    /// The policy as an evaluation's controller that executes `executed` actions of
    /// each planned chunk before planning again (receding horizon), acting on the
    /// chunks' means (`sampling_noise` 0) or on samples with the policy's spread scaled
    /// by `sampling_noise`. An imago policy whose chunks are shorter than `executed`,
    /// or a LeRobot policy asked for anything but every tick (it executes through its
    /// own queue, its config's `n_action_steps`) or for sampling noise (it samples as
    /// its config says), is an error that says so.
    pub fn controller_executing<'a>(
        &'a self,
        device: &'a DispatchDevice,
        executed: ExecutedSteps,
        sampling_noise: f32,
    ) -> anyhow::Result<Controller<'a, Dispatch>> {
        match self {
            Self::Imago { policy, config } => {
                executes_within_chunks(config, executed)?;
                Ok(Controller::Policy {
                    policy,
                    config,
                    device,
                    wrong_instruction: false,
                    execute_steps: executed.0,
                    sampling_noise,
                })
            }
            Self::LeRobot(driver) => {
                anyhow::ensure!(
                    executed == ExecutedSteps::EVERY_TICK,
                    "a LeRobot policy executes its chunks through its own queue (its config's n_action_steps): execute 1 action per plan, the default, for it"
                );
                anyhow::ensure!(
                    sampling_noise == 0.0,
                    "a LeRobot policy samples as its own config says: leave the sampling noise at 0, the default, for it"
                );
                Ok(Controller::LeRobot(driver))
            }
        }
    }

    /// The policy as the proposer of a controller whose chunks `planner` plans (in a
    /// world model, or in the simulator), executing `executed` actions of each plan, its candidates drawn
    /// around the policy's chunk with the policy's spread scaled by `sampling_noise`
    /// (above 0). A LeRobot policy, or chunks shorter than `executed`, is an error that
    /// says so.
    pub fn planned_controller<'a>(
        &'a self,
        device: &'a DispatchDevice,
        planner: &'a ChunkPlanner<Dispatch>,
        executed: ExecutedSteps,
        sampling_noise: f32,
    ) -> anyhow::Result<Controller<'a, Dispatch>> {
        anyhow::ensure!(
            sampling_noise > 0.0,
            "planning draws its candidates around the policy's chunk with the policy's spread scaled by the sampling noise: give a sampling noise above 0 (1: the policy's own spread)"
        );
        let Self::Imago { policy, config } = self else {
            anyhow::bail!(
                "planning in a world model starts from an imago policy's chunks; a LeRobot policy plans through its own queue"
            );
        };
        executes_within_chunks(config, executed)?;
        Ok(Controller::Planned {
            policy,
            config,
            device,
            planner,
            execute_steps: executed.0,
            sampling_noise,
        })
    }
}

/// An error unless `config`'s chunks hold the `executed` actions of each plan.
fn executes_within_chunks(config: &PolicyConfig, executed: ExecutedSteps) -> anyhow::Result<()> {
    anyhow::ensure!(
        executed.0 <= config.chunk_len(),
        "asked to execute {} actions of each plan, but the policy's chunks hold {}: execute at most {} (or train with --chunk-len {})",
        executed.0,
        config.chunk_len(),
        config.chunk_len(),
        executed.0
    );
    Ok(())
}

/// Actions of each planned chunk an imago policy executes before it plans again
/// (receding horizon): 1 re-plans every tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutedSteps(usize);

impl ExecutedSteps {
    /// Re-plan at every tick.
    pub const EVERY_TICK: Self = Self(1);
    /// The most any chunk allows (imago's chunks hold at most this many actions).
    pub const MAX: usize = imago_policies::MAX_CHUNK_LEN;

    /// `steps` actions per plan, in `1..=MAX`; `None` otherwise.
    pub fn new(steps: usize) -> Option<Self> {
        (1..=Self::MAX).contains(&steps).then_some(Self(steps))
    }

    /// Actions per plan.
    pub fn steps(self) -> usize {
        self.0
    }
}

/// Evaluates the policy of `dir` (a checkpoint or a LeRobot directory) on `robot` on
/// `episodes` seeds from `first_seed`, executing `executed` actions of each chunk per
/// plan, its means or samples with its spread scaled by `sampling_noise` (with
/// `planner`, the chunks it plans from the policy's in its world model), in
/// lock-step batches of at most [`EVAL_BATCH`] (memory stays flat for any number,
/// with the same outcomes).
pub fn evaluate_checkpoint(
    dir: &Path,
    robot: &RobotConfig,
    (episodes, first_seed): (usize, u64),
    (executed, sampling_noise): (ExecutedSteps, f32),
    planner: Option<&ChunkPlanner<Dispatch>>,
    device: &ResolvedDevice,
) -> anyhow::Result<EvalOutcome> {
    let seeds: Vec<u64> = (0..episodes as u64)
        .map(|i| first_seed.wrapping_add(i))
        .collect();
    let policy = LoadedPolicy::load(dir, robot, &device.inference)?;
    let controller = match planner {
        Some(planner) => {
            policy.planned_controller(&device.inference, planner, executed, sampling_noise)
        }
        None => policy.controller_executing(&device.inference, executed, sampling_noise),
    }
    .map_err(|e| anyhow::anyhow!("{}: {e:#}", dir.display()))?;
    if let RobotConfig::Remote(remote) = robot {
        return evaluate_remote(&controller, remote, &seeds, "eval");
    }
    let mut outcome = EvalOutcome {
        success: Vec::with_capacity(episodes),
        length: Vec::with_capacity(episodes),
        max_coverage: Vec::new(),
    };
    for batch in seeds.chunks(EVAL_BATCH) {
        outcome.extend(evaluate(&controller, robot, batch, "eval")?);
    }
    Ok(outcome)
}
