//! Learning from recorded episodes: behaviour cloning ([`bc`]), the latent world model
//! ([`world_model`]), advantage-weighted fine-tuning ([`finetune`]), and a LeRobot
//! policy trained through its own loss ([`lerobot_update`] on [`lerobot_batches`]).

pub mod bc;
pub mod finetune;
pub mod frame_shift;
pub mod lerobot_batches;
pub mod lerobot_update;
pub mod schedule;
pub mod weight_average;
pub mod world_model;

/// Largest number of optimiser steps any config or flag may ask for.
pub const MAX_STEPS: usize = 10_000_000;
/// Largest training batch (transitions or windows) any config or flag may ask for.
pub const MAX_BATCH: usize = 4096;
