//! Collecting episodes with a LeRobot policy, for fine-tuning it: the policy acts
//! through its own queues (one per episode), its commands stamped with the policy
//! version, the expert taking over or coaching as for any policy. A LeRobot policy
//! samples as it does in LeRobot (Diffusion's denoising noise, ACT's deterministic
//! chunks); `rollout.exploration` does not apply to it, it executes its chunks through
//! its own queues (`rollout.executed_per_plan` other than 1 is refused before
//! training: `LeRobotLearner::binding`), and its
//! commands carry no log-density (their importance weight is 1).

use burn::prelude::*;

use crate::act::camera::BatchCamera;
use crate::act::episode::TickCommand;
use crate::act::lerobot_driver::{LeRobotDriver, LeRobotEpisode};
use crate::act::lock_step::LockStep;
use crate::act::rollout::{PolicyCommands, RolloutConfig, collect_episodes};
use crate::robot::RobotConfig;
use crate::store::replay::{Episode, ReplayWriter};

/// Runs one episode per seed with the LeRobot policy of `driver` (version `version`)
/// on `robot`, the expert taking over or coaching as `rollout` says, and appends every
/// finished episode to `writer`. Returns the episodes in seed order.
pub fn collect_lerobot_episodes<B: Backend>(
    (driver, version): (&LeRobotDriver<B>, u64),
    robot: &RobotConfig,
    seeds: &[u64],
    rollout: &RolloutConfig,
    writer: &mut ReplayWriter,
) -> anyhow::Result<Vec<Episode>> {
    let mut commands = LeRobotCommands {
        driver,
        version,
        episodes: seeds.iter().map(|_| driver.new_episode()).collect(),
        next_tick: vec![0; seeds.len()],
    };
    collect_episodes(
        (&mut commands, version),
        (robot, &BatchCamera::PerRobot),
        seeds,
        rollout,
        writer,
    )
}

/// A LeRobot policy commanding its lanes' ticks, with each lane's queues.
struct LeRobotCommands<'d, B: Backend> {
    driver: &'d LeRobotDriver<B>,
    version: u64,
    episodes: Vec<LeRobotEpisode<B>>,
    /// Per lane, the tick the policy would command next if the expert had not stepped
    /// in: a lane the expert commanded in between starts its queues afresh (LeRobot's
    /// `reset`), so the policy neither replays a chunk planned before the expert moved
    /// the robot nor conditions on a history with holes in it.
    next_tick: Vec<u32>,
}

impl<B: Backend> PolicyCommands for LeRobotCommands<'_, B> {
    fn commands(
        &mut self,
        run: &LockStep<'_>,
        lanes: &[usize],
    ) -> anyhow::Result<Vec<TickCommand>> {
        for &i in lanes {
            let tick = run.lanes()[i].episode.steps();
            if tick != self.next_tick[i] {
                self.episodes[i] = self.driver.new_episode();
            }
            self.next_tick[i] = tick + 1;
        }
        let mut acting: Vec<(&mut LeRobotEpisode<B>, &imago_robots::Observation)> =
            Vec::with_capacity(lanes.len());
        for (i, episode) in self.episodes.iter_mut().enumerate() {
            if lanes.contains(&i) {
                acting.push((episode, run.lanes()[i].episode.observation()));
            }
        }
        let actions = self.driver.act(acting)?;
        Ok(actions
            .into_iter()
            .map(|action| TickCommand {
                action,
                sent: None,
                behaviour_log_prob: None,
                intervention: false,
                policy_version: self.version,
            })
            .collect())
    }
}
