//! LeRobot's `ACT` network: proprioception, the environment state and every camera's
//! ResNet-18 feature map become tokens of a transformer encoder (with a latent token,
//! zero at inference, sampled from the VAE encoder of the demonstrated chunk in
//! training); a transformer decoder of `chunk_size` learned queries attends to them
//! and a linear head reads one action from each. Batch first throughout (LeRobot is
//! sequence first); inputs and outputs are normalised (the processors of
//! [`super::policy`] scale them).

use burn::module::Param;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use imago_robots::bounds::ConfigError;

use super::config::ActPolicyConfig;
use super::layers::{ActDecoderLayer, ActEncoderLayer};
use super::positions::{sinusoidal_positions_1d, sinusoidal_positions_2d};
use crate::lerobot::TickObservation;
use crate::lora::LoraConfig;
use crate::resnet::{ResNet18, ResNet18Config, ResNetNorm};

/// LeRobot's `ACTEncoder`: layers, then a norm under pre-norm.
#[derive(Module, Debug)]
pub struct ActEncoder<B: Backend> {
    /// The layers.
    pub layers: Vec<ActEncoderLayer<B>>,
    /// The final norm (pre-norm only).
    pub norm: Option<LayerNorm<B>>,
}

impl<B: Backend> ActEncoder<B> {
    fn forward(
        &self,
        mut x: Tensor<B, 3>,
        pos: &Tensor<B, 3>,
        key_padding: Option<Tensor<B, 2, Bool>>,
    ) -> Tensor<B, 3> {
        for layer in &self.layers {
            x = layer.forward(x, Some(pos), key_padding.clone());
        }
        match &self.norm {
            Some(norm) => norm.forward(x),
            None => x,
        }
    }
}

/// LeRobot's `ACTDecoder`: layers, then a norm.
#[derive(Module, Debug)]
pub struct ActDecoder<B: Backend> {
    /// The layers.
    pub layers: Vec<ActDecoderLayer<B>>,
    /// The final norm.
    pub norm: LayerNorm<B>,
}

/// The VAE encoder of training: a transformer over a class token, proprioception and
/// the demonstrated chunk, whose class token gives the latent's mean and log-variance.
#[derive(Module, Debug)]
pub struct ActVaeEncoder<B: Backend> {
    /// The transformer.
    pub vae_encoder: ActEncoder<B>,
    /// The class token.
    pub vae_encoder_cls_embed: Embedding<B>,
    /// Proprioception to a token.
    pub vae_encoder_robot_state_input_proj: Option<Linear<B>>,
    /// Each action to a token.
    pub vae_encoder_action_input_proj: Linear<B>,
    /// The class token to the latent's mean and log-variance.
    pub vae_encoder_latent_output_proj: Linear<B>,
    /// The fixed sinusoidal positions `[1, tokens, d]` (LeRobot's buffer).
    pub vae_encoder_pos_enc: Param<Tensor<B, 3>>,
}

/// LeRobot's `ACT`.
#[derive(Module, Debug)]
pub struct ActModel<B: Backend> {
    /// The VAE encoder (with `use_vae`; training only).
    pub vae: Option<ActVaeEncoder<B>>,
    /// The cameras' ResNet-18 (frozen batch norms), shared by every camera.
    pub backbone: Option<ResNet18<B>>,
    /// The transformer encoder.
    pub encoder: ActEncoder<B>,
    /// The transformer decoder.
    pub decoder: ActDecoder<B>,
    /// Proprioception to a token.
    pub encoder_robot_state_input_proj: Option<Linear<B>>,
    /// The environment state to a token.
    pub encoder_env_state_input_proj: Option<Linear<B>>,
    /// The latent to a token.
    pub encoder_latent_input_proj: Linear<B>,
    /// Feature-map channels to tokens (1x1 convolution).
    pub encoder_img_feat_input_proj: Option<Conv2d<B>>,
    /// Learned positions of the latent, proprioception and environment tokens.
    pub encoder_1d_feature_pos_embed: Embedding<B>,
    /// The decoder's learned queries' positions.
    pub decoder_pos_embed: Embedding<B>,
    /// Each decoded token to an action.
    pub action_head: Linear<B>,
    #[module(skip)]
    latent_dim: usize,
}

/// The latent's distribution of a batch, from the VAE encoder: `[batch, latent_dim]`.
#[derive(Debug, Clone)]
pub struct LatentDistribution<B: Backend> {
    /// Mean.
    pub mu: Tensor<B, 2>,
    /// `log(sigma^2)`.
    pub log_sigma_x2: Tensor<B, 2>,
}

