//! A LeRobot Diffusion Policy's `config.json` (lerobot 0.4.4's `DiffusionConfig`), read
//! as written: keys it lacks take LeRobot's defaults, keys imago has no use for
//! (hub and device settings, the optimiser's but its learning rate) are ignored, and
//! settings imago cannot run are refused by [`DiffusionPolicyConfig::validate`] with the
//! key named.

use imago_robots::bounds::{ConfigError, in_range, length_in_range};
use serde::{Deserialize, Serialize};

use super::rgb_encoder::DiffusionRgbEncoderConfig;
use super::scheduler::{NoiseScheduleConfig, SamplerKind};
use super::unet::DiffusionUnetConfig;
use crate::lerobot::features::{ACTION_KEY, ENV_STATE_KEY, STATE_KEY, require_resnet18};
use crate::lerobot::{FeatureType, NormMode, NormalisationMapping, PolicyFeatures};
use crate::resnet::ResNetNorm;

/// LeRobot's `DiffusionConfig`, by its own key names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiffusionPolicyConfig {
    /// Observations the model is conditioned on (the current one and those before).
    pub n_obs_steps: usize,
    /// Actions in a denoised chunk (counted from the oldest observation).
    pub horizon: usize,
    /// Actions of a chunk executed before the next is denoised.
    pub n_action_steps: usize,
    /// What the policy reads, in order.
    pub input_features: PolicyFeatures,
    /// What it writes (`action`).
    pub output_features: PolicyFeatures,
    /// How each feature type is scaled.
    pub normalization_mapping: NormalisationMapping,
    /// The image backbone: imago builds `resnet18`.
    pub vision_backbone: String,
    /// Resize before the crop (not supported yet: refused).
    pub resize_shape: Option<[usize; 2]>,
    /// Crop size as a share of the resize (only with `resize_shape`).
    pub crop_ratio: f64,
    /// Height and width of the crop (random in training, centred at inference).
    pub crop_shape: Option<[usize; 2]>,
    /// A random crop in training (centred otherwise).
    pub crop_is_random: bool,
    /// torchvision weights the backbone started from (then its batch norms are kept).
    pub pretrained_backbone_weights: Option<String>,
    /// Group norms in place of the backbone's batch norms.
    pub use_group_norm: bool,
    /// Keypoints of the spatial softmax.
    pub spatial_softmax_num_keypoints: usize,
    /// One image encoder per camera (or one shared).
    pub use_separate_rgb_encoder_per_camera: bool,
    /// The U-Net's stage widths.
    pub down_dims: Vec<usize>,
    /// The U-Net's convolution kernel.
    pub kernel_size: usize,
    /// Groups of the U-Net's group norms.
    pub n_groups: usize,
    /// Width of the diffusion step's embedding.
    pub diffusion_step_embed_dim: usize,
    /// FiLM scales as well as shifts.
    pub use_film_scale_modulation: bool,
    /// The sampler at inference.
    pub noise_scheduler_type: SamplerKind,
    /// The noise schedule.
    #[serde(flatten)]
    pub schedule: NoiseScheduleConfig,
    /// Denoising steps at inference (`None`: `num_train_timesteps`).
    pub num_inference_steps: Option<usize>,
    /// Padded actions (copies past an episode's end) left out of the loss.
    pub do_mask_loss_for_padding: bool,
    /// The learning rate LeRobot trains at (Adam): what imago fine-tunes it at unless
    /// told otherwise.
    pub optimizer_lr: f64,
    /// The backbone's stage widths: not in LeRobot's config (its ResNet-18 is
    /// torchvision's, 64-512); read from the checkpoint's weights.
    #[serde(skip)]
    pub backbone_widths: [usize; 4],
}

impl Default for DiffusionPolicyConfig {
    /// LeRobot 0.4.4's defaults, without features.
    fn default() -> Self {
        Self {
            n_obs_steps: 2,
            horizon: 16,
            n_action_steps: 8,
            input_features: PolicyFeatures::default(),
            output_features: PolicyFeatures::default(),
            normalization_mapping: NormalisationMapping::from([
                (FeatureType::Visual, NormMode::MeanStd),
                (FeatureType::State, NormMode::MinMax),
                (FeatureType::Action, NormMode::MinMax),
            ]),
            vision_backbone: "resnet18".into(),
            resize_shape: None,
            crop_ratio: 1.0,
            crop_shape: Some([84, 84]),
            crop_is_random: true,
            pretrained_backbone_weights: None,
            use_group_norm: true,
            spatial_softmax_num_keypoints: 32,
            use_separate_rgb_encoder_per_camera: false,
            down_dims: vec![512, 1024, 2048],
            kernel_size: 5,
            n_groups: 8,
            diffusion_step_embed_dim: 128,
            use_film_scale_modulation: true,
            noise_scheduler_type: SamplerKind::Ddpm,
            schedule: NoiseScheduleConfig::default(),
            num_inference_steps: None,
            do_mask_loss_for_padding: false,
            optimizer_lr: 1e-4,
            backbone_widths: [64, 128, 256, 512],
        }
    }
}

impl DiffusionPolicyConfig {
    /// Length of the proprioception vector.
    pub fn state_dim(&self) -> Result<usize, ConfigError> {
        self.input_features
            .required_len(STATE_KEY, "input_features")
    }

    /// Length of the environment state, if the policy reads one.
    pub fn env_state_dim(&self) -> Result<Option<usize>, ConfigError> {
        self.input_features
            .vector_len(ENV_STATE_KEY, "input_features")
    }

    /// Length of an action.
    pub fn action_dim(&self) -> Result<usize, ConfigError> {
        self.output_features
            .required_len(ACTION_KEY, "output_features")
    }

