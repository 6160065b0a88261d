//! A LeRobot Diffusion Policy as it runs on a robot (LeRobot's `DiffusionPolicy` with
//! its pre- and post-processors): raw observations normalised by the dataset's
//! statistics, the last `n_obs_steps` of them kept (the first copied until there are
//! enough), a chunk denoised whenever the queue of actions runs dry, its
//! `n_action_steps` actions executed one per tick (receding horizon), each
//! unnormalised back to the robot's units.

use std::collections::VecDeque;

use burn::prelude::*;

use super::config::{ACTION_KEY, DiffusionPolicyConfig, ENV_STATE_KEY, STATE_KEY};
use super::model::{DiffusionModel, ObservationHistory};
use super::sampling::ChunkNoise;
use crate::lerobot::FeatureNormaliser;

/// One tick's observation of a batch of robots in the robot's units: proprioception
/// `[batch, state_dim]`, each camera `[batch, 3, height, width]` (pixels in [0, 1]) in
/// the config's order, the environment state `[batch, env_dim]` if read.
#[derive(Debug, Clone)]
pub struct TickObservation<B: Backend> {
    /// Proprioception.
    pub state: Tensor<B, 2>,
    /// The cameras.
    pub images: Vec<Tensor<B, 4>>,
    /// The environment state.
    pub env_state: Option<Tensor<B, 2>>,
}

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
}

/// A Diffusion Policy with its processors and its queues.
#[derive(Debug)]
pub struct DiffusionPolicy<B: Backend> {
    /// The network.
    pub model: DiffusionModel<B>,
    /// LeRobot's config it was built from.
    pub config: DiffusionPolicyConfig,
    inputs: FeatureNormaliser,
    outputs: FeatureNormaliser,
    history: VecDeque<TickObservation<B>>,
    actions: VecDeque<Tensor<B, 2>>,
}

impl<B: Backend> DiffusionPolicy<B> {
    /// The policy of `model`, built from `config`, with the preprocessor's normaliser
    /// (`inputs`) and the postprocessor's unnormaliser (`outputs`).
    pub fn new(
        model: DiffusionModel<B>,
        config: DiffusionPolicyConfig,
        (inputs, outputs): (FeatureNormaliser, FeatureNormaliser),
    ) -> Self {
        Self {
            model,
            config,
            inputs,
            outputs,
            history: VecDeque::new(),
            actions: VecDeque::new(),
        }
    }

    /// Forgets the observations and queued actions (at an episode's start).
    pub fn reset(&mut self) {
        self.history.clear();
        self.actions.clear();
    }

    /// LeRobot's `select_action`: the action for this tick `[batch, action_dim]` in the
    /// robot's units, denoising a new chunk (noise from `noise`) when the queue is empty.
    pub fn select_action(
        &mut self,
        observation: TickObservation<B>,
        noise: &mut impl ChunkNoise<B>,
    ) -> Tensor<B, 2> {
        let observation = self.normalised(observation);
        let n = self.model.shape().n_obs_steps;
        while self.history.len() < n {
            self.history.push_back(observation.clone());
        }
        self.history.push_back(observation);
        while self.history.len() > n {
            self.history.pop_front();
        }
        if self.actions.is_empty() {
            let chunk = self.denoise_chunk(noise);
            let steps = chunk.dims()[1];
            self.actions
                .extend((0..steps).map(|i| chunk.clone().narrow(1, i, 1).squeeze_dim(1)));
        }
        let action = self.actions.pop_front().expect("a chunk was just queued");
        self.outputs.unnormalise(ACTION_KEY, action)
    }

    /// A chunk of normalised actions from the observations kept.
    fn denoise_chunk(&self, noise: &mut impl ChunkNoise<B>) -> Tensor<B, 3> {
        let stack3 = |pick: &dyn Fn(&TickObservation<B>) -> Tensor<B, 2>| {
            Tensor::stack(self.history.iter().map(pick).collect(), 1)
        };
        let first = &self.history[0];
        let history = ObservationHistory {
            state: stack3(&|o| o.state.clone()),
            images: (0..first.images.len())
                .map(|c| {
                    Tensor::stack(
                        self.history.iter().map(|o| o.images[c].clone()).collect(),
                        1,
                    )
                })
                .collect(),
            env_state: first
                .env_state
                .as_ref()
                .map(|_| stack3(&|o| o.env_state.clone().expect("every tick has it"))),
        };
        let batch = first.state.dims()[0];
        let device = first.state.device();
        let shape = [
            batch,
            self.model.shape().horizon,
            self.config.action_dim().unwrap_or(1),
        ];
        let initial = noise.initial(shape, &device);
        self.model
            .generate_actions(&history, initial, |t| noise.step(t, shape, &device))
    }

    fn normalised(&self, o: TickObservation<B>) -> TickObservation<B> {
        let cameras = self.config.camera_keys();
        TickObservation {
            state: self.inputs.normalise(STATE_KEY, o.state),
            images: o
                .images
                .into_iter()
                .zip(&cameras)
                .map(|(image, key)| self.inputs.normalise(key, image))
                .collect(),
            env_state: o.env_state.map(|e| self.inputs.normalise(ENV_STATE_KEY, e)),
        }
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
            state: self.inputs.normalise(STATE_KEY, h.state),
            images: h
                .images
                .into_iter()
                .zip(&cameras)
                .map(|(image, key)| self.inputs.normalise(key, image))
                .collect(),
            env_state: h.env_state.map(|e| self.inputs.normalise(ENV_STATE_KEY, e)),
        };
        let actions = self.inputs.normalise(ACTION_KEY, batch.actions);
        self.model
            .losses(&history, actions, (noise, timesteps), batch.action_is_pad)
    }
}
