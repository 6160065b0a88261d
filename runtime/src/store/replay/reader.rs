//! Reading a replay directory back into whole episodes, with an account of every
//! damaged stretch and every episode left out.

use std::path::Path;

use anyhow::Context;
use imago_robots::RobotSpec;

use super::assemble::{Assembler, DamagedEpisode, EpisodeShape};
use super::frame::{FrameError, decode_frame, resync};
use super::record::{Episode, EpisodeOrigin, ReplayRecord};
use super::{FORMAT_VERSION, MANIFEST, Manifest, file_name, segment_files, segment_index};

/// A damaged stretch of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// Segment file name.
    pub segment: String,
    /// Byte offset where the damage begins.
    pub offset: u64,
    /// Bytes skipped from there (to the next intact record, or to the segment's end).
    pub skipped_bytes: u64,
    /// What was wrong.
    pub reason: String,
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "segment {} is damaged at byte {} ({}): {} bytes skipped",
            self.segment, self.offset, self.reason, self.skipped_bytes
        )
    }
}

/// What one segment holds, as `imago replay check` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SegmentSummary {
    /// File name.
    pub file: String,
    /// Records read.
    pub records: u64,
    /// Size in bytes (as found).
    pub bytes: u64,
    /// Whole episodes that began in this segment.
    pub good_episodes: u64,
    /// Episodes left out that began (or were found) in this segment.
    pub damaged_episodes: u64,
    /// The highest policy version of a transition in this segment.
    pub max_policy_version: u64,
}

/// Everything readable in a replay directory.
#[derive(Debug, Clone, Default)]
pub struct ReplayContents {
    /// The robot the replay records (from the manifest; `None` in replays written
    /// before the manifest carried it).
    pub spec: Option<RobotSpec>,
    /// The robot settings the manifest records (see [`super::Manifest::robot`]).
    pub robot: Option<serde_json::Value>,
    /// The shape episodes were checked against (the spec's, or the first whole
    /// episode's when there is no spec).
    pub shape: Option<EpisodeShape>,
    /// Whole episodes, in recorded order.
    pub episodes: Vec<Episode>,
    /// Records read.
    pub records: u64,
    /// The highest policy version of any transition read, whole episode or not (0:
    /// none, or only scripted controllers).
    pub max_policy_version: u64,
    /// Episodes still open at the end of the replay: being recorded now, or cut short
    /// by a stop or a crash (not damage).
    pub unfinished_episodes: u64,
    /// Episodes left out, with the reason.
    pub damaged: Vec<DamagedEpisode>,
    /// Where the whole episodes a fleet learner stored were recorded first (empty in
    /// any other replay).
    pub origins: Vec<EpisodeOrigin>,
    /// Damaged stretches found.
    pub corruptions: Vec<Corruption>,
    /// Per segment, in order.
    pub segments: Vec<SegmentSummary>,
    /// Why the manifest could not be used, when it could not (the segments were then
    /// read without it).
    pub manifest_problem: Option<String>,
}

impl ReplayContents {
    /// Whether anything in the replay is damaged (an episode left out, a damaged
    /// stretch, an unusable manifest).
    pub fn is_damaged(&self) -> bool {
        !self.damaged.is_empty() || !self.corruptions.is_empty() || self.manifest_problem.is_some()
    }

    /// One line per kind of damage, for a command's output; empty when none.
    pub fn damage_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(problem) = &self.manifest_problem {
            lines.push(format!("the manifest: {problem}; segments read without it"));
        }
        lines.extend(self.corruptions.iter().map(ToString::to_string));
        lines.extend(self.damaged.iter().map(ToString::to_string));
        lines
    }
}

