//! Rerun telemetry: what the robot did, what the world model imagined and how wrong
//! it was, streamed to a `.rrd` file or a viewer.
//!
//! Producers (the control loop, learners, the demo, `imago inspect`) build plain
//! [`TelemetryEvent`]s and offer them to a [`Telemetry`] handle, which never waits: the
//! events go through a bounded queue, and when it is full the event is dropped and
//! counted. A logger thread owns the rerun recording, turns events into archetypes
//! on the timelines of [`paths`], and sends the default blueprint first.
//! `docs/telemetry.md` lists every entity path.

mod blueprint;
mod config;
mod episodes;
mod event;
mod logger;
pub mod paths;
mod read;
mod scalars;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Sender, TrySendError};

pub use config::{DEFAULT_VIEWER_URL, TelemetryConfig, TelemetryTarget};
pub use episodes::{control_step_event, episode_start_event, log_episode, log_replay_episodes};
pub use event::{
    ControlStepEvent, EpisodeEndEvent, EpisodeStartEvent, ImaginedBodies, ImaginedWindowEvent,
    TelemetryEvent, TickTiming,
};
pub use read::{RecordingSummary, read_recording};
pub use scalars::scalars_of;

/// The shared end of a telemetry session: the queue and its drop counter.
struct Channel {
    sender: Sender<TelemetryEvent>,
    dropped: AtomicU64,
    config: TelemetryConfig,
    /// Set when the session ends without [`TelemetrySession::finish`] (the command
    /// failed): the logger then creates no file that nothing was recorded in.
    abandoned: AtomicBool,
}

/// A cheap, cloneable handle producers offer events to; [`Telemetry::off`] ignores
/// everything. Offering never blocks.
#[derive(Clone, Default)]
pub struct Telemetry {
    channel: Option<Arc<Channel>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("on", &self.is_on())
            .field("dropped", &self.dropped())
            .finish()
    }
}

impl Telemetry {
    /// A handle that logs nothing.
    pub fn off() -> Self {
        Self::default()
    }

    /// Whether events go anywhere.
    pub fn is_on(&self) -> bool {
        self.channel.is_some()
    }

    /// The session's settings (defaults when off).
    pub fn config(&self) -> TelemetryConfig {
        self.channel
            .as_ref()
            .map_or_else(TelemetryConfig::default, |c| c.config.clone())
    }

    /// Whether the live control loop should log episode `episode` at all.
    pub fn wants_episode(&self, episode: u64) -> bool {
        self.channel
            .as_ref()
            .is_some_and(|c| episode.is_multiple_of(c.config.episode_every))
    }

    /// Whether a camera frame should go with control step `step` of an episode.
    pub fn wants_frame(&self, step: u32) -> bool {
        self.channel
            .as_ref()
            .is_some_and(|c| step.is_multiple_of(c.config.frame_every))
    }

    /// Offers `event` without waiting; a full queue (or a finished session) drops it
    /// and counts the drop.
    pub fn offer(&self, event: TelemetryEvent) {
        let Some(channel) = &self.channel else {
            return;
        };
        match channel.sender.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                channel.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Sends `event`, waiting for room in the queue: for producers off the control
    /// path (replayed episodes, training curves) that must not lose data. Nothing is
    /// sent once the session has finished.
    pub fn send(&self, event: TelemetryEvent) {
        if let Some(channel) = &self.channel
            && channel.sender.send(event).is_err()
        {
            channel.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.channel
            .as_ref()
            .map_or(0, |c| c.dropped.load(Ordering::Relaxed))
    }
}

/// What a finished session did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TelemetryReport {
    /// Events the logger turned into rerun data.
    pub logged: u64,
    /// Events dropped because the queue was full.
    pub dropped: u64,
}

/// A running telemetry session: the logger thread and the handle producers use.
/// [`TelemetrySession::finish`] flushes the recording; dropping it without finishing
/// also stops the logger, but an error is then only printed.
pub struct TelemetrySession {
    handle: Telemetry,
    logger: Option<JoinHandle<anyhow::Result<u64>>>,
}

impl TelemetrySession {
    /// Opens the recording at `target` (`None`: a session that logs nothing) and starts
    /// the logger thread. `application` names the recording in the viewer.
    pub fn start(
        target: Option<&TelemetryTarget>,
        config: &TelemetryConfig,
        application: &'static str,
    ) -> anyhow::Result<Self> {
        let Some(target) = target else {
            return Ok(Self {
                handle: Telemetry::off(),
                logger: None,
            });
        };
        config
            .validate()
            .map_err(|e| anyhow::anyhow!("telemetry settings: {e}"))?;
        // A file is opened with the first event recorded (or at a successful finish):
        // a command refused before it records anything leaves none behind. A viewer is
        // connected to (or started) now, so that an absent one is said at once.
        let destination = match target {
            TelemetryTarget::File(_) => logger::Destination::Pending {
                target: target.clone(),
                application,
            },
            _ => logger::Destination::Open(logger::open_recording(target, application)?),
        };
        let (sender, receiver) = crossbeam_channel::bounded(config.queue);
        let channel = Arc::new(Channel {
            sender,
            dropped: AtomicU64::new(0),
            config: config.clone(),
            abandoned: AtomicBool::new(false),
        });
        let shared = channel.clone();
        let logger = std::thread::Builder::new()
            .name("imago-telemetry".into())
            .spawn(move || logger::run_logger(destination, receiver, &shared))?;
        Ok(Self {
            handle: Telemetry {
                channel: Some(channel),
            },
            logger: Some(logger),
        })
    }

