//! Training and evaluating the latent world model on recorded episodes.
//!
//! Episodes are split deterministically by id: every [`HOLDOUT_EVERY`]-th episode
//! (`id % HOLDOUT_EVERY == HOLDOUT_EVERY - 1`) is held out of training, so
//! `imago wm-eval` on the training replay scores episodes the model never saw.

mod dataset;
mod decoded;
mod evaluate;
mod imagined;
mod ranking;
mod train;

pub use dataset::{WindowDataset, WindowTargets, observation_at, window_actions};
pub use decoded::{ContactSplitReport, DecodedReport, PhysicalQuantities, ReadoutKind};
pub(crate) use evaluate::host;
pub use evaluate::{CoverageReport, SaltSplitReport, WorldModelEvalReport, evaluate_world_model};
pub use imagined::{ImaginedWindows, log_imagined_windows};
pub use ranking::SpearmanReport;
pub use train::{
    MAX_HORIZON, WorldModelStep, WorldModelTrainConfig, log_world_model_losses, mean_loss,
    train_world_model,
};

use crate::store::replay::Episode;

/// One episode in this many is held out of world-model training.
pub const HOLDOUT_EVERY: u64 = 5;

/// Whether the episode with this id is held out of world-model training.
pub fn is_held_out(episode: u64) -> bool {
    episode % HOLDOUT_EVERY == HOLDOUT_EVERY - 1
}

/// The training and held-out episodes of `episodes`, in order.
pub fn split_episodes(episodes: &[Episode]) -> (Vec<Episode>, Vec<Episode>) {
    episodes
        .iter()
        .cloned()
        .partition(|e| !is_held_out(e.start.episode))
}

#[cfg(test)]
mod tests;
