//! The replay under damage: a fixture replay is corrupted in many ways (bit flips,
//! truncations at every class of frame boundary, zeroed blocks, deleted and garbage
//! manifests, missing and duplicated segments, crafted records that are well-formed
//! but inconsistent) and for every case the reader must not panic, must keep every
//! whole episode recorded before the damage, must hand out no episode that differs
//! from what was recorded, and must leave out every episode the damage touches. The
//! writer, opened on the damaged replay, must not destroy intact data either.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use imago_robots::{Action, Image, Observation, Robot, RobotSpec};

use super::frame::decode_frame;
use super::*;
use crate::robot::{RobotConfig, SimRobot};

/// The fixture robot's settings: a 16x16 camera keeps records around a kilobyte.
fn robot_config() -> RobotConfig {
    crate::robot::reacher2d_with("image_size = 16")
}

fn robot() -> SimRobot {
    robot_config().build().unwrap()
}

fn spec() -> RobotSpec {
    robot_config().spec()
}

fn config() -> ReplayWriterConfig {
    ReplayWriterConfig {
        segment_bytes: 8192,
        ..ReplayWriterConfig::default()
    }
}

/// A whole episode `id` of `steps` transitions, from the robot's own observations.
fn episode(id: u64, steps: u32) -> Episode {
    let mut robot = robot();
    let mut observation = robot.reset(id);
    let start = EpisodeStart {
        episode: id,
        robot: "reacher2d".into(),
        seed: id,
        instruction: observation.instruction.clone(),
    };
    let mut transitions = Vec::new();
    for step in 0..steps {
        let action = Action(vec![0.3, -0.1 * step as f32]);
        let outcome = robot.step(&action);
        let next = outcome.observation.clone();
        transitions.push(Transition {
            episode: id,
            step,
            observation: std::mem::replace(&mut observation, next),
            action,
            executed: outcome.info.executed,
            reward: outcome.reward,
            done: step + 1 == steps,
            success: false,
            policy_version: id % 3,
            intervention: false,
            behaviour_log_prob: Some(-1.0),
        });
    }
    Episode {
        start,
        transitions,
        end: EpisodeEnd {
            episode: id,
            steps,
            success: false,
            final_observation: observation,
        },
    }
}

/// Where each frame of the fixture lies: (segment index, byte range, episode id).
type FrameMap = Vec<(usize, Range<usize>, u64)>;

struct Fixture {
    _root: tempfile::TempDir,
    dir: PathBuf,
    episodes: Vec<Episode>,
    frames: FrameMap,
    segments: Vec<PathBuf>,
}

/// Twelve episodes of 3 to 6 steps over several closed segments.
fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("replay");
    let (mut writer, _) = ReplayWriter::open(&dir, config(), &robot_config(), "test").unwrap();
    let episodes: Vec<Episode> = (0..12).map(|id| episode(id, 3 + (id % 4) as u32)).collect();
    for e in &episodes {
        writer.append_episode(e).unwrap();
    }
    writer.close().unwrap();
    let segments = segment_files(&dir).unwrap();
    assert!(segments.len() >= 6, "{}", segments.len());
    let mut frames = Vec::new();
    for (index, path) in segments.iter().enumerate() {
        let data = std::fs::read(path).unwrap();
        let mut offset = 0;
        while offset < data.len() {
            let (payload, used) = decode_frame(&data[offset..]).unwrap();
            let episode = postcard::from_bytes::<ReplayRecord>(payload)
                .unwrap()
                .episode();
            frames.push((index, offset..offset + used, episode));
            offset += used;
        }
    }
    Fixture {
        _root: root,
        dir,
        episodes,
        frames,
        segments,
    }
}

