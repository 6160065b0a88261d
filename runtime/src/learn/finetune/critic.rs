//! Training the latent critic: the value head on imagined lambda-returns of the
//! current (latent) policy, HABC's viability and efficiency heads on real outcomes.

use burn::Dispatch;
use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use imago_policies::segment_credit;
use imago_worldmodel::loss::binary_cross_entropy_with_logits;
use imago_worldmodel::{
    HostPlan, HostWorldModel, LatentActor, LatentCritic, WorldModel, imagine, imagined_returns,
};
use rand::RngExt;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::config::{FinetuneConfig, FinetuneMethod};
use super::latents::EncodedEpisodes;
use crate::device::ResolvedDevice;
use crate::store::replay::{Episode, transition_indices};

/// Mean critic losses over a round's last steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CriticLosses {
    /// Value regression on imagined lambda-returns.
    pub value: f32,
    /// Viability classification (HABC).
    pub viability: f32,
    /// Efficiency regression on successful segments (HABC).
    pub efficiency: f32,
}

/// HABC's labels: every policy-executed transition's row and success, and the
/// efficiency target `gamma^(steps to the goal - 1)` of those in successful segments.
struct OutcomeLabels {
    viability: Vec<(usize, f32)>,
    efficiency: Vec<(usize, f32)>,
}

fn outcome_labels(episodes: &[Episode], encoded: &EncodedEpisodes, discount: f32) -> OutcomeLabels {
    let mut labels = OutcomeLabels {
        viability: Vec::new(),
        efficiency: Vec::new(),
    };
    for (e, episode) in episodes.iter().enumerate() {
        let interventions: Vec<bool> = episode.transitions.iter().map(|t| t.intervention).collect();
        for (t, credit) in segment_credit(&interventions, episode.end.success)
            .into_iter()
            .enumerate()
        {
            let Some(credit) = credit else { continue };
            let row = encoded.row(e, t);
            labels.viability.push((row, credit.success as u8 as f32));
            if credit.success {
                labels
                    .efficiency
                    .push((row, discount.powi(credit.steps_to_end as i32 - 1)));
            }
        }
    }
    labels
}

/// Picks `n` random entries of `from`.
/// The value head's loss on `start` latents: the squared error to the
/// lambda-returns of `world_model`'s latent actor imagined from them (on the host copy
/// when there is one), with the critic's own values as bootstrap.
fn imagined_value_loss(
    critic: &LatentCritic<Dispatch>,
    (world_model, host): (&WorldModel<Dispatch>, Option<&HostWorldModel>),
    start: Tensor<<Dispatch as AutodiffBackend>::InnerBackend, 2>,
    config: &FinetuneConfig,
) -> anyhow::Result<Tensor<Dispatch, 1>> {
    let (n, h) = (start.dims()[0], config.imagination.horizon);
    let rollout = match host {
        Some(host) => {
            let device = start.device();
            let start: Vec<f32> = start
                .into_data()
                .convert::<f32>()
                .to_vec()
                .map_err(|e| anyhow::anyhow!("reading imagination's start latents: {e:?}"))?;
            host.imagine(&start, HostPlan::LatentActor, &config.imagination)
                .into_rollout(&device)
        }
        None => imagine(
            world_model,
            start,
            &LatentActor(world_model),
            &config.imagination,
        ),
    };
    let d = rollout.latents.dims()[2];
    let values = critic
        .valid()
        .value(rollout.latents.clone().reshape([n * (h + 1), d]))
        .reshape([n, h + 1]);
    let targets = imagined_returns(
        &rollout,
        values,
        config.discount as f64,
        config.lambda as f64,
    );
    let visited = rollout.latents.narrow(1, 0, h).reshape([n * h, d]);
    let predicted = critic.value(Tensor::from_inner(visited)).reshape([n, h]);
    let error = (predicted - Tensor::from_inner(targets.returns)).powf_scalar(2.0);
    Ok((error * Tensor::from_inner(targets.weights)).mean())
}

fn sample<T: Copy>(from: &[T], n: usize, rng: &mut StdRng) -> Vec<T> {
    (0..n)
        .map(|_| from[rng.random_range(0..from.len())])
        .collect()
}

