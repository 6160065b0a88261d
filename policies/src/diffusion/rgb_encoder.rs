//! Diffusion Policy's image encoder as LeRobot writes it (`DiffusionRgbEncoder`): the
//! image cropped (at the centre at inference; in training with `crop_is_random`, at
//! one random offset per batch as LeRobot's `RandomCrop` does: [`ImageCrop`]), a
//! ResNet-18 up to its last stage, spatial-softmax keypoints, and `ReLU(Linear)` of
//! their coordinates. LeRobot's optional resize before the crop is not supported yet
//! (a configuration with `resize_shape` is refused where configurations are read).

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use imago_robots::bounds::{ConfigError, in_range};

use super::spatial_softmax::{SpatialSoftmax, SpatialSoftmaxConfig};
use crate::resnet::{ResNet18, ResNet18Config, ResNetNorm};

/// How LeRobot's parameter names differ from this module's (its backbone is
/// torchvision's ResNet children in a `Sequential`): `(pattern, replacement)` for
/// burn-store's key remapping, applied in order before the ResNet's own
/// (`resnet::TORCHVISION_KEYS`).
pub const LEROBOT_RGB_KEYS: [(&str, &str); 6] = [
    (r"^backbone\.0\.", "backbone.conv1."),
    (r"^backbone\.1\.", "backbone.bn1."),
    (r"^backbone\.4\.", "backbone.layer1."),
    (r"^backbone\.5\.", "backbone.layer2."),
    (r"^backbone\.6\.", "backbone.layer3."),
    (r"^backbone\.7\.", "backbone.layer4."),
];

/// The encoder's image and network sizes (LeRobot's image feature shape,
/// `crop_shape`, `use_group_norm`, `spatial_softmax_num_keypoints`).
#[derive(Config, Debug)]
pub struct DiffusionRgbEncoderConfig {
    /// Height and width of the camera images. Each in [1, 4096].
    pub image_size: [usize; 2],
    /// Height and width of the crop; `None`: the whole image. Each at most the image's.
    #[config(default = "None")]
    pub crop_shape: Option<[usize; 2]>,
    /// The backbone's stage widths (torchvision's by default).
    #[config(default = "[64, 128, 256, 512]")]
    pub widths: [usize; 4],
    /// Group norm in the backbone (LeRobot's `use_group_norm`) or frozen batch norm.
    #[config(default = "ResNetNorm::Group")]
    pub norm: ResNetNorm,
    /// Keypoints of the spatial softmax. Range: [1, 65536].
    #[config(default = 32)]
    pub num_keypoints: usize,
}

impl DiffusionRgbEncoderConfig {
    /// The size the backbone sees.
    fn input_size(&self) -> [usize; 2] {
        self.crop_shape.unwrap_or(self.image_size)
    }

    /// Checks the sizes; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (i, side) in self.image_size.iter().enumerate() {
            in_range(&format!("image_size[{i}]"), *side, 1..=4096)?;
        }
        if let Some(crop) = self.crop_shape {
            for (i, (&side, &image)) in crop.iter().zip(&self.image_size).enumerate() {
                in_range(&format!("crop_shape[{i}]"), side, 1..=image)?;
            }
        }
        in_range("num_keypoints", self.num_keypoints, 1..=65_536)
    }

    /// The encoder, initialised as PyTorch initialises its parts; invalid sizes are
    /// an error.
    pub fn init<B: Backend>(
        &self,
        device: &B::Device,
    ) -> Result<DiffusionRgbEncoder<B>, ConfigError> {
        self.validate()?;
        let backbone = ResNet18Config::new()
            .with_widths(self.widths)
            .with_norm(self.norm)
            .init(device)?;
        // The feature map's size: torchvision's stride-2 stem, pooling and stages.
        let shrink = |side: usize| (0..5).fold(side, |s, _| s.div_ceil(2));
        let [height, width] = self.input_size();
        let pool = SpatialSoftmaxConfig::new(self.widths[3], [shrink(height), shrink(width)])
            .with_num_kp(Some(self.num_keypoints))
            .init(device)?;
        let features = 2 * self.num_keypoints;
        Ok(DiffusionRgbEncoder {
            backbone,
            pool,
            out: LinearConfig::new(features, features).init(device),
            crop: self.crop_shape,
        })
    }
}

