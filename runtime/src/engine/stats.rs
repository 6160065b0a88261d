//! Control-loop figures: what the daemon reports in its status and at shutdown.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::stats::quantile;

/// Tick latency percentiles, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// The smoothness of executed commands: the mean squared second difference of the
/// executed actions (normalised units, per dimension), tick after tick at the control
/// rate. A period without a new command (a late tick) repeats the last one, as the
/// robot's actuators hold it, so a control loop that stalls and jumps measures rough.
#[derive(Debug, Clone, Default)]
pub struct JerkMeter {
    last: Vec<f32>,
    before_last: Vec<f32>,
    squares: f64,
    count: u64,
}

impl JerkMeter {
    /// Starts a new episode: its first actions have no predecessors to differ from.
    pub fn restart(&mut self) {
        self.last.clear();
        self.before_last.clear();
    }

    /// The robot held its last command for `periods` control periods.
    pub fn hold(&mut self, periods: u32) {
        if self.last.is_empty() {
            return;
        }
        for _ in 0..periods {
            let last = self.last.clone();
            self.push(&last);
        }
    }

    /// The robot executed `action` (normalised units) for one period.
    pub fn push(&mut self, action: &[f32]) {
        if self.before_last.len() == action.len() && self.last.len() == action.len() {
            for ((a, b), c) in action.iter().zip(&self.last).zip(&self.before_last) {
                let second = f64::from(a - 2.0 * b + c);
                self.squares += second * second;
            }
            self.count += action.len() as u64;
        }
        self.before_last = std::mem::replace(&mut self.last, action.to_vec());
    }

    /// The mean squared second difference so far; `None` before any was measured.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.squares / self.count as f64)
    }
}

/// What the actor measured.
#[derive(Debug, Clone, Default)]
pub struct ControlStats {
    /// Control ticks run.
    pub ticks: u64,
    /// Ticks that could not start before the next was due.
    pub deadline_misses: u64,
    /// Per tick: from its deadline to the command being sent to the robot, ms.
    pub tick_latency_ms: Vec<f64>,
    /// Records the writer's queue had no room for.
    pub queue_drops: u64,
    /// Episodes that lost a record to the full queue: the rest of each was not sent,
    /// so the replay holds it unfinished, never as a whole episode with a gap.
    pub episodes_lost_to_drops: u64,
    /// Every policy version that chose a command.
    pub policy_versions: BTreeSet<u64>,
    /// Transitions the actor produced.
    pub transitions: u64,
    /// Ticks a remote robot answered too late (each is also a deadline miss).
    pub late_observations: u64,
    /// Times a remote robot's liveliness disappeared mid-episode.
    pub link_losses: u64,
    /// Episodes given up after a late observation or a link loss.
    pub episodes_abandoned: u64,
    /// Episodes the robot finished (abandoned ones not counted).
    pub episodes_finished: u64,
    /// Of those, episodes that ended in success.
    pub episodes_succeeded: u64,
    /// Smoothness of the executed commands.
    pub jerk: JerkMeter,
    /// Real-time chunking: ticks the plan had run out and the robot held its last
    /// command, waiting for a chunk still being computed.
    pub starved_ticks: u64,
}

impl ControlStats {
    /// Percentiles of the tick latency (`NaN` before the first tick).
    pub fn latency(&self) -> LatencySummary {
        LatencySummary {
            p50: quantile(&self.tick_latency_ms, 0.5),
            p99: quantile(&self.tick_latency_ms, 0.99),
            max: self
                .tick_latency_ms
                .iter()
                .copied()
                .fold(f64::NAN, f64::max),
        }
    }
}

