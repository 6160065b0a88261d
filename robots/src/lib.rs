//! Robots for imago: the [`Robot`] trait every robot (simulated or real) implements,
//! the simulated robots [`reacher2d`] and [`pusht`] with their scripted experts, and the
//! [`SafetyEnvelope`] that stands between any policy and any actuator.
//!
//! This crate has no machine-learning dependency: it is plain, deterministic Rust so
//! that every build (with or without a GPU) can simulate, render and record.

pub mod bounds;
pub mod drawing;
pub mod expert;
pub mod lerobot_units;
pub mod observation;
pub mod pusht;
pub mod reacher2d;
pub mod robot;
pub mod safety;

pub use bounds::ConfigError;
pub use drawing::{SceneDrawing, SceneMark};
pub use expert::ExpertConfig;
pub use lerobot_units::{Affine, EnvState, LeRobotUnits};
pub use observation::{Action, Image, Observation, Step, StepInfo};
pub use robot::{
    ACTION_LIMIT_RANGE, CameraSpec, FrameSource, MAX_VECTOR, Robot, RobotSpec,
    validate_action_limit,
};
pub use safety::{HoldReason, SafeCommand, SafetyConfig, SafetyEnvelope, SafetyVerdict};
