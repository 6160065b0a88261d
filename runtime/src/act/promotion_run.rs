//! A champion-challenger promotion test run in simulation: both controllers act on
//! paired episodes from identical seeds, a lock-step batch at a time, until the
//! sequential test ([`crate::promotion`]) decides or its budget is spent. `imago gate`
//! runs it on checkpoints; the daemon's learner on each new version.

use burn::prelude::Backend;
use serde::{Deserialize, Serialize};

use crate::act::evaluate::{Controller, EvalOutcome, evaluate};
use crate::act::paired::PairedCounts;
use crate::promotion::{PairedOutcome, PromotionMetric, PromotionTestConfig, Verdict};
use crate::robot::RobotConfig;

/// Paired episodes evaluated at once (in lock-step) before the test looks again.
pub const PROMOTION_BATCH: usize = 16;

/// What a promotion test run decided, and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromotionRun {
    /// The verdict.
    pub decision: Verdict,
    /// Paired episodes the test used to decide.
    pub episodes: u32,
    /// Seed of the first of them; the others follow it.
    pub first_seed: u64,
    /// Paired episodes simulated (the test looks after each batch of
    /// [`PROMOTION_BATCH`], so up to a batch more than it used).
    pub episodes_simulated: usize,
    /// Outcome counts over the episodes used (baseline: the champion).
    pub paired: PairedCounts,
    /// E-value of "the challenger is better" at the decision.
    pub evidence_better: f64,
    /// E-value of "the challenger is worse" at the decision.
    pub evidence_worse: f64,
    /// The threshold both are compared with, `1 / (1 - confidence)`.
    pub threshold: f64,
    /// Both e-values after each paired episode used, in order (the running statistic
    /// rerun plots).
    #[serde(skip)]
    pub trace: Vec<(f64, f64)>,
}

/// Runs `test` with `champion` and `challenger` on `robot`, paired episodes from
/// `first_seed` on.
pub fn run_promotion_test<B: Backend>(
    (champion, challenger): (&Controller<'_, B>, &Controller<'_, B>),
    robot: &RobotConfig,
    test: &PromotionTestConfig,
    first_seed: u64,
) -> anyhow::Result<PromotionRun>
where
    B::Device: 'static,
{
    let mut sequential = test.start();
    let (mut used, mut used_challenger) = (EvalOutcome::default(), EvalOutcome::default());
    let mut simulated = 0;
    let mut trace = Vec::new();
    let max_steps = robot.spec().max_steps.max(1) as f64;
    let score = |success: bool, length: u32| match (success, test.metric) {
        (false, _) => 0.0,
        (true, PromotionMetric::Success) => 1.0,
        (true, PromotionMetric::StepsToSuccess) => 1.0 - length as f64 / max_steps,
    };
    while !sequential.verdict().is_final() {
        let left = (test.max_episodes - sequential.episodes()) as usize;
        let seeds: Vec<u64> = (0..left.min(PROMOTION_BATCH) as u64)
            .map(|i| first_seed.wrapping_add(simulated as u64 + i))
            .collect();
        let a = evaluate(champion, robot, &seeds, "champion")?;
        let b = evaluate(challenger, robot, &seeds, "challenger")?;
        simulated += seeds.len();
        for i in 0..seeds.len() {
            if sequential.verdict().is_final() {
                break;
            }
            sequential.observe(PairedOutcome {
                champion_success: a.success[i],
                challenger_success: b.success[i],
                champion_score: score(a.success[i], a.length[i]),
                challenger_score: score(b.success[i], b.length[i]),
            });
            trace.push(sequential.evidence());
            used.success.push(a.success[i]);
            used.length.push(a.length[i]);
            used_challenger.success.push(b.success[i]);
            used_challenger.length.push(b.length[i]);
        }
    }
    let (evidence_better, evidence_worse) = sequential.evidence();
    Ok(PromotionRun {
        decision: sequential.verdict(),
        episodes: sequential.episodes(),
        first_seed,
        episodes_simulated: simulated,
        paired: PairedCounts::count(&used, &used_challenger)?,
        evidence_better,
        evidence_worse,
        threshold: test.threshold(),
        trace,
    })
}
