//! The actor: the robot's control loop at its fixed rate. It never waits on the
//! learner (snapshots are taken from a mailbox without blocking) or on disk (records
//! go to a bounded queue; when it is full the record is dropped and counted).
//!
//! A remote robot (docs/bridge.md) is waited for only up to the observation age: a
//! later answer makes the tick a miss, and a lost robot a link loss. Either way the
//! robot is told to hold, the episode is recorded as abandoned (nothing invented
//! for the ticks that had no observation), and the next episode starts when the
//! robot answers again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use burn::Dispatch;
use crossbeam_channel::{Sender, TrySendError};
use imago_policies::PolicyConfig;
use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

use super::challenger::EpisodeAssignment;
use super::clock::DeadlineClock;
use super::commands::{ChunkingConfig, CommandSettings, CommandSource};
use super::driven::DrivenRobot;
use super::snapshot::{PolicySnapshot, SnapshotMailbox};
use super::stats::ControlStats;
use super::status::LiveCounters;
use crate::act::rollout::{TakeoverConfig, TakeoverWatch};
use crate::act::sampling::to_robot_units;
use crate::bridge::Interruption;
use crate::robot::RobotConfig;
use crate::store::replay::{
    EpisodeAbandoned, EpisodeEnd, EpisodeStart, ReplayRecord, Transition, ensure_episode_id,
};
use crate::telemetry::{
    EpisodeEndEvent, Telemetry, TelemetryEvent, TickTiming, control_step_event, episode_start_event,
};

/// How the actor drives the robot. `R` is the robot: a [`RobotConfig`] when running,
/// the raw `[actor.robot]` table in a daemon config file (resolved against the file's
/// `robot = "NAME"` by [`ActorConfig::resolve`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActorConfig<R = RobotConfig> {
    /// The robot and its settings (its control rate is the loop's rate).
    pub robot: R,
    /// Exploration noise relative to the policy's own spread (0: act on the mean).
    /// Range: [0, 10].
    pub exploration: f32,
    /// Let the scripted expert take over a stalled episode (flagged as intervention).
    pub takeover: Option<TakeoverConfig>,
    /// Seed of the first episode; each next episode takes the next seed. Any value.
    pub first_seed: u64,
    /// How the policy's chunks become commands (`every_tick` or `realtime`).
    pub chunking: ChunkingConfig,
    /// Latency added to every policy inference, ms: a measurement knob that makes the
    /// policy as slow as a large VLA (0: none). Range: [0, 10000].
    pub policy_delay_ms: f32,
}

impl ActorConfig<toml::Table> {
    /// The settings with the robot called `name` configured by the `robot` table; an
    /// unknown robot or key is an error naming it. Ranges are checked by
    /// [`ActorConfig::validate`].
    pub fn resolve(&self, name: &str) -> anyhow::Result<ActorConfig> {
        let robot = RobotConfig::read_table(name, &self.robot)
            .map_err(|e| anyhow::anyhow!("[actor.robot]: {e:#}"))?;
        Ok(ActorConfig {
            robot,
            exploration: self.exploration,
            takeover: self.takeover.clone(),
            first_seed: self.first_seed,
            chunking: self.chunking.clone(),
            policy_delay_ms: self.policy_delay_ms,
        })
    }
}

impl ActorConfig {
    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.robot.validate().map_err(|e| e.within("robot"))?;
        in_range("exploration", self.exploration, 0.0..=10.0)?;
        in_range("policy_delay_ms", self.policy_delay_ms, 0.0..=10_000.0)?;
        self.chunking.validate().map_err(|e| e.within("chunking"))?;
        match &self.takeover {
            Some(takeover) => takeover.validate().map_err(|e| e.within("takeover")),
            None => Ok(()),
        }
    }
}

impl<R: Default> Default for ActorConfig<R> {
    fn default() -> Self {
        Self {
            robot: R::default(),
            exploration: 1.0,
            takeover: Some(TakeoverConfig::default()),
            first_seed: 0,
            chunking: ChunkingConfig::default(),
            policy_delay_ms: 0.0,
        }
    }
}

/// The records of one episode on their way to the writer. Once one is dropped (the
/// queue was full), the rest of the episode is not sent: the replay then holds the
/// episode unfinished, which readers leave out, never a whole-looking episode with a
/// step missing.
struct EpisodeRecords<'a> {
    queue: &'a Sender<ReplayRecord>,
    lost: bool,
}

impl<'a> EpisodeRecords<'a> {
    fn new(queue: &'a Sender<ReplayRecord>) -> Self {
        Self { queue, lost: false }
    }

