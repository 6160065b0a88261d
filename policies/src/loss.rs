//! Imitation losses, plain or advantage-weighted: the Gaussian head's likelihood and
//! the flow head's flow-matching loss, with AdvantageFlow's pull toward the behaviour
//! policy.

use burn::prelude::*;
use burn::tensor::Distribution;

use crate::flow::flow_path;
use crate::head::{ActionHead, GaussianChunk};
use crate::host_gradient::host_imitation_loss;
use crate::input::PolicyInput;
use crate::policy::Policy;

/// Mean Gaussian negative log-likelihood (without the constant) of `target`
/// `[batch, K, A]` under `chunk`, each chunk step weighted by `weights` `[batch, K]`
/// (0 for steps past the episode's end); the weighted mean is self-normalised by the
/// weights' magnitudes (a negative weight, as a policy gradient's, pushes away).
pub fn gaussian_nll<B: Backend>(
    chunk: &GaussianChunk<B>,
    target: Tensor<B, 3>,
    weights: Tensor<B, 2>,
) -> Tensor<B, 1> {
    let z = (target - chunk.mean.clone()) * chunk.log_std.clone().neg().exp();
    let per_element = z.powf_scalar(2.0) * 0.5 + chunk.log_std.clone();
    let per_step: Tensor<B, 2> = per_element.sum_dim(2).squeeze_dim(2);
    weighted_mean(per_step, weights)
}

/// `sum(values * weights) / sum(|weights|)` (the magnitudes' sum floored at a tiny
/// value): the weighted mean for weights of one sign, and a bounded scale for signed
/// ones, whose plain sum can be near zero.
fn weighted_mean<B: Backend>(values: Tensor<B, 2>, weights: Tensor<B, 2>) -> Tensor<B, 1> {
    let total = weights.clone().abs().sum().clamp_min(1e-6);
    (values * weights).sum() / total
}

/// What an imitation step fits: recorded action chunks and how much each counts.
#[derive(Debug, Clone)]
pub struct ImitationTargets<B: Backend> {
    /// Action chunks in units of the action limit, `[batch, K, A]`.
    pub actions: Tensor<B, 3>,
    /// 1 for chunk steps inside the episode, 0 past its end, `[batch, K]`.
    pub mask: Tensor<B, 2>,
    /// Per-transition weight (advantage and importance weights; negative to push
    /// away from a chunk), `[batch]`; `None` for plain behaviour cloning.
    pub weights: Option<Tensor<B, 1>>,
}

impl<B: Backend> ImitationTargets<B> {
    pub(crate) fn step_weights(&self) -> Tensor<B, 2> {
        match &self.weights {
            Some(w) => self.mask.clone() * w.clone().unsqueeze_dim::<2>(1),
            None => self.mask.clone(),
        }
    }
}

/// AdvantageFlow's regulariser: the frozen behaviour (rollout) policy, and the weight
/// of the squared distance between its velocity field and the trained one.
#[derive(Debug)]
pub struct BehaviourAnchor<'a, B: Backend> {
    /// The policy that collected the data; never updated by this loss.
    pub policy: &'a Policy<B>,
    /// Weight of the regulariser.
    pub weight: f64,
}

impl<B: Backend> Clone for BehaviourAnchor<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for BehaviourAnchor<'_, B> {}

/// The imitation loss of `policy` on `targets`: the Gaussian negative log-likelihood,
/// or the flow-matching loss `|v(x_tau, tau) - (a - noise)|^2` at one random time and
/// noise per transition. With `anchor` (flow heads only; ignored for a Gaussian head),
/// AdvantageFlow's regulariser `weight * |v - v_behaviour|^2` at the same points is
/// added: it convexifies the advantage-weighted objective and bounds how far an update
/// moves from the policy that collected the data. A VLA with keypoint targets adds
/// their loss where the batch carries them ([`crate::VlaPolicy::summary_and_target_loss`]).
///
/// A Gaussian head's loss is computed on the host, value and gradient, where its
/// compute path says so (burn's CPU backends, by default) and the device records
/// gradients (`crate::host_gradient`); the result is the same up to float rounding.
pub fn imitation_loss<B: Backend>(
    policy: &Policy<B>,
    input: PolicyInput<B>,
    targets: &ImitationTargets<B>,
    anchor: Option<BehaviourAnchor<'_, B>>,
) -> Tensor<B, 1> {
    if let Some(vla) = policy.host_path()
        && let ActionHead::Gaussian(head) = vla.head()
        && B::ad_enabled(&targets.actions.device())
    {
        return host_imitation_loss(
            vla,
            head,
            input,
            targets.actions.clone(),
            targets.step_weights(),
        );
    }
    tensor_imitation_loss(policy, input, targets, anchor)
}

/// [`imitation_loss`] as burn tensor operations, whatever the backend.
pub(crate) fn tensor_imitation_loss<B: Backend>(
    policy: &Policy<B>,
    input: PolicyInput<B>,
    targets: &ImitationTargets<B>,
    anchor: Option<BehaviourAnchor<'_, B>>,
) -> Tensor<B, 1> {
    let step_weights = targets.step_weights();
    let origin = input.action_origin.clone();
    let (summary, target_loss) = policy.summary_and_target_loss(input.clone());
    let fit = match policy.head() {
        ActionHead::Gaussian(head) => {
            let chunk = head.forward(summary, origin);
            gaussian_nll(&chunk, targets.actions.clone(), step_weights)
        }
        ActionHead::Flow(head) => {
            let [batch, k, a] = targets.actions.dims();
            let device = targets.actions.device();
            let noise = Tensor::random([batch, k * a], Distribution::Normal(0.0, 1.0), &device);
            let tau = Tensor::random([batch], Distribution::Uniform(0.0, 1.0), &device);
            // The flow runs in displacements from the action origin.
            let data = (targets.actions.clone() - origin.unsqueeze_dim(1)).reshape([batch, k * a]);
            let (x, velocity) = flow_path(noise, data, tau.clone());
            let predicted = head.velocity(summary, x.clone(), tau.clone());
            let per_step = |v: Tensor<B, 2>| -> Tensor<B, 2> {
                v.powf_scalar(2.0)
                    .reshape([batch, k, a])
                    .sum_dim(2)
                    .squeeze_dim(2)
            };
            let fit = weighted_mean(per_step(predicted.clone() - velocity), step_weights);
            match anchor.map(|anchor| (anchor.policy, anchor.weight, anchor.policy.head())) {
                Some((behaviour_policy, weight, ActionHead::Flow(behaviour))) => {
                    let reference = behaviour
                        .velocity(behaviour_policy.summary(input), x, tau)
                        .detach();
                    fit + weighted_mean(per_step(predicted - reference), targets.mask.clone())
                        * weight
                }
                _ => fit,
            }
        }
    };
    match target_loss {
        Some(target_loss) => fit + target_loss,
        None => fit,
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;

    /// Signed weights are normalised by their magnitudes: `(1 * 1 - 3 * 2) / 4`, where
    /// the plain sum (-2) would flip the sign and double the scale.
    #[test]
    fn signed_weights_are_normalised_by_their_magnitudes() {
        let device = Default::default();
        let values = Tensor::<Flex, 2>::from_data([[1.0, 2.0]], &device);
        let weights = Tensor::<Flex, 2>::from_data([[1.0, -3.0]], &device);
        let mean: f32 = weighted_mean(values, weights).into_scalar();
        assert!((mean + 1.25).abs() < 1e-6, "{mean}");
    }
}
