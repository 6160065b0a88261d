//! The Gaussian-head policy's forward pass for one observation, in plain Rust on the
//! CPU: what the robot's control loop runs every tick.
//!
//! Why: at batch 1 a burn forward is dozens of small tensor operations, each paying a
//! dispatch, an allocation and (for the autodiff-free inference path too) shape
//! bookkeeping; the arithmetic is a few million multiply-adds. [`HostPolicy`] copies
//! the weights out of a [`VlaPolicy`] once (when a new version is published) and runs
//! the same computation on reused buffers with the `gemm` crate's products
//! ([`HostLinear`]) and the vectorised GELU: no tensors, no allocation per call. Two shortcuts change no result: the patch-position term,
//! which depends on the weights only, is computed once; and the last transformer
//! layer computes attention and the feed-forward block for the readout token only,
//! the one token the head reads. The test below holds it to burn's forward within
//! 1e-5.

use burn::nn::{Embedding, LayerNorm};
use burn::prelude::*;
use rayon::prelude::*;

use crate::activation::{StemActivation, gelu_in_place};
use crate::head::ActionHead;
use crate::host_linear::HostLinear;
use crate::input::PolicyBatch;
use crate::model::{VlaPolicy, patch_coordinate_values};
use crate::precision::Precision;
use crate::readback::values;
use crate::vision::{StemInputs, pixel_coordinates};

/// burn's `LayerNormConfig` default, which every norm of the policy uses.
const LAYER_NORM_EPSILON: f32 = 1e-5;
/// The score burn's attention gives a padded key (`min_float`).
const MASKED_SCORE: f32 = -1e4;

/// The attention of one query over every key of one head: `query` is the head's slice
/// of the query, `offset` where that head's slice starts in each `d`-wide row of
/// `keys` and `values`, `pad` the masked keys. Writes the attention weights (softmax of
/// the scaled scores) into `weights` (`[tokens]`) and adds the weighted values to `out`
/// (`[head_dim]`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend(
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    pad: &[bool],
    d: usize,
    offset: usize,
    weights: &mut [f32],
    out: &mut [f32],
) {
    let head_dim = query.len();
    let scale = 1.0 / (head_dim as f32).sqrt();
    for (j, score) in weights.iter_mut().enumerate() {
        *score = if pad[j] {
            MASKED_SCORE
        } else {
            dot(query, &keys[j * d + offset..][..head_dim]) * scale
        };
    }
    let max = weights.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut total = 0.0;
    for score in weights.iter_mut() {
        *score = (*score - max).exp();
        total += *score;
    }
    for (j, weight) in weights.iter_mut().enumerate() {
        *weight /= total;
        let value = &values[j * d + offset..][..head_dim];
        out.iter_mut()
            .zip(value)
            .for_each(|(o, v)| *o += *weight * v);
    }
}

/// `sum a_i b_i`.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

/// The token type of position `t` in a sequence of readout, proprioception, `words`
/// word tokens and the patches: 0, 1, 2 and 3 respectively.
pub(crate) fn token_kind(t: usize, words: usize) -> usize {
    match t {
        0 => 0,
        1 => 1,
        t if t < 2 + words => 2,
        _ => 3,
    }
}

/// A layer norm's scale and shift.
pub(crate) struct Norm {
    pub(crate) gamma: Vec<f32>,
    pub(crate) beta: Vec<f32>,
}

impl Norm {
    fn of<B: Backend>(norm: &LayerNorm<B>) -> Self {
        let gamma = values(norm.gamma.val());
        let beta = norm
            .beta
            .as_ref()
            .map_or_else(|| vec![0.0; gamma.len()], |b| values(b.val()));
        Self { gamma, beta }
    }

    /// The mean of row `x` and `1 / std` (biased variance plus epsilon), as burn's
    /// `LayerNorm` computes them.
    pub(crate) fn statistics(x: &[f32]) -> (f32, f32) {
        let d = x.len() as f32;
        let mean = x.iter().sum::<f32>() / d;
        let variance = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d;
        (mean, 1.0 / (variance + LAYER_NORM_EPSILON).sqrt())
    }

