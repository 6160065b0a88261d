//! Policies for imago and the learning rules that train them.
//!
//! [`Policy`] is the seam every caller uses ([`policy`]): an architecture reads the
//! observation its [`InputSpec`] describes into a summary, and an action head turns
//! that into a chunk of actions. The architectures: [`VlaPolicy`] and
//! [`LinearPolicy`]. A [`VlaPolicy`] turns a camera frame, an instruction and proprioception into a chunk
//! of future actions: image patches, instruction words and proprioception each become
//! tokens, a transformer mixes them, and a head (Gaussian or flow matching) reads a
//! chunk of `K` actions out of a dedicated readout token. [`loss`] holds the
//! imitation losses, plain or advantage-weighted; [`advantage`], [`habc`] and
//! [`importance`] the host-side arithmetic of advantage-weighted fine-tuning.
//! Everything is generic over the burn backend; the backend is chosen at run time by
//! `imago-runtime`.

pub mod act;
pub mod activation;
pub mod advantage;
mod attention;
pub mod diffusion;
pub mod flow;
pub mod gelu;
pub mod habc;
pub mod head;
pub mod host;
mod host_gradient;
pub mod host_linear;
mod host_math;
pub mod importance;
pub mod input;
pub mod input_spec;
pub mod lerobot;
#[cfg(test)]
mod lerobot_fixtures;
pub mod linear;
pub mod log_density;
pub mod lora;
pub mod loss;
pub mod model;
pub mod normalizer;
pub mod packed_attention;
pub mod policy;
pub mod precision;
pub mod readback;
pub mod resnet;
pub mod rows;
mod stem_host;
mod stem_tape;
pub mod temporal_conv;
pub mod tokenizer;
pub mod vision;

pub use activation::StemActivation;
pub use advantage::{
    AdvantageNormaliser, awr_weights, discounted_returns, generalised_advantages, lambda_returns,
};
pub use habc::{HabcGate, SegmentCredit, segment_credit};
pub use head::{
    ActionHead, ActionHeadKind, FlowHead, GaussianChunk, GaussianHead, HeadShape, MAX_CHUNK_LEN,
};
pub use host::{HostPolicy, HostScratch};
pub use host_linear::HostLinear;
pub use importance::{effective_sample_size, truncated_importance_weights};
pub use input::{InstructionInput, PolicyBatch, PolicyInput, PolicyInputError};
pub use input_spec::{CameraInput, InputSpec, MAIN_CAMERA};
pub use linear::{LinearPolicy, LinearPolicyConfig};
pub use log_density::{first_step_log_densities, leading_log_densities};
pub use loss::{BehaviourAnchor, ImitationTargets, gaussian_nll, imitation_loss};
pub use model::{
    MAX_PARAMETERS, MAX_PATCHES, MAX_VECTOR, VlaPolicy, VlaPolicyConfig, validate_action_limit,
};
pub use normalizer::{NormalizationMode, Normalizer};
pub use packed_attention::{PackedAttention, PackedAttentionConfig};
pub use policy::{Architecture, Policy, PolicyConfig};
pub use precision::Precision;
pub use resnet::{ChannelNorm, FrozenBatchNorm, ResNet18, ResNet18Config, ResNetNorm};
pub use rows::{linear_rows, on_rows};
pub use tokenizer::{TokenizerError, VOCABULARY, WordTokenizer};
pub use vision::{ComputePath, StemInputs, StemReading, spatial_softmax};

/// Held by every test that runs burn's autodiff backward pass on `Autodiff<Flex>`.
/// Run concurrently (cargo's test threads), a long training loop in one test and a
/// backward pass in another lost a parameter's gradient in 2 of 25 runs under burn
/// 0.21 (`host_gradient` beside `head`'s flow test): the tests take turns instead.
#[cfg(test)]
pub(crate) static AUTODIFF_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