    /// Sends `record` without waiting; a full or closed queue counts a drop.
    fn offer(&mut self, record: ReplayRecord, stats: &mut ControlStats) {
        if self.lost {
            return;
        }
        match self.queue.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                stats.queue_drops += 1;
                stats.episodes_lost_to_drops += 1;
                self.lost = true;
            }
        }
    }
}

/// Runs the control loop until `stop` is set (checked at every tick boundary), starting
/// with `initial` and switching to each snapshot `mailbox` receives. Episode ids start
/// at `first_episode`. Logged episodes' ticks are offered to `telemetry`, which never
/// waits.
#[allow(clippy::too_many_arguments)]
pub fn run_actor(
    config: &ActorConfig,
    policy_config: &PolicyConfig,
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
    let mut robot = DrivenRobot::open(&config.robot)?;
    let limits = policy_config.action_limit().to_vec();
    let mut clock = DeadlineClock::new(Duration::from_secs_f64(
        1.0 / robot.spec().control_hz as f64,
    ));
    let mut stats = ControlStats::default();
    let mut current = initial;
    let mut source = CommandSource::new(
        &CommandSettings {
            chunking: &config.chunking,
            exploration: config.exploration,
            added_latency: Duration::from_secs_f32(config.policy_delay_ms / 1e3),
        },
        policy_config,
        device,
    )?;
    let mut assignment = EpisodeAssignment::default();
    let (mut episode, mut seed) = (first_episode, config.first_seed);
    'episodes: while !stop.load(Ordering::Relaxed) {
        ensure_episode_id(episode)?;
        let Some(mut observation) = robot.reset(seed, episode, stop)? else {
            break;
        };
        let challenger_acts = assignment.start_episode(mailbox.challenger());
        let acting = assignment.acting(mailbox.challenger(), &current).clone();
        if challenger_acts {
            telemetry.offer(TelemetryEvent::Note(format!(
                "episode {episode}: challenger version {} acts (live promotion test)",
                acting.version
            )));
        }
        if !source.start_episode((episode, seed), &observation, &acting, stop)? {
            break;
        }
        // Waiting for a remote robot to come up or to reset, or for the first chunk
        // of a real-time plan, is not a missed tick.
        clock.restart_after_wait();
        stats.jerk.restart();
        let mut takeover = robot
            .simulated()
            .map(|sim| TakeoverWatch::new(config.takeover.as_ref(), sim));
        let logged = telemetry.wants_episode(episode);
        let mut episode_return = 0.0f32;
        let mut sent = EpisodeRecords::new(records);
        if logged {
            telemetry.offer(episode_start_event(
                robot.drawing(),
                episode,
                &observation.instruction,
            ));
        }
        sent.offer(
            ReplayRecord::EpisodeStart(EpisodeStart {
                episode,
                robot: robot.spec().name.clone(),
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
            stats.jerk.hold(clock.late_periods());
            if let Some(snapshot) = mailbox.take() {
                current = snapshot;
            }
            let acting = assignment.acting(mailbox.challenger(), &current);
            live.policy_version.store(acting.version, Ordering::Relaxed);
            live.deadline_misses
                .store(clock.misses(), Ordering::Relaxed);
            let (action, log_prob, chunk, intervention, version) = match robot.expert_action() {
                Some(action) => {
                    source.expert_took_over();
                    let chunk = action.0.clone();
                    (action, None, chunk, true, acting.version)
                }
                None => {
                    let command = source.command(step, &observation, acting)?;
                    stats.policy_versions.insert(command.version);
                    (
                        to_robot_units(&command.action, &limits),
                        command.log_prob,
                        to_robot_units(&command.plan, &limits).0,
                        false,
                        command.version,
                    )
                }
            };
            let latency_ms = due.elapsed().as_secs_f64() * 1e3;
            stats.tick_latency_ms.push(latency_ms);
            let path = match robot.drawing() {
                Some(drawing) if logged => drawing.intended_path(&chunk),
                _ => Vec::new(),
            };
            let outcome = match robot.step(episode, version, &action, &chunk)? {
                Ok(outcome) => outcome,
                Err(interruption) => {
                    robot.hold(episode);
                    let reason = match interruption {
                        Interruption::Late => {
                            stats.late_observations += 1;
                            "late observation"
                        }
                        Interruption::LinkLost => {
                            stats.link_losses += 1;
                            eprintln!("lost the robot: holding until it comes back");
                            "link lost"
                        }
                    };
                    stats.episodes_abandoned += 1;
                    live.link_losses.store(stats.link_losses, Ordering::Relaxed);
                    sent.offer(
                        ReplayRecord::EpisodeAbandoned(EpisodeAbandoned {
                            episode,
                            steps: step,
                            reason: reason.into(),
                        }),
                        &mut stats,
                    );
                    break;
                }
            };
            if logged {
                telemetry.offer(control_step_event(
                    robot.drawing(),
                    &observation.proprio,
                    &path,
                    episode,
                    step,
                    &chunk,
                    &outcome.info.executed.0,
                    observation
                        .image
                        .as_ref()
                        .filter(|_| telemetry.wants_frame(step)),
                    frame_downsample,
                    version,
                    intervention,
                    outcome.reward,
                    TickTiming {
                        latency_ms,
                        deadline_misses: clock.misses(),
                    },
                ));
            }
            stats.ticks += 1;
            stats
                .jerk
                .push(&normalised(&outcome.info.executed.0, &limits));
            episode_return += outcome.reward;
            stats.transitions += 1;
            live.ticks.fetch_add(1, Ordering::Relaxed);
            let next = outcome.observation;
            sent.offer(
                ReplayRecord::Transition(Box::new(Transition {
                    episode,
                    step,
                    observation: std::mem::replace(&mut observation, next),
                    action,
                    executed: outcome.info.executed.clone(),
                    reward: outcome.reward,
                    done: outcome.done,
                    success: outcome.success,
                    policy_version: version,
                    intervention,
                    behaviour_log_prob: log_prob,
                })),
                &mut stats,
            );
            if let (Some(takeover), Some(sim)) = (takeover.as_mut(), robot.simulated()) {
                takeover.observe(sim, seed, outcome.done);
            }
            if outcome.done {
                sent.offer(
                    ReplayRecord::EpisodeEnd(Box::new(EpisodeEnd {
                        episode,
                        steps: step + 1,
                        success: outcome.success,
                        final_observation: observation.clone(),
                    })),
                    &mut stats,
                );
                live.episodes.fetch_add(1, Ordering::Relaxed);
                stats.episodes_finished += 1;
                stats.episodes_succeeded += u64::from(outcome.success);
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
        seed = seed.wrapping_add(1);
    }
    stats.starved_ticks = source.starved_ticks();
    // A late observation is a missed deadline too.
    stats.deadline_misses = clock.misses() + stats.late_observations;
    Ok(stats)
}

/// `action` (robot units) in units of the action limits.
fn normalised(action: &[f32], limits: &[f32]) -> Vec<f32> {
    action
        .iter()
        .zip(limits.iter().cycle())
        .map(|(v, l)| v / l)
        .collect()
}

#[cfg(test)]
mod tests {
    use burn::DispatchDevice;
    use burn::backend::ndarray::NdArrayDevice;

    use super::*;

    #[test]
    fn an_episode_that_lost_a_record_to_a_full_queue_is_never_sent_whole() {
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let config: ActorConfig = ActorConfig {
            takeover: None,
            ..ActorConfig::default()
        };
        let policy_config =
            PolicyConfig::for_robot(imago_policies::Architecture::Vla, &config.robot.spec())
                .unwrap();
        let initial = Arc::new(PolicySnapshot::new(
            1,
            policy_config.init::<Dispatch>(&device),
        ));
        // A writer that has stalled: the queue holds 8 records and is never drained.
        let (sender, receiver) = crossbeam_channel::bounded(8);
        let stop = AtomicBool::new(false);
        let stats = std::thread::scope(|scope| {
            let actor = scope.spawn(|| {
                run_actor(
                    &config,
                    &policy_config,
                    initial,
                    &device,
                    &SnapshotMailbox::default(),
                    &sender,
                    0,
                    &LiveCounters::default(),
                    &Telemetry::off(),
                    &stop,
                )
            });
            std::thread::sleep(Duration::from_millis(1500));
            stop.store(true, Ordering::Relaxed);
            actor.join().unwrap().unwrap()
        });
        assert!(
            stats.queue_drops > 0 && stats.episodes_lost_to_drops >= 1,
            "{stats:?}"
        );
        let records: Vec<ReplayRecord> = receiver.try_iter().collect();
        assert_eq!(records.len(), 8);
        // What did get through is the start and the first steps of episode 0, with no
        // end: readers see it unfinished, never whole with a gap.
        assert!(matches!(&records[0], ReplayRecord::EpisodeStart(s) if s.episode == 0));
        for (step, record) in records[1..].iter().enumerate() {
            match record {
                ReplayRecord::Transition(t) => assert_eq!(t.step as usize, step),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
