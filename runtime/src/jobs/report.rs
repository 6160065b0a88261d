//! The demo's report: printed as a table, written as JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::act::evaluate::{EvalOutcome, Latency};
use crate::act::paired::{PairedCounts, coverage_difference};
use crate::act::plan_check::PlanCheckReport;
use crate::act::promotion_run::PromotionRun;
use crate::learn::finetune::RoundReport;
use crate::learn::world_model::{
    ContactSplitReport, DecodedReport, ReadoutKind, WorldModelEvalReport,
};
use crate::promotion::Verdict;
use crate::stats::MeanInterval;

/// One evaluated controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControllerRow {
    /// What was evaluated.
    pub name: String,
    /// Episodes.
    pub episodes: usize,
    /// Success rate.
    pub success_rate: f64,
    /// 95% Wilson interval.
    pub interval: [f64; 2],
    /// Mean episode length, ticks.
    pub mean_length: f64,
    /// Mean over episodes of the largest goal coverage reached, scored as gym-pusht
    /// and LeRobot score it (tasks scored by coverage: pusht; `clip(coverage / 0.95,
    /// 0, 1)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_max_coverage: Option<f64>,
    /// 95% interval of `mean_max_coverage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage_interval: Option<[f64; 2]>,
    /// Its world-model plans checked in the simulator (`imago eval --check-plans`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_check: Option<PlanCheckReport>,
}

impl ControllerRow {
    /// The header line of a table of rows (with the coverage columns when `coverage`).
    pub fn table_header(coverage: bool) -> String {
        let mut line = format!(
            "{:<28} {:>8} {:>9} {:>17} {:>11}",
            "controller", "episodes", "success", "95% interval", "mean steps"
        );
        if coverage {
            line.push_str(&format!(" {:>13} {:>15}", "max coverage", "95% interval"));
        }
        line + "\n"
    }

    /// This row as a table line.
    pub fn table_line(&self) -> String {
        let mut line = format!(
            "{:<28} {:>8} {:>8.1}% {:>7.1}% - {:>5.1}% {:>11.1}",
            self.name,
            self.episodes,
            100.0 * self.success_rate,
            100.0 * self.interval[0],
            100.0 * self.interval[1],
            self.mean_length
        );
        if let (Some(mean), Some([lo, hi])) = (self.mean_max_coverage, self.coverage_interval) {
            line.push_str(&format!(" {mean:>13.3} {lo:>7.3} - {hi:.3}"));
        }
        line + "\n"
    }

    /// A row for `outcome`.
    pub fn new(name: &str, outcome: &EvalOutcome) -> Self {
        let (lo, hi) = outcome.interval();
        let coverage = outcome.mean_max_coverage();
        Self {
            name: name.to_string(),
            episodes: outcome.episodes(),
            success_rate: outcome.success_rate(),
            interval: [lo, hi],
            mean_length: outcome.mean_length(),
            mean_max_coverage: coverage.map(|c| c.mean),
            coverage_interval: coverage.map(|c| c.interval),
            plan_check: None,
        }
    }
}

