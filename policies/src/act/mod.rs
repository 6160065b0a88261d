//! LeRobot's ACT (Zhao et al. 2023, "Action Chunking with Transformers"), written once
//! in burn (issue 39). Its parts, each tested alone against LeRobot's own: the
//! transformer's encoder and decoder layers ([`layers`]), the fixed positional
//! embeddings ([`positions`]) and temporal ensembling ([`temporal_ensemble`]). Around
//! them: LeRobot's `config.json` ([`config`]), the network ([`model`]) and the policy
//! with its processors and action queue ([`policy`]).

pub mod config;
pub mod layers;
pub mod model;
pub mod policy;
pub mod positions;
pub mod temporal_ensemble;

pub use config::ActPolicyConfig;
pub use layers::{ActDecoderLayer, ActEncoderLayer, ActLayerConfig, FeedForwardActivation};
pub use model::{ActModel, LatentDistribution};
pub use policy::{ActDemonstrations, ActEpisode, ActLosses, ActPolicy};
pub use positions::{sinusoidal_positions_1d, sinusoidal_positions_2d};
pub use temporal_ensemble::TemporalEnsembler;
