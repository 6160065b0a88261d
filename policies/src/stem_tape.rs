//! A per-pixel stem of any depth on the host: its forward pass over one frame with the
//! activations kept, and its backward pass from the gradients of what the policy reads
//! from it (the keypoints and the patch means) to those of its layers and of the
//! softmax's scale.
//!
//! Why: a stem of one layer has few parameters per channel, so
//! [`crate::stem_host`] can hand its exact Jacobians to burn's autodiff. A layer that
//! mixes the channels makes every channel depend on every first-layer weight, and
//! those Jacobians would be `pixels x channels^2` products a frame; the
//! vector-Jacobian product here costs two matrix products a layer, as its forward
//! does. The policy's host training step runs every stem through it: even for one
//! layer its `gemm` products beat accumulating the Jacobians' per-pixel sums (a
//! cloning step 10% faster at 16 channels, 27% at 64; docs/performance.md).

use std::iter::once;

use crate::activation::StemActivation;
use crate::host_linear::{HostLinear, LinearGradient};
use crate::host_math::exp_nonpositive;
use crate::vision::{StemInputs, pixel_position};

/// A stem's layers on the host: `first` reads what its [`StemInputs`] read at each
/// pixel, `activation` after it; each of `mixing` adds to the channels
/// `activation(h W + b)` of them.
pub(crate) struct StemLayers<'a> {
    pub first: &'a HostLinear,
    pub mixing: &'a [HostLinear],
    pub activation: StemActivation,
    /// Side of the square frame, pixels.
    pub size: usize,
    /// Side of the square patches whose means are read.
    pub patch: usize,
}

/// One frame through [`StemLayers::forward_kept`]: what the policy reads, and what
/// the backward pass needs.
pub(crate) struct StemTape {
    /// What the first layer read, `[pixels, inputs]`.
    inputs: Vec<f32>,
    /// Each layer's output, `[pixels, C]`, first layer first.
    outputs: Vec<Vec<f32>>,
    /// The activation's slope at each layer's pre-activation, shaped as `outputs`.
    slopes: Vec<Vec<f32>>,
    /// Each channel's softmax weight of each pixel, `[pixels, C]`.
    weights: Vec<f32>,
    /// `[2, C]`: each channel's expected x under its spatial softmax, then its y.
    pub keypoints: Vec<f32>,
    /// `[N, C]`: each patch's mean of the last layer's output (row-major patches).
    pub patch_means: Vec<f32>,
}

