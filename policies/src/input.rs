//! Building a policy's input tensors from robot observations.

use burn::prelude::*;
use burn::tensor::DType;
use imago_robots::Observation;
use thiserror::Error;

use crate::input_spec::{CameraInput, InputSpec};
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

/// The instruction's tensors.
#[derive(Debug, Clone)]
pub struct InstructionInput<B: Backend> {
    /// Word ids, `[batch, words]`.
    pub words: Tensor<B, 2, Int>,
    /// Weight of each word in the instruction's mean, `[batch, words]` (`1 / words`
    /// for words, 0 for padding).
    pub weights: Tensor<B, 2>,
    /// Which words are padding, `[batch, words]` (`true` = padding).
    pub padding: Tensor<B, 2, Bool>,
}

/// The tensors a policy or world model consumes, as its [`InputSpec`] describes them.
#[derive(Debug, Clone)]
pub struct PolicyInput<B: Backend> {
    /// Frames as pixel rows, `[batch, side * side, 3]` (row-major pixels, RGB), values
    /// in `[0, 1]`; `None` when the spec reads no camera.
    pub images: Option<Tensor<B, 3>>,
    /// The instruction; `None` when the spec does not read it.
    pub instruction: Option<InstructionInput<B>>,
    /// The proprioception entries the spec reads (`state`), `[batch, inputs]`.
    pub proprio: Tensor<B, 2>,
    /// Where each action is measured from, in units of the action limit, `[batch, A]`:
    /// the robot's current commanded position for a spec with an `action_origin`,
    /// zeros for absolute actions. A policy's chunks are this plus what its head
    /// predicts.
    pub action_origin: Tensor<B, 2>,
    /// The spec's target entries, `[batch, targets]`: what a training step fits
    /// besides the actions; `None` when the spec names none.
    pub targets: Option<Tensor<B, 2>>,
}

impl<B: Backend> PolicyInput<B> {
    /// The same input with its float tensors in `dtype` (a policy's
    /// [`crate::Precision`]); no work for tensors already in it.
    pub fn cast(self, dtype: DType) -> Self {
        Self {
            images: self.images.map(|images| cast_to(images, dtype)),
            instruction: self.instruction.map(|i| InstructionInput {
                weights: cast_to(i.weights, dtype),
                ..i
            }),
            proprio: cast_to(self.proprio, dtype),
            action_origin: cast_to(self.action_origin, dtype),
            targets: self.targets,
        }
    }

    /// The frames, for a model whose spec reads a camera (its batches always carry
    /// them: [`PolicyBatch::push`] refuses an observation without one).
    pub fn frames(&self) -> Tensor<B, 3> {
        self.images
            .clone()
            .expect("a spec with a camera builds batches with frames")
    }

    /// The instruction, for a model whose spec reads it (its batches always carry it).
    pub fn words(&self) -> InstructionInput<B> {
        self.instruction
            .clone()
            .expect("a spec with instruction words builds batches with them")
    }
}

/// One observation of a [`PolicyBatch`], as the host forward reads it.
pub(crate) struct BatchRow<'a> {
    /// `[side * side * 3]`, in `[0, 1]`; empty without a camera.
    pub images: &'a [f32],
    /// `[words]`; empty without an instruction.
    pub words: &'a [i64],
    /// `[words]`.
    pub word_weights: &'a [f32],
    /// `[words]`, `true` = padding.
    pub word_pad: &'a [bool],
    /// `[inputs]`.
    pub proprio: &'a [f32],
    /// `[A]`.
    pub action_origin: &'a [f32],
    /// `[targets]`; empty without targets.
    pub targets: &'a [f32],
}

impl BatchRow<'_> {
    /// The padding of the VLA's token sequence (readout, proprioception, the words,
    /// `patches` patches; `true` = padding): only words pad.
    pub fn token_padding(&self, patches: usize) -> Vec<bool> {
        let mut pad = Vec::with_capacity(2 + self.word_pad.len() + patches);
        pad.extend([false, false]);
        pad.extend_from_slice(self.word_pad);
        pad.extend(std::iter::repeat_n(false, patches));
        pad
    }
}

/// Host-side buffers of a batch of observations, filled one observation at a time
/// and turned into tensors in one transfer.
#[derive(Debug, Clone)]
pub struct PolicyBatch {
    spec: InputSpec,
    tokenizer: Option<WordTokenizer>,
    images: Vec<f32>,
    words: Vec<i64>,
    word_weights: Vec<f32>,
    word_pad: Vec<bool>,
    proprio: Vec<f32>,
    action_origin: Vec<f32>,
    targets: Vec<f32>,
    len: usize,
}

