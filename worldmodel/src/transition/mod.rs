//! Latent transition models: three families behind one type.

mod prefix;
mod residual;
mod salt;

pub use prefix::ActionPrefix;
pub use residual::ResidualMlp;
pub use salt::{Salt, SaltErrorSplit};

use burn::prelude::*;

use crate::config::{TransitionFamily, WorldModelConfig};

/// One ensemble member: a transition model of the configured family.
// A handful of members live in one Vec for the model's lifetime, so the padding of
// the smaller variants costs a few hundred bytes; boxing would put every parameter
// access behind another pointer for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum TransitionMember<B: Backend> {
    /// See [`ResidualMlp`].
    ResidualMlp(ResidualMlp<B>),
    /// See [`Salt`].
    Salt(Salt<B>),
    /// See [`ActionPrefix`].
    ActionPrefix(ActionPrefix<B>),
}

impl<B: Backend> TransitionMember<B> {
    /// A freshly initialised member of `config.family`.
    pub fn new(config: &WorldModelConfig, device: &B::Device) -> Self {
        match config.family {
            TransitionFamily::ResidualMlp => Self::ResidualMlp(ResidualMlp::new(config, device)),
            TransitionFamily::Salt => Self::Salt(Salt::new(config, device)),
            TransitionFamily::ActionPrefix => Self::ActionPrefix(ActionPrefix::new(config, device)),
        }
    }

    /// The family of this member.
    pub fn family(&self) -> TransitionFamily {
        match self {
            Self::ResidualMlp(_) => TransitionFamily::ResidualMlp,
            Self::Salt(_) => TransitionFamily::Salt,
            Self::ActionPrefix(_) => TransitionFamily::ActionPrefix,
        }
    }

    /// The next latent `[B, D]` from latents `[B, D]` and actions `[B, A]`.
    pub fn step(&self, latent: Tensor<B, 2>, action: Tensor<B, 2>) -> Tensor<B, 2> {
        match self {
            Self::ResidualMlp(m) => m.step(latent, action),
            Self::Salt(m) => m.step(latent, action),
            Self::ActionPrefix(m) => {
                let [batch, d] = latent.dims();
                m.predict_prefixes(latent, action.unsqueeze_dim::<3>(1))
                    .reshape([batch, d])
            }
        }
    }

    /// [`Self::step`] and the change gate's logits `[B, P]` that gated it (see
    /// [`ResidualMlp`]); `None` for a member without a gate.
    pub fn step_gated(
        &self,
        latent: Tensor<B, 2>,
        action: Tensor<B, 2>,
    ) -> (Tensor<B, 2>, Option<Tensor<B, 2>>) {
        match self {
            Self::ResidualMlp(m) => m.step_gated(latent, action),
            Self::Salt(_) | Self::ActionPrefix(_) => (self.step(latent, action), None),
        }
    }

    /// Latents `[B, H, D]` reached after each of `actions` `[B, H, A]` from `latent`
    /// `[B, D]`, open loop, each step fed the member's own previous prediction.
    /// Autoregressive families take `H` steps; the action-prefix family takes one pass
    /// per `prefix_horizon` actions.
    pub fn rollout(&self, latent: Tensor<B, 2>, actions: Tensor<B, 3>) -> Tensor<B, 3> {
        self.rollout_gated(latent, actions).0
    }

    /// [`Self::rollout`] and the change gate's logits `[B, H, P]` of every step (the
    /// logits that gated it; `None` for a member without a gate).
    pub fn rollout_gated(
        &self,
        latent: Tensor<B, 2>,
        actions: Tensor<B, 3>,
    ) -> (Tensor<B, 3>, Option<Tensor<B, 3>>) {
        let [batch, horizon, action_dim] = actions.dims();
        match self {
            Self::ActionPrefix(m) => {
                let mut parts = Vec::new();
                let mut start = latent;
                let mut done = 0;
                while done < horizon {
                    let len = m.max_horizon().min(horizon - done);
                    let part = m.predict_prefixes(start, actions.clone().narrow(1, done, len));
                    let d = part.dims()[2];
                    start = part.clone().narrow(1, len - 1, 1).reshape([batch, d]);
                    parts.push(part);
                    done += len;
                }
                (Tensor::cat(parts, 1), None)
            }
            Self::Salt(m) => (m.rollout(latent, actions), None),
            Self::ResidualMlp(m) => {
                let mut latent = latent;
                let mut steps = Vec::with_capacity(horizon);
                let mut gates = Vec::with_capacity(horizon);
                for h in 0..horizon {
                    let action = actions.clone().narrow(1, h, 1).reshape([batch, action_dim]);
                    let (next, logits) = m.step_gated(latent, action);
                    latent = next;
                    steps.push(latent.clone());
                    gates.extend(logits);
                }
                let gates = (!gates.is_empty()).then(|| Tensor::stack(gates, 1));
                (Tensor::stack(steps, 1), gates)
            }
        }
    }
}
