//! `imago replay check` and `imago replay repair`: what a replay holds, segment by
//! segment, and a clean copy of every whole episode.

use std::path::Path;

use super::RecordedRobot;
use super::reader::{ReplayContents, read_replay};
use super::training::replay_robot;
use super::writer::{ReplayWriter, ReplayWriterConfig};
use crate::store::atomic;
use crate::store::outputs::{Input, OutputKind, check_output};

/// Reads the replay at `dir` and returns its contents with a table of them: per
/// segment, records, bytes, whole and damaged episodes; then every damaged stretch
/// and every episode left out with the reason.
pub fn check_replay(dir: &Path) -> anyhow::Result<(ReplayContents, String)> {
    let contents = read_replay(dir)?;
    let mut text = format!("replay {}\n", dir.display());
    match &contents.spec {
        Some(spec) => text.push_str(&format!(
            "robot {}: camera {}, {} proprioception entries, {} action dimensions\n",
            spec.name,
            spec.camera
                .map_or("none".into(), |c| format!("{}x{}", c.width, c.height)),
            spec.proprio_dim(),
            spec.action_dim()
        )),
        None => text.push_str("robot spec: not recorded (a replay written before it was)\n"),
    }
    text.push_str(&format!(
        "{:<12} {:>9} {:>12} {:>14} {:>16}\n",
        "segment", "records", "bytes", "good episodes", "damaged episodes"
    ));
    for s in &contents.segments {
        text.push_str(&format!(
            "{:<12} {:>9} {:>12} {:>14} {:>16}\n",
            s.file, s.records, s.bytes, s.good_episodes, s.damaged_episodes
        ));
    }
    text.push_str(&format!(
        "{} whole episodes, {} damaged (left out), {} unfinished (in progress or cut short by a stop)\n",
        contents.episodes.len(),
        contents.damaged.len(),
        contents.unfinished_episodes
    ));
    for line in contents.damage_lines() {
        text.push_str(&format!("  {line}\n"));
    }
    Ok((contents, text))
}

/// What [`repair_replay`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairReport {
    /// Whole episodes copied.
    pub episodes: usize,
    /// Episodes left out as damaged.
    pub damaged: usize,
    /// Episodes left out as unfinished.
    pub unfinished: u64,
}

/// Writes every whole episode of the replay at `dir` into a new replay at `out`, with
/// the episodes' ids and the robot the replay records (for a replay that predates
/// recorded specs, the default reacher2d's if its episodes fit it). `out` must not be
/// `dir` or overlap it, and must be new (or, with `force`, hold something that is
/// replaced only once the copy is complete).
pub fn repair_replay(dir: &Path, out: &Path, force: bool) -> anyhow::Result<RepairReport> {
    let plan = check_output(
        "--out",
        out,
        OutputKind::Replay,
        &[Input {
            flag: "the replay",
            path: dir,
        }],
        force,
    )?;
    anyhow::ensure!(
        !plan.continues() || force,
        "--out {} holds a replay already; repair writes a new one (choose another --out, or --force to replace it)",
        out.display()
    );
    let contents = read_replay(dir)?;
    let (spec, _) = replay_robot(&contents, dir)?;
    let robot = RecordedRobot {
        spec,
        settings: contents.robot.clone(),
    };
    let staged = atomic::sibling_temp(out, "staged");
    let written = (|| -> anyhow::Result<()> {
        let (mut writer, _) = ReplayWriter::open(
            &staged,
            ReplayWriterConfig::default(),
            robot,
            "imago replay repair",
        )?;
        for episode in &contents.episodes {
            writer.append_episode(episode)?;
        }
        writer.close()?;
        Ok(())
    })();
    if let Err(error) = written.and_then(|()| atomic::replace_dir(&staged, out)) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(error);
    }
    Ok(RepairReport {
        episodes: contents.episodes.len(),
        damaged: contents.damaged.len(),
        unfinished: contents.unfinished_episodes,
    })
}
