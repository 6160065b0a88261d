//! The layers of ACT's transformer as LeRobot writes them (`ACTEncoderLayer`,
//! `ACTDecoderLayer` in `lerobot/policies/act/modeling_act.py`): attention through
//! PyTorch's packed projections ([`PackedAttention`]), positional embeddings added to
//! queries and keys but not to values, a two-layer feed-forward block, post-norm by
//! default or pre-norm. Batch first (`[batch, tokens, d]`) where LeRobot is sequence
//! first; parameter names are LeRobot's, so its checkpoints load tensor for tensor.
//! No dropout: these layers run at inference, and fine-tuning here uses none.

use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::{gelu, relu};
use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

use crate::lora::{LoraConfig, PairLora, adapted_forward};
use crate::packed_attention::{PackedAttention, PackedAttentionConfig};

/// The feed-forward block's nonlinearity (LeRobot's `feedforward_activation`; its
/// `glu` halves the width the second layer expects and is not supported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeedForwardActivation {
    /// `relu` (LeRobot's default).
    Relu,
    /// `gelu`, exact (erf).
    Gelu,
}

/// The sizes and norm placement of ACT's layers (LeRobot's `dim_model`, `n_heads`,
/// `dim_feedforward`, `feedforward_activation`, `pre_norm`).
#[derive(Config, Debug)]
pub struct ActLayerConfig {
    /// Token width. Range: [1, 65536], a multiple of `n_heads`.
    pub dim_model: usize,
    /// Attention heads. Range: [1, 1024].
    pub n_heads: usize,
    /// Width of the feed-forward block. Range: [1, 262144].
    pub dim_feedforward: usize,
    /// The feed-forward nonlinearity.
    #[config(default = "FeedForwardActivation::Relu")]
    pub feedforward_activation: FeedForwardActivation,
    /// Normalise before each block instead of after it.
    #[config(default = false)]
    pub pre_norm: bool,
}

impl ActLayerConfig {
    /// Checks the sizes; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.attention().validate()?;
        in_range("dim_feedforward", self.dim_feedforward, 1..=262_144)
    }

    fn attention(&self) -> PackedAttentionConfig {
        PackedAttentionConfig::new(self.dim_model, self.n_heads)
    }

    fn norm<B: Backend>(&self, device: &B::Device) -> LayerNorm<B> {
        LayerNormConfig::new(self.dim_model).init(device)
    }

    /// An encoder layer, initialised as PyTorch initialises its parts; invalid sizes
    /// are an error.
    pub fn init_encoder<B: Backend>(
        &self,
        device: &B::Device,
    ) -> Result<ActEncoderLayer<B>, ConfigError> {
        self.validate()?;
        Ok(ActEncoderLayer {
            self_attn: self.attention().init(device)?,
            linear1: LinearConfig::new(self.dim_model, self.dim_feedforward).init(device),
            linear2: LinearConfig::new(self.dim_feedforward, self.dim_model).init(device),
            norm1: self.norm(device),
            norm2: self.norm(device),
            lora: None,
            activation: self.feedforward_activation,
            pre_norm: self.pre_norm,
        })
    }

    /// A decoder layer, initialised as PyTorch initialises its parts; invalid sizes
    /// are an error.
    pub fn init_decoder<B: Backend>(
        &self,
        device: &B::Device,
    ) -> Result<ActDecoderLayer<B>, ConfigError> {
        self.validate()?;
        Ok(ActDecoderLayer {
            self_attn: self.attention().init(device)?,
            multihead_attn: self.attention().init(device)?,
            linear1: LinearConfig::new(self.dim_model, self.dim_feedforward).init(device),
            linear2: LinearConfig::new(self.dim_feedforward, self.dim_model).init(device),
            norm1: self.norm(device),
            norm2: self.norm(device),
            norm3: self.norm(device),
            lora: None,
            activation: self.feedforward_activation,
            pre_norm: self.pre_norm,
        })
    }
}

/// `x + pos`, or `x` without a positional embedding (`pos` broadcasts over the batch).
fn with_position<B: Backend>(x: Tensor<B, 3>, pos: Option<&Tensor<B, 3>>) -> Tensor<B, 3> {
    match pos {
        Some(pos) => x + pos.clone(),
        None => x,
    }
}

/// The feed-forward block `linear2(activation(linear1(x)))`, each layer with its
/// adapter when there is one.
fn feed_forward<B: Backend>(
    (linear1, linear2): (&Linear<B>, &Linear<B>),
    lora: Option<&PairLora<B>>,
    activation: FeedForwardActivation,
    x: Tensor<B, 3>,
) -> Tensor<B, 3> {
    let hidden = adapted_forward(linear1, lora.map(|l| &l.first), x);
    let hidden = match activation {
        FeedForwardActivation::Relu => relu(hidden),
        FeedForwardActivation::Gelu => gelu(hidden),
    };
    adapted_forward(linear2, lora.map(|l| &l.second), hidden)
}

