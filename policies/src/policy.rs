//! The policy seam: [`Policy`] is every architecture imago can train, evaluate, gate
//! and deploy, and [`PolicyConfig`] their configs. Callers (learners, evaluation,
//! sampling, checkpoints, the fleet, the gate, acceleration) use only these two and
//! never name an architecture. An architecture is one module (its config, its model,
//! its [`InputSpec`]) plus one variant here; it is trained through burn's autodiff
//! like every other (`crate::loss`), and gets nothing hand-written of its own.
//!
//! One decision lives here: [`Policy::host_path`], whether a model runs imago's
//! hand-written CPU forward and backward (the VLA with a Gaussian head on a CPU
//! backend: its inference 3-5x and its training step 4.6x faster than burn's on the
//! 2-core development machine, docs/performance.md) or burn's.

use std::fmt;
use std::str::FromStr;

use burn::prelude::*;
use imago_robots::RobotSpec;
use imago_robots::bounds::ConfigError;
use serde::{Deserialize, Serialize};

use crate::head::{ActionHead, ActionHeadKind, GaussianChunk};
use crate::host::HostPolicy;
use crate::input::PolicyInput;
use crate::input_spec::InputSpec;
use crate::linear::{LinearPolicy, LinearPolicyConfig};
use crate::model::{VlaPolicy, VlaPolicyConfig};
use crate::normalizer::{NormalizationMode, Normalizer};
use crate::precision::Precision;
use crate::vision::{ComputePath, StemInputs};

/// The policy architectures, as `imago train --policy` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Architecture {
    /// The vision-language-action transformer ([`VlaPolicy`]).
    Vla,
    /// The state-only linear policy ([`LinearPolicy`]).
    Linear,
}

impl Architecture {
    /// Every architecture.
    pub const ALL: [Self; 2] = [Self::Vla, Self::Linear];

    /// The name `--policy` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Vla => "vla",
            Self::Linear => "linear",
        }
    }

    /// The `kind` a checkpoint of this architecture records (`vla-policy` is what
    /// every policy checkpoint written before the seam records).
    pub fn checkpoint_kind(self) -> &'static str {
        match self {
            Self::Vla => "vla-policy",
            Self::Linear => "linear-policy",
        }
    }

    /// The architecture whose checkpoints record `kind`.
    pub fn of_checkpoint_kind(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.checkpoint_kind() == kind)
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Architecture {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|a| a.name()).collect();
                format!("unknown policy `{s}` (one of: {})", names.join(", "))
            })
    }
}

/// The config of any [`Policy`]. On the wire (the fleet) it is tagged with its
/// architecture; a checkpoint stores the architecture as its `kind` and the
/// architecture's own config untagged ([`Self::to_stored`], [`Self::from_stored`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "architecture", content = "config", rename_all = "kebab-case")]
pub enum PolicyConfig {
    /// See [`VlaPolicyConfig`].
    Vla(VlaPolicyConfig),
    /// See [`LinearPolicyConfig`].
    Linear(LinearPolicyConfig),
}

impl PolicyConfig {
    /// The default policy of `architecture` for `robot`.
    pub fn for_robot(architecture: Architecture, robot: &RobotSpec) -> Result<Self, ConfigError> {
        Ok(match architecture {
            Architecture::Vla => Self::Vla(VlaPolicyConfig::for_robot(robot)?),
            Architecture::Linear => Self::Linear(LinearPolicyConfig::for_robot(robot)?),
        })
    }

    /// Which architecture this configures.
    pub fn architecture(&self) -> Architecture {
        match self {
            Self::Vla(_) => Architecture::Vla,
            Self::Linear(_) => Architecture::Linear,
        }
    }

    /// The architecture's own config as JSON, as a checkpoint stores it.
    pub fn to_stored(&self) -> serde_json::Value {
        let json = match self {
            Self::Vla(c) => serde_json::to_value(c),
            Self::Linear(c) => serde_json::to_value(c),
        };
        json.expect("a policy config is plain data and always serialises")
    }

    /// The config a checkpoint of `architecture` stores as `stored`; keys added to
    /// the architecture since the checkpoint was written take the value that means
    /// what it did (see [`VlaPolicyConfig::fill_later_keys`]).
    pub fn from_stored(
        architecture: Architecture,
        mut stored: serde_json::Value,
    ) -> Result<Self, serde_json::Error> {
        Ok(match architecture {
            Architecture::Vla => {
                VlaPolicyConfig::fill_later_keys(&mut stored);
                Self::Vla(serde_json::from_value(stored)?)
            }
            Architecture::Linear => Self::Linear(serde_json::from_value(stored)?),
        })
    }

