//! The VLA policy: tokens from image patches, instruction words and proprioception,
//! a transformer encoder, and an action-chunk head (Gaussian or flow matching).

use burn::module::Param;
use burn::nn::Initializer;
use burn::nn::transformer::{TransformerEncoder, TransformerEncoderConfig};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::DType;

use imago_robots::RobotSpec;
use imago_robots::bounds::{ConfigError, in_range, length_in_range};

use crate::activation::StemActivation;
use crate::attention::{padding_bias, self_attention, token_padding};
use crate::gelu::gelu;
use crate::head::{ActionHead, ActionHeadKind, GaussianChunk, HeadShape};
use crate::input::PolicyInput;
use crate::input_spec::{
    CameraInput, InputSpec, MAIN_CAMERA, action_origin_fits, entries_of_proprio,
};
use crate::precision::{Precision, cast_parameters, cast_to};
use crate::tokenizer::VOCABULARY;
use crate::vision::{ComputePath, StemInputs, StemReading};

/// Shape and size of a [`VlaPolicy`].
#[derive(Config, Debug, PartialEq)]
pub struct VlaPolicyConfig {
    /// Length of the robot's proprioception vector.
    pub proprio_dim: usize,
    /// Which proprioception entries the policy reads.
    pub proprio_inputs: Vec<usize>,
    /// Per-dimension bound of the robot's actions; the network works in units of it.
    pub action_limit: Vec<f32>,
    /// Per action dimension, the proprioception entry holding the position the action
    /// commands (the robot's `action_origin`): the network then predicts displacements
    /// from it. `None`: absolute actions.
    #[config(default = "None")]
    pub action_origin: Option<Vec<usize>>,
    /// Side of the (square) image the policy reads, pixels: the camera frame averaged
    /// down by `frame_pool`.
    #[config(default = 48)]
    pub image_size: usize,
    /// The camera frame's side is `image_size * frame_pool`; each `frame_pool` square of
    /// its pixels is averaged into one pixel before the policy reads it.
    #[config(default = 1)]
    pub frame_pool: usize,
    /// Side of one image patch (one token), pixels.
    #[config(default = 8)]
    pub patch_size: usize,
    /// Channels of the convolutional stem.
    #[config(default = 16)]
    pub stem_channels: usize,
    /// The nonlinearity after the stem.
    #[config(default = "StemActivation::Relu")]
    pub stem_activation: StemActivation,
    /// What the stem reads at each pixel: the colour, or the colour and the pixel's
    /// position, which lets the keypoints find how an object is turned
    /// ([`StemInputs`]).
    #[config(default = "StemInputs::Colour")]
    pub stem_inputs: StemInputs,
    /// Per-pixel layers of the stem: the first reads [`StemInputs`]; each further one
    /// adds to the channels a mix of them (`h + activation(h W + b)`, a residual 1x1
    /// convolution), so that a channel can respond to a combination of what the first
    /// finds (an edge of the block's colour facing one way) before its spatial softmax,
    /// while what the first layer found stays readable.
    #[config(default = 1)]
    pub stem_layers: usize,
    /// Number of instruction words (shorter instructions are padded).
    #[config(default = 6)]
    pub max_words: usize,
    /// Size of the word vocabulary.
    #[config(default = "VOCABULARY.len()")]
    pub vocab_size: usize,
    /// Number of future actions predicted at once (`K`).
    #[config(default = 4)]
    pub chunk_len: usize,
    /// Token width.
    #[config(default = 64)]
    pub d_model: usize,
    /// Attention heads.
    #[config(default = 4)]
    pub n_heads: usize,
    /// Transformer layers.
    #[config(default = 2)]
    pub n_layers: usize,
    /// Feed-forward width.
    #[config(default = 128)]
    pub d_ff: usize,
    /// Smallest log standard deviation of the Gaussian head.
    #[config(default = -4.0)]
    pub min_log_std: f64,
    /// Largest log standard deviation of the Gaussian head.
    #[config(default = 0.5)]
    pub max_log_std: f64,
    /// The action-chunk head.
    #[config(default = "ActionHeadKind::Gaussian")]
    pub head: ActionHeadKind,
    /// Hidden width of the flow head.
    #[config(default = 128)]
    pub flow_width: usize,
    /// Euler steps of the flow head's sampler.
    #[config(default = 8)]
    pub flow_steps: usize,
    /// Whether the policy reads the robot's camera. Without it the policy is given a
    /// blank (white) frame (the architecture unchanged) and learns from the
    /// instruction and the proprioception alone: where the proprioception holds the
    /// state (pusht's pose setting), a clone that does not depend on how a simulator
    /// draws its frames (docs/pusht.md, "Sampling the policy's actions").
    #[config(default = true)]
    pub reads_camera: bool,
    /// Proprioception entries the policy does not read but is trained to find in the
    /// frame: a linear readout of its keypoints predicts them, and its squared error
    /// (summed over the targets, averaged over the batch), times
    /// `keypoint_target_weight`, joins the imitation loss. What a
    /// simulator knows and the robot's policy must see (pusht's block pose, recorded
    /// in the pose setting): the keypoints learn to mark it, as Levine et al. (2016)
    /// pretrained theirs on object poses. Acting reads none of these entries. Empty:
    /// no readout.
    #[config(default = "Vec::new()")]
    pub keypoint_targets: Vec<usize>,
    /// Weight of the keypoint targets' squared error in the imitation loss, in
    /// [`KEYPOINT_TARGET_WEIGHTS`] ([`DEFAULT_KEYPOINT_TARGET_WEIGHT`] unless chosen).
    #[config(default = "DEFAULT_KEYPOINT_TARGET_WEIGHT")]
    pub keypoint_target_weight: f64,
}

