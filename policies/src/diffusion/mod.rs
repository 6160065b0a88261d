//! LeRobot's Diffusion Policy in burn (issue 39). Its parts, each written once and
//! tested alone against LeRobot's own: the noise schedules and the DDPM/DDIM reverse
//! steps ([`scheduler`]), the keypoints of the image features ([`spatial_softmax`]),
//! the denoising U-Net ([`unet`]), the reverse process that runs it ([`sampling`]),
//! the training loss ([`loss`]) and the image encoder ([`rgb_encoder`]). Around them:
//! LeRobot's `config.json` ([`config`]), the model ([`model`]) and the policy with its
//! processors and receding-horizon queues ([`policy`]).

pub mod config;
pub mod loss;
pub mod model;
pub mod policy;
pub mod rgb_encoder;
pub mod sampling;
pub mod scheduler;
pub mod spatial_softmax;
pub mod unet;

pub use config::DiffusionPolicyConfig;
pub use loss::noise_prediction_losses;
pub use model::{DiffusionModel, DiffusionShape, ObservationHistory};
pub use policy::{DemonstrationBatch, DiffusionEpisode, DiffusionPolicy};
pub use rgb_encoder::{DiffusionRgbEncoder, DiffusionRgbEncoderConfig, ImageCrop};
pub use sampling::{ChunkNoise, StandardNormal, denoise};
pub use scheduler::{BetaSchedule, NoiseSchedule, NoiseScheduleConfig, Prediction, SamplerKind};
pub use spatial_softmax::{SpatialSoftmax, SpatialSoftmaxConfig};
pub use unet::{DiffusionUnet, DiffusionUnetConfig};
