//! One tick's observation as a LeRobot policy reads it, in the robot's units, and the
//! same scaled by the preprocessor's statistics.

use burn::prelude::*;

use super::features::{ENV_STATE_KEY, STATE_KEY};
use super::normalise::FeatureNormaliser;

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

impl<B: Backend> TickObservation<B> {
    /// The observation scaled by `normaliser`, the cameras being `cameras` (their keys,
    /// in order).
    pub fn normalised(self, normaliser: &FeatureNormaliser, cameras: &[&str]) -> Self {
        Self {
            state: normaliser.normalise(STATE_KEY, self.state),
            images: self
                .images
                .into_iter()
                .zip(cameras)
                .map(|(image, key)| normaliser.normalise(key, image))
                .collect(),
            env_state: self
                .env_state
                .map(|e| normaliser.normalise(ENV_STATE_KEY, e)),
        }
    }

    /// Observations of several episodes (each of the same features) as one batch, in
    /// order.
    pub fn cat(observations: Vec<Self>) -> Self {
        let cameras = observations[0].images.len();
        let has_env = observations[0].env_state.is_some();
        Self {
            state: Tensor::cat(observations.iter().map(|o| o.state.clone()).collect(), 0),
            images: (0..cameras)
                .map(|c| {
                    Tensor::cat(
                        observations.iter().map(|o| o.images[c].clone()).collect(),
                        0,
                    )
                })
                .collect(),
            env_state: has_env.then(|| {
                Tensor::cat(
                    observations
                        .iter()
                        .map(|o| o.env_state.clone().expect("every episode has it"))
                        .collect(),
                    0,
                )
            }),
        }
    }
}
