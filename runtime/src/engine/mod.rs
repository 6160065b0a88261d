//! The robot-side engine: an actor thread running the control loop at the robot's
//! rate, a replay writer thread and a status (telemetry) thread, connected by a
//! bounded queue and relaxed atomic counters, with policy hot-swap through a snapshot
//! mailbox. The learner runs on the calling thread (see [`crate::engine::daemon`]), or
//! in another process for a fleet of actors ([`crate::engine::fleet`]).

mod actor;
mod actor_feed;
mod challenger;
pub mod champion;
mod chunking;
mod clock;
mod commands;
pub mod daemon;
mod daemon_config;
mod driven;
pub mod fleet;
pub mod learner_loop;
mod lerobot_daemon;
mod lerobot_ticks;
mod planner;
mod priority;
mod replay_window;
mod run_start;
mod snapshot;
mod stats;
mod status;
mod writer;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use burn::Dispatch;

pub use actor::{ActorConfig, ActorLinks, run_actor};
pub use chunking::{ChunkMode, ChunkingConfig};
pub use clock::DeadlineClock;
pub use replay_window::ReplayWindow;
pub use snapshot::{ChallengerSlot, PolicySnapshot, SnapshotMailbox, SnapshotPolicy};
pub use stats::{ControlReport, ControlStats, JerkMeter, LatencySummary};
pub use status::{LiveCounters, run_status};
pub use writer::{WriterReport, run_writer};

pub use crate::store::replay::ReplayWriterConfig;

use crate::store::replay::ReplayWriter;
use crate::telemetry::Telemetry;

/// Records the actor's queue holds before it drops (about 50 s at 20 Hz).
pub const RECORD_QUEUE: usize = 1024;

/// Where and how the control loop records.
#[derive(Debug, Clone)]
pub struct Recording<'a> {
    /// The replay directory (created if needed; an existing one is continued).
    pub dir: &'a Path,
    /// Segment size and retention.
    pub config: ReplayWriterConfig,
    /// Seconds between status lines on standard error; `None`: none.
    pub status_every: Option<std::time::Duration>,
    /// Where the actor's ticks are logged (offered without waiting).
    pub telemetry: Telemetry,
    /// Who records, for the replay's lock file (`imago daemon`).
    pub purpose: &'a str,
}

/// What the actor starts with: its settings, the policy's first version, and the
/// device the policy runs on.
pub struct ActorStart<'a> {
    /// The actor's settings (its robot among them).
    pub config: &'a ActorConfig,
    /// The version acting first (every later version is of its kind and config).
    pub initial: std::sync::Arc<PolicySnapshot>,
    /// Where the policy runs.
    pub device: &'a burn::tensor::Device<Dispatch>,
}

