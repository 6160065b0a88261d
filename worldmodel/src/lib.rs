//! Latent world models for imago: a JEPA-style encoder with an EMA target, an
//! ensemble of transition members of one of three families (residual MLP, SALT,
//! action-prefix), heads for reward, continuation, value and a latent actor,
//! batched imagination, planning by sampling (MPPI) in it, critics trained on imagined lambda-returns, and the statistics that say how wrong imagined rollouts are.
//!
//! Everything is generic over the burn backend; `imago-runtime` instantiates it.
//! `docs/worldmodel.md` explains the design and compares the families.

pub mod config;
pub mod critic;
pub mod ema;
pub mod encoder;
pub mod host;
pub mod imagine;
pub mod loss;
pub mod metrics;
pub mod mlp;
pub mod model;
pub mod plan;
pub mod probe;
pub mod transition;

pub use config::{TransitionFamily, WorldModelConfig};
pub use critic::{LatentCritic, LatentCriticConfig, imagined_returns};
pub use encoder::ObservationEncoder;
pub use host::{HostImagination, HostPlan, HostWorldModel};
pub use imagine::{
    ImaginationConfig, ImaginedRollout, LatentActor, LatentPolicy, OpenLoopActions, imagine,
};
pub use loss::{
    CHANGE_THRESHOLD, LOSS_PARTS, LossWeights, Supervision, WorldModelBatch, WorldModelLoss,
    world_model_loss,
};
pub use model::{EnsembleRollout, WorldModel};
pub use plan::{
    ImaginedReturn, PlanReward, PlannedSequence, PlannerConfig, SequenceDistribution,
    plan_sequences,
};
pub use probe::{LatentProbe, ProbeError};
pub use transition::{ActionPrefix, ResidualMlp, Salt, SaltErrorSplit, TransitionMember};

#[cfg(test)]
mod tests;
