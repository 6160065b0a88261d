//! The world model: encoders, the transition ensemble and the latent heads.

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::{sigmoid, tanh};
use imago_kernels::{EnsembleStatistics, composite};
use imago_policies::PolicyInput;

use crate::config::{TransitionFamily, WorldModelConfig};
use crate::ema::ema_update;
use crate::encoder::ObservationEncoder;
use crate::mlp::{Mlp, MlpConfig};
use crate::transition::TransitionMember;

/// A JEPA-style latent world model (see `docs/worldmodel.md`): an online encoder, its
/// EMA target encoder (the training targets, never trained by gradient), an ensemble
/// of transition members, and heads for reward, continuation, value, a latent actor
/// (the behaviour policy distilled into latent space, so imagination can run a
/// policy without rendering pixels) and, optionally, the proprioception.
#[derive(Module, Debug)]
pub struct WorldModel<B: Backend> {
    encoder: ObservationEncoder<B>,
    target_encoder: ObservationEncoder<B>,
    members: Vec<TransitionMember<B>>,
    pub(crate) reward: Mlp<B>,
    pub(crate) continuation: Mlp<B>,
    pub(crate) value: Mlp<B>,
    pub(crate) actor: Mlp<B>,
    /// The proprioception read linearly from a latent (`state_decoder`).
    pub(crate) state: Option<Linear<B>>,
}

/// The ensemble's open-loop predictions, each member on its own predictions.
#[derive(Debug, Clone)]
pub struct EnsembleRollout<B: Backend> {
    /// Every member's latents, `[N, B, H, D]`.
    pub members: Tensor<B, 4>,
}

impl<B: Backend> EnsembleRollout<B> {
    /// Mean, unbiased variance and disagreement (mean standard deviation over the
    /// latent) over members, one row per `(batch, step)`: `[B * H, D]`, `[B * H, D]`
    /// and `[B * H]`. Differentiable (burn's composite ops).
    pub fn statistics(&self) -> EnsembleStatistics<B> {
        let [n, b, h, d] = self.members.dims();
        composite::ensemble_statistics(self.members.clone().reshape([n, b * h, d]))
    }
}

impl WorldModelConfig {
    /// A freshly initialised world model whose target encoder equals its encoder.
    pub fn init<B: Backend>(&self, device: &B::Device) -> WorldModel<B> {
        let encoder = self.init_encoder(device);
        let target_encoder = ema_update(self.init_encoder(device), &encoder, 0.0);
        let d = self.latent_dim;
        let a = self.action_dim();
        let head = |input, output| MlpConfig::new(input, self.hidden, output).init(device);
        WorldModel {
            encoder,
            target_encoder,
            members: (0..self.ensemble_size)
                .map(|_| TransitionMember::new(self, device))
                .collect(),
            reward: head(d + a, 1),
            continuation: head(d, 1),
            value: head(d, 1),
            actor: head(d, a),
            state: self
                .has_decoder_head()
                .then(|| LinearConfig::new(d, self.proprio_dim).init(device)),
        }
    }
}

impl<B: Backend> WorldModel<B> {
    /// The transition family of the members.
    pub fn family(&self) -> TransitionFamily {
        self.members[0].family()
    }

    /// The ensemble members.
    pub fn members(&self) -> &[TransitionMember<B>] {
        &self.members
    }

    /// Online latents `[B, D]` of a batch of observations.
    pub fn encode(&self, input: &PolicyInput<B>) -> Tensor<B, 2> {
        self.encoder.forward(input)
    }

    /// Target latents `[B, D]` (EMA encoder, no gradient): what predictions are
    /// trained towards and scored against.
    pub fn encode_target(&self, input: &PolicyInput<B>) -> Tensor<B, 2> {
        self.target_encoder.forward(input).detach()
    }

    /// Moves the target encoder towards the online encoder by `1 - decay`.
    pub fn update_target(mut self, decay: f64) -> Self {
        self.target_encoder = ema_update(self.target_encoder, &self.encoder, decay);
        self
    }

    /// Makes the target encoder's parameters not require gradients (after loading a
    /// checkpoint onto an autodiff backend).
    pub fn freeze_target(mut self) -> Self {
        self.target_encoder = self.target_encoder.no_grad();
        self
    }

    /// Every member rolled open loop on its own predictions from `latent` `[B, D]`
    /// under `actions` `[B, H, A]`.
    pub fn rollout_members(
        &self,
        latent: Tensor<B, 2>,
        actions: Tensor<B, 3>,
    ) -> EnsembleRollout<B> {
        let members = self
            .members
            .iter()
            .map(|m| m.rollout(latent.clone(), actions.clone()))
            .collect();
        EnsembleRollout {
            members: Tensor::stack(members, 0),
        }
    }