/// Runs the actor and the replay writer on their own threads until `stop` is set;
/// `during` runs on the calling thread while they do (a learner, a test publishing
/// snapshots) and must return once `stop` is set.
///
/// No thread outlives a dead one: if the actor fails or panics, if recording fails,
/// or if `during` panics, `stop` is set, every thread ends, and the error names the
/// cause (the report of what ran is lost with it; the replay holds what was written).
pub fn run_control_loop(
    actor: ActorStart<'_>,
    recording: Recording<'_>,
    mailbox: &SnapshotMailbox,
    stop: &AtomicBool,
    during: impl FnOnce(),
) -> anyhow::Result<ControlReport> {
    actor
        .config
        .validate()
        .map_err(|e| anyhow::anyhow!("actor settings: {e}"))?;
    let (mut writer, repaired) = ReplayWriter::open(
        recording.dir,
        recording.config,
        &actor.config.robot,
        recording.purpose,
    )?;
    repaired.warn();
    let first_episode = writer.next_episode_id()?;
    let (sender, receiver) = crossbeam_channel::bounded(RECORD_QUEUE);
    let (live, status_stop) = (&LiveCounters::default(), &AtomicBool::new(false));
    let telemetry = &recording.telemetry;
    let (stats, written, during) = std::thread::scope(|scope| {
        let writer_thread = scope.spawn(move || run_writer(writer, receiver, stop));
        if let Some(every) = recording.status_every {
            scope.spawn(move || run_status(live, every, status_stop));
        }
        let actor_thread = scope.spawn(move || {
            // Whatever way the actor ends (a return, an error, a panic), everyone stops.
            let _stop_all = StopOnDrop(stop);
            // The actor's tensor math runs on a pool of its own, never queued behind
            // the learner's (engine/priority.rs).
            let stats = priority::actor_pool().and_then(|pool| {
                pool.install(|| {
                    run_actor(
                        actor,
                        first_episode,
                        &ActorLinks {
                            mailbox,
                            records: &sender,
                            live,
                            telemetry,
                            stop,
                        },
                    )
                })
            });
            drop(sender);
            stats
        });
        let during = std::panic::catch_unwind(std::panic::AssertUnwindSafe(during));
        stop.store(true, Ordering::Relaxed);
        let stats = actor_thread.join();
        let written = writer_thread.join();
        status_stop.store(true, Ordering::Relaxed);
        (stats, written, during)
    });
    if let Err(payload) = during {
        anyhow::bail!("the learner panicked: {}", panic_message(&payload));
    }
    let stats = match stats {
        Ok(Ok(stats)) => stats,
        Ok(Err(error)) => return Err(error.context("the actor stopped")),
        Err(payload) => anyhow::bail!("the actor thread panicked: {}", panic_message(&payload)),
    };
    let written = written.map_err(|payload| {
        anyhow::anyhow!(
            "the replay writer thread panicked: {}",
            panic_message(&payload)
        )
    })?;
    if written.dropped_segments > 0 {
        eprintln!(
            "replay retention deleted the {} oldest closed segments",
            written.dropped_segments
        );
    }
    if let Some(error) = &written.error {
        anyhow::bail!(
            "{error}; {} records were not written, the control loop was stopped",
            written.unwritten
        );
    }
    Ok(ControlReport {
        ticks: stats.ticks,
        deadline_misses: stats.deadline_misses,
        tick_latency_ms: stats.latency(),
        queue_drops: stats.queue_drops,
        episodes_lost_to_drops: stats.episodes_lost_to_drops,
        policy_versions: stats.policy_versions.iter().copied().collect(),
        actor_transitions: stats.transitions,
        transitions_written: written.transitions,
        replay_records: written.records,
        telemetry_dropped: telemetry.dropped(),
        late_observations: stats.late_observations,
        link_losses: stats.link_losses,
        episodes_abandoned: stats.episodes_abandoned,
        episodes_finished: stats.episodes_finished,
        episodes_succeeded: stats.episodes_succeeded,
        action_jerk: stats.jerk.mean(),
        starved_ticks: stats.starved_ticks,
    })
}

