//! `imago accelerate`: certified acceleration (CARE). Faster variants of a policy
//! execute more of each action chunk open-loop (re-planning every `k` ticks instead of
//! every tick, so the policy runs `k` times less per tick), for a flow head sample
//! with fewer Euler steps, and compute in f16 or bf16 where the device's backend
//! supports them. Each variant runs paired episodes with the reference (`k = 1`, the
//! checkpoint's flow steps, f32) from identical seeds; among episodes the
//! reference solves, the share the variant fails is bounded by an anytime-valid
//! confidence bound ([`FailureCounts`]). Variants are tried fastest first (measured
//! policy compute per tick); the first whose bound is certified below the budget is
//! chosen, else the reference. A LeRobot Diffusion Policy's fewer denoising steps are
//! certified the same way (`jobs::accelerate_lerobot`, which uses this module).

use std::path::Path;
use std::time::Instant;

use imago_policies::{ActionHeadKind, Policy, PolicyConfig, Precision};
use imago_robots::{Observation, Robot};
use serde::Serialize;

use crate::act::evaluate::{Controller, evaluate, measure_latency};
use crate::act::promotion_run::PROMOTION_BATCH;
use crate::device::ResolvedDevice;
use crate::promotion::FailureCounts;
use crate::robot::RobotConfig;
use crate::store::checkpoint::{ensure_trained_for, load_policy};

/// What `imago accelerate` tries, and how sure it must be.
#[derive(Debug, Clone)]
pub struct AccelerateOptions<'a> {
    /// The policy's checkpoint.
    pub ckpt: &'a Path,
    /// The simulated robot.
    pub robot: &'a RobotConfig,
    /// Largest failure rate among reference-solved episodes a variant may have.
    pub budget: f64,
    /// Confidence of the bound.
    pub confidence: f64,
    /// Paired episodes per variant at most.
    pub max_episodes: usize,
    /// Seed of the first paired episode.
    pub first_seed: u64,
}

impl AccelerateOptions<'_> {
    /// Checks the budget (in (0, 1); NaN is not) and the confidence (in [0.5, 0.9999])
    /// before any episode runs, whatever kind of policy is accelerated.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.budget > 0.0 && self.budget < 1.0,
            "--budget {}: must lie in (0, 1)",
            self.budget
        );
        anyhow::ensure!(
            (0.5..=0.9999).contains(&self.confidence),
            "--confidence {}: must lie in [0.5, 0.9999]",
            self.confidence
        );
        Ok(())
    }
}

/// One variant's test.
#[derive(Debug, Clone, Serialize)]
pub struct VariantReport {
    /// Actions of each chunk executed before re-planning.
    pub execute_steps: usize,
    /// Euler steps of the flow head's sampler (`None`: a Gaussian head).
    pub flow_steps: Option<usize>,
    /// The float precision the policy computes in.
    pub precision: Precision,
    /// Policy forward passes per control tick, relative to the reference: `1 / k`.
    pub policy_calls_per_tick: f64,
    /// Measured policy compute per control tick (batch-1 latency p50 with these flow
    /// steps and this precision, divided by `k`), ms.
    pub policy_ms_per_tick: f64,
    /// Speed-up of the policy compute per tick over the reference: `k` times the
    /// reference's latency over this variant's.
    pub speedup: f64,
    /// Its paired test against the reference.
    #[serde(flatten)]
    pub test: PairedTest,
}

/// What a variant's paired episodes with the reference found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PairedTest {
    /// Paired episodes run.
    pub episodes: usize,
    /// Episodes the reference solved (the trials).
    pub reference_solved: u32,
    /// Of them, the variant failed.
    pub variant_failed: u32,
    /// The variant's success rate over all paired episodes.
    pub variant_success_rate: f64,
    /// The reference's success rate over all paired episodes.
    pub reference_success_rate: f64,
    /// Upper bound on the failure rate among reference-solved episodes, at the
    /// confidence asked for.
    pub certified_bound: f64,
    /// The bound is below the budget.
    pub certified: bool,
}

