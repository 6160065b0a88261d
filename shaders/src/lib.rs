//! WGSL pipelines for the wgpu path, such as batched rendering of simulated camera
//! frames.
//!
//! This crate is a placeholder in the workspace layout; the shaders arrive with the
//! portable-kernels work (see `docs/architecture.md`). It holds no code yet.
