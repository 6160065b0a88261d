//! Building a policy's input tensors from robot observations.

use burn::prelude::*;
use burn::tensor::DType;
use imago_robots::Observation;
use thiserror::Error;

use crate::model::VlaPolicyConfig;
use crate::precision::cast_to;
use crate::tokenizer::{TokenizerError, WordTokenizer};

/// Why an observation cannot be fed to a policy.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PolicyInputError {
    /// The observation carries no camera frame.
    #[error("the observation has no camera image, but the policy needs one")]
    MissingImage,
    /// The frame's size differs from the policy's.
    #[error("camera image is {got_w}x{got_h}, the policy expects {want}x{want}")]
    ImageSize {
        /// Frame width.
        got_w: u32,
        /// Frame height.
        got_h: u32,
        /// The policy's image side.
        want: usize,
    },
    /// The frame's pixel bytes do not match its stated size.
    #[error("camera image of {width}x{height} holds {bytes} bytes, not {width}x{height}x3")]
    ImageBytes {
        /// Stated width.
        width: u32,
        /// Stated height.
        height: u32,
        /// Bytes it holds.
        bytes: usize,
    },
    /// The proprioception length differs from the policy's.
    #[error("proprioception has {got} values, the policy expects {want}")]
    ProprioDim {
        /// Observed length.
        got: usize,
        /// The policy's length.
        want: usize,
    },
    /// A proprioception value is NaN or infinite.
    #[error("proprioception value {index} is {value}, not a finite number")]
    NonFinite {
        /// Index of the value.
        index: usize,
        /// The value.
        value: f32,
    },
    /// The instruction cannot be tokenized.
    #[error(transparent)]
    Instruction(#[from] TokenizerError),
}

/// The tensors a [`crate::VlaPolicy`] consumes.
#[derive(Debug, Clone)]
pub struct PolicyInput<B: Backend> {
    /// Frames as pixel rows, `[batch, size * size, 3]` (row-major pixels, RGB), values
    /// in `[0, 1]`.
    pub images: Tensor<B, 3>,
    /// Instruction word ids, `[batch, max_words]`.
    pub words: Tensor<B, 2, Int>,
    /// Weight of each instruction word in the instruction's mean, `[batch, max_words]`
    /// (`1 / words` for words, 0 for padding).
    pub word_weights: Tensor<B, 2>,
    /// Padding mask of the whole token sequence, `[batch, tokens]` (`true` = padding).
    pub pad_mask: Tensor<B, 2, Bool>,
    /// The proprioception entries the policy reads (`proprio_inputs`),
    /// `[batch, inputs]`.
    pub proprio: Tensor<B, 2>,
    /// Where each action is measured from, in units of the action limit, `[batch, A]`:
    /// the robot's current commanded position for a policy with an `action_origin`,
    /// zeros for absolute actions. The policy's chunks are this plus what its head
    /// predicts.
    pub action_origin: Tensor<B, 2>,
}

impl<B: Backend> PolicyInput<B> {
    /// The same input with its float tensors in `dtype` (a policy's
    /// [`crate::Precision`]); no work for tensors already in it.
    pub fn cast(self, dtype: DType) -> Self {
        Self {
            images: cast_to(self.images, dtype),
            words: self.words,
            word_weights: cast_to(self.word_weights, dtype),
            pad_mask: self.pad_mask,
            proprio: cast_to(self.proprio, dtype),
            action_origin: cast_to(self.action_origin, dtype),
        }
    }
}

/// One observation of a [`PolicyBatch`], as the host forward reads it.
pub(crate) struct BatchRow<'a> {
    /// `[size * size * 3]`, in `[0, 1]`.
    pub images: &'a [f32],
    /// `[max_words]`.
    pub words: &'a [i64],
    /// `[max_words]`.
    pub word_weights: &'a [f32],
    /// `[tokens]`, `true` = padding.
    pub pad: &'a [bool],
    /// `[inputs]`.
    pub proprio: &'a [f32],
    /// `[A]`.
    pub action_origin: &'a [f32],
}

