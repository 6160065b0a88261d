//! The policy update of a fine-tuning round: advantage-weighted imitation of recorded
//! transitions, corrected by truncated importance weights for data from older policy
//! versions.

use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::{Dispatch, DispatchDevice};
use imago_policies::{
    ActionHead, BehaviourAnchor, ImitationTargets, Policy, PolicyBatch, PolicyConfig,
    effective_sample_size, first_step_log_densities, imitation_loss, truncated_importance_weights,
};
use rand::RngExt;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::advantages::TransitionWeights;
use super::config::{FinetuneConfig, FinetuneMethod};
use super::ppo::PpoUpdate;
use crate::device::ResolvedDevice;
use crate::learn::bc::ImitationDataset;
use crate::learn::weight_average::WeightAverage;
use crate::progress;
use crate::store::replay::{Episode, Transition};

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
    /// Mean over steps of the importance weights' (under `ppo-returns`, the
    /// probability ratios') effective sample size, as a fraction of the policy
    /// transitions in the batch (1 when there were none).
    pub importance_ess_fraction: f32,
    /// Fraction of importance weights at the truncation bound (under `ppo-returns`:
    /// of samples whose ratio's clip was active).
    pub truncated_fraction: f32,
}

/// Updates `policy` (training device) for `config.policy_steps` steps on `data`, each
/// transition `(e, t)` weighted by `weights[e][t]` times its truncated importance
/// weight `min(pi(a|s) / pi_behaviour(a|s), max_ratio)` when a behaviour density was
/// recorded (Gaussian heads; demonstrations and flow-head data get 1). With
/// AdvantageFlow, `behaviour` anchors the flow head; with `ppo-returns`, it is the
/// policy that sampled the round's chunks and each batch is PPO's
/// ([`PpoUpdate`]: the chunks' advantages times their probability ratios, clipped,
/// beside imitation).
pub fn update_policy(
    (mut policy, policy_config): (Policy<Dispatch>, &PolicyConfig),
    (data, weighed): (&ImitationDataset, &TransitionWeights),
    behaviour: Option<&Policy<Dispatch>>,
    version: u64,
    config: &FinetuneConfig,
    device: &ResolvedDevice,
    rng: &mut StdRng,
) -> anyhow::Result<(Policy<Dispatch>, PolicyUpdateReport)> {
    let episodes = data.episodes();
    let weights = &weighed.weights;
    let (eligible, stale) =
        eligible_samples(data.episodes(), data.samples(), weights, version, config)?;
    let mut batch = PolicyBatch::new(&policy_config.input_spec());
    let ppo = match config.method {
        FinetuneMethod::PpoReturns => Some(PpoUpdate::new(
            (&policy, behaviour),
            (data, weighed),
            &eligible,
            config,
            (&mut batch, &device.training),
        )?),
        _ => None,
    };
    let anchor = match (config.method, behaviour) {
        (FinetuneMethod::AdvantageFlow, Some(policy)) => Some(BehaviourAnchor {
            policy,
            weight: config.flow_regulariser(),
        }),
        _ => None,
    };
    let mut optimizer = AdamConfig::new()
        .with_grad_clipping(Some(burn::grad_clipping::GradientClippingConfig::Norm(1.0)))
        .init();
    let (mut losses, mut ess, mut truncated, mut ratios_seen) = (vec![], vec![], 0, 0);
    let mut averaged = config.weight_average.map(WeightAverage::new);
    let bar = progress::bar("fine-tune policy", config.policy_steps as u64);
    for step in 0..config.policy_steps {
        let indices: Vec<usize> = match &ppo {
            Some(ppo) => ppo.draw(config.batch_size, rng),
            None => (0..config.batch_size)
                .map(|_| eligible[rng.random_range(0..eligible.len())])
                .collect(),
        };
        let awr: Vec<f32> = indices
            .iter()
            .map(|&i| {
                let (e, t) = data.sample(i);
                weights[e][t]
            })
            .collect();
        let n = indices.len();
        let loss = match (policy.head(), &ppo) {
            (_, Some(ppo)) => {
                let (targets, ratios) =
                    ppo.targets(&policy, (&indices, &mut batch), &device.training)?;
                truncated += ratios.clipped;
                ratios_seen += ratios.weights.len();
                ess.push(ratios.ess_fraction);
                imitation_loss(&policy, batch.to_input(&device.training), &targets, None)
            }
            (ActionHead::Gaussian(_), None) => {
                let mut targets =
                    data.targets::<Dispatch>(&indices, None, None, &mut batch, &device.training)?;
                let importance = importance_weights(
                    &policy,
                    (&batch, &targets),
                    indices.iter().map(|&i| {
                        let (e, t) = data.sample(i);
                        &episodes[e].transitions[t]
                    }),
                    config.max_importance_ratio,
                    &device.training,
                )?;
                truncated += importance.truncated;
                ratios_seen += importance.ratios;
                ess.push(importance.ess_fraction);
                let combined: Vec<f32> = awr
                    .iter()
                    .zip(&importance.weights)
                    .map(|(a, w)| a * w)
                    .collect();
                targets.weights = Some(Tensor::<Dispatch, 1>::from_data(
                    TensorData::new(combined, [n]),
                    &device.training,
                ));
                imitation_loss(&policy, batch.to_input(&device.training), &targets, None)
            }
            (ActionHead::Flow(_), None) => {
                let targets = data.targets::<Dispatch>(
                    &indices,
                    Some(awr),
                    None,
                    &mut batch,
                    &device.training,
                )?;
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
        if let Some(average) = &mut averaged {
            average.update(&policy);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(average) = &averaged {
        policy = average.apply(policy);
    }
    let report = PolicyUpdateReport {
        importance_ess_fraction: mean(&ess),
        truncated_fraction: truncated as f32 / ratios_seen.max(1) as f32,
        ..PolicyUpdateReport::of_losses((eligible.len(), stale.len()), &losses)
    };
    Ok((policy, report))
}

/// The mean of `xs` (0 for none).
fn mean(xs: &[f32]) -> f32 {
    xs.iter().sum::<f32>() / xs.len().max(1) as f32
}

impl PolicyUpdateReport {
    /// The report of an update of `eligible` transitions (`stale` left out) whose
    /// steps had `losses`, without importance weights (ESS 1, nothing truncated).
    pub fn of_losses((eligible, stale): (usize, usize), losses: &[f32]) -> Self {
        Self {
            eligible,
            stale,
            first_loss: mean(&losses[..losses.len().min(20)]),
            last_loss: mean(&losses[losses.len().saturating_sub(20)..]),
            importance_ess_fraction: 1.0,
            truncated_fraction: 0.0,
        }
    }
}

/// The indices of `samples` (transitions `(e, t)` of `episodes`) with a positive
/// weight, split into those fresh enough to train the policy's `version` on and the
/// stale ones; none fresh enough is an error. Transitions of weight 0 (the policy's own,
/// under DAgger) carry nothing to learn; an intervention's command never goes stale (it
/// does not depend on the policy that reached the state), nor does a demonstration.
pub fn eligible_samples(
    episodes: &[Episode],
    samples: &[(usize, usize)],
    weights: &[Vec<f32>],
    version: u64,
    config: &FinetuneConfig,
) -> anyhow::Result<(Vec<usize>, Vec<usize>)> {
    let newest = newest_policy_version(episodes);
    let (eligible, stale): (Vec<usize>, Vec<usize>) = (0..samples.len())
        .filter(|&i| {
            let (e, t) = samples[i];
            weights[e][t] > 0.0
        })
        .partition(|&i| {
            let (e, t) = samples[i];
            let transition = &episodes[e].transitions[t];
            let v = transition.policy_version;
            v == 0 || transition.intervention || config.fresh_enough(v, version, newest)
        });
    anyhow::ensure!(
        !eligible.is_empty(),
        "no transition fresh enough to train on"
    );
    Ok((eligible, stale))
}

/// A batch's truncated importance weights.
struct ImportanceWeights {
    /// Per sample: `min(pi(a|s) / pi_behaviour(a|s), max_ratio)` where the behaviour
    /// density was recorded, else 1.
    weights: Vec<f32>,
    /// Samples that had a behaviour density.
    ratios: usize,
    /// Of those, the ones at the truncation bound.
    truncated: usize,
    /// Their effective sample size as a fraction (1 when there were none).
    ess_fraction: f32,
}

/// The truncated importance weights of the batch `(batch, targets)` whose samples are
/// `transitions`, under `policy` (a Gaussian head) now.
fn importance_weights<'t>(
    policy: &Policy<Dispatch>,
    (batch, targets): (&PolicyBatch, &ImitationTargets<Dispatch>),
    transitions: impl Iterator<Item = &'t Transition>,
    max_ratio: f32,
    device: &DispatchDevice,
) -> anyhow::Result<ImportanceWeights> {
    let actions: Vec<f32> = targets
        .actions
        .clone()
        .into_data()
        .convert::<f32>()
        .to_vec()
        .map_err(|e| anyhow::anyhow!("cannot read action targets: {e:?}"))?;
    let now = first_step_log_densities(policy, batch, &actions, device)
        .ok_or_else(|| anyhow::anyhow!("importance weights need a Gaussian head"))?;
    let mut weights = Vec::with_capacity(now.len());
    let mut ratios = Vec::new();
    for (now, transition) in now.iter().zip(transitions) {
        let weight = match transition.behaviour_log_prob {
            Some(behaviour) => {
                let ratio = truncated_importance_weights(&[now - behaviour], max_ratio)[0];
                ratios.push(ratio);
                ratio
            }
            None => 1.0,
        };
        weights.push(weight);
    }
    Ok(ImportanceWeights {
        weights,
        ratios: ratios.len(),
        truncated: ratios.iter().filter(|&&r| r >= max_ratio).count(),
        ess_fraction: if ratios.is_empty() {
            1.0
        } else {
            effective_sample_size(&ratios) / ratios.len() as f32
        },
    })
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
