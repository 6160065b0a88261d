//! Running controllers on robots: scripted demonstrations ([`collect`]), closed-loop
//! evaluation ([`evaluate`], [`paired`]), policy rollouts that record what they did
//! ([`rollout`]), the action sampling rollouts and the daemon's actor share
//! ([`sampling`]), camera frames of many robots at once ([`camera`]), and the
//! action queue of real-time chunking ([`chunk_queue`]).

pub mod camera;
pub mod chunk_queue;
pub mod collect;
pub mod evaluate;
pub mod paired;
pub mod promotion_run;
pub mod rollout;
pub mod sampling;
