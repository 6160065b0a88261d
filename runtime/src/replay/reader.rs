//! Reading a replay directory back into episodes.

use std::path::Path;

use anyhow::Context;

use super::frame::decode_frame;
use super::record::{EpisodeEnd, EpisodeStart, ReplayRecord, Transition};
use super::segment_files;
use super::writer::file_name;

/// A damaged stretch of a segment; every record before it was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// Segment file name.
    pub segment: String,
    /// Byte offset of the first bad frame.
    pub offset: u64,
    /// Bytes from there to the end of the segment, skipped.
    pub skipped_bytes: u64,
    /// What was wrong.
    pub reason: String,
}

/// One complete episode.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// How it began.
    pub start: EpisodeStart,
    /// Its ticks, in order.
    pub transitions: Vec<Transition>,
    /// How it ended.
    pub end: EpisodeEnd,
}

/// Everything readable in a replay directory.
#[derive(Debug, Clone, Default)]
pub struct ReplayContents {
    /// Complete episodes, in recorded order.
    pub episodes: Vec<Episode>,
    /// Records read.
    pub records: u64,
    /// Episodes that began but never ended (cut by a crash or a torn tail); skipped.
    pub incomplete_episodes: u64,
    /// Damaged stretches found.
    pub corruptions: Vec<Corruption>,
}

/// Reads every readable record of the replay at `dir` and assembles complete episodes.
pub fn read_replay(dir: &Path) -> anyhow::Result<ReplayContents> {
    let mut out = ReplayContents::default();
    let mut open: Option<(EpisodeStart, Vec<Transition>)> = None;
    for path in segment_files(dir)? {
        let data = std::fs::read(&path)
            .with_context(|| format!("cannot read replay segment {}", path.display()))?;
        let mut offset = 0;
        while offset < data.len() {
            let decoded = decode_frame(&data[offset..])
                .map_err(|e| e.to_string())
                .and_then(|(payload, used)| {
                    postcard::from_bytes::<ReplayRecord>(payload)
                        .map(|r| (r, used))
                        .map_err(|e| format!("undecodable record: {e}"))
                });
            let (record, used) = match decoded {
                Ok(ok) => ok,
                Err(reason) => {
                    out.corruptions.push(Corruption {
                        segment: file_name(&path),
                        offset: offset as u64,
                        skipped_bytes: (data.len() - offset) as u64,
                        reason,
                    });
                    break;
                }
            };
            offset += used;
            out.records += 1;
            match record {
                ReplayRecord::EpisodeStart(start) => {
                    if open.replace((start, Vec::new())).is_some() {
                        out.incomplete_episodes += 1;
                    }
                }
                ReplayRecord::Transition(t) => match open.as_mut() {
                    Some((start, steps)) if start.episode == t.episode => steps.push(*t),
                    _ => {}
                },
                ReplayRecord::EpisodeEnd(end) => match open.take() {
                    Some((start, transitions)) if start.episode == end.episode => {
                        out.episodes.push(Episode {
                            start,
                            transitions,
                            end: *end,
                        })
                    }
                    Some(_) => out.incomplete_episodes += 1,
                    None => {}
                },
            }
        }
    }
    out.incomplete_episodes += open.is_some() as u64;
    Ok(out)
}
