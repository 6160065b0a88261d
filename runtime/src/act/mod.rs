//! Running controllers on robots: scripted demonstrations ([`collect`]), closed-loop
//! evaluation ([`evaluate`], [`paired`]), policy rollouts that record what they did
//! ([`rollout`]), the action sampling rollouts and the daemon's actor share
//! ([`sampling`]), and camera frames of many robots at once ([`camera`]).

pub mod camera;
pub mod collect;
pub mod evaluate;
pub mod paired;
pub mod promotion_run;
pub mod rollout;
pub mod sampling;
