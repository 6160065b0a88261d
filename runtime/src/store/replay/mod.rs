//! The replay store: every transition a robot produced, on disk, crash-safely.
//!
//! Layout of a replay directory:
//! - `segments/NNNNNN.seg`: append-only segment files, each a sequence of records
//!   framed as `[len: u32 LE][crc32: u32 LE][postcard bytes]`;
//! - `manifest.json`: the closed segments, written atomically (temp file, then rename).
//!
//! The manifest also carries the [`RobotSpec`] of the robot whose episodes the replay
//! holds; appending episodes of another spec is an error, and readers validate every
//! episode against it.
//!
//! Episodes are whole or absent: the reader ([`read_replay`]) hands out only episodes
//! that are structurally whole (a start, steps `0..n` in order, an end whose count
//! matches, one episode id) and fit the spec (image size, vector lengths, finite
//! values). Damage is a cut: an episode that spans a damaged frame, a missing segment
//! or a segment whose length disagrees with the manifest is reported as damaged, never
//! joined across the damage; intact episodes after the damage are read again. A crash
//! can leave the last open segment with a torn tail; [`ReplayWriter::open`] truncates
//! such a tail (only a tail with no intact record after it), keeping every record
//! before it, and continues in a fresh segment. [`ReplayFollower`] reads a replay
//! while it is written, only what was appended since its last look, with the same
//! checks (the daemon's learner).

mod assemble;
mod check;
mod follow;
mod frame;
mod reader;
mod record;
mod training;
mod writer;

pub use assemble::{DamagedEpisode, EpisodeShape};
pub use check::{RepairReport, check_replay, repair_replay};
pub use follow::ReplayFollower;
pub use frame::{FrameError, encode_frame};
pub use reader::{Corruption, ReplayContents, SegmentSummary, read_replay};
pub use record::{
    Episode, EpisodeAbandoned, EpisodeEnd, EpisodeOrigin, EpisodeStart, ReplayRecord, Transition,
    transition_indices,
};
pub use training::{
    EpisodeSelection, ReplaySource, TrainingReplay, check_replay_robot, read_training_replay,
    replay_robot,
};
pub use writer::{OpenReport, ReplayWriter, ReplayWriterConfig};

use std::path::{Path, PathBuf};

use imago_robots::RobotSpec;
use serde::{Deserialize, Serialize};

use crate::robot::RobotConfig;

/// The manifest's file name inside a replay directory.
pub const MANIFEST: &str = "manifest.json";
/// The segments' folder inside a replay directory.
pub const SEGMENTS: &str = "segments";
/// Version of the on-disk format (2: transitions carry the behaviour log-density).
pub const FORMAT_VERSION: u32 = 2;

/// The highest id an episode may have. `u64::MAX` is never an id, so that one past
/// the highest id recorded (the next free one) is always a number, and ids never wrap.
pub const LAST_EPISODE_ID: u64 = u64::MAX - 1;

/// Checks that `id`, about to be given to a new episode, is one ([`LAST_EPISODE_ID`]
/// at most): a clear error when the replay's ids are used up.
pub fn ensure_episode_id(id: u64) -> anyhow::Result<()> {
    anyhow::ensure!(
        id <= LAST_EPISODE_ID,
        "the replay's episode ids are used up (its manifest or records already name ids up to the last one, {LAST_EPISODE_ID}); record into a new replay directory"
    );
    Ok(())
}

/// The robot a replay's episodes are of, as its manifest records it: the spec every
/// episode is checked against, and the robot's settings when known (the registry's
/// JSON form, [`RobotConfig::to_json`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRobot {
    /// The spec.
    pub spec: RobotSpec,
    /// The settings, `None` when unknown (they are then left as the manifest has them).
    pub settings: Option<serde_json::Value>,
}

impl From<&RobotConfig> for RecordedRobot {
    fn from(robot: &RobotConfig) -> Self {
        Self {
            spec: robot.spec(),
            settings: Some(robot.to_json()),
        }
    }
}

/// One closed segment, as listed in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// File name inside `segments/`.
    pub file: String,
    /// Number of records.
    pub records: u64,
    /// Size in bytes.
    pub bytes: u64,
    /// The last segment of a writer's session (closed by the writer, or recovered
    /// after a crash): an episode still open at its end was cut short by a stop or a
    /// crash, which readers count as unfinished rather than damaged.
    #[serde(default)]
    pub ends_session: bool,
}

/// The list of closed segments and the robot the replay records.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Manifest {
    /// On-disk format version.
    pub format: u32,
    /// The robot whose episodes the replay holds; `None` in replays written before
    /// the spec was recorded (their episodes are checked against the first whole one).
    #[serde(default)]
    pub spec: Option<RobotSpec>,
    /// The settings of the robot the newest session recorded with, as the robot
    /// registry writes them (`{"NAME": {settings}}`); earlier sessions may have used
    /// other settings of the same spec. `None` in replays written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub robot: Option<serde_json::Value>,
    /// Closed segments, oldest first.
    pub closed: Vec<SegmentEntry>,
    /// The next unused episode id when the manifest was written, so that ids of
    /// episodes lost to damage or retention are never given out again.
    #[serde(default)]
    pub next_episode: u64,
}

impl Manifest {
    /// Reads the manifest of `dir`; a directory without one has an empty manifest.
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(MANIFEST);
        if !path.exists() {
            return Ok(Self {
                format: FORMAT_VERSION,
                spec: None,
                robot: None,
                closed: Vec::new(),
                next_episode: 0,
            });
        }
        let bytes = std::fs::read(&path)
            .map_err(|e| anyhow::anyhow!("cannot read replay manifest {}: {e}", path.display()))?;
        let manifest: Self = serde_json::from_slice(&bytes).map_err(|e| {
            anyhow::anyhow!(
                "replay manifest {} is malformed ({e}); `imago replay check {}` reads the segments without it, `imago replay repair` writes a clean copy",
                path.display(),
                dir.display()
            )
        })?;
        if manifest.format != FORMAT_VERSION {
            anyhow::bail!(
                "replay {} has format {}, this build reads format {FORMAT_VERSION}",
                dir.display(),
                manifest.format
            );
        }
        if let Some(spec) = &manifest.spec {
            spec.validate().map_err(|e| {
                anyhow::anyhow!(
                    "replay manifest {} records a robot spec out of range ({e}); `imago replay check {}` reads the segments without it, `imago replay repair` writes a clean copy",
                    path.display(),
                    dir.display()
                )
            })?;
        }
        Ok(manifest)
    }

    /// Writes the manifest atomically.
    pub fn store(&self, dir: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(self)?;
        crate::store::atomic::write_file(&dir.join(MANIFEST), &json)
    }
}

/// The index of a segment file named `NNNNNN.seg`.
pub fn segment_index(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_suffix(".seg")?
        .parse()
        .ok()
}

/// The file name of `path`, as a string (empty when it has none).
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Paths of the segment files of `dir` (named `NNNNNN.seg`), in index order.
pub fn segment_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let folder = dir.join(SEGMENTS);
    if !folder.exists() {
        anyhow::bail!(
            "{} is not a replay directory (no `{SEGMENTS}/` folder); create one with `imago collect`",
            dir.display()
        );
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .map_err(|e| anyhow::anyhow!("cannot list {}: {e}", folder.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| segment_index(p).is_some())
        .collect();
    files.sort_by_key(|p| segment_index(p));
    Ok(files)
}

#[cfg(test)]
mod damage_tests;
#[cfg(test)]
mod tests;