/// Trains `critic` for `config.critic_steps` steps on `episodes` (encoded as
/// `encoded` by `world_model`). The value head (imagination methods) regresses the
/// lambda-returns of `world_model`'s latent actor rolled from real start states, with
/// the uncertainty-penalised reward and the critic's own values as bootstrap; the HABC
/// heads (HABC only) fit the segment outcomes of policy-executed transitions. Methods
/// that need neither (`awr-returns`) leave the critic as it is.
pub fn train_critic(
    mut critic: LatentCritic<Dispatch>,
    world_model: &WorldModel<Dispatch>,
    encoded: &EncodedEpisodes,
    episodes: &[Episode],
    config: &FinetuneConfig,
    device: &ResolvedDevice,
    rng: &mut StdRng,
) -> anyhow::Result<(LatentCritic<Dispatch>, CriticLosses)> {
    let transition_rows: Vec<usize> = transition_indices(episodes)
        .into_iter()
        .map(|(e, t)| encoded.row(e, t))
        .collect();
    anyhow::ensure!(
        !transition_rows.is_empty(),
        "no transition to train the critic on"
    );
    let habc = (config.method == FinetuneMethod::Habc)
        .then(|| outcome_labels(episodes, encoded, config.discount));
    if habc.is_none() && !config.method.uses_imagination() {
        // Return advantages need no critic.
        return Ok((critic, CriticLosses::default()));
    }
    let mut optimizer = AdamConfig::new()
        .with_grad_clipping(Some(burn::grad_clipping::GradientClippingConfig::Norm(1.0)))
        .init();
    let n = config.critic_batch;
    // On a CPU device imagination runs on the host, the world model's weights read
    // back once for the round (it does not change while the critic trains).
    let host = config
        .method
        .uses_imagination()
        .then(|| HostWorldModel::for_device(world_model, &encoded.latents.device()))
        .flatten();
    let mut losses = Vec::with_capacity(config.critic_steps);
    for _ in 0..config.critic_steps {
        let mut terms: Vec<Tensor<Dispatch, 1>> = Vec::with_capacity(3);
        let mut parts = CriticLosses::default();
        if config.method.uses_imagination() {
            let starts = sample(&transition_rows, n, rng);
            let value_loss = imagined_value_loss(
                &critic,
                (world_model, host.as_ref()),
                encoded.select(&starts),
                config,
            )?;
            parts.value = value_loss.clone().into_scalar().elem();
            terms.push(value_loss);
        }
        if let Some(labels) = &habc {
            if !labels.viability.is_empty() {
                let picked = sample(&labels.viability, n, rng);
                let (index, target): (Vec<usize>, Vec<f32>) = picked.into_iter().unzip();
                let logits = critic.viability_logit(Tensor::from_inner(encoded.select(&index)));
                let target = Tensor::from_data(TensorData::new(target, [n]), &device.training);
                let loss = binary_cross_entropy_with_logits(logits, target);
                parts.viability = loss.clone().into_scalar().elem();
                terms.push(loss);
            }
            if !labels.efficiency.is_empty() {
                let picked = sample(&labels.efficiency, n, rng);
                let (index, target): (Vec<usize>, Vec<f32>) = picked.into_iter().unzip();
                let predicted = critic.efficiency(Tensor::from_inner(encoded.select(&index)));
                let target = Tensor::<Dispatch, 1>::from_data(
                    TensorData::new(target, [n]),
                    &device.training,
                );
                let loss = (predicted - target).powf_scalar(2.0).mean();
                parts.efficiency = loss.clone().into_scalar().elem();
                terms.push(loss);
            }
        }
        anyhow::ensure!(
            [parts.value, parts.viability, parts.efficiency]
                .iter()
                .all(|v| v.is_finite()),
            "critic loss is not finite: {parts:?}"
        );
        losses.push(parts);
        let Some(total) = terms.into_iter().reduce(|a, b| a + b) else {
            break;
        };
        let grads = GradientsParams::from_grads(total.backward(), &critic);
        critic = optimizer.step(config.critic_learning_rate, critic, grads);
    }
    let tail = &losses[losses.len().saturating_sub(20)..];
    let mean =
        |f: fn(&CriticLosses) -> f32| tail.iter().map(f).sum::<f32>() / tail.len().max(1) as f32;
    Ok((
        critic,
        CriticLosses {
            value: mean(|l| l.value),
            viability: mean(|l| l.viability),
            efficiency: mean(|l| l.efficiency),
        },
    ))
}
