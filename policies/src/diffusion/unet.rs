//! Diffusion Policy's denoiser as LeRobot writes it (`DiffusionConditionalUnet1d`): a
//! 1D convolutional U-Net over the action chunk's time axis whose residual blocks are
//! FiLM-conditioned on the diffusion step's embedding and the observation features.
//! Parameter names follow LeRobot's where burn allows; [`LEROBOT_KEYS`] maps the rest
//! (PyTorch's `Sequential` and `ModuleList` indices) for burn-store's key remapping.
//! LeRobot's decoder stages all upsample (its `is_last` test never holds there), so
//! the number of upsamplings equals the number of downsamplings; kept as is.

use crate::lora::{LoraAdapter, LoraConfig, PairLora, adapted_forward, adapter_of, merge_into};
use crate::temporal_conv::conv1d_as_matmul;
use burn::nn::conv::{Conv1d, Conv1dConfig, ConvTranspose1d, ConvTranspose1dConfig};
use burn::nn::{GroupNorm, GroupNormConfig, Linear, LinearConfig, PaddingConfig1d};
use burn::prelude::*;
use burn::tensor::activation::mish;
use imago_robots::bounds::{ConfigError, in_range, length_in_range};

/// How LeRobot's parameter names differ from these modules': `(pattern, replacement)`
/// for burn-store's key remapping, applied in order.
pub const LEROBOT_KEYS: [(&str, &str); 10] = [
    (r"\.block\.0\.", ".conv."),
    (r"\.block\.1\.", ".norm."),
    (r"cond_encoder\.1\.", "cond_encoder."),
    (
        r"^diffusion_step_encoder\.1\.",
        "diffusion_step_encoder.linear1.",
    ),
    (
        r"^diffusion_step_encoder\.3\.",
        "diffusion_step_encoder.linear2.",
    ),
    (
        r"^(down|up)_modules\.(\d+)\.0\.",
        "${1}_modules.${2}.resnet.",
    ),
    (
        r"^(down|up)_modules\.(\d+)\.1\.",
        "${1}_modules.${2}.resnet2.",
    ),
    (
        r"^(down|up)_modules\.(\d+)\.2\.",
        "${1}_modules.${2}.resample.",
    ),
    (r"^final_conv\.0\.", "final_block."),
    (r"^final_conv\.1\.", "final_conv."),
];

/// The U-Net's sizes (LeRobot's `down_dims`, `kernel_size`, `n_groups`,
/// `diffusion_step_embed_dim`, `use_film_scale_modulation`; the action width and the
/// observation features' width).
#[derive(Config, Debug)]
pub struct DiffusionUnetConfig {
    /// Width of one action. Range: [1, 1024].
    pub action_dim: usize,
    /// Width of the observation features it is conditioned on. Range: [0, 1000000].
    pub global_cond_dim: usize,
    /// Channels of each stage, 1 to 8 stages. Each in [1, 65536], a multiple of
    /// `n_groups`.
    #[config(default = "vec![512, 1024, 2048]")]
    pub down_dims: Vec<usize>,
    /// Convolution kernel (odd). Range: [1, 63].
    #[config(default = 5)]
    pub kernel_size: usize,
    /// Groups of the group norms. Range: [1, 1024].
    #[config(default = 8)]
    pub n_groups: usize,
    /// Width of the diffusion step's embedding (even). Range: [4, 65536].
    #[config(default = 128)]
    pub diffusion_step_embed_dim: usize,
    /// FiLM scales as well as shifts.
    #[config(default = true)]
    pub use_film_scale_modulation: bool,
}