/// Everything `imago demo` measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DemoReport {
    /// The device the models ran on.
    pub device: String,
    /// Whether this was the reduced (`--quick`) demo.
    pub quick: bool,
    /// Evaluation episodes per controller (paired seeds).
    pub episodes: usize,
    /// Actions of each planned chunk the policies executed before planning again in
    /// the evaluation (1: every tick).
    #[serde(default = "every_tick")]
    pub executed_per_plan: usize,
    /// Scale of the noise the policies sampled their actions with in the evaluation,
    /// relative to their own spread (0: they acted on their chunks' means).
    #[serde(default)]
    pub sampling_noise: f32,
    /// Demonstration episodes collected.
    pub demonstrations: usize,
    /// Success rate of the (imperfect) demonstrations.
    pub demonstration_success_rate: f64,
    /// Success rate of the behaviour-cloned policy.
    pub bc_success_rate: f64,
    /// The same policy given an instruction naming another target (`null` for a robot
    /// with a single task, pusht, where there is no other instruction to give).
    pub wrong_instruction_success_rate: Option<f64>,
    /// Uniformly random actions.
    pub random_success_rate: f64,
    /// Every evaluated controller.
    pub controllers: Vec<ControllerRow>,
    /// Behaviour-cloning loss at the first and last step.
    pub bc_loss: BTreeMap<String, f64>,
    /// Wall time per phase, seconds.
    pub phases: BTreeMap<String, f64>,
    /// Policy latency at batch 1, milliseconds.
    pub policy_latency_ms: Latency,
    /// The world model trained on the demonstrations, scored on held-out ones.
    pub world_model: WorldModelEvalReport,
    /// Success rate of the fine-tuned policy on the same seeds.
    pub finetuned_success_rate: f64,
    /// The behaviour-cloned and the fine-tuned policy, episode by episode.
    pub paired: DemoPairedCounts,
    /// Fine-tuned minus behaviour-cloned success rate, and its 95% interval (paired).
    pub improvement: Improvement,
    /// Fine-tuned minus behaviour-cloned mean max coverage, and the 95% interval of the
    /// paired differences (tasks scored by coverage: pusht).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage_improvement: Option<Improvement>,
    /// The fine-tuning method.
    pub finetune_method: String,
    /// Every fine-tuning round.
    pub finetune_rounds: Vec<RoundReport>,
    /// Whether the robot would run the fine-tuned policy: the daemon's promotion test
    /// (docs/promotion.md) of it (the challenger; `paired`'s candidate) against the
    /// cloned one (the champion; the baseline) on held-out seeds (absent from reports
    /// before 2026-12-06).
    #[serde(default)]
    pub promotion: Option<PromotionRun>,
    /// Where the replay and checkpoint were written.
    pub run_dir: String,
}

/// Paired outcomes of the behaviour-cloned and the fine-tuned policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemoPairedCounts {
    /// Both succeeded.
    pub both: usize,
    /// Only the behaviour-cloned policy succeeded.
    pub only_bc: usize,
    /// Only the fine-tuned policy succeeded.
    pub only_finetuned: usize,
    /// Neither succeeded.
    pub neither: usize,
}

impl From<PairedCounts> for DemoPairedCounts {
    fn from(counts: PairedCounts) -> Self {
        Self {
            both: counts.both,
            only_bc: counts.only_baseline,
            only_finetuned: counts.only_candidate,
            neither: counts.neither,
        }
    }
}

/// A paired difference of success rates with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Improvement {
    /// Candidate minus baseline.
    pub difference: f64,
    /// 95% interval of the difference.
    pub interval: [f64; 2],
}

impl From<MeanInterval> for Improvement {
    fn from(difference: MeanInterval) -> Self {
        Self {
            difference: difference.mean,
            interval: difference.interval,
        }
    }
}

impl From<PairedCounts> for Improvement {
    fn from(counts: PairedCounts) -> Self {
        let (lo, hi) = counts.difference_interval();
        Self {
            difference: counts.difference(),
            interval: [lo, hi],
        }
    }
}

/// Reports written before `executed_per_plan` was recorded re-planned every tick.
fn every_tick() -> usize {
    1
}

/// How the evaluated policies acted, for the table's header ("" for the defaults:
/// the mean of each chunk, re-planned every tick).
fn acting_description(executed_per_plan: usize, sampling_noise: f32) -> String {
    let executed = (executed_per_plan > 1)
        .then(|| format!("executing {executed_per_plan} actions of each plan"));
    let sampled =
        (sampling_noise > 0.0).then(|| format!("sampling their actions (noise x{sampling_noise})"));
    match (executed, sampled) {
        (None, None) => String::new(),
        (Some(one), None) | (None, Some(one)) => format!(", the policies {one}"),
        (Some(executed), Some(sampled)) => format!(", the policies {executed} and {sampled}"),
    }
}

