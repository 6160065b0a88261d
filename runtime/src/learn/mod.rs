//! Learning from recorded episodes: behaviour cloning ([`bc`]), the latent world model
//! ([`world_model`]), advantage-weighted fine-tuning ([`finetune`]), and a LeRobot
//! policy trained through its own loss ([`lerobot_update`] on [`lerobot_batches`]).

pub mod bc;
pub mod finetune;
pub mod lerobot_batches;
pub mod lerobot_update;
pub mod schedule;
pub mod weight_average;
pub mod world_model;