    /// Normalises each of the first `rows` rows of `x` into `y`.
    fn forward(&self, rows: usize, x: &[f32], y: &mut [f32]) {
        let d = self.gamma.len();
        for (x, y) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).take(rows) {
            let (mean, scale) = Self::statistics(x);
            for j in 0..d {
                y[j] = (x[j] - mean) * scale * self.gamma[j] + self.beta[j];
            }
        }
    }
}

fn embedding<B: Backend>(embedding: &Embedding<B>) -> Vec<f32> {
    values(embedding.weight.val())
}

/// One norm-first transformer encoder layer.
pub(crate) struct EncoderLayer {
    pub(crate) attention_norm: Norm,
    pub(crate) query: HostLinear,
    pub(crate) key: HostLinear,
    pub(crate) value: HostLinear,
    pub(crate) output: HostLinear,
    pub(crate) feed_forward_norm: Norm,
    pub(crate) inner: HostLinear,
    pub(crate) outer: HostLinear,
    pub(crate) heads: usize,
}

/// Reused buffers of [`HostPolicy::gaussian`]; grown on the first call.
#[derive(Debug, Default)]
pub struct HostScratch {
    tokens: Vec<f32>,
    normed: Vec<f32>,
    queries: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
    scores: Vec<f32>,
    context: Vec<f32>,
    projected: Vec<f32>,
    hidden: Vec<f32>,
    features: Vec<f32>,
    mixed: Vec<f32>,
    pooled: Vec<f32>,
    small: Vec<f32>,
    keypoint_sums: Vec<f32>,
}

/// Per-channel maxima and the three running sums (weights, x, y) of the keypoints,
/// from one reused buffer.
fn scratch_keypoints(buffer: &mut Vec<f32>, channels: usize) -> (&mut [f32], &mut [f32]) {
    sized(buffer, 4 * channels).split_at_mut(channels)
}

fn sized(buffer: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buffer.len() < len {
        buffer.resize(len, 0.0);
    }
    &mut buffer[..len]
}

/// A Gaussian-head [`VlaPolicy`]'s weights on the host, and its forward pass for one
/// observation; see the module documentation.
pub struct HostPolicy {
    pub(crate) stem: HostLinear,
    /// The stem's residual layers after the first.
    pub(crate) stem_mixing: Vec<HostLinear>,
    pub(crate) stem_activation: StemActivation,
    pub(crate) film: HostLinear,
    pub(crate) keypoint_sharpness: Vec<f32>,
    pub(crate) keypoint_embed: HostLinear,
    pub(crate) patch_embed: HostLinear,
    /// The patch-coordinate features through their layer, `[patches, d]`.
    pub(crate) patch_position: Vec<f32>,
    pub(crate) word_embed: Vec<f32>,
    pub(crate) word_position: Vec<f32>,
    pub(crate) proprio_embed: HostLinear,
    pub(crate) token_type: Vec<f32>,
    pub(crate) layers: Vec<EncoderLayer>,
    pub(crate) readout_norm: Norm,
    pub(crate) head_hidden: HostLinear,
    pub(crate) head_out: HostLinear,
    pub(crate) log_std_range: (f32, f32),
    /// Pixel coordinates of the spatial softmax: every pixel's x, then every pixel's y.
    pub(crate) pixel_coordinates: Vec<f32>,
    pub(crate) image_size: usize,
    pub(crate) patch_size: usize,
    pub(crate) chunk_len: usize,
    pub(crate) action_dim: usize,
    pub(crate) d: usize,
    /// The keypoints' readout to the keypoint targets, for training; `None` without.
    pub(crate) keypoint_readout: Option<HostLinear>,
    pub(crate) keypoint_target_weight: f32,
}