impl Fixture {
    /// A fresh copy of the replay to damage.
    fn copy(&self) -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("replay");
        std::fs::create_dir_all(dir.join(SEGMENTS)).unwrap();
        std::fs::copy(self.dir.join(MANIFEST), dir.join(MANIFEST)).unwrap();
        for path in &self.segments {
            std::fs::copy(path, dir.join(SEGMENTS).join(path.file_name().unwrap())).unwrap();
        }
        (root, dir)
    }

    fn segment_in(&self, dir: &Path, index: usize) -> PathBuf {
        dir.join(SEGMENTS)
            .join(self.segments[index].file_name().unwrap())
    }

    /// Episodes every frame of which lies before byte `at` of segment `segment`.
    fn before(&self, segment: usize, at: usize) -> Vec<u64> {
        let mut last: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
        for (s, range, id) in &self.frames {
            last.insert(*id, (*s, range.end));
        }
        last.into_iter()
            .filter(|(_, end)| *end <= (segment, at))
            .map(|(id, _)| id)
            .collect()
    }

    /// Episodes with a frame overlapping bytes `range` of segment `segment`.
    fn touched(&self, segment: usize, range: Range<usize>) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .frames
            .iter()
            .filter(|(s, r, _)| *s == segment && r.start < range.end && range.start < r.end)
            .map(|(_, _, id)| *id)
            .collect();
        out.dedup();
        out
    }

    /// Reads `dir` and checks the three promises; returns what was read.
    fn check(&self, dir: &Path, case: &str, kept: &[u64], damaged: &[u64]) -> ReplayContents {
        let contents =
            read_replay(dir).unwrap_or_else(|e| panic!("{case}: the reader failed: {e:#}"));
        let by_id: BTreeMap<u64, &Episode> = contents
            .episodes
            .iter()
            .map(|e| (e.start.episode, e))
            .collect();
        assert_eq!(
            by_id.len(),
            contents.episodes.len(),
            "{case}: an id handed out twice"
        );
        for (id, episode) in &by_id {
            assert_eq!(
                *episode, &self.episodes[*id as usize],
                "{case}: episode {id} differs from what was recorded"
            );
        }
        for id in kept {
            assert!(
                by_id.contains_key(id),
                "{case}: whole episode {id} before the damage was lost; {:?}",
                contents.damage_lines()
            );
        }
        for id in damaged {
            assert!(
                !by_id.contains_key(id),
                "{case}: damaged episode {id} was handed out"
            );
        }
        contents
    }

    /// Checks a damaged copy, then opens a writer on it, appends an episode, and
    /// checks again: the writer must keep what the reader kept.
    fn check_with_writer(&self, dir: &Path, case: &str, kept: &[u64], damaged: &[u64]) {
        let contents = self.check(dir, case, kept, damaged);
        assert!(contents.is_damaged(), "{case}: the damage went unreported");
        let before: Vec<u64> = contents.episodes.iter().map(|e| e.start.episode).collect();
        let (mut writer, _) = ReplayWriter::open(dir, config(), &robot_config(), "test")
            .unwrap_or_else(|e| panic!("{case}: the writer failed: {e:#}"));
        let id = writer.next_episode_id().unwrap();
        assert!(id >= 12, "{case}: episode id {id} reused");
        writer.append_episode(&episode(id, 3)).unwrap();
        writer.close().unwrap();
        let after = read_replay(dir).unwrap();
        let ids: Vec<u64> = after.episodes.iter().map(|e| e.start.episode).collect();
        for old in &before {
            assert!(ids.contains(old), "{case}: the writer lost episode {old}");
        }
        assert!(ids.contains(&id), "{case}: the new episode is missing");
    }
}

#[test]
fn bit_flips_anywhere_cut_only_the_episode_they_hit() {
    let fixture = fixture();
    let mut cases = 0;
    for (index, path) in fixture.segments.iter().enumerate() {
        let len = std::fs::metadata(path).unwrap().len() as usize;
        // Every header byte of the first frames, then a spread of positions.
        let positions: Vec<usize> = (0..24).chain((24..len).step_by(173)).collect();
        for position in positions {
            let (_root, dir) = fixture.copy();
            let segment = fixture.segment_in(&dir, index);
            let mut bytes = std::fs::read(&segment).unwrap();
            bytes[position] ^= 1 << (position % 8);
            std::fs::write(&segment, &bytes).unwrap();
            let case = format!("bit flip at {index}:{position}");
            let kept = fixture.before(index, position);
            let damaged = fixture.touched(index, position..position + 1);
            if cases % 7 == 0 {
                fixture.check_with_writer(&dir, &case, &kept, &damaged);
            } else {
                let contents = fixture.check(&dir, &case, &kept, &damaged);
                assert!(contents.is_damaged(), "{case}: unreported");
            }
            cases += 1;
        }
    }
    assert!(cases > 300, "{cases}");
}