/// Reads every readable record of the replay at `dir` and assembles whole episodes;
/// see the module documentation of [`crate::store::replay`] for what counts as damage.
/// Errors only when `dir` is no replay at all or a file cannot be read.
pub fn read_replay(dir: &Path) -> anyhow::Result<ReplayContents> {
    let files = segment_files(dir)?;
    let mut out = ReplayContents::default();
    let manifest = match Manifest::load(dir) {
        Ok(manifest) => Some(manifest),
        Err(_) if !dir.join(MANIFEST).exists() => None,
        Err(error) => {
            let text = format!("{error:#}");
            if text.contains("this build reads format") {
                return Err(error);
            }
            out.manifest_problem = Some(text);
            None
        }
    };
    if let Some(manifest) = &manifest {
        debug_assert_eq!(manifest.format, FORMAT_VERSION);
        out.spec = manifest.spec.clone();
        out.robot = manifest.robot.clone();
    }
    let mut assembler = Assembler::new(out.spec.as_ref().map(EpisodeShape::of));
    let mut previous_index: Option<u64> = None;
    let listed: Vec<&super::SegmentEntry> = manifest.iter().flat_map(|m| &m.closed).collect();
    // Segments the manifest lists that are gone: a cut where each was. Retention
    // removes a segment from the manifest before deleting it, but a reader may read
    // the manifest before and list the files after: a missing segment older than every
    // present one is taken as deleted by retention, not damage.
    let oldest_present = files.iter().filter_map(|f| segment_index(f)).min();
    let mut missing: Vec<(u64, String)> = listed
        .iter()
        .filter(|entry| !files.iter().any(|f| file_name(f) == entry.file))
        .filter_map(|entry| Some((segment_index(Path::new(&entry.file))?, entry.file.clone())))
        .filter(|(index, _)| oldest_present.is_none_or(|oldest| *index > oldest))
        .collect();
    missing.sort();
    const LISTED_BUT_MISSING: &str = "listed in the manifest, but the file is missing";
    for path in &files {
        let name = file_name(path);
        let Some(index) = segment_index(path) else {
            continue;
        };
        for (_, file) in missing.iter().filter(|(i, _)| *i < index) {
            lost(&mut out, &mut assembler, file, LISTED_BUT_MISSING.into());
        }
        missing.retain(|(i, _)| *i > index);
        if let Some(previous) = previous_index
            && index > previous + 1
        {
            let gap = format!("{:06}.seg", previous + 1);
            if !out.corruptions.iter().any(|c| c.segment == gap) {
                let why = format!(
                    "segments {gap} to {:06}.seg are missing between {previous:06}.seg and {name}",
                    index - 1
                );
                lost(&mut out, &mut assembler, &gap, why);
            }
        }
        previous_index = Some(index);
        let entry = listed.iter().find(|e| e.file == name);
        let data = match std::fs::read(path) {
            Ok(data) => data,
            // Deleted by retention since the listing (it unlists first).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && entry.is_none() => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                lost(&mut out, &mut assembler, &name, LISTED_BUT_MISSING.into());
                continue;
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot read replay segment {}", path.display()));
            }
        };
        let expected = entry.map(|e| e.bytes);
        // The newest segment, when the manifest does not list it, is the one being
        // written (or left open by a crash): a record cut off at its very end is its
        // tail, not damage.
        let open_tail = expected.is_none() && Some(path) == files.last();
        let summary = read_segment(
            &name,
            &data,
            expected,
            open_tail,
            &mut assembler,
            &mut out.corruptions,
        );
        out.records += summary.records;
        out.max_policy_version = out.max_policy_version.max(summary.max_policy_version);
        out.segments.push(summary);
        if entry.is_some_and(|e| e.ends_session) {
            assembler.session_end();
        }
    }
    for (_, file) in missing {
        lost(&mut out, &mut assembler, &file, LISTED_BUT_MISSING.into());
    }
    out.unfinished_episodes = assembler.finish();
    out.shape = assembler.shape().cloned();
    for (episode, segment) in std::mem::take(&mut assembler.episodes) {
        if let Some(s) = out.segments.iter_mut().find(|s| s.file == segment) {
            s.good_episodes += 1;
        }
        out.episodes.push(episode);
    }
    for damaged in &assembler.damaged {
        if let Some(s) = out.segments.iter_mut().find(|s| s.file == damaged.segment) {
            s.damaged_episodes += 1;
        }
    }
    out.damaged = std::mem::take(&mut assembler.damaged);
    out.origins = std::mem::take(&mut assembler.origins);
    Ok(out)
}

/// A whole segment is gone: a damaged stretch, and a cut where it was.
fn lost(out: &mut ReplayContents, assembler: &mut Assembler, file: &str, why: String) {
    out.corruptions.push(Corruption {
        segment: file.to_string(),
        offset: 0,
        skipped_bytes: 0,
        reason: why,
    });
    assembler.cut(&format!("missing segment {file}"));
}