impl HostPolicy {
    /// The host copy of `policy`; `None` for a flow head (its sampler integrates the
    /// head many times and keeps the burn path) and for a policy computing in another
    /// precision than f32 (a precision variant is measured as burn computes it, not as
    /// an f32 copy of its rounded weights).
    pub fn of<B: Backend>(policy: &VlaPolicy<B>) -> Option<Self> {
        let ActionHead::Gaussian(head) = &policy.head else {
            return None;
        };
        if policy.precision() != Precision::F32 {
            return None;
        }
        let d = policy.readout_norm.gamma.dims()[0];
        let grid = policy.image_size / policy.patch_size;
        let coordinates = patch_coordinate_values(grid);
        let patch_coordinates = HostLinear::of(&policy.patch_coordinates);
        let mut patch_position = vec![0.0; grid * grid * d];
        patch_coordinates.forward(grid * grid, &coordinates, &mut patch_position);
        let layers = policy
            .encoder
            .layers
            .iter()
            .map(|layer| EncoderLayer {
                attention_norm: Norm::of(&layer.norm_2),
                query: HostLinear::of(&layer.mha.query),
                key: HostLinear::of(&layer.mha.key),
                value: HostLinear::of(&layer.mha.value),
                output: HostLinear::of(&layer.mha.output),
                feed_forward_norm: Norm::of(&layer.norm_1),
                inner: HostLinear::of(&layer.pwff.linear_inner),
                outer: HostLinear::of(&layer.pwff.linear_outer),
                heads: layer.mha.n_heads,
            })
            .collect();
        Some(Self {
            stem: HostLinear::of(&policy.stem),
            stem_mixing: policy.stem_mixing.iter().map(HostLinear::of).collect(),
            stem_activation: policy.stem_activation,
            film: HostLinear::of(&policy.film),
            keypoint_sharpness: values(policy.keypoint_sharpness.val()),
            keypoint_embed: HostLinear::of(&policy.keypoint_embed),
            patch_embed: HostLinear::of(&policy.patch_embed),
            patch_position,
            word_embed: embedding(&policy.word_embed),
            word_position: embedding(&policy.word_position),
            proprio_embed: HostLinear::of(&policy.proprio_embed),
            token_type: embedding(&policy.token_type),
            layers,
            readout_norm: Norm::of(&policy.readout_norm),
            head_hidden: HostLinear::of(&head.hidden),
            head_out: HostLinear::of(&head.out),
            log_std_range: (head.min_log_std as f32, head.max_log_std as f32),
            pixel_coordinates: pixel_coordinates(policy.image_size),
            image_size: policy.image_size,
            patch_size: policy.patch_size,
            chunk_len: policy.chunk_len,
            action_dim: policy.action_dim,
            d,
            keypoint_readout: policy.keypoint_readout.as_ref().map(HostLinear::of),
            keypoint_target_weight: policy.keypoint_target_weight,
        })
    }

    /// The chunk distributions `(mean, log_std)`, each `[rows, K * A]` row-major, of
    /// every observation of `batch` (pushed for this policy's config), as
    /// [`Self::gaussian`] computes them, the rows spread over rayon's threads (each
    /// with its own scratch buffers).
    pub fn gaussian_rows(&self, batch: &PolicyBatch) -> (Vec<f32>, Vec<f32>) {
        let width = self.chunk_len * self.action_dim;
        let (mut mean, mut log_std) = (
            vec![0.0; batch.len() * width],
            vec![0.0; batch.len() * width],
        );
        mean.par_chunks_mut(width)
            .zip(log_std.par_chunks_mut(width))
            .enumerate()
            .for_each_init(HostScratch::default, |scratch, (row, (mean, log_std))| {
                self.gaussian(batch, row, scratch, mean, log_std)
            });
        (mean, log_std)
    }

    /// Chunk length `K` and action width `A` of the chunks this policy predicts.
    pub fn chunk_shape(&self) -> (usize, usize) {
        (self.chunk_len, self.action_dim)
    }