#[test]
fn truncations_at_every_frame_boundary_class_keep_what_came_before() {
    let fixture = fixture();
    let mut cases = 0;
    for (index, range, _) in &fixture.frames {
        // At the frame's start, inside its header, at its payload, inside its
        // payload, one byte before its end.
        let len = range.end - range.start;
        for cut in [0, 3, 8, len / 2, len - 1].map(|d| range.start + d) {
            let (_root, dir) = fixture.copy();
            let segment = fixture.segment_in(&dir, *index);
            let bytes = std::fs::read(&segment).unwrap();
            std::fs::write(&segment, &bytes[..cut]).unwrap();
            let case = format!("truncated {index} at {cut}");
            let kept = fixture.before(*index, cut);
            let damaged = fixture.touched(*index, cut..bytes.len());
            if cases % 5 == 0 {
                fixture.check_with_writer(&dir, &case, &kept, &damaged);
            } else {
                fixture.check(&dir, &case, &kept, &damaged);
            }
            cases += 1;
        }
    }
    assert!(cases > 250, "{cases}");
}

#[test]
fn zeroed_blocks_are_cut_and_the_episodes_after_them_read_again() {
    let fixture = fixture();
    let mut cases = 0;
    for (index, path) in fixture.segments.iter().enumerate() {
        let len = std::fs::metadata(path).unwrap().len() as usize;
        for block in [8, 64, 1500] {
            for start in (0..len).step_by(911) {
                let end = (start + block).min(len);
                let (_root, dir) = fixture.copy();
                let segment = fixture.segment_in(&dir, index);
                let mut bytes = std::fs::read(&segment).unwrap();
                if bytes[start..end].iter().all(|&b| b == 0) {
                    continue;
                }
                bytes[start..end].fill(0);
                std::fs::write(&segment, &bytes).unwrap();
                let case = format!("zeroed {index}:{start}..{end}");
                let kept = fixture.before(index, start);
                let damaged = fixture.touched(index, start..end);
                let contents = fixture.check(&dir, &case, &kept, &damaged);
                assert!(contents.is_damaged(), "{case}: unreported");
                cases += 1;
            }
        }
    }
    // A zeroed block inside one record: the episodes of later segments are read again.
    let (_root, dir) = fixture.copy();
    let segment = fixture.segment_in(&dir, 1);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[100..108].fill(0);
    std::fs::write(&segment, &bytes).unwrap();
    let contents = read_replay(&dir).unwrap();
    let last = fixture.episodes.last().unwrap().start.episode;
    assert!(contents.episodes.iter().any(|e| e.start.episode == last));
    assert!(cases > 30, "{cases}");
}

#[test]
fn manifests_deleted_garbage_or_wrong_are_survived() {
    let fixture = fixture();
    let all: Vec<u64> = (0..12).collect();
    // Deleted: every segment is read; nothing is lost, nothing is damage.
    let (_root, dir) = fixture.copy();
    std::fs::remove_file(dir.join(MANIFEST)).unwrap();
    let contents = fixture.check(&dir, "manifest deleted", &all, &[]);
    assert!(!contents.is_damaged());
    // The writer rebuilds it without truncating anything.
    let (writer, report) = ReplayWriter::open(&dir, config(), &robot_config(), "test").unwrap();
    assert!(report.truncated.is_empty(), "{report:?}");
    writer.close().unwrap();
    fixture.check(&dir, "manifest rebuilt", &all, &[]);

    // Garbage: read without it, and said so; the writer refuses to guess.
    let (_root, dir) = fixture.copy();
    std::fs::write(dir.join(MANIFEST), b"\x00\xffgarbage{").unwrap();
    let contents = fixture.check(&dir, "manifest garbage", &all, &[]);
    assert!(contents.manifest_problem.is_some());
    let error = ReplayWriter::open(&dir, config(), &robot_config(), "test")
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("replay repair"), "{error}");

    // A manifest listing a segment shorter than it is: the bytes beyond are not read.
    let (_root, dir) = fixture.copy();
    let mut manifest = Manifest::load(&dir).unwrap();
    let listed = manifest.closed[2].bytes as usize;
    manifest.closed[2].bytes = (listed / 2) as u64;
    manifest.store(&dir).unwrap();
    let damaged = fixture.touched(2, listed / 2..listed);
    fixture.check(
        &dir,
        "manifest too short",
        &fixture.before(2, listed / 2),
        &damaged,
    );
}