impl ActPolicyConfig {
    /// The network, initialised as PyTorch initialises its parts; a config imago cannot
    /// build is an error naming the key.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<ActModel<B>, ConfigError> {
        self.validate()?;
        let d = self.dim_model;
        let layers = self.layers();
        let encoder = |n: usize| -> Result<ActEncoder<B>, ConfigError> {
            Ok(ActEncoder {
                layers: (0..n)
                    .map(|_| layers.init_encoder(device))
                    .collect::<Result<_, _>>()?,
                norm: self.pre_norm.then(|| LayerNormConfig::new(d).init(device)),
            })
        };
        let linear = |from: usize| LinearConfig::new(from, d).init(device);
        let state = self.state_dim()?;
        let env = self.env_state_dim()?;
        let action_dim = self.action_dim()?;
        let vae = if self.use_vae {
            let tokens = 1 + self.chunk_size + usize::from(state.is_some());
            let positions = sinusoidal_positions_1d::<B>(tokens, d, device).unsqueeze_dim(0);
            Some(ActVaeEncoder {
                vae_encoder: encoder(self.n_vae_encoder_layers)?,
                vae_encoder_cls_embed: EmbeddingConfig::new(1, d).init(device),
                vae_encoder_robot_state_input_proj: state.map(linear),
                vae_encoder_action_input_proj: linear(action_dim),
                vae_encoder_latent_output_proj: LinearConfig::new(d, 2 * self.latent_dim)
                    .init(device),
                vae_encoder_pos_enc: Param::from_tensor(positions).set_require_grad(false),
            })
        } else {
            None
        };
        let cameras = self.input_features.camera_shape()?.is_some();
        let widths = self.backbone_widths;
        let backbone = if cameras {
            Some(
                ResNet18Config::new()
                    .with_widths(widths)
                    .with_norm(ResNetNorm::FrozenBatch)
                    .init(device)?,
            )
        } else {
            None
        };
        let n_1d = 1 + usize::from(state.is_some()) + usize::from(env.is_some());
        Ok(ActModel {
            vae,
            backbone,
            encoder: encoder(self.n_encoder_layers)?,
            decoder: ActDecoder {
                layers: (0..self.n_decoder_layers)
                    .map(|_| layers.init_decoder(device))
                    .collect::<Result<_, _>>()?,
                norm: LayerNormConfig::new(d).init(device),
            },
            encoder_robot_state_input_proj: state.map(linear),
            encoder_env_state_input_proj: env.map(linear),
            encoder_latent_input_proj: linear(self.latent_dim),
            encoder_img_feat_input_proj: cameras
                .then(|| Conv2dConfig::new([widths[3], d], [1, 1]).init(device)),
            encoder_1d_feature_pos_embed: EmbeddingConfig::new(n_1d, d).init(device),
            decoder_pos_embed: EmbeddingConfig::new(self.chunk_size, d).init(device),
            action_head: LinearConfig::new(d, action_dim).init(device),
            latent_dim: self.latent_dim,
        })
    }
}

impl<B: Backend> ActModel<B> {
    /// The VAE encoder's latent distribution of `actions` `[batch, chunk, action_dim]`
    /// (normalised) after `state`, padded actions masked; `None` without a VAE.
    pub fn latent_distribution(
        &self,
        state: Option<Tensor<B, 2>>,
        actions: Tensor<B, 3>,
        action_is_pad: Tensor<B, 2, Bool>,
    ) -> Option<LatentDistribution<B>> {
        let vae = self.vae.as_ref()?;
        let [batch, _, _] = actions.dims();
        let d = vae.vae_encoder_cls_embed.weight.dims()[1];
        let mut tokens = vec![
            vae.vae_encoder_cls_embed
                .weight
                .val()
                .reshape([1, 1, d])
                .repeat_dim(0, batch),
        ];
        if let (Some(proj), Some(state)) = (&vae.vae_encoder_robot_state_input_proj, state) {
            tokens.push(proj.forward(state).unsqueeze_dim(1));
        }
        let leading = tokens.len();
        tokens.push(vae.vae_encoder_action_input_proj.forward(actions));
        let device = action_is_pad.device();
        let keep_leading = Tensor::<B, 2, Bool>::full([batch, leading], false, &device);
        let padding = Tensor::cat(vec![keep_leading, action_is_pad], 1);
        let out = vae.vae_encoder.forward(
            Tensor::cat(tokens, 1),
            &vae.vae_encoder_pos_enc.val(),
            Some(padding),
        );
        let cls = out.narrow(1, 0, 1).squeeze_dim(1);
        let params = vae.vae_encoder_latent_output_proj.forward(cls);
        Some(LatentDistribution {
            mu: params.clone().narrow(1, 0, self.latent_dim),
            log_sigma_x2: params.narrow(1, self.latent_dim, self.latent_dim),
        })
    }