    /// The same config with the keys of `changes` (a JSON object of the
    /// architecture's own keys, as a checkpoint stores them) set: how a test or a tool
    /// changes one setting without naming the architecture's config type. A key the
    /// architecture does not have, or a value of the wrong type, is an error.
    pub fn with_stored_changes(self, changes: &serde_json::Value) -> Result<Self, String> {
        let architecture = self.architecture();
        let mut stored = self.to_stored();
        let known = stored
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>());
        let (Some(changes), Some(known)) = (changes.as_object(), known) else {
            return Err("changes must be a JSON object".into());
        };
        for (key, value) in changes {
            if !known.contains(key) {
                return Err(format!("a {architecture} policy has no key `{key}`"));
            }
            stored[key] = value.clone();
        }
        Self::from_stored(architecture, stored).map_err(|e| e.to_string())
    }

    /// Checks every size against its documented range before anything is
    /// allocated; the error names the first key that does not fit.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Self::Vla(c) => c.validate(),
            Self::Linear(c) => c.validate(),
        }
    }

    /// What the policy reads from each observation.
    pub fn input_spec(&self) -> InputSpec {
        match self {
            Self::Vla(c) => c.input_spec(),
            Self::Linear(c) => c.input_spec(),
        }
    }

    /// Length of the robot's proprioception vector.
    pub fn proprio_dim(&self) -> usize {
        match self {
            Self::Vla(c) => c.proprio_dim,
            Self::Linear(c) => c.proprio_dim,
        }
    }

    /// Per action dimension, the magnitude that maps to 1.
    pub fn action_limit(&self) -> &[f32] {
        match self {
            Self::Vla(c) => &c.action_limit,
            Self::Linear(c) => &c.action_limit,
        }
    }

    /// Length of an action.
    pub fn action_dim(&self) -> usize {
        self.action_limit().len()
    }

    /// Actions per predicted chunk (`K`).
    pub fn chunk_len(&self) -> usize {
        match self {
            Self::Vla(c) => c.chunk_len,
            Self::Linear(c) => c.chunk_len,
        }
    }

    /// The action-chunk head.
    pub fn head(&self) -> ActionHeadKind {
        match self {
            Self::Vla(c) => c.head,
            Self::Linear(c) => c.head,
        }
    }

    /// Euler steps of the flow head's sampler.
    pub fn flow_steps(&self) -> usize {
        match self {
            Self::Vla(c) => c.flow_steps,
            Self::Linear(c) => c.flow_steps,
        }
    }

    /// Width of the summary the head reads: the VLA's token width (`d_model`), the
    /// linear policy's `width`.
    pub fn width(&self) -> usize {
        match self {
            Self::Vla(c) => c.d_model,
            Self::Linear(c) => c.width,
        }
    }

    /// Transformer layers of the VLA; `None` for the linear policy, which has none.
    pub fn layers(&self) -> Option<usize> {
        match self {
            Self::Vla(c) => Some(c.n_layers),
            Self::Linear(_) => None,
        }
    }

    /// The same policy `width` wide: the VLA's tokens (its feed-forward blocks twice
    /// that, as by default), the linear policy's summary. Checked by `validate`.
    pub fn with_width(self, width: usize) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(c.with_d_model(width).with_d_ff(2 * width)),
            Self::Linear(c) => Self::Linear(c.with_width(width)),
        }
    }

    /// Whether the policy reads the robot's camera (the linear policy never does).
    pub fn reads_camera(&self) -> bool {
        match self {
            Self::Vla(c) => c.reads_camera,
            Self::Linear(_) => false,
        }
    }

    /// The same VLA given a blank frame instead of the camera's
    /// ([`VlaPolicyConfig::reads_camera`]); a linear policy, which reads none, is
    /// returned unchanged.
    pub fn without_camera(self) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(c.with_reads_camera(false)),
            linear => linear,
        }
    }

    /// What the VLA's stem reads at each pixel; `None` for the linear policy, which
    /// reads no pixels.
    pub fn stem_inputs(&self) -> Option<StemInputs> {
        match self {
            Self::Vla(c) => Some(c.stem_inputs),
            Self::Linear(_) => None,
        }
    }

    /// The same VLA with a stem that reads `inputs` at each pixel; a linear policy,
    /// which reads no pixels, is returned unchanged.
    pub fn with_stem_inputs(self, inputs: StemInputs) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(c.with_stem_inputs(inputs)),
            linear => linear,
        }
    }

    /// Channels of the VLA's per-pixel stem (each one keypoint and one feature of
    /// every patch token); `None` for the linear policy, which reads no pixels.
    pub fn stem_channels(&self) -> Option<usize> {
        match self {
            Self::Vla(c) => Some(c.stem_channels),
            Self::Linear(_) => None,
        }
    }

    /// The same VLA with `channels` stem channels; a linear policy, which reads no
    /// pixels, is returned unchanged.
    pub fn with_stem_channels(self, channels: usize) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(c.with_stem_channels(channels)),
            linear => linear,
        }
    }

    /// Per-pixel layers of the VLA's stem ([`VlaPolicyConfig::stem_layers`]); `None`
    /// for the linear policy, which reads no pixels.
    pub fn stem_layers(&self) -> Option<usize> {
        match self {
            Self::Vla(c) => Some(c.stem_layers),
            Self::Linear(_) => None,
        }
    }

    /// The same VLA with a stem of `layers` per-pixel layers; a linear policy, which
    /// reads no pixels, is returned unchanged.
    pub fn with_stem_layers(self, layers: usize) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(c.with_stem_layers(layers)),
            linear => linear,
        }
    }

    /// The proprioception entries the policy reads.
    pub fn proprio_inputs(&self) -> &[usize] {
        match self {
            Self::Vla(c) => &c.proprio_inputs,
            Self::Linear(c) => &c.proprio_inputs,
        }
    }

    /// The same policy reading the proprioception `entries` (indices into the robot's
    /// proprioception, in the order read).
    pub fn reading_proprio(self, entries: Vec<usize>) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(VlaPolicyConfig {
                proprio_inputs: entries,
                ..c
            }),
            Self::Linear(c) => Self::Linear(LinearPolicyConfig {
                proprio_inputs: entries,
                ..c
            }),
        }
    }

    /// The same policy for a robot whose proprioception is named `to` instead of
    /// `from` (the names of the robot it was trained for): every entry it reads and
    /// measures its actions from is found in `to` by name; keypoint targets too where
    /// `to` has them all, else they are dropped (they are a training signal, and the
    /// second value says so). The error names the first entry `to` lacks.
    pub fn for_proprioception(
        &self,
        from: &[String],
        to: &[String],
    ) -> Result<(Self, bool), String> {
        let find = |i: &usize| -> Result<usize, String> {
            let name = from
                .get(*i)
                .ok_or_else(|| format!("entry {i} is beyond the {} named", from.len()))?;
            to.iter().position(|n| n == name).ok_or_else(|| {
                format!(
                    "the policy reads `{name}`, which is not among {}",
                    to.join(", ")
                )
            })
        };
        let map = |entries: &[usize]| entries.iter().map(find).collect::<Result<Vec<_>, _>>();
        let proprio_inputs = map(self.proprio_inputs())?;
        match self {
            Self::Vla(c) => {
                let action_origin = c.action_origin.as_deref().map(map).transpose()?;
                let targets = map(&c.keypoint_targets).ok();
                let dropped = targets.is_none();
                Ok((
                    Self::Vla(VlaPolicyConfig {
                        proprio_dim: to.len(),
                        proprio_inputs,
                        action_origin,
                        keypoint_targets: targets.unwrap_or_default(),
                        ..c.clone()
                    }),
                    dropped,
                ))
            }
            Self::Linear(c) => {
                let action_origin = c.action_origin.as_deref().map(map).transpose()?;
                Ok((
                    Self::Linear(LinearPolicyConfig {
                        proprio_dim: to.len(),
                        proprio_inputs,
                        action_origin,
                        ..c.clone()
                    }),
                    false,
                ))
            }
        }
    }

    /// The VLA's keypoint targets ([`VlaPolicyConfig::keypoint_targets`]) and their
    /// weight; `None` for the linear policy, which has no keypoints.
    pub fn keypoint_targets(&self) -> Option<(&[usize], f64)> {
        match self {
            Self::Vla(c) => Some((&c.keypoint_targets, c.keypoint_target_weight)),
            Self::Linear(_) => None,
        }
    }

    /// The same VLA trained to find the proprioception `entries` in its frame, their
    /// squared error weighted by `weight`; a linear policy, which has no keypoints, is
    /// returned unchanged.
    pub fn with_keypoint_targets(self, entries: Vec<usize>, weight: f64) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(
                c.with_keypoint_targets(entries)
                    .with_keypoint_target_weight(weight),
            ),
            linear => linear,
        }
    }

    /// The side, in pixels, at which the VLA reads its camera; `None` for the linear
    /// policy, which reads no pixels.
    pub fn frame_side(&self) -> Option<usize> {
        match self {
            Self::Vla(c) => Some(c.image_size),
            Self::Linear(_) => None,
        }
    }

    /// The same VLA reading its camera at `side` pixels
    /// ([`VlaPolicyConfig::reading_frame_at`]: a side it cannot read at is an error
    /// listing those it can); a linear policy, which reads no pixels, is returned
    /// unchanged.
    pub fn reading_frame_at(self, side: usize) -> Result<Self, ConfigError> {
        match self {
            Self::Vla(c) => c.reading_frame_at(side).map(Self::Vla),
            linear => Ok(linear),
        }
    }

    /// The same VLA with `layers` transformer layers (checked by `validate`); a linear
    /// policy, which has no layers, is returned unchanged.
    pub fn with_layers(self, layers: usize) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(c.with_n_layers(layers)),
            linear => linear,
        }
    }

    /// The same policy with a `head` head.
    pub fn with_head(self, head: ActionHeadKind) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(c.with_head(head)),
            Self::Linear(c) => Self::Linear(c.with_head(head)),
        }
    }

    /// The same policy predicting chunks of `k` actions.
    pub fn with_chunk_len(self, k: usize) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(c.with_chunk_len(k)),
            Self::Linear(c) => Self::Linear(c.with_chunk_len(k)),
        }
    }

    /// This config with the choices a trained policy keeps from `stored` (its
    /// architecture's config when it was first trained): the head, its flow width
    /// and steps, the chunk length, the width, the linear policy's state statistics and
    /// the VLA's layers, feed-forward width, stem activation, inputs, channels and
    /// layers, camera and the side it reads the camera at (when both read a camera of
    /// the same side), keypoint targets, and the proprioception entries read.
    /// What is left must equal `stored` for training to continue from it. Of another
    /// architecture, `self` is returned unchanged (and differs from `stored`).
    pub fn keeping_choices_of(self, stored: &Self) -> Self {
        match (self, stored) {
            (Self::Vla(c), Self::Vla(s)) => Self::Vla(
                VlaPolicyConfig {
                    proprio_inputs: s.proprio_inputs.clone(),
                    ..c
                }
                .keeping_frame_of(s)
                .with_stem_activation(s.stem_activation)
                .with_stem_inputs(s.stem_inputs)
                .with_stem_channels(s.stem_channels)
                .with_stem_layers(s.stem_layers)
                .with_d_model(s.d_model)
                .with_d_ff(s.d_ff)
                .with_n_layers(s.n_layers)
                .with_head(s.head)
                .with_flow_width(s.flow_width)
                .with_flow_steps(s.flow_steps)
                .with_chunk_len(s.chunk_len)
                .with_reads_camera(s.reads_camera)
                .with_keypoint_targets(s.keypoint_targets.clone())
                .with_keypoint_target_weight(s.keypoint_target_weight),
            ),
            (Self::Linear(c), Self::Linear(s)) => Self::Linear(
                LinearPolicyConfig {
                    proprio_inputs: s.proprio_inputs.clone(),
                    ..c
                }
                .with_state_normalizer(s.state_normalizer.clone())
                .with_width(s.width)
                .with_head(s.head)
                .with_flow_width(s.flow_width)
                .with_flow_steps(s.flow_steps)
                .with_chunk_len(s.chunk_len),
            ),
            (config, _) => config,
        }
    }

    /// The same architecture at a small width (a 32-wide summary; the VLA with one
    /// layer, a 64-wide feed-forward block): what device checks and tests train when
    /// the model's size is not the point.
    pub fn compact(self) -> Self {
        match self {
            Self::Vla(c) => Self::Vla(c.with_d_model(32).with_d_ff(64).with_n_layers(1)),
            Self::Linear(c) => Self::Linear(c.with_width(32)),
        }
    }

    /// This config fitted to the training data whose proprioception vectors are
    /// `states`: an architecture that normalises its state (the linear policy, by mean
    /// and standard deviation) takes their statistics, which its checkpoint then keeps.
    /// The VLA reads proprioception as the robot reports it and is unchanged.
    pub fn fitted_to<'a>(self, states: impl IntoIterator<Item = &'a [f32]>) -> Self {
        match self {
            Self::Linear(c) => {
                let rows: Vec<Vec<f32>> = states
                    .into_iter()
                    .map(|s| c.proprio_inputs.iter().map(|&i| s[i]).collect())
                    .collect();
                let normalizer =
                    Normalizer::of_rows(rows.iter().map(Vec::as_slice), NormalizationMode::MeanStd);
                Self::Linear(c.with_state_normalizer(normalizer))
            }
            vla => vla,
        }
    }

    /// Parameters the policy has, from the config alone.
    pub fn parameter_count(&self) -> usize {
        match self {
            Self::Vla(c) => c.parameter_count(),
            Self::Linear(c) => c.parameter_count(),
        }
    }

    /// A freshly initialised policy. Call [`Self::validate`] first on untrusted configs.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Policy<B> {
        match self {
            Self::Vla(c) => Policy::Vla(c.init(device)),
            Self::Linear(c) => Policy::Linear(c.init(device)),
        }
    }
}

