//! Vision-language-action policies for imago.
//!
//! A [`VlaPolicy`] turns a camera frame, an instruction and proprioception into a chunk
//! of future actions: image patches, instruction words and proprioception each become
//! tokens, a transformer mixes them, and a head reads a chunk of `K` actions out of a
//! dedicated readout token. Everything is generic over the burn backend; the backend is
//! chosen at run time by `imago-runtime`.

pub mod input;
pub mod loss;
pub mod model;
pub mod tokenizer;
pub mod vision;

pub use input::{PolicyBatch, PolicyInput, PolicyInputError};
pub use loss::gaussian_nll;
pub use model::{GaussianChunk, VlaPolicy, VlaPolicyConfig, validate_action_limit};
pub use tokenizer::{TokenizerError, VOCABULARY, WordTokenizer};
pub use vision::{film_modulate, spatial_softmax};