impl DiffusionUnetConfig {
    /// Checks the sizes; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("action_dim", self.action_dim, 1..=1024)?;
        in_range("global_cond_dim", self.global_cond_dim, 0..=1_000_000)?;
        length_in_range("down_dims", &self.down_dims, 1..=8)?;
        in_range("n_groups", self.n_groups, 1..=1024)?;
        for (i, &dim) in self.down_dims.iter().enumerate() {
            let key = format!("down_dims[{i}]");
            in_range(&key, dim, 1..=65_536)?;
            if !dim.is_multiple_of(self.n_groups) {
                return Err(ConfigError::new(key, dim, "must be a multiple of n_groups"));
            }
        }
        in_range("kernel_size", self.kernel_size, 1..=63)?;
        if self.kernel_size.is_multiple_of(2) {
            return Err(ConfigError::new(
                "kernel_size",
                self.kernel_size,
                "must be odd",
            ));
        }
        in_range(
            "diffusion_step_embed_dim",
            self.diffusion_step_embed_dim,
            4..=65_536,
        )?;
        if !self.diffusion_step_embed_dim.is_multiple_of(2) {
            return Err(ConfigError::new(
                "diffusion_step_embed_dim",
                self.diffusion_step_embed_dim,
                "must be even",
            ));
        }
        Ok(())
    }

    /// The U-Net, initialised as PyTorch initialises its parts; invalid sizes are an
    /// error.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<DiffusionUnet<B>, ConfigError> {
        self.validate()?;
        let step = self.diffusion_step_embed_dim;
        let cond = step + self.global_cond_dim;
        let block =
            |input: usize, output: usize| ResidualBlock::new(self, (input, output), cond, device);
        let dims: Vec<(usize, usize)> = std::iter::once((self.action_dim, self.down_dims[0]))
            .chain(self.down_dims.windows(2).map(|w| (w[0], w[1])))
            .collect();
        let down_modules = dims
            .iter()
            .enumerate()
            .map(|(i, &(input, output))| DownStage {
                resnet: block(input, output),
                resnet2: block(output, output),
                resample: (i + 1 < dims.len()).then(|| {
                    Conv1dConfig::new(output, output, 3)
                        .with_stride(2)
                        .with_padding(PaddingConfig1d::Explicit(1, 1))
                        .init(device)
                }),
            })
            .collect();
        let last = *self
            .down_dims
            .last()
            .expect("validated: at least one stage");
        let up_modules = dims[1..]
            .iter()
            .rev()
            .map(|&(output, input)| UpStage {
                resnet: block(input * 2, output),
                resnet2: block(output, output),
                resample: ConvTranspose1dConfig::new([output, output], 4)
                    .with_stride(2)
                    .with_padding(1)
                    .init(device),
            })
            .collect();
        Ok(DiffusionUnet {
            diffusion_step_encoder: StepEncoder {
                linear1: LinearConfig::new(step, step * 4).init(device),
                linear2: LinearConfig::new(step * 4, step).init(device),
                lora: None,
                dim: step,
            },
            down_modules,
            mid_modules: vec![block(last, last), block(last, last)],
            up_modules,
            final_block: Conv1dBlock::new(self, (self.down_dims[0], self.down_dims[0]), device),
            final_conv: Conv1dConfig::new(self.down_dims[0], self.action_dim, 1).init(device),
        })
    }
}

/// `Conv1d -> GroupNorm -> Mish` (LeRobot's `DiffusionConv1dBlock`).
#[derive(Module, Debug)]
pub struct Conv1dBlock<B: Backend> {
    /// The convolution, padded to keep the length.
    pub conv: Conv1d<B>,
    /// Its group norm.
    pub norm: GroupNorm<B>,
}

impl<B: Backend> Conv1dBlock<B> {
    fn new(
        config: &DiffusionUnetConfig,
        (input, output): (usize, usize),
        device: &B::Device,
    ) -> Self {
        let pad = config.kernel_size / 2;
        Self {
            conv: Conv1dConfig::new(input, output, config.kernel_size)
                .with_padding(PaddingConfig1d::Explicit(pad, pad))
                .init(device),
            norm: GroupNormConfig::new(config.n_groups, output).init(device),
        }
    }

    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        mish(self.norm.forward(conv1d_as_matmul(&self.conv, x)))
    }
}

/// A FiLM-conditioned residual block (LeRobot's `DiffusionConditionalResidualBlock1d`).
#[derive(Module, Debug)]
pub struct ResidualBlock<B: Backend> {
    /// First convolution block.
    pub conv1: Conv1dBlock<B>,
    /// `Mish -> Linear` to the FiLM shift (and scale) per channel.
    pub cond_encoder: Linear<B>,
    /// Second convolution block.
    pub conv2: Conv1dBlock<B>,
    /// 1x1 convolution of the shortcut where the width changes.
    pub residual_conv: Option<Conv1d<B>>,
    /// A LoRA adapter of `cond_encoder`, while fine-tuning with one.
    pub cond_lora: Option<LoraAdapter<B>>,
    out_channels: usize,
    scale: bool,
}

impl<B: Backend> ResidualBlock<B> {
    fn new(
        config: &DiffusionUnetConfig,
        (input, output): (usize, usize),
        cond: usize,
        device: &B::Device,
    ) -> Self {
        let film = if config.use_film_scale_modulation {
            2 * output
        } else {
            output
        };
        Self {
            conv1: Conv1dBlock::new(config, (input, output), device),
            cond_encoder: LinearConfig::new(cond, film).init(device),
            conv2: Conv1dBlock::new(config, (output, output), device),
            residual_conv: (input != output)
                .then(|| Conv1dConfig::new(input, output, 1).init(device)),
            cond_lora: None,
            out_channels: output,
            scale: config.use_film_scale_modulation,
        }
    }

