//! Latent world models for imago: JEPA-style encoders, transition ensembles,
//! imagination and rollout-error metrics.
//!
//! This crate is a placeholder in the workspace layout; the models arrive with the
//! world-model work (see `docs/architecture.md`). It holds no code yet.
