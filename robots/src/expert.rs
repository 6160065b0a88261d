//! Settings shared by the scripted experts of the simulated robots.

use serde::{Deserialize, Serialize};

use crate::bounds::{ConfigError, in_range};

/// How imperfect a scripted expert's demonstrations are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpertConfig {
    /// Standard deviation of the Gaussian noise added to each action, as a fraction of
    /// the robot's action limit. Range: [0, 10].
    pub noise: f32,
    /// Probability that an episode's demonstration makes the robot's deliberate
    /// mistake (reacher2d: it goes to a wrong target). Range: [0, 1].
    #[serde(alias = "wrong_target_rate")]
    pub mistake_rate: f64,
}

impl ExpertConfig {
    /// The expert without noise or mistakes (the takeover's rescuer).
    pub fn noiseless() -> Self {
        Self {
            noise: 0.0,
            mistake_rate: 0.0,
        }
    }

    /// Checks every value against its documented range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("noise", self.noise, 0.0..=10.0)?;
        in_range("mistake_rate", self.mistake_rate, 0.0..=1.0)
    }
}

impl Default for ExpertConfig {
    fn default() -> Self {
        Self {
            noise: 0.2,
            mistake_rate: 0.15,
        }
    }
}
