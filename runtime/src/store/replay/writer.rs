//! Appending records to a replay directory.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use imago_robots::bounds::{ConfigError, in_range};

use super::RecordedRobot;
use super::frame::{encode_frame, resync};
use super::reader::decode_record;
use super::record::ReplayRecord;
use super::record::{Episode, EpisodeOrigin};
use super::{
    FORMAT_VERSION, LAST_EPISODE_ID, Manifest, SEGMENTS, SegmentEntry, ensure_episode_id,
    file_name, segment_files, segment_index,
};
#[cfg(doc)]
use crate::robot::RobotConfig;
use crate::store::lock::DirLock;

/// Settings of a [`ReplayWriter`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayWriterConfig {
    /// A segment is closed and a new one begun once it reaches this size. Range:
    /// [4096, 4294967296] bytes.
    pub segment_bytes: u64,
    /// Largest total size of closed segments; when a closed segment takes the total
    /// past it, the oldest closed segments are deleted first, never the newest closed
    /// one. `None` keeps everything. Range: at least `segment_bytes`.
    pub retention_bytes: Option<u64>,
    /// Whether retention may delete segments that existed when the writer opened the
    /// replay (episodes recorded by earlier runs). Off by default: retention then
    /// deletes only what this run recorded.
    pub retention_deletes_existing: bool,
}

impl Default for ReplayWriterConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 64 << 20,
            retention_bytes: None,
            retention_deletes_existing: false,
        }
    }
}