    /// The chunk `[batch, chunk, action_dim]` for `observation` (normalised) given the
    /// `latent` `[batch, latent_dim]` (`None`: zero, as at inference).
    pub fn forward(
        &self,
        observation: &TickObservation<B>,
        latent: Option<Tensor<B, 2>>,
    ) -> Tensor<B, 3> {
        let [batch, _] = observation.state.dims();
        let device = observation.state.device();
        let latent = latent.unwrap_or_else(|| Tensor::zeros([batch, self.latent_dim], &device));
        let mut tokens = vec![
            self.encoder_latent_input_proj
                .forward(latent)
                .unsqueeze_dim(1),
        ];
        if let Some(proj) = &self.encoder_robot_state_input_proj {
            tokens.push(proj.forward(observation.state.clone()).unsqueeze_dim(1));
        }
        if let (Some(proj), Some(env)) =
            (&self.encoder_env_state_input_proj, &observation.env_state)
        {
            tokens.push(proj.forward(env.clone()).unsqueeze_dim(1));
        }
        let mut positions = vec![
            self.encoder_1d_feature_pos_embed
                .weight
                .val()
                .unsqueeze_dim(0),
        ];
        if let (Some(backbone), Some(proj)) = (&self.backbone, &self.encoder_img_feat_input_proj) {
            for image in &observation.images {
                let features = backbone.forward(image.clone());
                let [_, _, h, w] = features.dims();
                let projected = proj.forward(features);
                let d = projected.dims()[1];
                tokens.push(projected.reshape([batch, d, h * w]).swap_dims(1, 2));
                let position = sinusoidal_positions_2d::<B>(d / 2, (h, w), &device);
                positions.push(position.reshape([1, d, h * w]).swap_dims(1, 2));
            }
        }
        let encoder_pos = Tensor::cat(positions, 1);
        let encoder_out = self
            .encoder
            .forward(Tensor::cat(tokens, 1), &encoder_pos, None);
        let decoder_pos = self.decoder_pos_embed.weight.val().unsqueeze_dim(0);
        let [_, chunk, d] = decoder_pos.dims();
        let mut x = Tensor::zeros([batch, chunk, d], &device);
        for layer in &self.decoder.layers {
            x = layer.forward(
                x,
                encoder_out.clone(),
                (Some(&decoder_pos), Some(&encoder_pos)),
            );
        }
        self.action_head.forward(self.decoder.norm.forward(x))
    }
}

impl<B: Backend> ActModel<B> {
    /// LoRA fine-tuning: every weight frozen, and fresh adapters on the transformer's
    /// linear layers (the encoder's, the decoder's and, in training, the VAE
    /// encoder's attention projections and feed-forward blocks), which alone learn.
    pub fn with_lora(self, config: &LoraConfig, device: &B::Device) -> Self {
        let frozen = self.no_grad();
        let adapt = |layers: Vec<ActEncoderLayer<B>>| -> Vec<ActEncoderLayer<B>> {
            layers
                .into_iter()
                .map(|l| l.with_lora(config, device))
                .collect()
        };
        Self {
            vae: frozen.vae.map(|vae| ActVaeEncoder {
                vae_encoder: ActEncoder {
                    layers: adapt(vae.vae_encoder.layers),
                    ..vae.vae_encoder
                },
                ..vae
            }),
            encoder: ActEncoder {
                layers: adapt(frozen.encoder.layers),
                ..frozen.encoder
            },
            decoder: ActDecoder {
                layers: frozen
                    .decoder
                    .layers
                    .into_iter()
                    .map(|l| l.with_lora(config, device))
                    .collect(),
                ..frozen.decoder
            },
            ..frozen
        }
    }

    /// The adapters folded into the weights they adapt (which stay frozen).
    pub fn merged(self) -> Self {
        let merge = |layers: Vec<ActEncoderLayer<B>>| -> Vec<ActEncoderLayer<B>> {
            layers.into_iter().map(ActEncoderLayer::merged).collect()
        };
        Self {
            vae: self.vae.map(|vae| ActVaeEncoder {
                vae_encoder: ActEncoder {
                    layers: merge(vae.vae_encoder.layers),
                    ..vae.vae_encoder
                },
                ..vae
            }),
            encoder: ActEncoder {
                layers: merge(self.encoder.layers),
                ..self.encoder
            },
            decoder: ActDecoder {
                layers: self
                    .decoder
                    .layers
                    .into_iter()
                    .map(ActDecoderLayer::merged)
                    .collect(),
                ..self.decoder
            },
            ..self
        }
    }
}
