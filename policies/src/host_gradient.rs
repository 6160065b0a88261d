//! The Gaussian head's imitation loss and its exact gradient with respect to every
//! parameter of a [`VlaPolicy`], computed on the host: the cloning and fine-tuning
//! steps of a Gaussian policy on a CPU.
//!
//! Why: through burn's autodiff a training step of the policy is several hundred
//! tensor operations, each with a dispatch, an allocation and a node of the autodiff
//! graph, over tensors of a few thousand values (44 tokens of 64 at batch 32). The
//! arithmetic is small and PyTorch's eager step took 2.4 times less time on the same
//! CPU (docs/performance.md). Here each observation's forward pass keeps its
//! activations, the backward pass is written out (layer norms, attention, GELU,
//! linear layers as `gemm` products), observations run in parallel and each thread
//! sums its own gradient. [`crate::loss::imitation_loss`] hands the gradient back to
//! burn as the surrogate `sum <G, theta>`, whose gradient is `G`: burn's optimiser,
//! gradient clipping and checkpoints see the step they always saw. The tests hold the
//! loss and every parameter's gradient to burn's autodiff.

use burn::module::Param;
use burn::nn::{Embedding, LayerNorm, Linear};
use burn::prelude::*;
use rayon::prelude::*;

use crate::head::GaussianHead;
use crate::host::{EncoderLayer, HostPolicy, LAYER_NORM_EPSILON, MASKED_SCORE, Norm};
use crate::host_linear::LinearGradient;
use crate::input::{BatchRow, PolicyInput};
use crate::model::{VlaPolicy, patch_coordinate_values};
use crate::readback::values;
use crate::stem_host::{HostStem, SHARED};

/// One observation of an imitation step: the policy's input, the recorded chunk and
/// how much each of its steps counts.
pub(crate) struct ImitationRow<'a> {
    pub input: BatchRow<'a>,
    /// The recorded chunk, `[K * A]` in units of the action limit.
    pub actions: &'a [f32],
    /// Each chunk step's weight, `[K]`, already divided by the batch's total weight:
    /// the loss is the sum over rows of these times the steps' negative
    /// log-likelihoods.
    pub weights: &'a [f32],
}

