//! The per-pixel stem and what the models read from it, computed on the host in one
//! pass over each frame, with the exact Jacobians a training step needs.
//!
//! Why: through burn's CPU backends the stem's pipeline (a 1x1 convolution, its
//! activation, the channel scale, a softmax over the pixels, the expected coordinates,
//! the patch means, and the backward of each) is about fifteen tensor passes over
//! `batch x pixels x channels` values, each with its own allocation: 90% of the
//! policy's cloning step (docs/performance.md). Here each frame is read once, the
//! keypoints, the patch means and their derivatives with respect to every parameter
//! of the pipeline come out of two loops over its pixels, and the frames of a batch
//! run in parallel. The parameters are few (the stem's 3 to 29 weights and bias per
//! channel, one scale per frame and channel), so the derivatives are small dense Jacobians,
//! which `crate::vision` turns into gradients through burn's autodiff.

use rayon::prelude::*;

use crate::activation::StemActivation;
use crate::host_math::exp_nonpositive;
use crate::vision::{StemInputs, pixel_position};

/// The stem of one model, on the host: `activation(x W + b)` per pixel, where `x` is
/// what the [`StemInputs`] of the weight's rows read there (its colour, its
/// neighbourhood's colours, and its position or not).
pub(crate) struct HostStem<'a> {
    /// `[I, C]` row-major, as burn stores a linear layer's weight, for the `I` inputs
    /// of [`StemInputs`].
    pub weight: &'a [f32],
    /// `[C]`.
    pub bias: &'a [f32],
    pub activation: StemActivation,
    /// Side of the square frame, pixels.
    pub size: usize,
    /// Side of the square patches whose means are read, if any.
    pub patch: Option<usize>,
}

/// What [`HostStem::read`] returns for a batch of `B` frames, `C` channels and `N`
/// patches; each row-major.
#[derive(Debug, Default)]
pub(crate) struct HostReadings {
    /// `[B, 2, C]`: each channel's expected x under its spatial softmax, then its y.
    pub keypoints: Vec<f32>,
    /// `[B, N, C]`: each patch's mean of the stem's output (empty without patches).
    pub patch_means: Vec<f32>,
    /// The derivatives, when asked for.
    pub jacobians: Option<Jacobians>,
}

/// Derivatives of [`HostReadings`] with respect to the stem's `S` shared parameters
/// per channel ([`HostStem::shared`]: index `i` is weight row `i`, then the bias) and
/// the per-frame, per-channel scale of the softmax's input.
#[derive(Debug, Default)]
pub(crate) struct Jacobians {
    /// `[B, 2, S, C]`: d keypoint (axis, channel) / d shared parameter (i, channel).
    pub keypoints_shared: Vec<f32>,
    /// `[B, 2, C]`: d keypoint (axis, channel) / d scale (channel).
    pub keypoints_scale: Vec<f32>,
    /// `[B, N, S, C]`: d patch mean (patch, channel) / d shared parameter.
    pub patch_means_shared: Vec<f32>,
}

/// One frame's share of [`HostReadings`].
struct FrameReadings {
    keypoints: Vec<f32>,
    patch_means: Vec<f32>,
    keypoints_shared: Vec<f32>,
    keypoints_scale: Vec<f32>,
    patch_means_shared: Vec<f32>,
}