/// Host-side buffers of a batch of observations, filled one observation at a time
/// and turned into tensors in one transfer.
#[derive(Debug, Clone)]
pub struct PolicyBatch {
    config: VlaPolicyConfig,
    tokenizer: WordTokenizer,
    images: Vec<f32>,
    words: Vec<i64>,
    word_weights: Vec<f32>,
    pad: Vec<bool>,
    proprio: Vec<f32>,
    action_origin: Vec<f32>,
    len: usize,
}

impl PolicyBatch {
    /// An empty batch for a policy with `config`.
    pub fn new(config: &VlaPolicyConfig) -> Self {
        Self {
            config: config.clone(),
            tokenizer: WordTokenizer::new(config.max_words),
            images: Vec::new(),
            words: Vec::new(),
            word_weights: Vec::new(),
            pad: Vec::new(),
            proprio: Vec::new(),
            action_origin: Vec::new(),
            len: 0,
        }
    }

    /// Number of observations pushed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no observation was pushed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empties the batch, keeping its allocations.
    pub fn clear(&mut self) {
        self.images.clear();
        self.words.clear();
        self.word_weights.clear();
        self.pad.clear();
        self.proprio.clear();
        self.action_origin.clear();
        self.len = 0;
    }

    /// Appends one observation; on error the batch is unchanged.
    pub fn push(&mut self, observation: &Observation) -> Result<(), PolicyInputError> {
        let pool = self.config.frame_pool.max(1);
        let size = self.config.image_size * pool;
        let image = observation
            .image
            .as_ref()
            .ok_or(PolicyInputError::MissingImage)?;
        if image.width as usize != size || image.height as usize != size {
            return Err(PolicyInputError::ImageSize {
                got_w: image.width,
                got_h: image.height,
                want: size,
            });
        }
        if image.rgb.len() != size * size * 3 {
            return Err(PolicyInputError::ImageBytes {
                width: image.width,
                height: image.height,
                bytes: image.rgb.len(),
            });
        }
        if observation.proprio.len() != self.config.proprio_dim {
            return Err(PolicyInputError::ProprioDim {
                got: observation.proprio.len(),
                want: self.config.proprio_dim,
            });
        }
        if let Some((index, &value)) = observation
            .proprio
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite())
        {
            return Err(PolicyInputError::NonFinite { index, value });
        }
        let (ids, word_pad) = self.tokenizer.encode_padded(&observation.instruction)?;

