//! CubeCL kernels shared by the CUDA and wgpu backends, each with a plain Rust
//! reference used on the CPU.
//!
//! This crate is a placeholder in the workspace layout; the kernels arrive with the
//! portable-kernels work (see `docs/architecture.md`). It holds no code yet.
