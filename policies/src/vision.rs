//! Vision operations shared by the policy and the world model's encoder.

use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::activation::softmax;

use crate::activation::StemActivation;
use crate::readback::values;
use crate::rows::linear_rows;
use crate::stem_host::HostStem;

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
    let positions: Vec<(f32, f32)> = (0..size * size)
        .map(|pixel| pixel_position(pixel, size))
        .collect();
    let xs = positions.iter().map(|p| p.0);
    let ys = positions.iter().map(|p| p.1);
    xs.chain(ys).collect()
}

/// What the per-pixel stem reads at each pixel: its colour or the colours of its 3x3
/// neighbourhood, each with or without the pixel's position.
///
/// A stem that reads only the colour gives the same feature to every pixel of a
/// colour, so a spatial softmax over it finds where a coloured object is (its
/// centroid) but not how it is turned. One that also reads the pixel's position (as
/// CoordConv does) can rank an object's pixels along a learned direction, so that its
/// keypoints become the object's extreme points in those directions. One that reads
/// the neighbourhood (a 3x3 convolution) sees edges and corners and their
/// orientation, which a spatial softmax then locates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StemInputs {
    /// Red, green, blue.
    Colour,
    /// Red, green, blue, then the pixel's x and y in `[-1, 1]` (y up, as the
    /// keypoints).
    ColourAndPosition,
    /// The red, green and blue of the 3x3 pixels around it, row-major from the top
    /// left (the frame's edge pixels repeated beyond it).
    Neighbourhood,
    /// The neighbourhood's colours, then the pixel's x and y.
    NeighbourhoodAndPosition,
}

impl StemInputs {
    /// Every kind.
    pub const ALL: [Self; 4] = [
        Self::Colour,
        Self::ColourAndPosition,
        Self::Neighbourhood,
        Self::NeighbourhoodAndPosition,
    ];

    /// The name configs and `imago train --stem-inputs` use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Colour => "colour",
            Self::ColourAndPosition => "colour-and-position",
            Self::Neighbourhood => "neighbourhood",
            Self::NeighbourhoodAndPosition => "neighbourhood-and-position",
        }
    }

    /// Side of the square of pixels whose colours are read.
    fn window(self) -> usize {
        match self {
            Self::Colour | Self::ColourAndPosition => 1,
            Self::Neighbourhood | Self::NeighbourhoodAndPosition => 3,
        }
    }

    /// Whether the pixel's position is read.
    fn reads_position(self) -> bool {
        matches!(
            self,
            Self::ColourAndPosition | Self::NeighbourhoodAndPosition
        )
    }

    /// Inputs per pixel: the rows of the stem's weight.
    pub fn count(self) -> usize {
        3 * self.window().pow(2) + if self.reads_position() { 2 } else { 0 }
    }

    /// The inputs a stem with `rows` weight rows reads, if any.
    pub fn of_rows(rows: usize) -> Option<Self> {
        Self::ALL.into_iter().find(|inputs| inputs.count() == rows)
    }

    /// The inputs of a stem's linear layer.
    ///
    /// # Panics
    /// If its weight has a row count no [`StemInputs`] has (stems are built from a
    /// validated config).
    pub fn of_stem<B: Backend>(stem: &Linear<B>) -> Self {
        Self::of_rows(stem.weight.dims()[0]).expect("a stem reads the inputs of a StemInputs")
    }

    /// For each pixel of a `size x size` frame (row-major), the pixels whose colours
    /// it reads, in order: itself, or its neighbourhood clamped to the frame.
    fn sources(self, size: usize) -> impl Iterator<Item = usize> {
        let reach = (self.window() / 2) as isize;
        let last = size as isize - 1;
        (0..size * size).flat_map(move |pixel| {
            let (row, col) = ((pixel / size) as isize, (pixel % size) as isize);
            (-reach..=reach).flat_map(move |dr| {
                (-reach..=reach).map(move |dc| {
                    let r = (row + dr).clamp(0, last) as usize;
                    let c = (col + dc).clamp(0, last) as usize;
                    r * size + c
                })
            })
        })
    }

    /// A frame's rows of stem inputs: `frame` `[size * size, 3]` (row-major pixels, RGB)
    /// as it is, or each pixel's [`Self::count`] inputs.
    pub(crate) fn rows(self, frame: &[f32], size: usize) -> std::borrow::Cow<'_, [f32]> {
        if self == Self::Colour {
            return frame.into();
        }
        let per_pixel = self.window().pow(2);
        let mut sources = self.sources(size);
        let mut rows = Vec::with_capacity(size * size * self.count());
        for pixel in 0..size * size {
            for source in sources.by_ref().take(per_pixel) {
                rows.extend_from_slice(&frame[3 * source..3 * source + 3]);
            }
            if self.reads_position() {
                let (x, y) = pixel_position(pixel, size);
                rows.extend([x, y]);
            }
        }
        rows.into()
    }

    /// `pixels` `[B, size * size, 3]` as the stem reads them: `[B, size * size,
    /// count]`, as [`Self::rows`] builds them.
    fn tensor<B: Backend>(self, pixels: Tensor<B, 3>, size: usize) -> Tensor<B, 3> {
        if self == Self::Colour {
            return pixels;
        }
        let [batch, count, _] = pixels.dims();
        let device = pixels.device();
        let per_pixel = self.window().pow(2);
        let sources: Vec<i64> = self.sources(size).map(|s| s as i64).collect();
        let colours = pixels
            .select(
                1,
                Tensor::<B, 1, Int>::from_data(
                    TensorData::new(sources, [count * per_pixel]),
                    &device,
                ),
            )
            .reshape([batch, count, 3 * per_pixel]);
        if !self.reads_position() {
            return colours;
        }
        let positions: Vec<f32> = (0..count)
            .flat_map(|pixel| {
                let (x, y) = pixel_position(pixel, size);
                [x, y]
            })
            .collect();
        let positions = Tensor::<B, 3>::from_data(
            TensorData::new(positions, [1, count, 2]),
            (&device, colours.dtype()),
        )
        .repeat_dim(0, batch);
        Tensor::cat(vec![colours, positions], 2)
    }
}