impl HostStem<'_> {
    fn channels(&self) -> usize {
        self.bias.len()
    }

    /// What the stem reads at each pixel, from its weight's rows.
    fn inputs(&self) -> StemInputs {
        StemInputs::of_rows(self.weight.len() / self.channels())
            .expect("a stem's weight has a row per input of StemInputs")
    }

    /// Shared parameters per channel whose derivatives are returned: a weight per
    /// input, then the bias.
    pub(crate) fn shared(&self) -> usize {
        self.inputs().count() + 1
    }

    /// Reads `frames` `[B, size * size, 3]` (row-major pixels, RGB) with the softmax's
    /// input scaled by `scale` `[B, C]`; with `jacobians`, also the derivatives.
    pub fn read(&self, frames: &[f32], scale: &[f32], jacobians: bool) -> HostReadings {
        let pixels = self.size * self.size;
        let channels = self.channels();
        let batch = scale.len() / channels;
        assert_eq!(
            self.weight.len(),
            self.inputs().count() * channels,
            "stem weight is [inputs, C]"
        );
        assert_eq!(
            frames.len(),
            batch * pixels * 3,
            "frames are [B, pixels, 3]"
        );
        let rows: Vec<FrameReadings> = frames
            .par_chunks_exact(pixels * 3)
            .zip(scale.par_chunks_exact(channels))
            .map(|(frame, scale)| self.read_frame(frame, scale, jacobians))
            .collect();
        let gather = |part: fn(&FrameReadings) -> &[f32]| -> Vec<f32> {
            rows.iter()
                .flat_map(|row| part(row).iter().copied())
                .collect()
        };
        HostReadings {
            keypoints: gather(|r| &r.keypoints),
            patch_means: gather(|r| &r.patch_means),
            jacobians: jacobians.then(|| Jacobians {
                keypoints_shared: gather(|r| &r.keypoints_shared),
                keypoints_scale: gather(|r| &r.keypoints_scale),
                patch_means_shared: gather(|r| &r.patch_means_shared),
            }),
        }
    }

    /// One frame: a pass computing the stem, its slope, the patch sums and each
    /// channel's largest softmax input; the softmax's exponentials; a pass
    /// accumulating their weighted sums, from which the keypoints and their
    /// derivatives follow: with `e_p = exp(z_p - max)`, `z_p = scale h_p`,
    /// `S = sum e_p`, `k = sum e_p g_p / S` and `dk/dz_p = e_p (g_p - k) / S`. Every
    /// inner loop runs over the channels of one pixel, contiguous, so it vectorises.
    fn read_frame(&self, frame: &[f32], scale: &[f32], jacobians: bool) -> FrameReadings {
        let (size, channels) = (self.size, self.channels());
        let pixels = size * size;
        let (grid, patch) = self.patch.map_or((0, size), |patch| (size / patch, patch));
        let shared = self.shared();
        let inputs = self.inputs();
        let frame = inputs.rows(frame, size);
        let frame = frame.as_ref();
        let bias = self.bias;
        let mut stem = vec![0.0f32; pixels * channels];
        let mut slope = vec![0.0f32; if jacobians { pixels * channels } else { 0 }];
        let mut max = vec![f32::NEG_INFINITY; channels];
        let mut patch_means = vec![0.0f32; grid * grid * channels];
        let mut patch_means_shared = vec![
            0.0f32;
            if jacobians {
                grid * grid * shared * channels
            } else {
                0
            }
        ];
        let mut pre = vec![0.0f32; channels];
        for (pixel, x) in frame.chunks_exact(inputs.count()).enumerate() {
            let at = pixel * channels..(pixel + 1) * channels;
            pre.copy_from_slice(bias);
            for (x, w) in x.iter().zip(self.weight.chunks_exact(channels)) {
                add_scaled(&mut pre, *x, w);
            }
            let h = &mut stem[at.clone()];
            if jacobians {
                self.activation
                    .apply_with_slope(&pre, h, &mut slope[at.clone()]);
            } else {
                self.activation.apply_to(&pre, h);
            }
            for ((m, h), s) in max.iter_mut().zip(h.iter()).zip(scale) {
                *m = m.max(h * s);
            }
            if grid > 0 {
                let n = (pixel / size / patch) * grid + (pixel % size) / patch;
                add_scaled(&mut patch_means[n * channels..(n + 1) * channels], 1.0, h);
                if jacobians {
                    let dh = &slope[at];
                    let rows =
                        &mut patch_means_shared[n * shared * channels..(n + 1) * shared * channels];
                    for (row, x) in rows
                        .chunks_exact_mut(channels)
                        .zip(x.iter().copied().chain([1.0]))
                    {
                        add_scaled(row, x, dh);
                    }
                }
            }
        }
        let per_patch = (patch * patch) as f32;
        patch_means.iter_mut().for_each(|v| *v /= per_patch);
        patch_means_shared.iter_mut().for_each(|v| *v /= per_patch);

        let mut exps = vec![0.0f32; pixels * channels];
        for (e_row, h_row) in exps
            .chunks_exact_mut(channels)
            .zip(stem.chunks_exact(channels))
        {
            for (((e, h), s), m) in e_row.iter_mut().zip(h_row).zip(scale).zip(&max) {
                *e = exp_nonpositive(h * s - m);
            }
        }

        // Rows of `channels` sums: S, S_x, S_y; with derivatives also sum e h,
        // sum e h g_x, sum e h g_y, then per shared parameter i sum q x_i,
        // sum q x_i g_x, sum q x_i g_y with q = e scale slope.
        let rows = if jacobians { 6 + 3 * shared } else { 3 };
        let mut sums = vec![0.0f32; rows * channels];
        let mut weighted = vec![0.0f32; channels];
        for (pixel, x) in frame.chunks_exact(inputs.count()).enumerate() {
            let (gx, gy) = pixel_position(pixel, size);
            let at = pixel * channels..(pixel + 1) * channels;
            let e = &exps[at.clone()];
            let mut rows = sums.chunks_exact_mut(channels);
            let mut next = || rows.next().expect("one row of sums per term");
            add_scaled(next(), 1.0, e);
            add_scaled(next(), gx, e);
            add_scaled(next(), gy, e);
            if jacobians {
                for ((v, e), h) in weighted.iter_mut().zip(e).zip(&stem[at.clone()]) {
                    *v = e * h;
                }
                add_scaled(next(), 1.0, &weighted);
                add_scaled(next(), gx, &weighted);
                add_scaled(next(), gy, &weighted);
                for (((v, e), s), dh) in weighted.iter_mut().zip(e).zip(scale).zip(&slope[at]) {
                    *v = e * s * dh;
                }
                for x in x.iter().copied().chain([1.0]) {
                    add_scaled(next(), x, &weighted);
                    add_scaled(next(), x * gx, &weighted);
                    add_scaled(next(), x * gy, &weighted);
                }
            }
        }
        let sum = |term: usize, c: usize| sums[term * channels + c];
        let mut keypoints = vec![0.0f32; 2 * channels];
        let mut keypoints_shared = vec![0.0f32; if jacobians { 2 * shared * channels } else { 0 }];
        let mut keypoints_scale = vec![0.0f32; if jacobians { 2 * channels } else { 0 }];
        for c in 0..channels {
            let total = sum(0, c);
            for axis in 0..2 {
                let k = sum(1 + axis, c) / total;
                keypoints[axis * channels + c] = k;
                if jacobians {
                    // dk/dscale = sum_p w_p (g_p - k) h_p; dk/dtheta_i likewise with
                    // scale * slope * input_i in place of h.
                    keypoints_scale[axis * channels + c] =
                        (sum(4 + axis, c) - k * sum(3, c)) / total;
                    for i in 0..shared {
                        let plain = sum(6 + 3 * i, c);
                        let along = sum(6 + 3 * i + 1 + axis, c);
                        keypoints_shared[(axis * shared + i) * channels + c] =
                            (along - k * plain) / total;
                    }
                }
            }
        }
        FrameReadings {
            keypoints,
            patch_means,
            keypoints_shared,
            keypoints_scale,
            patch_means_shared,
        }
    }
}

/// `acc += factor * values`, element by element.
#[inline]
fn add_scaled(acc: &mut [f32], factor: f32, values: &[f32]) {
    for (a, v) in acc.iter_mut().zip(values) {
        *a += factor * v;
    }
}
