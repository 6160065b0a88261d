//! The actor: the robot's control loop at its fixed rate. It never waits on the
//! learner (snapshots are taken from a mailbox without blocking) or on disk (records
//! go to a bounded queue; when it is full the record is dropped and counted).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use burn::Dispatch;
use crossbeam_channel::{Sender, TrySendError};
use imago_policies::{PolicyBatch, VlaPolicyConfig};
use imago_robots::Robot;
use imago_robots::reacher2d::{NAME, Reacher2d, Reacher2dConfig};
use serde::{Deserialize, Serialize};

use super::clock::DeadlineClock;
use super::snapshot::{PolicySnapshot, SnapshotMailbox};
use super::stats::ControlStats;
use super::status::LiveCounters;
use crate::finetune::{
    TakeoverConfig, TakeoverWatch, exploration_rng, sample_first_actions, to_robot_units,
};
use crate::replay::{EpisodeEnd, EpisodeStart, ReplayRecord, Transition};

/// How the actor drives the robot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActorConfig {
    /// The robot's settings (its `control_hz` is the loop's rate).
    pub robot: Reacher2dConfig,
    /// Exploration noise relative to the policy's own spread (0: act on the mean).
    pub exploration: f32,
    /// Let the scripted expert take over a stalled episode (flagged as intervention).
    pub takeover: Option<TakeoverConfig>,
    /// Seed of the first episode; each next episode takes the next seed.
    pub first_seed: u64,
}

impl Default for ActorConfig {
    fn default() -> Self {
        Self {
            robot: Reacher2dConfig::default(),
            exploration: 1.0,
            takeover: Some(TakeoverConfig::default()),
            first_seed: 0,
        }
    }
}

/// Sends `record` without waiting; a full or closed queue counts a drop.
fn offer(records: &Sender<ReplayRecord>, record: ReplayRecord, stats: &mut ControlStats) {
    match records.try_send(record) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => stats.queue_drops += 1,
    }
}

/// Runs the control loop until `stop` is set (checked at every tick boundary), starting
/// with `initial` and switching to each snapshot `mailbox` receives. Episode ids start
/// at `first_episode`.
#[allow(clippy::too_many_arguments)]
pub fn run_actor(
    config: &ActorConfig,
    policy_config: &VlaPolicyConfig,
    initial: Arc<PolicySnapshot>,
    device: &burn::tensor::Device<Dispatch>,
    mailbox: &SnapshotMailbox,
    records: &Sender<ReplayRecord>,
    first_episode: u64,
    live: &LiveCounters,
    stop: &AtomicBool,
) -> anyhow::Result<ControlStats> {
    let mut robot = Reacher2d::new(config.robot.clone());
    let limits = policy_config.action_limit.clone();
    let mut clock = DeadlineClock::new(Duration::from_secs_f64(
        1.0 / config.robot.control_hz as f64,
    ));
    let mut stats = ControlStats::default();
    let mut current = initial;
    let mut batch = PolicyBatch::new(policy_config);
    let (mut episode, mut seed) = (first_episode, config.first_seed);
    'episodes: while !stop.load(Ordering::Relaxed) {
        let mut observation = robot.reset(seed);
        let mut rngs = [exploration_rng(seed, current.version)];
        let mut takeover = TakeoverWatch::new(config.takeover.as_ref(), &robot);
        offer(
            records,
            ReplayRecord::EpisodeStart(EpisodeStart {
                episode,
                robot: NAME.to_string(),
                seed,
                instruction: observation.instruction.clone(),
            }),
            &mut stats,
        );
        for step in 0u32.. {
            if stop.load(Ordering::Relaxed) {
                break 'episodes;
            }
            let due = clock.wait();
            if let Some(snapshot) = mailbox.take() {
                current = snapshot;
            }
            live.policy_version
                .store(current.version, Ordering::Relaxed);
            live.deadline_misses
                .store(clock.misses(), Ordering::Relaxed);
            let (action, log_prob, intervention) = match takeover.rescuer() {
                Some(expert) => (expert.act(&robot), None, true),
                None => {
                    batch.clear();
                    batch.push(&observation)?;
                    let (normalised, log_prob) = sample_first_actions(
                        &current.policy,
                        &batch,
                        device,
                        &mut rngs,
                        &[0],
                        config.exploration,
                    )?
                    .remove(0);
                    stats.policy_versions.insert(current.version);
                    (to_robot_units(&normalised, &limits), log_prob, false)
                }
            };
            stats
                .tick_latency_ms
                .push(due.elapsed().as_secs_f64() * 1e3);
            let outcome = robot.step(&action);
            stats.ticks += 1;
            stats.transitions += 1;
            live.ticks.fetch_add(1, Ordering::Relaxed);
            let next = outcome.observation;
            offer(
                records,
                ReplayRecord::Transition(Box::new(Transition {
                    episode,
                    step,
                    observation: std::mem::replace(&mut observation, next),
                    action,
                    executed: outcome.info.executed.clone(),
                    reward: outcome.reward,
                    done: outcome.done,
                    success: outcome.success,
                    policy_version: current.version,
                    intervention,
                    behaviour_log_prob: log_prob,
                })),
                &mut stats,
            );
            takeover.observe(&robot, seed, outcome.done);
            if outcome.done {
                offer(
                    records,
                    ReplayRecord::EpisodeEnd(Box::new(EpisodeEnd {
                        episode,
                        steps: step + 1,
                        success: outcome.success,
                        final_observation: observation.clone(),
                    })),
                    &mut stats,
                );
                live.episodes.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
        live.queue_drops.store(stats.queue_drops, Ordering::Relaxed);
        episode += 1;
        seed += 1;
    }
    stats.deadline_misses = clock.misses();
    Ok(stats)
}