    fn forward(&self, x: Tensor<B, 3>, cond: Tensor<B, 2>) -> Tensor<B, 3> {
        let out = self.conv1.forward(x.clone());
        let film = adapted_forward(&self.cond_encoder, self.cond_lora.as_ref(), mish(cond))
            .unsqueeze_dim::<3>(2);
        let out = if self.scale {
            let c = self.out_channels;
            film.clone().narrow(1, 0, c) * out + film.narrow(1, c, c)
        } else {
            out + film
        };
        let out = self.conv2.forward(out);
        let shortcut = match &self.residual_conv {
            Some(conv) => conv.forward(x),
            None => x,
        };
        out + shortcut
    }

    fn with_lora(self, config: &LoraConfig, device: &B::Device) -> Self {
        Self {
            cond_lora: Some(adapter_of(&self.cond_encoder, config, device)),
            ..self
        }
    }

    fn merged(self) -> Self {
        Self {
            cond_encoder: merge_into(self.cond_encoder, self.cond_lora),
            cond_lora: None,
            ..self
        }
    }
}

/// An encoder stage: two residual blocks, then a stride-2 convolution but in the last.
#[derive(Module, Debug)]
pub struct DownStage<B: Backend> {
    /// First block.
    pub resnet: ResidualBlock<B>,
    /// Second block.
    pub resnet2: ResidualBlock<B>,
    /// The downsampling, but in the last stage.
    pub resample: Option<Conv1d<B>>,
}

/// A decoder stage: two residual blocks on the input and the encoder's skip features,
/// then a stride-2 transposed convolution.
#[derive(Module, Debug)]
pub struct UpStage<B: Backend> {
    /// First block.
    pub resnet: ResidualBlock<B>,
    /// Second block.
    pub resnet2: ResidualBlock<B>,
    /// The upsampling.
    pub resample: ConvTranspose1d<B>,
}

/// The diffusion step's embedding: sinusoidal (LeRobot's `DiffusionSinusoidalPosEmb`),
/// then `Linear -> Mish -> Linear`.
#[derive(Module, Debug)]
pub struct StepEncoder<B: Backend> {
    /// First layer.
    pub linear1: Linear<B>,
    /// Second layer.
    pub linear2: Linear<B>,
    /// LoRA adapters of both layers, while fine-tuning with them.
    pub lora: Option<PairLora<B>>,
    dim: usize,
}

impl<B: Backend> StepEncoder<B> {
    fn forward(&self, timesteps: &[usize], device: &B::Device) -> Tensor<B, 2> {
        // As LeRobot computes it: the rate in double precision, then everything in f32.
        let half = self.dim / 2;
        let rate = (10_000f64.ln() / (half as f64 - 1.0)) as f32;
        let frequencies: Vec<f32> = (0..half).map(|i| (i as f32 * -rate).exp()).collect();
        let mut table = Vec::with_capacity(timesteps.len() * self.dim);
        for &t in timesteps {
            let angles = frequencies.iter().map(|f| t as f32 * f);
            table.extend(angles.clone().map(f32::sin));
            table.extend(angles.map(f32::cos));
        }
        let embedded =
            Tensor::from_data(TensorData::new(table, [timesteps.len(), self.dim]), device);
        let lora = self.lora.as_ref();
        let hidden = adapted_forward(&self.linear1, lora.map(|l| &l.first), embedded);
        adapted_forward(&self.linear2, lora.map(|l| &l.second), mish(hidden))
    }
}

/// LeRobot's `DiffusionConditionalUnet1d`.
#[derive(Module, Debug)]
pub struct DiffusionUnet<B: Backend> {
    /// The diffusion step's embedding.
    pub diffusion_step_encoder: StepEncoder<B>,
    /// Encoder stages.
    pub down_modules: Vec<DownStage<B>>,
    /// Two blocks at the bottom.
    pub mid_modules: Vec<ResidualBlock<B>>,
    /// Decoder stages.
    pub up_modules: Vec<UpStage<B>>,
    /// The last convolution block.
    pub final_block: Conv1dBlock<B>,
    /// 1x1 convolution to the action width.
    pub final_conv: Conv1d<B>,
}

