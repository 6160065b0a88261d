//! Following a replay while it is written: each look reads only the bytes appended
//! since the last one, so a reader that keeps up (the daemon's learner) pays for what
//! is new, not for the whole replay.
//!
//! Episodes come out whole or not at all, checked as [`super::read_replay`] checks
//! them (the same [`Assembler`]). A record cut off at the end of the newest segment is
//! being written: the follower stops before it and reads it whole next time. Damage
//! is a cut, as for the reader; the follower reports it once, as lines for a warning.
//! Segments that retention deletes after they were read are simply gone; a segment
//! missing between two present ones is damage.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::assemble::{Assembler, EpisodeShape};
use super::reader::{Corruption, SegmentSummary, read_records};
use super::record::Episode;
use super::{Manifest, SEGMENTS, file_name, segment_files, segment_index};

/// Reads a replay directory incrementally; see the module documentation.
pub struct ReplayFollower {
    dir: PathBuf,
    /// Created at the first look that finds segments (the manifest's spec is then
    /// known).
    assembler: Option<Assembler>,
    /// The segment read last and the bytes of it consumed.
    position: Option<(u64, u64)>,
    max_policy_version: u64,
    damage: Vec<String>,
}

impl ReplayFollower {
    /// A follower of the replay at `dir`, which need not exist yet (until it does,
    /// every look finds nothing).
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            assembler: None,
            position: None,
            max_policy_version: 0,
            damage: Vec::new(),
        }
    }

    /// The highest policy version of any transition read so far, whole episode or
    /// not (0: none, or only scripted controllers).
    pub fn max_policy_version(&self) -> u64 {
        self.max_policy_version
    }

    /// Damage found since the last call, one line each (segment, offset, reason; or
    /// the episode left out and why).
    pub fn take_damage(&mut self) -> Vec<String> {
        std::mem::take(&mut self.damage)
    }

    /// Reads what was appended since the last look and hands every episode it
    /// completes to `take`, oldest first, segment by segment (so that a reader
    /// catching up on a long replay never holds more than one segment's episodes at
    /// once). Returns how many episodes it handed over. Errors only when a file that
    /// exists cannot be read.
    pub fn poll(&mut self, mut take: impl FnMut(Episode)) -> anyhow::Result<usize> {
        if !self.dir.join(SEGMENTS).exists() {
            return Ok(0);
        }
        // A manifest that cannot be used is reported by `imago replay check`; the
        // follower reads the segments without it, as the reader does.
        let manifest = Manifest::load(&self.dir).ok();
        let closed = manifest
            .as_ref()
            .map(|m| m.closed.as_slice())
            .unwrap_or(&[]);
        let assembler = self.assembler.get_or_insert_with(|| {
            Assembler::new(
                manifest
                    .as_ref()
                    .and_then(|m| m.spec.as_ref())
                    .map(EpisodeShape::of),
            )
        });
        let files = segment_files(&self.dir)?;
        let mut handed = 0;
        let mut corruptions: Vec<Corruption> = Vec::new();
        for (i, path) in files.iter().enumerate() {
            let Some(index) = segment_index(path) else {
                continue;
            };
            let from = match self.position {
                Some((at, _)) if index < at => continue,
                Some((at, offset)) if index == at => offset,
                Some((at, _)) => {
                    if index > at + 1 {
                        let why = format!(
                            "the replay's segments jump from {at:06}.seg to {index:06}.seg"
                        );
                        assembler.cut(&why);
                        self.damage.push(why);
                    }
                    0
                }
                None => 0,
            };
            let name = file_name(path);
            let data = match read_from(path, from) {
                Ok(data) => data,
                // Deleted by retention since the listing.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("cannot read replay segment {}", path.display()));
                }
            };
            let listed = closed.iter().find(|entry| entry.file == name);
            let open_tail = listed.is_none() && i + 1 == files.len();
            // Bytes beyond a closed segment's listed length are left unread and
            // reported once, as the reader does (reader.rs, `read_segment`).
            let records_end = match listed {
                Some(entry) if from + data.len() as u64 > entry.bytes && from <= entry.bytes => {
                    corruptions.push(Corruption {
                        segment: name.clone(),
                        offset: entry.bytes,
                        skipped_bytes: from + data.len() as u64 - entry.bytes,
                        reason: format!(
                            "the manifest lists {} bytes: bytes beyond are not read",
                            entry.bytes
                        ),
                    });
                    (entry.bytes - from) as usize
                }
                _ => data.len(),
            };
            let mut summary = SegmentSummary::default();
            let consumed = read_records(
                (&name, from),
                &data[..records_end],
                open_tail,
                assembler,
                &mut corruptions,
                &mut summary,
            );
            let consumed = if records_end < data.len() {
                data.len()
            } else {
                consumed
            };
            self.max_policy_version = self.max_policy_version.max(summary.max_policy_version);
            self.position = Some((index, from + consumed as u64));
            if listed.is_some_and(|entry| entry.ends_session) {
                assembler.session_end();
            }
            for (episode, _) in assembler.episodes.drain(..) {
                take(episode);
                handed += 1;
            }
        }
        self.damage
            .extend(corruptions.iter().map(ToString::to_string));
        self.damage
            .extend(assembler.damaged.drain(..).map(|d| d.to_string()));
        Ok(handed)
    }
}