/// Largest camera side, in pixels, that [`VlaPolicyConfig::for_robot`] has the policy
/// read as it is: reacher2d's 48x48 frames are. A larger frame is averaged down by a
/// whole factor (`frame_pool`) to at most [`LARGE_FRAME_READ_SIDE`].
pub const MAX_READ_SIDE: usize = 64;

/// Largest side, in pixels, at which the policy reads a frame larger than
/// [`MAX_READ_SIDE`]: pusht's 96x96 frames are read as 24x24, the side the world model
/// reads them at too. Everything the policy does with pixels (the per-pixel stem, the
/// spatial softmax, the patch tokens) scales with the pixels read: a cloning step of
/// batch 32 took 222 ms at 48x48, 119 ms at 32x32 and 66 ms at 24x24 on the 2-core
/// development machine (`imago bench --what policy`), and on PushT, whose state is in
/// the proprioception, more steps bought far more than more pixels (docs/policy.md).
/// A new policy can be asked to read another side
/// ([`VlaPolicyConfig::reading_frame_at`], `imago train --frame-side`).
pub const LARGE_FRAME_READ_SIDE: usize = 24;

/// The whole factor a `side`-pixel frame is averaged down by before the policy reads
/// it: 1 up to [`MAX_READ_SIDE`], else the smallest that brings it to at most
/// [`LARGE_FRAME_READ_SIDE`] keeping the read side a multiple of `patch` (a side of 8
/// times a prime is read at `patch` pixels).
pub fn frame_pool_for(side: usize, patch: usize) -> usize {
    let patch = patch.max(1);
    if side <= MAX_READ_SIDE {
        return 1;
    }
    (1..=side)
        .find(|&k| {
            side.is_multiple_of(k)
                && (side / k).is_multiple_of(patch)
                && side / k <= LARGE_FRAME_READ_SIDE
        })
        .unwrap_or(1)
}

impl VlaPolicyConfig {
    /// The default policy for `robot`: its image size (frames larger than
    /// [`MAX_READ_SIDE`] averaged down: [`frame_pool_for`]) and action limits, reading every
    /// proprioception entry except velocities. Velocities are left out on purpose: in
    /// behaviour cloning they reveal the previous action, and a policy that can copy
    /// its last command ("copycat" causal confusion) learns to keep moving the way it
    /// moves instead of looking where the target is, and stalls at rest.
    /// A camera the pixel stem cannot read (not square, or a side that is not a
    /// multiple of the patch size within range) is an error naming the camera.
    pub fn for_robot(robot: &RobotSpec) -> Result<Self, ConfigError> {
        let mut config = Self::new(
            robot.proprio_dim(),
            robot.non_velocity_proprio(),
            robot.action_limit.clone(),
        )
        .with_action_origin(robot.action_origin.clone());
        if let Some(side) = robot.camera_side(config.patch_size as u32, 512)? {
            let side = side as usize;
            config.frame_pool = frame_pool_for(side, config.patch_size);
            config.image_size = side / config.frame_pool;
        }
        config.validate()?;
        Ok(config)
    }

