//! Parts of LeRobot's Diffusion Policy, each written once and tested alone (issue 39):
//! so far the noise schedules and the DDPM/DDIM reverse steps ([`scheduler`]).

pub mod scheduler;

pub use scheduler::{BetaSchedule, NoiseSchedule, NoiseScheduleConfig, Prediction, SamplerKind};
