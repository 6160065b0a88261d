//! `imago bench --what learner`: the daemon's learning step as its replay grows. The
//! step reads what was recorded since the last one into the learner's
//! [`ReplayWindow`] and trains on the window, so its time and the process's memory
//! should not grow with the replay once the window is full.

use std::path::Path;
use std::time::Instant;

use imago_policies::PolicyConfig;
use imago_worldmodel::{TransitionFamily, WorldModelConfig};
use serde::{Deserialize, Serialize};

use crate::act::collect::{CollectConfig, collect_demonstrations};
use crate::device::ResolvedDevice;
use crate::engine::ReplayWindow;
use crate::engine::learner_loop::LearnerConfig;
use crate::learn::finetune::Learner;
use crate::learn::world_model::WorldModelTrainConfig;
use crate::robot::RobotConfig;
use crate::stats::quantile;
use crate::store::replay::{Episode, ReplayWriter, ReplayWriterConfig, read_replay};

/// The learning step at one replay size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnerBenchRow {
    /// Whole episodes in the replay when the timed steps began.
    pub replay_episodes: usize,
    /// The window's capacity.
    pub window_episodes: usize,
    /// Reading the whole replay into a new window once (what `--resume` does), s.
    pub catch_up_seconds: f64,
    /// Median learning step (take in the new episodes, then learn), ms.
    pub step_p50_ms: f64,
    /// Slowest learning step, ms.
    pub step_max_ms: f64,
    /// The process's resident memory after the timed steps, MiB (Linux; 0 elsewhere).
    pub resident_mib: f64,
}

impl LearnerBenchRow {
    /// The rows as a table.
    pub fn table(rows: &[Self]) -> String {
        let mut out = format!(
            "{:>8} {:>7} {:>11} {:>9} {:>9} {:>12}\n",
            "replay", "window", "catch-up s", "p50 ms", "max ms", "resident MiB"
        );
        for r in rows {
            out.push_str(&format!(
                "{:>8} {:>7} {:>11.1} {:>9.0} {:>9.0} {:>12.0}\n",
                r.replay_episodes,
                r.window_episodes,
                r.catch_up_seconds,
                r.step_p50_ms,
                r.step_max_ms,
                r.resident_mib
            ));
        }
        out
    }
}

/// Grows a replay of `robot`'s episodes to each of `sizes` (ascending) and times
/// `steps` learning steps of the daemon's default learner with a window of `window`
/// episodes at each size; before every step, the daemon's `min_episodes` episodes are
/// appended, as the actor would record them. The episodes are copies (fresh ids, the learner's current
/// version) of a few recorded by the scripted expert, so that the replay grows fast.
pub fn bench_learner(
    device: &ResolvedDevice,
    robot: &RobotConfig,
    sizes: &[usize],
    window: usize,
    steps: usize,
) -> anyhow::Result<Vec<LearnerBenchRow>> {
    let scratch = tempfile::tempdir()?;
    let recorded = scratch.path().join("recorded");
    collect_demonstrations(
        &CollectConfig {
            robot: robot.clone(),
            episodes: 16,
            ..CollectConfig::default()
        },
        &recorded,
        false,
    )?;
    let originals = read_replay(&recorded)?.episodes;
    anyhow::ensure!(
        !originals.is_empty(),
        "the expert recorded no whole episode"
    );
    let spec = robot.spec();
    let config = LearnerConfig::default();
    let policy_config = PolicyConfig::for_robot(imago_policies::Architecture::Vla, &spec)?;
    let wm_config = WorldModelConfig::for_robot(&spec, TransitionFamily::Salt)?;
    let mut learner = Learner::new(
        (policy_config.init(&device.training), policy_config),
        1,
        (wm_config.init(&device.training), wm_config),
        WorldModelTrainConfig::default(),
        &config.finetune,
        spec.max_steps,
        device,
    );
    let replay = scratch.path().join("replay");
    let (mut writer, _) = ReplayWriter::open(
        &replay,
        ReplayWriterConfig::default(),
        robot,
        "imago bench (learner)",
    )?;
    let mut written = 0usize;
    let mut rows = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let missing = size.saturating_sub(written);
        append_copies(
            &mut writer,
            &originals,
            &mut written,
            missing,
            learner.version(),
        )?;
        let replay_episodes = written;
        let started = Instant::now();
        let mut episodes = ReplayWindow::new(&replay, window);
        episodes.refresh()?;
        let catch_up_seconds = started.elapsed().as_secs_f64();
        let mut times = Vec::with_capacity(steps);
        for _ in 0..steps {
            append_copies(
                &mut writer,
                &originals,
                &mut written,
                config.min_episodes,
                learner.version(),
            )?;
            let started = Instant::now();
            episodes.refresh()?;
            learner.learn(episodes.episodes(), &config.finetune, device)?;
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
        rows.push(LearnerBenchRow {
            replay_episodes,
            window_episodes: window,
            catch_up_seconds,
            step_p50_ms: quantile(&times, 0.5),
            step_max_ms: times.iter().copied().fold(0.0, f64::max),
            resident_mib: resident_mib(),
        });
    }
    writer.close()?;
    Ok(rows)
}

/// Appends `count` copies of `originals`, in turn, numbered from `written` on, as if
/// recorded by policy `version`.
fn append_copies(
    writer: &mut ReplayWriter,
    originals: &[Episode],
    written: &mut usize,
    count: usize,
    version: u64,
) -> anyhow::Result<()> {
    for _ in 0..count {
        let original = &originals[*written % originals.len()];
        writer.append_episode(&relabelled(original, *written as u64, version))?;
        *written += 1;
    }
    Ok(())
}

/// `episode` under a new id, as if recorded by policy `version`.
fn relabelled(episode: &Episode, id: u64, version: u64) -> Episode {
    let mut copy = episode.clone();
    copy.start.episode = id;
    copy.end.episode = id;
    for t in &mut copy.transitions {
        t.episode = id;
        t.policy_version = version;
    }
    copy
}

/// The process's resident set size in MiB, from `/proc/self/status` (0 where there is
/// none).
fn resident_mib() -> f64 {
    let status = std::fs::read_to_string(Path::new("/proc/self/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}