impl DemoReport {
    /// The report as a plain-text table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "imago demo{} on {}: {} demonstrations ({:.0}% successful), {} paired evaluation episodes{}\n\n",
            if self.quick { " --quick" } else { "" },
            self.device,
            self.demonstrations,
            100.0 * self.demonstration_success_rate,
            self.episodes,
            acting_description(self.executed_per_plan, self.sampling_noise)
        ));
        let coverage = self
            .controllers
            .iter()
            .any(|r| r.mean_max_coverage.is_some());
        out.push_str(&ControllerRow::table_header(coverage));
        for row in &self.controllers {
            out.push_str(&row.table_line());
        }
        out.push_str(&format!(
            "\nfine-tuned ({}, {} rounds) vs behaviour-cloned on the same seeds: {:+.1} points [{:+.1}, {:+.1}]; both {}, only bc {}, only fine-tuned {}, neither {}\n",
            self.finetune_method,
            self.finetune_rounds.len(),
            100.0 * self.improvement.difference,
            100.0 * self.improvement.interval[0],
            100.0 * self.improvement.interval[1],
            self.paired.both,
            self.paired.only_bc,
            self.paired.only_finetuned,
            self.paired.neither
        ));
        if let Some(c) = &self.coverage_improvement {
            out.push_str(&format!(
                "fine-tuned vs behaviour-cloned mean max coverage, paired: {:+.3} [{:+.3}, {:+.3}]\n",
                c.difference, c.interval[0], c.interval[1]
            ));
        }
        if let Some(p) = &self.promotion {
            let decision = match p.decision {
                Verdict::Promote => "promote: the robot would run the fine-tuned policy",
                Verdict::RejectWorse => {
                    "keep the cloned policy: the fine-tuned one is certified worse"
                }
                Verdict::RejectUnproven | Verdict::Undecided => {
                    "keep the cloned policy: the fine-tuned one was not proven better"
                }
            };
            out.push_str(&format!(
                "promotion test (the daemon's gate) on {} held-out paired episodes from seed {}: {decision}; only fine-tuned {}, only bc {}; evidence better {:.3}, worse {:.3}, threshold {:.0}\n",
                p.episodes,
                p.first_seed,
                p.paired.only_candidate,
                p.paired.only_baseline,
                p.evidence_better,
                p.evidence_worse,
                p.threshold
            ));
        }
        out.push_str(&format!(
            "\npolicy latency (batch 1, on the path the robot runs it): p50 {:.2} ms, p99 {:.2} ms\n",
            self.policy_latency_ms.p50, self.policy_latency_ms.p99
        ));
        if let (Some(first), Some(last)) = (self.bc_loss.get("first"), self.bc_loss.get("last")) {
            out.push_str(&format!(
                "behaviour-cloning loss: {first:.3} -> {last:.3}\n"
            ));
        }
        out.push_str(&format!(
            "\nworld model ({}), open-loop on {} held-out episodes:\n",
            self.world_model.family, self.world_model.episodes
        ));
        let h = self.world_model.horizon;
        let mut rows = vec![1, 5.min(h), h];
        rows.dedup();
        out.push_str(&world_model_rows(&self.world_model, &rows));
        out.push('\n');
        out.push_str("wall time:");
        for (phase, seconds) in &self.phases {
            out.push_str(&format!(" {phase} {seconds:.1}s,"));
        }
        out.pop();
        out.push_str(&format!("\nreplay and checkpoint: {}\n", self.run_dir));
        out
    }
}