/// LeRobot's `ACTEncoderLayer`: self-attention, then the feed-forward block.
#[derive(Module, Debug)]
pub struct ActEncoderLayer<B: Backend> {
    /// Self-attention.
    pub self_attn: PackedAttention<B>,
    /// Feed-forward, first layer.
    pub linear1: Linear<B>,
    /// Feed-forward, second layer.
    pub linear2: Linear<B>,
    /// Norm of the attention block.
    pub norm1: LayerNorm<B>,
    /// Norm of the feed-forward block.
    pub norm2: LayerNorm<B>,
    /// LoRA adapters of the feed-forward block, while fine-tuning with them.
    pub lora: Option<PairLora<B>>,
    #[module(skip)]
    activation: FeedForwardActivation,
    pre_norm: bool,
}

impl<B: Backend> ActEncoderLayer<B> {
    /// The layer on `x` `[batch, tokens, d]` with the positional embedding `pos`
    /// `[1 or batch, tokens, d]` added to queries and keys; keys where `key_padding`
    /// `[batch, tokens]` is true are ignored.
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        pos: Option<&Tensor<B, 3>>,
        key_padding: Option<Tensor<B, 2, Bool>>,
    ) -> Tensor<B, 3> {
        let skip = x.clone();
        let x = if self.pre_norm {
            self.norm1.forward(x)
        } else {
            x
        };
        let q = with_position(x.clone(), pos);
        let x = skip + self.self_attn.forward(q.clone(), q, x, key_padding);
        let (skip, x) = if self.pre_norm {
            (x.clone(), self.norm2.forward(x))
        } else {
            let x = self.norm1.forward(x);
            (x.clone(), x)
        };
        let x = skip
            + feed_forward(
                (&self.linear1, &self.linear2),
                self.lora.as_ref(),
                self.activation,
                x,
            );
        if self.pre_norm {
            x
        } else {
            self.norm2.forward(x)
        }
    }
}

/// LeRobot's `ACTDecoderLayer`: self-attention, cross-attention to the encoder's
/// output, then the feed-forward block.
#[derive(Module, Debug)]
pub struct ActDecoderLayer<B: Backend> {
    /// Self-attention.
    pub self_attn: PackedAttention<B>,
    /// Cross-attention to the encoder's output.
    pub multihead_attn: PackedAttention<B>,
    /// Feed-forward, first layer.
    pub linear1: Linear<B>,
    /// Feed-forward, second layer.
    pub linear2: Linear<B>,
    /// Norm of the self-attention block.
    pub norm1: LayerNorm<B>,
    /// Norm of the cross-attention block.
    pub norm2: LayerNorm<B>,
    /// Norm of the feed-forward block.
    pub norm3: LayerNorm<B>,
    /// LoRA adapters of the feed-forward block, while fine-tuning with them.
    pub lora: Option<PairLora<B>>,
    #[module(skip)]
    activation: FeedForwardActivation,
    pre_norm: bool,
}

impl<B: Backend> ActDecoderLayer<B> {
    /// The layer on `x` `[batch, queries, d]` attending to `encoder_out` `[batch,
    /// tokens, d]`, with `decoder_pos` added to its queries and keys and `encoder_pos`
    /// to the encoder's keys (each `[1 or batch, ..., d]`).
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        encoder_out: Tensor<B, 3>,
        (decoder_pos, encoder_pos): (Option<&Tensor<B, 3>>, Option<&Tensor<B, 3>>),
    ) -> Tensor<B, 3> {
        let norm = |norm: &LayerNorm<B>, x: Tensor<B, 3>| norm.forward(x);
        let skip = x.clone();
        let x = if self.pre_norm {
            norm(&self.norm1, x)
        } else {
            x
        };
        let q = with_position(x.clone(), decoder_pos);
        let x = skip + self.self_attn.forward(q.clone(), q, x, None);
        let (skip, x) = if self.pre_norm {
            (x.clone(), norm(&self.norm2, x))
        } else {
            let x = norm(&self.norm1, x);
            (x.clone(), x)
        };
        let attended = self.multihead_attn.forward(
            with_position(x, decoder_pos),
            with_position(encoder_out.clone(), encoder_pos),
            encoder_out,
            None,
        );
        let x = skip + attended;
        let (skip, x) = if self.pre_norm {
            (x.clone(), norm(&self.norm3, x))
        } else {
            let x = norm(&self.norm2, x);
            (x.clone(), x)
        };
        let x = skip
            + feed_forward(
                (&self.linear1, &self.linear2),
                self.lora.as_ref(),
                self.activation,
                x,
            );
        if self.pre_norm {
            x
        } else {
            norm(&self.norm3, x)
        }
    }
}

