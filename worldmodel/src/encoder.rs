//! The observation encoder: camera frame, instruction and proprioception to a latent.

use burn::module::Param;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::prelude::*;
use imago_policies::{ComputePath, PolicyInput, StemActivation, StemReading, linear_rows};

use crate::config::WorldModelConfig;
use crate::mlp::{Mlp, MlpConfig};

/// Maps an observation to a latent state. The same architecture serves as the online
/// encoder (trained by gradient) and as the EMA target encoder.
///
/// A per-pixel stem classifies colours into channels, FiLM-modulated by the
/// instruction so that the instructed target stands out; a spatial softmax per channel
/// turns each channel into a keypoint (where that colour is); an MLP mixes keypoints,
/// the instruction embedding and proprioception into the latent (after the
/// proprioception itself, where the config keeps the state in the latent). Only every
/// `image_stride`-th pixel of every `image_stride`-th row is read: the scene's
/// targets span several pixels, and the stem's cost is per pixel. The instruction is
/// part of the state because reward and value depend on which target is asked for.
#[derive(Module, Debug)]
pub struct ObservationEncoder<B: Backend> {
    stem: Linear<B>,
    word_embed: Embedding<B>,
    film: Linear<B>,
    /// Inverse temperature of each channel's spatial softmax.
    sharpness: Param<Tensor<B, 1>>,
    mix: Mlp<B>,
    /// Proprioception entries the latent starts with as they are (0: none).
    pub(crate) passthrough: usize,
    image_size: usize,
    image_stride: usize,
    #[module(skip)]
    compute_path: ComputePath,
}

impl WorldModelConfig {
    /// A freshly initialised encoder.
    pub fn init_encoder<B: Backend>(&self, device: &B::Device) -> ObservationEncoder<B> {
        let c = self.stem_channels;
        ObservationEncoder {
            stem: LinearConfig::new(3, c).init(device),
            word_embed: EmbeddingConfig::new(self.vocab_size, self.word_dim).init(device),
            film: LinearConfig::new(self.word_dim, 2 * c).init(device),
            sharpness: Param::from_tensor(Tensor::full([c], 10.0, device)),
            mix: MlpConfig::new(
                2 * c + self.word_dim + self.proprio_dim,
                self.hidden,
                self.learned_latent_dim(),
            )
            .init(device),
            passthrough: self.state_entries(),
            image_size: self.image_size,
            image_stride: self.image_stride,
            compute_path: ComputePath::Auto,
        }
    }
}

impl<B: Backend> ObservationEncoder<B> {
    /// Latents `[batch, latent_dim]` of a batch of observations (the policy-input
    /// spec of [`crate::WorldModelConfig::input_spec`]; the words' padding is not read:
    /// padded words weigh 0).
    pub fn forward(&self, input: &PolicyInput<B>) -> Tensor<B, 2> {
        let (images, said) = (input.frames(), input.words());
        let device = images.device();
        let instruction =
            (self.word_embed.forward(said.words) * said.weights.unsqueeze_dim::<3>(2)).sum_dim(1);
        let size = self.image_size.div_ceil(self.image_stride);
        let kept: Vec<i64> = (0..self.image_size)
            .step_by(self.image_stride)
            .flat_map(|row| {
                (0..self.image_size)
                    .step_by(self.image_stride)
                    .map(move |col| (row * self.image_size + col) as i64)
            })
            .collect();
        let kept = Tensor::<B, 1, Int>::from_data(TensorData::new(kept, [size * size]), &device);
        let pixels = images.select(1, kept);
        // FiLM's shift (the second half of `film`) cannot move a softmax over pixels:
        // only its gain reaches the keypoints.
        let channels = self.stem.weight.dims()[1];
        let gain = linear_rows(&self.film, instruction.clone()).narrow(2, 0, channels) + 1.0;
        let keypoints = StemReading {
            pixels,
            stem: &self.stem,
            mixing: &[],
            activation: StemActivation::Gelu,
            scale: gain * self.sharpness.val().reshape([1, 1, channels]),
            size,
            path: self.compute_path,
        }
        .keypoints();
        let [batch, _, word_dim] = instruction.dims();
        let joined = Tensor::cat(
            vec![
                keypoints,
                instruction.reshape([batch, word_dim]),
                input.proprio.clone(),
            ],
            1,
        );
        let learned = self.mix.forward(joined);
        if self.passthrough == 0 {
            return learned;
        }
        Tensor::cat(
            vec![
                input.proprio.clone().narrow(1, 0, self.passthrough),
                learned,
            ],
            1,
        )
    }
}
