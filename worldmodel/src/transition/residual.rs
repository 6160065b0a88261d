//! The residual-MLP transition, `z' = z + tanh(MLP(z, a))`, with a change gate on
//! the latent's measured-state entries where the latent holds them.

use burn::prelude::*;
use burn::tensor::activation::{sigmoid, tanh};

use crate::config::WorldModelConfig;
use crate::mlp::{Mlp, MlpConfig};

/// `z' = z + tanh(MLP([z, a]))`, the output layer started near zero so an untrained
/// member copies its input. The squashing bounds one step's change to 1 per latent
/// dimension (the latents' spread is about 1, the variance term's floor), so that
/// open loop, outside the latents it was trained on, a member cannot feed its own
/// growth: without it a residual member on pusht reached errors of 1e6 in 8 steps
/// (docs/worldmodel.md, "PushT"). Inside the bound, where real steps lie, `tanh` is
/// nearly the identity.
///
/// Where the latent starts with the measured state (`state_in_latent`), the change of
/// each of those `P` entries is multiplied by a gate, `sigmoid(G([z, a]))`, the
/// predicted probability that the entry changes at all this step, trained by the
/// `change` loss on whether it did. A pushed object moves only under contact: without
/// the gate the member's small change everywhere moved pusht's resting block more
/// than copying it errs (docs/worldmodel.md); with it, an entry the gate is sure stays
/// still moves by `sigmoid` of a large negative logit times at most 1.
#[derive(Module, Debug)]
pub struct ResidualMlp<B: Backend> {
    pub(crate) delta: Mlp<B>,
    /// `[z, a] -> P` change logits; `None` for a latent without the state.
    pub(crate) gate: Option<Mlp<B>>,
}

impl<B: Backend> ResidualMlp<B> {
    /// A freshly initialised member for `config`.
    pub fn new(config: &WorldModelConfig, device: &B::Device) -> Self {
        let input = config.latent_dim + config.action_dim();
        Self {
            delta: MlpConfig::new(input, config.hidden, config.latent_dim)
                .with_output_init_std(Some(1e-3))
                .init(device),
            gate: config
                .state_in_latent
                .then(|| MlpConfig::new(input, config.hidden, config.proprio_dim).init(device)),
        }
    }

    /// The next latent `[B, D]` from latents `[B, D]` and actions `[B, A]`.
    pub fn step(&self, latent: Tensor<B, 2>, action: Tensor<B, 2>) -> Tensor<B, 2> {
        self.step_gated(latent, action).0
    }

    /// The next latent `[B, D]`, and the change gate's logits `[B, P]` that gated it
    /// (the measured-state entries change this step; `None` without a gate), so that
    /// training scores the gate on the very logits the step used.
    pub fn step_gated(
        &self,
        latent: Tensor<B, 2>,
        action: Tensor<B, 2>,
    ) -> (Tensor<B, 2>, Option<Tensor<B, 2>>) {
        let input = Tensor::cat(vec![latent.clone(), action], 1);
        let change = tanh(self.delta.forward(input.clone()));
        let Some(gate) = &self.gate else {
            return (latent + change, None);
        };
        let logits = gate.forward(input);
        let [_, d] = change.dims();
        let p = logits.dims()[1];
        let gated = Tensor::cat(
            vec![
                change.clone().narrow(1, 0, p) * sigmoid(logits.clone()),
                change.narrow(1, p, d - p),
            ],
            1,
        );
        (latent + gated, Some(logits))
    }
}