/// Any policy architecture; see the module documentation. Every architecture reads a
/// [`PolicyInput`] built by its [`InputSpec`] into a summary that one
/// [`ActionHead`] turns into chunks of actions.
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Policy<B: Backend> {
    /// See [`VlaPolicy`].
    Vla(VlaPolicy<B>),
    /// See [`LinearPolicy`].
    Linear(LinearPolicy<B>),
}

impl<B: Backend> Policy<B> {
    /// Which architecture this is.
    pub fn architecture(&self) -> Architecture {
        match self {
            Self::Vla(_) => Architecture::Vla,
            Self::Linear(_) => Architecture::Linear,
        }
    }

    /// Chunk length `K` and action width `A` of the chunks this policy predicts.
    pub fn chunk_shape(&self) -> (usize, usize) {
        match self {
            Self::Vla(p) => p.chunk_shape(),
            Self::Linear(p) => (p.chunk_len, p.action_dim),
        }
    }

    /// The action-chunk head.
    pub fn head(&self) -> &ActionHead<B> {
        match self {
            Self::Vla(p) => p.head(),
            Self::Linear(p) => &p.head,
        }
    }

    /// The summary `[batch, d]` the head reads.
    pub fn summary(&self, input: PolicyInput<B>) -> Tensor<B, 2> {
        match self {
            Self::Vla(p) => p.summary(input),
            Self::Linear(p) => p.summary(input),
        }
    }

