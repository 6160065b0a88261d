//! The ResNet-18 backbone LeRobot's policies read images with (torchvision's
//! `resnet18` without its pooling and classifier), with every stage reachable: ACT
//! reads the last stage's feature map, Diffusion Policy pools it into keypoints. Its
//! parameters are named as torchvision names them (`conv1`, `bn1`, `layer1.0.conv1`,
//! ...), so a LeRobot checkpoint loads tensor for tensor; only torchvision's
//! `downsample.0`/`.1` become `downsample.conv`/`.norm` ([`TORCHVISION_KEYS`]).
//!
//! The normalisation is ACT's, [`FrozenBatchNorm`]: batch norm with fixed statistics
//! and affine parameters (torchvision's `FrozenBatchNorm2d`), which burn lacks (its
//! `BatchNorm` normalises by the batch's statistics whenever autodiff is on); or
//! Diffusion Policy's group norm (LeRobot's `use_group_norm`: `channels / 16` groups).
//! The norm is an enum module: load with burn-store's `skip_enum_variants(true)`.

use burn::module::Param;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{GroupNorm, GroupNormConfig, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::activation::relu;
use imago_robots::bounds::{ConfigError, in_range};

/// How torchvision's parameter names differ from these modules': `(pattern,
/// replacement)` for burn-store's key remapping.
pub const TORCHVISION_KEYS: [(&str, &str); 2] = [
    (r"downsample\.0\.", "downsample.conv."),
    (r"downsample\.1\.", "downsample.norm."),
];

/// Batch norm with frozen statistics and affine parameters: `x * w / sqrt(var + eps)
/// + (b - mean * w / sqrt(var + eps))` per channel, as torchvision's
/// `FrozenBatchNorm2d` computes it (eps 1e-5). None of its tensors trains.
#[derive(Module, Debug)]
pub struct FrozenBatchNorm<B: Backend> {
    /// Scale.
    pub weight: Param<Tensor<B, 1>>,
    /// Shift.
    pub bias: Param<Tensor<B, 1>>,
    /// The statistics' mean.
    pub running_mean: Param<Tensor<B, 1>>,
    /// The statistics' variance.
    pub running_var: Param<Tensor<B, 1>>,
}

impl<B: Backend> FrozenBatchNorm<B> {
    /// The identity norm over `channels` (weight 1, bias 0, mean 0, variance 1), as
    /// torchvision initialises it.
    pub fn new(channels: usize, device: &B::Device) -> Self {
        let frozen = |value: f32| {
            Param::from_tensor(Tensor::full([channels], value, device)).set_require_grad(false)
        };
        Self {
            weight: frozen(1.0),
            bias: frozen(0.0),
            running_mean: frozen(0.0),
            running_var: frozen(1.0),
        }
    }

    /// Normalises `x` `[batch, channels, height, width]`.
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let channels = x.dims()[1];
        let scale = self.weight.val() * (self.running_var.val() + 1e-5).sqrt().recip();
        let shift = self.bias.val() - self.running_mean.val() * scale.clone();
        x * scale.reshape([1, channels, 1, 1]) + shift.reshape([1, channels, 1, 1])
    }
}

/// Which norm follows each convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ResNetNorm {
    /// [`FrozenBatchNorm`] (ACT).
    FrozenBatch,
    /// Group norm with `channels / 16` groups (Diffusion Policy's `use_group_norm`).
    Group,
}

/// A norm over a convolution's channels. (The frozen variant's four parameter
/// handles make it larger than the other; a ResNet holds twenty norms, so the size is
/// kept rather than boxing the variant away from burn's module derive.)
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum ChannelNorm<B: Backend> {
    /// Frozen batch norm.
    FrozenBatch(FrozenBatchNorm<B>),
    /// Group norm.
    Group(GroupNorm<B>),
}

impl<B: Backend> ChannelNorm<B> {
    fn new(kind: ResNetNorm, channels: usize, device: &B::Device) -> Self {
        match kind {
            ResNetNorm::FrozenBatch => Self::FrozenBatch(FrozenBatchNorm::new(channels, device)),
            ResNetNorm::Group => {
                Self::Group(GroupNormConfig::new(channels / 16, channels).init(device))
            }
        }
    }

    /// Normalises `x` `[batch, channels, height, width]`.
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        match self {
            Self::FrozenBatch(norm) => norm.forward(x),
            Self::Group(norm) => norm.forward(x),
        }
    }
}

