//! Live control-loop counters the actor bumps and the telemetry thread reads: a status
//! line every few seconds while the daemon runs, without touching the control path
//! beyond relaxed atomic adds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Counters shared by the actor (writer) and the telemetry thread (reader).
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// Control ticks run.
    pub ticks: AtomicU64,
    /// Deadlines missed.
    pub deadline_misses: AtomicU64,
    /// Records dropped at the full writer queue.
    pub queue_drops: AtomicU64,
    /// The policy version now acting.
    pub policy_version: AtomicU64,
    /// Episodes finished.
    pub episodes: AtomicU64,
    /// Times a remote robot was lost.
    pub link_losses: AtomicU64,
}

impl LiveCounters {
    /// One status line.
    pub fn line(&self) -> String {
        format!(
            "status: {} ticks, {} deadline misses, {} queue drops, {} episodes, policy version {}{}",
            self.ticks.load(Ordering::Relaxed),
            self.deadline_misses.load(Ordering::Relaxed),
            self.queue_drops.load(Ordering::Relaxed),
            self.episodes.load(Ordering::Relaxed),
            self.policy_version.load(Ordering::Relaxed),
            match self.link_losses.load(Ordering::Relaxed) {
                0 => String::new(),
                lost => format!(", {lost} link losses"),
            }
        )
    }
}

/// Prints a status line to standard error every `every` until `stop` is set.
pub fn run_status(counters: &LiveCounters, every: Duration, stop: &AtomicBool) {
    let tick = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(tick);
        waited += tick;
        if waited >= every {
            eprintln!("{}", counters.line());
            waited = Duration::ZERO;
        }
    }
}