impl ReplayWriterConfig {
    /// Checks both sizes against their documented ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("segment_bytes", self.segment_bytes, 4096..=1 << 32)?;
        match self.retention_bytes {
            Some(bytes) if bytes < self.segment_bytes => Err(ConfigError::new(
                "retention_bytes",
                bytes,
                format!(
                    "must be at least segment_bytes ({}): retention never deletes the newest closed segment",
                    self.segment_bytes
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// What [`ReplayWriter::open`] found and repaired.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpenReport {
    /// Records kept from segments left open by an earlier run.
    pub recovered_records: u64,
    /// Bytes truncated from torn tails, with the segment they were cut from.
    pub truncated: Vec<(String, u64)>,
    /// Segments left open by an earlier run that hold damage with intact records after
    /// it: closed as they are (readers cut at the damage), nothing truncated.
    pub damaged_open_segments: Vec<String>,
}

impl OpenReport {
    /// Prints what was repaired, as a warning per segment.
    pub fn warn(&self) {
        for (segment, bytes) in &self.truncated {
            eprintln!(
                "warning: replay segment {segment} had a torn tail; {bytes} bytes truncated, every record before kept"
            );
        }
        for segment in &self.damaged_open_segments {
            eprintln!(
                "warning: replay segment {segment} is damaged inside; kept as it is (`imago replay check` shows what readers leave out)"
            );
        }
    }
}

struct OpenSegment {
    file: BufWriter<File>,
    name: String,
    records: u64,
    bytes: u64,
}

/// Appends framed records to segment files, closing and listing them in the manifest.
/// Holds the replay's lock ([`DirLock`]) while it lives: one writer per replay.
pub struct ReplayWriter {
    dir: PathBuf,
    config: ReplayWriterConfig,
    manifest: Manifest,
    segment: Option<OpenSegment>,
    next_index: u64,
    next_episode: u64,
    dropped_segments: u64,
    /// Segments retention must keep (those that existed at open, unless the config
    /// lets retention delete them).
    protected: Vec<String>,
    /// The segment being closed is the session's last.
    ending_session: bool,
    _lock: DirLock,
}

impl ReplayWriter {
    /// Opens (creating if needed) the replay directory `dir` for episodes of `robot`
    /// (a [`RobotConfig`] or a [`RecordedRobot`]), taking its lock for `purpose`
    /// (`imago collect`...). A replay of another spec is an error naming both; the
    /// manifest records the spec and the robot's settings when known. Segments an earlier run left open are checked and closed:
    /// a torn tail of the newest (no intact record after its first bad byte) is
    /// truncated, keeping every record before it; any other damage is left in place
    /// for readers to cut at.
    pub fn open(
        dir: &Path,
        config: ReplayWriterConfig,
        robot: impl Into<RecordedRobot>,
        purpose: &str,
    ) -> anyhow::Result<(Self, OpenReport)> {
        let robot: RecordedRobot = robot.into();
        let spec = &robot.spec;
        config
            .validate()
            .map_err(|e| anyhow::anyhow!("replay settings: {e}"))?;
        let lock = DirLock::acquire(dir, purpose)?;
        std::fs::create_dir_all(dir.join(SEGMENTS))
            .with_context(|| format!("cannot create replay directory {}", dir.display()))?;
        let mut manifest = Manifest::load(dir)?;
        manifest.format = FORMAT_VERSION;
        match &manifest.spec {
            Some(recorded) => {
                let differences = recorded.data_differences(spec);
                if !differences.is_empty() {
                    anyhow::bail!(
                        "replay {} holds episodes of {}, this run records {} ({}); record into another directory",
                        dir.display(),
                        recorded.summary(),
                        spec.summary(),
                        differences.join(", ")
                    );
                }
            }
            None => manifest.spec = Some(spec.clone()),
        }
        if robot.settings.is_some() {
            manifest.robot = robot.settings;
        }
        let mut report = OpenReport::default();
        let mut next_index = 0;
        let mut next_episode = manifest.next_episode;
        let files = segment_files(dir)?;
        let existing: Vec<String> = files.iter().map(|p| file_name(p)).collect();
        for path in &files {
            let name = file_name(path);
            if let Some(index) = segment_index(path) {
                next_index = next_index.max(index + 1);
            }
            let scan = scan_segment(path)?;
            next_episode = next_episode.max(scan.next_episode);
            if manifest.closed.iter().any(|s| s.file == name) {
                continue;
            }
            let newest = Some(path) == files.last();
            let mut bytes = scan.file_bytes;
            match scan.first_damage {
                Some(at) if newest && scan.torn_tail => {
                    let file = OpenOptions::new().write(true).open(path)?;
                    file.set_len(at).with_context(|| {
                        format!("cannot truncate torn tail of {}", path.display())
                    })?;
                    file.sync_all()?;
                    report.truncated.push((name.clone(), scan.file_bytes - at));
                    bytes = at;
                }
                Some(_) => report.damaged_open_segments.push(name.clone()),
                None => {}
            }
            report.recovered_records += scan.records;
            manifest.closed.push(SegmentEntry {
                file: name,
                records: scan.records,
                bytes,
                ends_session: false,
            });
        }
        manifest
            .closed
            .sort_by_key(|s| segment_index(Path::new(&s.file)));
        // Whatever the previous session did (closed its segment, crashed with one
        // open, crashed right after a roll-over), it ended here.
        if let Some(last) = manifest.closed.last_mut() {
            last.ends_session = true;
        }
        manifest.next_episode = next_episode;
        manifest.store(dir)?;
        let protected = if config.retention_deletes_existing {
            Vec::new()
        } else {
            existing
        };
        Ok((
            Self {
                dir: dir.to_path_buf(),
                config,
                manifest,
                segment: None,
                next_index,
                next_episode,
                dropped_segments: 0,
                protected,
                ending_session: false,
                _lock: lock,
            },
            report,
        ))
    }

    /// An episode id not used yet in this replay. Ids never wrap: once they are used
    /// up (a manifest or a record naming an id near `u64::MAX`), this is an error,
    /// asked before anything of the episode is written.
    pub fn next_episode_id(&mut self) -> anyhow::Result<u64> {
        let id = self.next_episode;
        ensure_episode_id(id).with_context(|| format!("replay {}", self.dir.display()))?;
        self.next_episode = id + 1;
        Ok(id)
    }

    /// How many more episodes this replay can take before its ids are used up.
    pub fn episode_ids_left(&self) -> u64 {
        (LAST_EPISODE_ID + 1).saturating_sub(self.next_episode)
    }

    /// Checks, before anything is written, that `count` more episodes can be given
    /// ids: an error saying how many can, for a run that records `count`.
    pub fn ensure_episode_ids_for(&self, count: u64) -> anyhow::Result<()> {
        let left = self.episode_ids_left();
        if left == 0 {
            ensure_episode_id(self.next_episode)
                .with_context(|| format!("replay {}", self.dir.display()))?;
        }
        anyhow::ensure!(
            left >= count,
            "replay {}: it has episode ids for {left} more episodes, not the {count} this run records; record into a new replay directory",
            self.dir.display()
        );
        Ok(())
    }

    /// Appends one record (buffered; see [`Self::flush`]).
    pub fn append(&mut self, record: &ReplayRecord) -> anyhow::Result<()> {
        if let ReplayRecord::EpisodeStart(start) = record {
            self.next_episode = self.next_episode.max(start.episode.saturating_add(1));
        }
        let payload = postcard::to_stdvec(record).context("cannot encode replay record")?;
        let frame = encode_frame(&payload);
        if self.segment.is_none() {
            self.begin_segment()?;
        }
        let segment = self.segment.as_mut().expect("segment open");
        segment.file.write_all(&frame).with_context(|| {
            format!("cannot write replay segment {} (disk full?)", segment.name)
        })?;
        segment.records += 1;
        segment.bytes += frame.len() as u64;
        if segment.bytes >= self.config.segment_bytes {
            self.close_segment()?;
        }
        Ok(())
    }

    /// Appends a whole episode (start, every transition, end) and flushes it to disk.
    pub fn append_episode(&mut self, episode: &Episode) -> anyhow::Result<()> {
        self.append_episode_from(episode, None)
    }

    /// [`Self::append_episode`], with the episode's `origin` recorded after its start.
    pub fn append_episode_from(
        &mut self,
        episode: &Episode,
        origin: Option<&EpisodeOrigin>,
    ) -> anyhow::Result<()> {
        self.append(&ReplayRecord::EpisodeStart(episode.start.clone()))?;
        if let Some(origin) = origin {
            self.append(&ReplayRecord::EpisodeOrigin(origin.clone()))?;
        }
        for transition in &episode.transitions {
            self.append(&ReplayRecord::Transition(Box::new(transition.clone())))?;
        }
        self.append(&ReplayRecord::EpisodeEnd(Box::new(episode.end.clone())))?;
        self.flush()
    }

    /// Writes buffered records and forces them to disk.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        if let Some(segment) = self.segment.as_mut() {
            segment.file.flush()?;
            segment.file.get_ref().sync_data()?;
        }
        Ok(())
    }

    /// Flushes, closes the open segment and records it in the manifest (as the end of
    /// this session); returns how many old segments the retention limit deleted since
    /// this writer opened.
    pub fn close(mut self) -> anyhow::Result<u64> {
        self.ending_session = true;
        if self.segment.is_some() {
            self.close_segment()?;
        } else if let Some(last) = self.manifest.closed.last_mut()
            && !last.ends_session
        {
            // The session's last segment was closed by a roll-over: mark it now.
            last.ends_session = true;
            self.manifest.store(&self.dir)?;
        }
        Ok(self.dropped_segments)
    }

    fn begin_segment(&mut self) -> anyhow::Result<()> {
        let name = format!("{:06}.seg", self.next_index);
        self.next_index += 1;
        let path = self.dir.join(SEGMENTS).join(&name);
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot create replay segment {}", path.display()))?;
        self.segment = Some(OpenSegment {
            file: BufWriter::with_capacity(1 << 20, file),
            name,
            records: 0,
            bytes: 0,
        });
        Ok(())
    }

    fn close_segment(&mut self) -> anyhow::Result<()> {
        self.flush()?;
        if let Some(segment) = self.segment.take() {
            self.manifest.closed.push(SegmentEntry {
                file: segment.name,
                records: segment.records,
                bytes: segment.bytes,
                ends_session: self.ending_session,
            });
            self.manifest.next_episode = self.next_episode;
            self.manifest.store(&self.dir)?;
            self.apply_retention()?;
        }
        Ok(())
    }

    /// Deletes the oldest closed segments while their total exceeds the retention
    /// limit, never the newest closed one and never one that existed when the writer
    /// opened (unless the config allows). The manifest is rewritten before a file is
    /// deleted, so a crash in between leaves a file the next open rescans, never a
    /// manifest entry without a file.
    fn apply_retention(&mut self) -> anyhow::Result<()> {
        let Some(limit) = self.config.retention_bytes else {
            return Ok(());
        };
        loop {
            let total: u64 = self.manifest.closed.iter().map(|s| s.bytes).sum();
            let newest = self.manifest.closed.len().saturating_sub(1);
            let deletable = self.manifest.closed[..newest]
                .iter()
                .position(|s| !self.protected.contains(&s.file));
            let (true, Some(index)) = (total > limit, deletable) else {
                return Ok(());
            };
            let oldest = self.manifest.closed.remove(index);
            self.manifest.store(&self.dir)?;
            let path = self.dir.join(SEGMENTS).join(&oldest.file);
            match std::fs::remove_file(&path) {
                Ok(()) => self.dropped_segments += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(anyhow::anyhow!(
                        "cannot delete old replay segment {}: {e}",
                        path.display()
                    ));
                }
            }
        }
    }

    /// Closed segments deleted by the retention limit since this writer opened.
    pub fn dropped_segments(&self) -> u64 {
        self.dropped_segments
    }
}

/// What a scan of one segment found.
pub(super) struct SegmentScan {
    /// Intact records.
    pub records: u64,
    /// The segment's size.
    pub file_bytes: u64,
    /// One past the highest episode id any intact record names.
    pub next_episode: u64,
    /// Where the first damaged byte is, if any.
    pub first_damage: Option<u64>,
    /// The damage runs to the end of the file with no intact record after it.
    pub torn_tail: bool,
}

/// Reads every intact record of the segment at `path` (going on past damage).
pub(super) fn scan_segment(path: &Path) -> anyhow::Result<SegmentScan> {
    let data = std::fs::read(path)
        .with_context(|| format!("cannot read replay segment {}", path.display()))?;
    let mut scan = SegmentScan {
        records: 0,
        file_bytes: data.len() as u64,
        next_episode: 0,
        first_damage: None,
        torn_tail: false,
    };
    let mut offset = 0;
    while offset < data.len() {
        match decode_record(&data[offset..]) {
            Ok((record, used)) => {
                let episode = record.episode();
                scan.next_episode = scan.next_episode.max(episode.saturating_add(1));
                scan.records += 1;
                offset += used;
            }
            Err(_) => {
                scan.first_damage.get_or_insert(offset as u64);
                match resync(&data, offset, |p| {
                    postcard::from_bytes::<ReplayRecord>(p).is_ok()
                }) {
                    Some(next) => offset = next,
                    None => {
                        scan.torn_tail = true;
                        break;
                    }
                }
            }
        }
    }
    // Damage earlier in the file followed by intact records, then a torn end, is not
    // a torn tail: only a file whose first damage runs to its end is truncated.
    if scan.torn_tail {
        let first = scan.first_damage.unwrap_or(0) as usize;
        scan.torn_tail = resync(&data, first, |p| {
            postcard::from_bytes::<ReplayRecord>(p).is_ok()
        })
        .is_none();
    }
    Ok(scan)
}