/// A ResNet-18's widths and norm.
#[derive(Config, Debug)]
pub struct ResNet18Config {
    /// Channels of the four stages (torchvision's: 64, 128, 256, 512; smaller ones
    /// make small test networks of the same shape). Each in [1, 4096]; with group
    /// norm at least 16, and divisible by its `width / 16` groups.
    #[config(default = "[64, 128, 256, 512]")]
    pub widths: [usize; 4],
    /// The norm after each convolution.
    #[config(default = "ResNetNorm::FrozenBatch")]
    pub norm: ResNetNorm,
}

impl ResNet18Config {
    /// Checks the widths; the error names the stage.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (i, &width) in self.widths.iter().enumerate() {
            let key = format!("widths[{i}]");
            in_range(&key, width, 1..=4096)?;
            if self.norm == ResNetNorm::Group && (width < 16 || width % (width / 16) != 0) {
                return Err(ConfigError::new(
                    key,
                    width,
                    "must be at least 16 and divisible by width / 16 (the groups of its group norm)",
                ));
            }
        }
        Ok(())
    }

    /// The network, initialised as torchvision initialises it (Kaiming-normal
    /// convolutions, identity norms); invalid widths are an error.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<ResNet18<B>, ConfigError> {
        self.validate()?;
        let [w1, w2, w3, w4] = self.widths;
        let norm = self.norm;
        let stage = |input: usize, width: usize, stride: usize| {
            vec![
                BasicBlock::new((input, width), stride, norm, device),
                BasicBlock::new((width, width), 1, norm, device),
            ]
        };
        Ok(ResNet18 {
            conv1: conv(3, w1, 7, 2, device),
            bn1: ChannelNorm::new(norm, w1, device),
            maxpool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            layer1: stage(w1, w1, 1),
            layer2: stage(w1, w2, 2),
            layer3: stage(w2, w3, 2),
            layer4: stage(w3, w4, 2),
        })
    }
}

/// A convolution without bias, `kernel` square, padded to keep the size at stride 1.
fn conv<B: Backend>(
    input: usize,
    output: usize,
    kernel: usize,
    stride: usize,
    device: &B::Device,
) -> Conv2d<B> {
    let pad = kernel / 2;
    Conv2dConfig::new([input, output], [kernel, kernel])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
        .with_bias(false)
        .with_initializer(burn::nn::Initializer::KaimingNormal {
            gain: 2.0f64.sqrt(),
            fan_out_only: true,
        })
        .init(device)
}

/// torchvision's `BasicBlock`: two 3x3 convolutions with norms, and the input added
/// back (through a strided 1x1 convolution where the shape changes).
#[derive(Module, Debug)]
pub struct BasicBlock<B: Backend> {
    /// First convolution (carries the stride).
    pub conv1: Conv2d<B>,
    /// Its norm.
    pub bn1: ChannelNorm<B>,
    /// Second convolution.
    pub conv2: Conv2d<B>,
    /// Its norm.
    pub bn2: ChannelNorm<B>,
    /// The shortcut's projection, where the block changes the shape.
    pub downsample: Option<Downsample<B>>,
}

/// The projection of a block's shortcut (torchvision's `downsample` Sequential).
#[derive(Module, Debug)]
pub struct Downsample<B: Backend> {
    /// Strided 1x1 convolution.
    pub conv: Conv2d<B>,
    /// Its norm.
    pub norm: ChannelNorm<B>,
}

impl<B: Backend> BasicBlock<B> {
    fn new(
        (input, output): (usize, usize),
        stride: usize,
        norm: ResNetNorm,
        device: &B::Device,
    ) -> Self {
        let downsample = (stride != 1 || input != output).then(|| Downsample {
            conv: conv(input, output, 1, stride, device),
            norm: ChannelNorm::new(norm, output, device),
        });
        Self {
            conv1: conv(input, output, 3, stride, device),
            bn1: ChannelNorm::new(norm, output, device),
            conv2: conv(output, output, 3, 1, device),
            bn2: ChannelNorm::new(norm, output, device),
            downsample,
        }
    }

    /// The block on `x` `[batch, channels, height, width]`.
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let shortcut = match &self.downsample {
            Some(down) => down.norm.forward(down.conv.forward(x.clone())),
            None => x.clone(),
        };
        let y = relu(self.bn1.forward(self.conv1.forward(x)));
        let y = self.bn2.forward(self.conv2.forward(y));
        relu(y + shortcut)
    }
}

