//! Vision operations shared by the policy and the world model's encoder.

use burn::prelude::*;
use burn::tensor::activation::softmax;

/// Expected image coordinates of each channel of `features` `[B, size * size, C]` under
/// a softmax over its pixels: `[B, 2C]` as `(x_1..x_C, y_1..y_C)` in `[-1, 1]`, y up.
pub fn spatial_softmax<B: Backend>(
    features: Tensor<B, 3>,
    size: usize,
    device: &B::Device,
) -> Tensor<B, 2> {
    let [batch, pixels, channels] = features.dims();
    let weights = softmax(features, 1);
    let coordinates: Vec<f32> = (0..size)
        .flat_map(|row| (0..size).map(move |col| (row, col)))
        .flat_map(|(row, col)| {
            [
                -1.0 + (2 * col + 1) as f32 / size as f32,
                1.0 - (2 * row + 1) as f32 / size as f32,
            ]
        })
        .collect();
    let grid = Tensor::<B, 2>::from_data(TensorData::new(coordinates, [pixels, 2]), device);
    // [B, C, pixels] x [pixels, 2] -> [B, C, 2]
    let expected = weights.swap_dims(1, 2).matmul(grid.unsqueeze_dim::<3>(0));
    expected.swap_dims(1, 2).reshape([batch, 2 * channels])
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