    /// Gives a stored config (a checkpoint's JSON) the keys added since checkpoints were
    /// first written, with the value that means what such a checkpoint did: `frame_pool`
    /// 1 (frames read as they are), `action_origin` null (absolute actions),
    /// `stem_activation` `gelu` (the stem's activation before ReLU), `stem_inputs`
    /// `colour`, `stem_layers` 1, `reads_camera` true and no `keypoint_targets`. Keys it
    /// has are left alone, and anything that is not a JSON object is left to fail to
    /// parse.
    pub fn fill_later_keys(stored: &mut serde_json::Value) {
        if let Some(fields) = stored.as_object_mut() {
            fields.entry("frame_pool").or_insert(1.into());
            fields.entry("stem_activation").or_insert("gelu".into());
            fields.entry("stem_inputs").or_insert("colour".into());
            fields.entry("stem_layers").or_insert(1.into());
            fields.entry("reads_camera").or_insert(true.into());
            fields
                .entry("keypoint_targets")
                .or_insert(serde_json::Value::Array(Vec::new()));
            fields.entry("keypoint_target_weight").or_insert(1.0.into());
            fields
                .entry("action_origin")
                .or_insert(serde_json::Value::Null);
        }
    }

    /// The camera frame's side, in pixels, before it is averaged down.
    fn camera_side(&self) -> usize {
        self.image_size * self.frame_pool
    }

    /// The sides, in pixels, at which this policy can read its camera: the camera's
    /// side divided by a whole factor, a multiple of the patch side, smallest first.
    pub fn frame_sides(&self) -> Vec<usize> {
        let camera = self.camera_side();
        let patch = self.patch_size.max(1);
        (1..=camera)
            .filter(|&side| camera.is_multiple_of(side) && side.is_multiple_of(patch))
            .collect()
    }

    /// The same policy reading its camera at `side` pixels: each frame averaged down
    /// by `camera side / side` ([`Self::frame_sides`] lists the sides it can). Finer
    /// frames resolve thinner parts (pusht's T is about 1.4 pixels a bar at 24x24) at
    /// a cost that grows with the pixels and patches read.
    pub fn reading_frame_at(self, side: usize) -> Result<Self, ConfigError> {
        let sides = self.frame_sides();
        let camera = self.camera_side();
        if !sides.contains(&side) {
            let listed: Vec<String> = sides.iter().map(ToString::to_string).collect();
            return Err(ConfigError::new(
                "frame_side",
                side,
                format!(
                    "must be one of {} (whole divisors of the {camera}-pixel camera side that are multiples of the {}-pixel patch)",
                    listed.join(", "),
                    self.patch_size
                ),
            ));
        }
        Ok(self.with_image_size(side).with_frame_pool(camera / side))
    }

    /// This config reading its camera at `stored`'s side, when both read a camera of
    /// the same side (else unchanged, so that the difference shows).
    pub(crate) fn keeping_frame_of(self, stored: &Self) -> Self {
        if self.camera_side() == stored.camera_side() {
            self.with_image_size(stored.image_size)
                .with_frame_pool(stored.frame_pool)
        } else {
            self
        }
    }

    /// Length of an action.
    pub fn action_dim(&self) -> usize {
        self.action_limit.len()
    }

    /// What the policy reads: the robot's camera at `image_size` (its frames averaged
    /// down by `frame_pool`), `max_words` instruction words and the `proprio_inputs`.
    pub fn input_spec(&self) -> InputSpec {
        InputSpec {
            proprio_dim: self.proprio_dim,
            state: self.proprio_inputs.clone(),
            cameras: vec![CameraInput {
                name: MAIN_CAMERA.to_string(),
                side: self.image_size,
                pool: self.frame_pool,
                blank: !self.reads_camera,
            }],
            instruction_words: Some(self.max_words),
            history: 1,
            targets: self.keypoint_targets.clone(),
            action_limit: self.action_limit.clone(),
            action_origin: self.action_origin.clone(),
        }
    }