/// ResNet-18 up to its last stage.
#[derive(Module, Debug)]
pub struct ResNet18<B: Backend> {
    /// The 7x7, stride-2 stem.
    pub conv1: Conv2d<B>,
    /// Its norm.
    pub bn1: ChannelNorm<B>,
    /// 3x3, stride-2 max pooling.
    pub maxpool: MaxPool2d,
    /// Stage 1 (stride 1).
    pub layer1: Vec<BasicBlock<B>>,
    /// Stage 2 (stride 2).
    pub layer2: Vec<BasicBlock<B>>,
    /// Stage 3 (stride 2).
    pub layer3: Vec<BasicBlock<B>>,
    /// Stage 4 (stride 2).
    pub layer4: Vec<BasicBlock<B>>,
}

impl<B: Backend> ResNet18<B> {
    /// The last stage's feature map of `images` `[batch, 3, height, width]`:
    /// `[batch, widths[3], height / 32, width / 32]` (rounded up).
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 4> {
        let x = relu(self.bn1.forward(self.conv1.forward(images)));
        let x = self.maxpool.forward(x);
        [&self.layer1, &self.layer2, &self.layer3, &self.layer4]
            .into_iter()
            .flatten()
            .fold(x, |x, block| block.forward(x))
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};

    use super::*;
    use crate::lerobot_fixtures::{Array, FIXTURES, load_torch, read};

    type B = Flex;

    #[derive(serde::Deserialize)]
    struct Fixture {
        widths: [usize; 4],
        norm: ResNetNorm,
        images: Array,
        features: Array,
    }

    /// A ResNet-18 of torchvision's blocks and `FrozenBatchNorm2d` at widths 8-64
    /// (seeded weights, random statistics), recorded by
    /// `scripts/lerobot_policy_fixtures.py`, loaded through burn-store with
    /// torchvision's names.
    #[test]
    fn a_torchvision_resnet18_loads_and_matches() {
        matches_fixture_in(FIXTURES, "resnet18");
    }

    /// The same network with Diffusion Policy's group norms, made by LeRobot's own
    /// `_replace_submodules` (widths 16-128, 2.8 MB).
    #[test]
    fn a_group_norm_resnet18_as_lerobot_makes_it_matches() {
        matches_fixture_in(FIXTURES, "resnet18_group_norm");
    }

    /// The same at torchvision's own size (`resnet18`, 47 MB: not committed), where
    /// `IMAGO_LEROBOT_FULL_FIXTURES` names the script's `--full-size` directory.
    #[test]
    fn a_full_size_torchvision_resnet18_matches() {
        match std::env::var("IMAGO_LEROBOT_FULL_FIXTURES") {
            Ok(dir) => matches_fixture_in(&dir, "resnet18"),
            Err(_) => println!(
                "skipped: IMAGO_LEROBOT_FULL_FIXTURES is not set (scripts/lerobot_policy_fixtures.py --full-size DIR)"
            ),
        }
    }

    fn matches_fixture_in(dir: &str, name: &str) {
        let fixture: Fixture = read(dir, name);
        let mut network = ResNet18Config::new()
            .with_widths(fixture.widths)
            .with_norm(fixture.norm)
            .init::<B>(&Default::default())
            .unwrap();
        let weights = format!("{name}.safetensors");
        load_torch(&mut network, (dir, &weights), &TORCHVISION_KEYS);
        let gap = fixture
            .features
            .largest_gap(network.forward(fixture.images.tensor()));
        println!(
            "{dir}/{name}: widths {:?}, largest gap {gap:e}",
            fixture.widths
        );
        assert!(gap < 1e-4, "largest gap {gap}");
    }

    #[test]
    fn the_frozen_norm_takes_no_gradient_and_bad_widths_are_errors() {
        let device = Default::default();
        let norm = FrozenBatchNorm::<Autodiff<B>>::new(2, &device);
        let x = Tensor::<Autodiff<B>, 4>::ones([1, 2, 2, 2], &device).require_grad();
        let grads = norm.forward(x.clone()).sum().backward();
        assert!(norm.weight.grad(&grads).is_none());
        assert!(x.grad(&grads).is_some());
        let error = ResNet18Config::new()
            .with_widths([8, 0, 32, 64])
            .init::<B>(&device)
            .unwrap_err();
        assert_eq!(error.key, "widths[1]");
        let too_narrow = ResNet18Config::new()
            .with_widths([8, 16, 32, 64])
            .with_norm(ResNetNorm::Group)
            .validate();
        assert_eq!(too_narrow.unwrap_err().key, "widths[0]");
    }
}
