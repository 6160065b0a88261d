//! Vision operations shared by the policy and the world model's encoder.

use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::activation::softmax;

use crate::activation::StemActivation;
use crate::readback::values;
use crate::rows::linear_rows;
use crate::stem_host::{HostStem, SHARED};

/// Expected image coordinates of each channel of `features` `[B, size * size, C]` under
/// a softmax over its pixels: `[B, 2C]` as `(x_1..x_C, y_1..y_C)` in `[-1, 1]`, y up.
pub fn spatial_softmax<B: Backend>(
    features: Tensor<B, 3>,
    size: usize,
    device: &B::Device,
) -> Tensor<B, 2> {
    let [batch, pixels, channels] = features.dims();
    let dtype = features.dtype();
    let weights = softmax(features, 1);
    let grid = Tensor::<B, 3>::from_data(
        TensorData::new(pixel_coordinates(size), [1, 2, pixels]),
        (device, dtype),
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

/// Where the per-pixel stem and its readings are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputePath {
    /// On the host for burn's CPU backends (ndarray, flex), as tensor operations on
    /// every other backend.
    #[default]
    Auto,
    /// As burn tensor operations, whatever the backend.
    Tensors,
    /// On the host, whatever the backend (a GPU's frames are read back).
    Host,
}

impl ComputePath {
    /// Whether the stem runs on the host for tensors on `device`; `Auto` asks the
    /// backend's name, which burn's CPU backends report as `ndarray` or `flex` (also
    /// inside burn's `Dispatch`, as `dispatch<autodiff<ndarray>>`).
    pub fn on_host<B: Backend>(self, device: &B::Device) -> bool {
        match self {
            Self::Tensors => false,
            Self::Host => true,
            Self::Auto => {
                let name = B::name(device);
                name.contains("ndarray") || name.contains("flex")
            }
        }
    }
}

/// A per-pixel stem (a 1x1 convolution of the colours, then `activation`) applied to
/// `pixels` `[B, size * size, 3]`, and the scale `[B, 1, C]` of each frame's channels
/// before their spatial softmax: the part of a model that reads every pixel.
pub struct StemReading<'a, B: Backend> {
    /// Frames, row-major pixels, RGB.
    pub pixels: Tensor<B, 3>,
    /// The stem, `3 -> C`.
    pub stem: &'a Linear<B>,
    /// Its activation.
    pub activation: StemActivation,
    /// Per frame and channel, the factor applied to the stem's output before the
    /// spatial softmax (its sharpness, with any modulation of the channel's gain).
    /// A per-channel shift would not change a softmax over pixels, so there is none.
    pub scale: Tensor<B, 3>,
    /// Side of the square frames, pixels.
    pub size: usize,
    /// Where to compute it.
    pub path: ComputePath,
}