/// LeRobot's `DiffusionRgbEncoder`, at inference.
/// Where an encoder crops its images (when its config crops at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImageCrop {
    /// torchvision's `CenterCrop`: inference, and training without `crop_is_random`.
    #[default]
    Centre,
    /// At `[top, left]` for every image of the batch: a training batch's random crop
    /// (torchvision's `RandomCrop` on a batch draws one offset for all of it). Offsets
    /// past the image are clamped to its edge.
    At([usize; 2]),
}

#[derive(Module, Debug)]
pub struct DiffusionRgbEncoder<B: Backend> {
    /// The ResNet-18.
    pub backbone: ResNet18<B>,
    /// Its keypoints.
    pub pool: SpatialSoftmax<B>,
    /// The keypoints' projection.
    pub out: Linear<B>,
    #[module(skip)]
    crop: Option<[usize; 2]>,
}

impl<B: Backend> DiffusionRgbEncoder<B> {
    /// The features `[batch, 2 keypoints]` of `images` `[batch, 3, height, width]`
    /// (pixels in [0, 1], as LeRobot's normaliser leaves them).
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.forward_cropped(images, ImageCrop::Centre)
    }

    /// [`Self::forward`] with the images cropped where `crop` says.
    pub fn forward_cropped(&self, images: Tensor<B, 4>, crop: ImageCrop) -> Tensor<B, 2> {
        let images = match (self.crop, crop) {
            (Some(size), ImageCrop::Centre) => center_crop(images, size),
            (Some([height, width]), ImageCrop::At([top, left])) => {
                let [_, _, h, w] = images.dims();
                images
                    .narrow(2, top.min(h - height), height)
                    .narrow(3, left.min(w - width), width)
            }
            (None, _) => images,
        };
        let keypoints = self.pool.forward(self.backbone.forward(images));
        let [batch, k, _] = keypoints.dims();
        relu(self.out.forward(keypoints.reshape([batch, 2 * k])))
    }
}

/// torchvision's `CenterCrop` of a batch to `[height, width]` (no larger than the
/// images): the offsets `(side - crop) / 2` rounded half to even, as Python rounds.
fn center_crop<B: Backend>(images: Tensor<B, 4>, [height, width]: [usize; 2]) -> Tensor<B, 4> {
    let [_, _, h, w] = images.dims();
    let offset = |side: usize, crop: usize| ((side - crop) as f64 / 2.0).round_ties_even() as usize;
    images
        .narrow(2, offset(h, height), height)
        .narrow(3, offset(w, width), width)
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::lerobot_fixtures::{Array, FIXTURES, load_torch, read};
    use crate::resnet::TORCHVISION_KEYS;

    type B = Flex;

    #[derive(serde::Deserialize)]
    struct Fixture {
        image_size: [usize; 2],
        crop_shape: [usize; 2],
        widths: [usize; 4],
        num_keypoints: usize,
        images: Array,
        features: Array,
    }

    /// LeRobot's own `DiffusionRgbEncoder` (group norms, centre crop at inference, a
    /// 2x3 feature map so that the keypoints depend on the image), built around a
    /// narrow ResNet-18 of torchvision's blocks (widths 16-128) in place of
    /// torchvision's 47 MB one, seeded; loaded through burn-store.
    #[test]
    fn lerobots_rgb_encoder_loads_and_matches() {
        let f: Fixture = read(FIXTURES, "diffusion_rgb_encoder");
        let mut encoder = DiffusionRgbEncoderConfig::new(f.image_size)
            .with_crop_shape(Some(f.crop_shape))
            .with_widths(f.widths)
            .with_num_keypoints(f.num_keypoints)
            .init::<B>(&Default::default())
            .unwrap();
        let keys: Vec<(&str, &str)> = LEROBOT_RGB_KEYS
            .into_iter()
            .chain(TORCHVISION_KEYS)
            .collect();
        load_torch(
            &mut encoder,
            (FIXTURES, "diffusion_rgb_encoder.safetensors"),
            &keys,
        );
        let gap = f.features.largest_gap(encoder.forward(f.images.tensor()));
        println!("largest gap {gap:e}");
        assert!(gap < 1e-4, "largest gap {gap}");
    }

    #[test]
    fn a_crop_larger_than_the_image_is_an_error() {
        let error = DiffusionRgbEncoderConfig::new([24, 32])
            .with_crop_shape(Some([28, 32]))
            .validate()
            .unwrap_err();
        assert_eq!(error.key, "crop_shape[0]");
    }
}
