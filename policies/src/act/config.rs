//! A LeRobot ACT policy's `config.json` (lerobot 0.4.4's `ACTConfig`), read as
//! written: keys it lacks take LeRobot's defaults, keys imago has no use for
//! (hub and device settings, the optimiser's but its learning rate) are ignored, and
//! settings imago cannot run are refused by [`ActPolicyConfig::validate`] with the key
//! named.

use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

use super::layers::{ActLayerConfig, FeedForwardActivation};
use crate::lerobot::features::{ACTION_KEY, ENV_STATE_KEY, STATE_KEY, require_resnet18};
use crate::lerobot::{FeatureType, NormMode, NormalisationMapping, PolicyFeatures};

/// LeRobot's `ACTConfig`, by its own key names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ActPolicyConfig {
    /// Observations read per prediction (LeRobot's ACT takes 1 only).
    pub n_obs_steps: usize,
    /// Actions predicted per chunk.
    pub chunk_size: usize,
    /// Actions of a chunk executed before the next prediction.
    pub n_action_steps: usize,
    /// What the policy reads, in order.
    pub input_features: PolicyFeatures,
    /// What it writes (`action`).
    pub output_features: PolicyFeatures,
    /// How each feature type is scaled.
    pub normalization_mapping: NormalisationMapping,
    /// The image backbone: imago builds `resnet18`.
    pub vision_backbone: String,
    /// torchvision weights the backbone started from (only its initialisation).
    pub pretrained_backbone_weights: Option<String>,
    /// A dilated last stage (not supported: refused).
    pub replace_final_stride_with_dilation: bool,
    /// Normalise before each transformer block instead of after it.
    pub pre_norm: bool,
    /// Token width.
    pub dim_model: usize,
    /// Attention heads.
    pub n_heads: usize,
    /// Width of the feed-forward blocks.
    pub dim_feedforward: usize,
    /// The feed-forward nonlinearity.
    pub feedforward_activation: FeedForwardActivation,
    /// Layers of the transformer encoder.
    pub n_encoder_layers: usize,
    /// Layers of the transformer decoder.
    pub n_decoder_layers: usize,
    /// Train with the variational objective (a VAE encoder of the action chunk).
    pub use_vae: bool,
    /// Width of the latent.
    pub latent_dim: usize,
    /// Layers of the VAE's encoder.
    pub n_vae_encoder_layers: usize,
    /// Temporal ensembling's weight coefficient (`None`: a queue of chunks).
    pub temporal_ensemble_coeff: Option<f32>,
    /// Dropout in LeRobot's training (imago's layers have none: see `act::layers`).
    pub dropout: f64,
    /// Weight of the KL term of the loss.
    pub kl_weight: f32,
    /// The learning rate LeRobot trains at (Adam): what imago fine-tunes it at unless
    /// told otherwise.
    pub optimizer_lr: f64,
    /// The backbone's stage widths: not in LeRobot's config (its ResNet-18 is
    /// torchvision's, 64-512); read from the checkpoint's weights.
    #[serde(skip)]
    pub backbone_widths: [usize; 4],
}

impl Default for ActPolicyConfig {
    /// LeRobot 0.4.4's defaults, without features.
    fn default() -> Self {
        Self {
            n_obs_steps: 1,
            chunk_size: 100,
            n_action_steps: 100,
            input_features: PolicyFeatures::default(),
            output_features: PolicyFeatures::default(),
            normalization_mapping: NormalisationMapping::from([
                (FeatureType::Visual, NormMode::MeanStd),
                (FeatureType::State, NormMode::MeanStd),
                (FeatureType::Action, NormMode::MeanStd),
            ]),
            vision_backbone: "resnet18".into(),
            pretrained_backbone_weights: Some("ResNet18_Weights.IMAGENET1K_V1".into()),
            replace_final_stride_with_dilation: false,
            pre_norm: false,
            dim_model: 512,
            n_heads: 8,
            dim_feedforward: 3200,
            feedforward_activation: FeedForwardActivation::Relu,
            n_encoder_layers: 4,
            n_decoder_layers: 1,
            use_vae: true,
            latent_dim: 32,
            n_vae_encoder_layers: 4,
            temporal_ensemble_coeff: None,
            dropout: 0.1,
            kl_weight: 10.0,
            optimizer_lr: 1e-5,
            backbone_widths: [64, 128, 256, 512],
        }
    }
}