/// The daemon's final status (`--report`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlReport {
    /// Control ticks run.
    pub ticks: u64,
    /// Ticks that could not start before the next was due.
    pub deadline_misses: u64,
    /// Tick latency percentiles, ms.
    pub tick_latency_ms: LatencySummary,
    /// Records dropped because the writer's queue was full.
    pub queue_drops: u64,
    /// Episodes left unfinished in the replay because a record of theirs was dropped.
    #[serde(default)]
    pub episodes_lost_to_drops: u64,
    /// Policy versions that chose commands, in order.
    pub policy_versions: Vec<u64>,
    /// Transitions the actor produced.
    pub actor_transitions: u64,
    /// Transitions the writer put on disk.
    pub transitions_written: u64,
    /// Records the writer put on disk (episode starts and ends included).
    pub replay_records: u64,
    /// Telemetry events dropped because the telemetry queue was full.
    pub telemetry_dropped: u64,
    /// Ticks a remote robot answered later than the observation age (counted in
    /// `deadline_misses` too).
    #[serde(default)]
    pub late_observations: u64,
    /// Times a remote robot disappeared mid-episode.
    #[serde(default)]
    pub link_losses: u64,
    /// Episodes given up (recorded as abandoned) after a late answer or a link loss.
    #[serde(default)]
    pub episodes_abandoned: u64,
    /// Episodes the robot finished (abandoned ones not counted).
    #[serde(default)]
    pub episodes_finished: u64,
    /// Of those, episodes that ended in success.
    #[serde(default)]
    pub episodes_succeeded: u64,
    /// Mean squared second difference of the executed actions per control period
    /// (normalised units; late periods repeat the held command): lower is smoother.
    /// `None` before three ticks of an episode ran.
    #[serde(default)]
    pub action_jerk: Option<f64>,
    /// Real-time chunking: ticks the robot held its last command because the next
    /// chunk was still being computed.
    #[serde(default)]
    pub starved_ticks: u64,
}

impl ControlReport {
    /// The report of two runs in a row: counts add up, versions are merged and the
    /// latency percentiles are the worse of the two (a conservative summary).
    pub fn merged(self, other: Self) -> Self {
        let mut versions = self.policy_versions;
        versions.extend(other.policy_versions);
        versions.sort_unstable();
        versions.dedup();
        Self {
            ticks: self.ticks + other.ticks,
            deadline_misses: self.deadline_misses + other.deadline_misses,
            tick_latency_ms: LatencySummary {
                p50: self.tick_latency_ms.p50.max(other.tick_latency_ms.p50),
                p99: self.tick_latency_ms.p99.max(other.tick_latency_ms.p99),
                max: self.tick_latency_ms.max.max(other.tick_latency_ms.max),
            },
            queue_drops: self.queue_drops + other.queue_drops,
            episodes_lost_to_drops: self.episodes_lost_to_drops + other.episodes_lost_to_drops,
            policy_versions: versions,
            actor_transitions: self.actor_transitions + other.actor_transitions,
            transitions_written: self.transitions_written + other.transitions_written,
            replay_records: self.replay_records + other.replay_records,
            telemetry_dropped: self.telemetry_dropped + other.telemetry_dropped,
            late_observations: self.late_observations + other.late_observations,
            link_losses: self.link_losses + other.link_losses,
            episodes_abandoned: self.episodes_abandoned + other.episodes_abandoned,
            episodes_finished: self.episodes_finished + other.episodes_finished,
            episodes_succeeded: self.episodes_succeeded + other.episodes_succeeded,
            action_jerk: match (self.action_jerk, other.action_jerk) {
                (Some(a), Some(b)) => {
                    let (n, m) = (self.ticks as f64, other.ticks as f64);
                    Some((a * n + b * m) / (n + m).max(1.0))
                }
                (a, b) => a.or(b),
            },
            starved_ticks: self.starved_ticks + other.starved_ticks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_and_max() {
        let stats = ControlStats {
            tick_latency_ms: (1..=100).map(f64::from).collect(),
            ..ControlStats::default()
        };
        let latency = stats.latency();
        assert!((latency.p50 - 50.5).abs() < 1e-9);
        assert!((latency.p99 - 99.01).abs() < 1e-9);
        assert_eq!(latency.max, 100.0);
        assert!(ControlStats::default().latency().max.is_nan());
    }

    #[test]
    fn jerk_is_the_mean_squared_second_difference_with_holds_repeated() {
        let mut meter = JerkMeter::default();
        assert_eq!(meter.mean(), None);
        // A straight ramp has no second difference.
        for v in [0.0, 0.1, 0.2, 0.3] {
            meter.push(&[v, -v]);
        }
        assert!(meter.mean().unwrap() < 1e-12);
        // Holding 0.3 for one period then jumping to 0.5: second differences -0.1
        // (0.3 after 0.3 after 0.2) and +0.2 (0.5 after 0.3 after 0.3), in both dims.
        meter.hold(1);
        meter.push(&[0.5, -0.5]);
        let want = 2.0 * (0.01 + 0.04) / 8.0;
        assert!(
            (meter.mean().unwrap() - want).abs() < 1e-6,
            "{:?}",
            meter.mean()
        );
        // A new episode does not difference across the boundary.
        meter.restart();
        meter.hold(3);
        meter.push(&[1.0, 1.0]);
        meter.push(&[-1.0, -1.0]);
        assert!((meter.mean().unwrap() - want).abs() < 1e-6);
    }
}
