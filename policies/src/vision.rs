//! Vision operations shared by the policy and the world model's encoder.

use burn::prelude::*;
use burn::tensor::activation::{gelu, relu, softmax};
use serde::{Deserialize, Serialize};

/// The nonlinearity after the per-pixel stem, the one activation applied to every pixel
/// of every frame (batch x pixels x channels values), so the cheapest one pays most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StemActivation {
    /// `max(x, 0)`: one pass forward, a mask backward. The default since it cut the
    /// policy's cloning step by 31% on the CPU (docs/performance.md).
    #[default]
    Relu,
    /// The exact GELU, which checkpoints written before this choice existed use; burn's
    /// GELU backward is 15 tensor ops on the CPU backends.
    Gelu,
}

impl StemActivation {
    /// Applies the activation.
    pub fn apply<B: Backend, const D: usize>(self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self {
            Self::Relu => relu(x),
            Self::Gelu => gelu(x),
        }
    }
}

/// Expected image coordinates of each channel of `features` `[B, size * size, C]` under
/// a softmax over its pixels: `[B, 2C]` as `(x_1..x_C, y_1..y_C)` in `[-1, 1]`, y up.
pub fn spatial_softmax<B: Backend>(
    features: Tensor<B, 3>,
    size: usize,
    device: &B::Device,
) -> Tensor<B, 2> {
    let [batch, pixels, channels] = features.dims();
    let weights = softmax(features, 1);
    let grid = Tensor::<B, 3>::from_data(
        TensorData::new(pixel_coordinates(size), [1, 2, pixels]),
        device,
    );
    // [1, 2, pixels] x [B, pixels, C] -> [B, 2, C]: the x row then the y row, with no
    // transposed copy of the weights.
    grid.matmul(weights).reshape([batch, 2 * channels])
}

/// The coordinates of every pixel of a `size x size` frame (row-major) in `[-1, 1]`,
/// y up: every pixel's x, then every pixel's y (`2 * size * size` values).
pub(crate) fn pixel_coordinates(size: usize) -> Vec<f32> {
    let xs = (0..size).flat_map(|_| (0..size).map(|col| -1.0 + (2 * col + 1) as f32 / size as f32));
    let ys =
        (0..size).flat_map(|row| (0..size).map(move |_| 1.0 - (2 * row + 1) as f32 / size as f32));
    xs.chain(ys).collect()
}

/// FiLM (feature-wise linear modulation, as in RT-1): scales and shifts each channel
/// of `features` `[B, pixels, C]` by `film` `[B, 1, 2C]`, read as `(gamma, beta)`,
/// giving `features * (1 + gamma) + beta`, so a zero `film` leaves them unchanged.
pub fn film_modulate<B: Backend>(features: Tensor<B, 3>, film: Tensor<B, 3>) -> Tensor<B, 3> {
    let channels = features.dims()[2];
    let gamma = film.clone().narrow(2, 0, channels);
    let beta = film.narrow(2, channels, channels);
    features * (gamma + 1.0) + beta
}

#[cfg(test)]
mod tests {
    use burn::backend::{Flex, NdArray};

    use super::*;

    /// A `[2, 16, 2]` map of a 4x4 image whose channel 0 peaks at pixel (row 0, col 3)
    /// and channel 1 at (row 2, col 1) in batch row 0, and the other way round in row 1.
    fn peaked<B: Backend>(device: &B::Device) -> Tensor<B, 3> {
        let mut values = vec![0.0f32; 2 * 16 * 2];
        for (b, peaks) in [[3, 9], [9, 3]].into_iter().enumerate() {
            for (c, pixel) in peaks.into_iter().enumerate() {
                values[b * 32 + pixel * 2 + c] = 40.0;
            }
        }
        Tensor::from_data(TensorData::new(values, [2, 16, 2]), device)
    }

    fn keypoints<B: Backend>(device: &B::Device) -> Vec<f32> {
        spatial_softmax(peaked::<B>(device), 4, device)
            .into_data()
            .convert::<f32>()
            .to_vec()
            .unwrap()
    }

    #[test]
    fn stem_activations_are_relu_and_exact_gelu() {
        let device = Default::default();
        let x = Tensor::<NdArray, 1>::from_floats([-2.0, -0.5, 0.0, 1.0], &device);
        let values = |a: StemActivation| -> Vec<f32> {
            a.apply(x.clone())
                .into_data()
                .convert::<f32>()
                .to_vec()
                .unwrap()
        };
        assert_eq!(values(StemActivation::Relu), [0.0, 0.0, 0.0, 1.0]);
        // x * Phi(x): Phi(-2) = 0.02275, Phi(-0.5) = 0.30854, Phi(1) = 0.84134.
        let expected = [-0.045_5, -0.154_27, 0.0, 0.841_34];
        for (g, e) in values(StemActivation::Gelu).iter().zip(expected) {
            assert!((g - e).abs() < 1e-4, "{g} vs {e}");
        }
        assert_eq!(StemActivation::default(), StemActivation::Relu);
    }

    #[test]
    fn keypoints_are_the_peaks_coordinates_x_then_y_with_y_up() {
        // Pixel centres of a 4-pixel side: -0.75, -0.25, 0.25, 0.75.
        // (row 0, col 3): x 0.75, y 0.75; (row 2, col 1): x -0.25, y -0.25.
        let expected = [[0.75, -0.25, 0.75, -0.25], [-0.25, 0.75, -0.25, 0.75]].concat();
        for got in [
            keypoints::<NdArray>(&Default::default()),
            keypoints::<Flex>(&Default::default()),
        ] {
            for (g, e) in got.iter().zip(&expected) {
                assert!((g - e).abs() < 1e-4, "{got:?} vs {expected:?}");
            }
        }
    }
}
