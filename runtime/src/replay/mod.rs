//! The replay store: every transition a robot produced, on disk, crash-safely.
//!
//! Layout of a replay directory:
//! - `segments/NNNNNN.seg`: append-only segment files, each a sequence of records
//!   framed as `[len: u32 LE][crc32: u32 LE][postcard bytes]`;
//! - `manifest.json`: the closed segments, written atomically (temp file, then rename).
//!
//! A crash can leave the last open segment with a torn tail (a partial frame, or a frame
//! whose checksum does not match). Readers stop at the first bad frame of a segment and
//! report it; [`ReplayWriter::open`] truncates such a tail, keeping every record before
//! it, and continues in a fresh segment.

mod frame;
mod reader;
mod record;
mod writer;

pub use frame::{FrameError, encode_frame};
pub use reader::{Corruption, Episode, ReplayContents, read_replay};
pub use record::{EpisodeEnd, EpisodeStart, ReplayRecord, Transition};
pub use writer::{OpenReport, ReplayWriter, ReplayWriterConfig};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The manifest's file name inside a replay directory.
pub const MANIFEST: &str = "manifest.json";
/// The segments' folder inside a replay directory.
pub const SEGMENTS: &str = "segments";
/// Version of the on-disk format (2: transitions carry the behaviour log-density).
pub const FORMAT_VERSION: u32 = 2;

/// One closed segment, as listed in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// File name inside `segments/`.
    pub file: String,
    /// Number of records.
    pub records: u64,
    /// Size in bytes.
    pub bytes: u64,
}

/// The list of closed segments.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Manifest {
    /// On-disk format version.
    pub format: u32,
    /// Closed segments, oldest first.
    pub closed: Vec<SegmentEntry>,
}

impl Manifest {
    /// Reads the manifest of `dir`; a directory without one has an empty manifest.
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(MANIFEST);
        if !path.exists() {
            return Ok(Self {
                format: FORMAT_VERSION,
                closed: Vec::new(),
            });
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("cannot read replay manifest {}: {e}", path.display()))?;
        let manifest: Self = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "replay manifest {} is malformed ({e}); move it aside to rescan the segments",
                path.display()
            )
        })?;
        if manifest.format != FORMAT_VERSION {
            anyhow::bail!(
                "replay {} has format {}, this build reads format {FORMAT_VERSION}",
                dir.display(),
                manifest.format
            );
        }
        Ok(manifest)
    }

    /// Writes the manifest atomically.
    pub fn store(&self, dir: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(self)?;
        crate::atomic::write_file(&dir.join(MANIFEST), &json)
    }
}

/// Paths of the segment files of `dir`, in order.
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
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests;