    /// The action head's shape: it reads the `d_model`-wide readout.
    pub fn head_shape(&self) -> HeadShape {
        HeadShape {
            kind: self.head,
            summary: self.d_model,
            chunk_len: self.chunk_len,
            action_dim: self.action_dim(),
            log_std_range: (self.min_log_std, self.max_log_std),
            flow_width: self.flow_width,
        }
    }

    /// Number of image patches (tokens) per frame.
    pub fn patch_count(&self) -> usize {
        (self.image_size / self.patch_size).pow(2)
    }

    /// Length of the token sequence: readout, proprioception, words, patches.
    pub fn token_count(&self) -> usize {
        2 + self.max_words + self.patch_count()
    }

    /// Parameters the policy has (weights and biases), computed from the config alone,
    /// so that a config can be bounded before anything is allocated.
    pub fn parameter_count(&self) -> usize {
        let (d, c, ff) = (self.d_model, self.stem_channels, self.d_ff);
        let linear = |i: usize, o: usize| i * o + o;
        let layer = 4 * linear(d, d) + linear(d, ff) + linear(ff, d) + 4 * d;
        let head = self.head_shape().parameter_count();
        let keypoint_readout = match self.keypoint_targets.len() {
            0 => 0,
            targets => linear(2 * c, targets),
        };
        linear(self.stem_inputs.count(), c)
            + self.stem_layers.saturating_sub(1) * linear(c, c)
            + linear(2 * c, d)
            + c
            + linear(d, 2 * c)
            + linear(c, d)
            + linear(COORDINATE_FEATURES, d)
            + (self.vocab_size + self.max_words + 4) * d
            + linear(self.proprio_inputs.len(), d)
            + keypoint_readout
            + self.n_layers * layer
            + 2 * d
            + head
    }

