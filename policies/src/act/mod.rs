//! LeRobot's ACT (Zhao et al. 2023, "Action Chunking with Transformers"), written once
//! in burn (issue 39). So far its transformer's encoder and decoder layers
//! ([`layers`]), which match LeRobot's `ACTEncoderLayer` and `ACTDecoderLayer`.

pub mod layers;

pub use layers::{ActDecoderLayer, ActEncoderLayer, ActLayerConfig, FeedForwardActivation};
