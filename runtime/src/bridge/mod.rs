//! The robot bridge (docs/bridge.md): robots in other processes and on other
//! machines, over zenoh.
//! - [`protocol`]: the key expressions under a robot's key and the versioned,
//!   postcard-encoded messages;
//! - [`link`]: the zenoh session settings both sides share;
//! - [`remote`]: the daemon's side, the registry's `remote` robot kind;
//! - [`serve`]: the robot's side for imago's simulated robots (`imago robot-serve`).
//!
//! Other robots speak the same protocol through the Python adapter
//! (`robots/bridge-python/`).

pub mod link;
pub mod protocol;
pub mod remote;
pub mod serve;

pub use link::{LinkConfig, LinkMode};
pub use protocol::{FrameEncoding, PROTOCOL_VERSION, RobotKeys};
pub use remote::{Interruption, RemoteRobot, RemoteRobotConfig, RemoteRobotSettings};
pub use serve::{ServeOptions, ServeReport, serve_robot};