impl<B: Backend> ActEncoderLayer<B> {
    /// The layer with fresh LoRA adapters of its attention and feed-forward block.
    pub fn with_lora(self, config: &LoraConfig, device: &B::Device) -> Self {
        let lora = PairLora::new((&self.linear1, &self.linear2), config, device);
        Self {
            self_attn: self.self_attn.with_lora(config, device),
            lora: Some(lora),
            ..self
        }
    }

    /// The adapters folded into the weights they adapt.
    pub fn merged(self) -> Self {
        let (linear1, linear2) = PairLora::merge((self.linear1, self.linear2), self.lora);
        Self {
            self_attn: self.self_attn.merged(),
            linear1,
            linear2,
            lora: None,
            ..self
        }
    }
}

impl<B: Backend> ActDecoderLayer<B> {
    /// The layer with fresh LoRA adapters of its attentions and feed-forward block.
    pub fn with_lora(self, config: &LoraConfig, device: &B::Device) -> Self {
        let lora = PairLora::new((&self.linear1, &self.linear2), config, device);
        Self {
            self_attn: self.self_attn.with_lora(config, device),
            multihead_attn: self.multihead_attn.with_lora(config, device),
            lora: Some(lora),
            ..self
        }
    }

    /// The adapters folded into the weights they adapt.
    pub fn merged(self) -> Self {
        let (linear1, linear2) = PairLora::merge((self.linear1, self.linear2), self.lora);
        Self {
            self_attn: self.self_attn.merged(),
            multihead_attn: self.multihead_attn.merged(),
            linear1,
            linear2,
            lora: None,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::lerobot_fixtures::{Array, FIXTURES, load_torch, read};

    type B = Flex;

    #[derive(serde::Deserialize)]
    struct Case {
        pre_norm: bool,
        encoder_out: Array,
        decoder_out: Array,
    }

    #[derive(serde::Deserialize)]
    struct Fixture {
        dim_model: usize,
        n_heads: usize,
        dim_feedforward: usize,
        tokens: Array,
        encoder_pos: Array,
        key_padding: Vec<Vec<bool>>,
        queries: Array,
        decoder_pos: Array,
        cases: Vec<Case>,
    }

    /// LeRobot's own `ACTEncoderLayer` and `ACTDecoderLayer` (lerobot 0.4.4, seeded,
    /// non-trivial norms), post-norm and pre-norm, recorded by
    /// `scripts/lerobot_policy_fixtures.py`; the decoder reads the encoder's output.
    #[test]
    fn lerobots_encoder_and_decoder_layers_load_and_match() {
        let fixture: Fixture = read(FIXTURES, "act_layers");
        let device = Default::default();
        let (tokens, queries) = (fixture.tokens.tensor::<3>(), fixture.queries.tensor());
        let (encoder_pos, decoder_pos) =
            (fixture.encoder_pos.tensor(), fixture.decoder_pos.tensor());
        let [batch, n, _] = tokens.dims();
        let padding = Tensor::<B, 2, Bool>::from_data(
            TensorData::new(fixture.key_padding.concat(), [batch, n]),
            &device,
        );
        for case in &fixture.cases {
            let config =
                ActLayerConfig::new(fixture.dim_model, fixture.n_heads, fixture.dim_feedforward)
                    .with_pre_norm(case.pre_norm);
            let norm = if case.pre_norm { "pre" } else { "post" };
            let mut encoder = config.init_encoder::<B>(&device).unwrap();
            let weights = format!("act_encoder_layer_{norm}.safetensors");
            load_torch(&mut encoder, (FIXTURES, &weights), &[]);
            let mut decoder = config.init_decoder::<B>(&device).unwrap();
            let weights = format!("act_decoder_layer_{norm}.safetensors");
            load_torch(&mut decoder, (FIXTURES, &weights), &[]);
            let encoded =
                encoder.forward(tokens.clone(), Some(&encoder_pos), Some(padding.clone()));
            let gap = case.encoder_out.largest_gap(encoded);
            assert!(gap < 1e-5, "{norm}-norm encoder: {gap}");
            let decoded = decoder.forward(
                queries.clone(),
                case.encoder_out.tensor(),
                (Some(&decoder_pos), Some(&encoder_pos)),
            );
            let gap = case.decoder_out.largest_gap(decoded);
            assert!(gap < 1e-5, "{norm}-norm decoder: {gap}");
        }
    }

    #[test]
    fn sizes_that_do_not_fit_are_an_error() {
        let device = Default::default();
        let bad_heads = ActLayerConfig::new(10, 4, 32).init_encoder::<B>(&device);
        assert_eq!(bad_heads.unwrap_err().key, "n_heads");
        let bad_width = ActLayerConfig::new(16, 4, 0).init_decoder::<B>(&device);
        assert_eq!(bad_width.unwrap_err().key, "dim_feedforward");
    }
}