impl ActPolicyConfig {
    /// Length of the proprioception vector, if the policy reads one.
    pub fn state_dim(&self) -> Result<Option<usize>, ConfigError> {
        self.input_features.vector_len(STATE_KEY, "input_features")
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

    /// The camera features' keys, in the order their tokens are concatenated.
    pub fn camera_keys(&self) -> Vec<&str> {
        self.input_features.camera_keys()
    }

    /// The transformer layers' config.
    pub fn layers(&self) -> ActLayerConfig {
        ActLayerConfig::new(self.dim_model, self.n_heads, self.dim_feedforward)
            .with_feedforward_activation(self.feedforward_activation)
            .with_pre_norm(self.pre_norm)
    }

    /// Checks everything imago must build and run; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("n_obs_steps", self.n_obs_steps, 1..=1)?;
        in_range("chunk_size", self.chunk_size, 1..=4096)?;
        in_range("n_action_steps", self.n_action_steps, 1..=self.chunk_size)?;
        if self.temporal_ensemble_coeff.is_some() && self.n_action_steps != 1 {
            return Err(ConfigError::new(
                "n_action_steps",
                self.n_action_steps,
                "1 with temporal_ensemble_coeff (every tick predicts), as LeRobot requires",
            ));
        }
        if let Some(coeff) = self.temporal_ensemble_coeff {
            in_range("temporal_ensemble_coeff", coeff, -100.0..=100.0)?;
        }
        require_resnet18(&self.vision_backbone)?;
        if self.replace_final_stride_with_dilation {
            return Err(ConfigError::new(
                "replace_final_stride_with_dilation",
                true,
                "false: imago's ResNet-18 has no dilated stage",
            ));
        }
        self.layers().validate()?;
        if !self.dim_model.is_multiple_of(2) {
            return Err(ConfigError::new(
                "dim_model",
                self.dim_model,
                "even (half of it encodes image rows, half columns)",
            ));
        }
        in_range("n_encoder_layers", self.n_encoder_layers, 1..=64)?;
        in_range("n_decoder_layers", self.n_decoder_layers, 1..=64)?;
        in_range("latent_dim", self.latent_dim, 1..=65_536)?;
        if self.use_vae {
            in_range("n_vae_encoder_layers", self.n_vae_encoder_layers, 1..=64)?;
        }
        in_range("kl_weight", self.kl_weight, 0.0..=1e6)?;
        self.state_dim()?;
        self.action_dim()?;
        self.input_features.require_camera_or_env_state()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALOHA: &str = r#"{"type": "act", "n_obs_steps": 1, "chunk_size": 100,
        "input_features": {
            "observation.images.top": {"type": "VISUAL", "shape": [3, 480, 640]},
            "observation.state": {"type": "STATE", "shape": [14]}},
        "output_features": {"action": {"type": "ACTION", "shape": [14]}},
        "optimizer_lr_backbone": 1e-05}"#;

    #[test]
    fn lerobots_aloha_config_reads_with_its_defaults() {
        let config: ActPolicyConfig = serde_json::from_str(ALOHA).unwrap();
        config.validate().unwrap();
        assert_eq!(config.camera_keys(), ["observation.images.top"]);
        assert_eq!(
            (config.state_dim(), config.action_dim()),
            (Ok(Some(14)), Ok(14))
        );
        assert_eq!((config.dim_model, config.n_decoder_layers), (512, 1));
    }

    #[test]
    fn settings_imago_cannot_run_are_errors_naming_the_key() {
        let with = |key: &str, value: serde_json::Value| {
            let mut json: serde_json::Value = serde_json::from_str(ALOHA).unwrap();
            json[key] = value;
            let config: ActPolicyConfig = serde_json::from_value(json).unwrap();
            config.validate().unwrap_err().key
        };
        assert_eq!(with("n_obs_steps", 2.into()), "n_obs_steps");
        assert_eq!(with("n_action_steps", 101.into()), "n_action_steps");
        assert_eq!(
            with("temporal_ensemble_coeff", 0.01.into()),
            "n_action_steps"
        );
        assert_eq!(
            with("vision_backbone", "resnet50".into()),
            "vision_backbone"
        );
        assert_eq!(
            with("replace_final_stride_with_dilation", true.into()),
            "replace_final_stride_with_dilation"
        );
        assert_eq!(with("n_heads", 7.into()), "n_heads");
    }
}
