//! Shape and size of a [`crate::WorldModel`].

use std::fmt;
use std::str::FromStr;

use burn::prelude::*;
use imago_policies::{
    CameraInput, InputSpec, MAIN_CAMERA, MAX_PARAMETERS, MAX_VECTOR, VOCABULARY,
    validate_action_limit,
};
use imago_robots::RobotSpec;
use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

/// Which transition model the ensemble members are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransitionFamily {
    /// `z' = z + MLP(z, a)`: the usual autoregressive baseline.
    ResidualMlp,
    /// SALT, `z' = A(a) z + b(a)`: state-affine, so multi-step error splits exactly
    /// into per-step injected error and its propagation.
    Salt,
    /// Action-prefix prediction: the latent after every prefix `a_1..a_h`, `h = 1..H`,
    /// in one parallel pass.
    ActionPrefix,
}

impl TransitionFamily {
    /// Every family, in the order the docs compare them.
    pub const ALL: [Self; 3] = [Self::ResidualMlp, Self::Salt, Self::ActionPrefix];

    /// The name used in configs, reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::ResidualMlp => "residual-mlp",
            Self::Salt => "salt",
            Self::ActionPrefix => "action-prefix",
        }
    }
}

impl fmt::Display for TransitionFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TransitionFamily {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown transition family `{s}`; expected residual-mlp, salt or action-prefix"
                )
            })
    }
}

/// Shape and size of a [`crate::WorldModel`].
#[derive(Config, Debug, PartialEq)]
pub struct WorldModelConfig {
    /// Length of the robot's proprioception vector (the encoder reads all of it).
    pub proprio_dim: usize,
    /// Per-dimension bound of the robot's actions; the model works in units of it.
    pub action_limit: Vec<f32>,
    /// Side of the (square) camera frame, pixels.
    #[config(default = 48)]
    pub image_size: usize,
    /// The encoder reads every `image_stride`-th pixel of every `image_stride`-th row.
    #[config(default = 2)]
    pub image_stride: usize,
    /// Number of instruction words (shorter instructions are padded).
    #[config(default = 6)]
    pub max_words: usize,
    /// Size of the word vocabulary.
    #[config(default = "VOCABULARY.len()")]
    pub vocab_size: usize,
    /// Channels of the per-pixel stem (each gives one keypoint).
    #[config(default = 16)]
    pub stem_channels: usize,
    /// Width of the instruction embedding.
    #[config(default = 16)]
    pub word_dim: usize,
    /// Width of the latent state.
    #[config(default = 32)]
    pub latent_dim: usize,
    /// Width of hidden layers.
    #[config(default = 128)]
    pub hidden: usize,
    /// The transition family of every ensemble member.
    #[config(default = "TransitionFamily::Salt")]
    pub family: TransitionFamily,
    /// Number of transition members.
    #[config(default = 5)]
    pub ensemble_size: usize,
    /// Longest action prefix the action-prefix family predicts in one pass; longer
    /// rollouts restart from its last prediction.
    #[config(default = 8)]
    pub prefix_horizon: usize,
    /// A linear head decodes the proprioception from every latent (trained by the
    /// `state` loss), so that the latent keeps the measured state of the robot and
    /// of what it pushes, which the JEPA objective alone lets go (issue 41: pusht's
    /// latents missed the pusher's position by as far as it moves in 16 ticks).
    /// Training gives a new model one when its `state` loss weight is above 0; false
    /// in checkpoints written before it.
    #[config(default = false)]
    pub state_decoder: bool,
    /// The latent's first `proprio_dim` entries are the proprioception itself (the
    /// encoder learns the rest): the measured state is kept exactly, reading it out is
    /// taking those entries, and the residual-MLP members (the only family allowed
    /// with it) gate each entry's change by the predicted probability that it changes
    /// at all ([`crate::ResidualMlp`]). Issue 41: pusht's state decoder could not read
    /// the block's position back from real latents better than 0.027 (7 world units),
    /// coarser than placement needs. False in checkpoints written before it.
    #[config(default = false)]
    pub state_in_latent: bool,
}

impl WorldModelConfig {
    /// The default world model for `robot` with transition `family`: its camera's
    /// size, proprioception and action limits. A camera the pixel stem cannot read is
    /// an error naming the camera.
    pub fn for_robot(robot: &RobotSpec, family: TransitionFamily) -> Result<Self, ConfigError> {
        let mut config = Self::new(robot.proprio_dim(), robot.action_limit.clone());
        if let Some(side) = robot.camera_side(1, 512)? {
            config.image_size = side as usize;
            // The encoder reads every `image_stride`-th pixel: a 24x24 grid for the
            // default 48x48 camera, and the same density for larger ones (pusht's
            // 96x96 with stride 4), so that its cost does not grow with the camera.
            config.image_stride = (config.image_size / 24).max(2);
        }
        let config = config.with_family(family);
        config.validate()?;
        Ok(config)
    }

    /// Gives a stored config (a checkpoint's JSON) the keys added since checkpoints were
    /// first written, with the value that means what such a checkpoint did:
    /// `state_decoder` and `state_in_latent` false. Keys it has are left alone, and anything that is not a
    /// JSON object is left to fail to parse.
    pub fn fill_later_keys(stored: &mut serde_json::Value) {
        if let Some(fields) = stored.as_object_mut() {
            fields.entry("state_decoder").or_insert(false.into());
            fields.entry("state_in_latent").or_insert(false.into());
        }
    }

