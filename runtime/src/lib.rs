//! imago's runtime, in layers (docs/architecture.md draws the map):
//! - [`store`]: replays, checkpoints, atomic files, locks and output checks;
//! - [`act`]: running policies, experts and random controllers on robots
//!   (collection, evaluation, rollouts, action sampling, batched cameras);
//! - [`learn`]: behaviour cloning, world-model training and evaluation, fine-tuning;
//! - [`engine`]: the robot-side daemon (actor, writer, learner loop);
//! - [`jobs`]: what the CLI's commands run (demo, bench, offline training, inspect);
//! - beside them: [`robot`] (the robot registry) and [`bridge`] (robots in other
//!   processes, over zenoh), [`device`] (backend choice),
//!   [`telemetry`] (rerun transport and drawing), [`promotion`] (sequential
//!   champion-challenger tests), and small leaves ([`stats`],
//!   [`progress`], [`toml_file`]).
//!
//! Imports point down: jobs -> engine -> learn -> act -> store; every layer may use
//! the registry, the device, telemetry and the leaves, which use nothing above them.
//!
//! Library crates are generic over the burn backend; this crate is where they are
//! instantiated, once, with burn's `Dispatch` backend, whose device (chosen by
//! [`device::resolve`]) decides at run time whether work runs on the CPU, on wgpu or
//! on CUDA.

pub mod act;
pub mod allocator;
pub mod bridge;
pub mod device;
pub mod engine;
pub mod jobs;
pub mod learn;
pub mod progress;
pub mod promotion;
pub mod robot;
pub mod stats;
pub mod store;
pub mod telemetry;
pub mod toml_file;

#[cfg(test)]
mod config_tests;
#[cfg(test)]
mod layers_tests;