/// The bytes of `path` from byte `from` to its current end.
fn read_from(path: &Path, from: u64) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(from))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::robot::RobotConfig;
    use crate::store::replay::{EpisodeEnd, EpisodeStart, ReplayRecord, Transition};
    use crate::store::replay::{ReplayWriter, ReplayWriterConfig, encode_frame, read_replay};
    use imago_robots::{Action, Observation};

    fn robot() -> RobotConfig {
        RobotConfig::default()
    }

    /// A well-formed reacher2d episode of `steps` transitions recorded by `version`.
    fn episode(id: u64, steps: u32, version: u64) -> Episode {
        let spec = robot().spec();
        let observation = Observation {
            image: spec.camera.map(|c| imago_robots::Image {
                width: c.width,
                height: c.height,
                rgb: vec![7; (c.width * c.height * 3) as usize],
            }),
            proprio: vec![0.25; spec.proprio_dim()],
            instruction: "reach the red target".into(),
        };
        let action = Action(vec![0.1; spec.action_dim()]);
        Episode {
            start: EpisodeStart {
                episode: id,
                robot: spec.name.clone(),
                seed: id,
                instruction: observation.instruction.clone(),
            },
            transitions: (0..steps)
                .map(|step| Transition {
                    episode: id,
                    step,
                    observation: observation.clone(),
                    action: action.clone(),
                    executed: action.clone(),
                    reward: -1.0,
                    done: step + 1 == steps,
                    success: false,
                    policy_version: version,
                    intervention: false,
                    behaviour_log_prob: None,
                })
                .collect(),
            end: EpisodeEnd {
                episode: id,
                steps,
                success: false,
                final_observation: observation,
            },
        }
    }

    fn writer(dir: &Path, segment_bytes: u64) -> ReplayWriter {
        let config = ReplayWriterConfig {
            segment_bytes,
            ..ReplayWriterConfig::default()
        };
        ReplayWriter::open(dir, config, &robot(), "test").unwrap().0
    }

    fn ids(episodes: &[Episode]) -> Vec<u64> {
        episodes.iter().map(|e| e.start.episode).collect()
    }

    #[test]
    fn each_look_hands_over_only_the_episodes_completed_since_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let mut follower = ReplayFollower::new(dir.path());
        let mut seen = Vec::new();
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 0, "no replay yet");
        // Small segments, so that episodes span segment boundaries.
        let mut writer = writer(dir.path(), 40_000);
        for id in 0..3 {
            writer.append_episode(&episode(id, 5, 2)).unwrap();
        }
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 3);
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 0, "nothing new");
        for id in 3..7 {
            writer.append_episode(&episode(id, 5, 3)).unwrap();
        }
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 4);
        assert_eq!(ids(&seen), (0..7).collect::<Vec<_>>());
        assert_eq!(follower.max_policy_version(), 3);
        assert!(follower.take_damage().is_empty());
        writer.close().unwrap();
        assert_eq!(read_replay(dir.path()).unwrap().episodes, seen);
        assert!(read_replay(dir.path()).unwrap().segments.len() > 2);
    }

    #[test]
    fn an_episode_being_written_waits_for_its_end_and_a_torn_record_for_its_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer(dir.path(), 1 << 30);
        writer.append_episode(&episode(0, 4, 1)).unwrap();
        let open = episode(1, 4, 1);
        writer
            .append(&ReplayRecord::EpisodeStart(open.start.clone()))
            .unwrap();
        for t in &open.transitions[..2] {
            writer
                .append(&ReplayRecord::Transition(Box::new(t.clone())))
                .unwrap();
        }
        writer.flush().unwrap();
        let mut follower = ReplayFollower::new(dir.path());
        let mut seen = Vec::new();
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 1);
        // Half of the next record, as a reader can find it mid-write.
        let segment = segment_files(dir.path()).unwrap().pop().unwrap();
        let frame = encode_frame(
            &postcard::to_stdvec(&ReplayRecord::Transition(Box::new(
                open.transitions[2].clone(),
            )))
            .unwrap(),
        );
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&segment)
            .unwrap();
        file.write_all(&frame[..frame.len() / 2]).unwrap();
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 0);
        assert!(
            follower.take_damage().is_empty(),
            "a torn tail is no damage"
        );
        file.write_all(&frame[frame.len() / 2..]).unwrap();
        let end = [
            ReplayRecord::Transition(Box::new(open.transitions[3].clone())),
            ReplayRecord::EpisodeEnd(Box::new(open.end.clone())),
        ];
        for record in &end {
            file.write_all(&encode_frame(&postcard::to_stdvec(record).unwrap()))
                .unwrap();
        }
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 1);
        assert_eq!(seen, vec![episode(0, 4, 1), open]);
        assert!(follower.take_damage().is_empty());
    }

    #[test]
    fn damage_is_cut_out_and_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer(dir.path(), 1 << 30);
        writer.append_episode(&episode(0, 4, 1)).unwrap();
        let segment = segment_files(dir.path()).unwrap().pop().unwrap();
        let intact = std::fs::metadata(&segment).unwrap().len();
        writer.append_episode(&episode(1, 4, 1)).unwrap();
        writer.append_episode(&episode(2, 4, 1)).unwrap();
        // Flip a byte inside episode 1.
        let mut bytes = std::fs::read(&segment).unwrap();
        bytes[intact as usize + 200] ^= 0xff;
        std::fs::write(&segment, &bytes).unwrap();
        let mut follower = ReplayFollower::new(dir.path());
        let mut seen = Vec::new();
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 2);
        assert_eq!(ids(&seen), vec![0, 2]);
        let damage = follower.take_damage();
        assert!(
            damage.iter().any(|line| line.contains("episode 1")),
            "{damage:?}"
        );
        follower.poll(|e| seen.push(e)).unwrap();
        assert!(follower.take_damage().is_empty(), "reported once");
    }

    #[test]
    fn segments_deleted_after_reading_are_no_damage_but_a_gap_is() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer(dir.path(), 20_000);
        for id in 0..4 {
            writer.append_episode(&episode(id, 4, 1)).unwrap();
        }
        let mut follower = ReplayFollower::new(dir.path());
        let mut seen = Vec::new();
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 4);
        let files = segment_files(dir.path()).unwrap();
        std::fs::remove_file(&files[0]).unwrap();
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 0);
        assert!(follower.take_damage().is_empty());
        writer.append_episode(&episode(4, 4, 1)).unwrap();
        writer.flush().unwrap();
        assert_eq!(follower.poll(|e| seen.push(e)).unwrap(), 1);
        // A segment missing between two present ones.
        let before = segment_files(dir.path()).unwrap().len();
        for id in 5..9 {
            writer.append_episode(&episode(id, 4, 1)).unwrap();
        }
        let files = segment_files(dir.path()).unwrap();
        assert!(files.len() >= before + 2);
        std::fs::remove_file(&files[before]).unwrap();
        follower.poll(|e| seen.push(e)).unwrap();
        let damage = follower.take_damage();
        assert!(
            damage.iter().any(|line| line.contains("jump")),
            "{damage:?}"
        );
        let unique: std::collections::HashSet<u64> = ids(&seen).into_iter().collect();
        assert_eq!(unique.len(), seen.len(), "no episode handed over twice");
    }
}
