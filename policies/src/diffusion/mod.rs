//! Parts of LeRobot's Diffusion Policy, each written once and tested alone (issue 39):
//! so far the noise schedules and the DDPM/DDIM reverse steps ([`scheduler`]) and the
//! keypoints of the image features ([`spatial_softmax`]).

pub mod scheduler;
pub mod spatial_softmax;

pub use scheduler::{BetaSchedule, NoiseSchedule, NoiseScheduleConfig, Prediction, SamplerKind};
pub use spatial_softmax::{SpatialSoftmax, SpatialSoftmaxConfig};
