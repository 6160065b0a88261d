//! The demo's report: printed as a table, written as JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::evaluate::{EvalOutcome, Latency};

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
}

impl ControllerRow {
    /// The header line of a table of rows.
    pub fn table_header() -> String {
        format!(
            "{:<28} {:>8} {:>9} {:>17} {:>11}\n",
            "controller", "episodes", "success", "95% interval", "mean steps"
        )
    }

    /// This row as a table line.
    pub fn table_line(&self) -> String {
        format!(
            "{:<28} {:>8} {:>8.1}% {:>7.1}% - {:>5.1}% {:>11.1}\n",
            self.name,
            self.episodes,
            100.0 * self.success_rate,
            100.0 * self.interval[0],
            100.0 * self.interval[1],
            self.mean_length
        )
    }

    /// A row for `outcome`.
    pub fn new(name: &str, outcome: &EvalOutcome) -> Self {
        let (lo, hi) = outcome.interval();
        Self {
            name: name.to_string(),
            episodes: outcome.episodes(),
            success_rate: outcome.success_rate(),
            interval: [lo, hi],
            mean_length: outcome.mean_length(),
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
    /// Demonstration episodes collected.
    pub demonstrations: usize,
    /// Success rate of the (imperfect) demonstrations.
    pub demonstration_success_rate: f64,
    /// Success rate of the behaviour-cloned policy.
    pub bc_success_rate: f64,
    /// The same policy given an instruction naming another target.
    pub wrong_instruction_success_rate: f64,
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
    /// Where the replay and checkpoint were written.
    pub run_dir: String,
}

impl DemoReport {
    /// The report as a plain-text table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "imago demo{} on {}: {} demonstrations ({:.0}% successful), {} paired evaluation episodes\n\n",
            if self.quick { " --quick" } else { "" },
            self.device,
            self.demonstrations,
            100.0 * self.demonstration_success_rate,
            self.episodes
        ));
        out.push_str(&ControllerRow::table_header());
        for row in &self.controllers {
            out.push_str(&row.table_line());
        }
        out.push_str(&format!(
            "\npolicy latency (batch 1): p50 {:.2} ms, p99 {:.2} ms\n",
            self.policy_latency_ms.p50, self.policy_latency_ms.p99
        ));
        if let (Some(first), Some(last)) = (self.bc_loss.get("first"), self.bc_loss.get("last")) {
            out.push_str(&format!(
                "behaviour-cloning loss: {first:.3} -> {last:.3}\n"
            ));
        }
        out.push_str("wall time:");
        for (phase, seconds) in &self.phases {
            out.push_str(&format!(" {phase} {seconds:.1}s,"));
        }
        out.pop();
        out.push_str(&format!("\nreplay and checkpoint: {}\n", self.run_dir));
        out
    }
}
