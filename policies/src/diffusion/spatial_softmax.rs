//! Diffusion Policy's keypoints (LeRobot's `SpatialSoftmax`, after robomimic): an
//! optional 1x1 convolution to `num_kp` channels, a softmax over each channel's pixels,
//! and the expected image coordinates under it, in [-1, 1] (x along the width, y along
//! the height). The coordinate grid is LeRobot's buffer `pos_grid`, kept as a frozen
//! parameter so that a checkpoint's copy loads and nothing trains it.

use burn::module::Param;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::prelude::*;
use burn::tensor::activation::softmax;
use imago_robots::bounds::{ConfigError, in_range};

/// The feature map it reads and the keypoints it gives.
#[derive(Config, Debug)]
pub struct SpatialSoftmaxConfig {
    /// Channels of the feature map. Range: [1, 65536].
    pub channels: usize,
    /// Its height and width. Each in [1, 4096].
    pub size: [usize; 2],
    /// Keypoints (LeRobot's `spatial_softmax_num_keypoints`); `None`: one per channel.
    /// Range: [1, 65536].
    #[config(default = "None")]
    pub num_kp: Option<usize>,
}

impl SpatialSoftmaxConfig {
    /// Checks the sizes; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("channels", self.channels, 1..=65_536)?;
        in_range("size[0]", self.size[0], 1..=4096)?;
        in_range("size[1]", self.size[1], 1..=4096)?;
        match self.num_kp {
            Some(k) => in_range("num_kp", k, 1..=65_536),
            None => Ok(()),
        }
    }

    /// The module, its convolution initialised as PyTorch initialises one; invalid
    /// sizes are an error.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<SpatialSoftmax<B>, ConfigError> {
        self.validate()?;
        let [height, width] = self.size;
        // numpy's linspace, in double precision, then f32 (LeRobot builds it so).
        let linspace = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|i| match n {
                    1 => -1.0,
                    _ => (-1.0 + 2.0 * i as f64 / (n - 1) as f64) as f32,
                })
                .collect()
        };
        let (xs, ys) = (linspace(width), linspace(height));
        let grid: Vec<f32> = ys
            .iter()
            .flat_map(|&y| xs.iter().flat_map(move |&x| [x, y]))
            .collect();
        let pos_grid = Tensor::from_data(TensorData::new(grid, [height * width, 2]), device);
        Ok(SpatialSoftmax {
            nets: self
                .num_kp
                .map(|k| Conv2dConfig::new([self.channels, k], [1, 1]).init(device)),
            pos_grid: Param::from_tensor(pos_grid).set_require_grad(false),
        })
    }
}

/// Expected keypoint coordinates of a feature map.
#[derive(Module, Debug)]
pub struct SpatialSoftmax<B: Backend> {
    /// The 1x1 convolution to the keypoint channels, if any.
    pub nets: Option<Conv2d<B>>,
    /// `[height * width, 2]`: each pixel's (x, y) in [-1, 1], row by row.
    pub pos_grid: Param<Tensor<B, 2>>,
}

impl<B: Backend> SpatialSoftmax<B> {
    /// The keypoints of `features` `[batch, channels, height, width]`: `[batch,
    /// keypoints, 2]`, each (x, y).
    pub fn forward(&self, features: Tensor<B, 4>) -> Tensor<B, 3> {
        let features = match &self.nets {
            Some(conv) => conv.forward(features),
            None => features,
        };
        let [batch, keypoints, height, width] = features.dims();
        let weights = softmax(features.reshape([batch * keypoints, height * width]), 1);
        weights
            .matmul(self.pos_grid.val())
            .reshape([batch, keypoints, 2])
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
        channels: usize,
        size: [usize; 2],
        num_kp: usize,
        features: Array,
        keypoints: Array,
    }

    /// LeRobot's own `SpatialSoftmax((8, 4, 6), num_kp=5)` (seeded), its state dict
    /// (the convolution and `pos_grid`) loaded through burn-store.
    #[test]
    fn lerobots_spatial_softmax_loads_and_matches() {
        let fixture: Fixture = read(FIXTURES, "spatial_softmax");
        let device = Default::default();
        let config = SpatialSoftmaxConfig::new(fixture.channels, fixture.size)
            .with_num_kp(Some(fixture.num_kp));
        // The grid built here is LeRobot's before anything is loaded.
        let built = config.init::<B>(&device).unwrap().pos_grid.val();
        let mut module = config.init::<B>(&device).unwrap();
        load_torch(&mut module, (FIXTURES, "spatial_softmax.safetensors"), &[]);
        let loaded: Vec<f32> = module.pos_grid.val().into_data().to_vec().unwrap();
        assert_eq!(built.into_data().to_vec::<f32>().unwrap(), loaded);
        let gap = fixture
            .keypoints
            .largest_gap(module.forward(fixture.features.tensor()));
        assert!(gap < 1e-5, "largest gap {gap}");
    }

    #[test]
    fn bad_sizes_are_errors() {
        let error = SpatialSoftmaxConfig::new(8, [0, 6])
            .init::<B>(&Default::default())
            .unwrap_err();
        assert_eq!(error.key, "size[0]");
    }
}
