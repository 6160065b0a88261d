//! One module per `imago` command: its flags (a clap `Args` struct) and `run`, which
//! checks the flags, calls into `imago_runtime::jobs` (or the layer below) and prints
//! what happened.

pub mod accelerate;
pub mod bench;
pub mod collect;
pub mod daemon;
pub mod dataset;
pub mod demo;
pub mod devices;
pub mod eval;
pub mod gate;
pub mod inspect;
pub mod learner;
pub mod replay;
pub mod retarget;
pub mod robot_serve;
pub mod train;
pub mod wm_eval;