#[test]
fn bytes_appended_to_a_closed_segment_cost_no_episode() {
    let fixture = fixture();
    let all: Vec<u64> = (0..12).collect();
    let record = postcard::to_stdvec(&records_of(&episode(40, 3))[1]).unwrap();
    let frame = super::frame::encode_frame(&record);
    let appended: [(&str, Vec<u8>); 4] = [
        ("1 garbage byte", vec![0xa5]),
        ("7 garbage bytes", vec![7; 7]),
        ("a partial frame", frame[..frame.len() / 2].to_vec()),
        ("a whole frame", frame.clone()),
    ];
    // Episodes run across segment boundaries, so each closed segment's junk sits in
    // the middle of some episode's records.
    let spanning = (1..fixture.segments.len())
        .filter(|&s| {
            let first = fixture.frames.iter().find(|f| f.0 == s).map(|f| f.2);
            fixture
                .frames
                .iter()
                .any(|(segment, _, id)| *segment == s - 1 && Some(*id) == first)
        })
        .count();
    assert!(spanning >= 3, "{spanning}");
    let mut cases = 0;
    for index in 0..fixture.segments.len() {
        for (what, bytes) in &appended {
            let (_root, dir) = fixture.copy();
            let segment = fixture.segment_in(&dir, index);
            let mut data = std::fs::read(&segment).unwrap();
            data.extend_from_slice(bytes);
            std::fs::write(&segment, &data).unwrap();
            let case = format!("{what} appended to segment {index}");
            let contents = fixture.check(&dir, &case, &all, &[]);
            assert_eq!(contents.episodes.len(), 12, "{case}");
            assert_eq!(contents.corruptions.len(), 1, "{case}: unreported");
            // The daemon's follower keeps them too, and reports the junk once.
            let mut follower = ReplayFollower::new(&dir);
            let mut followed = 0;
            follower.poll(|_| followed += 1).unwrap();
            follower.poll(|_| followed += 1).unwrap();
            assert_eq!(followed, 12, "{case}: the follower lost an episode");
            assert_eq!(follower.take_damage().len(), 1, "{case}");
            if cases % 3 == 0 {
                fixture.check_with_writer(&dir, &case, &all, &[]);
            }
            cases += 1;
        }
    }
}

#[test]
fn missing_and_duplicated_segments_are_cuts_not_stitches() {
    let fixture = fixture();
    for index in 0..fixture.segments.len() {
        let len = std::fs::metadata(&fixture.segments[index]).unwrap().len() as usize;
        // Missing, listed in the manifest.
        let (_root, dir) = fixture.copy();
        std::fs::remove_file(fixture.segment_in(&dir, index)).unwrap();
        let case = format!("segment {index} missing");
        let damaged = fixture.touched(index, 0..len);
        let contents = fixture.check(&dir, &case, &fixture.before(index, 0), &damaged);
        assert!(contents.is_damaged(), "{case}");
        // Missing, and the manifest gone too: the gap in the numbering is the cut.
        std::fs::remove_file(dir.join(MANIFEST)).unwrap();
        let case = format!("segment {index} missing, no manifest");
        let first_or_last = index == 0 || index + 1 == fixture.segments.len();
        let contents = fixture.check(&dir, &case, &fixture.before(index, 0), &damaged);
        if !first_or_last {
            assert!(contents.is_damaged(), "{case}");
        }
    }
    // A segment copied under the next free number: its episodes appear twice.
    let all: Vec<u64> = (0..12).collect();
    for index in 0..fixture.segments.len() {
        let (_root, dir) = fixture.copy();
        let copy = dir
            .join(SEGMENTS)
            .join(format!("{:06}.seg", fixture.segments.len()));
        std::fs::copy(fixture.segment_in(&dir, index), &copy).unwrap();
        let case = format!("segment {index} duplicated");
        let contents = fixture.check(&dir, &case, &all, &[]);
        assert_eq!(contents.episodes.len(), 12, "{case}");
    }
}

