//! The safety envelope: every command passes through it before it reaches an actuator.
//!
//! It clamps each dimension to the robot's limits, limits how fast the command may
//! change between ticks, and latches into a hold (a zero command, which for
//! velocity-controlled robots keeps the arm still) on a non-finite value, a command far
//! outside the limits, or a command of the wrong length. A hold lasts until
//! [`SafetyEnvelope::reset`], as an emergency stop would.

use serde::{Deserialize, Serialize};

use crate::bounds::{ConfigError, in_range};
use crate::observation::Action;

/// Settings of a [`SafetyEnvelope`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SafetyConfig {
    /// Largest change of any command dimension between two ticks, as a fraction of
    /// that dimension's limit. Range: [0.001, 100].
    pub max_rate: f32,
    /// A command beyond `trip_factor` times the limit is treated as a fault, not
    /// clamped. Range: [1, 1000].
    pub trip_factor: f32,
}

impl SafetyConfig {
    /// Checks both values against their documented ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("max_rate", self.max_rate, 0.001..=100.0)?;
        in_range("trip_factor", self.trip_factor, 1.0..=1000.0)
    }
}

impl Default for SafetyConfig {
    fn default() -> Self {
        Self {
            max_rate: 0.5,
            trip_factor: 4.0,
        }
    }
}

/// Why the envelope is holding the robot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum HoldReason {
    /// A command entry was NaN or infinite.
    NonFinite {
        /// The offending dimension.
        dim: usize,
    },
    /// A command entry was beyond `trip_factor` times its limit.
    OutOfLimit {
        /// The offending dimension.
        dim: usize,
        /// The commanded value.
        value: f32,
        /// The dimension's limit.
        limit: f32,
    },
    /// The command had the wrong number of entries.
    WrongDimension {
        /// The action space's dimension.
        expected: usize,
        /// The command's length.
        got: usize,
    },
}

/// What the envelope did to one command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SafetyVerdict {
    /// The command passed unchanged.
    Passed,
    /// Some entries were clamped to the limits or rate-limited.
    Limited,
    /// The robot is held still.
    Held(HoldReason),
}

/// A command after the envelope, with what was done to it.
#[derive(Debug, Clone, PartialEq)]
pub struct SafeCommand {
    /// The command to execute.
    pub action: Action,
    /// What the envelope did.
    pub verdict: SafetyVerdict,
}

/// Clamps, rate-limits and, on faults, holds the commands sent to a robot.
#[derive(Debug, Clone)]
pub struct SafetyEnvelope {
    config: SafetyConfig,
    limits: Vec<f32>,
    last: Vec<f32>,
    hold: Option<HoldReason>,
}

impl SafetyEnvelope {
    /// An envelope for an action space bounded by `|a_i| <= limits[i]`.
    pub fn new(config: SafetyConfig, limits: Vec<f32>) -> Self {
        let last = vec![0.0; limits.len()];
        Self {
            config,
            limits,
            last,
            hold: None,
        }
    }

    /// Clears a hold and forgets the previous command (start of an episode).
    pub fn reset(&mut self) {
        self.hold = None;
        self.last.iter_mut().for_each(|v| *v = 0.0);
    }

    /// Clears a hold and starts rate limiting from `start` (start of an episode of a
    /// robot commanded in positions, whose previous command is where it is).
    pub fn reset_to(&mut self, start: &[f32]) {
        self.hold = None;
        for (last, (&value, &limit)) in self.last.iter_mut().zip(start.iter().zip(&self.limits)) {
            *last = value.clamp(-limit, limit);
        }
    }

    /// The reason for the current hold, if the envelope is holding.
    pub fn hold(&self) -> Option<&HoldReason> {
        self.hold.as_ref()
    }

