//! Running controllers on robots: one episode as every loop records it ([`episode`]),
//! simulated robots stepped in lock-step ([`lock_step`]), scripted demonstrations
//! ([`collect`]), closed-loop evaluation ([`evaluate`], [`paired`]; through a world model's plans,
//! [`planned`]), policy rollouts
//! that record what they did ([`rollout`]; a LeRobot policy's in [`lerobot_rollout`]), the action sampling rollouts and the
//! daemon's actor share ([`sampling`]), camera frames of many robots at once
//! ([`camera`]), and the action queue of real-time chunking ([`chunk_queue`]).

pub mod camera;
pub mod chunk_queue;
pub mod collect;
pub mod episode;
pub mod evaluate;
pub mod lerobot_driver;
pub mod lerobot_rollout;
pub mod loaded_policy;
pub mod lock_step;
pub mod paired;
pub mod plan_check;
pub mod planned;
pub mod promotion_run;
pub mod remote_eval;
pub mod rollout;
pub mod sampling;
pub mod simulated_planning;
pub mod takeover;
