//! Round trips, torn tails and corruption of the replay store.

use std::io::Write;
use std::path::Path;

use imago_robots::{Action, Robot};

use super::*;
use crate::robot::{RobotConfig, SimRobot};

fn open(dir: &Path, config: ReplayWriterConfig) -> (ReplayWriter, OpenReport) {
    ReplayWriter::open(dir, config, &RobotConfig::default(), "test").unwrap()
}

fn write_episodes(writer: &mut ReplayWriter, robot: &mut SimRobot, count: usize, steps: u32) {
    for _ in 0..count {
        let episode = writer.next_episode_id().unwrap();
        let mut observation = robot.reset(episode);
        writer
            .append(&ReplayRecord::EpisodeStart(EpisodeStart {
                episode,
                robot: "reacher2d".into(),
                seed: episode,
                instruction: observation.instruction.clone(),
            }))
            .unwrap();
        for step in 0..steps {
            let action = Action(vec![0.1 * step as f32, -0.2]);
            let outcome = robot.step(&action);
            writer
                .append(&ReplayRecord::Transition(Box::new(Transition {
                    episode,
                    step,
                    observation,
                    action,
                    executed: outcome.info.executed,
                    reward: outcome.reward,
                    done: step + 1 == steps,
                    success: false,
                    policy_version: 3,
                    intervention: step == 1,
                    behaviour_log_prob: (step == 0).then_some(-1.5),
                })))
                .unwrap();
            observation = outcome.observation;
        }
        writer
            .append(&ReplayRecord::EpisodeEnd(Box::new(EpisodeEnd {
                episode,
                steps,
                success: false,
                final_observation: observation,
            })))
            .unwrap();
        writer.flush().unwrap();
    }
}

fn only_segment(dir: &Path) -> std::path::PathBuf {
    let files = segment_files(dir).unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

#[test]
fn episodes_round_trip_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, report) = open(
        dir.path(),
        ReplayWriterConfig {
            segment_bytes: 40_000,
            ..ReplayWriterConfig::default()
        },
    );
    assert_eq!(report, OpenReport::default());
    let mut robot = RobotConfig::default().build().unwrap();
    write_episodes(&mut writer, &mut robot, 5, 4);
    writer.close().unwrap();
    assert!(
        segment_files(dir.path()).unwrap().len() > 1,
        "small segments roll over"
    );
    let manifest = Manifest::load(dir.path()).unwrap();
    assert_eq!(
        manifest.closed.iter().map(|s| s.records).sum::<u64>(),
        5 * 6
    );

    let contents = read_replay(dir.path()).unwrap();
    assert_eq!(contents.episodes.len(), 5);
    assert_eq!(contents.records, 30);
    assert!(contents.corruptions.is_empty());
    let first = &contents.episodes[0];
    assert_eq!(first.transitions.len(), 4);
    assert_eq!(first.transitions[2].action, Action(vec![0.2, -0.2]));
    assert!(first.transitions[1].intervention && !first.transitions[2].intervention);
    assert_eq!(first.transitions[0].policy_version, 3);
    assert_eq!(first.transitions[0].observation, robot.reset(0));
}

#[test]
fn torn_tail_is_reported_then_truncated_keeping_every_record_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, _) = open(dir.path(), ReplayWriterConfig::default());
    let mut robot = RobotConfig::default().build().unwrap();
    write_episodes(&mut writer, &mut robot, 3, 5);
    // A crash: the writer never closes its segment, and half a record reaches the disk.
    drop(writer);
    let segment = only_segment(dir.path());
    let intact = std::fs::metadata(&segment).unwrap().len();
    let half_record = &encode_frame(&[7u8; 100])[..60];
    std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap()
        .write_all(half_record)
        .unwrap();

    let contents = read_replay(dir.path()).unwrap();
    assert_eq!(
        contents.episodes.len(),
        3,
        "every complete record before the tear is kept"
    );
    // The newest segment, not in the manifest: a torn tail, not damage.
    assert!(
        contents.corruptions.is_empty(),
        "{:?}",
        contents.corruptions
    );
    assert!(!contents.is_damaged());

    let (mut writer, report) = open(dir.path(), ReplayWriterConfig::default());
    assert_eq!(report.recovered_records, 3 * 7);
    assert_eq!(report.truncated.len(), 1);
    assert_eq!(report.truncated[0].1, 60);
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), intact);
    write_episodes(&mut writer, &mut robot, 1, 2);
    writer.close().unwrap();

    let contents = read_replay(dir.path()).unwrap();
    assert!(contents.corruptions.is_empty());
    assert_eq!(contents.episodes.len(), 4);
    let ids: Vec<u64> = contents.episodes.iter().map(|e| e.start.episode).collect();
    assert_eq!(ids, vec![0, 1, 2, 3], "episode ids continue after recovery");
}

