//! How a learned world model's plans fare in the simulator (`imago eval --plan-with
//! DIR --check-plans`, simulated robots only).
//!
//! Why: the per-horizon errors of `wm-eval` say how far a model's predictions stray,
//! not whether it can tell a good chunk from a bad one, which is all a planner asks of
//! it. Here every plan's last-round candidates are scored twice, by imagination and by
//! stepping a copy of the episode's simulated robot through them
//! ([`simulated_return`](crate::act::simulated_planning::simulated_return)); the
//! report says how alike the two rankings are and what the model's choice earns in the
//! simulator against the candidates' mean and the simulator's own best.

use std::sync::Mutex;

use imago_worldmodel::metrics::spearman;
use serde::{Deserialize, Serialize};

/// What the check found over an evaluation's plans.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanCheckReport {
    /// Plans checked (one per start state and planning step).
    pub plans: usize,
    /// Mean over plans of the Spearman correlation between the model's and the
    /// simulator's scores of the plan's candidates (1: the same order); plans whose
    /// candidates score all alike in either are left out, `None` if all are.
    pub rank_correlation: Option<f64>,
    /// Plans the rank correlation averages over.
    pub ranked_plans: usize,
    /// Mean over plans of the simulator's return of the plan executed minus the mean
    /// of its candidates' simulator returns: what choosing by the model gains.
    pub chosen_gain: f64,
    /// The same for the candidate the simulator scores best: what a perfect model
    /// would gain choosing among the same candidates.
    pub best_gain: f64,
}

impl PlanCheckReport {
    /// One line for the terminal.
    pub fn line(&self) -> String {
        format!(
            "plans checked in the simulator: {} plans; the model ranks their candidates as the simulator does with Spearman {} (mean within a plan, {} plans); its choice gains {:+.4} of discounted return over the candidates' mean, the simulator's best {:+.4}",
            self.plans,
            self.rank_correlation
                .map_or("n/a".to_string(), |r| format!("{r:.2}")),
            self.ranked_plans,
            self.chosen_gain,
            self.best_gain
        )
    }
}

/// Running sums of the check; shared by the planning threads.
#[derive(Debug, Default)]
pub struct PlanCheck {
    sums: Mutex<Sums>,
}

#[derive(Debug, Default)]
struct Sums {
    plans: usize,
    ranked: usize,
    rank_sum: f64,
    chosen_gain: f64,
    best_gain: f64,
}

impl PlanCheck {
    /// Records one plan: the model's and the simulator's scores of its candidates
    /// (one each, in the same order) and the simulator's return of the plan executed.
    ///
    /// # Panics
    /// If the two score lists differ in length or are empty.
    pub fn record(&self, model: &[f32], simulator: &[f32], chosen: f32) {
        assert_eq!(
            model.len(),
            simulator.len(),
            "one score of each per candidate"
        );
        assert!(!simulator.is_empty(), "a plan has candidates");
        let wide = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        let truth = wide(simulator);
        let mean = truth.iter().sum::<f64>() / truth.len() as f64;
        let best = truth.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let rank = spearman(&wide(model), &truth);
        let mut sums = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        sums.plans += 1;
        if let Some(rank) = rank {
            sums.ranked += 1;
            sums.rank_sum += rank;
        }
        sums.chosen_gain += chosen as f64 - mean;
        sums.best_gain += best - mean;
    }

    /// The report over every plan recorded so far.
    pub fn report(&self) -> PlanCheckReport {
        let sums = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        let plans = sums.plans.max(1) as f64;
        PlanCheckReport {
            plans: sums.plans,
            rank_correlation: (sums.ranked > 0).then(|| sums.rank_sum / sums.ranked as f64),
            ranked_plans: sums.ranked,
            chosen_gain: sums.chosen_gain / plans,
            best_gain: sums.best_gain / plans,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_ranks_and_gains_are_averaged_over_plans() {
        let check = PlanCheck::default();
        // A model that orders the candidates as the simulator does and picks its best
        // (candidates' mean 2, best 4).
        check.record(&[0.1, 0.2, 0.3], &[0.0, 2.0, 4.0], 4.0);
        // One that orders them backwards and picks the simulator's worst (mean 1,
        // best 2).
        check.record(&[3.0, 2.0, 1.0], &[0.0, 1.0, 2.0], 0.0);
        // One whose scores cannot tell the candidates apart: no rank, a choice at the
        // mean (mean 1, best 1.5).
        check.record(&[1.0, 1.0], &[0.5, 1.5], 1.0);
        let report = check.report();
        assert_eq!(report.plans, 3);
        assert_eq!(report.ranked_plans, 2);
        assert_eq!(report.rank_correlation, Some(0.0));
        assert!((report.chosen_gain - (2.0 - 1.0 + 0.0) / 3.0).abs() < 1e-12);
        assert!((report.best_gain - (2.0 + 1.0 + 0.5) / 3.0).abs() < 1e-12);
        assert!(
            report
                .line()
                .contains("Spearman 0.00 (mean within a plan, 2 plans)")
        );
        assert_eq!(PlanCheck::default().report().rank_correlation, None);
    }
}