    /// Checks every size against its documented range (see docs/configuration.md)
    /// and that the sizes fit together, before anything is allocated; the error names
    /// the first key that does not.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("proprio_dim", self.proprio_dim, 1..=MAX_VECTOR)?;
        length_in_range("proprio_inputs", &self.proprio_inputs, 1..=self.proprio_dim)?;
        entries_of_proprio("proprio_inputs", &self.proprio_inputs, self.proprio_dim)?;
        validate_action_limit(&self.action_limit)?;
        if let Some(origin) = &self.action_origin {
            action_origin_fits(origin, self.action_dim(), self.proprio_dim)?;
        }
        in_range("image_size", self.image_size, 8..=512)?;
        in_range("frame_pool", self.frame_pool, 1..=64)?;
        in_range("patch_size", self.patch_size, 1..=self.image_size)?;
        if !self.image_size.is_multiple_of(self.patch_size) {
            return Err(ConfigError::new(
                "patch_size",
                self.patch_size,
                format!("must divide image_size {}", self.image_size),
            ));
        }
        in_range("patch_count", self.patch_count(), 1..=MAX_PATCHES).map_err(|e| ConfigError {
            expected: format!("(image_size / patch_size)^2 {}", e.expected),
            ..e
        })?;
        in_range("stem_channels", self.stem_channels, STEM_CHANNELS)?;
        in_range("stem_layers", self.stem_layers, STEM_LAYERS)?;
        self.validate_keypoint_targets()?;
        in_range("max_words", self.max_words, 1..=64)?;
        in_range("vocab_size", self.vocab_size, VOCABULARY.len()..=100_000)?;
        in_range("chunk_len", self.chunk_len, 1..=crate::head::MAX_CHUNK_LEN)?;
        in_range("d_model", self.d_model, 1..=2048)?;
        in_range("n_heads", self.n_heads, 1..=64)?;
        if !self.d_model.is_multiple_of(self.n_heads) {
            return Err(ConfigError::new(
                "n_heads",
                self.n_heads,
                format!("must divide d_model {}", self.d_model),
            ));
        }
        in_range("n_layers", self.n_layers, 1..=64)?;
        in_range("d_ff", self.d_ff, 1..=16_384)?;
        self.head_shape().validate()?;
        in_range("flow_steps", self.flow_steps, 1..=1000)?;
        in_range("parameters", self.parameter_count(), 1..=MAX_PARAMETERS).map_err(|e| {
            ConfigError {
                expected: format!(
                    "the sizes give this many parameters; it {} (d_model, n_layers, d_ff)",
                    e.expected
                ),
                ..e
            }
        })
    }

    /// A freshly initialised policy. Call [`Self::validate`] first on untrusted configs.
    pub fn init<B: Backend>(&self, device: &B::Device) -> VlaPolicy<B> {
        let d = self.d_model;
        let (k, a) = (self.chunk_len, self.action_dim());
        let head = self.head_shape().init(device);
        // Position and type tables start small (as in GPT-2) so that they do not drown
        // the content and coordinate signals at initialisation; word embeddings keep
        // unit scale so the instruction drives the FiLM modulation from the start.
        let small = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        VlaPolicy {
            stem: LinearConfig::new(self.stem_inputs.count(), self.stem_channels).init(device),
            stem_mixing: (1..self.stem_layers)
                .map(|_| LinearConfig::new(self.stem_channels, self.stem_channels).init(device))
                .collect(),
            keypoint_embed: LinearConfig::new(2 * self.stem_channels, d).init(device),
            keypoint_sharpness: Param::from_tensor(Tensor::full(
                [self.stem_channels],
                10.0,
                device,
            )),
            film: LinearConfig::new(d, 2 * self.stem_channels).init(device),
            patch_embed: LinearConfig::new(self.stem_channels, d).init(device),
            patch_coordinates: LinearConfig::new(COORDINATE_FEATURES, d).init(device),
            word_embed: EmbeddingConfig::new(self.vocab_size, d).init(device),
            word_position: EmbeddingConfig::new(self.max_words, d)
                .with_initializer(small.clone())
                .init(device),
            proprio_embed: LinearConfig::new(self.proprio_inputs.len(), d).init(device),
            token_type: EmbeddingConfig::new(4, d)
                .with_initializer(small)
                .init(device),
            encoder: TransformerEncoderConfig::new(d, self.d_ff, self.n_heads, self.n_layers)
                .with_norm_first(true)
                .with_dropout(0.0)
                .init(device),
            readout_norm: LayerNormConfig::new(d).init(device),
            head,
            stem_activation: self.stem_activation,
            compute_path: ComputePath::Auto,
            precision: Precision::F32,
            image_size: self.image_size,
            patch_size: self.patch_size,
            chunk_len: k,
            action_dim: a,
            flow_steps: self.flow_steps,
            keypoint_readout: (!self.keypoint_targets.is_empty()).then(|| {
                LinearConfig::new(2 * self.stem_channels, self.keypoint_targets.len()).init(device)
            }),
            keypoint_target_weight: self.keypoint_target_weight as f32,
        }
    }

    /// Checks `keypoint_targets`: entries of the proprioception, each once, none read
    /// by the policy, and a camera to find them in; and their weight.
    fn validate_keypoint_targets(&self) -> Result<(), ConfigError> {
        let targets = &self.keypoint_targets;
        if targets.is_empty() {
            return Ok(());
        }
        entries_of_proprio("keypoint_targets", targets, self.proprio_dim)?;
        let refuse = |why: String| Err(ConfigError::new("keypoint_targets", targets, why));
        if let Some(read) = targets.iter().find(|t| self.proprio_inputs.contains(t)) {
            return refuse(format!(
                "names entry {read}, which the policy reads (proprio_inputs): a target must be found in the frame, not read"
            ));
        }
        if let Some(twice) = targets
            .iter()
            .enumerate()
            .find(|(i, t)| targets[..*i].contains(t))
        {
            return refuse(format!("names entry {} twice", twice.1));
        }
        if !self.reads_camera {
            return refuse("needs a policy that reads the camera".into());
        }
        if !KEYPOINT_TARGET_WEIGHTS.contains(&self.keypoint_target_weight) {
            return Err(ConfigError::new(
                "keypoint_target_weight",
                self.keypoint_target_weight,
                format!(
                    "must be in [{}, {}]",
                    KEYPOINT_TARGET_WEIGHTS.start(),
                    KEYPOINT_TARGET_WEIGHTS.end()
                ),
            ));
        }
        Ok(())
    }
}