#[test]
fn a_flipped_byte_leaves_out_only_the_episode_it_hits() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, _) = open(dir.path(), ReplayWriterConfig::default());
    let mut robot = RobotConfig::default().build().unwrap();
    write_episodes(&mut writer, &mut robot, 4, 3);
    writer.close().unwrap();
    let segment = only_segment(dir.path());
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = bytes.len() * 5 / 8;
    bytes[middle] ^= 0xff;
    std::fs::write(&segment, &bytes).unwrap();
    let contents = read_replay(dir.path()).unwrap();
    assert_eq!(contents.corruptions.len(), 1);
    assert!(
        contents.corruptions[0].reason.contains("checksum"),
        "{:?}",
        contents.corruptions
    );
    // Episodes before and after the damaged record are read; the one it hits is not.
    let ids: Vec<u64> = contents.episodes.iter().map(|e| e.start.episode).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(contents.damaged.len(), 1);
    assert!(!ids.contains(&contents.damaged[0].episode));
    assert!(contents.damaged[0].reason.contains("cut by damage"));
}

#[test]
fn a_directory_without_segments_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let message = read_replay(dir.path()).unwrap_err().to_string();
    assert!(message.contains("not a replay directory"), "{message}");
    std::fs::create_dir_all(dir.path().join(SEGMENTS)).unwrap();
    std::fs::write(dir.path().join(MANIFEST), "{ nope").unwrap();
    let message = Manifest::load(dir.path()).unwrap_err().to_string();
    assert!(message.contains("malformed"), "{message}");
}

#[test]
fn retention_deletes_the_oldest_closed_segments_first() {
    let dir = tempfile::tempdir().unwrap();
    let config = ReplayWriterConfig {
        segment_bytes: 40_000,
        retention_bytes: Some(100_000),
        ..ReplayWriterConfig::default()
    };
    let (mut writer, _) = open(dir.path(), config);
    let mut robot = RobotConfig::default().build().unwrap();
    write_episodes(&mut writer, &mut robot, 12, 4);
    let before_close = writer.dropped_segments();
    let dropped = writer.close().unwrap();
    assert!(dropped > 0, "12 episodes of ~35 kB exceed 100 kB");
    assert!(dropped >= before_close, "close reports every deletion");
    let manifest = Manifest::load(dir.path()).unwrap();
    let kept: u64 = manifest.closed.iter().map(|s| s.bytes).sum();
    assert!(kept <= 100_000, "{kept}");
    // The files on disk are exactly the manifest's, and they are the newest ones.
    let on_disk: Vec<String> = segment_files(dir.path())
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let listed: Vec<String> = manifest.closed.iter().map(|s| s.file.clone()).collect();
    assert_eq!(on_disk, listed);
    assert!(!on_disk.contains(&"000000.seg".to_string()));
    let contents = read_replay(dir.path()).unwrap();
    let last = contents
        .episodes
        .last()
        .expect("the newest episode is kept");
    assert_eq!(last.start.episode, 11);
}