/// Appends records as they are given (no checks), between two whole episodes.
fn crafted(records: Vec<ReplayRecord>) -> (tempfile::TempDir, ReplayContents) {
    let root = tempfile::tempdir().unwrap();
    let (mut writer, _) =
        ReplayWriter::open(root.path(), config(), &robot_config(), "test").unwrap();
    writer.append_episode(&episode(0, 3)).unwrap();
    for record in &records {
        writer.append(record).unwrap();
    }
    writer.append_episode(&episode(9, 4)).unwrap();
    writer.close().unwrap();
    let contents = read_replay(root.path()).unwrap();
    (root, contents)
}

fn records_of(episode: &Episode) -> Vec<ReplayRecord> {
    let mut out = vec![ReplayRecord::EpisodeStart(episode.start.clone())];
    out.extend(
        episode
            .transitions
            .iter()
            .map(|t| ReplayRecord::Transition(Box::new(t.clone()))),
    );
    out.push(ReplayRecord::EpisodeEnd(Box::new(episode.end.clone())));
    out
}

#[test]
fn crafted_records_that_are_well_formed_but_inconsistent_are_left_out_with_the_reason() {
    let bad = |edit: &dyn Fn(&mut Episode)| {
        let mut e = episode(5, 4);
        edit(&mut e);
        records_of(&e)
    };
    let observation_with = |image: Option<Image>| Observation {
        image,
        proprio: vec![0.0; 8],
        instruction: "reach the red target".into(),
    };
    let cases: Vec<(&str, Vec<ReplayRecord>, &str)> = vec![
        (
            "image of the wrong size",
            bad(&|e| {
                e.transitions[1].observation = observation_with(Some(Image::filled(8, 8, [0; 3])))
            }),
            "8x8 camera frame",
        ),
        (
            "image bytes that do not match its size",
            bad(&|e| {
                let mut image = Image::filled(16, 16, [0; 3]);
                image.rgb.truncate(100);
                e.transitions[2].observation = observation_with(Some(image));
            }),
            "100 bytes",
        ),
        (
            "observation without its frame",
            bad(&|e| e.end.final_observation.image = None),
            "without its camera frame",
        ),
        (
            "action of the wrong length",
            bad(&|e| e.transitions[0].action = Action(vec![0.1, 0.2, 0.3])),
            "commanded action of 3 entries",
        ),
        (
            "proprioception with NaN",
            bad(&|e| e.transitions[3].observation.proprio[2] = f32::NAN),
            "NaN",
        ),
        (
            "steps out of order",
            bad(&|e| e.transitions.swap(1, 2)),
            "where step 1 was due",
        ),
        (
            "a missing step",
            bad(&|e| {
                e.transitions.remove(2);
            }),
            "where step 2 was due",
        ),
        (
            "an end record whose count disagrees",
            bad(&|e| e.end.steps = 7),
            "counts 7 steps",
        ),
        (
            "a transition of another episode inside",
            bad(&|e| e.transitions[1].episode = 6),
            "transition of episode 6",
        ),
        (
            "an episode with zero transitions",
            bad(&|e| {
                e.transitions.clear();
                e.end.steps = 0;
            }),
            "no transitions",
        ),
        (
            "done before the end",
            bad(&|e| e.transitions[1].done = true),
            "marked done before",
        ),
        (
            "a duplicated episode id",
            records_of(&episode(0, 3)),
            "appears twice",
        ),
        (
            "an end without a start",
            bad(&|e| e.transitions.clear()).split_off(1),
            "without an episode start",
        ),
        (
            "a start without an end",
            bad(&|e| e.transitions.truncate(2))[..3].to_vec(),
            "no end record before episode 9 began",
        ),
    ];
    for (case, records, reason) in cases {
        let (_root, contents) = crafted(records);
        let ids: Vec<u64> = contents.episodes.iter().map(|e| e.start.episode).collect();
        assert!(ids.contains(&0) && ids.contains(&9), "{case}: {ids:?}");
        assert!(
            !ids.contains(&5),
            "{case}: the crafted episode was handed out"
        );
        assert_eq!(ids.len(), 2, "{case}: {ids:?}");
        let reasons: Vec<&str> = contents.damaged.iter().map(|d| d.reason.as_str()).collect();
        assert!(
            reasons.iter().any(|r| r.contains(reason)),
            "{case}: {reasons:?}"
        );
    }
}