pub use imago_robots::{MAX_VECTOR, validate_action_limit};
/// The channel counts a stem can have ([`VlaPolicyConfig::stem_channels`]).
pub const STEM_CHANNELS: std::ops::RangeInclusive<usize> = 1..=256;
/// The weights the keypoint targets can have ([`VlaPolicyConfig::keypoint_target_weight`];
/// NaN is outside).
pub const KEYPOINT_TARGET_WEIGHTS: std::ops::RangeInclusive<f64> = 0.0..=1000.0;
/// The keypoint targets' weight where none is chosen: on pusht's vision recipe 10
/// beat 1 on every one of three seeds in both imago's pusht and gym-pusht, +4.5 and
/// +8.0 points pooled (docs/policy.md, "The target weight"). Configs written before
/// the field existed have no targets and load with weight 1 (`fill_later_keys`).
pub const DEFAULT_KEYPOINT_TARGET_WEIGHT: f64 = 10.0;
/// The per-pixel layer counts a stem can have ([`VlaPolicyConfig::stem_layers`]).
pub const STEM_LAYERS: std::ops::RangeInclusive<usize> = 1..=4;
/// Largest number of image patches (tokens) per frame: attention costs the square.
pub const MAX_PATCHES: usize = 1024;
/// Largest parameter count of a policy or world model (400 MB of `f32`): bounds what a
/// config, or a damaged checkpoint's config, can make imago allocate.
pub const MAX_PARAMETERS: usize = 100_000_000;

/// The vision-language-action policy; see the crate documentation.
#[derive(Module, Debug)]
pub struct VlaPolicy<B: Backend> {
    pub(crate) stem: Linear<B>,
    /// The stem's layers after the first, each a residual `h + activation(h W + b)`,
    /// `C -> C` (`stem_layers - 1` of them).
    pub(crate) stem_mixing: Vec<Linear<B>>,
    pub(crate) keypoint_embed: Linear<B>,
    /// Inverse temperature of each channel's spatial softmax; it starts high so that a
    /// few strongly activated pixels (a target) dominate thousands of background ones.
    pub(crate) keypoint_sharpness: Param<Tensor<B, 1>>,
    pub(crate) film: Linear<B>,
    pub(crate) patch_embed: Linear<B>,
    pub(crate) patch_coordinates: Linear<B>,
    pub(crate) word_embed: Embedding<B>,
    pub(crate) word_position: Embedding<B>,
    pub(crate) proprio_embed: Linear<B>,
    pub(crate) token_type: Embedding<B>,
    pub(crate) encoder: TransformerEncoder<B>,
    pub(crate) readout_norm: LayerNorm<B>,
    pub(crate) head: ActionHead<B>,
    #[module(skip)]
    pub(crate) stem_activation: StemActivation,
    #[module(skip)]
    pub(crate) compute_path: ComputePath,
    #[module(skip)]
    pub(crate) precision: Precision,
    pub(crate) image_size: usize,
    pub(crate) patch_size: usize,
    pub(crate) chunk_len: usize,
    pub(crate) action_dim: usize,
    pub(crate) flow_steps: usize,
    /// The linear readout of the keypoints to the `keypoint_targets`, `2C -> T`;
    /// `None` without targets.
    pub(crate) keypoint_readout: Option<Linear<B>>,
    #[module(skip)]
    pub(crate) keypoint_target_weight: f32,
}

impl<B: Backend> VlaPolicy<B> {
    /// Chunk length `K` and action width `A` of the chunks this policy predicts.
    pub fn chunk_shape(&self) -> (usize, usize) {
        (self.chunk_len, self.action_dim)
    }

    /// The same policy sampling its flow head in `steps` Euler steps (at least 1): a
    /// faster, coarser sampler (certified acceleration's flow-step variants). A
    /// Gaussian head has no sampler and is unchanged.
    pub fn with_flow_steps(mut self, steps: usize) -> Self {
        self.flow_steps = steps.max(1);
        self
    }

    /// Euler steps of the flow head's sampler.
    pub fn flow_steps(&self) -> usize {
        self.flow_steps
    }

    /// The same policy computing in `precision`: its float parameters cast, its inputs
    /// cast on entry, its action chunks handed back as `f32` (certified acceleration's
    /// precision variants). Ask [`Precision::supported_on`] first: a backend without
    /// the type fails on the first operation.
    pub fn with_precision(self, precision: Precision) -> Self {
        let mut cast = cast_parameters(self, precision);
        cast.precision = precision;
        cast
    }

    /// The float precision this policy computes in.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The same policy with its per-pixel stem computed on `path` (by default, on the
    /// host for the CPU backends): the same function either way.
    pub fn with_compute_path(mut self, path: ComputePath) -> Self {
        self.compute_path = path;
        self
    }

