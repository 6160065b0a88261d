//! Multi-head attention laid out as PyTorch's `nn.MultiheadAttention` stores it: the
//! query, key and value projections packed in one `in_proj_weight` `[3 d, d]` (and
//! `in_proj_bias`), then `out_proj`. LeRobot's ACT uses that module in every encoder
//! and decoder layer; keeping its layout lets a LeRobot checkpoint load tensor for
//! tensor (burn's own `MultiHeadAttention` keeps three separate `Linear`s, and a
//! loader maps one stored tensor to one parameter, so it cannot split the packed one).
//!
//! Batch first (`[batch, tokens, d]`), no dropout (ACT's runs at inference and its
//! fine-tuning here has none), padded keys masked as PyTorch's `key_padding_mask` does.

use burn::module::Param;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::softmax;
use imago_robots::bounds::{ConfigError, in_range};

use crate::lora::{
    LoraAdapter, LoraConfig, adapted_forward, adapter_of, merge_into, merged_weight,
};

/// The attention's sizes.
#[derive(Config, Debug)]
pub struct PackedAttentionConfig {
    /// Width of the tokens. Range: [1, 65536], a multiple of `n_heads`.
    pub d_model: usize,
    /// Heads. Range: [1, 1024].
    pub n_heads: usize,
}

impl PackedAttentionConfig {
    /// Checks the sizes; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("d_model", self.d_model, 1..=65_536)?;
        in_range("n_heads", self.n_heads, 1..=1024)?;
        if !self.d_model.is_multiple_of(self.n_heads) {
            return Err(ConfigError::new(
                "n_heads",
                self.n_heads,
                format!("must divide d_model ({})", self.d_model),
            ));
        }
        Ok(())
    }

    /// The attention, initialised as PyTorch initialises it (Xavier-uniform packed
    /// projection, zero biases); invalid sizes are an error.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<PackedAttention<B>, ConfigError> {
        self.validate()?;
        let d = self.d_model;
        let in_proj_weight = Initializer::XavierUniform { gain: 1.0 }.init_with(
            [3 * d, d],
            Some(d),
            Some(3 * d),
            device,
        );
        Ok(PackedAttention {
            in_proj_weight,
            in_proj_bias: Initializer::Zeros.init([3 * d], device),
            out_proj: LinearConfig::new(d, d)
                .with_initializer(Initializer::KaimingUniform {
                    gain: 1.0 / 3.0f64.sqrt(),
                    fan_out_only: false,
                })
                .init(device),
            lora: None,
            n_heads: self.n_heads,
        })
    }
}

/// `nn.MultiheadAttention`'s parameters and forward pass.
#[derive(Module, Debug)]
pub struct PackedAttention<B: Backend> {
    /// The query, key and value projections' weights, stacked: `[3 d, d]`, each
    /// applied as `x W^T` (PyTorch's layout).
    pub in_proj_weight: Param<Tensor<B, 2>>,
    /// Their biases, stacked: `[3 d]`.
    pub in_proj_bias: Param<Tensor<B, 1>>,
    /// The output projection.
    pub out_proj: Linear<B>,
    /// LoRA adapters of both projections, while fine-tuning with them.
    pub lora: Option<AttentionLora<B>>,
    n_heads: usize,
}

/// LoRA adapters of an attention's projections.
#[derive(Module, Debug)]
pub struct AttentionLora<B: Backend> {
    /// Of the packed query, key and value projection (burn's layout `[d, 3 d]`).
    pub in_proj: LoraAdapter<B>,
    /// Of the output projection.
    pub out_proj: LoraAdapter<B>,
}

