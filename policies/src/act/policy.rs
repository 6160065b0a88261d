//! A LeRobot ACT policy as it runs on a robot (LeRobot's `ACTPolicy` with its pre- and
//! post-processors): each raw observation normalised by the dataset's statistics; a
//! chunk predicted when the queue of actions runs dry and its first `n_action_steps`
//! executed one per tick, or, with temporal ensembling, a chunk every tick and the
//! weighted average of every prediction for this tick executed; each action
//! unnormalised back to the robot's units. And its training loss, per sample.

use std::collections::VecDeque;

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

use super::config::ActPolicyConfig;
use super::model::ActModel;
use super::temporal_ensemble::TemporalEnsembler;
use crate::lerobot::features::ACTION_KEY;
use crate::lerobot::{PolicyProcessors, TickObservation};
use crate::lora::LoraConfig;

/// A batch of demonstrations in the robot's units: the observation and the `chunk_size`
/// actions from it on, with which of them are padding past the episode's end.
#[derive(Debug, Clone)]
pub struct ActDemonstrations<B: Backend> {
    /// The observations, raw.
    pub observation: TickObservation<B>,
    /// `[batch, chunk, action_dim]`, raw.
    pub actions: Tensor<B, 3>,
    /// `[batch, chunk]`.
    pub action_is_pad: Tensor<B, 2, Bool>,
}

/// The parts of ACT's training loss, per sample `[batch]`.
#[derive(Debug, Clone)]
pub struct ActLosses<B: Backend> {
    /// Mean absolute error over the chunk, padded actions counted as zero.
    pub l1: Tensor<B, 1>,
    /// KL divergence of the latent from the standard normal (zero without a VAE).
    pub kld: Tensor<B, 1>,
    /// `l1 + kl_weight * kld`: LeRobot's loss is their mean.
    pub total: Tensor<B, 1>,
}

/// How actions are executed between predictions.
#[derive(Debug)]
enum Execution<B: Backend> {
    /// A queue of the chunk's first `n_action_steps` actions.
    Queue(VecDeque<Tensor<B, 2>>),
    /// A prediction every tick, averaged with the earlier ones.
    Ensemble(TemporalEnsembler),
}

/// What one episode (or one batch of episodes ticking together) keeps between ticks:
/// the queue of the chunk's actions left, or the ensembler's averages. A new episode
/// starts from [`ActPolicy::new_episode`].
#[derive(Debug)]
pub struct ActEpisode<B: Backend>(Execution<B>);

/// An ACT policy with its processors.
#[derive(Debug)]
pub struct ActPolicy<B: Backend> {
    /// The network.
    pub model: ActModel<B>,
    /// LeRobot's config it was built from.
    pub config: ActPolicyConfig,
    processors: PolicyProcessors,
}

impl<B: AutodiffBackend> ActPolicy<B> {
    /// The same policy without gradient tracking: what acts while it trains.
    pub fn valid(&self) -> ActPolicy<B::InnerBackend> {
        ActPolicy::new(
            self.model.valid(),
            self.config.clone(),
            self.processors.clone(),
        )
    }
}

impl<B: Backend> ActPolicy<B> {
    /// The policy set for LoRA fine-tuning ([`ActModel::with_lora`]).
    pub fn with_lora(self, config: &LoraConfig, device: &B::Device) -> Self {
        Self {
            model: self.model.with_lora(config, device),
            ..self
        }
    }

    /// The policy with its adapters folded into its weights.
    pub fn merged(self) -> Self {
        Self {
            model: self.model.merged(),
            ..self
        }
    }

    /// The policy of `model`, built from `config`, scaled by LeRobot's `processors`.
    pub fn new(model: ActModel<B>, config: ActPolicyConfig, processors: PolicyProcessors) -> Self {
        Self {
            model,
            config,
            processors,
        }
    }

    /// The state of a new episode: nothing queued, nothing predicted.
    pub fn new_episode(&self) -> ActEpisode<B> {
        let config = &self.config;
        ActEpisode(match config.temporal_ensemble_coeff {
            Some(coeff) => Execution::Ensemble(TemporalEnsembler::new(
                coeff,
                config.chunk_size,
                config.action_dim().unwrap_or(1),
            )),
            None => Execution::Queue(VecDeque::new()),
        })
    }

    /// The normalised chunk `[batch, chunk, action_dim]` for a raw observation.
    pub fn predict_chunk(&self, observation: TickObservation<B>) -> Tensor<B, 3> {
        let observation =
            observation.normalised(&self.processors.inputs, &self.config.camera_keys());
        self.model.forward(&observation, None)
    }

    /// LeRobot's `select_action`: the action for this tick of `episode` `[batch,
    /// action_dim]` in the robot's units.
    pub fn select_action(
        &self,
        episode: &mut ActEpisode<B>,
        observation: TickObservation<B>,
    ) -> Tensor<B, 2> {
        let mut actions = self.select_actions(vec![(episode, observation)]);
        actions.pop().expect("one action per episode")
    }

