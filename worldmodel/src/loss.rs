//! The world model's training objective.

use burn::prelude::*;
use burn::tensor::activation::relu;
use imago_policies::PolicyInput;
use serde::{Deserialize, Serialize};

use crate::model::WorldModel;

/// How transitions are supervised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Supervision {
    /// Every step predicted from the encoding of the real previous observation.
    OneStep,
    /// Predictions fed back in for the whole window (the model's own rollouts), which
    /// is what imagination does; the default.
    MultiStep,
}

/// Weights of the terms of [`world_model_loss`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LossWeights {
    /// Latent prediction error against the target encoder.
    pub prediction: f64,
    /// The prediction error `k` steps into a window is weighted by `decay^k`
    /// (normalised), as in TD-MPC2: later steps carry all earlier errors and would
    /// otherwise drown the one-step signal.
    pub prediction_decay: f64,
    /// Variance hinge (each latent dimension's batch std at least 1), against collapse.
    pub variance: f64,
    /// Off-diagonal covariance of latents, against redundant dimensions.
    pub covariance: f64,
    /// Reward regression.
    pub reward: f64,
    /// Continuation classification.
    pub continuation: f64,
    /// Value regression on discounted returns.
    pub value: f64,
    /// Latent actor regression on recorded actions.
    pub actor: f64,
    /// Proprioception decoded from the start latent and every predicted one, against
    /// the recorded values (models with a state decoder; others ignore it). Above 0,
    /// training gives a new model a state decoder. 0 by default: on reacher2d it cost
    /// the demo's fine-tuning on imagined returns (32.0% against 57.5% on seed 0);
    /// on pusht, 10 (3000 steps) made the decoded predictions beat copying the
    /// measured state from 3 ticks on, and 300 with the state in the latent by 54% at
    /// 5 ticks (docs/worldmodel.md).
    pub state: f64,
    /// Binary cross-entropy of the residual members' change gates against whether
    /// each measured-state entry changed by more than [`CHANGE_THRESHOLD`] in the step
    /// (models whose latent holds the state; others ignore it): the gate as a contact
    /// classifier. The gate keeps pusht's resting block still from the prediction
    /// error alone too; with this term its predictions measured the same on one seed
    /// (docs/worldmodel.md).
    pub change: f64,
}

/// A measured-state entry "changed" in one step when it moved by more than this, in
/// the proprioception's units (pusht's normalised positions: 1/40 of a world unit; a
/// resting body's solver drift stays below it, a push moves the block 100 times more).
pub const CHANGE_THRESHOLD: f32 = 1e-4;

impl LossWeights {
    /// Whether training gives a new model a state decoder: the `state` term weighs
    /// something.
    pub fn decodes_state(&self) -> bool {
        self.state > 0.0
    }

    /// Every weight is finite and at least 0, `prediction_decay` in (0, 1]; the error
    /// names the key.
    pub fn validate(&self) -> Result<(), imago_robots::bounds::ConfigError> {
        use imago_robots::bounds::in_range;
        for (key, value) in [
            ("prediction", self.prediction),
            ("variance", self.variance),
            ("covariance", self.covariance),
            ("reward", self.reward),
            ("continuation", self.continuation),
            ("value", self.value),
            ("actor", self.actor),
            ("state", self.state),
            ("change", self.change),
        ] {
            in_range(key, value, 0.0..=1e6)?;
        }
        in_range("prediction_decay", self.prediction_decay, 1e-6..=1.0)
    }
}

impl Default for LossWeights {
    fn default() -> Self {
        Self {
            prediction: 1.0,
            prediction_decay: 0.7,
            variance: 1.0,
            covariance: 0.04,
            reward: 1.0,
            continuation: 0.1,
            value: 0.5,
            actor: 1.0,
            state: 0.0,
            change: 1.0,
        }
    }
}

/// A batch of `B` windows of `H` recorded steps.
#[derive(Debug, Clone)]
pub struct WorldModelBatch<B: Backend> {
    /// The first observation of every window, `B` of them.
    pub starts: PolicyInput<B>,
    /// Every observation of every window, window-major: `B * (H + 1)`.
    pub frames: PolicyInput<B>,
    /// Executed actions in units of the action limit, `[B, H, A]`.
    pub actions: Tensor<B, 3>,
    /// Rewards, `[B, H]`.
    pub rewards: Tensor<B, 2>,
    /// 1 where the episode goes on after the step (a step-limit cut counts as going
    /// on), `[B, H]`.
    pub continues: Tensor<B, 2>,
    /// Discounted returns from each step's observation, `[B, H]`.
    pub returns: Tensor<B, 2>,
    /// Bootstrap weight of every window for every member, `[N, B]`.
    pub member_weights: Tensor<B, 2>,
}

