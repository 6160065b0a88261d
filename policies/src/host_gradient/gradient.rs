//! The gradient of a Gaussian-head policy's parameters as the host step accumulates
//! it, and the surrogate through which burn's autodiff receives it.

use burn::module::Param;
use burn::nn::{Embedding, LayerNorm, Linear};
use burn::prelude::*;

use crate::head::GaussianHead;
use crate::host::{HostPolicy, Norm};
use crate::host_linear::LinearGradient;
use crate::model::{COORDINATE_FEATURES, VlaPolicy, patch_coordinate_values};

/// A layer norm's gradient.
#[derive(Debug, Clone)]
pub(crate) struct NormGradient {
    pub(super) gamma: Vec<f32>,
    pub(super) beta: Vec<f32>,
}

impl NormGradient {
    pub(super) fn like(norm: &Norm) -> Self {
        Self {
            gamma: vec![0.0; norm.gamma.len()],
            beta: vec![0.0; norm.beta.len()],
        }
    }
}

/// One encoder layer's gradient.
#[derive(Debug, Clone)]
pub(super) struct LayerGradient {
    pub(super) attention_norm: NormGradient,
    pub(super) query: LinearGradient,
    pub(super) key: LinearGradient,
    pub(super) value: LinearGradient,
    pub(super) output: LinearGradient,
    pub(super) feed_forward_norm: NormGradient,
    pub(super) inner: LinearGradient,
    pub(super) outer: LinearGradient,
}

/// The gradient of the loss with respect to every parameter of a Gaussian-head
/// policy, each shaped as burn stores it.
#[derive(Debug, Clone)]
pub(crate) struct PolicyGradient {
    pub(super) stem: LinearGradient,
    pub(super) stem_mixing: Vec<LinearGradient>,
    pub(super) film: LinearGradient,
    pub(super) keypoint_sharpness: Vec<f32>,
    pub(super) keypoint_embed: LinearGradient,
    pub(super) patch_embed: LinearGradient,
    /// Accumulated as the gradient of the patch positions, `[patches, d]`, and turned
    /// into the coordinates layer's gradient once ([`Self::finish`]).
    pub(super) patch_position: Vec<f32>,
    pub(super) patch_coordinates: LinearGradient,
    pub(super) word_embed: Vec<f32>,
    pub(super) word_position: Vec<f32>,
    pub(super) proprio_embed: LinearGradient,
    pub(super) token_type: Vec<f32>,
    pub(super) layers: Vec<LayerGradient>,
    pub(super) readout_norm: NormGradient,
    pub(super) head_hidden: LinearGradient,
    pub(super) head_out: LinearGradient,
    pub(super) keypoint_readout: Option<LinearGradient>,
}

impl PolicyGradient {
    pub(super) fn zeros(host: &HostPolicy) -> Self {
        Self {
            stem: LinearGradient::like(&host.stem),
            stem_mixing: host.stem_mixing.iter().map(LinearGradient::like).collect(),
            film: LinearGradient::like(&host.film),
            keypoint_sharpness: vec![0.0; host.keypoint_sharpness.len()],
            keypoint_embed: LinearGradient::like(&host.keypoint_embed),
            patch_embed: LinearGradient::like(&host.patch_embed),
            patch_position: vec![0.0; host.patch_position.len()],
            patch_coordinates: LinearGradient::zeros(COORDINATE_FEATURES, host.d),
            word_embed: vec![0.0; host.word_embed.len()],
            word_position: vec![0.0; host.word_position.len()],
            proprio_embed: LinearGradient::like(&host.proprio_embed),
            token_type: vec![0.0; host.token_type.len()],
            layers: host
                .layers
                .iter()
                .map(|layer| LayerGradient {
                    attention_norm: NormGradient::like(&layer.attention_norm),
                    query: LinearGradient::like(&layer.query),
                    key: LinearGradient::like(&layer.key),
                    value: LinearGradient::like(&layer.value),
                    output: LinearGradient::like(&layer.output),
                    feed_forward_norm: NormGradient::like(&layer.feed_forward_norm),
                    inner: LinearGradient::like(&layer.inner),
                    outer: LinearGradient::like(&layer.outer),
                })
                .collect(),
            readout_norm: NormGradient::like(&host.readout_norm),
            head_hidden: LinearGradient::like(&host.head_hidden),
            head_out: LinearGradient::like(&host.head_out),
            keypoint_readout: host.keypoint_readout.as_ref().map(LinearGradient::like),
        }
    }