    /// [`Self::summary`], and the VLA's keypoint-target loss where it has targets and
    /// `input` carries them ([`VlaPolicy::summary_and_target_loss`]).
    pub fn summary_and_target_loss(
        &self,
        input: PolicyInput<B>,
    ) -> (Tensor<B, 2>, Option<Tensor<B, 1>>) {
        match self {
            Self::Vla(p) => p.summary_and_target_loss(input),
            Self::Linear(p) => (p.summary(input), None),
        }
    }

    /// The chunk distribution of a Gaussian head, its means measured from the input's
    /// action origin; `None` for a flow head.
    pub fn gaussian(&self, input: PolicyInput<B>) -> Option<GaussianChunk<B>> {
        match self {
            Self::Vla(p) => p.gaussian(input),
            Self::Linear(p) => p.gaussian(input),
        }
    }

    /// Action chunks `[batch, K, A]` in units of the action limit, as `f32`: the
    /// deterministic chunk without `noise`, a sample with it ([`ActionHead::act`]).
    pub fn act(&self, input: PolicyInput<B>, noise: Option<Tensor<B, 3>>) -> Tensor<B, 3> {
        match self {
            Self::Vla(p) => p.act(input, noise),
            Self::Linear(p) => p.act(input, noise),
        }
    }

    /// The float precision this policy computes in.
    pub fn precision(&self) -> Precision {
        match self {
            Self::Vla(p) => p.precision(),
            Self::Linear(p) => p.precision,
        }
    }

