//! A state-only policy: one linear layer from the proprioception entries it reads to
//! a summary, and the same action-chunk head as the VLA (Gaussian or flow). It reads
//! no pixels and no words. It is the seam's second architecture: everything that
//! trains, evaluates, gates or deploys a policy runs it through [`crate::Policy`]
//! exactly as it runs the VLA, and on a robot whose state is in its proprioception
//! (PushT's block pose) it is a baseline for what the pixels add.

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::DType;
use imago_robots::RobotSpec;
use imago_robots::bounds::{ConfigError, in_range, length_in_range};

use crate::head::{ActionHead, ActionHeadKind, GaussianChunk, HeadShape};
use crate::input::PolicyInput;
use crate::input_spec::{InputSpec, entries_of_proprio};
use crate::model::{MAX_PARAMETERS, MAX_VECTOR};
use crate::normalizer::Normalizer;
use crate::precision::{Precision, cast_parameters, cast_to};

/// Shape and size of a [`LinearPolicy`].
#[derive(Config, Debug, PartialEq)]
pub struct LinearPolicyConfig {
    /// Length of the robot's proprioception vector.
    pub proprio_dim: usize,
    /// Which proprioception entries the policy reads.
    pub proprio_inputs: Vec<usize>,
    /// Per action dimension, the magnitude that maps to 1.
    pub action_limit: Vec<f32>,
    /// Per action dimension, the proprioception entry actions are measured from;
    /// `None` for absolute actions.
    #[config(default = "None")]
    pub action_origin: Option<Vec<usize>>,
    /// How the state is scaled before the linear layer: statistics of the training
    /// data's state, set when the policy is first trained
    /// ([`crate::PolicyConfig::fitted_to`]) and kept with the checkpoint; `None`
    /// reads the state as the robot reports it.
    #[config(default = "None")]
    pub state_normalizer: Option<Normalizer>,
    /// Width of the summary the head reads.
    #[config(default = 64)]
    pub width: usize,
    /// Number of future actions predicted at once (`K`).
    #[config(default = 4)]
    pub chunk_len: usize,
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
}

impl LinearPolicyConfig {
    /// The default linear policy for `robot`: every proprioception entry except
    /// velocities (as the VLA reads them), the robot's action limits and origin.
    pub fn for_robot(robot: &RobotSpec) -> Result<Self, ConfigError> {
        let config = Self::new(
            robot.proprio_dim(),
            robot.non_velocity_proprio(),
            robot.action_limit.clone(),
        )
        .with_action_origin(robot.action_origin.clone());
        config.validate()?;
        Ok(config)
    }

    /// Length of an action.
    pub fn action_dim(&self) -> usize {
        self.action_limit.len()
    }

    /// What the policy reads: the `proprio_inputs`, no camera, no instruction.
    pub fn input_spec(&self) -> InputSpec {
        InputSpec {
            proprio_dim: self.proprio_dim,
            state: self.proprio_inputs.clone(),
            cameras: Vec::new(),
            instruction_words: None,
            history: 1,
            targets: Vec::new(),
            action_limit: self.action_limit.clone(),
            action_origin: self.action_origin.clone(),
        }
    }

    /// The action head's shape: it reads the `width`-wide summary.
    pub fn head_shape(&self) -> HeadShape {
        HeadShape {
            kind: self.head,
            summary: self.width,
            chunk_len: self.chunk_len,
            action_dim: self.action_dim(),
            log_std_range: (self.min_log_std, self.max_log_std),
            flow_width: self.flow_width,
        }
    }

    /// Parameters the policy has, from the config alone.
    pub fn parameter_count(&self) -> usize {
        let state = self.proprio_inputs.len() * self.width + self.width;
        state + self.head_shape().parameter_count()
    }

    /// Checks every size against its range; the error names the first key that does
    /// not fit.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("proprio_dim", self.proprio_dim, 1..=MAX_VECTOR)?;
        length_in_range("proprio_inputs", &self.proprio_inputs, 1..=self.proprio_dim)?;
        entries_of_proprio("proprio_inputs", &self.proprio_inputs, self.proprio_dim)?;
        self.input_spec().validate()?;
        if let Some(normalizer) = &self.state_normalizer {
            normalizer.validate("state_normalizer", self.proprio_inputs.len())?;
        }
        in_range("width", self.width, 1..=4096)?;
        in_range("chunk_len", self.chunk_len, 1..=crate::head::MAX_CHUNK_LEN)?;
        self.head_shape().validate()?;
        in_range("flow_steps", self.flow_steps, 1..=1000)?;
        in_range("parameters", self.parameter_count(), 1..=MAX_PARAMETERS)
    }

    /// A freshly initialised policy. Call [`Self::validate`] first on untrusted configs.
    pub fn init<B: Backend>(&self, device: &B::Device) -> LinearPolicy<B> {
        LinearPolicy {
            state: LinearConfig::new(self.proprio_inputs.len(), self.width).init(device),
            state_normalizer: self.state_normalizer.clone(),
            head: self.head_shape().init(device),
            precision: Precision::F32,
            chunk_len: self.chunk_len,
            action_dim: self.action_dim(),
            flow_steps: self.flow_steps,
        }
    }
}

/// The state-only policy; see the module documentation.
#[derive(Module, Debug)]
pub struct LinearPolicy<B: Backend> {
    pub(crate) state: Linear<B>,
    #[module(skip)]
    pub(crate) state_normalizer: Option<Normalizer>,
    pub(crate) head: ActionHead<B>,
    #[module(skip)]
    pub(crate) precision: Precision,
    pub(crate) chunk_len: usize,
    pub(crate) action_dim: usize,
    pub(crate) flow_steps: usize,
}

impl<B: Backend> LinearPolicy<B> {
    /// The summary `[batch, width]` the head reads: a linear map of the (normalised)
    /// state.
    pub fn summary(&self, input: PolicyInput<B>) -> Tensor<B, 2> {
        let state = cast_to(input.proprio, self.precision.dtype());
        let state = match &self.state_normalizer {
            Some(normalizer) => normalizer.normalise(state),
            None => state,
        };
        self.state.forward(state)
    }

    /// The chunk distribution of a Gaussian head; `None` for a flow head.
    pub fn gaussian(&self, input: PolicyInput<B>) -> Option<GaussianChunk<B>> {
        let origin = cast_to(input.action_origin.clone(), self.precision.dtype());
        self.head.gaussian(self.summary(input), origin)
    }

    /// Action chunks `[batch, K, A]` ([`ActionHead::act`]) as `f32`.
    pub fn act(&self, input: PolicyInput<B>, noise: Option<Tensor<B, 3>>) -> Tensor<B, 3> {
        let origin = cast_to(input.action_origin.clone(), self.precision.dtype());
        let chunk = self
            .head
            .act(self.summary(input), origin, noise, self.flow_steps);
        cast_to(chunk, DType::F32)
    }

    /// The same policy computing in `precision`.
    pub fn with_precision(self, precision: Precision) -> Self {
        let mut cast = cast_parameters(self, precision);
        cast.precision = precision;
        cast
    }
}