/// Names of the entries of [`WorldModelLoss::parts`], in order.
pub const LOSS_PARTS: [&str; 9] = [
    "prediction",
    "variance",
    "covariance",
    "reward",
    "continuation",
    "value",
    "actor",
    "state",
    "change",
];

/// The objective and its unweighted terms.
#[derive(Debug, Clone)]
pub struct WorldModelLoss<B: Backend> {
    /// The weighted sum, `[1]`.
    pub total: Tensor<B, 1>,
    /// Unweighted terms, `[9]`, named by [`LOSS_PARTS`] (one read-back for all).
    pub parts: Tensor<B, 1>,
}

/// The JEPA objective on `batch`: members predict the target encoder's latents of the
/// window (fed their own predictions under [`Supervision::MultiStep`]); a variance and
/// covariance regulariser on the online latents prevents collapse; the heads read the
/// latents the transition produced (as in TD-MPC2), so they are trained on the kind of
/// latent imagination feeds them; a state decoder reads the proprioception back from
/// the start latent and every predicted one, and the members' change gates (where the
/// latent holds the state) classify which of its entries changed in each step, on the
/// logits that gated each step.
pub fn world_model_loss<B: Backend>(
    model: &WorldModel<B>,
    batch: &WorldModelBatch<B>,
    supervision: Supervision,
    weights: &LossWeights,
) -> WorldModelLoss<B> {
    let [b, h, a] = batch.actions.dims();
    let target = model.encode_target(&batch.frames);
    let d = target.dims()[1];
    let target = target.reshape([b, h + 1, d]);
    let next_targets = target.narrow(1, 1, h);

    let (start, predictions, gates): (_, Vec<Tensor<B, 3>>, Vec<Option<Tensor<B, 3>>>) =
        match supervision {
            Supervision::MultiStep => {
                let start = model.encode(&batch.starts);
                let (predictions, gates) = model
                    .members()
                    .iter()
                    .map(|m| m.rollout_gated(start.clone(), batch.actions.clone()))
                    .unzip();
                (start, predictions, gates)
            }
            Supervision::OneStep => {
                let online = model.encode(&batch.frames).reshape([b, h + 1, d]);
                let inputs = online.clone().narrow(1, 0, h).reshape([b * h, d]);
                let actions = batch.actions.clone().reshape([b * h, a]);
                let (predictions, gates) = model
                    .members()
                    .iter()
                    .map(|m| {
                        let (next, logits) = m.step_gated(inputs.clone(), actions.clone());
                        let logits = logits.map(|l| {
                            let p = l.dims()[1];
                            l.reshape([b, h, p])
                        });
                        (next.reshape([b, h, d]), logits)
                    })
                    .unzip();
                (online.narrow(1, 0, 1).reshape([b, d]), predictions, gates)
            }
        };
    let decay: Vec<f32> = (0..h)
        .map(|k| weights.prediction_decay.powi(k as i32) as f32)
        .collect();
    let norm: f32 = decay.iter().sum();
    let step_weights = Tensor::<B, 3>::from_data(
        TensorData::new(
            decay.iter().map(|w| w / norm).collect::<Vec<f32>>(),
            [1, h, 1],
        ),
        &batch.actions.device(),
    );
    let per_member: Vec<Tensor<B, 1>> = predictions
        .iter()
        .map(|p| {
            ((p.clone() - next_targets.clone())
                .powf_scalar(2.0)
                .mean_dim(2)
                * step_weights.clone())
            .sum_dim(1)
            .reshape([b])
        })
        .collect();
    let member_errors = Tensor::stack::<2>(per_member, 0);
    let prediction = (member_errors * batch.member_weights.clone()).sum()
        / (batch.member_weights.clone().sum() + 1e-6);

    let (variance, covariance) = collapse_penalties(start.clone());

    let mean_prediction = Tensor::stack::<4>(predictions, 0)
        .mean_dim(0)
        .reshape([b, h, d]);
    let head_latents = Tensor::cat(
        vec![start.clone().unsqueeze_dim::<3>(1), mean_prediction],
        1,
    );
    let before = head_latents.clone().narrow(1, 0, h).reshape([b * h, d]);
    let after = head_latents.clone().narrow(1, 1, h).reshape([b * h, d]);
    let flat = |t: Tensor<B, 2>| t.reshape([b * h]);
    let reward = (model.reward(before.clone(), batch.actions.clone().reshape([b * h, a]))
        - flat(batch.rewards.clone()))
    .powf_scalar(2.0)
    .mean();
    let logits = model.continuation_logit(after);
    let labels = flat(batch.continues.clone());
    let continuation = binary_cross_entropy_with_logits(logits, labels);
    let value = (model.value(before) - flat(batch.returns.clone()))
        .powf_scalar(2.0)
        .mean();
    let state = match model.decode_state(head_latents.reshape([b * (h + 1), d])) {
        Some(decoded) => (decoded - batch.frames.proprio.clone())
            .powf_scalar(2.0)
            .mean(),
        None => Tensor::zeros([1], &batch.actions.device()),
    };
    let change = change_loss(batch, gates);
    let first_actions = batch.actions.clone().narrow(1, 0, 1).reshape([b, a]);
    let actor = (model.act(start.detach()) - first_actions)
        .powf_scalar(2.0)
        .mean();

    let terms = [
        (prediction, weights.prediction),
        (variance, weights.variance),
        (covariance, weights.covariance),
        (reward, weights.reward),
        (continuation, weights.continuation),
        (value, weights.value),
        (actor, weights.actor),
        (state, weights.state),
        (change, weights.change),
    ];
    let total = terms
        .iter()
        .map(|(term, weight)| term.clone() * *weight)
        .reduce(|acc, t| acc + t)
        .expect("nine terms");
    let parts = Tensor::cat(terms.into_iter().map(|(t, _)| t.detach()).collect(), 0);
    WorldModelLoss { total, parts }
}