impl<B: Backend> StemReading<'_, B> {
    /// Each channel's keypoint `[B, 2C]` (see [`spatial_softmax`]).
    pub fn keypoints(self) -> Tensor<B, 2> {
        self.read(None).0
    }

    /// Each channel's keypoint `[B, 2C]` and each `patch x patch` patch's mean of the
    /// stem's output `[B, N, C]` (row-major patches).
    pub fn keypoints_and_patch_means(self, patch: usize) -> (Tensor<B, 2>, Tensor<B, 3>) {
        let (keypoints, means) = self.read(Some(patch));
        (
            keypoints,
            means.expect("patch means are read when a patch is given"),
        )
    }

    fn read(self, patch: Option<usize>) -> (Tensor<B, 2>, Option<Tensor<B, 3>>) {
        let device = self.pixels.device();
        if self.path.on_host::<B>(&device) {
            return self.read_on_host(patch);
        }
        let stem = self.activation.apply(linear_rows(self.stem, self.pixels));
        let keypoints = spatial_softmax(stem.clone() * self.scale, self.size, &device);
        (
            keypoints,
            patch.map(|patch| patch_means(stem, self.size, patch)),
        )
    }

    /// The host path: values from [`HostStem`]; where gradients are tracked, each
    /// output gains `J (theta - theta.detach())` for the Jacobian `J` of the
    /// parameters `theta` it depends on: zero in value, `J^T` times the output's
    /// gradient in the backward pass, the exact gradient.
    fn read_on_host(self, patch: Option<usize>) -> (Tensor<B, 2>, Option<Tensor<B, 3>>) {
        let device = self.pixels.device();
        // Computed in f32 on the host, handed back in the frames' type.
        let dtype = self.pixels.dtype();
        let [batch, _, _] = self.pixels.dims();
        let weight = self.stem.weight.val();
        let channels = weight.dims()[1];
        let bias = self.stem.bias.as_ref().map(|b| b.val());
        let scale = self.scale.reshape([batch, channels]);
        let tracked = weight.is_require_grad()
            || bias.as_ref().is_some_and(|b| b.is_require_grad())
            || scale.is_require_grad();
        let host_bias = bias
            .as_ref()
            .map_or_else(|| vec![0.0; channels], |b| values(b.clone()));
        let host_weight = values(weight.clone());
        let readings = HostStem {
            weight: &host_weight,
            bias: &host_bias,
            activation: self.activation,
            size: self.size,
            patch,
        }
        .read(&values(self.pixels), &values(scale.clone()), tracked);
        let tensor = |values: Vec<f32>, shape: [usize; 4]| {
            Tensor::<B, 4>::from_data(TensorData::new(values, shape), (&device, dtype))
        };
        let mut keypoints = tensor(readings.keypoints, [batch, 2, 1, channels]);
        let patches = patch.map(|patch| (self.size / patch).pow(2)).unwrap_or(0);
        let mut means = tensor(readings.patch_means, [batch, patches, 1, channels]);
        if let Some(jacobians) = readings.jacobians {
            let shared_delta = |t: Tensor<B, 2>| t.clone() - t.detach();
            let bias_delta = bias.map_or_else(
                || Tensor::zeros([1, channels], (&device, dtype)),
                |b| shared_delta(b.reshape([1, channels])),
            );
            // [1, 1, SHARED, C]: the weight's three rows, then the bias.
            let shared = Tensor::cat(vec![shared_delta(weight), bias_delta], 0)
                .reshape([1, 1, SHARED, channels]);
            let scale_delta = (scale.clone() - scale.detach()).reshape([batch, 1, 1, channels]);
            keypoints = keypoints
                + (tensor(jacobians.keypoints_shared, [batch, 2, SHARED, channels])
                    * shared.clone())
                .sum_dim(2)
                + tensor(jacobians.keypoints_scale, [batch, 2, 1, channels]) * scale_delta;
            if patches > 0 {
                means = means
                    + (tensor(
                        jacobians.patch_means_shared,
                        [batch, patches, SHARED, channels],
                    ) * shared)
                        .sum_dim(2);
            }
        }
        (
            keypoints.reshape([batch, 2 * channels]),
            patch.map(|_| means.reshape([batch, patches, channels])),
        )
    }
}

