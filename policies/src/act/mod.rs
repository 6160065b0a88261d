//! LeRobot's ACT (Zhao et al. 2023, "Action Chunking with Transformers"), written once
//! in burn (issue 39). So far its transformer's encoder and decoder layers
//! ([`layers`]), which match LeRobot's `ACTEncoderLayer` and `ACTDecoderLayer`, and
//! its fixed positional embeddings ([`positions`]).

pub mod layers;
pub mod positions;

pub use layers::{ActDecoderLayer, ActEncoderLayer, ActLayerConfig, FeedForwardActivation};
pub use positions::{sinusoidal_positions_1d, sinusoidal_positions_2d};
