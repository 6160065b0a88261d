//! Learning from recorded episodes: behaviour cloning ([`bc`]), the latent world model
//! ([`world_model`]), and advantage-weighted fine-tuning ([`finetune`]).

pub mod bc;
pub mod finetune;
pub mod schedule;
pub mod world_model;
