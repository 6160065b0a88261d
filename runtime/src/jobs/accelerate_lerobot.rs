//! `imago accelerate --ckpt DIR` of a LeRobot Diffusion Policy: fewer denoising steps,
//! certified as for imago's own policies ([`super::accelerate`]). Each variant denoises
//! with DDIM in fewer steps (halved from the policy's own down to 1) and runs paired
//! episodes with the reference (the policy as its `config.json` sets it, DDPM 100 by
//! default) from identical seeds (and noise seeds: `act::evaluate`); among episodes the
//! reference solves, the share the variant fails is bounded by an anytime-valid bound.
//! Variants are tried fastest first (measured time to denoise one chunk at batch 1);
//! the first certified below the budget is chosen, else the reference. The choice is
//! what to set in `config.json` (`noise_scheduler_type`, `num_inference_steps`).

use std::time::Instant;

use burn::Dispatch;
use imago_policies::diffusion::SamplerKind;
use imago_robots::{Observation, Robot};
use serde::Serialize;

use super::accelerate::{AccelerateOptions, PairedTest, run_pairs};
use crate::act::evaluate::{Controller, time_calls};
use crate::act::lerobot_driver::LeRobotDriver;
use crate::device::ResolvedDevice;
use crate::store::lerobot_policy::{LeRobotPolicy, load_lerobot_policy};

/// One sampler's test.
#[derive(Debug, Clone, Serialize)]
pub struct SamplerVariant {
    /// `DDPM` or `DDIM`, as `config.json` names it.
    pub sampler: String,
    /// Denoising steps per chunk.
    pub steps: usize,
    /// Time to denoise one chunk at batch 1 (p50 of 3 calls after one), ms.
    pub chunk_ms: f64,
    /// The reference's chunk time over this one's.
    pub speedup: f64,
    /// Its paired test against the reference (all zero for the reference itself).
    #[serde(flatten)]
    pub test: PairedTest,
}

/// What `imago accelerate` chose for a LeRobot Diffusion Policy.
#[derive(Debug, Clone, Serialize)]
pub struct SamplerReport {
    /// The reference: the sampler and steps of the policy's `config.json`, untested.
    pub reference: SamplerVariant,
    /// Every variant tried, fastest first.
    pub variants: Vec<SamplerVariant>,
    /// The chosen sampler (the reference's when none was certified).
    pub chosen_sampler: String,
    /// Its steps.
    pub chosen_steps: usize,
    /// Its speed-up per chunk.
    pub chosen_speedup: f64,
    /// Its certified bound (0 for the reference).
    pub chosen_bound: f64,
    /// The budget.
    pub budget: f64,
    /// The confidence.
    pub confidence: f64,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// `config.json`'s name of a sampler.
fn sampler_name(sampler: SamplerKind) -> &'static str {
    match sampler {
        SamplerKind::Ddpm => "DDPM",
        SamplerKind::Ddim => "DDIM",
    }
}

/// Runs certified acceleration of the LeRobot Diffusion Policy directory of
/// `options.ckpt`. Options out of range, or an ACT directory (it predicts its chunk in
/// one pass, with no steps to cut), are an error before any episode runs.
pub fn accelerate_lerobot_policy(
    options: &AccelerateOptions<'_>,
    device: &ResolvedDevice,
) -> anyhow::Result<SamplerReport> {
    options.validate()?;
    let started = Instant::now();
    let dir = options.ckpt;
    let policy = load_lerobot_policy::<Dispatch>(dir, &device.inference)?;
    let LeRobotPolicy::Diffusion(diffusion) = &policy else {
        anyhow::bail!(
            "{}: an ACT policy has no denoising steps for imago accelerate to cut (it predicts a chunk in one pass)",
            dir.display()
        );
    };
    let mut robot = options.robot.build()?;
    let (spec, units) = (options.robot.spec(), robot.lerobot_units());
    let observation = robot.reset(options.first_seed);
    let bind = |policy| {
        LeRobotDriver::new(policy, (&spec, units.clone()), &device.inference)
            .map_err(|e| anyhow::anyhow!("{}: {e:#}", dir.display()))
    };
    let (reference_sampler, reference_steps) = diffusion.model.shape().sampler;
    let steps: Vec<usize> =
        std::iter::successors(Some(reference_steps / 2), |&s| (s > 1).then_some(s / 2))
            .filter(|&s| s >= 1)
            .collect();
    let candidates: Vec<LeRobotPolicy<Dispatch>> = steps
        .iter()
        .map(|&s| {
            diffusion
                .sampling_with(SamplerKind::Ddim, s)
                .map(LeRobotPolicy::Diffusion)
                .map_err(|e| anyhow::anyhow!("DDIM in {s} steps: {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let reference_driver = bind(policy)?;
    let reference_ms = chunk_ms(&reference_driver, &observation)?;
    let reference = Controller::LeRobot(&reference_driver);
    let mut variants = Vec::new();
    // Fewest steps (fastest) first.
    for (candidate, &s) in candidates.into_iter().zip(&steps).rev() {
        let driver = bind(candidate)?;
        let ms = chunk_ms(&driver, &observation)?;
        let test = run_pairs(&reference, &Controller::LeRobot(&driver), options)?;
        let certified = test.certified;
        variants.push(SamplerVariant {
            sampler: sampler_name(SamplerKind::Ddim).into(),
            steps: s,
            chunk_ms: ms,
            speedup: reference_ms / ms,
            test,
        });
        if certified {
            break;
        }
    }
    let reference = SamplerVariant {
        sampler: sampler_name(reference_sampler).into(),
        steps: reference_steps,
        chunk_ms: reference_ms,
        speedup: 1.0,
        test: PairedTest::default(),
    };
    let chosen = variants
        .iter()
        .find(|v| v.test.certified)
        .unwrap_or(&reference);
    Ok(SamplerReport {
        chosen_sampler: chosen.sampler.clone(),
        chosen_steps: chosen.steps,
        chosen_speedup: chosen.speedup,
        chosen_bound: chosen.test.certified_bound,
        reference: reference.clone(),
        variants,
        budget: options.budget,
        confidence: options.confidence,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The time to denoise one chunk at batch 1: a new episode's first action (its queue
/// empty), p50 of 3 calls after one warm-up, ms.
fn chunk_ms(driver: &LeRobotDriver<Dispatch>, observation: &Observation) -> anyhow::Result<f64> {
    let latency = time_calls(1, 3, || {
        let mut episode = driver.new_episode();
        driver.act(vec![(&mut episode, observation)]).map(drop)
    })?;
    Ok(latency.p50)
}
