//! The replay writer thread: drains the actor's queue into segment files, flushing
//! (fsync) at the end of every episode. A write error (disk full, permissions) stops
//! recording with the reason kept for the report and raises `halt`, so that the engine
//! stops the control loop at its next tick (a robot that cannot record must not go on
//! learning from nothing); the queue is still drained so the actor never blocks, and
//! every record that was not written is counted.

use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Receiver;
use serde::{Deserialize, Serialize};

use crate::store::replay::{ReplayRecord, ReplayWriter};

/// What the writer thread did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WriterReport {
    /// Records written.
    pub records: u64,
    /// Transitions among them.
    pub transitions: u64,
    /// Records received but not written because recording had stopped.
    pub unwritten: u64,
    /// Why recording stopped early, if it did.
    pub error: Option<String>,
    /// Old closed segments the retention limit deleted.
    pub dropped_segments: u64,
}

/// Writes every record received on `records` until all senders are gone, then closes
/// the replay. Sets `halt` when recording fails.
pub fn run_writer(
    mut writer: ReplayWriter,
    records: Receiver<ReplayRecord>,
    halt: &AtomicBool,
) -> WriterReport {
    let mut report = WriterReport::default();
    for record in records.iter() {
        if report.error.is_some() {
            report.unwritten += 1;
            continue;
        }
        let episode_end = matches!(
            record,
            ReplayRecord::EpisodeEnd(_) | ReplayRecord::EpisodeAbandoned(_)
        );
        let transition = matches!(record, ReplayRecord::Transition(_));
        let written = writer
            .append(&record)
            .and_then(|()| if episode_end { writer.flush() } else { Ok(()) });
        match written {
            Ok(()) => {
                report.records += 1;
                report.transitions += transition as u64;
            }
            Err(error) => {
                report.error = Some(format!("recording stopped: {error:#}"));
                report.unwritten += 1;
                halt.store(true, Ordering::Relaxed);
            }
        }
    }
    report.dropped_segments = writer.dropped_segments();
    if report.error.is_none() {
        match writer.close() {
            Ok(dropped) => report.dropped_segments = dropped,
            Err(error) => {
                report.error = Some(format!("closing the replay failed: {error:#}"));
                halt.store(true, Ordering::Relaxed);
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robot::RobotConfig;
    use crate::store::replay::{EpisodeStart, ReplayWriterConfig};

    #[test]
    fn a_failing_disk_stops_recording_with_a_reason_and_counts_what_was_lost() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, _) = ReplayWriter::open(
            dir.path(),
            ReplayWriterConfig::default(),
            &RobotConfig::default(),
            "test",
        )
        .unwrap();
        // The segments folder disappears (a pulled disk): no segment can be created.
        std::fs::remove_dir_all(dir.path().join("segments")).unwrap();
        let (sender, receiver) = crossbeam_channel::bounded(8);
        let halt = std::sync::Arc::new(AtomicBool::new(false));
        let raised = halt.clone();
        let thread = std::thread::spawn(move || run_writer(writer, receiver, &raised));
        for episode in 0..5 {
            sender
                .send(ReplayRecord::EpisodeStart(EpisodeStart {
                    episode,
                    robot: "reacher2d".into(),
                    seed: episode,
                    instruction: "reach the red target".into(),
                }))
                .unwrap();
        }
        drop(sender);
        let report = thread.join().expect("the writer thread does not panic");
        assert_eq!(report.records, 0);
        assert_eq!(report.unwritten, 5);
        let reason = report.error.unwrap();
        assert!(reason.contains("cannot create replay segment"), "{reason}");
        assert!(
            halt.load(Ordering::Relaxed),
            "a failed recording halts the loop"
        );
    }
}