#[test]
fn a_replay_of_another_spec_and_a_second_writer_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let (writer, _) =
        ReplayWriter::open(root.path(), config(), &robot_config(), "imago collect").unwrap();
    let error = ReplayWriter::open(root.path(), config(), &robot_config(), "imago daemon")
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("in use by") && error.contains("imago collect"),
        "{error}"
    );
    writer.close().unwrap();
    let other = RobotConfig::default();
    let error = ReplayWriter::open(root.path(), config(), &other, "test")
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("camera: 16x16 vs 48x48"), "{error}");
}

#[test]
fn retention_keeps_what_existed_and_the_newest_segment_and_rejects_tiny_limits() {
    let fixture = fixture();
    let (_root, dir) = fixture.copy();
    let tight = ReplayWriterConfig {
        segment_bytes: 8192,
        retention_bytes: Some(8192),
        retention_deletes_existing: false,
    };
    let (mut writer, _) = ReplayWriter::open(&dir, tight.clone(), &robot_config(), "test").unwrap();
    for id in 12..20 {
        writer.append_episode(&episode(id, 4)).unwrap();
    }
    let newest = writer.close().unwrap();
    assert!(newest > 0, "segments this run wrote were deleted");
    let ids: Vec<u64> = read_replay(&dir)
        .unwrap()
        .episodes
        .iter()
        .map(|e| e.start.episode)
        .collect();
    for old in 0..12 {
        assert!(
            ids.contains(&old),
            "retention deleted episode {old} of an earlier run"
        );
    }
    let manifest = Manifest::load(&dir).unwrap();
    let last = manifest.closed.last().unwrap();
    assert!(
        segment_files(&dir)
            .unwrap()
            .last()
            .unwrap()
            .ends_with(&last.file),
        "the newest closed segment is kept"
    );
    // Explicitly allowed, retention deletes old runs' segments too (never the newest).
    let (writer, _) = ReplayWriter::open(
        &dir,
        ReplayWriterConfig {
            retention_deletes_existing: true,
            ..tight
        },
        &robot_config(),
        "test",
    )
    .unwrap();
    let mut writer = writer;
    writer.append_episode(&episode(20, 4)).unwrap();
    writer.close().unwrap();
    let contents = read_replay(&dir).unwrap();
    assert!(!contents.episodes.iter().any(|e| e.start.episode == 0));
    assert!(contents.episodes.iter().any(|e| e.start.episode == 20));
    // A retention below one segment is a config error naming the key.
    let error = ReplayWriterConfig {
        segment_bytes: 8192,
        retention_bytes: Some(1000),
        retention_deletes_existing: false,
    }
    .validate()
    .unwrap_err();
    assert_eq!(error.key, "retention_bytes");
}

#[test]
fn check_and_repair_report_and_copy_every_whole_episode() {
    let fixture = fixture();
    let (root, dir) = fixture.copy();
    let segment = fixture.segment_in(&dir, 2);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[40] ^= 0x55;
    std::fs::write(&segment, &bytes).unwrap();
    let (contents, table) = check_replay(&dir).unwrap();
    assert!(table.contains("000002.seg"), "{table}");
    assert!(table.contains("damaged"), "{table}");
    let whole = contents.episodes.len();
    assert!(whole < 12 && !contents.damaged.is_empty());

    let out = root.path().join("repaired");
    // Never into the damaged replay or inside it.
    assert!(repair_replay(&dir, &dir, true).is_err());
    assert!(repair_replay(&dir, &dir.join("x"), true).is_err());
    let report = repair_replay(&dir, &out, false).unwrap();
    assert_eq!(report.episodes, whole);
    let repaired = read_replay(&out).unwrap();
    assert!(!repaired.is_damaged());
    assert_eq!(repaired.episodes, contents.episodes);
    assert_eq!(repaired.spec, Some(spec()));
    // A second repair into the same place is refused without --force.
    assert!(repair_replay(&dir, &out, false).is_err());
}