/// Sets its flag when dropped, unwinding included.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The message a panic carried.
fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use burn::DispatchDevice;
    use burn::backend::ndarray::NdArrayDevice;
    use imago_policies::PolicyConfig;

    use super::*;
    use crate::store::replay::read_replay;

    /// Recording into `dir` with no status lines and no telemetry.
    fn quiet_recording(dir: &Path) -> Recording<'_> {
        Recording {
            dir,
            config: ReplayWriterConfig::default(),
            status_every: None,
            telemetry: Telemetry::off(),
            purpose: "test",
        }
    }

    /// A fresh policy for `config`'s robot, version 1.
    fn fresh_policy(config: &PolicyConfig, device: &DispatchDevice) -> PolicySnapshot {
        PolicySnapshot::new(1, config.init::<Dispatch>(device), config)
    }

    #[test]
    fn actor_keeps_its_rate_swaps_policies_and_loses_no_transition() {
        let dir = tempfile::tempdir().unwrap();
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        // No takeover: every tick is the policy's, so every published version acts
        // (a takeover can span the whole second a version is current).
        let config: ActorConfig = ActorConfig {
            takeover: None,
            ..ActorConfig::default()
        };
        let policy_config =
            PolicyConfig::for_robot(imago_policies::Architecture::Vla, &config.robot.spec())
                .unwrap();
        let snapshot = |version| {
            PolicySnapshot::new(
                version,
                policy_config.init::<Dispatch>(&device),
                &policy_config,
            )
        };
        let mailbox = SnapshotMailbox::default();
        let stop = AtomicBool::new(false);
        let report = run_control_loop(
            ActorStart {
                config: &config,
                initial: std::sync::Arc::new(snapshot(1)),
                device: &device,
            },
            quiet_recording(dir.path()),
            &mailbox,
            &stop,
            || {
                // A learner stand-in: two new versions, one second apart.
                for version in [2, 3] {
                    std::thread::sleep(Duration::from_secs(1));
                    mailbox.publish(std::sync::Arc::new(snapshot(version)));
                }
                std::thread::sleep(Duration::from_secs(1));
                stop.store(true, Ordering::Relaxed);
            },
        )
        .unwrap();
        // 20 Hz for about 3 s. Up to a tenth of the ticks may miss here: unit tests
        // share two cores with CPU-heavy neighbours (the replay mutation and config
        // property tests, policy training), and 4 misses in 55 ticks were seen on the
        // dev VM; the daemon tests, run one at a time, require none.
        assert!((50..=65).contains(&report.ticks), "{report:?}");
        assert!(report.deadline_misses * 10 <= report.ticks, "{report:?}");
        assert_eq!(report.queue_drops, 0);
        assert_eq!(report.policy_versions, vec![1, 2, 3]);
        assert_eq!(report.transitions_written, report.actor_transitions);
        // The actor never waits for a publication: they come a second apart, so a
        // tick blocked on one would take about a second. The bound is half that, not
        // the 50 ms period: unit tests share two cores with CPU-heavy neighbours (a
        // 66 ms p99 was seen in CI, and 114 ms ticks on a slow day of the dev VM,
        // while a world model trained beside it); the daemon tests, run one at a
        // time, hold the loop to its period.
        assert!(report.tick_latency_ms.max < 500.0, "{report:?}");
        let contents = read_replay(dir.path()).unwrap();
        assert_eq!(contents.records, report.replay_records);
        let complete: usize = contents.episodes.iter().map(|e| e.transitions.len()).sum();
        assert!(complete as u64 <= report.transitions_written);
        let versions: Vec<u64> = contents
            .episodes
            .iter()
            .flat_map(|e| e.transitions.iter().map(|t| t.policy_version))
            .collect();
        assert!(
            versions.windows(2).all(|w| w[0] <= w[1]),
            "versions only grow"
        );
    }

    #[test]
    fn a_dead_actor_stops_the_caller_and_is_an_error_naming_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let config: ActorConfig = ActorConfig::default();
        // A policy for another camera: the actor's first tick fails.
        let policy_config =
            PolicyConfig::for_robot(imago_policies::Architecture::Vla, &config.robot.spec())
                .unwrap()
                .with_stored_changes(&serde_json::json!({ "image_size": 32 }))
                .unwrap();
        let snapshot = fresh_policy(&policy_config, &device);
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let mut stopped_by_engine = false;
        let error = run_control_loop(
            ActorStart {
                config: &config,
                initial: std::sync::Arc::new(snapshot),
                device: &device,
            },
            quiet_recording(dir.path()),
            &SnapshotMailbox::default(),
            &stop,
            || {
                // A learner stand-in that only ends when told to.
                while started.elapsed() < Duration::from_secs(60) {
                    if stop.load(Ordering::Relaxed) {
                        stopped_by_engine = true;
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            },
        )
        .unwrap_err();
        assert!(stopped_by_engine, "the caller was not stopped");
        assert!(started.elapsed() < Duration::from_secs(30));
        let message = format!("{error:#}");
        assert!(
            message.contains("the actor stopped") && message.contains("32x32"),
            "{message}"
        );
    }

    #[test]
    fn a_panicking_caller_stops_the_actor_and_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let config: ActorConfig = ActorConfig::default();
        let policy_config =
            PolicyConfig::for_robot(imago_policies::Architecture::Vla, &config.robot.spec())
                .unwrap();
        let snapshot = fresh_policy(&policy_config, &device);
        let stop = AtomicBool::new(false);
        let error = run_control_loop(
            ActorStart {
                config: &config,
                initial: std::sync::Arc::new(snapshot),
                device: &device,
            },
            quiet_recording(dir.path()),
            &SnapshotMailbox::default(),
            &stop,
            || {
                std::thread::sleep(Duration::from_millis(300));
                panic!("learner bug");
            },
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("the learner panicked: learner bug"),
            "{error}"
        );
        // The replay the actor recorded meanwhile is closed and readable.
        assert!(read_replay(dir.path()).unwrap().corruptions.is_empty());
    }
}