/// A layer norm's gradient.
#[derive(Debug, Clone)]
pub(crate) struct NormGradient {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

impl NormGradient {
    fn like(norm: &Norm) -> Self {
        Self {
            gamma: vec![0.0; norm.gamma.len()],
            beta: vec![0.0; norm.beta.len()],
        }
    }
}

/// One encoder layer's gradient.
#[derive(Debug, Clone)]
struct LayerGradient {
    attention_norm: NormGradient,
    query: LinearGradient,
    key: LinearGradient,
    value: LinearGradient,
    output: LinearGradient,
    feed_forward_norm: NormGradient,
    inner: LinearGradient,
    outer: LinearGradient,
}

/// The gradient of the loss with respect to every parameter of a Gaussian-head
/// policy, each shaped as burn stores it.
#[derive(Debug, Clone)]
pub(crate) struct PolicyGradient {
    stem: LinearGradient,
    film: LinearGradient,
    keypoint_sharpness: Vec<f32>,
    keypoint_embed: LinearGradient,
    patch_embed: LinearGradient,
    /// Accumulated as the gradient of the patch positions, `[patches, d]`, and turned
    /// into the coordinates layer's gradient once ([`Self::finish`]).
    patch_position: Vec<f32>,
    patch_coordinates: LinearGradient,
    word_embed: Vec<f32>,
    word_position: Vec<f32>,
    proprio_embed: LinearGradient,
    token_type: Vec<f32>,
    layers: Vec<LayerGradient>,
    readout_norm: NormGradient,
    head_hidden: LinearGradient,
    head_out: LinearGradient,
}

impl PolicyGradient {
    fn zeros(host: &HostPolicy) -> Self {
        let grid = host.image_size / host.patch_size;
        Self {
            stem: LinearGradient::like(&host.stem),
            film: LinearGradient::like(&host.film),
            keypoint_sharpness: vec![0.0; host.keypoint_sharpness.len()],
            keypoint_embed: LinearGradient::like(&host.keypoint_embed),
            patch_embed: LinearGradient::like(&host.patch_embed),
            patch_position: vec![0.0; host.patch_position.len()],
            patch_coordinates: LinearGradient::zeros(
                patch_coordinate_values(grid).len() / (grid * grid),
                host.d,
            ),
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
        for linear in linears {
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
    fn add(mut self, mut other: Self) -> Self {
        for (sum, part) in self.buffers_mut().into_iter().zip(other.buffers_mut()) {
            sum.iter_mut().zip(part.iter()).for_each(|(s, p)| *s += p);
        }
        self
    }

    /// Turns the patch positions' gradient into the coordinates layer's.
    fn finish(mut self, grid: usize) -> Self {
        let coordinates = patch_coordinate_values(grid);
        let (rows, d) = (grid * grid, self.patch_position.len() / (grid * grid));
        let features = coordinates.len() / rows;
        self.patch_coordinates
            .add(rows, features, d, &coordinates, &self.patch_position);
        self
    }
}

/// A layer norm's forward pass over some rows, kept for its backward pass.
#[derive(Default)]
struct NormTape {
    /// `(x - mean) / std` per row.
    normalised: Vec<f32>,
    /// `1 / std` per row.
    inverse_std: Vec<f32>,
    /// The output, `normalised * gamma + beta`.
    output: Vec<f32>,
}

impl Norm {
    fn forward_kept(&self, x: &[f32]) -> NormTape {
        let d = self.gamma.len();
        let rows = x.len() / d;
        let mut tape = NormTape {
            normalised: vec![0.0; rows * d],
            inverse_std: vec![0.0; rows],
            output: vec![0.0; rows * d],
        };
        for (r, x) in x.chunks_exact(d).enumerate() {
            let mean = x.iter().sum::<f32>() / d as f32;
            let variance = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
            let inverse_std = 1.0 / (variance + LAYER_NORM_EPSILON).sqrt();
            tape.inverse_std[r] = inverse_std;
            let normalised = &mut tape.normalised[r * d..][..d];
            let output = &mut tape.output[r * d..][..d];
            for (j, (n, o)) in normalised.iter_mut().zip(output.iter_mut()).enumerate() {
                *n = (x[j] - mean) * inverse_std;
                *o = *n * self.gamma[j] + self.beta[j];
            }
        }
        tape
    }

    /// Adds the gradient of the norm's parameters to `gradient` and that of its input
    /// to `dx`, for output gradient `dy`.
    fn backward(&self, tape: &NormTape, dy: &[f32], gradient: &mut NormGradient, dx: &mut [f32]) {
        let d = self.gamma.len();
        let rows = tape.inverse_std.len();
        let mut scaled = vec![0.0f32; d];
        for r in 0..rows {
            let normalised = &tape.normalised[r * d..][..d];
            let dy = &dy[r * d..][..d];
            let (mut mean, mut mean_aligned) = (0.0f32, 0.0f32);
            for j in 0..d {
                gradient.gamma[j] += dy[j] * normalised[j];
                gradient.beta[j] += dy[j];
                scaled[j] = dy[j] * self.gamma[j];
                mean += scaled[j];
                mean_aligned += scaled[j] * normalised[j];
            }
            let (mean, mean_aligned) = (mean / d as f32, mean_aligned / d as f32);
            let dx = &mut dx[r * d..][..d];
            for j in 0..d {
                dx[j] += tape.inverse_std[r] * (scaled[j] - mean - normalised[j] * mean_aligned);
            }
        }
    }
}

/// One encoder layer's forward pass for one observation, kept for its backward pass.
struct LayerTape {
    /// Rows of the output computed (all tokens, or the readout alone in the last
    /// layer, whose other rows no one reads).
    queries: usize,
    attention_norm: NormTape,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Attention weights, `[queries, heads, tokens]`.
    weights: Vec<f32>,
    context: Vec<f32>,
    feed_forward_norm: NormTape,
    /// The feed-forward block's GELU output and slope, `[queries, d_ff]`.
    hidden: Vec<f32>,
    slope: Vec<f32>,
}

impl EncoderLayer {
    /// The layer applied to `x` (`[tokens, d]`; `pad`: masked keys), its first
    /// `queries` output rows written back into `x`.
    fn forward_kept(&self, x: &mut [f32], queries: usize, pad: &[bool], d: usize) -> LayerTape {
        let seq = x.len() / d;
        let heads = self.heads;
        let head_dim = d / heads;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let attention_norm = self.attention_norm.forward_kept(x);
        let normed = &attention_norm.output;
        let mut q = vec![0.0; queries * d];
        self.query.forward(queries, normed, &mut q);
        let mut k = vec![0.0; seq * d];
        self.key.forward(seq, normed, &mut k);
        let mut v = vec![0.0; seq * d];
        self.value.forward(seq, normed, &mut v);
        let mut weights = vec![0.0; queries * heads * seq];
        let mut context = vec![0.0; queries * d];
        for i in 0..queries {
            for h in 0..heads {
                let query = &q[i * d + h * head_dim..][..head_dim];
                let row = &mut weights[(i * heads + h) * seq..][..seq];
                for (j, score) in row.iter_mut().enumerate() {
                    *score = if pad[j] {
                        MASKED_SCORE
                    } else {
                        let key = &k[j * d + h * head_dim..][..head_dim];
                        dot(query, key) * scale
                    };
                }
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut total = 0.0;
                for score in row.iter_mut() {
                    *score = (*score - max).exp();
                    total += *score;
                }
                let out = &mut context[i * d + h * head_dim..][..head_dim];
                for (j, weight) in row.iter_mut().enumerate() {
                    *weight /= total;
                    let value = &v[j * d + h * head_dim..][..head_dim];
                    out.iter_mut()
                        .zip(value)
                        .for_each(|(o, v)| *o += *weight * v);
                }
            }
        }
        let mut projected = vec![0.0; queries * d];
        self.output.forward(queries, &context, &mut projected);
        let x = &mut x[..queries * d];
        x.iter_mut().zip(&projected).for_each(|(x, p)| *x += p);

        let feed_forward_norm = self.feed_forward_norm.forward_kept(x);
        let width = self.inner.outputs();
        let mut pre = vec![0.0; queries * width];
        self.inner
            .forward(queries, &feed_forward_norm.output, &mut pre);
        let mut hidden = vec![0.0; queries * width];
        let mut slope = vec![0.0; queries * width];
        crate::StemActivation::Gelu.apply_with_slope(&pre, &mut hidden, &mut slope);
        self.outer.forward(queries, &hidden, &mut projected);
        x.iter_mut().zip(&projected).for_each(|(x, p)| *x += p);
        LayerTape {
            queries,
            attention_norm,
            q,
            k,
            v,
            weights,
            context,
            feed_forward_norm,
            hidden,
            slope,
        }
    }

    /// The backward pass of [`Self::forward_kept`]: `dy` is the gradient of the
    /// output's first `queries` rows; returns the gradient of the input, `[tokens,
    /// d]`, and adds the parameters' to `gradient`.
    fn backward(
        &self,
        tape: &LayerTape,
        dy: &[f32],
        d: usize,
        gradient: &mut LayerGradient,
    ) -> Vec<f32> {
        let queries = tape.queries;
        let seq = tape.k.len() / d;
        let heads = self.heads;
        let head_dim = d / heads;
        let scale = 1.0 / (head_dim as f32).sqrt();

        // x2 = x1 + outer(gelu(inner(norm(x1)))).
        let width = self.inner.outputs();
        let mut d_hidden = vec![0.0; queries * width];
        self.outer.backward(
            queries,
            &tape.hidden,
            dy,
            &mut gradient.outer,
            Some(&mut d_hidden),
        );
        d_hidden
            .iter_mut()
            .zip(&tape.slope)
            .for_each(|(g, s)| *g *= s);
        let mut d_normed = vec![0.0; queries * d];
        self.inner.backward(
            queries,
            &tape.feed_forward_norm.output,
            &d_hidden,
            &mut gradient.inner,
            Some(&mut d_normed),
        );
        let mut d_mid = dy[..queries * d].to_vec();
        self.feed_forward_norm.backward(
            &tape.feed_forward_norm,
            &d_normed,
            &mut gradient.feed_forward_norm,
            &mut d_mid,
        );

        // x1 = x + output(attention(norm(x))).
        let mut d_context = vec![0.0; queries * d];
        self.output.backward(
            queries,
            &tape.context,
            &d_mid,
            &mut gradient.output,
            Some(&mut d_context),
        );
        let mut dq = vec![0.0; queries * d];
        let mut dk = vec![0.0; seq * d];
        let mut dv = vec![0.0; seq * d];
        let mut d_scores = vec![0.0; seq];
        for i in 0..queries {
            for h in 0..heads {
                let weights = &tape.weights[(i * heads + h) * seq..][..seq];
                let d_out = &d_context[i * d + h * head_dim..][..head_dim];
                let mut aligned = 0.0;
                for j in 0..seq {
                    let value = &tape.v[j * d + h * head_dim..][..head_dim];
                    d_scores[j] = dot(d_out, value);
                    aligned += d_scores[j] * weights[j];
                    dv[j * d + h * head_dim..][..head_dim]
                        .iter_mut()
                        .zip(d_out)
                        .for_each(|(g, o)| *g += weights[j] * o);
                }
                let query = &tape.q[i * d + h * head_dim..][..head_dim];
                let d_query = &mut dq[i * d + h * head_dim..][..head_dim];
                for j in 0..seq {
                    let d_score = weights[j] * (d_scores[j] - aligned) * scale;
                    if d_score == 0.0 {
                        continue;
                    }
                    let key = &tape.k[j * d + h * head_dim..][..head_dim];
                    d_query
                        .iter_mut()
                        .zip(key)
                        .for_each(|(g, k)| *g += d_score * k);
                    dk[j * d + h * head_dim..][..head_dim]
                        .iter_mut()
                        .zip(query)
                        .for_each(|(g, q)| *g += d_score * q);
                }
            }
        }
        let normed = &tape.attention_norm.output;
        let mut d_normed = vec![0.0; seq * d];
        self.query.backward(
            queries,
            normed,
            &dq,
            &mut gradient.query,
            Some(&mut d_normed),
        );
        self.key
            .backward(seq, normed, &dk, &mut gradient.key, Some(&mut d_normed));
        self.value
            .backward(seq, normed, &dv, &mut gradient.value, Some(&mut d_normed));
        let mut dx = vec![0.0; seq * d];
        dx[..queries * d].copy_from_slice(&d_mid);
        self.attention_norm.backward(
            &tape.attention_norm,
            &d_normed,
            &mut gradient.attention_norm,
            &mut dx,
        );
        dx
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

impl HostPolicy {
    /// The imitation loss over `rows` and its gradient with respect to every
    /// parameter; rows in parallel.
    pub(crate) fn imitation_gradient(&self, rows: &[ImitationRow<'_>]) -> (f32, PolicyGradient) {
        let per_thread = rows.len().div_ceil(rayon::current_num_threads()).max(1);
        let (loss, gradient) = rows
            .par_iter()
            .with_min_len(per_thread)
            .fold(
                || (0.0, PolicyGradient::zeros(self)),
                |(loss, mut gradient), row| {
                    let row_loss = self.row_gradient(row, &mut gradient);
                    (loss + row_loss, gradient)
                },
            )
            .reduce_with(|(a, ga), (b, gb)| (a + b, ga.add(gb)))
            .unwrap_or_else(|| (0.0, PolicyGradient::zeros(self)));
        (loss, gradient.finish(self.image_size / self.patch_size))
    }

    /// One row's loss; its gradient is added to `g`.
    fn row_gradient(&self, row: &ImitationRow<'_>, g: &mut PolicyGradient) -> f32 {
        let input = &row.input;
        let d = self.d;
        let words = input.words.len();
        let channels = self.keypoint_sharpness.len();
        let grid = self.image_size / self.patch_size;
        let patches = grid * grid;
        let seq = 2 + words + patches;

        // The instruction: word tokens and their weighted mean; FiLM's gain and shift.
        let mut word_tokens = vec![0.0; words * d];
        for (w, &id) in input.words.iter().enumerate() {
            let id = id as usize;
            for j in 0..d {
                word_tokens[w * d + j] =
                    self.word_embed[id * d + j] + self.word_position[w * d + j];
            }
        }
        let mut instruction = vec![0.0; d];
        for (w, &weight) in input.word_weights.iter().enumerate() {
            for j in 0..d {
                instruction[j] += word_tokens[w * d + j] * weight;
            }
        }
        let mut film = vec![0.0; 2 * channels];
        self.film.forward(1, &instruction, &mut film);
        let (gain_less_one, shift) = film.split_at(channels);
        let gain: Vec<f32> = gain_less_one.iter().map(|g| g + 1.0).collect();
        let scale: Vec<f32> = gain
            .iter()
            .zip(&self.keypoint_sharpness)
            .map(|(g, s)| g * s)
            .collect();

        // The stem's readings and their Jacobians.
        let readings = HostStem {
            weight: self.stem.weight(),
            bias: self.stem.bias(),
            activation: self.stem_activation,
            size: self.image_size,
            patch: Some(self.patch_size),
        }
        .read(input.images, &scale, true);
        let jacobians = readings
            .jacobians
            .expect("the stem's Jacobians are read when asked for");
        let keypoints = &readings.keypoints;
        let means = &readings.patch_means;
        let mut pooled = vec![0.0; patches * channels];
        for n in 0..patches {
            for c in 0..channels {
                pooled[n * channels + c] = means[n * channels + c] * gain[c] + shift[c];
            }
        }

        // The token sequence: readout, proprioception, words, patches.
        let mut tokens = vec![0.0; seq * d];
        let patch_rows = &mut tokens[(2 + words) * d..];
        self.patch_embed.forward(patches, &pooled, patch_rows);
        patch_rows
            .iter_mut()
            .zip(&self.patch_position)
            .for_each(|(t, p)| *t += p);
        tokens[2 * d..(2 + words) * d].copy_from_slice(&word_tokens);
        let mut proprio = vec![0.0; d];
        self.proprio_embed.forward(1, input.proprio, &mut proprio);
        let mut embedded = vec![0.0; d];
        self.keypoint_embed.forward(1, keypoints, &mut embedded);
        for j in 0..d {
            tokens[j] = instruction[j] + proprio[j] + embedded[j];
            tokens[d + j] = proprio[j];
        }
        let kind = |t: usize| match t {
            0 => 0,
            1 => 1,
            t if t < 2 + words => 2,
            _ => 3,
        };
        for t in 0..seq {
            let kind = kind(t);
            for j in 0..d {
                tokens[t * d + j] += self.token_type[kind * d + j];
            }
        }

        let last = self.layers.len() - 1;
        let tapes: Vec<LayerTape> = self
            .layers
            .iter()
            .enumerate()
            .map(|(i, layer)| {
                let queries = if i == last { 1 } else { seq };
                layer.forward_kept(&mut tokens, queries, input.pad, d)
            })
            .collect();

        // The head and the loss, and the head's backward pass.
        let readout = self.readout_norm.forward_kept(&tokens[..d]);
        let mut pre = vec![0.0; d];
        self.head_hidden.forward(1, &readout.output, &mut pre);
        let (mut hidden, mut slope) = (vec![0.0; d], vec![0.0; d]);
        crate::StemActivation::Gelu.apply_with_slope(&pre, &mut hidden, &mut slope);
        let ka = self.chunk_len * self.action_dim;
        let mut out = vec![0.0; 2 * ka];
        self.head_out.forward(1, &hidden, &mut out);
        let (low, high) = self.log_std_range;
        let mut loss = 0.0;
        let mut d_out = vec![0.0; 2 * ka];
        for i in 0..ka {
            let weight = row.weights[i / self.action_dim];
            let mean = out[i] + input.action_origin[i % self.action_dim];
            let squashed = 1.0 / (1.0 + (-out[ka + i]).exp());
            let log_std = squashed * (high - low) + low;
            let inverse_std = (-log_std).exp();
            let z = (row.actions[i] - mean) * inverse_std;
            loss += weight * (0.5 * z * z + log_std);
            d_out[i] = -weight * z * inverse_std;
            d_out[ka + i] = weight * (1.0 - z * z) * (high - low) * squashed * (1.0 - squashed);
        }
        let mut d_hidden = vec![0.0; d];
        self.head_out
            .backward(1, &hidden, &d_out, &mut g.head_out, Some(&mut d_hidden));
        d_hidden.iter_mut().zip(&slope).for_each(|(g, s)| *g *= s);
        let mut d_readout = vec![0.0; d];
        self.head_hidden.backward(
            1,
            &readout.output,
            &d_hidden,
            &mut g.head_hidden,
            Some(&mut d_readout),
        );
        let mut d_tokens = vec![0.0; d];
        self.readout_norm
            .backward(&readout, &d_readout, &mut g.readout_norm, &mut d_tokens);

        // The encoder's backward pass.
        for ((layer, tape), gradient) in self.layers.iter().zip(&tapes).zip(&mut g.layers).rev() {
            d_tokens = layer.backward(tape, &d_tokens, d, gradient);
        }

        // The tokens' backward pass.
        for t in 0..seq {
            let kind = kind(t);
            for j in 0..d {
                g.token_type[kind * d + j] += d_tokens[t * d + j];
            }
        }
        let d_readout_token = &d_tokens[..d];
        let d_proprio: Vec<f32> = (0..d)
            .map(|j| d_readout_token[j] + d_tokens[d + j])
            .collect();
        self.proprio_embed
            .backward(1, input.proprio, &d_proprio, &mut g.proprio_embed, None);
        let mut d_keypoints = vec![0.0; 2 * channels];
        self.keypoint_embed.backward(
            1,
            keypoints,
            d_readout_token,
            &mut g.keypoint_embed,
            Some(&mut d_keypoints),
        );
        let d_patch_tokens = &d_tokens[(2 + words) * d..];
        g.patch_position
            .iter_mut()
            .zip(d_patch_tokens)
            .for_each(|(g, d)| *g += d);
        let mut d_pooled = vec![0.0; patches * channels];
        self.patch_embed.backward(
            patches,
            &pooled,
            d_patch_tokens,
            &mut g.patch_embed,
            Some(&mut d_pooled),
        );

        // pooled = means * gain + shift; the stem through its Jacobians.
        let mut d_film = vec![0.0; 2 * channels];
        let (d_gain, d_shift) = d_film.split_at_mut(channels);
        let mut d_shared = vec![0.0; SHARED * channels];
        for n in 0..patches {
            for c in 0..channels {
                let d_p = d_pooled[n * channels + c];
                d_gain[c] += d_p * means[n * channels + c];
                d_shift[c] += d_p;
                let d_mean = d_p * gain[c];
                for i in 0..SHARED {
                    d_shared[i * channels + c] +=
                        d_mean * jacobians.patch_means_shared[(n * SHARED + i) * channels + c];
                }
            }
        }
        for axis in 0..2 {
            for c in 0..channels {
                let d_k = d_keypoints[axis * channels + c];
                for i in 0..SHARED {
                    d_shared[i * channels + c] +=
                        d_k * jacobians.keypoints_shared[(axis * SHARED + i) * channels + c];
                }
                // scale = gain * sharpness.
                let d_scale = d_k * jacobians.keypoints_scale[axis * channels + c];
                d_gain[c] += d_scale * self.keypoint_sharpness[c];
                g.keypoint_sharpness[c] += d_scale * gain[c];
            }
        }
        let (d_weight, d_bias) = d_shared.split_at(3 * channels);
        g.stem
            .weight
            .iter_mut()
            .zip(d_weight)
            .for_each(|(g, d)| *g += d);
        g.stem
            .bias
            .iter_mut()
            .zip(d_bias)
            .for_each(|(g, d)| *g += d);

        // The instruction: FiLM, the readout token, the word tokens.
        let mut d_instruction = d_readout_token.to_vec();
        self.film.backward(
            1,
            &instruction,
            &d_film,
            &mut g.film,
            Some(&mut d_instruction),
        );
        for (w, &id) in input.words.iter().enumerate() {
            let id = id as usize;
            let weight = input.word_weights[w];
            for j in 0..d {
                let d_word = d_tokens[(2 + w) * d + j] + weight * d_instruction[j];
                g.word_embed[id * d + j] += d_word;
                g.word_position[w * d + j] += d_word;
            }
        }
        loss
    }
}

/// The Gaussian imitation loss of `policy` (whose head is `head`) on `input`, the
/// recorded chunks `actions` `[B, K, A]` and per-step weights `step_weights` `[B, K]`
/// (the weighted mean is self-normalised, as in [`crate::loss::gaussian_nll`]),
/// computed on the host: its value, plus a term that is zero in value and whose
/// gradient is the loss's gradient with respect to every parameter.
pub(crate) fn host_imitation_loss<B: Backend>(
    policy: &VlaPolicy<B>,
    head: &GaussianHead<B>,
    input: PolicyInput<B>,
    actions: Tensor<B, 3>,
    step_weights: Tensor<B, 2>,
) -> Tensor<B, 1> {
    let device = actions.device();
    let host = HostPolicy::of(policy).expect("a Gaussian head has a host copy");
    let [batch, k, a] = actions.dims();
    let ints = |t: Tensor<B, 2, Int>| -> Vec<i64> {
        t.into_data()
            .convert::<i64>()
            .into_vec()
            .expect("an int tensor converted to i64 reads as i64")
    };
    let images = values(input.images);
    let words = ints(input.words);
    let word_weights = values(input.word_weights);
    let pad: Vec<bool> = ints(input.pad_mask.int()).iter().map(|&p| p != 0).collect();
    let proprio = values(input.proprio);
    let origin = values(input.action_origin);
    let actions = values(actions);
    let mut weights = values(step_weights);
    let total = weights.iter().sum::<f32>().max(1e-6);
    weights.iter_mut().for_each(|w| *w /= total);
    let share = |values: &[f32]| values.len() / batch;
    let (pixels, vocab, tokens, inputs) = (
        share(&images),
        words.len() / batch,
        pad.len() / batch,
        share(&proprio),
    );
    let rows: Vec<ImitationRow<'_>> = (0..batch)
        .map(|b| ImitationRow {
            input: BatchRow {
                images: &images[b * pixels..][..pixels],
                words: &words[b * vocab..][..vocab],
                word_weights: &word_weights[b * vocab..][..vocab],
                pad: &pad[b * tokens..][..tokens],
                proprio: &proprio[b * inputs..][..inputs],
                action_origin: &origin[b * a..][..a],
            },
            actions: &actions[b * k * a..][..k * a],
            weights: &weights[b * k..][..k],
        })
        .collect();
    let (loss, gradient) = host.imitation_gradient(&rows);
    let surrogate = surrogate(policy, head, &gradient);
    Tensor::<B, 1>::from_floats([loss], &device) + (surrogate.clone() - surrogate.detach())
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

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::module::{Module, ModuleVisitor};
    use burn::tensor::backend::AutodiffBackend;
    use imago_robots::pusht::PushT;
    use imago_robots::reacher2d::Reacher2d;
    use imago_robots::{Observation, Robot};

    use super::*;
    use crate::activation::StemActivation;
    use crate::head::ActionHead;
    use crate::host::tests::reacher_observations;
    use crate::input::PolicyBatch;
    use crate::loss::{ImitationTargets, tensor_imitation_loss};
    use crate::model::VlaPolicyConfig;

    type A = Autodiff<Flex>;

    /// Every float parameter's gradient, in the module's visiting order.
    struct GradientReader<'a> {
        gradients: &'a <A as AutodiffBackend>::Gradients,
        read: Vec<Option<Vec<f32>>>,
    }

    impl ModuleVisitor<A> for GradientReader<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<A, D>>) {
            self.read.push(param.val().grad(self.gradients).map(values));
        }
    }

    /// The loss and every parameter's gradient, on the host or through burn's autodiff.
    fn loss_and_gradients(
        policy: &VlaPolicy<A>,
        batch: &PolicyBatch,
        targets: &ImitationTargets<A>,
        host: bool,
    ) -> (f32, Vec<Option<Vec<f32>>>) {
        let input = batch.to_input(&Default::default());
        let loss = if host {
            let ActionHead::Gaussian(head) = policy.head() else {
                panic!("a Gaussian head");
            };
            let weights = targets.step_weights();
            host_imitation_loss(policy, head, input, targets.actions.clone(), weights)
        } else {
            tensor_imitation_loss(policy, input, targets, None)
        };
        let value = loss.clone().into_scalar();
        let gradients = loss.backward();
        let mut reader = GradientReader {
            gradients: &gradients,
            read: Vec::new(),
        };
        policy.visit(&mut reader);
        (value, reader.read)
    }

    /// Holds the host loss and gradients to burn's: the loss within 1e-5 relative, each
    /// parameter's gradient within 1e-4 of its largest magnitude (or of 0.1 for
    /// gradients smaller than that: the key layers' biases, whose gradient is zero up
    /// to rounding because a softmax ignores what it adds to every score of a row).
    /// Measured: at most 2e-5 apart, 8e-5 of the largest magnitude.
    fn assert_matches_burn(
        config: &VlaPolicyConfig,
        observations: &[Observation],
        mask: Vec<f32>,
        weights: Option<Vec<f32>>,
    ) {
        let device = Default::default();
        <A as Backend>::seed(&device, 7);
        let policy = config.init::<A>(&device);
        let mut batch = PolicyBatch::new(config);
        for observation in observations {
            batch.push(observation).unwrap();
        }
        let (b, k, a) = (observations.len(), config.chunk_len, config.action_dim());
        let actions: Vec<f32> = (0..b * k * a)
            .map(|i| ((i * 7) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let targets = ImitationTargets {
            actions: Tensor::from_data(TensorData::new(actions, [b, k, a]), &device),
            mask: Tensor::from_data(TensorData::new(mask, [b, k]), &device),
            weights: weights.map(|w| Tensor::from_data(TensorData::new(w, [b]), &device)),
        };
        let (host_loss, host) = loss_and_gradients(&policy, &batch, &targets, true);
        let (burn_loss, burn) = loss_and_gradients(&policy, &batch, &targets, false);
        assert!(
            (host_loss - burn_loss).abs() <= 1e-5 * burn_loss.abs().max(1.0),
            "loss {host_loss} against burn's {burn_loss}"
        );
        assert_eq!(host.len(), burn.len());
        for (i, (host, burn)) in host.iter().zip(&burn).enumerate() {
            let (Some(host), Some(burn)) = (host, burn) else {
                panic!(
                    "parameter {i}: gradient {:?} against burn's {:?}",
                    host.is_some(),
                    burn.is_some()
                );
            };
            let largest = burn.iter().fold(0.0f32, |m, g| m.max(g.abs()));
            let gap = host
                .iter()
                .zip(burn)
                .fold(0.0f32, |m, (h, b)| m.max((h - b).abs()));
            assert!(
                gap <= 1e-4 * largest.max(0.1),
                "parameter {i}: gradient gap {gap}, largest {largest}"
            );
        }
    }

    #[test]
    fn host_gradients_match_burns_for_behaviour_cloning() {
        let config = VlaPolicyConfig::for_robot(Reacher2d::default().spec()).unwrap();
        let observations = reacher_observations();
        let ones = vec![1.0; observations.len() * config.chunk_len];
        assert_matches_burn(&config, &observations, ones, None);
    }

    #[test]
    fn host_gradients_match_burns_with_weights_a_gelu_stem_and_three_layers() {
        let config = VlaPolicyConfig::for_robot(Reacher2d::default().spec())
            .unwrap()
            .with_stem_activation(StemActivation::Gelu)
            .with_n_layers(3);
        let observations = reacher_observations();
        // Episodes ending inside two chunks, and advantage weights.
        let mask = vec![
            1., 1., 1., 1., 1., 1., 0., 0., 1., 1., 1., 1., 1., 0., 0., 0.,
        ];
        let weights = vec![0.5, 2.0, 1.25, 0.1];
        assert_matches_burn(&config, &observations, mask, Some(weights));
    }

    #[test]
    fn host_gradients_match_burns_on_pusht_pooled_frames_and_action_origins() {
        let mut robot = PushT::default();
        let config = VlaPolicyConfig::for_robot(robot.spec()).unwrap();
        assert!(config.frame_pool > 1 && config.action_origin.is_some());
        let observations: Vec<Observation> = (0..3).map(|seed| robot.reset(seed)).collect();
        let ones = vec![1.0; observations.len() * config.chunk_len];
        assert_matches_burn(&config, &observations, ones, None);
    }
}
