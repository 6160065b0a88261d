//! LeRobot's `DiffusionModel`: the observation history encoded into one conditioning
//! vector (proprioception, every camera's keypoint features, the environment state,
//! for each of `n_obs_steps` observations), a chunk of `horizon` actions denoised
//! from noise conditioned on it, and the noise-prediction loss that trains it. Inputs
//! and outputs are normalised (the processors of [`super::policy`] scale them).

use burn::prelude::*;
use imago_robots::bounds::ConfigError;

use crate::lerobot::TickObservation;
use crate::lora::LoraConfig;

use super::config::DiffusionPolicyConfig;
use super::loss::noise_prediction_losses;
use super::rgb_encoder::{DiffusionRgbEncoder, ImageCrop};
use super::sampling::denoise;
use super::scheduler::{NoiseSchedule, SamplerKind};
use super::unet::DiffusionUnet;

/// The last `n_obs_steps` observations of a batch, normalised, oldest first.
#[derive(Debug, Clone)]
pub struct ObservationHistory<B: Backend> {
    /// Proprioception `[batch, n_obs_steps, state_dim]`.
    pub state: Tensor<B, 3>,
    /// Per camera, in the config's order, `[batch, n_obs_steps, 3, height, width]`.
    pub images: Vec<Tensor<B, 5>>,
    /// The environment state `[batch, n_obs_steps, env_dim]`, if the policy reads one.
    pub env_state: Option<Tensor<B, 3>>,
}

impl<B: Backend> ObservationHistory<B> {
    /// The history of `steps` (each a batch of one tick's observations), oldest first.
    pub fn stacked(steps: &[TickObservation<B>]) -> Self {
        let first = &steps[0];
        ObservationHistory {
            state: Tensor::stack(steps.iter().map(|o| o.state.clone()).collect(), 1),
            images: (0..first.images.len())
                .map(|c| Tensor::stack(steps.iter().map(|o| o.images[c].clone()).collect(), 1))
                .collect(),
            env_state: first.env_state.as_ref().map(|_| {
                Tensor::stack(
                    steps
                        .iter()
                        .map(|o| o.env_state.clone().expect("every tick has it"))
                        .collect(),
                    1,
                )
            }),
        }
    }
}

/// The sizes the model runs with (not parameters).
#[derive(Debug, Clone, PartialEq)]
pub struct DiffusionShape {
    /// Observations conditioned on.
    pub n_obs_steps: usize,
    /// Actions denoised per chunk.
    pub horizon: usize,
    /// Actions of a chunk executed.
    pub n_action_steps: usize,
    /// Cameras read.
    pub cameras: usize,
    /// The sampler and its steps at inference.
    pub sampler: (SamplerKind, usize),
    /// Padded actions left out of the loss.
    pub mask_padding: bool,
}

/// LeRobot's `DiffusionModel`.
#[derive(Module, Debug)]
pub struct DiffusionModel<B: Backend> {
    /// The image encoders: none without cameras, one shared by every camera, or one
    /// per camera (`use_separate_rgb_encoder_per_camera`).
    pub rgb_encoder: Vec<DiffusionRgbEncoder<B>>,
    /// The denoiser.
    pub unet: DiffusionUnet<B>,
    #[module(skip)]
    shape: DiffusionShape,
    #[module(skip)]
    schedule: NoiseSchedule,
}

impl DiffusionPolicyConfig {
    /// The model, initialised as PyTorch initialises its parts; a config imago cannot
    /// build is an error naming the key.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<DiffusionModel<B>, ConfigError> {
        self.validate()?;
        let cameras = self.camera_keys().len();
        let encoders = match (
            self.rgb_encoder()?,
            self.use_separate_rgb_encoder_per_camera,
        ) {
            (None, _) => 0,
            (Some(_), true) => cameras,
            (Some(_), false) => 1,
        };
        let rgb_encoder = match self.rgb_encoder()? {
            Some(config) => (0..encoders)
                .map(|_| config.init(device))
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        Ok(DiffusionModel {
            rgb_encoder,
            unet: self.unet()?.init(device)?,
            shape: DiffusionShape {
                n_obs_steps: self.n_obs_steps,
                horizon: self.horizon,
                n_action_steps: self.n_action_steps,
                cameras,
                sampler: (self.noise_scheduler_type, self.inference_steps()),
                mask_padding: self.do_mask_loss_for_padding,
            },
            schedule: NoiseSchedule::new(self.schedule.clone())?,
        })
    }
}

impl<B: Backend> DiffusionModel<B> {
    /// The sizes it runs with.
    pub fn shape(&self) -> &DiffusionShape {
        &self.shape
    }

    /// Its noise schedule.
    pub fn schedule(&self) -> &NoiseSchedule {
        &self.schedule
    }

    /// The same model denoising with `sampler` in `steps` steps (fewer than trained:
    /// DDIM's use; a step count the schedule cannot take is an error).
    pub fn with_sampler(mut self, sampler: SamplerKind, steps: usize) -> Result<Self, ConfigError> {
        self.schedule.timesteps(steps)?;
        self.shape.sampler = (sampler, steps);
        Ok(self)
    }

