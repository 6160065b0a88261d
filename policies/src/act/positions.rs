//! ACT's fixed positional embeddings, computed as LeRobot computes them: the 1D table
//! of "Attention is all you need" (`create_sinusoidal_pos_embedding`, in double
//! precision as numpy computes it, then `f32`), and the 2D one of image features
//! (`ACTSinusoidalPositionEmbedding2d`: rows and columns counted from 1, scaled to
//! (0, 2 pi], alternating sine and cosine, the row half first; in `f32`).

use burn::prelude::*;

/// The `[positions, dimension]` table: entry `(p, j)` is `sin` (even `j`) or `cos`
/// (odd `j`) of `p / 10000^(2 floor(j / 2) / dimension)`.
pub fn sinusoidal_positions_1d<B: Backend>(
    positions: usize,
    dimension: usize,
    device: &B::Device,
) -> Tensor<B, 2> {
    let mut table = Vec::with_capacity(positions * dimension);
    for p in 0..positions {
        for j in 0..dimension {
            let angle = p as f64 / 10_000f64.powf((2 * (j / 2)) as f64 / dimension as f64);
            table.push(if j % 2 == 0 { angle.sin() } else { angle.cos() } as f32);
        }
    }
    Tensor::from_data(TensorData::new(table, [positions, dimension]), device)
}

/// The `[1, 2 dimension, height, width]` embedding of a feature map's positions, as
/// LeRobot's `ACTSinusoidalPositionEmbedding2d(dimension)` computes it (ACT builds it
/// with `dimension = dim_model / 2`): the first `dimension` channels encode the row,
/// the others the column, channel `j` being `sin` (even `j`) or `cos` (odd `j`) of
/// the position, counted from 1 and scaled to (0, 2 pi], over `10000^(2 floor(j / 2) /
/// dimension)`.
pub fn sinusoidal_positions_2d<B: Backend>(
    dimension: usize,
    (height, width): (usize, usize),
    device: &B::Device,
) -> Tensor<B, 4> {
    let frequency = |j: usize| 10_000f32.powf((2 * (j / 2)) as f32 / dimension as f32);
    let encode = |k: usize, n: usize| -> Vec<f32> {
        let scaled = k as f32 / (n as f32 + 1e-6) * std::f32::consts::TAU;
        (0..dimension)
            .map(|j| {
                let angle = scaled / frequency(j);
                if j % 2 == 0 { angle.sin() } else { angle.cos() }
            })
            .collect()
    };
    let channels = 2 * dimension;
    let mut embedding = vec![0.0f32; channels * height * width];
    for y in 0..height {
        let rows = encode(y + 1, height);
        for x in 0..width {
            let columns = encode(x + 1, width);
            for (c, value) in rows.iter().chain(&columns).enumerate() {
                embedding[(c * height + y) * width + x] = *value;
            }
        }
    }
    Tensor::from_data(
        TensorData::new(embedding, [1, channels, height, width]),
        device,
    )
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::lerobot_fixtures::{Array, FIXTURES, read};

    type B = Flex;

    #[derive(serde::Deserialize)]
    struct Fixture {
        table_1d: Array,
        embedding_2d: Array,
    }

    /// LeRobot's `create_sinusoidal_pos_embedding(10, 16)` and
    /// `ACTSinusoidalPositionEmbedding2d(8)` on a 3x5 feature map (16 channels).
    #[test]
    fn positions_match_lerobots() {
        let fixture: Fixture = read(FIXTURES, "act_positions");
        let device = Default::default();
        let table = sinusoidal_positions_1d::<B>(10, 16, &device);
        assert!(fixture.table_1d.largest_gap(table) < 1e-6);
        let embedding = sinusoidal_positions_2d::<B>(8, (3, 5), &device);
        assert!(fixture.embedding_2d.largest_gap(embedding) < 1e-5);
    }
}
