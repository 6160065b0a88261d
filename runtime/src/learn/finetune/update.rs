//! The policy update of a fine-tuning round: advantage-weighted imitation of recorded
//! transitions, corrected by truncated importance weights for data from older policy
//! versions.

use burn::Dispatch;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use imago_policies::{
    ActionHead, BehaviourAnchor, Policy, PolicyBatch, PolicyConfig, effective_sample_size,
    first_step_log_densities, imitation_loss, truncated_importance_weights,
};
use rand::RngExt;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::config::{FinetuneConfig, FinetuneMethod};
use crate::device::ResolvedDevice;
use crate::learn::bc::ImitationDataset;
use crate::progress;
use crate::store::replay::Episode;

/// What a round's policy update did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyUpdateReport {
    /// Transitions eligible for training (of weight above 0: demonstrations,
    /// interventions, and policy data no staler than the bound).
    pub eligible: usize,
    /// Policy transitions left out as too stale.
    pub stale: usize,
    /// Mean loss over the first 20 steps.
    pub first_loss: f32,
    /// Mean loss over the last 20 steps.
    pub last_loss: f32,
    /// Mean over steps of the importance weights' effective sample size, as a fraction
    /// of the policy transitions in the batch (1 when there were none).
    pub importance_ess_fraction: f32,
    /// Fraction of importance weights at the truncation bound.
    pub truncated_fraction: f32,
}

/// Updates `policy` (training device) for `config.policy_steps` steps on `data`, each
/// transition `(e, t)` weighted by `weights[e][t]` times its truncated importance
/// weight `min(pi(a|s) / pi_behaviour(a|s), max_ratio)` when a behaviour density was
/// recorded (Gaussian heads; demonstrations and flow-head data get 1). With
/// AdvantageFlow, `behaviour` anchors the flow head.
#[allow(clippy::too_many_arguments)]
pub fn update_policy(
    mut policy: Policy<Dispatch>,
    policy_config: &PolicyConfig,
    data: &ImitationDataset,
    weights: &[Vec<f32>],
    behaviour: Option<&Policy<Dispatch>>,
    version: u64,
    config: &FinetuneConfig,
    device: &ResolvedDevice,
    rng: &mut StdRng,
) -> anyhow::Result<(Policy<Dispatch>, PolicyUpdateReport)> {
    let episodes = data.episodes();
    let newest = newest_policy_version(episodes);
    // Transitions of weight 0 (the policy's own, under DAgger) carry nothing to learn.
    // An intervention's command never goes stale: it does not depend on the policy
    // that reached the state.
    let (eligible, stale): (Vec<usize>, Vec<usize>) = (0..data.len())
        .filter(|&i| {
            let (e, t) = data.sample(i);
            weights[e][t] > 0.0
        })
        .partition(|&i| {
            let (e, t) = data.sample(i);
            let transition = &episodes[e].transitions[t];
            let v = transition.policy_version;
            v == 0 || transition.intervention || config.fresh_enough(v, version, newest)
        });
    anyhow::ensure!(
        !eligible.is_empty(),
        "no transition fresh enough to train on"
    );
    let anchor = match (config.method, behaviour) {
        (FinetuneMethod::AdvantageFlow, Some(policy)) => Some(BehaviourAnchor {
            policy,
            weight: config.flow_regulariser,
        }),
        _ => None,
    };
    let mut optimizer = AdamConfig::new()
        .with_grad_clipping(Some(burn::grad_clipping::GradientClippingConfig::Norm(1.0)))
        .init();
    let mut batch = PolicyBatch::new(&policy_config.input_spec());
    let (mut losses, mut ess, mut truncated, mut ratios) = (vec![], vec![], 0usize, 0usize);
    let bar = progress::bar("fine-tune policy", config.policy_steps as u64);
    for step in 0..config.policy_steps {
        let indices: Vec<usize> = (0..config.batch_size)
            .map(|_| eligible[rng.random_range(0..eligible.len())])
            .collect();
        let awr: Vec<f32> = indices
            .iter()
            .map(|&i| {
                let (e, t) = data.sample(i);
                weights[e][t]
            })
            .collect();
        let n = indices.len();
        let loss = match policy.head() {
            ActionHead::Gaussian(_) => {
                let mut targets =
                    data.targets::<Dispatch>(&indices, None, &mut batch, &device.training)?;
                let actions: Vec<f32> = targets
                    .actions
                    .clone()
                    .into_data()
                    .convert::<f32>()
                    .to_vec()
                    .map_err(|e| anyhow::anyhow!("cannot read action targets: {e:?}"))?;
                let log_probs =
                    first_step_log_densities(&policy, &batch, &actions, &device.training)
                        .expect("a Gaussian head has densities");
                let mut combined = awr.clone();
                let mut batch_ratios = Vec::new();
                for (slot, (&i, now)) in indices.iter().zip(&log_probs).enumerate() {
                    let (e, t) = data.sample(i);
                    if let Some(behaviour) = episodes[e].transitions[t].behaviour_log_prob {
                        let ratio = truncated_importance_weights(
                            &[now - behaviour],
                            config.max_importance_ratio,
                        )[0];
                        truncated += (ratio >= config.max_importance_ratio) as usize;
                        combined[slot] *= ratio;
                        batch_ratios.push(ratio);
                    }
                }
                ratios += batch_ratios.len();
                ess.push(if batch_ratios.is_empty() {
                    1.0
                } else {
                    effective_sample_size(&batch_ratios) / batch_ratios.len() as f32
                });
                targets.weights = Some(Tensor::<Dispatch, 1>::from_data(
                    TensorData::new(combined, [n]),
                    &device.training,
                ));
                imitation_loss(&policy, batch.to_input(&device.training), &targets, None)
            }
            ActionHead::Flow(_) => {
                let targets =
                    data.targets::<Dispatch>(&indices, Some(awr), &mut batch, &device.training)?;
                ess.push(1.0);
                imitation_loss(&policy, batch.to_input(&device.training), &targets, anchor)
            }
        };
        let value: f32 = loss.clone().into_scalar().elem();
        anyhow::ensure!(
            value.is_finite(),
            "fine-tuning loss became {value} at step {step}"
        );
        losses.push(value);
        let grads = GradientsParams::from_grads(loss.backward(), &policy);
        policy = optimizer.step(config.learning_rate, policy, grads);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mean = |xs: &[f32]| xs.iter().sum::<f32>() / xs.len().max(1) as f32;
    Ok((
        policy,
        PolicyUpdateReport {
            eligible: eligible.len(),
            stale: stale.len(),
            first_loss: mean(&losses[..losses.len().min(20)]),
            last_loss: mean(&losses[losses.len().saturating_sub(20)..]),
            importance_ess_fraction: mean(&ess),
            truncated_fraction: truncated as f32 / ratios.max(1) as f32,
        },
    ))
}

/// The newest policy version that recorded any of `episodes` (0 for demonstrations
/// only): the version whose data is never too stale (`FinetuneConfig::fresh_enough`).
pub fn newest_policy_version(episodes: &[Episode]) -> u64 {
    episodes
        .iter()
        .flat_map(|e| &e.transitions)
        .map(|t| t.policy_version)
        .max()
        .unwrap_or(0)
}
