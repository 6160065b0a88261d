//! What the daemon's learner trains on: the newest `capacity` whole episodes of the
//! replay, kept decoded in memory and topped up with what the writer appended since
//! the last look ([`ReplayFollower`]).
//!
//! Why a window: a learning step re-encodes every episode it is given (the world
//! model's encoder changes with every step, so yesterday's latents are stale), builds
//! its datasets from them and holds them decoded. Given the whole replay, the step's
//! time and the learner's memory grow with the replay; given the newest `capacity`
//! episodes they stop growing once the window is full. The newest are the ones the
//! staleness bound and the importance weights favour anyway; older episodes stay on
//! disk (for `imago train` and `--resume`), under the replay's retention limit.

use std::collections::VecDeque;
use std::path::Path;

use crate::store::replay::{Episode, ReplayFollower};

/// The newest whole episodes of a replay, at most `capacity` of them, oldest first.
pub struct ReplayWindow {
    follower: ReplayFollower,
    capacity: usize,
    episodes: VecDeque<Episode>,
}

impl ReplayWindow {
    /// An empty window of at most `capacity` (at least 1) episodes on the replay at
    /// `dir` (which need not exist yet).
    pub fn new(dir: &Path, capacity: usize) -> Self {
        Self {
            follower: ReplayFollower::new(dir),
            capacity: capacity.max(1),
            episodes: VecDeque::new(),
        }
    }

    /// Takes in the episodes completed since the last call (the oldest leave when the
    /// window is full) and warns on standard error about damage found in the replay;
    /// returns how many episodes came in.
    pub fn refresh(&mut self) -> anyhow::Result<usize> {
        let (episodes, capacity) = (&mut self.episodes, self.capacity);
        let added = self.follower.poll(|episode| {
            if episodes.len() == capacity {
                episodes.pop_front();
            }
            episodes.push_back(episode);
        })?;
        for line in self.follower.take_damage() {
            eprintln!("warning: replay: {line}");
        }
        Ok(added)
    }

    /// The episodes in the window, oldest first.
    pub fn episodes(&mut self) -> &[Episode] {
        self.episodes.make_contiguous()
    }

    /// The highest policy version of any transition recorded in the replay.
    pub fn max_policy_version(&self) -> u64 {
        self.follower.max_policy_version()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robot::RobotConfig;
    use crate::store::replay::{
        EpisodeEnd, EpisodeStart, ReplayWriter, ReplayWriterConfig, Transition,
    };
    use imago_robots::{Action, Observation, Robot};

    /// A one-step episode of the default robot.
    fn episode(id: u64) -> Episode {
        let mut robot = RobotConfig::default().build().unwrap();
        let observation: Observation = robot.reset(id);
        let action = Action(vec![0.0; robot.spec().action_dim()]);
        Episode {
            start: EpisodeStart {
                episode: id,
                robot: robot.spec().name.clone(),
                seed: id,
                instruction: observation.instruction.clone(),
            },
            transitions: vec![Transition {
                episode: id,
                step: 0,
                observation: observation.clone(),
                action: action.clone(),
                executed: action,
                reward: 0.0,
                done: true,
                success: false,
                policy_version: 1,
                intervention: false,
                behaviour_log_prob: None,
            }],
            end: EpisodeEnd {
                episode: id,
                steps: 1,
                success: false,
                final_observation: observation,
            },
        }
    }

    #[test]
    fn the_window_keeps_the_newest_episodes_up_to_its_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let mut window = ReplayWindow::new(dir.path(), 3);
        assert_eq!(window.refresh().unwrap(), 0);
        let (mut writer, _) = ReplayWriter::open(
            dir.path(),
            ReplayWriterConfig::default(),
            &RobotConfig::default(),
            "test",
        )
        .unwrap();
        let ids = |window: &mut ReplayWindow| -> Vec<u64> {
            window.episodes().iter().map(|e| e.start.episode).collect()
        };
        for id in 0..2 {
            writer.append_episode(&episode(id)).unwrap();
        }
        assert_eq!(window.refresh().unwrap(), 2);
        assert_eq!(ids(&mut window), vec![0, 1]);
        for id in 2..7 {
            writer.append_episode(&episode(id)).unwrap();
        }
        assert_eq!(window.refresh().unwrap(), 5);
        assert_eq!(ids(&mut window), vec![4, 5, 6]);
    }
}