/// The members' change gates against which measured-state entries changed in each
/// step (mean binary cross-entropy over members, steps and entries), from the logits
/// that gated each member's steps (`[B, H, P]`, `None` for a member without a gate);
/// 0 for a model without gates.
fn change_loss<B: Backend>(
    batch: &WorldModelBatch<B>,
    gates: Vec<Option<Tensor<B, 3>>>,
) -> Tensor<B, 1> {
    let [b, h, _] = batch.actions.dims();
    let logits: Vec<Tensor<B, 3>> = gates.into_iter().flatten().collect();
    let Some(p) = logits.first().map(|l| l.dims()[2]) else {
        return Tensor::zeros([1], &batch.actions.device());
    };
    let proprio = batch.frames.proprio.clone();
    let width = proprio.dims()[1];
    let states = proprio.reshape([b, h + 1, width]).narrow(2, 0, p);
    let change = (states.clone().narrow(1, 1, h) - states.narrow(1, 0, h)).abs();
    // `mask_fill` rather than `bool.float()`: the latter leaves the autodiff backend
    // under burn's dispatch, and the product with the logits then panics.
    let changed = change.clone().greater_elem(CHANGE_THRESHOLD);
    let labels = change
        .zeros_like()
        .mask_fill(changed, 1.0)
        .reshape([b * h * p]);
    let members = logits.len();
    let logits = Tensor::cat(logits, 0).reshape([members * b * h * p]);
    binary_cross_entropy_with_logits(logits, labels.repeat_dim(0, members))
}

/// Mean binary cross-entropy of `labels` under `logits`, in the form that cannot
/// overflow: `max(x, 0) - x y + ln(1 + exp(-|x|))` (`ln(1 + exp(x))` overflows to
/// infinity for logits above about 88, which a diverging rollout can produce).
pub fn binary_cross_entropy_with_logits<B: Backend>(
    logits: Tensor<B, 1>,
    labels: Tensor<B, 1>,
) -> Tensor<B, 1> {
    let tail = (logits.clone().abs().neg().exp() + 1.0).log();
    (relu(logits.clone()) - logits * labels + tail).mean()
}

/// VICReg's variance hinge (mean over dimensions of `max(0, 1 - std)`) and covariance
/// penalty (sum of squared off-diagonal covariances over the width) of latents `[B, D]`.
pub fn collapse_penalties<B: Backend>(latents: Tensor<B, 2>) -> (Tensor<B, 1>, Tensor<B, 1>) {
    let [b, d] = latents.dims();
    let centred = latents.clone() - latents.mean_dim(0);
    let variance = centred.clone().powf_scalar(2.0).sum_dim(0) / (b.max(2) - 1) as f64;
    let hinge = relu((variance.clone() + 1e-4).sqrt().neg() + 1.0).mean();
    let covariance = centred.clone().transpose().matmul(centred) / (b.max(2) - 1) as f64;
    let off_diagonal =
        (covariance.powf_scalar(2.0).sum() - variance.powf_scalar(2.0).sum()) / d as f64;
    (hinge, off_diagonal)
}