    /// LeRobot's `_prepare_global_conditioning`: per observation, proprioception, the
    /// cameras' features and the environment state, concatenated, the observations
    /// flattened into `[batch, n_obs_steps * width]`.
    pub fn global_conditioning(&self, history: &ObservationHistory<B>) -> Tensor<B, 2> {
        self.global_conditioning_cropped(history, ImageCrop::Centre)
    }

    /// [`Self::global_conditioning`] with the images cropped where `crop` says.
    fn global_conditioning_cropped(
        &self,
        history: &ObservationHistory<B>,
        crop: ImageCrop,
    ) -> Tensor<B, 2> {
        let [batch, steps, _] = history.state.dims();
        let mut parts = vec![history.state.clone()];
        if !history.images.is_empty() {
            parts.push(self.image_features(&history.images, (batch, steps), crop));
        }
        if let Some(env) = &history.env_state {
            parts.push(env.clone());
        }
        let features = Tensor::cat(parts, 2);
        let width = features.dims()[2];
        features.reshape([batch, steps * width])
    }

    /// Every camera's features `[batch, steps, cameras * features]`, cameras in order
    /// (LeRobot's `(b s n) -> b s (n ...)`).
    fn image_features(
        &self,
        images: &[Tensor<B, 5>],
        (batch, steps): (usize, usize),
        crop: ImageCrop,
    ) -> Tensor<B, 3> {
        let flat = |image: &Tensor<B, 5>| {
            let [_, _, c, h, w] = image.dims();
            image.clone().reshape([batch * steps, c, h, w])
        };
        let per_camera: Vec<Tensor<B, 2>> =
            if self.rgb_encoder.len() == images.len() && images.len() > 1 {
                images
                    .iter()
                    .zip(&self.rgb_encoder)
                    .map(|(image, encoder)| encoder.forward_cropped(flat(image), crop))
                    .collect()
            } else {
                // One shared encoder over every camera at once: `(b s n)` order.
                let stacked = Tensor::stack::<6>(images.to_vec(), 2);
                let [_, _, n, c, h, w] = stacked.dims();
                let features = self.rgb_encoder[0]
                    .forward_cropped(stacked.reshape([batch * steps * n, c, h, w]), crop);
                let width = features.dims()[1];
                return features.reshape([batch, steps, n * width]);
            };
        let features = Tensor::cat(per_camera, 1);
        let width = features.dims()[1];
        features.reshape([batch, steps, width])
    }

    /// LeRobot's `generate_actions`: a chunk denoised from `initial` noise `[batch,
    /// horizon, action_dim]` conditioned on `history`, DDPM's step noise from
    /// `step_noise(t)`; the `n_action_steps` actions from the current observation on,
    /// `[batch, n_action_steps, action_dim]`.
    pub fn generate_actions(
        &self,
        history: &ObservationHistory<B>,
        initial: Tensor<B, 3>,
        step_noise: impl FnMut(usize) -> Tensor<B, 3>,
    ) -> Tensor<B, 3> {
        let cond = self.global_conditioning(history);
        let chunk = denoise(
            (&self.unet, &self.schedule),
            self.shape.sampler,
            Some(cond),
            initial,
            step_noise,
        )
        .expect("the sampler's steps were checked when it was set");
        chunk.narrow(1, self.shape.n_obs_steps - 1, self.shape.n_action_steps)
    }

    /// LeRobot's `compute_loss`, per sample: `actions` `[batch, horizon, action_dim]`
    /// noised with `noise` to `timesteps` and predicted back, padded actions
    /// (`action_is_pad` `[batch, horizon]`) left out where the config says so, the
    /// images cropped where `crop` says.
    pub fn losses(
        &self,
        (history, crop): (&ObservationHistory<B>, ImageCrop),
        actions: Tensor<B, 3>,
        (noise, timesteps): (Tensor<B, 3>, &[usize]),
        action_is_pad: Option<Tensor<B, 2, Bool>>,
    ) -> Tensor<B, 1> {
        let cond = self.global_conditioning_cropped(history, crop);
        let pad = action_is_pad.filter(|_| self.shape.mask_padding);
        noise_prediction_losses(
            (&self.unet, &self.schedule),
            actions,
            (noise, timesteps),
            Some(cond),
            pad,
        )
    }
}

impl<B: Backend> DiffusionModel<B> {
    /// LoRA fine-tuning: every weight frozen (the image encoders too), and fresh
    /// adapters on the U-Net's linear layers ([`DiffusionUnet::with_lora`]).
    pub fn with_lora(self, config: &LoraConfig, device: &B::Device) -> Self {
        let frozen = self.no_grad();
        Self {
            unet: frozen.unet.with_lora(config, device),
            ..frozen
        }
    }

    /// The adapters folded into the weights they adapt.
    pub fn merged(self) -> Self {
        Self {
            unet: self.unet.merged(),
            ..self
        }
    }
}