    /// [`Self::select_action`] for many episodes at once: those that predict on this
    /// tick (an empty queue, or temporal ensembling) predict together, as one batch.
    pub fn select_actions(
        &self,
        lanes: Vec<(&mut ActEpisode<B>, TickObservation<B>)>,
    ) -> Vec<Tensor<B, 2>> {
        let predicting: Vec<usize> = (0..lanes.len())
            .filter(|&i| match &lanes[i].0.0 {
                Execution::Queue(queue) => queue.is_empty(),
                Execution::Ensemble(_) => true,
            })
            .collect();
        let chunks = (!predicting.is_empty()).then(|| {
            let observations: Vec<TickObservation<B>> =
                predicting.iter().map(|&i| lanes[i].1.clone()).collect();
            self.predict_chunk(TickObservation::cat(observations))
        });
        let mut out = Vec::with_capacity(lanes.len());
        for (i, (episode, _)) in lanes.into_iter().enumerate() {
            let own = predicting
                .iter()
                .position(|&p| p == i)
                .and_then(|j| chunks.as_ref().map(|c| c.clone().narrow(0, j, 1)));
            let action = match (&mut episode.0, own) {
                (Execution::Queue(queue), Some(chunk)) => {
                    queue.extend(
                        (0..self.config.n_action_steps)
                            .map(|k| chunk.clone().narrow(1, k, 1).squeeze_dim(1)),
                    );
                    queue.pop_front().expect("n_action_steps >= 1")
                }
                (Execution::Queue(queue), None) => queue.pop_front().expect("not empty"),
                (Execution::Ensemble(ensembler), Some(chunk)) => ensembled(ensembler, chunk),
                (Execution::Ensemble(_), None) => unreachable!("ensembling predicts every tick"),
            };
            out.push(self.processors.outputs.unnormalise(ACTION_KEY, action));
        }
        out
    }

    /// The training loss of each demonstration of `batch` (LeRobot's preprocessor, then
    /// `ACTPolicy.forward` in training): with a VAE, the latent is sampled as
    /// `mu + exp(log_sigma_x2 / 2) * latent_noise` (`[batch, latent_dim]`, standard
    /// normal, from the caller).
    pub fn losses(&self, batch: ActDemonstrations<B>, latent_noise: Tensor<B, 2>) -> ActLosses<B> {
        let observation = batch
            .observation
            .normalised(&self.processors.inputs, &self.config.camera_keys());
        let actions = self.processors.inputs.normalise(ACTION_KEY, batch.actions);
        let [size, chunk, width] = actions.dims();
        let pad = batch.action_is_pad;
        let distribution = self.model.latent_distribution(
            Some(observation.state.clone()),
            actions.clone(),
            pad.clone(),
        );
        let latent = distribution
            .as_ref()
            .map(|d| d.mu.clone() + d.log_sigma_x2.clone().div_scalar(2.0).exp() * latent_noise);
        let predicted = self.model.forward(&observation, latent);
        // A masked fill, not a product with the mask as floats: a boolean tensor turned
        // to floats is not tracked by an autodiff backend and cannot meet one that is.
        let padded = pad.reshape([size, chunk, 1]).expand([size, chunk, width]);
        let l1 = (actions - predicted)
            .abs()
            .mask_fill(padded, 0.0)
            .reshape([size, chunk * width])
            .mean_dim(1)
            .reshape([size]);
        let kld = match distribution {
            Some(d) => (d.log_sigma_x2.clone().add_scalar(1.0)
                - d.mu.powf_scalar(2.0)
                - d.log_sigma_x2.exp())
            .mul_scalar(-0.5)
            .sum_dim(1)
            .reshape([size]),
            None => l1.zeros_like(),
        };
        let total = l1.clone() + kld.clone().mul_scalar(self.config.kl_weight);
        ActLosses { l1, kld, total }
    }
}

/// The ensembler's action `[1, action_dim]` after this tick's `chunk` `[1, chunk,
/// action_dim]`.
fn ensembled<B: Backend>(ensembler: &mut TemporalEnsembler, chunk: Tensor<B, 3>) -> Tensor<B, 2> {
    let [batch, steps, width] = chunk.dims();
    let device = chunk.device();
    let values: Vec<f32> = chunk
        .into_data()
        .convert::<f32>()
        .to_vec()
        .unwrap_or_default();
    let per_episode: Vec<Vec<f32>> = values.chunks(steps * width).map(<[f32]>::to_vec).collect();
    let actions = ensembler
        .update(&per_episode)
        .expect("every tick's chunks have the policy's shape and batch");
    Tensor::from_data(TensorData::new(actions.concat(), [batch, width]), &device)
}