    /// Every buffer, in a fixed order (for sums of gradients).
    fn buffers_mut(&mut self) -> Vec<&mut Vec<f32>> {
        let mut buffers = vec![&mut self.keypoint_sharpness, &mut self.patch_position];
        buffers.extend([
            &mut self.word_embed,
            &mut self.word_position,
            &mut self.token_type,
        ]);
        let linears = [
            &mut self.stem,
            &mut self.film,
            &mut self.keypoint_embed,
            &mut self.patch_embed,
            &mut self.patch_coordinates,
            &mut self.proprio_embed,
            &mut self.head_hidden,
            &mut self.head_out,
        ];
        let extra = self
            .stem_mixing
            .iter_mut()
            .chain(&mut self.keypoint_readout);
        for linear in linears.into_iter().chain(extra) {
            buffers.extend([&mut linear.weight, &mut linear.bias]);
        }
        buffers.extend([&mut self.readout_norm.gamma, &mut self.readout_norm.beta]);
        for layer in &mut self.layers {
            for norm in [&mut layer.attention_norm, &mut layer.feed_forward_norm] {
                buffers.extend([&mut norm.gamma, &mut norm.beta]);
            }
            for linear in [
                &mut layer.query,
                &mut layer.key,
                &mut layer.value,
                &mut layer.output,
                &mut layer.inner,
                &mut layer.outer,
            ] {
                buffers.extend([&mut linear.weight, &mut linear.bias]);
            }
        }
        buffers
    }

    /// Adds `other` to `self`.
    pub(super) fn add(mut self, mut other: Self) -> Self {
        for (sum, part) in self.buffers_mut().into_iter().zip(other.buffers_mut()) {
            sum.iter_mut().zip(part.iter()).for_each(|(s, p)| *s += p);
        }
        self
    }

    /// Turns the patch positions' gradient into the coordinates layer's.
    pub(super) fn finish(mut self, grid: usize) -> Self {
        let rows = grid * grid;
        let d = self.patch_position.len() / rows;
        self.patch_coordinates.add(
            rows,
            COORDINATE_FEATURES,
            d,
            &patch_coordinate_values(grid),
            &self.patch_position,
        );
        self
    }
}

/// `sum <G, theta>` over the policy's parameters: its gradient with respect to each
/// parameter `theta` is that parameter's `G` in `gradient`.
pub(crate) fn surrogate<B: Backend>(
    policy: &VlaPolicy<B>,
    head: &GaussianHead<B>,
    gradient: &PolicyGradient,
) -> Tensor<B, 1> {
    let mut terms = Terms::new();
    terms.linear(&policy.stem, &gradient.stem);
    for (layer, g) in policy.stem_mixing.iter().zip(&gradient.stem_mixing) {
        terms.linear(layer, g);
    }
    terms.linear(&policy.keypoint_embed, &gradient.keypoint_embed);
    terms.param(&policy.keypoint_sharpness, &gradient.keypoint_sharpness);
    terms.linear(&policy.film, &gradient.film);
    terms.linear(&policy.patch_embed, &gradient.patch_embed);
    terms.linear(&policy.patch_coordinates, &gradient.patch_coordinates);
    terms.embedding(&policy.word_embed, &gradient.word_embed);
    terms.embedding(&policy.word_position, &gradient.word_position);
    terms.linear(&policy.proprio_embed, &gradient.proprio_embed);
    terms.embedding(&policy.token_type, &gradient.token_type);
    for (layer, g) in policy.encoder.layers.iter().zip(&gradient.layers) {
        terms.norm(&layer.norm_2, &g.attention_norm);
        terms.linear(&layer.mha.query, &g.query);
        terms.linear(&layer.mha.key, &g.key);
        terms.linear(&layer.mha.value, &g.value);
        terms.linear(&layer.mha.output, &g.output);
        terms.norm(&layer.norm_1, &g.feed_forward_norm);
        terms.linear(&layer.pwff.linear_inner, &g.inner);
        terms.linear(&layer.pwff.linear_outer, &g.outer);
    }
    terms.norm(&policy.readout_norm, &gradient.readout_norm);
    terms.linear(&head.hidden, &gradient.head_hidden);
    terms.linear(&head.out, &gradient.head_out);
    if let (Some(readout), Some(g)) = (&policy.keypoint_readout, &gradient.keypoint_readout) {
        terms.linear(readout, g);
    }
    terms.sum()
}

/// The terms `<G, theta>` of [`surrogate`], one per parameter tensor.
struct Terms<B: Backend> {
    terms: Vec<Tensor<B, 1>>,
}

impl<B: Backend> Terms<B> {
    fn new() -> Self {
        Self { terms: Vec::new() }
    }

    fn param<const D: usize>(&mut self, param: &Param<Tensor<B, D>>, gradient: &[f32]) {
        let theta = param.val();
        let g = Tensor::<B, D>::from_data(
            TensorData::new(gradient.to_vec(), theta.shape()),
            &theta.device(),
        );
        self.terms.push((theta * g).sum());
    }

    fn linear(&mut self, linear: &Linear<B>, gradient: &LinearGradient) {
        self.param(&linear.weight, &gradient.weight);
        if let Some(bias) = &linear.bias {
            self.param(bias, &gradient.bias);
        }
    }

    fn embedding(&mut self, embedding: &Embedding<B>, gradient: &[f32]) {
        self.param(&embedding.weight, gradient);
    }

    fn norm(&mut self, norm: &LayerNorm<B>, gradient: &NormGradient) {
        self.param(&norm.gamma, &gradient.gamma);
        if let Some(beta) = &norm.beta {
            self.param(beta, &gradient.beta);
        }
    }

    fn sum(self) -> Tensor<B, 1> {
        Tensor::cat(self.terms, 0).sum()
    }
}