    /// The chunk distribution for observation `row` of `batch` (pushed for this
    /// policy's config): means (measured from the row's action origin) and log
    /// standard deviations, each `[K * A]` row-major, written into `mean` and
    /// `log_std`, as [`VlaPolicy::gaussian`] computes them.
    pub fn gaussian(
        &self,
        batch: &PolicyBatch,
        row: usize,
        scratch: &mut HostScratch,
        mean: &mut [f32],
        log_std: &mut [f32],
    ) {
        let input = batch.row(row);
        let d = self.d;
        let words = input.words.len();
        let pixels = self.image_size * self.image_size;
        let channels = self.keypoint_sharpness.len();
        let grid = self.image_size / self.patch_size;
        let patches = grid * grid;
        let seq = 2 + words + patches;
        let pad = input.token_padding(patches);

        // Word tokens (rows 2.. of the sequence) and the instruction, their weighted mean.
        let tokens = sized(&mut scratch.tokens, seq * d);
        for (w, &id) in input.words.iter().enumerate() {
            let id = id as usize;
            for j in 0..d {
                tokens[(2 + w) * d + j] =
                    self.word_embed[id * d + j] + self.word_position[w * d + j];
            }
        }
        let small = sized(&mut scratch.small, 2 * d + 4 * channels);
        let (instruction, rest) = small.split_at_mut(d);
        let (film, rest) = rest.split_at_mut(2 * channels);
        let (keypoints, embedded) = rest.split_at_mut(2 * channels);
        instruction.fill(0.0);
        for (w, &weight) in input.word_weights.iter().enumerate() {
            for j in 0..d {
                instruction[j] += tokens[(2 + w) * d + j] * weight;
            }
        }

        // The per-pixel stem, FiLM-modulated by the instruction.
        let features = sized(&mut scratch.features, pixels * channels);
        let stem_inputs = StemInputs::of_rows(self.stem.inputs())
            .expect("a stem reads the inputs of a StemInputs")
            .rows(input.images, self.image_size);
        self.stem.forward(pixels, &stem_inputs, features);
        self.stem_activation.apply_in_place(features);
        for layer in &self.stem_mixing {
            let mixed = sized(&mut scratch.mixed, pixels * channels);
            layer.forward(pixels, features, mixed);
            self.stem_activation.apply_in_place(mixed);
            features
                .iter_mut()
                .zip(mixed.iter())
                .for_each(|(h, m)| *h += m);
        }
        self.film.forward(1, instruction, film);
        let (gamma, beta) = film.split_at(channels);
        for pixel in features.chunks_exact_mut(channels) {
            for c in 0..channels {
                pixel[c] = pixel[c] * (gamma[c] + 1.0) + beta[c];
            }
        }

        // Keypoints: each channel's softmax over the pixels, its expected coordinates
        // (pixel-major passes, so that the channels of a pixel are read together).
        let (xs, ys) = self.pixel_coordinates.split_at(pixels);
        let sharpness = &self.keypoint_sharpness;
        let (max, sums) = scratch_keypoints(&mut scratch.keypoint_sums, channels);
        max.fill(f32::NEG_INFINITY);
        for pixel in features.chunks_exact(channels) {
            for c in 0..channels {
                max[c] = max[c].max(pixel[c] * sharpness[c]);
            }
        }
        sums.fill(0.0);
        let (total, rest) = sums.split_at_mut(channels);
        let (x, y) = rest.split_at_mut(channels);
        for (p, pixel) in features.chunks_exact(channels).enumerate() {
            for c in 0..channels {
                let weight = (pixel[c] * sharpness[c] - max[c]).exp();
                total[c] += weight;
                x[c] += weight * xs[p];
                y[c] += weight * ys[p];
            }
        }
        for c in 0..channels {
            keypoints[c] = x[c] / total[c];
            keypoints[channels + c] = y[c] / total[c];
        }

        // Patch tokens: each patch's mean feature, embedded, plus its position.
        let pooled = sized(&mut scratch.pooled, patches * channels);
        pooled.fill(0.0);
        let side = self.image_size;
        for row in 0..side {
            for col in 0..side {
                let patch = (row / self.patch_size) * grid + col / self.patch_size;
                let from = &features[(row * side + col) * channels..][..channels];
                pooled[patch * channels..][..channels]
                    .iter_mut()
                    .zip(from)
                    .for_each(|(p, f)| *p += f);
            }
        }
        let area = (self.patch_size * self.patch_size) as f32;
        pooled.iter_mut().for_each(|p| *p /= area);
        let patch_rows = &mut tokens[(2 + words) * d..];
        self.patch_embed.forward(patches, pooled, patch_rows);
        patch_rows
            .iter_mut()
            .zip(&self.patch_position)
            .for_each(|(t, p)| *t += p);

        // The proprioception token, and the readout token: instruction, proprioception
        // and keypoints.
        self.proprio_embed
            .forward(1, input.proprio, &mut tokens[d..2 * d]);
        self.keypoint_embed
            .forward(1, keypoints, &mut embedded[..d]);
        for j in 0..d {
            tokens[j] = instruction[j] + tokens[d + j] + embedded[j];
        }
        for t in 0..seq {
            let kind = token_kind(t, words);
            for j in 0..d {
                tokens[t * d + j] += self.token_type[kind * d + j];
            }
        }

        let last = self.layers.len().saturating_sub(1);
        for (i, layer) in self.layers.iter().enumerate() {
            // Only the readout token's output is read after the last layer.
            let queries = if i == last { 1 } else { seq };
            layer.forward(seq, queries, &pad, d, scratch);
        }

        let tokens = &scratch.tokens;
        let normed = sized(&mut scratch.normed, d);
        self.readout_norm.forward(1, &tokens[..d], normed);
        let hidden = sized(&mut scratch.hidden, d);
        self.head_hidden.forward(1, normed, hidden);
        gelu_in_place(hidden);
        let ka = self.chunk_len * self.action_dim;
        let out = sized(&mut scratch.projected, 2 * ka);
        self.head_out.forward(1, hidden, out);
        let (low, high) = self.log_std_range;
        for i in 0..ka {
            mean[i] = out[i] + input.action_origin[i % self.action_dim];
            let raw = out[ka + i];
            log_std[i] = 1.0 / (1.0 + (-raw).exp()) * (high - low) + low;
        }
    }
}

