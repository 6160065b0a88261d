//! What imago keeps on disk: replays ([`replay`]), checkpoints ([`checkpoint`]),
//! LeRobot datasets in and out ([`lerobot`]), and
//! the means to write them safely: atomic files ([`atomic`]), directory locks
//! ([`lock`]) and checks of output paths against inputs ([`outputs`]).

pub mod atomic;
pub mod checkpoint;
pub mod lerobot;
pub mod lerobot_policy;
pub mod lock;
pub mod outputs;
pub mod replay;