    /// The same policy computing in `precision` (ask [`Precision::supported_on`]).
    pub fn with_precision(self, precision: Precision) -> Self {
        match self {
            Self::Vla(p) => Self::Vla(p.with_precision(precision)),
            Self::Linear(p) => Self::Linear(p.with_precision(precision)),
        }
    }

    /// Euler steps of the flow head's sampler.
    pub fn flow_steps(&self) -> usize {
        match self {
            Self::Vla(p) => p.flow_steps(),
            Self::Linear(p) => p.flow_steps,
        }
    }

    /// The same policy sampling its flow head in `steps` Euler steps (at least 1).
    pub fn with_flow_steps(self, steps: usize) -> Self {
        match self {
            Self::Vla(p) => Self::Vla(p.with_flow_steps(steps)),
            Self::Linear(mut p) => {
                p.flow_steps = steps.max(1);
                Self::Linear(p)
            }
        }
    }

    /// The same policy with its per-pixel work on `path`; a policy without pixels is
    /// unchanged.
    pub fn with_compute_path(self, path: ComputePath) -> Self {
        match self {
            Self::Vla(p) => Self::Vla(p.with_compute_path(path)),
            linear => linear,
        }
    }

    /// The VLA when imago's hand-written CPU forward and backward run it instead of
    /// burn's: a Gaussian head on a CPU backend (`ComputePath::Auto`), or a compute
    /// path forced to the host. The one place this is decided: sampling, the
    /// imitation loss and log-densities all ask here.
    pub fn host_path(&self) -> Option<&VlaPolicy<B>> {
        match self {
            Self::Vla(p)
                if matches!(p.head(), ActionHead::Gaussian(_))
                    && p.compute_path
                        .on_host::<B>(&p.keypoint_sharpness.val().device()) =>
            {
                Some(p)
            }
            _ => None,
        }
    }