    /// Length of an action.
    pub fn action_dim(&self) -> usize {
        self.action_limit.len()
    }

    /// What the encoder reads from each observation: the camera as recorded, the
    /// instruction, every proprioception entry (velocities included: the dynamics
    /// need them); actions are absolute, in units of the action limit.
    pub fn input_spec(&self) -> InputSpec {
        InputSpec {
            proprio_dim: self.proprio_dim,
            state: (0..self.proprio_dim).collect(),
            cameras: vec![CameraInput {
                name: MAIN_CAMERA.to_string(),
                side: self.image_size,
                pool: 1,
                blank: false,
            }],
            instruction_words: Some(self.max_words),
            history: 1,
            targets: Vec::new(),
            action_limit: self.action_limit.clone(),
            action_origin: None,
        }
    }

    /// Parameters the world model has (both encoders, every member, the heads),
    /// computed from the config alone, so that a config can be bounded before anything
    /// is allocated.
    pub fn parameter_count(&self) -> usize {
        let (c, d, h, a) = (
            self.stem_channels,
            self.latent_dim,
            self.hidden,
            self.action_dim(),
        );
        let linear = |i: usize, o: usize| i * o + o;
        // Two hidden layers of `h`, as `MlpConfig`'s default.
        let mlp = |i: usize, o: usize| linear(i, h) + linear(h, h) + linear(h, o);
        let encoder = linear(3, c)
            + self.vocab_size * self.word_dim
            + linear(self.word_dim, 2 * c)
            + c
            + mlp(
                2 * c + self.word_dim + self.proprio_dim,
                self.learned_latent_dim(),
            );
        let member = match self.family {
            TransitionFamily::ResidualMlp if self.state_in_latent => {
                mlp(d + a, d) + mlp(d + a, self.state_entries())
            }
            TransitionFamily::ResidualMlp => mlp(d + a, d),
            TransitionFamily::Salt => mlp(a, d * d + d),
            TransitionFamily::ActionPrefix => {
                linear(a, h) + self.prefix_horizon * h + mlp(d + h, d)
            }
        };
        let state = if self.has_decoder_head() {
            linear(d, self.proprio_dim)
        } else {
            0
        };
        2 * encoder
            + self.ensemble_size * member
            + mlp(d + a, 1)
            + 2 * mlp(d, 1)
            + mlp(d, a)
            + state
    }

    /// Whether the model reads its latents out into the proprioception: with a state
    /// decoder, or by taking the latent's first entries where it holds the state.
    pub fn reads_out_state(&self) -> bool {
        self.state_decoder || self.state_in_latent
    }

    /// Whether the model has a linear state decoder: asked for, and its latent does
    /// not hold the state already.
    pub fn has_decoder_head(&self) -> bool {
        self.state_decoder && !self.state_in_latent
    }

    /// Leading latent entries that are the proprioception: all of it where the latent
    /// holds the state ([`Self::state_in_latent`]), else none.
    pub fn state_entries(&self) -> usize {
        if self.state_in_latent {
            self.proprio_dim
        } else {
            0
        }
    }

    /// Latent entries the encoder learns: those after the state entries.
    pub fn learned_latent_dim(&self) -> usize {
        self.latent_dim.saturating_sub(self.state_entries())
    }

    /// Checks every size against its documented range (see docs/configuration.md)
    /// before anything is allocated; the error names the first key that does not fit.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_action_limit(&self.action_limit)?;
        in_range("proprio_dim", self.proprio_dim, 1..=MAX_VECTOR)?;
        in_range("image_size", self.image_size, 2..=512)?;
        in_range("image_stride", self.image_stride, 1..=self.image_size)?;
        in_range("max_words", self.max_words, 1..=64)?;
        in_range("vocab_size", self.vocab_size, VOCABULARY.len()..=100_000)?;
        in_range("stem_channels", self.stem_channels, 1..=256)?;
        in_range("word_dim", self.word_dim, 1..=1024)?;
        in_range("latent_dim", self.latent_dim, 1..=1024)?;
        if self.state_in_latent && self.latent_dim <= self.proprio_dim {
            return Err(ConfigError::new(
                "latent_dim",
                self.latent_dim,
                format!(
                    "must exceed the proprioception's {} entries when the latent holds them (state_in_latent)",
                    self.proprio_dim
                ),
            ));
        }
        if self.state_in_latent && self.family != TransitionFamily::ResidualMlp {
            return Err(ConfigError::new(
                "family",
                self.family.name(),
                "must be residual-mlp when the latent holds the state (state_in_latent): its members gate the state's change",
            ));
        }
        in_range("hidden", self.hidden, 1..=8192)?;
        in_range("ensemble_size", self.ensemble_size, 1..=32)?;
        in_range("prefix_horizon", self.prefix_horizon, 1..=256)?;
        in_range("parameters", self.parameter_count(), 1..=MAX_PARAMETERS).map_err(|e| {
            ConfigError {
                expected: format!(
                    "the sizes give this many parameters; it {} (hidden, latent_dim, ensemble_size)",
                    e.expected
                ),
                ..e
            }
        })
    }
}
