//! Appending records to a replay directory.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::frame::{decode_frame, encode_frame};
use super::reader::Episode;
use super::record::ReplayRecord;
use super::{FORMAT_VERSION, Manifest, SEGMENTS, SegmentEntry, segment_files};

/// Settings of a [`ReplayWriter`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayWriterConfig {
    /// A segment is closed and a new one begun once it reaches this size.
    pub segment_bytes: u64,
    /// Largest total size of closed segments; when a closed segment takes the total
    /// past it, the oldest closed segments are deleted first. `None` keeps everything.
    pub retention_bytes: Option<u64>,
}

impl Default for ReplayWriterConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 64 << 20,
            retention_bytes: None,
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
}

struct OpenSegment {
    file: BufWriter<File>,
    name: String,
    records: u64,
    bytes: u64,
}

/// Appends framed records to segment files, closing and listing them in the manifest.
pub struct ReplayWriter {
    dir: PathBuf,
    config: ReplayWriterConfig,
    manifest: Manifest,
    segment: Option<OpenSegment>,
    next_index: u64,
    next_episode: u64,
    dropped_segments: u64,
}

impl ReplayWriter {
    /// Opens (creating if needed) the replay directory `dir`. Segments an earlier run
    /// left open are checked, their torn tails truncated, and closed.
    pub fn open(dir: &Path, config: ReplayWriterConfig) -> anyhow::Result<(Self, OpenReport)> {
        std::fs::create_dir_all(dir.join(SEGMENTS))
            .with_context(|| format!("cannot create replay directory {}", dir.display()))?;
        let mut manifest = Manifest::load(dir)?;
        manifest.format = FORMAT_VERSION;
        let mut report = OpenReport::default();
        let mut next_index = 0;
        let mut next_episode = 0;
        for path in segment_files(dir)? {
            let name = file_name(&path);
            if let Some(index) = name
                .strip_suffix(".seg")
                .and_then(|n| n.parse::<u64>().ok())
            {
                next_index = next_index.max(index + 1);
            }
            let scan = scan_segment(&path)?;
            next_episode = next_episode.max(scan.next_episode);
            if manifest.closed.iter().any(|s| s.file == name) {
                continue;
            }
            if scan.valid_bytes < scan.file_bytes {
                let file = OpenOptions::new().write(true).open(&path)?;
                file.set_len(scan.valid_bytes)
                    .with_context(|| format!("cannot truncate torn tail of {}", path.display()))?;
                file.sync_all()?;
                report
                    .truncated
                    .push((name.clone(), scan.file_bytes - scan.valid_bytes));
            }
            report.recovered_records += scan.records;
            manifest.closed.push(SegmentEntry {
                file: name,
                records: scan.records,
                bytes: scan.valid_bytes,
            });
        }
        manifest.store(dir)?;
        Ok((
            Self {
                dir: dir.to_path_buf(),
                config,
                manifest,
                segment: None,
                next_index,
                next_episode,
                dropped_segments: 0,
            },
            report,
        ))
    }

    /// An episode id not used yet in this replay.
    pub fn next_episode_id(&mut self) -> u64 {
        let id = self.next_episode;
        self.next_episode += 1;
        id
    }

    /// Appends one record (buffered; see [`Self::flush`]).
    pub fn append(&mut self, record: &ReplayRecord) -> anyhow::Result<()> {
        if let ReplayRecord::EpisodeStart(start) = record {
            self.next_episode = self.next_episode.max(start.episode + 1);
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
        self.append(&ReplayRecord::EpisodeStart(episode.start.clone()))?;
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

    /// Flushes, closes the open segment and records it in the manifest; returns how
    /// many old segments the retention limit deleted since this writer opened.
    pub fn close(mut self) -> anyhow::Result<u64> {
        self.close_segment()?;
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
            });
            self.manifest.store(&self.dir)?;
            self.apply_retention()?;
        }
        Ok(())
    }

    /// Deletes the oldest closed segments while their total exceeds the retention
    /// limit. The manifest is rewritten before a file is deleted, so a crash in between
    /// leaves a file the next open rescans, never a manifest entry without a file.
    fn apply_retention(&mut self) -> anyhow::Result<()> {
        let Some(limit) = self.config.retention_bytes else {
            return Ok(());
        };
        while self.manifest.closed.iter().map(|s| s.bytes).sum::<u64>() > limit {
            let oldest = self.manifest.closed.remove(0);
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
        Ok(())
    }

    /// Closed segments deleted by the retention limit since this writer opened.
    pub fn dropped_segments(&self) -> u64 {
        self.dropped_segments
    }
}

/// What a scan of one segment found.
pub(super) struct SegmentScan {
    pub records: u64,
    pub valid_bytes: u64,
    pub file_bytes: u64,
    pub next_episode: u64,
}

pub(super) fn scan_segment(path: &Path) -> anyhow::Result<SegmentScan> {
    let data = std::fs::read(path)
        .with_context(|| format!("cannot read replay segment {}", path.display()))?;
    let mut offset = 0;
    let mut records = 0;
    let mut next_episode = 0;
    while offset < data.len() {
        let Ok((payload, used)) = decode_frame(&data[offset..]) else {
            break;
        };
        let Ok(record) = postcard::from_bytes::<ReplayRecord>(payload) else {
            break;
        };
        if let ReplayRecord::EpisodeStart(start) = record {
            next_episode = next_episode.max(start.episode + 1);
        }
        offset += used;
        records += 1;
    }
    Ok(SegmentScan {
        records,
        valid_bytes: offset as u64,
        file_bytes: data.len() as u64,
        next_episode,
    })
}

pub(super) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
