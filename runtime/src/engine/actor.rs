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

use crossbeam_channel::{Sender, TrySendError};
use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

use super::ActorStart;
use super::challenger::EpisodeAssignment;
use super::chunking::{ActorActing, ChunkingConfig, CommandSettings};
use super::clock::DeadlineClock;
use super::commands::CommandSource;
use super::driven::DrivenRobot;
use super::snapshot::{PolicySnapshot, SnapshotMailbox, SnapshotPolicy};
use super::stats::ControlStats;
use super::status::LiveCounters;
use crate::act::episode::{EpisodeInProgress, TickCommand};
use crate::act::sampling::{NOISE_SCALES, to_robot_units};
use crate::act::takeover::{TakeoverConfig, TakeoverWatch};
use crate::bridge::Interruption;
use crate::robot::RobotConfig;
use crate::store::replay::{EpisodeAbandoned, EpisodeStart, ReplayRecord, ensure_episode_id};
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
    /// How this actor acts with a policy (what the promotion test repeats).
    pub fn acting(&self) -> ActorActing {
        ActorActing::new(&self.chunking, self.exploration)
    }

    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.robot.validate().map_err(|e| e.within("robot"))?;
        in_range("exploration", self.exploration, NOISE_SCALES)?;
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

/// What the actor shares with the rest of the daemon.
pub struct ActorLinks<'a> {
    /// Where new policy versions (and challengers) arrive.
    pub mailbox: &'a SnapshotMailbox,
    /// Where records go to the writer.
    pub records: &'a Sender<ReplayRecord>,
    /// The counters the status line reads.
    pub live: &'a LiveCounters,
    /// Where logged episodes' ticks are offered (never waiting).
    pub telemetry: &'a Telemetry,
    /// Set to stop at the next tick boundary.
    pub stop: &'a AtomicBool,
}

/// Runs the control loop until `links.stop` is set (checked at every tick boundary),
/// starting with `start.initial` and switching to each snapshot the mailbox receives.
/// Episode ids start at `first_episode`.
pub fn run_actor(
    start: ActorStart<'_>,
    first_episode: u64,
    links: &ActorLinks<'_>,
) -> anyhow::Result<ControlStats> {
    let config = start.config;
    let mut control = ControlLoop::open(start, links)?;
    let (mut episode, mut seed) = (first_episode, config.first_seed);
    while !links.stop.load(Ordering::Relaxed) {
        ensure_episode_id(episode)?;
        if control.run_episode(episode, seed)? == EpisodeExit::Stopped {
            break;
        }
        links
            .live
            .queue_drops
            .store(control.stats.queue_drops, Ordering::Relaxed);
        episode += 1;
        seed = seed.wrapping_add(1);
    }
    control.stats.starved_ticks = control.source.starved_ticks();
    // A late observation is a missed deadline too.
    control.stats.deadline_misses = control.clock.misses() + control.stats.late_observations;
    Ok(control.stats)
}

/// How an episode of the control loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EpisodeExit {
    /// It ended (done, or abandoned after an interruption); the next one may start.
    Ended,
    /// The daemon is stopping.
    Stopped,
}

/// The actor's state across episodes: the robot, the deadline clock, the policy
/// acting and where its commands come from.
struct ControlLoop<'a> {
    config: &'a ActorConfig,
    links: &'a ActorLinks<'a>,
    robot: DrivenRobot,
    limits: Vec<f32>,
    clock: DeadlineClock,
    stats: ControlStats,
    current: Arc<PolicySnapshot>,
    source: CommandSource,
    assignment: EpisodeAssignment,
}

/// One episode's telemetry and records on their way out.
struct EpisodeOutlets<'a> {
    logged: bool,
    records: EpisodeRecords<'a>,
    takeover: Option<TakeoverWatch>,
}

impl<'a> ControlLoop<'a> {
    fn open(start: ActorStart<'a>, links: &'a ActorLinks<'a>) -> anyhow::Result<Self> {
        let ActorStart {
            config,
            initial,
            device,
        } = start;
        let robot = DrivenRobot::open(&config.robot)?;
        // An imago policy's commands are in its config's units; a LeRobot policy's
        // are handed on in the robot's.
        let limits = match &initial.policy {
            SnapshotPolicy::Imago { config, .. } => config.action_limit().to_vec(),
            SnapshotPolicy::LeRobot(_) => robot.spec().action_limit.clone(),
        };
        let period = Duration::from_secs_f64(1.0 / robot.spec().control_hz as f64);
        let source = CommandSource::new(
            &CommandSettings {
                chunking: &config.chunking,
                exploration: config.exploration,
                added_latency: Duration::from_secs_f32(config.policy_delay_ms / 1e3),
            },
            initial.as_ref(),
            (&limits, device),
        )?;
        Ok(Self {
            config,
            links,
            robot,
            limits,
            clock: DeadlineClock::new(period),
            stats: ControlStats::default(),
            current: initial,
            source,
            assignment: EpisodeAssignment::default(),
        })
    }