/// Reads one segment's records into `assembler`, cutting at every damaged stretch and
/// going on from the next intact record. `expected` is the length the manifest lists
/// for a closed segment: bytes missing from it are damage too (a cut), bytes beyond it
/// are reported and left unread. In an `open_tail` segment a record cut off by the end
/// of the file is left unread (it is being written, or a crash tore it) and the
/// episode it belongs to stays unfinished.
fn read_segment(
    name: &str,
    data: &[u8],
    expected: Option<u64>,
    open_tail: bool,
    assembler: &mut Assembler,
    corruptions: &mut Vec<Corruption>,
) -> SegmentSummary {
    let mut summary = SegmentSummary {
        file: name.to_string(),
        bytes: data.len() as u64,
        ..SegmentSummary::default()
    };
    let end = match expected {
        Some(listed) if (listed as usize) < data.len() => listed as usize,
        _ => data.len(),
    };
    read_records(
        (name, 0),
        &data[..end],
        open_tail,
        assembler,
        corruptions,
        &mut summary,
    );
    match expected {
        Some(listed) if listed as usize > data.len() => {
            corruptions.push(Corruption {
                segment: name.to_string(),
                offset: data.len() as u64,
                skipped_bytes: 0,
                reason: format!(
                    "the file has {} bytes, the manifest lists {listed}: it was cut short",
                    data.len()
                ),
            });
            assembler.cut(&format!("the end of {name}"));
        }
        // Bytes after the length the manifest lists were added after the segment was
        // closed (a writer never appends to a closed segment): the records it listed
        // were all read (a last record cut by the listed end was a cut above), so the
        // stream goes on in the next segment with nothing missing, and an episode
        // running across the boundary is whole.
        Some(listed) if (listed as usize) < data.len() => {
            corruptions.push(Corruption {
                segment: name.to_string(),
                offset: listed,
                skipped_bytes: data.len() as u64 - listed,
                reason: format!(
                    "the file has {} bytes, the manifest lists {listed}: bytes beyond are not read",
                    data.len()
                ),
            });
        }
        _ => {}
    }
    summary
}

/// Decodes the records of `data`, the bytes of one segment from byte `base` on, into
/// `assembler`, cutting at every damaged stretch and going on from the next intact
/// record; counts them in `summary`.
/// Returns the bytes consumed: all of `data`, except that in an `open_tail` a record
/// cut off by the end of `data` is left unread (it is being written, or a crash tore
/// it).
pub(super) fn read_records(
    (name, base): (&str, u64),
    data: &[u8],
    open_tail: bool,
    assembler: &mut Assembler,
    corruptions: &mut Vec<Corruption>,
    summary: &mut SegmentSummary,
) -> usize {
    let mut offset = 0;
    while offset < data.len() {
        match decode_record(&data[offset..]) {
            Ok((record, used)) => {
                if let ReplayRecord::Transition(t) = &record {
                    summary.max_policy_version = summary.max_policy_version.max(t.policy_version);
                }
                assembler.record(record, name);
                summary.records += 1;
                offset += used;
            }
            Err(error) => {
                let next = resync(data, offset, |p| {
                    postcard::from_bytes::<ReplayRecord>(p).is_ok()
                });
                if open_tail && next.is_none() && error.is_torn() {
                    break;
                }
                let until = next.unwrap_or(data.len());
                corruptions.push(Corruption {
                    segment: name.to_string(),
                    offset: base + offset as u64,
                    skipped_bytes: (until - offset) as u64,
                    reason: error.to_string(),
                });
                assembler.cut(&format!("{name} byte {}", base + offset as u64));
                offset = until;
            }
        }
    }
    offset
}

/// Why a record could not be read.
#[derive(Debug)]
pub(super) enum RecordError {
    /// The frame is damaged or cut off.
    Frame(FrameError),
    /// The frame is intact but its payload is no record.
    Undecodable(String),
}

impl RecordError {
    /// Whether the data ends inside the frame, or the rest is zeros (a crash can leave
    /// either at the end of the file being written).
    pub fn is_torn(&self) -> bool {
        matches!(self, Self::Frame(e) if e.is_truncation() || *e == FrameError::BadLength(0))
    }
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Frame(e) => write!(f, "{e}"),
            Self::Undecodable(e) => write!(f, "undecodable record: {e}"),
        }
    }
}

/// The record framed at the start of `data` and the bytes it takes.
pub(super) fn decode_record(data: &[u8]) -> Result<(ReplayRecord, usize), RecordError> {
    let (payload, used) = decode_frame(data).map_err(RecordError::Frame)?;
    let record = postcard::from_bytes::<ReplayRecord>(payload)
        .map_err(|e| RecordError::Undecodable(e.to_string()))?;
    Ok((record, used))
}