impl<B: Backend> PackedAttention<B> {
    /// Attention of `query` `[batch, q, d]` over `key` and `value` `[batch, k, d]`;
    /// where `key_padding` `[batch, k]` is true, that key is ignored. Returns
    /// `[batch, q, d]`.
    pub fn forward(
        &self,
        query: Tensor<B, 3>,
        key: Tensor<B, 3>,
        value: Tensor<B, 3>,
        key_padding: Option<Tensor<B, 2, Bool>>,
    ) -> Tensor<B, 3> {
        let [batch, queries, d] = query.dims();
        let keys = key.dims()[1];
        let (heads, d_head) = (self.n_heads, d / self.n_heads);
        let weight = match &self.lora {
            Some(lora) => self.in_proj_weight.val() + lora.in_proj.delta().transpose(),
            None => self.in_proj_weight.val(),
        };
        let bias = self.in_proj_bias.val();
        let project = |x: Tensor<B, 3>, part: usize, tokens: usize| {
            let w = weight.clone().narrow(0, part * d, d).transpose();
            let b = bias.clone().narrow(0, part * d, d).reshape([1, 1, d]);
            (x.matmul(w.unsqueeze::<3>()) + b)
                .reshape([batch, tokens, heads, d_head])
                .swap_dims(1, 2)
        };
        let q = project(query, 0, queries);
        let k = project(key, 1, keys);
        let v = project(value, 2, keys);
        let mut scores = q.matmul(k.transpose()).div_scalar((d_head as f32).sqrt());
        if let Some(padding) = key_padding {
            let mask = padding
                .reshape([batch, 1, 1, keys])
                .expand([batch, heads, queries, keys]);
            scores = scores.mask_fill(mask, f32::NEG_INFINITY);
        }
        let context = softmax(scores, 3)
            .matmul(v)
            .swap_dims(1, 2)
            .reshape([batch, queries, d]);
        adapted_forward(
            &self.out_proj,
            self.lora.as_ref().map(|l| &l.out_proj),
            context,
        )
    }

    /// The attention with fresh adapters of both projections (see [`crate::lora`]).
    pub fn with_lora(self, config: &LoraConfig, device: &B::Device) -> Self {
        let [three_d, d] = self.in_proj_weight.dims();
        Self {
            lora: Some(AttentionLora {
                in_proj: LoraAdapter::new([d, three_d], config, device),
                out_proj: adapter_of(&self.out_proj, config, device),
            }),
            ..self
        }
    }

    /// The adapters folded into the projections' weights.
    pub fn merged(self) -> Self {
        let Some(lora) = self.lora else {
            return self;
        };
        Self {
            in_proj_weight: merged_weight(self.in_proj_weight, lora.in_proj.delta().transpose()),
            out_proj: merge_into(self.out_proj, Some(lora.out_proj)),
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
    struct Fixture {
        d_model: usize,
        n_heads: usize,
        query: Array,
        key: Array,
        key_padding: Vec<Vec<bool>>,
        output: Array,
        output_unmasked: Array,
    }

    /// PyTorch's `nn.MultiheadAttention` (torch 2.10, through
    /// `scripts/lerobot_policy_fixtures.py`), its state dict loaded through
    /// burn-store's safetensors loader with the PyTorch adapter, tensor for tensor.
    #[test]
    fn torch_multihead_attention_loads_and_matches() {
        let fixture: Fixture = read(FIXTURES, "attention");
        let device = Default::default();
        let mut attention = PackedAttentionConfig::new(fixture.d_model, fixture.n_heads)
            .init::<B>(&device)
            .unwrap();
        load_torch(&mut attention, (FIXTURES, "attention.safetensors"), &[]);
        let (query, key): (Tensor<B, 3>, Tensor<B, 3>) =
            (fixture.query.tensor::<3>(), fixture.key.tensor::<3>());
        let [batch, keys, _] = key.dims();
        let padding = Tensor::<B, 2, Bool>::from_data(
            TensorData::new(fixture.key_padding.concat(), [batch, keys]),
            &device,
        );
        let masked = attention.forward(query.clone(), key.clone(), key.clone(), Some(padding));
        assert!(fixture.output.largest_gap(masked) < 1e-5);
        let open = attention.forward(query, key.clone(), key, None);
        assert!(fixture.output_unmasked.largest_gap(open) < 1e-5);
    }

    #[test]
    fn sizes_that_do_not_split_into_heads_are_an_error() {
        let error = PackedAttentionConfig::new(10, 4)
            .init::<B>(&Default::default())
            .unwrap_err();
        assert_eq!(error.key, "n_heads");
        assert!(PackedAttentionConfig::new(0, 1).validate().is_err());
    }
}