/// The mean feature of each patch of `features` `[B, size * size, C]` (row-major
/// pixels): `[B, N, C]`, row-major patches of `patch x patch` pixels. Two sums over
/// the pixel grid's axes, which costs a read of the features; a pooling matrix applied
/// by matmul would be copied once per batch row, forward and backward.
fn patch_means<B: Backend>(features: Tensor<B, 3>, size: usize, patch: usize) -> Tensor<B, 3> {
    let [batch, _, channels] = features.dims();
    let grid = size / patch;
    features
        .reshape([batch, grid, patch, grid, patch, channels])
        .sum_dim(4)
        .sum_dim(2)
        .reshape([batch, grid * grid, channels])
        / (patch * patch) as f32
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex, NdArray};
    use burn::nn::LinearConfig;
    use burn::tensor::Distribution;

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

    #[test]
    fn patch_means_average_each_patch_in_row_major_order() {
        let device = Default::default();
        // A 4x4 image of 2 channels in patches of 2: pixel (row, col) holds
        // `row * 4 + col` in channel 0 and its negative in channel 1.
        let values: Vec<f32> = (0..16).flat_map(|p| [p as f32, -(p as f32)]).collect();
        let features =
            Tensor::<NdArray, 3>::from_data(TensorData::new(values, [1, 16, 2]), &device);
        let means: Vec<f32> = patch_means(features, 4, 2)
            .into_data()
            .convert::<f32>()
            .to_vec()
            .unwrap();
        // Patch (0, 0) holds pixels 0, 1, 4, 5: mean 2.5; (0, 1): 2, 3, 6, 7: 4.5;
        // (1, 0): 8, 9, 12, 13: 10.5; (1, 1): 12.5.
        let expected = [2.5, -2.5, 4.5, -4.5, 10.5, -10.5, 12.5, -12.5];
        assert_eq!(means, expected);
    }

    /// Values and gradients of a scalar made of the keypoints and patch means of a
    /// random 8x8 batch, through `path`: `(keypoints, means, d weight, d bias,
    /// d scale)`.
    fn readings_and_gradients(path: ComputePath, activation: StemActivation) -> [Vec<f32>; 5] {
        let _serial = crate::AUTODIFF_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        type A = Autodiff<NdArray>;
        let device = Default::default();
        <A as Backend>::seed(&device, 7);
        let (batch, size, channels) = (3, 8, 4);
        let stem = LinearConfig::new(3, channels).init::<A>(&device);
        let pixels =
            Tensor::<A, 3>::random([batch, size * size, 3], Distribution::Default, &device);
        let scale = Tensor::<A, 3>::random(
            [batch, 1, channels],
            Distribution::Uniform(-8.0, 12.0),
            &device,
        )
        .require_grad();
        let (keypoints, means) = StemReading {
            pixels,
            stem: &stem,
            activation,
            scale: scale.clone(),
            size,
            path,
        }
        .keypoints_and_patch_means(4);
        let key_weights = Tensor::<A, 2>::random(keypoints.dims(), Distribution::Default, &device);
        let mean_weights = Tensor::<A, 3>::random(means.dims(), Distribution::Default, &device);
        let objective =
            (keypoints.clone() * key_weights).sum() + (means.clone() * mean_weights).sum();
        let gradients = objective.backward();
        let read = |t: Tensor<NdArray, 2>| t.into_data().to_vec::<f32>().unwrap();
        [
            keypoints.into_data().to_vec().unwrap(),
            means.into_data().to_vec().unwrap(),
            read(stem.weight.val().grad(&gradients).unwrap()),
            stem.bias
                .unwrap()
                .val()
                .grad(&gradients)
                .unwrap()
                .into_data()
                .to_vec()
                .unwrap(),
            scale
                .grad(&gradients)
                .unwrap()
                .into_data()
                .to_vec()
                .unwrap(),
        ]
    }

    fn assert_close(what: &str, host: &[f32], tensors: &[f32], tolerance: f32) {
        assert_eq!(host.len(), tensors.len(), "{what}");
        for (h, t) in host.iter().zip(tensors) {
            assert!(
                (h - t).abs() <= tolerance * (1.0 + t.abs()),
                "{what}: host {host:?} vs tensors {tensors:?}"
            );
        }
    }

    #[test]
    fn host_stem_matches_the_tensor_path_in_value_and_gradient() {
        let names = ["keypoints", "patch means", "d weight", "d bias", "d scale"];
        let host = readings_and_gradients(ComputePath::Host, StemActivation::Relu);
        let tensors = readings_and_gradients(ComputePath::Tensors, StemActivation::Relu);
        for ((name, h), t) in names.iter().zip(&host).zip(&tensors) {
            assert_close(name, h, t, 1e-5);
        }
        // The gradients are not all zero: the comparison means something.
        assert!(host[2].iter().any(|g| g.abs() > 1e-3), "{:?}", host[2]);
        assert!(host[4].iter().any(|g| g.abs() > 1e-3), "{:?}", host[4]);
    }

    #[test]
    fn host_stem_gelu_has_the_exact_derivative() {
        // Values agree to float rounding. burn's GELU backward is the derivative of
        // GELU's tanh approximation, which differs from the exact derivative the host
        // path uses by up to about 1e-3 of the gradient.
        let host = readings_and_gradients(ComputePath::Host, StemActivation::Gelu);
        let tensors = readings_and_gradients(ComputePath::Tensors, StemActivation::Gelu);
        assert_close("keypoints", &host[0], &tensors[0], 1e-5);
        assert_close("patch means", &host[1], &tensors[1], 1e-5);
        for (name, i) in [("d weight", 2), ("d bias", 3), ("d scale", 4)] {
            assert_close(name, &host[i], &tensors[i], 3e-3);
        }
    }

    #[test]
    fn auto_path_runs_on_the_host_for_cpu_backends_only_by_name() {
        assert!(ComputePath::Auto.on_host::<NdArray>(&Default::default()));
        assert!(ComputePath::Auto.on_host::<Autodiff<Flex>>(&Default::default()));
        assert!(!ComputePath::Tensors.on_host::<NdArray>(&Default::default()));
        assert!(ComputePath::Host.on_host::<NdArray>(&Default::default()));
    }
}