    /// Filters one command.
    pub fn filter(&mut self, command: &Action) -> SafeCommand {
        if self.hold.is_none() {
            self.hold = self.fault(command);
        }
        if let Some(reason) = &self.hold {
            self.last.iter_mut().for_each(|v| *v = 0.0);
            return SafeCommand {
                action: Action(vec![0.0; self.limits.len()]),
                verdict: SafetyVerdict::Held(reason.clone()),
            };
        }
        let mut limited = false;
        let out: Vec<f32> = command
            .0
            .iter()
            .zip(&self.limits)
            .zip(&self.last)
            .map(|((&value, &limit), &last)| {
                let step = self.config.max_rate * limit;
                let bounded = value.clamp(-limit, limit).clamp(last - step, last + step);
                limited |= bounded != value;
                bounded
            })
            .collect();
        self.last.copy_from_slice(&out);
        SafeCommand {
            action: Action(out),
            verdict: if limited {
                SafetyVerdict::Limited
            } else {
                SafetyVerdict::Passed
            },
        }
    }

    fn fault(&self, command: &Action) -> Option<HoldReason> {
        if command.0.len() != self.limits.len() {
            return Some(HoldReason::WrongDimension {
                expected: self.limits.len(),
                got: command.0.len(),
            });
        }
        command
            .0
            .iter()
            .zip(&self.limits)
            .enumerate()
            .find_map(|(dim, (&value, &limit))| {
                if !value.is_finite() {
                    Some(HoldReason::NonFinite { dim })
                } else if value.abs() > self.config.trip_factor * limit {
                    Some(HoldReason::OutOfLimit { dim, value, limit })
                } else {
                    None
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope() -> SafetyEnvelope {
        SafetyEnvelope::new(SafetyConfig::default(), vec![1.0, 2.0])
    }

    #[test]
    fn passes_small_commands_unchanged() {
        let mut env = envelope();
        let out = env.filter(&Action(vec![0.3, -0.5]));
        assert_eq!(out.action, Action(vec![0.3, -0.5]));
        assert_eq!(out.verdict, SafetyVerdict::Passed);
    }

    #[test]
    fn clamps_to_limits_and_rate_limits_changes() {
        let mut env = envelope();
        // Rate limit is 0.5 * limit per tick: 0.5 and 1.0.
        let out = env.filter(&Action(vec![1.5, -3.0]));
        assert_eq!(out.action, Action(vec![0.5, -1.0]));
        assert_eq!(out.verdict, SafetyVerdict::Limited);
        let out = env.filter(&Action(vec![1.5, -3.0]));
        assert_eq!(out.action, Action(vec![1.0, -2.0]));
        let out = env.filter(&Action(vec![1.5, -3.0]));
        assert_eq!(out.action, Action(vec![1.0, -2.0]), "clamped at the limit");
    }

    #[test]
    fn nan_latches_a_hold_until_reset() {
        let mut env = envelope();
        env.filter(&Action(vec![0.4, 0.4]));
        let out = env.filter(&Action(vec![f32::NAN, 0.0]));
        assert_eq!(out.action, Action(vec![0.0, 0.0]));
        assert_eq!(
            out.verdict,
            SafetyVerdict::Held(HoldReason::NonFinite { dim: 0 })
        );
        let out = env.filter(&Action(vec![0.1, 0.1]));
        assert_eq!(out.action, Action(vec![0.0, 0.0]), "hold is latched");
        env.reset();
        assert_eq!(
            env.filter(&Action(vec![0.1, 0.1])).verdict,
            SafetyVerdict::Passed
        );
    }

    #[test]
    fn far_out_of_limit_and_wrong_length_hold() {
        let mut env = envelope();
        let out = env.filter(&Action(vec![0.0, 9.0]));
        assert!(matches!(
            out.verdict,
            SafetyVerdict::Held(HoldReason::OutOfLimit { dim: 1, .. })
        ));
        let mut env = envelope();
        let out = env.filter(&Action(vec![0.0]));
        assert_eq!(
            out.verdict,
            SafetyVerdict::Held(HoldReason::WrongDimension {
                expected: 2,
                got: 1
            })
        );
        assert_eq!(out.action.0.len(), 2);
    }
}
