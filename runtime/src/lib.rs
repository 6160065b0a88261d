//! imago's runtime: run-time backend choice, the replay store, checkpoints, the
//! behaviour-cloning trainer, closed-loop evaluation and the demo.
//!
//! Library crates are generic over the burn backend; this crate is where they are
//! instantiated, once, with burn's `Dispatch` backend, whose device (chosen by
//! [`device::resolve`]) decides at run time whether work runs on the CPU, on wgpu or
//! on CUDA.

pub mod atomic;
pub mod bc;
pub mod bench;
pub mod camera;
pub mod checkpoint;
pub mod collect;
pub mod daemon;
pub mod demo;
pub mod device;
pub mod device_check;
pub mod engine;
pub mod evaluate;
pub mod finetune;
pub mod inspect;
pub mod lock;
pub mod outputs;
pub mod paired;
pub mod progress;
pub mod replay;
pub mod report;
pub mod schedule;
pub mod stats;
pub mod telemetry;
pub mod toml_file;
pub mod train;
pub mod world_model;

#[cfg(test)]
mod config_tests;
