//! LeRobot's ACT (Zhao et al. 2023, "Action Chunking with Transformers"), written once
//! in burn (issue 39). So far its transformer's encoder and decoder layers
//! ([`layers`]), which match LeRobot's `ACTEncoderLayer` and `ACTDecoderLayer`, its
//! fixed positional embeddings ([`positions`]) and its temporal ensembling
//! ([`temporal_ensemble`]).

pub mod layers;
pub mod positions;
pub mod temporal_ensemble;

pub use layers::{ActDecoderLayer, ActEncoderLayer, ActLayerConfig, FeedForwardActivation};
pub use positions::{sinusoidal_positions_1d, sinusoidal_positions_2d};
pub use temporal_ensemble::TemporalEnsembler;
