//! A LeRobot Diffusion Policy as it runs on a robot (LeRobot's `DiffusionPolicy` with
//! its pre- and post-processors): raw observations normalised by the dataset's
//! statistics, the last `n_obs_steps` of them kept (the first copied until there are
//! enough), a chunk denoised whenever the queue of actions runs dry, its
//! `n_action_steps` actions executed one per tick (receding horizon), each
//! unnormalised back to the robot's units.

use std::collections::VecDeque;

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use imago_robots::bounds::ConfigError;

use super::config::DiffusionPolicyConfig;
use super::model::{DiffusionModel, ObservationHistory};
use super::rgb_encoder::ImageCrop;
use super::sampling::ChunkNoise;
use super::scheduler::SamplerKind;
use crate::lerobot::features::{ACTION_KEY, ENV_STATE_KEY, STATE_KEY};
use crate::lerobot::{PolicyProcessors, TickObservation};
use crate::lora::LoraConfig;

/// A batch of demonstrations in the robot's units, as LeRobot's training reads it:
/// `history` of `n_obs_steps` raw observations (`ObservationHistory`'s shapes, not yet
/// normalised), the `horizon` actions from the oldest on, and which of them are
/// padding past the episode's end.
#[derive(Debug, Clone)]
pub struct DemonstrationBatch<B: Backend> {
    /// The observations, raw.
    pub history: ObservationHistory<B>,
    /// `[batch, horizon, action_dim]`, raw.
    pub actions: Tensor<B, 3>,
    /// `[batch, horizon]`.
    pub action_is_pad: Option<Tensor<B, 2, Bool>>,
    /// Where the batch's images are cropped ([`DiffusionPolicy::training_crop`]).
    pub crop: ImageCrop,
}

/// A Diffusion Policy with its processors.
#[derive(Debug)]
pub struct DiffusionPolicy<B: Backend> {
    /// The network.
    pub model: DiffusionModel<B>,
    /// LeRobot's config it was built from.
    pub config: DiffusionPolicyConfig,
    processors: PolicyProcessors,
}

/// What one episode (or one batch of episodes ticking together) keeps between ticks:
/// LeRobot's queues of normalised observations and of the chunk's actions left.
/// A new episode starts from [`Default`].
#[derive(Debug)]
pub struct DiffusionEpisode<B: Backend> {
    history: VecDeque<TickObservation<B>>,
    actions: VecDeque<Tensor<B, 2>>,
}

impl<B: Backend> Default for DiffusionEpisode<B> {
    fn default() -> Self {
        Self {
            history: VecDeque::new(),
            actions: VecDeque::new(),
        }
    }
}

impl<B: AutodiffBackend> DiffusionPolicy<B> {
    /// The same policy without gradient tracking: what acts while it trains.
    pub fn valid(&self) -> DiffusionPolicy<B::InnerBackend> {
        DiffusionPolicy::new(
            self.model.valid(),
            self.config.clone(),
            self.processors.clone(),
        )
    }
}

impl<B: Backend> DiffusionPolicy<B> {
    /// The policy set for LoRA fine-tuning ([`DiffusionModel::with_lora`]).
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
    pub fn new(
        model: DiffusionModel<B>,
        config: DiffusionPolicyConfig,
        processors: PolicyProcessors,
    ) -> Self {
        Self {
            model,
            config,
            processors,
        }
    }

    /// Its normalisers (LeRobot's processors' statistics).
    pub fn processors(&self) -> &PolicyProcessors {
        &self.processors
    }

    /// The same policy (a copy of its weights) denoising with `sampler` in `steps`
    /// steps: what `imago accelerate` tries against the policy as configured.
    pub fn sampling_with(&self, sampler: SamplerKind, steps: usize) -> Result<Self, ConfigError> {
        Ok(Self::new(
            self.model.clone().with_sampler(sampler, steps)?,
            self.config.clone(),
            self.processors.clone(),
        ))
    }

    /// Where a training batch's images are cropped, as LeRobot's training does: with
    /// `crop_is_random` (and a crop), one offset for the whole batch, each side drawn
    /// by `draw(n)` (uniform in `0..n`); else the centre.
    pub fn training_crop(&self, mut draw: impl FnMut(usize) -> usize) -> ImageCrop {
        let image = self.config.input_features.camera_shape().ok().flatten();
        match (self.config.crop_is_random, self.config.crop_shape, image) {
            (true, Some([height, width]), Some([_, h, w])) if height <= h && width <= w => {
                ImageCrop::At([draw(h - height + 1), draw(w - width + 1)])
            }
            _ => ImageCrop::Centre,
        }
    }

