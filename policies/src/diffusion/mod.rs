//! Parts of LeRobot's Diffusion Policy, each written once and tested alone (issue 39):
//! so far the noise schedules and the DDPM/DDIM reverse steps ([`scheduler`]), the
//! keypoints of the image features ([`spatial_softmax`]), the denoising U-Net
//! ([`unet`]), the reverse process that runs them ([`sampling`]), the training loss
//! ([`loss`]) and the image encoder ([`rgb_encoder`]).

pub mod loss;
pub mod rgb_encoder;
pub mod sampling;
pub mod scheduler;
pub mod spatial_softmax;
pub mod unet;

pub use loss::noise_prediction_losses;
pub use rgb_encoder::{DiffusionRgbEncoder, DiffusionRgbEncoderConfig};
pub use sampling::denoise;
pub use scheduler::{BetaSchedule, NoiseSchedule, NoiseScheduleConfig, Prediction, SamplerKind};
pub use spatial_softmax::{SpatialSoftmax, SpatialSoftmaxConfig};
pub use unet::{DiffusionUnet, DiffusionUnetConfig};