impl PolicyBatch {
    /// An empty batch for a model reading `spec`.
    pub fn new(spec: &InputSpec) -> Self {
        Self {
            spec: spec.clone(),
            tokenizer: spec.instruction_words.map(WordTokenizer::new),
            images: Vec::new(),
            words: Vec::new(),
            word_weights: Vec::new(),
            word_pad: Vec::new(),
            proprio: Vec::new(),
            action_origin: Vec::new(),
            targets: Vec::new(),
            len: 0,
        }
    }

    /// What the batch reads from each observation.
    pub fn spec(&self) -> &InputSpec {
        &self.spec
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
        self.word_pad.clear();
        self.proprio.clear();
        self.action_origin.clear();
        self.targets.clear();
        self.len = 0;
    }

    /// Appends one observation; on error the batch is unchanged.
    pub fn push(&mut self, observation: &Observation) -> Result<(), PolicyInputError> {
        let frame = match self.spec.camera() {
            Some(camera) if camera.blank => Some((camera, None)),
            Some(camera) => Some((camera, Some(checked_frame(observation, camera)?))),
            None => None,
        };
        if observation.proprio.len() != self.spec.proprio_dim {
            return Err(PolicyInputError::ProprioDim {
                got: observation.proprio.len(),
                want: self.spec.proprio_dim,
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
        let words = match &self.tokenizer {
            Some(tokenizer) => Some(tokenizer.encode_padded(&observation.instruction)?),
            None => None,
        };

        match frame {
            Some((camera, None)) => {
                let values = camera.side * camera.side * 3;
                self.images.extend(std::iter::repeat_n(1.0f32, values));
            }
            Some((camera, Some(rgb))) if camera.pool <= 1 => {
                self.images.extend(rgb.iter().map(|&v| v as f32 / 255.0));
            }
            Some((camera, Some(rgb))) => {
                let side = camera.recorded_side();
                self.images.extend(pooled_pixels(rgb, side, camera.pool));
            }
            None => {}
        }
        if let Some((ids, word_pad)) = words {
            self.words.extend(ids.iter().map(|&id| id as i64));
            let count = word_pad.iter().filter(|&&p| !p).count() as f32;
            self.word_weights
                .extend(word_pad.iter().map(|&p| if p { 0.0 } else { 1.0 / count }));
            self.word_pad.extend(word_pad);
        }
        self.proprio
            .extend(self.spec.state.iter().map(|&i| observation.proprio[i]));
        self.targets
            .extend(self.spec.targets.iter().map(|&i| observation.proprio[i]));
        match &self.spec.action_origin {
            Some(origin) => self.action_origin.extend(
                origin
                    .iter()
                    .zip(&self.spec.action_limit)
                    .map(|(&i, &limit)| observation.proprio[i] / limit),
            ),
            None => self
                .action_origin
                .extend(std::iter::repeat_n(0.0, self.spec.action_dim())),
        }
        self.len += 1;
        Ok(())
    }

    /// Pixels per frame read (`side * side * 3`), 0 without a camera.
    fn frame_values(&self) -> usize {
        self.spec.camera().map_or(0, |c| c.side * c.side * 3)
    }

    /// Instruction words read, 0 without an instruction.
    fn word_count(&self) -> usize {
        self.spec.instruction_words.unwrap_or(0)
    }

    /// Observation `i` (pushed earlier) as host slices.
    pub(crate) fn row(&self, i: usize) -> BatchRow<'_> {
        let slice = |len: usize| i * len..(i + 1) * len;
        let words = self.word_count();
        BatchRow {
            images: &self.images[slice(self.frame_values())],
            words: &self.words[slice(words)],
            word_weights: &self.word_weights[slice(words)],
            word_pad: &self.word_pad[slice(words)],
            proprio: &self.proprio[slice(self.spec.state.len())],
            action_origin: &self.action_origin[slice(self.spec.action_dim())],
            targets: &self.targets[slice(self.spec.targets.len())],
        }
    }

    /// The batch as tensors on `device` (frames at the side the spec reads).
    pub fn to_input<B: Backend>(&self, device: &B::Device) -> PolicyInput<B> {
        let n = self.len;
        let words = self.word_count();
        PolicyInput {
            images: self.spec.camera().map(|camera| {
                Tensor::from_data(
                    TensorData::new(self.images.clone(), [n, camera.side * camera.side, 3]),
                    device,
                )
            }),
            instruction: self.spec.instruction_words.map(|_| InstructionInput {
                words: Tensor::from_data(TensorData::new(self.words.clone(), [n, words]), device),
                weights: Tensor::from_data(
                    TensorData::new(self.word_weights.clone(), [n, words]),
                    device,
                ),
                padding: Tensor::from_data(
                    TensorData::new(self.word_pad.clone(), [n, words]),
                    device,
                ),
            }),
            proprio: Tensor::from_data(
                TensorData::new(self.proprio.clone(), [n, self.spec.state.len()]),
                device,
            ),
            action_origin: Tensor::from_data(
                TensorData::new(self.action_origin.clone(), [n, self.spec.action_dim()]),
                device,
            ),
            targets: (!self.spec.targets.is_empty()).then(|| {
                Tensor::from_data(
                    TensorData::new(self.targets.clone(), [n, self.spec.targets.len()]),
                    device,
                )
            }),
        }
    }
}

/// `observation`'s frame, checked against what `camera` reads.
fn checked_frame<'a>(
    observation: &'a Observation,
    camera: &CameraInput,
) -> Result<&'a [u8], PolicyInputError> {
    let size = camera.recorded_side();
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
    Ok(&image.rgb)
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