    /// The camera features' keys, in the order their features are concatenated.
    pub fn camera_keys(&self) -> Vec<&str> {
        self.input_features.camera_keys()
    }

    /// Denoising steps at inference.
    pub fn inference_steps(&self) -> usize {
        self.num_inference_steps
            .unwrap_or(self.schedule.num_train_timesteps)
    }

    /// Checks everything imago must build and run; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("n_obs_steps", self.n_obs_steps, 1..=64)?;
        in_range("horizon", self.horizon, 1..=4096)?;
        in_range(
            "n_action_steps",
            self.n_action_steps,
            1..=(self.horizon + 1).saturating_sub(self.n_obs_steps).max(1),
        )?;
        require_resnet18(&self.vision_backbone)?;
        if self.resize_shape.is_some() {
            return Err(ConfigError::new(
                "resize_shape",
                self.resize_shape,
                "null: imago does not resize images yet (LeRobot's antialiased bilinear resize)",
            ));
        }
        length_in_range("down_dims", &self.down_dims, 1..=8)?;
        let factor = 1usize << self.down_dims.len().min(12);
        if !self.horizon.is_multiple_of(factor) {
            return Err(ConfigError::new(
                "horizon",
                self.horizon,
                format!("a multiple of 2^len(down_dims) = {factor}, as LeRobot requires"),
            ));
        }
        self.schedule.validate()?;
        in_range(
            "num_inference_steps",
            self.inference_steps(),
            1..=self.schedule.num_train_timesteps,
        )?;
        self.state_dim()?;
        self.action_dim()?;
        self.input_features.require_camera_or_env_state()?;
        if let Some(encoder) = self.rgb_encoder()? {
            encoder.validate()?;
        }
        self.unet()?.validate()
    }

    /// The image encoder's config, if the policy sees images.
    pub fn rgb_encoder(&self) -> Result<Option<DiffusionRgbEncoderConfig>, ConfigError> {
        let Some([_, height, width]) = self.input_features.camera_shape()? else {
            return Ok(None);
        };
        let norm = if self.use_group_norm {
            if self.pretrained_backbone_weights.is_some() {
                return Err(ConfigError::new(
                    "use_group_norm",
                    true,
                    "false with pretrained_backbone_weights (LeRobot refuses the pair too)",
                ));
            }
            ResNetNorm::Group
        } else {
            // Batch norms at inference: their running statistics, frozen.
            ResNetNorm::FrozenBatch
        };
        Ok(Some(
            DiffusionRgbEncoderConfig::new([height, width])
                .with_crop_shape(self.crop_shape)
                .with_widths(self.backbone_widths)
                .with_norm(norm)
                .with_num_keypoints(self.spatial_softmax_num_keypoints),
        ))
    }

    /// Width of one observation's features: state, cameras, environment state.
    pub fn observation_width(&self) -> Result<usize, ConfigError> {
        let cameras = self.camera_keys().len();
        Ok(self.state_dim()?
            + cameras * 2 * self.spatial_softmax_num_keypoints
            + self.env_state_dim()?.unwrap_or(0))
    }

    /// The U-Net's config.
    pub fn unet(&self) -> Result<DiffusionUnetConfig, ConfigError> {
        Ok(DiffusionUnetConfig::new(
            self.action_dim()?,
            self.observation_width()? * self.n_obs_steps,
        )
        .with_down_dims(self.down_dims.clone())
        .with_kernel_size(self.kernel_size)
        .with_n_groups(self.n_groups)
        .with_diffusion_step_embed_dim(self.diffusion_step_embed_dim)
        .with_use_film_scale_modulation(self.use_film_scale_modulation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUSHT: &str = r#"{"type": "diffusion", "n_obs_steps": 2,
        "input_features": {
            "observation.image": {"type": "VISUAL", "shape": [3, 96, 96]},
            "observation.state": {"type": "STATE", "shape": [2]}},
        "output_features": {"action": {"type": "ACTION", "shape": [2]}},
        "crop_shape": [84, 84], "optimizer_lr": 0.0001, "push_to_hub": true}"#;

    #[test]
    fn lerobots_pusht_config_reads_with_its_defaults() {
        let config: DiffusionPolicyConfig = serde_json::from_str(PUSHT).unwrap();
        config.validate().unwrap();
        assert_eq!(config.camera_keys(), ["observation.image"]);
        assert_eq!((config.state_dim(), config.action_dim()), (Ok(2), Ok(2)));
        assert_eq!(config.inference_steps(), 100);
        // Two observations of 2 state values and 32 keypoints' (x, y).
        assert_eq!(config.unet().unwrap().global_cond_dim, 2 * (2 + 64));
    }

    #[test]
    fn settings_imago_cannot_run_are_errors_naming_the_key() {
        let with = |key: &str, value: serde_json::Value| {
            let mut json: serde_json::Value = serde_json::from_str(PUSHT).unwrap();
            json[key] = value;
            let config: DiffusionPolicyConfig = serde_json::from_value(json).unwrap();
            config.validate().unwrap_err().key
        };
        assert_eq!(
            with("vision_backbone", "resnet34".into()),
            "vision_backbone"
        );
        assert_eq!(
            with("resize_shape", serde_json::json!([64, 64])),
            "resize_shape"
        );
        assert_eq!(with("horizon", 12.into()), "horizon");
        assert_eq!(with("n_action_steps", 16.into()), "n_action_steps");
        assert_eq!(
            with("crop_shape", serde_json::json!([100, 84])),
            "crop_shape[0]"
        );
        assert_eq!(
            with(
                "pretrained_backbone_weights",
                "ResNet18_Weights.IMAGENET1K_V1".into()
            ),
            "use_group_norm"
        );
        assert_eq!(
            with("input_features", serde_json::json!({})),
            "input_features"
        );
    }
}