    /// Runs episode `episode` from `seed` until it ends or the daemon stops.
    fn run_episode(&mut self, episode: u64, seed: u64) -> anyhow::Result<EpisodeExit> {
        let (links, stop) = (self.links, self.links.stop);
        let Some(observation) = self.robot.reset(seed, episode, stop)? else {
            return Ok(EpisodeExit::Stopped);
        };
        let challenger_acts = self.assignment.start_episode(links.mailbox.challenger());
        let acting = self
            .assignment
            .acting(links.mailbox.challenger(), &self.current)
            .clone();
        if challenger_acts {
            links.telemetry.offer(TelemetryEvent::Note(format!(
                "episode {episode}: challenger version {} acts (live promotion test)",
                acting.version
            )));
        }
        if !self
            .source
            .start_episode((episode, seed), &observation, &acting, stop)?
        {
            return Ok(EpisodeExit::Stopped);
        }
        // Waiting for a remote robot to come up or to reset, or for the first chunk
        // of a real-time plan, is not a missed tick.
        self.clock.restart_after_wait();
        self.stats.jerk.restart();
        let start = EpisodeStart {
            episode,
            robot: self.robot.spec().name.clone(),
            seed,
            instruction: observation.instruction.clone(),
        };
        let mut out = EpisodeOutlets {
            logged: links.telemetry.wants_episode(episode),
            records: EpisodeRecords::new(links.records),
            takeover: self
                .robot
                .simulated()
                .map(|sim| TakeoverWatch::new(self.config.takeover.as_ref(), sim)),
        };
        if out.logged {
            links.telemetry.offer(episode_start_event(
                self.robot.drawing(),
                episode,
                &observation.instruction,
            ));
        }
        out.records
            .offer(ReplayRecord::EpisodeStart(start.clone()), &mut self.stats);
        let mut run = EpisodeInProgress::new(start, observation);
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(EpisodeExit::Stopped);
            }
            if self.tick(&mut run, &mut out)? {
                return Ok(EpisodeExit::Ended);
            }
        }
    }

    /// One tick of `run`: waits for its deadline, commands the robot and records the
    /// transition; `true` when the episode ended (done, or abandoned).
    fn tick(
        &mut self,
        run: &mut EpisodeInProgress,
        out: &mut EpisodeOutlets<'_>,
    ) -> anyhow::Result<bool> {
        let links = self.links;
        let (episode, step) = (run.start().episode, run.steps());
        let due = self.clock.wait();
        self.stats.jerk.hold(self.clock.late_periods());
        if let Some(snapshot) = links.mailbox.take() {
            self.current = snapshot;
        }
        let acting = self
            .assignment
            .acting(links.mailbox.challenger(), &self.current);
        links
            .live
            .policy_version
            .store(acting.version, Ordering::Relaxed);
        links
            .live
            .deadline_misses
            .store(self.clock.misses(), Ordering::Relaxed);
        let (command, plan) = match self.robot.expert_action() {
            Some(action) => {
                self.source.expert_took_over();
                let plan = action.0.clone();
                (TickCommand::intervention(action, acting.version), plan)
            }
            None => {
                let command = self.source.command(step, run.observation(), acting)?;
                self.stats.policy_versions.insert(command.version);
                let tick = TickCommand {
                    action: to_robot_units(&command.action, &self.limits),
                    sent: None,
                    behaviour_log_prob: command.log_prob,
                    intervention: false,
                    policy_version: command.version,
                };
                (tick, to_robot_units(&command.plan, &self.limits).0)
            }
        };
        let latency_ms = due.elapsed().as_secs_f64() * 1e3;
        self.stats.tick_latency_ms.push(latency_ms);
        let path = match self.robot.drawing() {
            Some(drawing) if out.logged => drawing.intended_path(&plan),
            _ => Vec::new(),
        };
        let version = command.policy_version;
        let outcome = match self.robot.step(episode, version, command.sent(), &plan)? {
            Ok(outcome) => outcome,
            Err(interruption) => {
                self.abandon(episode, step, interruption, &mut out.records);
                return Ok(true);
            }
        };
        let transition = run.advance(command, outcome);
        if out.logged {
            let telemetry = links.telemetry;
            let frame = telemetry
                .wants_frame(step)
                .then_some(telemetry.config().frame_downsample);
            let timing = TickTiming {
                latency_ms,
                deadline_misses: self.clock.misses(),
            };
            telemetry.offer(control_step_event(
                self.robot.drawing(),
                &transition,
                &plan,
                path,
                frame,
                Some(timing),
            ));
        }
        self.stats.ticks += 1;
        self.stats
            .jerk
            .push(&normalised(&transition.executed.0, &self.limits));
        self.stats.transitions += 1;
        links.live.ticks.fetch_add(1, Ordering::Relaxed);
        out.records.offer(
            ReplayRecord::Transition(Box::new(transition)),
            &mut self.stats,
        );
        if let (Some(takeover), Some(sim)) = (out.takeover.as_mut(), self.robot.simulated()) {
            takeover.observe(sim, run.start().seed, run.is_done());
        }
        let Some(end) = run.end() else {
            return Ok(false);
        };
        let (steps, success) = (end.steps, end.success);
        out.records
            .offer(ReplayRecord::EpisodeEnd(Box::new(end)), &mut self.stats);
        links.live.episodes.fetch_add(1, Ordering::Relaxed);
        self.stats.episodes_finished += 1;
        self.stats.episodes_succeeded += u64::from(success);
        if out.logged {
            links
                .telemetry
                .offer(TelemetryEvent::EpisodeEnd(EpisodeEndEvent {
                    episode,
                    steps,
                    success,
                    episode_return: run.episode_return(),
                }));
        }
        Ok(true)
    }

    /// The robot answered late or was lost at `step`: it is told to hold, and the
    /// episode is recorded as abandoned (nothing invented for the missing tick).
    fn abandon(
        &mut self,
        episode: u64,
        step: u32,
        interruption: Interruption,
        records: &mut EpisodeRecords<'_>,
    ) {
        self.robot.hold(episode);
        let reason = match interruption {
            Interruption::Late => {
                self.stats.late_observations += 1;
                "late observation"
            }
            Interruption::LinkLost => {
                self.stats.link_losses += 1;
                eprintln!("lost the robot: holding until it comes back");
                "link lost"
            }
        };
        self.stats.episodes_abandoned += 1;
        self.links
            .live
            .link_losses
            .store(self.stats.link_losses, Ordering::Relaxed);
        records.offer(
            ReplayRecord::EpisodeAbandoned(EpisodeAbandoned {
                episode,
                steps: step,
                reason: reason.into(),
            }),
            &mut self.stats,
        );
    }
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
    use burn::backend::ndarray::NdArrayDevice;
    use burn::{Dispatch, DispatchDevice};
    use imago_policies::PolicyConfig;

    use super::*;
    use crate::act::evaluate::Controller;
    use crate::engine::chunking::ChunkMode;

    /// The promotion test in simulation must certify what the robot runs: each
    /// chunk whole where the actor executes it whole, sampled with the actor's
    /// exploration (until 2026-12-06 it tested the mean, re-planned every tick).
    #[test]
    fn the_promotion_test_acts_as_the_actor_does() {
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let base: ActorConfig = ActorConfig::default();
        let policy_config =
            PolicyConfig::for_robot(imago_policies::Architecture::Vla, &base.robot.spec()).unwrap();
        assert!(policy_config.chunk_len() > 1);
        let snapshot =
            PolicySnapshot::new(1, policy_config.init::<Dispatch>(&device), &policy_config);
        for (mode, exploration, executed) in [
            (ChunkMode::EveryTick, 1.0, 1),
            (ChunkMode::EveryTick, 0.0, 1),
            (ChunkMode::Synchronous, 0.5, policy_config.chunk_len()),
            (ChunkMode::Realtime, 1.0, policy_config.chunk_len()),
        ] {
            let config = ActorConfig {
                exploration,
                chunking: ChunkingConfig {
                    mode,
                    ..ChunkingConfig::default()
                },
                ..base.clone()
            };
            match snapshot.controller(&device, config.acting()) {
                Controller::Policy {
                    execute_steps,
                    sampling_noise,
                    ..
                } => assert_eq!(
                    (execute_steps, sampling_noise),
                    (executed, exploration),
                    "{mode:?}"
                ),
                _ => panic!("an imago snapshot acts as an imago policy"),
            }
        }
    }

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
            &policy_config,
        ));
        // A writer that has stalled: the queue holds 8 records and is never drained.
        let (sender, receiver) = crossbeam_channel::bounded(8);
        let stop = AtomicBool::new(false);
        let stats = std::thread::scope(|scope| {
            let actor = scope.spawn(|| {
                run_actor(
                    ActorStart {
                        config: &config,
                        initial,
                        device: &device,
                    },
                    0,
                    &ActorLinks {
                        mailbox: &SnapshotMailbox::default(),
                        records: &sender,
                        live: &LiveCounters::default(),
                        telemetry: &Telemetry::off(),
                        stop: &stop,
                    },
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