impl StemLayers<'_> {
    fn layers(&self) -> impl DoubleEndedIterator<Item = &HostLinear> {
        once(self.first).chain(self.mixing)
    }

    fn channels(&self) -> usize {
        self.first.outputs()
    }

    /// The patch (row-major) that `pixel` (row-major) lies in.
    fn patch_of(&self, pixel: usize) -> usize {
        let grid = self.size / self.patch;
        (pixel / self.size / self.patch) * grid + (pixel % self.size) / self.patch
    }

    /// `frame` `[size * size, 3]` (row-major pixels, RGB) through every layer, the
    /// last layer's output scaled by `scale` `[C]` before each channel's softmax over
    /// the pixels.
    pub fn forward_kept(&self, frame: &[f32], scale: &[f32]) -> StemTape {
        let (size, channels) = (self.size, self.channels());
        let pixels = size * size;
        let inputs = StemInputs::of_rows(self.first.inputs())
            .expect("a stem reads the inputs of a StemInputs")
            .rows(frame, size)
            .into_owned();
        let mut outputs: Vec<Vec<f32>> = Vec::new();
        let mut slopes = Vec::new();
        let mut pre = vec![0.0f32; pixels * channels];
        for layer in self.layers() {
            layer.forward(pixels, outputs.last().unwrap_or(&inputs), &mut pre);
            let (mut output, mut slope) = (vec![0.0; pre.len()], vec![0.0; pre.len()]);
            self.activation
                .apply_with_slope(&pre, &mut output, &mut slope);
            // A mixing layer adds to the channels it read.
            if let Some(previous) = outputs.last() {
                output.iter_mut().zip(previous).for_each(|(h, p)| *h += p);
            }
            outputs.push(output);
            slopes.push(slope);
        }
        let last = outputs.last().expect("a stem has a first layer");

        let mut max = vec![f32::NEG_INFINITY; channels];
        for row in last.chunks_exact(channels) {
            for ((m, h), s) in max.iter_mut().zip(row).zip(scale) {
                *m = m.max(h * s);
            }
        }
        let mut weights = vec![0.0f32; pixels * channels];
        let mut total = vec![0.0f32; channels];
        for (w_row, h_row) in weights
            .chunks_exact_mut(channels)
            .zip(last.chunks_exact(channels))
        {
            for c in 0..channels {
                w_row[c] = exp_nonpositive(h_row[c] * scale[c] - max[c]);
                total[c] += w_row[c];
            }
        }
        let grid = size / self.patch;
        let mut keypoints = vec![0.0f32; 2 * channels];
        let mut patch_means = vec![0.0f32; grid * grid * channels];
        for (pixel, (w_row, h_row)) in weights
            .chunks_exact_mut(channels)
            .zip(last.chunks_exact(channels))
            .enumerate()
        {
            let (gx, gy) = pixel_position(pixel, size);
            let n = self.patch_of(pixel);
            let means = &mut patch_means[n * channels..(n + 1) * channels];
            for c in 0..channels {
                w_row[c] /= total[c];
                keypoints[c] += w_row[c] * gx;
                keypoints[channels + c] += w_row[c] * gy;
                means[c] += h_row[c];
            }
        }
        let per_patch = (self.patch * self.patch) as f32;
        patch_means.iter_mut().for_each(|m| *m /= per_patch);
        StemTape {
            inputs,
            outputs,
            slopes,
            weights,
            keypoints,
            patch_means,
        }
    }

    /// The backward pass of [`Self::forward_kept`] for the gradients `d_keypoints`
    /// `[2, C]` and `d_means` `[N, C]`: adds each layer's gradient to `first` and
    /// `mixing` (in order) and returns the scale's `[C]`. With `w` a channel's softmax
    /// weights and `k` its keypoint, `dk/dz_p = w_p (g_p - k)` for the softmax input
    /// `z_p = scale h_p` at the pixel's coordinates `g_p`.
    pub fn backward(
        &self,
        tape: &StemTape,
        scale: &[f32],
        d_keypoints: &[f32],
        d_means: &[f32],
        first: &mut LinearGradient,
        mixing: &mut [LinearGradient],
    ) -> Vec<f32> {
        let (size, channels) = (self.size, self.channels());
        let pixels = size * size;
        let last = tape.outputs.last().expect("a stem has a first layer");
        let per_patch = (self.patch * self.patch) as f32;
        let (k, d_k) = (&tape.keypoints, d_keypoints);
        let mut d_scale = vec![0.0f32; channels];
        let mut d_output = vec![0.0f32; pixels * channels];
        for pixel in 0..pixels {
            let (gx, gy) = pixel_position(pixel, size);
            let n = self.patch_of(pixel);
            let at = pixel * channels;
            for c in 0..channels {
                let w = tape.weights[at + c];
                let d_z = w * (d_k[c] * (gx - k[c]) + d_k[channels + c] * (gy - k[channels + c]));
                d_scale[c] += d_z * last[at + c];
                d_output[at + c] = d_z * scale[c] + d_means[n * channels + c] / per_patch;
            }
        }
        let layers: Vec<&HostLinear> = self.layers().collect();
        let mut gradients: Vec<&mut LinearGradient> = once(first).chain(mixing).collect();
        let mut d_input = vec![0.0f32; pixels * channels];
        for index in (0..layers.len()).rev() {
            // A mixing layer's input reaches its output directly as well.
            if index > 0 {
                d_input.copy_from_slice(&d_output);
            }
            d_output
                .iter_mut()
                .zip(&tape.slopes[index])
                .for_each(|(d, s)| *d *= s);
            if index == 0 {
                layers[0].backward(pixels, &tape.inputs, &d_output, gradients[0], None);
            } else {
                layers[index].backward(
                    pixels,
                    &tape.outputs[index - 1],
                    &d_output,
                    gradients[index],
                    Some(&mut d_input),
                );
                std::mem::swap(&mut d_output, &mut d_input);
            }
        }
        d_scale
    }
}