impl std::fmt::Display for StemInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for StemInputs {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
                format!("unknown stem inputs `{s}`; use {}", names.join(", "))
            })
    }
}

/// Where pixel `pixel` (row-major) of a `size x size` frame is: its centre's x and y
/// in `[-1, 1]`, y up.
pub(crate) fn pixel_position(pixel: usize, size: usize) -> (f32, f32) {
    let (row, col) = (pixel / size, pixel % size);
    (
        -1.0 + (2 * col + 1) as f32 / size as f32,
        1.0 - (2 * row + 1) as f32 / size as f32,
    )
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

/// A per-pixel stem (a 1x1 convolution of what [`StemInputs`] its weight reads, then
/// `activation`, then any residual channel-mixing layers, `h + activation(h W + b)`)
/// applied to `pixels` `[B, size * size, 3]`, and the scale `[B, 1, C]` of each
/// frame's channels before their spatial softmax: the part of a model that reads every
/// pixel.
pub struct StemReading<'a, B: Backend> {
    /// Frames, row-major pixels, RGB.
    pub pixels: Tensor<B, 3>,
    /// The stem, `I -> C` for the `I` inputs of [`StemInputs`].
    pub stem: &'a Linear<B>,
    /// Layers after the stem's first, each `C -> C`. The host path reads a stem of
    /// one layer: with any here, the stem runs as tensor operations whatever `path`
    /// says.
    pub mixing: &'a [Linear<B>],
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
        if self.mixing.is_empty() && self.path.on_host::<B>(&device) {
            return self.read_on_host(patch);
        }
        let inputs = StemInputs::of_stem(self.stem).tensor(self.pixels, self.size);
        let first = self.activation.apply(linear_rows(self.stem, inputs));
        let stem = self.mixing.iter().fold(first, |features, layer| {
            features.clone() + self.activation.apply(linear_rows(layer, features))
        });
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
        let host_stem = HostStem {
            weight: &host_weight,
            bias: &host_bias,
            activation: self.activation,
            size: self.size,
            patch,
        };
        let shared = host_stem.shared();
        let readings = host_stem.read(&values(self.pixels), &values(scale.clone()), tracked);
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
            // [1, 1, S, C]: the weight's rows, then the bias.
            let shared_params = Tensor::cat(vec![shared_delta(weight), bias_delta], 0)
                .reshape([1, 1, shared, channels]);
            let scale_delta = (scale.clone() - scale.detach()).reshape([batch, 1, 1, channels]);
            keypoints = keypoints
                + (tensor(jacobians.keypoints_shared, [batch, 2, shared, channels])
                    * shared_params.clone())
                .sum_dim(2)
                + tensor(jacobians.keypoints_scale, [batch, 2, 1, channels]) * scale_delta;
            if patches > 0 {
                means = means
                    + (tensor(
                        jacobians.patch_means_shared,
                        [batch, patches, shared, channels],
                    ) * shared_params)
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
    /// random 8x8 batch read by a stem of `inputs`, through `path`: `(keypoints,
    /// means, d weight, d bias, d scale)`.
    fn readings_and_gradients(
        path: ComputePath,
        activation: StemActivation,
        inputs: StemInputs,
    ) -> [Vec<f32>; 5] {
        let _serial = crate::AUTODIFF_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        type A = Autodiff<NdArray>;
        let device = Default::default();
        <A as Backend>::seed(&device, 7);
        let (batch, size, channels) = (3, 8, 4);
        let stem = LinearConfig::new(inputs.count(), channels).init::<A>(&device);
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
            mixing: &[],
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
        for inputs in StemInputs::ALL {
            let host = readings_and_gradients(ComputePath::Host, StemActivation::Relu, inputs);
            let tensors =
                readings_and_gradients(ComputePath::Tensors, StemActivation::Relu, inputs);
            for ((name, h), t) in names.iter().zip(&host).zip(&tensors) {
                assert_close(&format!("{inputs:?}: {name}"), h, t, 1e-5);
            }
            // A weight row per input: the position's rows are read too.
            assert_eq!(host[2].len(), inputs.count() * 4, "{inputs:?}");
            // The gradients are not all zero: the comparison means something.
            assert!(host[2].iter().any(|g| g.abs() > 1e-3), "{:?}", host[2]);
            assert!(host[4].iter().any(|g| g.abs() > 1e-3), "{:?}", host[4]);
        }
    }

    /// The x keypoint of a one-channel stem over a 16x16 white frame holding a grey
    /// bar (rows 4-5, columns 3-11), through `path`. The stem is 5 on grey and
    /// negative on white, less 10 times the colour sum; with `inputs` reading the
    /// position it also adds 4 x.
    fn bar_keypoint_x(inputs: StemInputs, path: ComputePath) -> f32 {
        let device = Default::default();
        let size = 16;
        let frame: Vec<f32> = (0..size * size)
            .flat_map(|pixel| {
                let (row, col) = (pixel / size, pixel % size);
                let grey = (4..6).contains(&row) && (3..12).contains(&col);
                [if grey { 0.5 } else { 1.0 }; 3]
            })
            .collect();
        let mut weight = vec![-10.0, -10.0, -10.0];
        if inputs == StemInputs::ColourAndPosition {
            weight.extend([4.0, 0.0]);
        }
        let rows = weight.len();
        let stem = Linear::<NdArray> {
            weight: burn::module::Param::from_tensor(Tensor::from_data(
                TensorData::new(weight, [rows, 1]),
                &device,
            )),
            bias: Some(burn::module::Param::from_tensor(Tensor::from_data(
                TensorData::new(vec![20.0f32], [1]),
                &device,
            ))),
        };
        let keypoints = StemReading {
            pixels: Tensor::from_data(TensorData::new(frame, [1, size * size, 3]), &device),
            stem: &stem,
            mixing: &[],
            activation: StemActivation::Relu,
            scale: Tensor::full([1, 1, 1], 20.0, &device),
            size,
            path,
        }
        .keypoints();
        keypoints.into_data().to_vec::<f32>().unwrap()[0]
    }

    #[test]
    fn a_stem_that_reads_the_position_finds_an_objects_extreme_point() {
        // Column centres: x = -1 + (2 col + 1) / 16. The bar's centroid is column 7
        // (-0.0625), its rightmost column 11 (0.4375).
        for path in [ComputePath::Host, ComputePath::Tensors] {
            let colour = bar_keypoint_x(StemInputs::Colour, path);
            assert!(
                (colour + 0.0625).abs() < 1e-3,
                "{path:?}: colour only: {colour}"
            );
            let position = bar_keypoint_x(StemInputs::ColourAndPosition, path);
            assert!(
                (position - 0.4375).abs() < 2e-3,
                "{path:?}: with position: {position}"
            );
        }
    }

    #[test]
    fn stem_inputs_append_each_pixels_position() {
        let frame = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2];
        assert_eq!(StemInputs::Colour.rows(&frame, 2).as_ref(), &frame);
        let rows = StemInputs::ColourAndPosition.rows(&frame, 2);
        // Pixels (row, col) (0,0), (0,1), (1,0), (1,1): x -0.5, 0.5; y 0.5 (top), -0.5.
        let expected = [
            0.1, 0.2, 0.3, -0.5, 0.5, 0.4, 0.5, 0.6, 0.5, 0.5, 0.7, 0.8, 0.9, -0.5, -0.5, 1.0, 1.1,
            1.2, 0.5, -0.5,
        ];
        assert_eq!(rows.as_ref(), &expected);
        assert_eq!(StemInputs::of_rows(5), Some(StemInputs::ColourAndPosition));
        assert_eq!(StemInputs::of_rows(4), None);
    }

    #[test]
    fn a_neighbourhood_stem_reads_the_3x3_pixels_around_each_clamped_to_the_frame() {
        // A 3x3 frame whose pixel p has colour (p, 10 p, 100 p).
        let frame: Vec<f32> = (0..9)
            .flat_map(|p| [p as f32, 10.0 * p as f32, 100.0 * p as f32])
            .collect();
        let rows = StemInputs::NeighbourhoodAndPosition.rows(&frame, 3);
        assert_eq!(rows.len(), 9 * 29);
        let reds =
            |pixel: usize| -> Vec<f32> { (0..9).map(|n| rows[pixel * 29 + 3 * n]).collect() };
        // The centre reads the whole frame; the top-left corner repeats its edges.
        assert_eq!(reds(4), [0., 1., 2., 3., 4., 5., 6., 7., 8.]);
        assert_eq!(reds(0), [0., 0., 1., 0., 0., 1., 3., 3., 4.]);
        // Each neighbour's three colours, then the position (centre pixel: 0, 0).
        assert_eq!(&rows[4 * 29 + 3..4 * 29 + 6], &[1.0, 10.0, 100.0]);
        assert_eq!(&rows[4 * 29 + 27..4 * 29 + 29], &[0.0, 0.0]);
        assert_eq!(
            StemInputs::Neighbourhood.rows(&frame, 3).as_ref(),
            rows.chunks_exact(29)
                .flat_map(|r| r[..27].iter().copied())
                .collect::<Vec<_>>()
        );
        assert_eq!(
            "neighbourhood".parse::<StemInputs>(),
            Ok(StemInputs::Neighbourhood)
        );
        assert!(
            "neighborhood"
                .parse::<StemInputs>()
                .unwrap_err()
                .contains("colour-and-position")
        );
    }

    #[test]
    fn host_stem_gelu_has_the_exact_derivative() {
        // Values agree to float rounding. burn's GELU backward is the derivative of
        // GELU's tanh approximation, which differs from the exact derivative the host
        // path uses by up to about 1e-3 of the gradient.
        let host = readings_and_gradients(
            ComputePath::Host,
            StemActivation::Gelu,
            StemInputs::NeighbourhoodAndPosition,
        );
        let tensors = readings_and_gradients(
            ComputePath::Tensors,
            StemActivation::Gelu,
            StemInputs::NeighbourhoodAndPosition,
        );
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