    /// The action-chunk head.
    pub fn head(&self) -> &ActionHead<B> {
        &self.head
    }

    /// The chunk distribution of a Gaussian-head policy, its means measured from the
    /// input's action origin; `None` for a flow head.
    pub fn gaussian(&self, input: PolicyInput<B>) -> Option<GaussianChunk<B>> {
        let origin = cast_to(input.action_origin.clone(), self.precision.dtype());
        self.head.gaussian(self.summary(input), origin)
    }

    /// Action chunks `[batch, K, A]` in units of the action limit
    /// ([`ActionHead::act`]), measured from the input's action origin, as `f32`.
    pub fn act(&self, input: PolicyInput<B>, noise: Option<Tensor<B, 3>>) -> Tensor<B, 3> {
        let origin = cast_to(input.action_origin.clone(), self.precision.dtype());
        let chunk = self
            .head
            .act(self.summary(input), origin, noise, self.flow_steps);
        cast_to(chunk, DType::F32)
    }

    /// The readout summary `[batch, d]` the head reads: what the transformer made of
    /// the image, the instruction and the proprioception.
    pub fn summary(&self, input: PolicyInput<B>) -> Tensor<B, 2> {
        self.summary_and_keypoints(input).0
    }

    /// [`Self::summary`], and the loss of the keypoint targets where the policy has
    /// them and `input` carries them (a training batch): `keypoint_target_weight`
    /// times the readout's squared error, summed over targets and averaged over the
    /// batch.
    pub fn summary_and_target_loss(
        &self,
        input: PolicyInput<B>,
    ) -> (Tensor<B, 2>, Option<Tensor<B, 1>>) {
        let targets = input.targets.clone();
        let (summary, keypoints) = self.summary_and_keypoints(input);
        let loss = self
            .keypoint_readout
            .as_ref()
            .zip(targets)
            .map(|(readout, targets)| {
                let [batch, _] = targets.dims();
                let error = readout.forward(keypoints) - cast_to(targets, self.precision.dtype());
                let loss = error.powf_scalar(2.0).sum() / batch as f64;
                cast_to(loss, DType::F32) * self.keypoint_target_weight
            });
        (summary, loss)
    }

    /// The readout summary and the keypoints `[batch, 2C]` (every channel's x, then
    /// every channel's y).
    fn summary_and_keypoints(&self, input: PolicyInput<B>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let PolicyInput {
            images,
            instruction,
            proprio,
            ..
        } = input.cast(self.precision.dtype());
        let images = images.expect("a VLA's spec reads a camera");
        let said = instruction.expect("a VLA's spec reads the instruction");
        let device = images.device();
        let [batch, pixels, _] = images.dims();
        let size = self.image_size;
        let grid = size / self.patch_size;
        let [_, words] = said.words.dims();
        let word_ids = Tensor::<B, 1, Int>::arange(0..words as i64, &device).reshape([1, words]);
        let word_tokens =
            self.word_embed.forward(said.words) + self.word_position.forward(word_ids);
        let instruction = (word_tokens.clone() * said.weights.unsqueeze_dim::<3>(2)).sum_dim(1);
        let d = instruction.dims()[2];

        // A per-pixel stem (1x1 convolution) maps colours to features; its channels are
        // FiLM-modulated by the instruction (as in RT-1), so the instructed target stands
        // out before any attention. Two readings of the modulated feature map follow:
        // a spatial softmax per channel gives keypoints (expected image coordinates, as in
        // robomimic's visual encoders), and each patch's mean feature becomes a token, to
        // which the patch centre's Fourier features add where it is.
        // FiLM scales a channel by `1 + gamma` and shifts it by `beta` per frame; the
        // shift cannot move a softmax over pixels, and the patch means are linear, so
        // the modulation is applied to the readings rather than to every pixel.
        let channels = self.keypoint_sharpness.dims()[0];
        let film = self.film.forward(instruction.clone());
        let gain = film.clone().narrow(2, 0, channels) + 1.0;
        let shift = film.narrow(2, channels, channels);
        let sharpness = self.keypoint_sharpness.val().reshape([1, 1, channels]);
        debug_assert_eq!(pixels, size * size);
        let (keypoints, stem_means) = StemReading {
            pixels: images,
            stem: &self.stem,
            mixing: &self.stem_mixing,
            activation: self.stem_activation,
            scale: gain.clone() * sharpness,
            size,
            path: self.compute_path,
        }
        .keypoints_and_patch_means(self.patch_size);
        let pooled = stem_means * gain + shift;
        let patch_tokens = self.patch_embed.forward(pooled)
            + self
                .patch_coordinates
                .forward(patch_coordinate_features::<B>(
                    grid,
                    (&device, self.precision.dtype()),
                ));

        let proprio_token = self.proprio_embed.forward(proprio).unsqueeze_dim::<3>(1);
        // The readout token starts as the instruction, the proprioception and the
        // keypoints, so the head sees what was asked, where the arm is and where the
        // instructed target appears without an extra hop.
        let readout = instruction
            + proprio_token.clone()
            + self
                .keypoint_embed
                .forward(keypoints.clone())
                .unsqueeze_dim::<3>(1);

        let types: Vec<i64> = [0, 1]
            .into_iter()
            .chain(std::iter::repeat_n(2, words))
            .chain(std::iter::repeat_n(3, grid * grid))
            .collect();
        let seq = types.len();
        let type_ids = Tensor::<B, 2, Int>::from_data(TensorData::new(types, [1, seq]), &device);
        let tokens = Tensor::cat(vec![readout, proprio_token, word_tokens, patch_tokens], 1)
            + self.token_type.forward(type_ids);

        let encoded = self.encode(tokens, token_padding(said.padding, grid * grid));
        let summary = self
            .readout_norm
            .forward(encoded.narrow(1, 0, 1).reshape([batch, d]));
        (summary, keypoints)
    }