impl std::fmt::Debug for HostPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostPolicy")
            .field("d_model", &self.d)
            .field("layers", &self.layers.len())
            .field("image_size", &self.image_size)
            .finish_non_exhaustive()
    }
}

impl EncoderLayer {
    /// Applies the layer to the `seq` tokens in `scratch.tokens` (`pad`: masked keys):
    /// `x + attention(norm(x))`, then `x + feed_forward(norm(x))`, for the first
    /// `queries` tokens.
    fn forward(
        &self,
        seq: usize,
        queries: usize,
        pad: &[bool],
        d: usize,
        scratch: &mut HostScratch,
    ) {
        let heads = self.heads;
        let head_dim = d / heads;
        let tokens = &mut scratch.tokens[..seq * d];
        let normed = sized(&mut scratch.normed, seq * d);
        self.attention_norm.forward(seq, tokens, normed);
        let q = sized(&mut scratch.queries, queries * d);
        self.query.forward(queries, normed, q);
        let k = sized(&mut scratch.keys, seq * d);
        self.key.forward(seq, normed, k);
        let v = sized(&mut scratch.values, seq * d);
        self.value.forward(seq, normed, v);
        let scores = sized(&mut scratch.scores, seq);
        let context = sized(&mut scratch.context, queries * d);
        context.fill(0.0);
        for i in 0..queries {
            for h in 0..heads {
                let offset = h * head_dim;
                let query = &q[i * d + offset..][..head_dim];
                let out = &mut context[i * d + offset..][..head_dim];
                attend(query, k, v, pad, d, offset, scores, out);
            }
        }
        let projected = sized(&mut scratch.projected, queries * d);
        self.output.forward(queries, context, projected);
        tokens[..queries * d]
            .iter_mut()
            .zip(projected.iter())
            .for_each(|(t, p)| *t += p);

        let normed = &mut scratch.normed[..queries * d];
        self.feed_forward_norm.forward(queries, tokens, normed);
        let hidden = sized(&mut scratch.hidden, queries * self.inner.outputs());
        self.inner.forward(queries, normed, hidden);
        gelu_in_place(hidden);
        let projected = sized(&mut scratch.projected, queries * d);
        self.outer.forward(queries, hidden, projected);
        tokens[..queries * d]
            .iter_mut()
            .zip(projected.iter())
            .for_each(|(t, p)| *t += p);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use burn::backend::NdArray;
    use imago_robots::pusht::PushT;
    use imago_robots::reacher2d::Reacher2d;
    use imago_robots::{Observation, Robot};

    use super::*;
    use crate::model::VlaPolicyConfig;

    type B = NdArray;

    /// The largest difference between the host forward and burn's, over `observations`
    /// pushed one batch.
    fn largest_gap(
        policy: &VlaPolicy<B>,
        config: &VlaPolicyConfig,
        observations: &[Observation],
    ) -> f32 {
        let device = Default::default();
        let host = HostPolicy::of(policy).expect("a Gaussian head");
        let mut batch = PolicyBatch::new(&config.input_spec());
        for observation in observations {
            batch.push(observation).unwrap();
        }
        let chunk = policy.gaussian(batch.to_input(&device)).unwrap();
        let (mean, log_std) = (values(chunk.mean), values(chunk.log_std));
        let ka = config.chunk_len * config.action_dim();
        let mut scratch = HostScratch::default();
        let (mut m, mut s) = (vec![0.0; ka], vec![0.0; ka]);
        let mut gap = 0.0f32;
        for row in 0..observations.len() {
            host.gaussian(&batch, row, &mut scratch, &mut m, &mut s);
            for i in 0..ka {
                gap = gap
                    .max((m[i] - mean[row * ka + i]).abs())
                    .max((s[i] - log_std[row * ka + i]).abs());
            }
        }
        gap
    }

    /// Four reacher2d observations, the last with a short instruction.
    pub(crate) fn reacher_observations() -> Vec<Observation> {
        let mut robot = Reacher2d::default();
        let mut observations: Vec<Observation> = (0..4).map(|seed| robot.reset(seed)).collect();
        // A short instruction pads most of the word tokens.
        observations[3].instruction = "reach".into();
        observations
    }

    #[test]
    fn the_host_forward_matches_burns_on_reacher2d() {
        let config = VlaPolicyConfig::for_robot(Reacher2d::default().spec()).unwrap();
        let policy = config.init::<B>(&Default::default());
        let gap = largest_gap(&policy, &config, &reacher_observations());
        assert!(gap < 1e-5, "largest gap {gap}");
    }

    #[test]
    fn the_host_forward_matches_burns_with_a_gelu_neighbourhood_stem_and_three_layers() {
        let config = VlaPolicyConfig::for_robot(Reacher2d::default().spec())
            .unwrap()
            .with_stem_activation(StemActivation::Gelu)
            .with_stem_inputs(StemInputs::NeighbourhoodAndPosition)
            .with_n_layers(3);
        let policy = config.init::<B>(&Default::default());
        let gap = largest_gap(&policy, &config, &reacher_observations());
        assert!(gap < 1e-5, "largest gap {gap}");
    }

    #[test]
    fn the_host_forward_matches_burns_with_stems_of_two_and_four_layers() {
        for (layers, activation) in [(2, StemActivation::Relu), (4, StemActivation::Gelu)] {
            let config = VlaPolicyConfig::for_robot(Reacher2d::default().spec())
                .unwrap()
                .with_stem_activation(activation)
                .with_stem_inputs(StemInputs::NeighbourhoodAndPosition)
                .with_stem_layers(layers);
            let policy = config.init::<B>(&Default::default());
            assert_eq!(policy.stem_mixing.len(), layers - 1);
            let gap = largest_gap(&policy, &config, &reacher_observations());
            assert!(gap < 1e-5, "{layers} layers: largest gap {gap}");
        }
    }

    #[test]
    fn the_host_forward_matches_burns_on_pusht_pooled_frames_and_action_origins() {
        let mut robot = PushT::default();
        let config = VlaPolicyConfig::for_robot(robot.spec()).unwrap();
        assert!(config.frame_pool > 1 && config.action_origin.is_some());
        let policy = config.init::<B>(&Default::default());
        let observations: Vec<Observation> = (0..3).map(|seed| robot.reset(seed)).collect();
        let gap = largest_gap(&policy, &config, &observations);
        assert!(gap < 1e-5, "largest gap {gap}");
    }

    #[test]
    fn a_flow_head_has_no_host_forward() {
        let config = VlaPolicyConfig::for_robot(Reacher2d::default().spec())
            .unwrap()
            .with_head(crate::head::ActionHeadKind::Flow);
        assert!(HostPolicy::of(&config.init::<B>(&Default::default())).is_none());
    }
}