/// What `imago accelerate` chose.
#[derive(Debug, Clone, Serialize)]
pub struct AccelerateReport {
    /// The chosen variant's `execute_steps` (1: the reference).
    pub chosen_execute_steps: usize,
    /// The chosen variant's flow steps (`None`: a Gaussian head).
    pub chosen_flow_steps: Option<usize>,
    /// The chosen variant's precision (f32: the reference's).
    pub chosen_precision: Precision,
    /// Its speed-up of policy compute per tick.
    pub chosen_speedup: f64,
    /// Its certified bound (0 for the reference, which is never tested against itself).
    pub chosen_bound: f64,
    /// The budget.
    pub budget: f64,
    /// The confidence.
    pub confidence: f64,
    /// Reference latency at batch 1, p50, ms.
    pub reference_policy_ms: f64,
    /// The reference's flow steps, the checkpoint's (`None`: a Gaussian head).
    pub reference_flow_steps: Option<usize>,
    /// Precisions measured: f32 (the reference's) and those the device's backend
    /// supports (burn-flex: f16 and bf16; burn-ndarray: none).
    pub precisions: Vec<Precision>,
    /// Every variant tried, fastest first.
    pub variants: Vec<VariantReport>,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// Runs certified acceleration on the checkpoint of `options`.
pub fn run_accelerate(
    options: &AccelerateOptions<'_>,
    device: &ResolvedDevice,
) -> anyhow::Result<AccelerateReport> {
    options.validate()?;
    let started = Instant::now();
    ensure_trained_for(options.ckpt, &options.robot.spec())?;
    let (policy, config, _) = load_policy::<burn::Dispatch>(options.ckpt, None, &device.inference)?;
    let observation = options.robot.build()?.reset(options.first_seed);
    let (precisions, samplers) = timed_samplers(&policy, &config, device, &observation)?;
    let reference_ms = samplers[0].latency_ms;
    let controller = |policy, execute_steps| Controller::Policy {
        policy,
        config: &config,
        device: &device.inference,
        wrong_instruction: false,
        execute_steps,
        sampling_noise: 0.0,
    };
    let reference = controller(&samplers[0].policy, 1);
    let executes: Vec<usize> = std::iter::successors(Some(1usize), |k| Some(k * 2))
        .take_while(|&k| k <= config.chunk_len())
        .collect();
    // Every faster combination, fastest first.
    let mut candidates: Vec<(usize, usize, f64)> = samplers
        .iter()
        .enumerate()
        .flat_map(|(i, sampler)| {
            let ms = sampler.latency_ms;
            executes
                .iter()
                .map(move |&k| (i, k, k as f64 * (reference_ms / ms)))
        })
        .filter(|&(i, k, speedup)| (i, k) != (0, 1) && speedup > 1.0)
        .collect();
    candidates.sort_by(|a, b| b.2.total_cmp(&a.2));
    let mut variants = Vec::new();
    for (sampler, k, speedup) in candidates {
        let Sampler {
            flow_steps,
            policy,
            latency_ms,
        } = &samplers[sampler];
        let variant = controller(policy, k);
        let test = run_pairs(&reference, &variant, options)?;
        let certified = test.certified;
        variants.push(VariantReport {
            execute_steps: k,
            flow_steps: *flow_steps,
            precision: policy.precision(),
            policy_calls_per_tick: 1.0 / k as f64,
            policy_ms_per_tick: latency_ms / k as f64,
            speedup,
            test,
        });
        if certified {
            break;
        }
    }
    let chosen = variants.iter().find(|v| v.test.certified);
    Ok(AccelerateReport {
        chosen_execute_steps: chosen.map_or(1, |v| v.execute_steps),
        chosen_flow_steps: chosen.map_or(samplers[0].flow_steps, |v| v.flow_steps),
        chosen_precision: chosen.map_or(Precision::F32, |v| v.precision),
        chosen_speedup: chosen.map_or(1.0, |v| v.speedup),
        chosen_bound: chosen.map_or(0.0, |v| v.test.certified_bound),
        budget: options.budget,
        confidence: options.confidence,
        reference_policy_ms: reference_ms,
        reference_flow_steps: samplers[0].flow_steps,
        precisions,
        variants,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The reference's and a variant's paired episodes, until the variant's failures on
/// episodes the reference solves are certified below the budget (evidence past
/// `1 / (1 - confidence)`) or `options.max_episodes` ran.
pub fn run_pairs(
    reference: &Controller<'_, burn::Dispatch>,
    variant: &Controller<'_, burn::Dispatch>,
    options: &AccelerateOptions<'_>,
) -> anyhow::Result<PairedTest> {
    let threshold = 1.0 / (1.0 - options.confidence);
    let mut counts = FailureCounts::default();
    let (mut episodes, mut reference_wins, mut variant_wins) = (0, 0, 0);
    while episodes < options.max_episodes && counts.evidence_below(options.budget) < threshold {
        let batch = PROMOTION_BATCH.min(options.max_episodes - episodes) as u64;
        let seeds: Vec<u64> = (0..batch)
            .map(|i| options.first_seed.wrapping_add(episodes as u64 + i))
            .collect();
        let a = evaluate(reference, options.robot, &seeds, "reference")?;
        let b = evaluate(variant, options.robot, &seeds, "variant")?;
        for (&ra, &vb) in a.success.iter().zip(&b.success) {
            if ra {
                counts.observe(!vb);
            }
        }
        reference_wins += a.successes();
        variant_wins += b.successes();
        episodes += seeds.len();
    }
    Ok(PairedTest {
        episodes,
        reference_solved: counts.trials,
        variant_failed: counts.failures,
        variant_success_rate: variant_wins as f64 / episodes.max(1) as f64,
        reference_success_rate: reference_wins as f64 / episodes.max(1) as f64,
        certified_bound: counts.certified_bound(options.confidence),
        certified: counts.evidence_below(options.budget) >= threshold,
    })
}

/// Every sampler of `policy` to try (each precision the device supports, each flow
/// step count from the checkpoint's halved down to 1), the reference (f32, the
/// checkpoint's steps) first, with its batch-1 latency on `observation`; and the
/// precisions tried.
fn timed_samplers(
    policy: &Policy<burn::Dispatch>,
    config: &PolicyConfig,
    device: &ResolvedDevice,
    observation: &Observation,
) -> anyhow::Result<(Vec<Precision>, Vec<Sampler>)> {
    let flow_steps: Vec<Option<usize>> = match config.head() {
        ActionHeadKind::Gaussian => vec![None],
        ActionHeadKind::Flow => {
            std::iter::successors(Some(config.flow_steps()), |&s| (s > 1).then_some(s / 2))
                .map(Some)
                .collect()
        }
    };
    let precisions: Vec<Precision> = std::iter::once(Precision::F32)
        .chain(
            Precision::NARROW
                .into_iter()
                .filter(|p| p.supported_on::<burn::Dispatch>(&device.inference)),
        )
        .collect();
    // One copy of the weights per precision; the samplers of a precision share it.
    let weights: Vec<_> = precisions
        .iter()
        .map(|&p| policy.clone().with_precision(p))
        .collect();
    let with_steps = |policy: &Policy<burn::Dispatch>, steps: Option<usize>| match steps {
        Some(steps) => policy.clone().with_flow_steps(steps),
        None => policy.clone(),
    };
    let mut samplers: Vec<Sampler> = weights
        .iter()
        .flat_map(|weights| {
            flow_steps.iter().map(|&steps| Sampler {
                flow_steps: steps,
                policy: with_steps(weights, steps),
                latency_ms: f64::INFINITY,
            })
        })
        .collect();
    // Latency of each sampler, measured on one copy of the weights per precision
    // (copies alone differed by up to 30% here), in three interleaved rounds of which
    // the smallest median counts, so that warm-up and drift favour none of them.
    let mut timed = weights.clone();
    for _ in 0..3 {
        for sampler in &mut samplers {
            let copy = precisions
                .iter()
                .position(|&p| p == sampler.policy.precision())
                .ok_or_else(|| anyhow::anyhow!("a sampler of an untried precision"))?;
            timed[copy] = with_steps(&timed[copy], sampler.flow_steps);
            let latency =
                measure_latency(&timed[copy], config, &device.inference, observation, 50)?;
            sampler.latency_ms = sampler.latency_ms.min(latency.p50);
        }
    }
    Ok((precisions, samplers))
}

/// One way of computing the policy's chunks: its sampler's steps and its precision (in
/// `policy`), and its measured latency.
struct Sampler {
    flow_steps: Option<usize>,
    policy: Policy<burn::Dispatch>,
    latency_ms: f64,
}
