//! What the command line's commands run, each from its inputs to its outputs: the
//! demo, benchmarks (the bridge's round trip among them), offline training from a replay (policy, world model,
//! fine-tuning), the offline promotion test (`gate`) and certified acceleration (`accelerate`), world-model scoring, replay inspection, the device check, and the
//! tables they print.

pub mod accelerate;
pub mod accelerate_lerobot;
pub mod bench;
pub mod bench_bridge;
pub mod bench_learner;
pub mod bench_lerobot;
pub mod demo;
pub mod device_check;
pub mod export_policy;
pub mod finetune;
pub mod gate;
pub mod inspect;
pub mod report;
pub mod retarget;
pub mod train;
pub mod train_lerobot;
pub mod train_world_model;
