//! `imago gate`: the champion-challenger promotion test offline, on two checkpoints
//! (imago's or LeRobot policy directories, either side either kind), in simulation
//! ([`run_promotion_test`]), both acting alike (chunks executed per plan, sampling
//! noise) as the robot will run them.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::act::loaded_policy::{ExecutedSteps, LoadedPolicy};
use crate::act::promotion_run::{PromotionRun, run_promotion_test};
use crate::device::ResolvedDevice;
use crate::promotion::PromotionTestConfig;
use crate::robot::RobotConfig;

/// What `imago gate` compares, and how.
#[derive(Debug, Clone)]
pub struct GateOptions<'a> {
    /// The deployed policy's checkpoint or LeRobot directory.
    pub champion: &'a Path,
    /// The candidate's checkpoint or LeRobot directory.
    pub challenger: &'a Path,
    /// The simulated robot both run on.
    pub robot: &'a RobotConfig,
    /// The sequential test.
    pub test: PromotionTestConfig,
    /// Seed of the first paired episode.
    pub first_seed: u64,
    /// Actions of each chunk an imago policy executes per plan (both sides).
    pub executed: ExecutedSteps,
    /// The noise an imago policy samples its actions with, relative to its spread (0:
    /// the mean; both sides).
    pub sampling_noise: f32,
}

/// What a gate run decided, and what it cost.
#[derive(Debug, Clone, Serialize)]
pub struct GateReport {
    /// The decision and its figures.
    #[serde(flatten)]
    pub run: PromotionRun,
    /// Episodes a fixed-size test of the same confidence and budget always uses.
    pub fixed_size_episodes: u32,
    /// `fixed_size_episodes - episodes`.
    pub episodes_saved: u32,
    /// The test's settings.
    pub test: PromotionTestConfig,
    /// Actions of each chunk an imago policy executed per plan.
    pub executed_per_plan: usize,
    /// The noise imago policies sampled their actions with (0: the mean).
    pub sampling_noise: f32,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// Runs the promotion test of `options` on `device`.
pub fn run_gate(options: &GateOptions<'_>, device: &ResolvedDevice) -> anyhow::Result<GateReport> {
    options
        .test
        .validate()
        .map_err(|e| anyhow::anyhow!("promotion test: {e}"))?;
    let started = Instant::now();
    let champion = LoadedPolicy::load(options.champion, options.robot, &device.inference)?;
    let challenger = LoadedPolicy::load(options.challenger, options.robot, &device.inference)?;
    let run = run_promotion_test(
        (
            &champion.controller_executing(
                &device.inference,
                options.executed,
                options.sampling_noise,
            )?,
            &challenger.controller_executing(
                &device.inference,
                options.executed,
                options.sampling_noise,
            )?,
        ),
        options.robot,
        &options.test,
        options.first_seed,
    )?;
    Ok(GateReport {
        fixed_size_episodes: options.test.max_episodes,
        episodes_saved: options.test.max_episodes - run.episodes,
        run,
        test: options.test,
        executed_per_plan: options.executed.steps(),
        sampling_noise: options.sampling_noise,
        seconds: started.elapsed().as_secs_f64(),
    })
}
