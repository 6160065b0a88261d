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
use crate::telemetry::{
    EpisodeEndEvent, Telemetry, TelemetryEvent, TickTiming, control_step_event, episode_start_event,
};

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
/// at `first_episode`. Logged episodes' ticks are offered to `telemetry`, which never
/// waits.
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
    telemetry: &Telemetry,
    stop: &AtomicBool,
) -> anyhow::Result<ControlStats> {
    let frame_downsample = telemetry.config().frame_downsample;
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
        let logged = telemetry.wants_episode(episode);
        let mut episode_return = 0.0f32;
        if logged {
            telemetry.offer(episode_start_event(
                &robot,
                episode,
                &observation.instruction,
            ));
        }
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
            let (action, log_prob, intended, intervention) = match takeover.rescuer() {
                Some(expert) => {
                    let action = expert.act(&robot);
                    let intended = logged.then(|| action.0.clone());
                    (action, None, intended, true)
                }
                None => {
                    batch.clear();
                    batch.push(&observation)?;
                    let command = sample_first_actions(
                        &current.policy,
                        &batch,
                        device,
                        &mut rngs,
                        &[0],
                        config.exploration,
                    )?
                    .remove(0);
                    stats.policy_versions.insert(current.version);
                    let intended = logged.then(|| to_robot_units(&command.chunk, &limits).0);
                    (
                        to_robot_units(&command.action, &limits),
                        command.log_prob,
                        intended,
                        false,
                    )
                }
            };
            let latency_ms = due.elapsed().as_secs_f64() * 1e3;
            stats.tick_latency_ms.push(latency_ms);
            let scene = logged.then(|| robot.scene());
            let outcome = robot.step(&action);
            if let (Some(scene), Some(intended)) = (scene, intended) {
                telemetry.offer(control_step_event(
                    &scene,
                    config.robot.control_hz,
                    episode,
                    step,
                    &intended,
                    &outcome.info.executed.0,
                    observation
                        .image
                        .as_ref()
                        .filter(|_| telemetry.wants_frame(step)),
                    frame_downsample,
                    current.version,
                    intervention,
                    outcome.reward,
                    TickTiming {
                        latency_ms,
                        deadline_misses: clock.misses(),
                    },
                ));
            }
            stats.ticks += 1;
            episode_return += outcome.reward;
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
                if logged {
                    telemetry.offer(TelemetryEvent::EpisodeEnd(EpisodeEndEvent {
                        episode,
                        steps: step + 1,
                        success: outcome.success,
                        episode_return,
                    }));
                }
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