    /// The ensemble rolled as one model: at every step all members predict from the
    /// shared ensemble-mean latent; `members[:, :, h]` is their spread about step `h`
    /// alone (the "raw" disagreement of RWM-U). The action-prefix family has no
    /// intermediate shared state within a pass, so for it this equals
    /// [`Self::rollout_members`].
    pub fn rollout_shared(
        &self,
        latent: Tensor<B, 2>,
        actions: Tensor<B, 3>,
    ) -> EnsembleRollout<B> {
        if self.family() == TransitionFamily::ActionPrefix {
            return self.rollout_members(latent, actions);
        }
        let [batch, horizon, action_dim] = actions.dims();
        let d = latent.dims()[1];
        let mut shared = latent;
        let mut steps = Vec::with_capacity(horizon);
        for h in 0..horizon {
            let action = actions.clone().narrow(1, h, 1).reshape([batch, action_dim]);
            let predictions = Tensor::stack::<3>(
                self.members
                    .iter()
                    .map(|m| m.step(shared.clone(), action.clone()))
                    .collect(),
                0,
            );
            shared = predictions.clone().mean_dim(0).reshape([batch, d]);
            steps.push(predictions);
        }
        EnsembleRollout {
            members: Tensor::stack::<4>(steps, 2),
        }
    }

    /// Predicted reward `[B]` of taking `action` `[B, A]` in `latent` `[B, D]`.
    pub fn reward(&self, latent: Tensor<B, 2>, action: Tensor<B, 2>) -> Tensor<B, 1> {
        let batch = latent.dims()[0];
        self.reward
            .forward(Tensor::cat(vec![latent, action], 1))
            .reshape([batch])
    }

    /// Logit `[B]` that the episode goes on after reaching `latent` `[B, D]`.
    pub fn continuation_logit(&self, latent: Tensor<B, 2>) -> Tensor<B, 1> {
        let batch = latent.dims()[0];
        self.continuation.forward(latent).reshape([batch])
    }

    /// Probability `[B]` that the episode goes on after reaching `latent`.
    pub fn continuation(&self, latent: Tensor<B, 2>) -> Tensor<B, 1> {
        sigmoid(self.continuation_logit(latent))
    }

    /// Discounted return `[B]` expected from `latent` under the behaviour policy.
    pub fn value(&self, latent: Tensor<B, 2>) -> Tensor<B, 1> {
        let batch = latent.dims()[0];
        self.value.forward(latent).reshape([batch])
    }

    /// The proprioception `[B, P]` decoded from `latent` `[B, D]`, for a model with a
    /// state decoder or whose latent holds the state (its leading entries).
    pub fn decode_state(&self, latent: Tensor<B, 2>) -> Option<Tensor<B, 2>> {
        let p = self.state_entries();
        if p > 0 {
            return Some(latent.narrow(1, 0, p));
        }
        self.state.as_ref().map(|head| head.forward(latent))
    }

    /// Leading latent entries that are the proprioception (0: none), the encoder's.
    pub fn state_entries(&self) -> usize {
        self.encoder.passthrough
    }

    /// The state decoder's weight `[D, P]` (row-major) and bias `[P]` on the host, for
    /// a model with one (for a latent that holds the state, the map that takes its
    /// leading entries): evaluation reads predicted latents out with it.
    pub fn state_decoder_weights(&self) -> Option<(Vec<f32>, Vec<f32>)> {
        let p = self.state_entries();
        if p > 0 {
            let first = self.continuation.hidden.first();
            let d = first.unwrap_or(&self.continuation.output).weight.dims()[0];
            let mut weight = vec![0.0; d * p];
            (0..p).for_each(|i| weight[i * p + i] = 1.0);
            return Some((weight, vec![0.0; p]));
        }
        let head = self.state.as_ref()?;
        let read = |t: Tensor<B, 1>| t.into_data().convert::<f32>().to_vec::<f32>().ok();
        let weight = read(head.weight.val().flatten(0, 1))?;
        let bias = match &head.bias {
            Some(bias) => read(bias.val())?,
            None => vec![0.0; head.weight.dims()[1]],
        };
        Some((weight, bias))
    }

    /// The latent actor's action `[B, A]` (in units of the action limit) in `latent`.
    pub fn act(&self, latent: Tensor<B, 2>) -> Tensor<B, 2> {
        tanh(self.actor.forward(latent))
    }
}