    /// The handle to give producers.
    pub fn handle(&self) -> Telemetry {
        self.handle.clone()
    }

    /// Stops the logger after it has logged everything queued so far, and flushes
    /// the recording (for a file: written and closed).
    pub fn finish(mut self) -> anyhow::Result<TelemetryReport> {
        self.stop()
    }

    fn stop(&mut self) -> anyhow::Result<TelemetryReport> {
        let Some(logger) = self.logger.take() else {
            return Ok(TelemetryReport {
                logged: 0,
                dropped: 0,
            });
        };
        if let Some(channel) = &self.handle.channel {
            // Waits for room: the logger is draining the queue.
            let _ = channel.sender.send(TelemetryEvent::Finish);
        }
        let logged = logger
            .join()
            .map_err(|_| anyhow::anyhow!("the telemetry logger thread panicked"))??;
        Ok(TelemetryReport {
            logged,
            dropped: self.handle.dropped(),
        })
    }
}

impl Drop for TelemetrySession {
    fn drop(&mut self) {
        if let Some(channel) = &self.handle.channel {
            channel.abandoned.store(true, Ordering::Relaxed);
        }
        if let Err(error) = self.stop() {
            eprintln!("warning: telemetry: {error:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use imago_robots::Robot;

    use super::*;
    use crate::robot::RobotConfig;
    use crate::store::replay::Transition;

    /// One event of every kind, as producers build them.
    fn every_event() -> Vec<TelemetryEvent> {
        let mut robot = RobotConfig::default().build().unwrap();
        let observation = robot.reset(3);
        let chunk = [0.1, 0.2, 0.3, 0.4];
        vec![
            TelemetryEvent::Note("phase".into()),
            episode_start_event(Some(&robot), 0, &observation.instruction),
            control_step_event(
                Some(&robot),
                &Transition {
                    episode: 0,
                    step: 0,
                    observation: observation.clone(),
                    action: imago_robots::Action(chunk[..2].to_vec()),
                    executed: imago_robots::Action(vec![0.1, 0.2]),
                    reward: -0.1,
                    done: false,
                    success: false,
                    policy_version: 1,
                    intervention: false,
                    behaviour_log_prob: None,
                },
                &chunk,
                robot.intended_path(&chunk),
                Some(2),
                Some(TickTiming {
                    latency_ms: 2.0,
                    deadline_misses: 0,
                }),
            ),
            TelemetryEvent::Imagined(Box::new(ImaginedWindowEvent {
                episode: 0,
                start_step: 0,
                members: vec![vec![[0.0, 0.0], [0.1, 0.1]]; 2],
                real: vec![[0.0, 0.0], [0.1, 0.0]],
                error: vec![0.5],
                disagreement: vec![0.2],
                interval: vec![0.8],
                bodies: Some(ImaginedBodies {
                    imagined: vec![[0.0, 0.0], [0.1, 0.1], [0.0, 0.1]],
                    real: vec![[0.0, 0.0], [0.1, 0.0], [0.0, 0.1]],
                }),
            })),
            TelemetryEvent::EpisodeEnd(EpisodeEndEvent {
                episode: 0,
                steps: 1,
                success: true,
                episode_return: 0.9,
            }),
            TelemetryEvent::LearnerScalars {
                version: 2,
                values: vec![("loss".into(), 0.3)],
            },
            TelemetryEvent::PromotionStatistics(vec![("log10_evidence_better".into(), 0.4)]),
            TelemetryEvent::TransitionWeights {
                version: 2,
                advantages: vec![-1.0, 1.0],
                weights: vec![0.5, 2.0],
            },
            TelemetryEvent::LossCurve {
                run: "bc".into(),
                term: "loss".into(),
                values: vec![1.0, 0.5, 0.25],
            },
            TelemetryEvent::WorldModelEvaluation {
                horizon_error: vec![0.1, 0.2],
                copy_last_error: vec![0.2, 0.4],
                coverage_2sigma: vec![0.95, 0.94],
            },
            TelemetryEvent::ProbeFit(0.02),
            TelemetryEvent::EvalSuccess {
                name: "bc".into(),
                rate: 0.5,
            },
        ]
    }

    #[test]
    fn a_recording_holds_every_documented_path_timeline_and_the_blueprint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/run.rrd");
        let session = TelemetrySession::start(
            Some(&TelemetryTarget::File(path.clone())),
            &TelemetryConfig::default(),
            "imago-test",
        )
        .unwrap();
        let events = every_event();
        let count = events.len() as u64;
        for event in events {
            session.handle().send(event);
        }
        let report = session.finish().unwrap();
        assert_eq!(
            report,
            TelemetryReport {
                logged: count,
                dropped: 0
            }
        );
        let summary = read_recording(&path).unwrap();
        assert_eq!(
            summary.missing(&paths::ENTITIES, &paths::TIMELINES),
            Vec::<&str>::new()
        );
        assert!(summary.has_blueprint);
        // Three optimiser steps of the loss curve, as one column.
        assert_eq!(summary.rows["train/bc/loss"], 3);
    }

    #[test]
    fn a_file_appears_with_the_first_event_or_a_finish_never_for_a_refused_run() {
        let dir = tempfile::tempdir().unwrap();
        let start = |name: &str| {
            let path = dir.path().join(name);
            let target = TelemetryTarget::File(path.clone());
            let session =
                TelemetrySession::start(Some(&target), &TelemetryConfig::default(), "imago-test")
                    .unwrap();
            (session, path)
        };
        // Refused before it recorded anything (dropped, not finished): no file.
        let (session, refused) = start("refused.rrd");
        drop(session);
        assert!(!refused.exists());
        // Failed after recording something: what it recorded is kept.
        let (session, failed) = start("failed.rrd");
        session.handle().send(TelemetryEvent::Note("phase".into()));
        drop(session);
        assert!(!read_recording(&failed).unwrap().rows.is_empty());
        // Finished without an event: an empty recording, with its blueprint.
        let (session, quiet) = start("quiet.rrd");
        session.finish().unwrap();
        assert!(read_recording(&quiet).unwrap().has_blueprint);
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let (sender, _receiver) = crossbeam_channel::bounded(2);
        let telemetry = Telemetry {
            channel: Some(Arc::new(Channel {
                sender,
                dropped: AtomicU64::new(0),
                config: TelemetryConfig::default(),
                abandoned: AtomicBool::new(false),
            })),
        };
        for _ in 0..5 {
            telemetry.offer(TelemetryEvent::Note("tick".into()));
        }
        assert_eq!(telemetry.dropped(), 3);
        let off = Telemetry::off();
        off.offer(TelemetryEvent::Note("ignored".into()));
        assert_eq!(off.dropped(), 0);
        assert!(!off.wants_episode(0) && !off.wants_frame(0));
    }

    #[test]
    fn a_missing_or_damaged_recording_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_recording(&dir.path().join("none.rrd")).unwrap_err();
        assert!(missing.to_string().contains("cannot open"), "{missing}");
        let junk = dir.path().join("junk.rrd");
        std::fs::write(&junk, b"not a recording at all").unwrap();
        let error = read_recording(&junk).unwrap_err();
        assert!(
            error.to_string().contains("not a readable recording"),
            "{error}"
        );
    }

    #[test]
    fn the_documentation_names_every_path_and_timeline() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/telemetry.md"),
        )
        .unwrap();
        for name in paths::ENTITIES.iter().chain(&paths::TIMELINES) {
            assert!(
                doc.contains(&format!("`{name}")),
                "docs/telemetry.md does not name `{name}`"
            );
        }
    }

    #[test]
    fn invalid_settings_are_refused_with_the_key() {
        let config = TelemetryConfig {
            frame_every: 0,
            ..TelemetryConfig::default()
        };
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "frame_every = 0: must be in [1, 1000000]"
        );
        let error = TelemetrySession::start(
            Some(&TelemetryTarget::File("x.rrd".into())),
            &config,
            "imago-test",
        )
        .err()
        .unwrap();
        assert!(error.to_string().contains("frame_every"), "{error}");
    }
}
