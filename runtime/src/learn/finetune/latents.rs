//! Every recorded observation of a set of episodes, encoded once per round by the
//! world model: the start states of imagination and the inputs of the critic heads.

use burn::Dispatch;
use burn::prelude::*;
use imago_policies::PolicyBatch;
use imago_worldmodel::{WorldModel, WorldModelConfig};

use crate::learn::world_model::observation_at;
use crate::store::replay::Episode;

/// Observations encoded per forward pass.
const ENCODE_BATCH: usize = 512;

/// Latents `[rows, D]` of every observation of every episode, episode after episode;
/// an episode of `T` transitions has `T + 1` rows (its final observation last).
pub struct EncodedEpisodes {
    /// The latents, on the inference device.
    pub latents: Tensor<Dispatch, 2>,
    offsets: Vec<usize>,
}

impl EncodedEpisodes {
    /// Encodes every observation of `episodes` with `model`'s online encoder.
    pub fn encode(
        model: &WorldModel<Dispatch>,
        config: &WorldModelConfig,
        episodes: &[Episode],
        device: &burn::tensor::Device<Dispatch>,
    ) -> anyhow::Result<Self> {
        let mut offsets = Vec::with_capacity(episodes.len());
        let mut rows = 0;
        for episode in episodes {
            offsets.push(rows);
            rows += episode.transitions.len() + 1;
        }
        let observations = episodes
            .iter()
            .flat_map(|e| (0..=e.transitions.len()).map(move |k| observation_at(e, k)));
        let mut batch = PolicyBatch::new(&config.input_spec());
        let mut parts = Vec::with_capacity(rows.div_ceil(ENCODE_BATCH));
        for observation in observations {
            batch.push(observation)?;
            if batch.len() == ENCODE_BATCH {
                parts.push(model.encode(&batch.to_input(device)));
                batch.clear();
            }
        }
        if !batch.is_empty() {
            parts.push(model.encode(&batch.to_input(device)));
        }
        anyhow::ensure!(!parts.is_empty(), "no observation to encode");
        Ok(Self {
            latents: Tensor::cat(parts, 0),
            offsets,
        })
    }

    /// The latents of `rows`, on the inference device.
    pub fn select(&self, rows: &[usize]) -> Tensor<Dispatch, 2> {
        let index = Tensor::<Dispatch, 1, Int>::from_data(
            TensorData::new(
                rows.iter().map(|&r| r as i64).collect::<Vec<_>>(),
                [rows.len()],
            ),
            &self.latents.device(),
        );
        self.latents.clone().select(0, index)
    }

    /// Row of observation `step` of episode `episode` (`step == T`: the final one).
    pub fn row(&self, episode: usize, step: usize) -> usize {
        self.offsets[episode] + step
    }
}