    /// The transformer encoder's forward pass, as burn's `TransformerEncoder` computes
    /// it for this policy's layers (norm first, no dropout), with the feed-forward
    /// blocks' GELU from [`gelu`] so that the CPU backends get its one-pass backward.
    fn encode(&self, tokens: Tensor<B, 3>, pad_mask: Tensor<B, 2, Bool>) -> Tensor<B, 3> {
        let Some(first) = self.encoder.layers.first() else {
            return tokens;
        };
        let bias = padding_bias(
            pad_mask,
            first.mha.n_heads,
            first.mha.min_float,
            (&tokens.device(), tokens.dtype()),
        );
        self.encoder.layers.iter().fold(tokens, |x, layer| {
            let attended = self_attention(&layer.mha, layer.norm_2.forward(x.clone()), &bias);
            let x = x + attended;
            let inner = gelu(
                layer
                    .pwff
                    .linear_inner
                    .forward(layer.norm_1.forward(x.clone())),
                self.compute_path,
            );
            x + layer.pwff.linear_outer.forward(inner)
        })
    }
}

/// Number of features describing a patch centre: `(x, y)` and their sines and cosines
/// at three frequencies.
pub(crate) const COORDINATE_FEATURES: usize = 14;

/// Fourier features of the centres of a `grid x grid` patch layout in `[-1, 1]^2`
/// (x right, y up), `[1, N, COORDINATE_FEATURES]`: explicit, smooth positions that let
/// attention turn "which patch" into "where" linearly; in the policy's float type.
fn patch_coordinate_features<B: Backend>(
    grid: usize,
    (device, dtype): (&B::Device, DType),
) -> Tensor<B, 3> {
    Tensor::from_data(
        TensorData::new(
            patch_coordinate_values(grid),
            [1, grid * grid, COORDINATE_FEATURES],
        ),
        (device, dtype),
    )
}

/// The values of [`patch_coordinate_features`], row-major `[N, COORDINATE_FEATURES]`.
pub(crate) fn patch_coordinate_values(grid: usize) -> Vec<f32> {
    (0..grid)
        .flat_map(|row| (0..grid).map(move |col| (row, col)))
        .flat_map(|(row, col)| {
            let x = -1.0 + (2 * col + 1) as f32 / grid as f32;
            let y = 1.0 - (2 * row + 1) as f32 / grid as f32;
            let mut f = vec![x, y];
            for freq in [1.0f32, 2.0, 4.0] {
                let w = freq * std::f32::consts::PI;
                f.extend([(w * x).sin(), (w * x).cos(), (w * y).sin(), (w * y).cos()]);
            }
            f
        })
        .collect()
}

#[cfg(test)]
mod tests;