impl<B: Backend> DiffusionUnet<B> {
    /// The model's output for the noisy chunks `x` `[batch, horizon, action_dim]` at
    /// diffusion steps `timesteps` (one per chunk), conditioned on `global_cond`
    /// `[batch, global_cond_dim]`: `[batch, horizon, action_dim]`.
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        timesteps: &[usize],
        global_cond: Option<Tensor<B, 2>>,
    ) -> Tensor<B, 3> {
        let device = x.device();
        let step = self.diffusion_step_encoder.forward(timesteps, &device);
        let cond = match global_cond {
            Some(global) => Tensor::cat(vec![step, global], 1),
            None => step,
        };
        let mut x = x.swap_dims(1, 2);
        let mut skips = Vec::with_capacity(self.down_modules.len());
        for stage in &self.down_modules {
            x = stage.resnet.forward(x, cond.clone());
            x = stage.resnet2.forward(x, cond.clone());
            skips.push(x.clone());
            if let Some(down) = &stage.resample {
                x = down.forward(x);
            }
        }
        for block in &self.mid_modules {
            x = block.forward(x, cond.clone());
        }
        for stage in &self.up_modules {
            let skip = skips.pop().expect("one skip per encoder stage");
            x = Tensor::cat(vec![x, skip], 1);
            x = stage.resnet.forward(x, cond.clone());
            x = stage.resnet2.forward(x, cond.clone());
            x = stage.resample.forward(x);
        }
        self.final_conv
            .forward(self.final_block.forward(x))
            .swap_dims(1, 2)
    }
}

impl<B: Backend> DiffusionUnet<B> {
    /// LoRA fine-tuning: every weight frozen, and fresh adapters on the U-Net's linear
    /// layers (the diffusion step's embedding and every block's FiLM conditioning),
    /// which alone learn; the convolutions stay as they are.
    pub fn with_lora(self, config: &LoraConfig, device: &B::Device) -> Self {
        let frozen = self.no_grad();
        let block = |b: ResidualBlock<B>| b.with_lora(config, device);
        let step = frozen.diffusion_step_encoder;
        Self {
            diffusion_step_encoder: StepEncoder {
                lora: Some(PairLora::new(
                    (&step.linear1, &step.linear2),
                    config,
                    device,
                )),
                ..step
            },
            down_modules: frozen
                .down_modules
                .into_iter()
                .map(|s| DownStage {
                    resnet: block(s.resnet),
                    resnet2: block(s.resnet2),
                    ..s
                })
                .collect(),
            mid_modules: frozen.mid_modules.into_iter().map(block).collect(),
            up_modules: frozen
                .up_modules
                .into_iter()
                .map(|s| UpStage {
                    resnet: block(s.resnet),
                    resnet2: block(s.resnet2),
                    ..s
                })
                .collect(),
            ..frozen
        }
    }

    /// The adapters folded into the weights they adapt (which stay frozen).
    pub fn merged(self) -> Self {
        let step = self.diffusion_step_encoder;
        let (linear1, linear2) = PairLora::merge((step.linear1, step.linear2), step.lora);
        Self {
            diffusion_step_encoder: StepEncoder {
                linear1,
                linear2,
                lora: None,
                ..step
            },
            down_modules: self
                .down_modules
                .into_iter()
                .map(|s| DownStage {
                    resnet: s.resnet.merged(),
                    resnet2: s.resnet2.merged(),
                    ..s
                })
                .collect(),
            mid_modules: self
                .mid_modules
                .into_iter()
                .map(ResidualBlock::merged)
                .collect(),
            up_modules: self
                .up_modules
                .into_iter()
                .map(|s| UpStage {
                    resnet: s.resnet.merged(),
                    resnet2: s.resnet2.merged(),
                    ..s
                })
                .collect(),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::lerobot_fixtures::{Array, FIXTURES, lerobot_unet, read};

    type B = Flex;

    #[derive(serde::Deserialize)]
    struct Fixture {
        unet: DiffusionUnetConfig,
        x: Array,
        timesteps: Vec<usize>,
        global_cond: Array,
        output: Array,
    }

    /// LeRobot's own `DiffusionConditionalUnet1d` (lerobot 0.4.4; seeded, non-trivial
    /// group norms), loaded through burn-store with [`LEROBOT_KEYS`].
    #[test]
    fn lerobots_unet_loads_and_matches() {
        let f: Fixture = read(FIXTURES, "diffusion_unet");
        let unet = lerobot_unet(&f.unet, "diffusion_unet.safetensors");
        let out = unet.forward(f.x.tensor(), &f.timesteps, Some(f.global_cond.tensor()));
        let gap = f.output.largest_gap(out);
        println!("largest gap {gap:e}");
        assert!(gap < 1e-4, "largest gap {gap}");
    }

    #[test]
    fn sizes_that_do_not_fit_are_errors() {
        let device = Default::default();
        let config = |dims: Vec<usize>| DiffusionUnetConfig::new(2, 10).with_down_dims(dims);
        assert_eq!(
            config(vec![12, 32]).init::<B>(&device).unwrap_err().key,
            "down_dims[0]"
        );
        assert_eq!(config(vec![]).validate().unwrap_err().key, "down_dims");
        let even = config(vec![16]).with_kernel_size(4).validate();
        assert_eq!(even.unwrap_err().key, "kernel_size");
    }
}
