//! The layer norms' and encoder layers' forward passes with their activations kept,
//! and their backward passes, for one observation at a time.

use crate::activation::gelu_with_slope_to;
use crate::host::{EncoderLayer, Norm, attend, dot};

use super::gradient::{LayerGradient, NormGradient};

/// A layer norm's forward pass over some rows, kept for its backward pass.
#[derive(Default)]
pub(super) struct NormTape {
    /// `(x - mean) / std` per row.
    normalised: Vec<f32>,
    /// `1 / std` per row.
    inverse_std: Vec<f32>,
    /// The output, `normalised * gamma + beta`.
    pub(super) output: Vec<f32>,
}

impl Norm {
    pub(super) fn forward_kept(&self, x: &[f32]) -> NormTape {
        let d = self.gamma.len();
        let rows = x.len() / d;
        let mut tape = NormTape {
            normalised: vec![0.0; rows * d],
            inverse_std: vec![0.0; rows],
            output: vec![0.0; rows * d],
        };
        for (r, x) in x.chunks_exact(d).enumerate() {
            let (mean, inverse_std) = Norm::statistics(x);
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
    pub(super) fn backward(
        &self,
        tape: &NormTape,
        dy: &[f32],
        gradient: &mut NormGradient,
        dx: &mut [f32],
    ) {
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
pub(super) struct LayerTape {
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
    pub(super) fn forward_kept(
        &self,
        x: &mut [f32],
        queries: usize,
        pad: &[bool],
        d: usize,
    ) -> LayerTape {
        let seq = x.len() / d;
        let heads = self.heads;
        let head_dim = d / heads;
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
                let offset = h * head_dim;
                let query = &q[i * d + offset..][..head_dim];
                let row = &mut weights[(i * heads + h) * seq..][..seq];
                let out = &mut context[i * d + offset..][..head_dim];
                attend(query, &k, &v, pad, d, offset, row, out);
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
        gelu_with_slope_to(&pre, &mut hidden, &mut slope);
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
    pub(super) fn backward(
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