    /// The same policy without the keypoint readout (a VLA retargeted to a robot that
    /// does not give its targets: [`PolicyConfig::for_proprioception`]).
    pub fn without_keypoint_readout(self) -> Self {
        match self {
            Self::Vla(mut p) => {
                p.keypoint_readout = None;
                Self::Vla(p)
            }
            linear => linear,
        }
    }

    /// The host copy of the weights that [`Self::host_path`] runs, taken once per
    /// published version; `None` where burn runs the policy.
    pub fn host_copy(&self) -> Option<HostPolicy> {
        self.host_path().and_then(HostPolicy::of)
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};
    use imago_robots::reacher2d::Reacher2d;
    use imago_robots::{Action, Robot};

    use super::*;
    use crate::input::PolicyBatch;
    use crate::loss::{ImitationTargets, imitation_loss};

    type B = Autodiff<Flex>;

    /// Retargeting finds every entry by name: what is read, the action origin, and
    /// the keypoint targets where the new robot gives them (else they are dropped).
    #[test]
    fn a_policy_is_retargeted_by_the_names_of_what_it_reads() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let pose = names(&["agent_x", "agent_y", "block_x", "block_y"]);
        let vision = names(&["agent_x", "agent_y"]);
        let swapped = names(&["block_y", "block_x", "agent_y", "agent_x"]);
        let seeing = PolicyConfig::Vla(
            VlaPolicyConfig::new(4, vec![0, 1], vec![1.0, 1.0])
                .with_action_origin(Some(vec![0, 1]))
                .with_keypoint_targets(vec![2, 3]),
        );
        let (for_vision, dropped) = seeing.for_proprioception(&pose, &vision).unwrap();
        let PolicyConfig::Vla(v) = &for_vision else {
            unreachable!("the architecture is kept")
        };
        assert!(dropped);
        assert_eq!((v.proprio_dim, &v.proprio_inputs), (2, &vec![0, 1]));
        assert_eq!(v.action_origin, Some(vec![0, 1]));
        assert!(v.keypoint_targets.is_empty());
        assert_eq!(for_vision.validate(), Ok(()));
        let (reordered, dropped) = seeing.for_proprioception(&pose, &swapped).unwrap();
        let PolicyConfig::Vla(r) = &reordered else {
            unreachable!("the architecture is kept")
        };
        assert!(!dropped);
        assert_eq!(r.proprio_inputs, vec![3, 2]);
        assert_eq!(r.action_origin, Some(vec![3, 2]));
        assert_eq!(r.keypoint_targets, vec![1, 0]);
        // A policy that reads the block cannot act without it.
        let reading = PolicyConfig::Vla(VlaPolicyConfig::new(4, vec![0, 1, 2], vec![1.0, 1.0]));
        let error = reading.for_proprioception(&pose, &vision).unwrap_err();
        assert!(error.contains("reads `block_x`"), "{error}");
    }

    #[test]
    fn architectures_round_trip_through_names_kinds_and_stored_configs() {
        let spec = Reacher2d::default().spec().clone();
        for architecture in Architecture::ALL {
            assert_eq!(
                architecture.name().parse::<Architecture>(),
                Ok(architecture)
            );
            assert_eq!(
                Architecture::of_checkpoint_kind(architecture.checkpoint_kind()),
                Some(architecture)
            );
            let config = PolicyConfig::for_robot(architecture, &spec)
                .unwrap()
                .with_chunk_len(3)
                .with_head(ActionHeadKind::Flow);
            assert_eq!(config.architecture(), architecture);
            let stored = PolicyConfig::from_stored(architecture, config.to_stored()).unwrap();
            assert_eq!(stored, config);
            let wire: PolicyConfig =
                serde_json::from_str(&serde_json::to_string(&config).unwrap()).unwrap();
            assert_eq!(wire, config);
            assert_eq!(
                (config.chunk_len(), config.head()),
                (3, ActionHeadKind::Flow)
            );
            assert_eq!(config.input_spec().validate(), Ok(()));
        }
        assert!(
            "transformer"
                .parse::<Architecture>()
                .unwrap_err()
                .contains("vla, linear")
        );
        // The state-only policy reads no camera and no words; the VLA reads both.
        let linear = PolicyConfig::for_robot(Architecture::Linear, &spec).unwrap();
        let vla = PolicyConfig::for_robot(Architecture::Vla, &spec).unwrap();
        assert!(linear.input_spec().cameras.is_empty());
        assert_eq!(linear.input_spec().instruction_words, None);
        assert_eq!(vla.input_spec().cameras.len(), 1);
        // Fitted to its training states, the linear policy keeps their statistics of
        // the entries it reads (reacher2d's 8 entries, of which velocities 4 and 5 are
        // not read); the VLA reads raw proprioception.
        let states: Vec<Vec<f32>> = (0..3)
            .map(|i| (0..8).map(|j| (i * j) as f32).collect())
            .collect();
        let fitted = linear.clone().fitted_to(states.iter().map(Vec::as_slice));
        let PolicyConfig::Linear(fitted_linear) = &fitted else {
            unreachable!("fitted_to keeps the architecture")
        };
        let normalizer = fitted_linear.state_normalizer.as_ref().expect("statistics");
        assert_eq!(normalizer.mean, vec![0.0, 1.0, 2.0, 3.0, 6.0, 7.0]);
        assert_eq!(fitted.validate(), Ok(()));
        assert_eq!(vla.clone().fitted_to(states.iter().map(Vec::as_slice)), vla);
        // Sizes counted from the config are the built policy's, for either head.
        for config in [vla.clone(), linear.clone()] {
            for head in [ActionHeadKind::Gaussian, ActionHeadKind::Flow] {
                let config = config.clone().with_head(head);
                let policy = config.init::<Flex>(&Default::default());
                assert_eq!(config.parameter_count(), policy.num_params(), "{head:?}");
            }
        }
        for inputs in StemInputs::ALL {
            let config = vla.clone().with_stem_inputs(inputs);
            let policy = config.init::<Flex>(&Default::default());
            assert_eq!(config.parameter_count(), policy.num_params(), "{inputs:?}");
        }
        for layers in [2, 4] {
            let config = vla.clone().with_stem_layers(layers);
            let policy = config.init::<Flex>(&Default::default());
            assert_eq!(config.parameter_count(), policy.num_params(), "{layers}");
        }
        // A continued policy keeps its own choices, but not another architecture's.
        let kept = linear
            .clone()
            .keeping_choices_of(&linear.clone().with_chunk_len(9));
        assert_eq!(kept.chunk_len(), 9);
        let wide = vla
            .clone()
            .with_width(128)
            .with_layers(3)
            .with_stem_inputs(StemInputs::Neighbourhood)
            .with_stem_channels(48)
            .with_stem_layers(3);
        assert_eq!((wide.width(), wide.layers()), (128, Some(3)));
        assert_eq!(
            (wide.stem_layers(), vla.stem_layers(), linear.stem_layers()),
            (Some(3), Some(1), None)
        );
        assert_eq!(
            linear.clone().with_stem_layers(2),
            linear,
            "no stem to deepen"
        );
        assert_eq!(
            (
                wide.stem_channels(),
                vla.stem_channels(),
                linear.stem_channels()
            ),
            (Some(48), Some(16), None)
        );
        assert_eq!(
            linear.clone().with_stem_channels(48),
            linear,
            "no stem to set"
        );
        assert_eq!(wide.stem_inputs(), Some(StemInputs::Neighbourhood));
        assert_eq!(linear.stem_inputs(), None);
        assert_eq!(vla.clone().keeping_choices_of(&wide), wide);
        let PolicyConfig::Vla(wide_vla) = &wide else {
            unreachable!("with_width keeps the architecture")
        };
        assert_eq!(wide_vla.d_ff, 256, "feed-forward twice the width");
        assert_eq!(linear.clone().with_layers(3), linear, "no layers to set");
        assert_eq!(linear.clone().with_width(96).width(), 96);
        assert_eq!(vla.clone().keeping_choices_of(&linear), vla);
        // reacher2d's 48x48 camera, read whole or averaged down by a whole factor.
        assert_eq!(vla.frame_side(), Some(48));
        assert_eq!(linear.frame_side(), None);
        let coarse = vla.clone().reading_frame_at(24).unwrap();
        let camera = &coarse.input_spec().cameras[0];
        assert_eq!((camera.side, camera.pool), (24, 2));
        let policy = coarse.init::<Flex>(&Default::default());
        assert_eq!(coarse.parameter_count(), policy.num_params());
        assert_eq!(vla.clone().keeping_choices_of(&coarse), coarse);
        assert_eq!(coarse.clone().reading_frame_at(48).unwrap(), vla);
        let refused = vla.clone().reading_frame_at(40).unwrap_err().to_string();
        assert!(refused.contains("one of 8, 16, 24, 48"), "{refused}");
        assert_eq!(linear.clone().reading_frame_at(40), Ok(linear.clone()));
    }

    /// The linear policy trained through the seam's imitation loss with burn's
    /// autodiff (nothing hand-written) fits a linear map of its state: the
    /// expert's command here is `0.5 * (ee_x, -ee_y)` of reacher2d's end effector.
    #[test]
    fn a_linear_policy_learns_a_linear_expert_through_burns_autodiff() {
        let _serial = crate::AUTODIFF_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let device = Default::default();
        B::seed(&device, 5);
        let mut robot = Reacher2d::default();
        let spec = robot.spec().clone();
        let config = PolicyConfig::for_robot(Architecture::Linear, &spec)
            .unwrap()
            .with_chunk_len(1);
        let mut batch = PolicyBatch::new(&config.input_spec());
        let mut actions = Vec::new();
        let mut observation = robot.reset(0);
        for tick in 0..64u32 {
            // No frame needed: the state-only policy reads proprioception alone.
            let mut state_only = observation.clone();
            state_only.image = None;
            batch.push(&state_only).unwrap();
            let (x, y) = (observation.proprio[6], observation.proprio[7]);
            actions.extend([0.5 * x, -0.5 * y]);
            let wiggle = (tick as f32 * 0.7).sin();
            let limit = spec.action_limit[0];
            observation = robot
                .step(&Action(vec![wiggle * limit, -wiggle * limit]))
                .observation;
        }
        let targets = ImitationTargets {
            actions: Tensor::<B, 3>::from_data(
                TensorData::new(actions.clone(), [64, 1, 2]),
                &device,
            ),
            mask: Tensor::ones([64, 1], &device),
            weights: None,
        };
        let mut policy = config.init::<B>(&device);
        assert!(
            policy.host_path().is_none(),
            "burn runs every architecture but the VLA"
        );
        let mut optim = AdamConfig::new().init();
        let mut losses = Vec::new();
        for _ in 0..400 {
            let loss = imitation_loss(&policy, batch.to_input(&device), &targets, None);
            losses.push(loss.clone().into_scalar());
            let grads = GradientsParams::from_grads(loss.backward(), &policy);
            policy = optim.step(3e-3, policy, grads);
        }
        let mean: Vec<f32> = policy
            .act(batch.to_input(&device), None)
            .into_data()
            .to_vec()
            .unwrap();
        let worst = mean
            .iter()
            .zip(&actions)
            .map(|(m, a)| (m - a).abs())
            .fold(0.0f32, f32::max);
        assert!(
            losses[399] < losses[0] - 1.0,
            "loss {} -> {}",
            losses[0],
            losses[399]
        );
        assert!(worst < 0.1, "largest error of the mean chunk: {worst}");
    }
}