/// The rows of a world-model evaluation for `horizons` (from 1), then the rank
/// correlations.
fn world_model_rows(report: &WorldModelEvalReport, horizons: &[usize]) -> String {
    let mut out = format!(
        "{:>7} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5}\n",
        "horizon",
        "error",
        "copy-last",
        "const-vel",
        "shuffled",
        "1σ raw",
        "1σ own",
        "1σ cal",
        "2σ cal",
        "tail"
    );
    for &h in horizons {
        let i = h - 1;
        out.push_str(&format!(
            "{:>7} {:>8.3} {:>10.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>5}\n",
            h,
            report.horizon_error[i],
            report.copy_last_error[i],
            report.constant_velocity_error[i],
            report.shuffled_action_error[i],
            report.coverage_1sigma.raw[i],
            report.coverage_1sigma.own_rollout[i],
            report.coverage_1sigma.calibrated[i],
            report.coverage_2sigma.calibrated[i],
            report
                .tail_factor
                .get(i)
                .map_or("n/a".to_string(), |t| format!("{t:.1}")),
        ));
    }
    let span = |v: &[f64]| {
        let (lo, hi) = horizons
            .iter()
            .filter_map(|&h| v.get(h - 1))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
        format!("{lo:.3}-{hi:.3}")
    };
    if !report.coverage_1sigma.calibrated_gaussian.is_empty() {
        out.push_str(&format!(
            "calibrated: the 95.4% interval `tail` times the 68.3% one; Gaussian intervals (tail 2) cover {} / {} at these horizons\n",
            span(&report.coverage_1sigma.calibrated_gaussian),
            span(&report.coverage_2sigma.calibrated_gaussian),
        ));
    }
    out.push_str(&format!(
        "disagreement-error Spearman: across windows {} (mean over horizons), within trajectories {}, pooled {}\n",
        show_rank(report.spearman.across_dataset),
        show_rank(report.spearman.within_trajectory),
        show_rank(report.spearman.pooled)
    ));
    match &report.decoded {
        Some(decoded) => out.push_str(&decoded_rows(decoded, horizons)),
        None => out.push_str(
            "read out into the proprioception: not measured (a readout fitted on the episodes needs more steps than the latent has dimensions)\n",
        ),
    }
    if let Some(contact) = &report.contact {
        out.push_str(&contact_rows(contact, horizons));
    }
    out
}

/// A rank correlation to two decimals, or `n/a` where it is undefined.
fn show_rank(value: Option<f64>) -> String {
    value.map_or("n/a".to_string(), |v| format!("{v:.2}"))
}

/// The predictions read out into the proprioception: the normalised error per
/// horizon against copying the last measurement, and each entry's RMSE at the
/// longest horizon shown beside the readout's floor.
fn decoded_rows(decoded: &DecodedReport, horizons: &[usize]) -> String {
    let mut out = format!(
        "read out into the proprioception by {} (squared error / variance, mean of {} entries)\n{:>7} {:>8} {:>10}\n",
        match decoded.readout {
            ReadoutKind::ModelDecoder =>
                "the model's own readout (its state decoder or its latent's state entries)",
            ReadoutKind::FittedLinear => "a linear map fitted on the real latents",
        },
        decoded.names.len(),
        "horizon",
        "decoded",
        "copy-last"
    );
    for &h in horizons {
        out.push_str(&format!(
            "{:>7} {:>8.3} {:>10.3}\n",
            h,
            decoded.error[h - 1],
            decoded.copy_last_error[h - 1]
        ));
    }
    if let Some(&last) = horizons.last() {
        let entries: Vec<String> = decoded
            .names
            .iter()
            .enumerate()
            .map(|(k, name)| {
                format!(
                    "{name} {:.4} (copy-last {:.4}, floor {:.4})",
                    decoded.rmse[last - 1][k],
                    decoded.copy_last_rmse[last - 1][k],
                    decoded.readout_floor_rmse[k]
                )
            })
            .collect();
        out.push_str(&format!("RMSE at horizon {last}: {}\n", entries.join(", ")));
    }
    if let Some(spearman) = &decoded.spearman {
        out.push_str(&format!(
            "state disagreement-error Spearman (the members' read-out states): across windows {}, within trajectories {}, pooled {}\n",
            show_rank(spearman.across_dataset),
            show_rank(spearman.within_trajectory),
            show_rank(spearman.pooled)
        ));
    }
    out
}

/// Errors split by whether the pushed object moved by each horizon.
fn contact_rows(contact: &ContactSplitReport, horizons: &[usize]) -> String {
    let mut out = format!(
        "split by whether {} moved by the horizon (latent errors as above; decoded: its entries; where it stayed still copy-last's decoded error is about 0)\n{:>7} {:>7} {:>8} {:>10} {:>8} {:>10} {:>8} {:>10} {:>11}\n",
        contact.entries.join("/"),
        "horizon",
        "moved",
        "error",
        "copy-last",
        "decoded",
        "copy-last",
        "still",
        "copy-last",
        "still dec."
    );
    for &h in horizons {
        let i = h - 1;
        out.push_str(&format!(
            "{:>7} {:>7.2} {:>8.3} {:>10.3} {:>8.3} {:>10.3} {:>8.3} {:>10.3} {:>11}\n",
            h,
            contact.moved_share[i],
            contact.moved_error[i],
            contact.moved_copy_last_error[i],
            contact.moved_decoded_error[i],
            contact.moved_decoded_copy_last_error[i],
            contact.still_error[i],
            contact.still_copy_last_error[i],
            contact
                .still_decoded_error
                .get(i)
                .map_or("-".to_string(), |e| format!("{e:.3}")),
        ));
    }
    out
}

