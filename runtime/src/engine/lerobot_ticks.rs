//! The actor's commands from a LeRobot policy (ACT, Diffusion Policy): one call of the
//! policy's own `select_action` per tick, which executes its queue of actions and
//! plans a new chunk when the queue runs dry (LeRobot's `n_action_steps`, or ACT's
//! temporal ensemble), exactly as LeRobot runs it. The queues and the observation
//! history belong to one episode and one version: a version published mid-episode
//! acts from the next episode on, and after the scripted expert steps in the queues
//! start afresh (LeRobot's `reset`), so the policy never replays a chunk planned
//! before the expert moved the robot.

use std::sync::Arc;
use std::time::Duration;

use burn::Dispatch;
use imago_robots::Observation;

use super::chunking::{ChunkMode, ChunkingConfig, Command, CommandSettings};
use super::snapshot::{PolicySnapshot, SnapshotPolicy};
use crate::act::lerobot_driver::{LeRobotDriver, LeRobotEpisode};

/// A LeRobot policy's commands, tick by tick, with the episode's queues.
pub(crate) struct LeRobotTicks {
    /// The version acting in this episode, bound when it started.
    acting: Option<Arc<PolicySnapshot>>,
    /// The acting version's queues and history.
    episode: Option<LeRobotEpisode<Dispatch>>,
    /// The expert commanded since the policy last did: its queues start afresh.
    restart: bool,
    /// The robot's action limits (commands are handed on in their units).
    limits: Vec<f32>,
    added_latency: Duration,
}

impl LeRobotTicks {
    /// The source for a LeRobot policy driving a robot whose actions are bounded by
    /// `limits`. Only `every_tick` applies: the policy's config fixes how many actions
    /// of each chunk run before the next (`n_action_steps`).
    pub(crate) fn new(settings: &CommandSettings<'_>, limits: &[f32]) -> anyhow::Result<Self> {
        check_chunking(settings.chunking)?;
        Ok(Self {
            acting: None,
            episode: None,
            restart: false,
            limits: limits.to_vec(),
            added_latency: settings.added_latency,
        })
    }

    /// Starts an episode acted by `current`, with empty queues.
    pub(crate) fn start_episode(&mut self, current: &Arc<PolicySnapshot>) -> anyhow::Result<()> {
        self.episode = Some(driver(current)?.new_episode());
        self.acting = Some(Arc::clone(current));
        self.restart = false;
        Ok(())
    }

    /// The command for this tick, at which the robot is seen as `observation`.
    pub(crate) fn command(&mut self, observation: &Observation) -> anyhow::Result<Command> {
        let (Some(acting), Some(episode)) = (&self.acting, &mut self.episode) else {
            anyhow::bail!("a LeRobot policy was asked to act before its episode started");
        };
        let driver = driver(acting)?;
        if self.restart {
            *episode = driver.new_episode();
            self.restart = false;
        }
        let action = driver
            .act(vec![(episode, observation)])?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("the LeRobot policy gave no action"))?;
        if !self.added_latency.is_zero() {
            std::thread::sleep(self.added_latency);
        }
        let normalised: Vec<f32> = action
            .0
            .iter()
            .zip(self.limits.iter().cycle())
            .map(|(v, l)| v / l)
            .collect();
        Ok(Command {
            action: normalised.clone(),
            log_prob: None,
            plan: normalised,
            version: acting.version,
        })
    }

    /// The scripted expert commanded this tick: the policy's queues restart when it
    /// next acts.
    pub(crate) fn expert_took_over(&mut self) {
        self.restart = true;
    }
}

/// Checks that `chunking` is what a LeRobot policy runs: `every_tick` (its config's
/// `n_action_steps` fixes how many actions of each chunk run before the next).
pub(crate) fn check_chunking(chunking: &ChunkingConfig) -> anyhow::Result<()> {
    anyhow::ensure!(
        chunking.mode == ChunkMode::EveryTick,
        "[actor.chunking] mode = \"{}\" is for imago's policies; a LeRobot policy executes its chunks through its own queue (its config's n_action_steps): use mode = \"every_tick\"",
        chunking.mode.name()
    );
    Ok(())
}

/// The LeRobot policy of `snapshot`; an imago policy is an error (every version of a
/// run is of the kind it started with).
fn driver(snapshot: &PolicySnapshot) -> anyhow::Result<&LeRobotDriver<Dispatch>> {
    match &snapshot.policy {
        SnapshotPolicy::LeRobot(driver) => Ok(driver),
        SnapshotPolicy::Imago { .. } => anyhow::bail!(
            "version {} is an imago policy, but this run acts with a LeRobot policy",
            snapshot.version
        ),
    }
}