#[test]
fn an_abandoned_episode_is_unfinished_and_origins_follow_whole_episodes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, _) = open(dir.path(), ReplayWriterConfig::default());
    let mut robot = RobotConfig::default().build().unwrap();
    write_episodes(&mut writer, &mut robot, 2, 3);
    writer.flush().unwrap();
    let whole = read_replay(dir.path()).unwrap().episodes;
    // Episode 2 begins, takes one step and is given up (a remote robot went away).
    let mut abandoned = whole[0].clone();
    abandoned.start.episode = 2;
    writer
        .append(&ReplayRecord::EpisodeStart(abandoned.start.clone()))
        .unwrap();
    let mut first = abandoned.transitions[0].clone();
    first.episode = 2;
    writer
        .append(&ReplayRecord::Transition(Box::new(first)))
        .unwrap();
    writer
        .append(&ReplayRecord::EpisodeAbandoned(EpisodeAbandoned {
            episode: 2,
            steps: 1,
            reason: "link lost".into(),
        }))
        .unwrap();
    // Episode 3 is whole and came from an actor's episode 7.
    let mut stored = whole[1].clone();
    stored.start.episode = 3;
    stored.end.episode = 3;
    for t in &mut stored.transitions {
        t.episode = 3;
    }
    let origin = EpisodeOrigin {
        episode: 3,
        actor: "arm-1".into(),
        instance: 5,
        actor_episode: 7,
    };
    writer.append_episode_from(&stored, Some(&origin)).unwrap();
    writer.close().unwrap();
    let contents = read_replay(dir.path()).unwrap();
    assert!(!contents.is_damaged(), "{:?}", contents.damage_lines());
    assert_eq!(contents.unfinished_episodes, 1);
    let ids: Vec<u64> = contents.episodes.iter().map(|e| e.start.episode).collect();
    assert_eq!(ids, [0, 1, 3]);
    assert_eq!(contents.origins, [origin]);
}

#[test]
fn episode_ids_never_wrap_and_running_out_is_an_error_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut robot = RobotConfig::default().build().unwrap();
    let (mut writer, _) = open(dir.path(), ReplayWriterConfig::default());
    write_episodes(&mut writer, &mut robot, 1, 2);
    writer.close().unwrap();
    // A manifest whose next id is the last one: one more episode, then a clear error.
    let mut manifest = Manifest::load(dir.path()).unwrap();
    manifest.next_episode = LAST_EPISODE_ID;
    manifest.store(dir.path()).unwrap();
    let (mut writer, _) = open(dir.path(), ReplayWriterConfig::default());
    assert_eq!(writer.episode_ids_left(), 1);
    write_episodes(&mut writer, &mut robot, 1, 2);
    assert_eq!(writer.episode_ids_left(), 0);
    let error = format!("{:#}", writer.next_episode_id().unwrap_err());
    assert!(error.contains("episode ids are used up"), "{error}");
    writer.close().unwrap();
    let ids: Vec<u64> = read_replay(dir.path())
        .unwrap()
        .episodes
        .iter()
        .map(|e| e.start.episode)
        .collect();
    assert_eq!(ids, [0, LAST_EPISODE_ID]);
    // Reopened, the recorded last id keeps them used up.
    let (mut writer, _) = open(dir.path(), ReplayWriterConfig::default());
    assert!(writer.next_episode_id().is_err());
    writer.close().unwrap();
    // A manifest naming u64::MAX as the next id: used up, not wrapped to 0.
    let mut manifest = Manifest::load(dir.path()).unwrap();
    manifest.next_episode = u64::MAX;
    manifest.store(dir.path()).unwrap();
    let (mut writer, _) = open(dir.path(), ReplayWriterConfig::default());
    assert_eq!(writer.episode_ids_left(), 0);
    assert!(writer.next_episode_id().is_err());
    writer.close().unwrap();

    // A record naming u64::MAX itself (a crafted or foreign replay): used up too.
    let other = tempfile::tempdir().unwrap();
    let (mut writer, _) = open(other.path(), ReplayWriterConfig::default());
    let observation = robot.reset(0);
    writer
        .append(&ReplayRecord::EpisodeStart(EpisodeStart {
            episode: u64::MAX,
            robot: "reacher2d".into(),
            seed: 0,
            instruction: observation.instruction,
        }))
        .unwrap();
    assert!(writer.next_episode_id().is_err());
    writer.close().unwrap();
    let (mut writer, _) = open(other.path(), ReplayWriterConfig::default());
    assert!(writer.next_episode_id().is_err());
    writer.close().unwrap();
}