/// A world-model evaluation as a text table, every horizon (errors are normalised
/// by the target latents' variance; coverage of 1σ/2σ intervals, Gaussian 0.683/0.954).
pub fn world_model_table(report: &WorldModelEvalReport) -> String {
    let horizons: Vec<usize> = (1..=report.horizon).collect();
    let mut out = format!(
        "{} world model, {} windows of {} held-out episodes\n",
        report.family, report.windows, report.episodes
    );
    out.push_str(&world_model_rows(report, &horizons));
    if let Some(split) = &report.salt_error_split {
        out.push_str(&format!(
            "SALT error split at horizon {}: total {:.3} = injected {:.3} + propagated {:.3} (as vectors; largest identity residual {:.1e})\n",
            report.horizon,
            split.total[report.horizon - 1],
            split.injected[report.horizon - 1],
            split.propagated[report.horizon - 1],
            split.max_identity_residual
        ));
    }
    out
}

/// `imago eval --paired-with`: both checkpoints, their paired counts, the
/// difference of their success rates and, on tasks scored by coverage, of their
/// mean max coverages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedReport {
    /// The baseline (`--paired-with`).
    pub baseline: ControllerRow,
    /// The candidate (`--ckpt`).
    pub candidate: ControllerRow,
    /// Who solved what.
    pub paired: PairedCounts,
    /// Candidate minus baseline success rate.
    pub difference: f64,
    /// Its 95% interval.
    pub difference_interval: [f64; 2],
    /// Candidate minus baseline mean max coverage, with the 95% interval of the
    /// per-seed differences (tasks scored by coverage: pusht).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage_difference: Option<Improvement>,
}

impl PairedReport {
    /// The report of `baseline` and `candidate` evaluated on the same seeds.
    pub fn new(
        (baseline_name, baseline): (&str, &EvalOutcome),
        (candidate_name, candidate): (&str, &EvalOutcome),
    ) -> anyhow::Result<Self> {
        let counts = PairedCounts::count(baseline, candidate)?;
        let (lo, hi) = counts.difference_interval();
        Ok(Self {
            baseline: ControllerRow::new(baseline_name, baseline),
            candidate: ControllerRow::new(candidate_name, candidate),
            paired: counts,
            difference: counts.difference(),
            difference_interval: [lo, hi],
            coverage_difference: coverage_difference(baseline, candidate).map(Into::into),
        })
    }

    /// The report as a plain-text table.
    pub fn table(&self) -> String {
        format!(
            "{}{}{}\ncandidate - baseline: {:+.1} points, 95% interval [{:+.1}, {:+.1}]\nboth solved {}, only baseline {}, only candidate {}, neither {}\n",
            ControllerRow::table_header(self.baseline.mean_max_coverage.is_some()),
            self.baseline.table_line(),
            self.candidate.table_line(),
            100.0 * self.difference,
            100.0 * self.difference_interval[0],
            100.0 * self.difference_interval[1],
            self.paired.both,
            self.paired.only_baseline,
            self.paired.only_candidate,
            self.paired.neither
        ) + &self
            .coverage_difference
            .map(|c| {
                format!(
                    "candidate - baseline mean max coverage, paired: {:+.3} [{:+.3}, {:+.3}]\n",
                    c.difference, c.interval[0], c.interval[1]
                )
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_says_how_the_policies_acted() {
        assert_eq!(acting_description(1, 0.0), "");
        assert_eq!(
            acting_description(4, 0.0),
            ", the policies executing 4 actions of each plan"
        );
        assert_eq!(
            acting_description(1, 0.5),
            ", the policies sampling their actions (noise x0.5)"
        );
        assert_eq!(
            acting_description(4, 1.0),
            ", the policies executing 4 actions of each plan and sampling their actions (noise x1)"
        );
    }
}