        if pool == 1 {
            self.images
                .extend(image.rgb.iter().map(|&v| v as f32 / 255.0));
        } else {
            self.images.extend(pooled_pixels(&image.rgb, size, pool));
        }
        self.words.extend(ids.iter().map(|&id| id as i64));
        let count = word_pad.iter().filter(|&&p| !p).count() as f32;
        self.word_weights
            .extend(word_pad.iter().map(|&p| if p { 0.0 } else { 1.0 / count }));
        self.pad.extend([false, false]);
        self.pad.extend(word_pad);
        self.pad
            .extend(std::iter::repeat_n(false, self.config.patch_count()));
        self.proprio.extend(
            self.config
                .proprio_inputs
                .iter()
                .map(|&i| observation.proprio[i]),
        );
        match &self.config.action_origin {
            Some(origin) => self.action_origin.extend(
                origin
                    .iter()
                    .zip(&self.config.action_limit)
                    .map(|(&i, &limit)| observation.proprio[i] / limit),
            ),
            None => self
                .action_origin
                .extend(std::iter::repeat_n(0.0, self.config.action_dim())),
        }
        self.len += 1;
        Ok(())
    }

    /// Observation `i` (pushed earlier) as host slices.
    pub(crate) fn row(&self, i: usize) -> BatchRow<'_> {
        let c = &self.config;
        let slice = |len: usize| i * len..(i + 1) * len;
        BatchRow {
            images: &self.images[slice(c.image_size * c.image_size * 3)],
            words: &self.words[slice(c.max_words)],
            word_weights: &self.word_weights[slice(c.max_words)],
            pad: &self.pad[slice(c.token_count())],
            proprio: &self.proprio[slice(c.proprio_inputs.len())],
            action_origin: &self.action_origin[slice(c.action_dim())],
        }
    }

    /// The batch as tensors on `device` (images at the policy's `image_size`).
    pub fn to_input<B: Backend>(&self, device: &B::Device) -> PolicyInput<B> {
        let (n, size) = (self.len, self.config.image_size);
        PolicyInput {
            images: Tensor::from_data(
                TensorData::new(self.images.clone(), [n, size * size, 3]),
                device,
            ),
            words: Tensor::from_data(
                TensorData::new(self.words.clone(), [n, self.config.max_words]),
                device,
            ),
            word_weights: Tensor::from_data(
                TensorData::new(self.word_weights.clone(), [n, self.config.max_words]),
                device,
            ),
            pad_mask: Tensor::from_data(
                TensorData::new(self.pad.clone(), [n, self.config.token_count()]),
                device,
            ),
            proprio: Tensor::from_data(
                TensorData::new(self.proprio.clone(), [n, self.config.proprio_inputs.len()]),
                device,
            ),
            action_origin: Tensor::from_data(
                TensorData::new(self.action_origin.clone(), [n, self.config.action_dim()]),
                device,
            ),
        }
    }
}

/// The `side x side` RGB frame averaged over `pool x pool` squares, scaled to [0, 1],
/// row-major: `(side / pool)^2` pixels of 3 values.
fn pooled_pixels(rgb: &[u8], side: usize, pool: usize) -> Vec<f32> {
    let out = side / pool;
    let scale = 1.0 / (255.0 * (pool * pool) as f32);
    let mut pixels = vec![0.0f32; out * out * 3];
    for row in 0..side {
        for col in 0..side {
            let at = ((row / pool) * out + col / pool) * 3;
            let from = (row * side + col) * 3;
            for c in 0..3 {
                pixels[at + c] += rgb[from + c] as f32;
            }
        }
    }
    pixels.iter_mut().for_each(|p| *p *= scale);
    pixels
}

#[cfg(test)]
mod tests {
    use super::*;
    use imago_robots::Image;

    #[test]
    fn large_frames_are_read_averaged_down() {
        // A 4x4 frame, left half black and right half white, pooled by 2.
        let mut image = Image::filled(4, 4, [0, 0, 0]);
        for row in 0..4 {
            for col in 2..4 {
                let i = (row * 4 + col) * 3;
                image.rgb[i..i + 3].copy_from_slice(&[255, 255, 255]);
            }
        }
        image.rgb[0] = 204; // One red value in the top-left square: its mean is 0.2.
        let pixels = pooled_pixels(&image.rgb, 4, 2);
        assert_eq!(pixels.len(), 2 * 2 * 3);
        assert!((pixels[0] - 0.2).abs() < 1e-6 && pixels[1] == 0.0);
        assert_eq!(&pixels[3..6], &[1.0, 1.0, 1.0]);

        let config = VlaPolicyConfig::new(1, vec![0], vec![1.0; 2])
            .with_image_size(8)
            .with_frame_pool(2);
        let mut batch = PolicyBatch::new(&config);
        let observation = |side: u32| Observation {
            image: Some(Image::filled(side, side, [255, 0, 0])),
            proprio: vec![0.5],
            instruction: "reach the red target".into(),
        };
        batch
            .push(&observation(16))
            .expect("a 16x16 frame read as 8x8");
        assert!(matches!(
            batch.push(&observation(8)),
            Err(PolicyInputError::ImageSize { want: 16, .. })
        ));
        assert_eq!(batch.len(), 1);
    }
}