        let config = crate::VlaPolicyConfig::new(1, vec![0], vec![1.0; 2])
            .with_image_size(8)
            .with_frame_pool(2);
        let mut batch = PolicyBatch::new(&config.input_spec());
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

    #[test]
    fn a_batch_carries_its_specs_targets_in_their_order() {
        let config = crate::VlaPolicyConfig::new(3, vec![0], vec![1.0; 2])
            .with_image_size(8)
            .with_keypoint_targets(vec![2, 1]);
        let mut batch = PolicyBatch::new(&config.input_spec());
        for k in 0..2 {
            let k = k as f32;
            batch
                .push(&Observation {
                    image: Some(Image::filled(8, 8, [255, 0, 0])),
                    proprio: vec![k, 10.0 + k, 20.0 + k],
                    instruction: "reach the red target".into(),
                })
                .unwrap();
        }
        assert_eq!(batch.row(1).targets, &[21.0, 11.0]);
        assert_eq!(batch.row(1).proprio, &[1.0]);
        let input = batch.to_input::<burn::backend::Flex>(&Default::default());
        let targets = input.targets.expect("a spec with targets");
        assert_eq!(targets.dims(), [2, 2]);
        assert_eq!(
            targets.into_data().to_vec::<f32>().unwrap(),
            vec![20.0, 10.0, 21.0, 11.0]
        );
        // Without targets a batch carries none.
        let spec = crate::VlaPolicyConfig::new(3, vec![0], vec![1.0; 2])
            .with_image_size(8)
            .input_spec();
        let mut plain = PolicyBatch::new(&spec);
        plain
            .push(&Observation {
                image: Some(Image::filled(8, 8, [255, 0, 0])),
                proprio: vec![0.0; 3],
                instruction: "reach the red target".into(),
            })
            .unwrap();
        assert!(plain.row(0).targets.is_empty());
        let input = plain.to_input::<burn::backend::Flex>(&Default::default());
        assert!(input.targets.is_none());
    }

    #[test]
    fn a_blank_camera_reads_white_whatever_the_frame() {
        let config = crate::VlaPolicyConfig::new(1, vec![0], vec![1.0; 2])
            .with_image_size(8)
            .with_frame_pool(2)
            .with_reads_camera(false);
        let mut batch = PolicyBatch::new(&config.input_spec());
        let observation = |image: Option<Image>| Observation {
            image,
            proprio: vec![0.5],
            instruction: "reach the red target".into(),
        };
        // A frame of any size, or none: the policy is given the same white frame.
        batch
            .push(&observation(Some(Image::filled(16, 16, [255, 0, 0]))))
            .unwrap();
        batch
            .push(&observation(Some(Image::filled(5, 5, [0, 0, 0]))))
            .unwrap();
        batch.push(&observation(None)).unwrap();
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.images.len(), 3 * 8 * 8 * 3);
        assert!(batch.images.iter().all(|&v| v == 1.0));
    }
}
