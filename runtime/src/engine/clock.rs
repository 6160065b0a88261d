//! Deadline scheduling of the control loop: tick `k` is due at `start + k * period`,
//! whatever the previous ticks cost, so the rate does not drift the way
//! `sleep(period)` after each tick does. A tick that cannot start before the next one
//! is already due has missed its deadline: the miss is counted and the clock skips the
//! ticks it can no longer make instead of bursting to catch up.

use std::time::{Duration, Instant};

/// When the next control tick is due.
#[derive(Debug, Clone)]
pub struct DeadlineClock {
    period: Duration,
    next: Instant,
    misses: u64,
    late_periods: u32,
}

impl DeadlineClock {
    /// A clock whose first tick is due now.
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            next: Instant::now(),
            misses: 0,
            late_periods: 0,
        }
    }

    /// Deadlines missed so far.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Whole control periods the tick that [`DeadlineClock::wait`] last returned
    /// started after its deadline: periods in which the robot got no new command and
    /// held the last one.
    pub fn late_periods(&self) -> u32 {
        self.late_periods
    }

    /// Restarts the schedule from now, without counting a miss, after a wait the
    /// schedule did not plan (a remote robot coming up or resetting). A no-op when the
    /// next tick is not overdue.
    pub fn restart_after_wait(&mut self) {
        let now = Instant::now();
        if now > self.next {
            self.next = now;
        }
    }

    /// Sleeps until the next tick is due and returns its deadline. If it is already
    /// overdue by more than a period, the miss is counted and the schedule restarts
    /// from now (the skipped ticks are not made up).
    pub fn wait(&mut self) -> Instant {
        let now = Instant::now();
        let overdue = now.saturating_duration_since(self.next);
        self.late_periods = (overdue.as_secs_f64() / self.period.as_secs_f64()) as u32;
        if now > self.next + self.period {
            self.misses += 1;
            self.next = now;
        } else if now < self.next {
            std::thread::sleep(self.next - now);
        }
        let due = self.next;
        self.next += self.period;
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_ticks_do_not_drift_and_overruns_are_counted() {
        let period = Duration::from_millis(10);
        let mut clock = DeadlineClock::new(period);
        let start = clock.wait();
        for k in 1..=5u32 {
            // Work of 4 ms per tick: deadline scheduling absorbs it.
            std::thread::sleep(Duration::from_millis(4));
            let due = clock.wait();
            assert_eq!(due, start + period * k);
        }
        assert_eq!(clock.misses(), 0);
        assert_eq!(clock.late_periods(), 0);
        // One tick of work longer than two periods is a miss; the schedule restarts.
        std::thread::sleep(Duration::from_millis(35));
        let restarted = clock.wait();
        assert_eq!(clock.misses(), 1);
        assert!(
            clock.late_periods() >= 2,
            "35 ms late is over two 10 ms periods"
        );
        assert!(
            restarted.elapsed() < period,
            "the overdue tick runs at once"
        );
    }
}