    /// LeRobot's `select_action`: the action for this tick of `episode` `[batch,
    /// action_dim]` in the robot's units, denoising a new chunk (noise from `noise`)
    /// when its queue is empty.
    pub fn select_action(
        &self,
        episode: &mut DiffusionEpisode<B>,
        observation: TickObservation<B>,
        noise: &mut impl ChunkNoise<B>,
    ) -> Tensor<B, 2> {
        let mut actions = self.select_actions(vec![(episode, observation)], noise);
        actions.pop().expect("one action per episode")
    }

    /// [`Self::select_action`] for many episodes at once: the episodes whose queues
    /// are empty denoise their chunks together, as one batch (what makes a lock-step
    /// evaluation of many episodes affordable).
    pub fn select_actions(
        &self,
        lanes: Vec<(&mut DiffusionEpisode<B>, TickObservation<B>)>,
        noise: &mut impl ChunkNoise<B>,
    ) -> Vec<Tensor<B, 2>> {
        let cameras = self.config.camera_keys();
        let n = self.model.shape().n_obs_steps;
        let mut episodes = Vec::with_capacity(lanes.len());
        for (episode, observation) in lanes {
            let observation = observation.normalised(&self.processors.inputs, &cameras);
            while episode.history.len() < n {
                episode.history.push_back(observation.clone());
            }
            episode.history.push_back(observation);
            while episode.history.len() > n {
                episode.history.pop_front();
            }
            episodes.push(episode);
        }
        let needing: Vec<usize> = (0..episodes.len())
            .filter(|&i| episodes[i].actions.is_empty())
            .collect();
        if !needing.is_empty() {
            // Each kept step of the episodes that need a chunk, as one batch.
            let batched: Vec<TickObservation<B>> = (0..n)
                .map(|step| {
                    TickObservation::cat(
                        needing
                            .iter()
                            .map(|&i| episodes[i].history[step].clone())
                            .collect(),
                    )
                })
                .collect();
            let chunk = self.denoise(ObservationHistory::stacked(&batched), noise);
            for (j, &i) in needing.iter().enumerate() {
                let own = chunk.clone().narrow(0, j, 1);
                let steps = own.dims()[1];
                episodes[i]
                    .actions
                    .extend((0..steps).map(|k| own.clone().narrow(1, k, 1).squeeze_dim(1)));
            }
        }
        episodes
            .into_iter()
            .map(|episode| {
                let action = episode.actions.pop_front().expect("a chunk is queued");
                self.processors.outputs.unnormalise(ACTION_KEY, action)
            })
            .collect()
    }

    /// A chunk of normalised actions for `history`, one per sample.
    fn denoise(
        &self,
        history: ObservationHistory<B>,
        noise: &mut impl ChunkNoise<B>,
    ) -> Tensor<B, 3> {
        let [batch, _, _] = history.state.dims();
        let device = history.state.device();
        let shape = [
            batch,
            self.model.shape().horizon,
            self.config.action_dim().unwrap_or(1),
        ];
        let initial = noise.initial(shape, &device);
        self.model
            .generate_actions(&history, initial, |t| noise.step(t, shape, &device))
    }

    /// The training loss of each demonstration of `batch` (LeRobot's preprocessor,
    /// then `compute_loss`), noised with `noise` `[batch, horizon, action_dim]` to
    /// `timesteps`.
    pub fn losses(
        &self,
        batch: DemonstrationBatch<B>,
        (noise, timesteps): (Tensor<B, 3>, &[usize]),
    ) -> Tensor<B, 1> {
        let cameras = self.config.camera_keys();
        let h = batch.history;
        let history = ObservationHistory {
            state: self.processors.inputs.normalise(STATE_KEY, h.state),
            images: h
                .images
                .into_iter()
                .zip(&cameras)
                .map(|(image, key)| self.processors.inputs.normalise(key, image))
                .collect(),
            env_state: h
                .env_state
                .map(|e| self.processors.inputs.normalise(ENV_STATE_KEY, e)),
        };
        let actions = self.processors.inputs.normalise(ACTION_KEY, batch.actions);
        self.model.losses(
            (&history, batch.crop),
            actions,
            (noise, timesteps),
            batch.action_is_pad,
        )
    }
}
